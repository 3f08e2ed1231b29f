"""Utilities every layer may use: the one error type (``errors``), safe file input and output
(``safeio``), the YAML/JSON reader (``config_file``) and terminal-safe text (``terminal``)."""
