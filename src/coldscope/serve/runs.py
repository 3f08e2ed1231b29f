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


def build_run(s: Startup) -> Any:
    """The run record of a finished start-up (a ``coldscope.records.Run``)."""
    try:
        from coldscope.capture.logs import run_from_log
    except ImportError:  # until the typed Run lands: today's record, as `parse` builds it
        return _legacy_record(s)
    run = run_from_log(s.lines, name=s.replica, origin="log")
    update: dict[str, Any] = {"id": run_id(s.replica, s.lines), "started_at": _started_at(s),
                              "log_path": s.path}
    if s.status != "ok":
        update.update(status="failed", reason=s.reason)
    if not run.findings:
        from coldscope.findings import findings_for_run

        update["findings"] = findings_for_run(run, log=s.lines)
    return run.model_copy(update=update)


_MODEL = re.compile(r"\bmodel='(?P<m>[^']+)'")


def _legacy_record(s: Startup) -> dict[str, Any]:
    from coldscope.capture.logs import log_timeline, parse_vllm_log
    from coldscope.timeline import timeline_dict

    ev = parse_vllm_log(s.lines)
    model = next((m.group("m") for line in s.lines if (m := _MODEL.search(line))), None)
    record = {
        "id": run_id(s.replica, s.lines), "status": "ok" if s.status == "ok" else "failed",
        "reason": s.reason, "cache": None,  # a log alone cannot tell what caches existed before
        "first_token_s": None, "environment": {}, "origin": "log", "started_at": _started_at(s),
        "label": s.replica, "log_path": s.path,
        "model": {"path": model, "name": model.rstrip("/").rsplit("/", 1)[-1] if model else None},
        "engine": {"name": "vllm", "version": ev.version, "family": ev.family,
                   "device": ev.device, "enforce_eager": ev.enforce_eager},
        **timeline_dict(log_timeline(ev)),
    }
    from coldscope.findings import findings_for_run, findings_json

    record["findings"] = findings_json(findings_for_run(record, log=s.lines))
    return record


def as_json(run: Any) -> dict[str, Any]:
    """A run as ``show --json`` prints it."""
    return run.to_json() if hasattr(run, "to_json") else dict(run)
