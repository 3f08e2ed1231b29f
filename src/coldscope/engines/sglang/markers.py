"""The lines that mark SGLang's log, as data: what the adapter declares to the registry
(``SGLang.log_marker``, ``SGLang.boundary_marker``) and what its log rules (``log``) build on.

Kept apart from ``log`` so that the registry, telling a log's engine from its first lines,
loads no rule table: a module of compiled patterns only, whose import runs no code of its own.
"""

from __future__ import annotations

import re

#: SGLang's own line: ``[2026-06-08 01:57:04] msg`` or ``[2025-01-01 12:00:00 DP0 TP1] msg``.
STAMP = re.compile(
    r"\[(?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)"
    r"(?P<tags>(?: [A-Z]{1,4}\d+)*)\] ?(?P<msg>.*)"
)

#: Lines that say the start-up failed (the scheduler, the launcher, uvicorn).
FATAL_RX = (r"Scheduler hit an exception|Initialization failed|scheduler is dead|"
            r"Received sigquit from a child|Application startup failed|"
            r"Exception in run_scheduler_process|Error in launch_server|"
            r"\bscheduler_\d+ \(pid=\d+\) crashed with exit code")

#: A line SGLang may claim as its own holds its stamp (``STAMP``) or its name (the banner's
#: ``SGLang version``): a head without one is not SGLang's, decided without the rules.
LOG_MARKER = re.compile(r"glang|" + STAMP.pattern)

#: A line that can open, finish or fail a start-up in a followed log (what
#: ``SGLang.startup_boundary`` answers for): every other line is none of these.
BOUNDARY_MARKER = re.compile(r"ready to roll|server_args=ServerArgs\(|startup complete|"
                             + FATAL_RX)
