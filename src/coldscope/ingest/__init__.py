"""Runs made from evidence: a profiled run finished from its raw evidence, or a saved log read
alone (``assemble``), and many logs at once (``logfiles``)."""
