"""A watched start-up (its log lines) -> a stored run record.

The record is what ``coldscope parse`` makes of the same lines (the same log adapters), with
``origin: log``, the replica as its name, the watcher's verdict (``ok`` or ``failed`` with the
reason), and an id that is a hash of the replica and the lines: restarting ``serve`` on the
same logs finds the same ids and stores nothing twice.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from coldscope.core.records import Run
from coldscope.serve.watcher import Startup

_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def run_id(replica: str, lines: list[str]) -> str:
    """Stable id of one start-up: ``log-<replica>-<12 hex of sha1(replica, lines)>``."""
    h = hashlib.sha1(replica.encode("utf-8", "replace"))
    for line in lines:
        h.update(b"\n")
        h.update(line.encode("utf-8", "replace"))
    slug = _SLUG.sub("-", replica).strip("-")[:40] or "replica"
    return f"log-{slug}-{h.hexdigest()[:12]}"


def _started_at(s: Startup) -> str:
    return datetime.fromtimestamp(s.started_wall, UTC).isoformat(timespec="seconds")


def build_run(s: Startup) -> Run:
    """The run record of a finished start-up: ``run_from_log`` of its lines (the adapters of
    ``parse``, findings included), with the watcher's id, verdict, time and file."""
    from coldscope.core.records import ModelRef
    from coldscope.ingest.assemble import run_from_log
    run = run_from_log(s.lines, name=s.replica, origin="log", started_at=_started_at(s))
    update: dict[str, Any] = {"id": run_id(s.replica, s.lines), "log_path": s.path,
                              "label": s.replica}
    if s.status != "ok":
        update.update(status="failed", reason=s.reason)
    if run.model.path is None and run.model.name is None:
        from coldscope.engines import log_facts
        known = log_facts(s.lines, engine=run.engine.name)  # the model the engine echoed
        path = known[1].model if known is not None else None
        if path:
            update["model"] = ModelRef(path=path, name=path.rstrip("/").rsplit("/", 1)[-1])
    return run.evolve(**update)
