"""A watched start-up (its log lines) -> a stored run record.

The record is what ``coldscope parse`` makes of the same lines (the same log adapters), with
``origin: log``, the replica as its name, the watcher's verdict (``ok`` or ``failed`` with the
reason), and the id of what the start-up is (``store.logruns.startup_id``): restarting
``serve`` on the same logs, or ``parse --save`` of them, finds the same ids and stores
nothing twice.
"""

from __future__ import annotations

from typing import Any

from coldscope.core.records import Run
from coldscope.serve.watcher import Startup


def run_id(replica: str, lines: list[str]) -> str:
    """Stable id of one start-up: ``store.logruns.startup_id`` of its lines, the id
    ``parse --save`` gives the same start-up (the replica is its label, not part of its id)."""
    from coldscope.store.logruns import startup_id
    return startup_id(lines)


def build_run(s: Startup) -> Run:
    """The run record of a finished start-up: ``run_from_log`` of its lines (the adapters of
    ``parse``, findings included), with the watcher's id, verdict and file.

    Its ``started_at`` is the log's own, as ``parse --save`` gives it (the first dated line), so
    a fleet's old logs that ``serve`` reads when it starts keep their time; the watcher's clock
    when it read the start-up's first line stands in for the file's modification time (the
    year of a month-day stamp; the time of a log with no dated line)."""
    from coldscope.core.records import ModelRef
    from coldscope.ingest.assemble import run_from_log
    from coldscope.util.errors import ColdscopeError
    try:
        run = run_from_log(s.lines, name=s.replica, origin="log", mtime=s.started_wall)
    except ColdscopeError:  # what no engine reads: a launch that died at argument parsing
        if s.run is None:
            raise
        run = s.run  # the watcher's reading, ``parse``'s (``ingest.logfiles``)
    update: dict[str, Any] = {"id": run_id(s.replica, s.lines), "log_path": s.path,
                              "label": s.replica}
    if s.status != "ok" and s.reason is not None:  # the watcher's verdict (a timeout, a bound)
        update.update(status="failed", reason=s.reason)
    if run.model.path is None and run.model.name is None:
        from coldscope.engines import log_facts
        known = log_facts(s.lines, engine=run.engine.name)  # the model the engine echoed
        path = known[1].model if known is not None else None
        if path:
            update["model"] = ModelRef(path=path, name=path.rstrip("/").rsplit("/", 1)[-1])
    return run.evolve(**update)
