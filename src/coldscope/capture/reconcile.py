"""Raw evidence of one run -> its reconciled timeline (pure: no process, no clock).

The runner collects raw evidence and nothing else; this module turns it into spans through the
evidence sources (``coldscope.capture.sources``) and reconciles them with
``coldscope.core.timeline.reconcile``. ``Store.timeline`` calls the same code on stored evidence, so
a stored run's timeline can always be rebuilt, and rebuilt the same. This module knows no
engine: what it needs of one comes in ``Context.engine``.

Raw evidence is a mapping by kind, as the store keeps it:
``log`` ([[seconds since launch, line], ...]), ``probe`` (the probe's event dicts),
``otel`` (received span dicts), ``launch`` ({"mono", "wall", "root_pid"}), ``imports``
({pid: the probe's import file text}, with ``profile --imports``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coldscope.capture.probe import StorageRead
from coldscope.capture.sources import SOURCES, Context
from coldscope.core.records import (
    ImportRecord,
    LogInfo,
    ProcessRecord,
    Run,
    Storage,
    timeline_fields,
)
from coldscope.core.timeline import Span, Timeline, reconcile


@dataclass
class Reconciled:
    """A timeline and what the sources learnt on the way (log facts, the probe's processes)."""

    timeline: Timeline
    log_info: LogInfo | None = None
    processes: list[ProcessRecord] = field(default_factory=list)
    imports: list[ImportRecord] = field(default_factory=list)
    weights_reads: list[StorageRead] = field(default_factory=list)


def build_timeline(evidence: Mapping[str, Any], ctx: Context) -> Reconciled:
    """Reconcile every source's spans into one timeline.

    ``ctx.ready_at`` must be known; ``ctx.has_gpu`` comes from the run's recorded environment,
    so the machine is not probed again.
    """
    if ctx.ready_at is None:
        raise ValueError("a timeline needs the time the engine became ready")
    spans: list[Span] = []
    facts: dict[str, Any] = {}
    for source in SOURCES.values():
        raw = evidence.get(source.kind)
        if raw:
            got = source.spans(raw, ctx)
            spans += got.spans
            facts.update(got.facts)
    log_info: LogInfo | None = facts.get("log_info")
    on_cpu = (log_info is not None and log_info.device == "cpu") or not ctx.has_gpu
    not_applicable = ctx.engine.not_applicable(compile_enabled=ctx.compile_enabled,
                                               on_cpu=on_cpu)
    tl = reconcile(spans, ctx.ready_at, not_applicable=not_applicable,
                   origin_unix=ctx.launch_wall)
    processes = list(facts.get("processes") or [])
    imports: list[ImportRecord] = []
    if evidence.get("imports"):
        from coldscope.capture.imports import import_records
        imports = import_records(evidence["imports"],
                                 roles={p.pid: p.role for p in processes},
                                 launch_mono=ctx.launch_mono, ready_at=ctx.ready_at,
                                 segments=tl.segments)
    return Reconciled(tl, log_info, processes, imports,
                      list(facts.get("weights_reads") or []))


def apply(run: Run, rec: Reconciled) -> Run:
    """``run`` carrying the reconciled timeline, the log's facts and the probe's processes."""
    update: dict[str, Any] = timeline_fields(rec.timeline)
    update["log_info"] = rec.log_info
    update["processes"] = rec.processes
    update["imports"] = rec.imports
    if rec.weights_reads:
        read = sum(r.bytes for r in rec.weights_reads)
        secs = sum(r.seconds for r in rec.weights_reads)
        update["storage"] = Storage.model_validate({
            **run.storage.model_dump(), "weights_read_bytes": read,
            "weights_read_s": round(secs, 6),
            "read_bandwidth_bps": read / secs if read and secs > 0 else None})
    # the probe's own time, summed over all processes: an upper bound of its overhead
    update["probe_cost_s"] = sum(p.probe_cost_s for p in rec.processes)
    if rec.log_info is not None and rec.log_info.version and not run.engine.version:
        update["engine"] = run.engine.evolve(version=rec.log_info.version)
    return run.evolve(**update)

