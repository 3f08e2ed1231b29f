"""What leaves coldscope as files or on the wire: stored runs as a flat table (``table``, CSV or
Parquet) and a run as a Chrome trace or OTLP spans (``trace``)."""
