"""Where runs are kept: the SQLite store (``db.Store``) and the one way stored runs are chosen
(``selection``)."""
