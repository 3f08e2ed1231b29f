"""What every layer speaks: the stage vocabulary (``stages``), the pure reconciliation of evidence
into a timeline (``timeline``) and the typed, frozen records (``records``)."""
