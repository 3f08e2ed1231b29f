"""Export a stored run as a Chrome trace (opens in Perfetto / chrome://tracing) or as OTLP
spans to a user's collector. Functions of a ``coldscope.core.records.Run``, plus, optionally, the
run's import slices (``capture.imports.import_intervals`` of its stored ``imports`` evidence,
which the run record keeps only as per-package sums); nothing here reads the store.

Both exports show the same shape: the reconciled stages (which tile launch → ready), then each
engine process with the evidence it gave, every sub-step nested under its stage. Evidence is
first made *nestable*: per process, a stage or sub-step seen by several sources is kept from
the best source only (``timeline.SOURCE_RANK`` order), and overlapping intervals of one name are
merged, so no stage appears twice or inside itself. What still overlaps without nesting (two
sub-steps running at once in one process) goes on a second track of that process.

Import slices (``import torch``, source ``probe imports``, category ``import``) go into the
process of their pid and are packed with its evidence, after it at equal times, so they nest
under ``bootstrap`` and its sub-steps, and nested imports under their importer; an import that
crosses a sub-step's end goes on a second track like any other crossing slice.
"""

from __future__ import annotations

import datetime as dt
import http.client
import os
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from coldscope.capture.imports import ImportInterval
from coldscope.core.records import Run
from coldscope.core.timeline import SOURCE_RANK
from coldscope.engines import role_order
from coldscope.util.errors import ColdscopeError

_US = 1e6
_EPS = 1e-9

#: Linux pids are below 2**22 (``pid_max``'s ceiling): synthetic pids and tids (for tracks with
#: no real process, or a process whose pid is unknown) start above it and never collide.
SYNTHETIC_BASE = 1 << 22


#: The source and the Chrome trace category of import slices (filter on ``cat`` in Perfetto).
IMPORT_SOURCE = "probe imports"
IMPORT_CATEGORY = "import"

#: Per pid, the import slices of a run (``capture.imports.import_intervals``).
Imports = Mapping[int, Sequence[ImportInterval]]


@dataclass
class Slice:
    """One nestable piece of evidence in one process."""

    name: str
    start: float
    end: float
    source: str
    also: set[str] = field(default_factory=set)  # other sources that saw it, for the record
    children: list[Slice] = field(default_factory=list)
    imported: ImportInterval | None = None  # set on an import slice

    @property
    def depth(self) -> int:
        """Nesting rank among slices of equal start and end: stages, sub-steps, then imports
        by their import depth."""
        if self.imported is not None:
            return 1_000 + self.imported.depth
        return self.name.count("/")

    @property
    def category(self) -> str:
        """The Chrome trace category: the source, or ``import`` for an import slice."""
        return IMPORT_CATEGORY if self.imported is not None else self.source


@dataclass
class Process:
    """A process of the engine and its evidence, packed into tracks that nest."""

    role: str
    pid: int | None
    tracks: list[list[Slice]] = field(default_factory=list)

    @property
    def start(self) -> float:
        return min(s.start for t in self.tracks for s in t)

    @property
    def end(self) -> float:
        return max(s.end for t in self.tracks for s in t)


def merge_evidence(intervals: Iterable[tuple[float, float, str]],
           ) -> list[tuple[float, float, str, set[str]]]:
    """The intervals of one name in one process, made nestable: the best source's only
    (``timeline.SOURCE_RANK`` order), overlapping ones merged into their union; with the other
    sources that saw it. (The report's Gantt draws the same.)"""
    items = list(intervals)
    best = min((src for *_, src in items), key=lambda s: SOURCE_RANK.index(s)
               if s in SOURCE_RANK else len(SOURCE_RANK))
    others = {src for *_, src in items if src != best}
    out: list[tuple[float, float]] = []
    for start, end, _ in sorted(i for i in items if i[2] == best):
        if out and start < out[-1][1] - _EPS:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return [(start, end, best, others) for start, end in out]


def processes(run: Run, *, imports: Imports | None = None) -> list[Process]:
    """The run's evidence by process, deduplicated and packed into nesting tracks: a slice goes
    on the first track where it fits inside the slice open at its start (or where nothing is
    open), stages before their sub-steps before imports; a slice that would cross another opens
    a new track. ``imports``' slices join the process of their pid (a pid with no evidence of
    its own becomes a process of the role ``run.processes`` gives it, else ``helper``)."""
    by_proc: dict[tuple[str, int | None], dict[str, list[tuple[float, float, str]]]] = {}
    for iv in run.intervals:
        names = by_proc.setdefault((iv.process or "engine", iv.pid), {})
        names.setdefault(iv.name, []).append((iv.start, iv.end, iv.source))
    imported: dict[tuple[str, int | None], list[Slice]] = {}
    roles = {p.pid: p.role for p in run.processes}
    for import_pid, ivs in (imports or {}).items():
        key = next((k for k in by_proc if k[1] == import_pid), None)
        if key is None:
            key = (roles.get(import_pid, "helper"), import_pid)
            by_proc[key] = {}
        imported.setdefault(key, []).extend(
            Slice(iv.name, iv.start, iv.end, IMPORT_SOURCE, imported=iv) for iv in ivs)
    out = []
    for (role, pid), names in by_proc.items():
        slices = [Slice(name, s, e, src, also)
                  for name, items in names.items() for s, e, src, also in merge_evidence(items)]
        slices += imported.get((role, pid), [])
        slices.sort(key=lambda s: (s.start, -s.end, s.depth))
        proc = Process(role, pid)
        stacks: list[list[Slice]] = []
        for sl in slices:
            for track, stack in zip(proc.tracks, stacks, strict=True):
                while stack and stack[-1].end <= sl.start + _EPS:
                    stack.pop()
                if not stack or (stack[-1].start <= sl.start + _EPS
                                 and sl.end <= stack[-1].end + _EPS):
                    if stack:
                        stack[-1].children.append(sl)
                    track.append(sl)
                    stack.append(sl)
                    break
            else:
                proc.tracks.append([sl])
                stacks.append([sl])
        out.append(proc)
    order = role_order()  # the order their tracks are shown in
    out.sort(key=lambda p: (order.index(p.role) if p.role in order else len(order), p.start))
    return out


def reconciled_segments(run: Run) -> list[tuple[str, float, float]]:
    """The reconciled cut of [0, ready], touching segments of one bucket joined."""
    out: list[tuple[str, float, float]] = []
    for seg in run.segments:
        if out and out[-1][0] == seg.bucket and abs(out[-1][2] - seg.start) <= _EPS:
            out[-1] = (seg.bucket, out[-1][1], seg.end)
        else:
            out.append((seg.bucket, seg.start, seg.end))
    return out


def _label(proc: Process) -> str:
    return f"{proc.role} (pid {proc.pid})" if proc.pid is not None else f"{proc.role} (pid unknown)"


# -- Chrome trace ------------------------------------------------------------------------------


def chrome_trace(run: Run, *, imports: Imports | None = None) -> dict[str, Any]:
    """Trace Event Format: a track of the reconciled stages (they tile [0, ready] exactly) with
    the ready and first-token markers, one process per engine process under its real pid (a
    synthetic one only when the pid is unknown) whose threads hold its stages with their
    sub-steps nested inside (and ``imports``' slices, category ``import``, nested in those),
    thread and process names, and CPU use as counters."""
    events: list[dict[str, Any]] = []
    synthetic = iter(range(SYNTHETIC_BASE, SYNTHETIC_BASE + 1_000_000))

    def meta(pid: int, name: str, sort: int, tid: int | None = None,
             thread: str | None = None) -> None:
        if tid is None:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": name}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                           "args": {"sort_index": sort}})
        else:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": thread}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": sort}})

    stages_pid = next(synthetic)
    meta(stages_pid, "coldscope: stages (reconciled)", 0)
    meta(stages_pid, "", 0, tid=stages_pid, thread="reconciled stages")
    for bucket, start, end in reconciled_segments(run):
        events.append({"ph": "X", "name": bucket, "cat": "stage", "pid": stages_pid,
                       "tid": stages_pid, "ts": start * _US, "dur": (end - start) * _US,
                       "args": {"seconds": round(end - start, 6),
                                "source": run.sources.get(bucket, "")}})
    for name, t in (("ready", run.time_to_ready_s), ("first token", run.first_token_s)):
        if t is not None:
            events.append({"ph": "i", "name": name, "cat": "marker", "s": "g",
                           "pid": stages_pid, "tid": stages_pid, "ts": t * _US,
                           "args": {"seconds": round(t, 6)}})
    for k, proc in enumerate(processes(run, imports=imports), start=1):
        pid = proc.pid if proc.pid is not None else next(synthetic)
        meta(pid, _label(proc), k)
        for j, track in enumerate(proc.tracks):
            tid = pid if j == 0 else next(synthetic)
            meta(pid, "", j, tid=tid, thread=f"{proc.role}: start-up" if j == 0 else
                 f"{proc.role}: overlapping ({j + 1})")
            for sl in track:
                args: dict[str, Any] = {"source": sl.source,
                                        "seconds": round(sl.end - sl.start, 6)}
                if sl.also:
                    args["also_seen_by"] = ", ".join(sorted(sl.also))
                if sl.imported is not None:
                    args.update(self_seconds=round(sl.imported.self_s, 6),
                                depth=sl.imported.depth, importer=sl.imported.parent)
                events.append({"ph": "X", "name": sl.name, "cat": sl.category, "pid": pid,
                               "tid": tid, "ts": sl.start * _US,
                               "dur": (sl.end - sl.start) * _US, "args": args})
    if run.cpu is not None and run.cpu.t:
        pid = next(synthetic)
        meta(pid, "CPU utilisation (percent per core)", 10_000)
        for t, cores in zip(run.cpu.t, run.cpu.per_core, strict=False):
            events.append({"ph": "C", "name": "cpu", "pid": pid, "tid": 0, "ts": t * _US,
                           "args": {f"core{i}": v for i, v in enumerate(cores)}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run": run.id, "cache": run.cache, "model": run.model.path,
                          "engine": run.engine.name, "engine_version": run.engine.version}}


# -- OTLP --------------------------------------------------------------------------------------


def resource_attributes(run: Run) -> dict[str, Any]:
    """What the collector files the spans under: the tool, the run, model, engine and host
    (OpenTelemetry semantic-convention keys where one exists)."""
    env = run.environment
    attrs: dict[str, Any] = {
        "service.name": "coldscope", "service.version": run.tool.version,
        "coldscope.run_id": run.id, "coldscope.cache": run.cache,
        "coldscope.model.name": run.model.name, "coldscope.model.path": run.model.path,
        "coldscope.engine.name": run.engine.name,
        "coldscope.engine.version": run.engine.version,
        "host.name": env.hostname, "os.description": env.os,
        "host.cpu.model.name": env.cpu_model, "host.cpu.cores": env.cpu_cores,
        "host.gpu.count": len(env.gpus),
        "host.gpu.name": ", ".join(g.name or "gpu" for g in env.gpus) or None,
    }
    return {k: v for k, v in attrs.items() if v is not None}


def _origin(run: Run) -> float:
    if run.origin_unix is not None:
        return run.origin_unix
    if run.started_at:
        try:
            return dt.datetime.fromisoformat(run.started_at).timestamp()
        except (ValueError, OverflowError, OSError):  # a log's time without its year
            pass
    return 0.0


def otlp_request(run: Run, *, imports: Imports | None = None) -> bytes:
    """The run as an OTLP ExportTraceServiceRequest. Span tree: ``coldscope.startup`` (launch
    → ready) → the reconciled stages, and → one span per engine process → its stages → their
    sub-steps → ``imports``' slices (the same nesting as the Chrome trace's threads; an import
    span has ``coldscope.kind`` ``import``, and one the Chrome trace puts on an overlap track
    is the child of the innermost span that holds it, e.g. ``bootstrap``)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import (
        AnyValue,
        InstrumentationScope,
        KeyValue,
    )
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    origin = _origin(run)
    trace_id = os.urandom(16)

    def kv(k: str, v: Any) -> KeyValue:
        if isinstance(v, bool):
            return KeyValue(key=k, value=AnyValue(bool_value=v))
        if isinstance(v, int):
            return KeyValue(key=k, value=AnyValue(int_value=v))
        if isinstance(v, float):
            return KeyValue(key=k, value=AnyValue(double_value=v))
        return KeyValue(key=k, value=AnyValue(string_value=str(v)))

    spans: list[Span] = []

    def span(name: str, start: float, end: float, parent: bytes, attrs: dict[str, Any]) -> bytes:
        sid = os.urandom(8)
        spans.append(Span(trace_id=trace_id, span_id=sid, parent_span_id=parent, name=name,
                          start_time_unix_nano=int((origin + start) * 1e9),
                          end_time_unix_nano=int((origin + end) * 1e9),
                          attributes=[kv(k, v) for k, v in attrs.items() if v is not None]))
        return sid

    ttr = run.time_to_ready_s or max((s.end for s in run.segments), default=0.0)
    root = span("coldscope.startup", 0.0, ttr, b"",
                {"coldscope.run_id": run.id, "coldscope.cache": run.cache,
                 "coldscope.first_token_s": run.first_token_s})
    for bucket, start, end in reconciled_segments(run):
        span(bucket, start, end, root, {"coldscope.kind": "stage",
                                        "coldscope.source": run.sources.get(bucket)})

    def emit(sl: Slice, parent: bytes, proc: Process) -> None:
        attrs: dict[str, Any] = {
            "coldscope.kind": "evidence", "coldscope.source": sl.source,
            "coldscope.process": proc.role, "process.pid": proc.pid}
        if sl.imported is not None:
            attrs.update({"coldscope.kind": IMPORT_CATEGORY,
                          "coldscope.import.module": sl.imported.module,
                          "coldscope.import.self_s": round(sl.imported.self_s, 6),
                          "coldscope.import.depth": sl.imported.depth,
                          "coldscope.import.importer": sl.imported.parent or None})
        sid = span(sl.name, sl.start, sl.end, parent, attrs)
        emitted.append((sl, sid))
        for child in sl.children:
            emit(child, sid, proc)

    for proc in processes(run, imports=imports):
        pspan = span(f"process {_label(proc)}", proc.start, proc.end, root,
                     {"coldscope.kind": "process", "coldscope.process": proc.role,
                      "process.pid": proc.pid})
        nested = {id(c) for t in proc.tracks for s in t for c in s.children}
        emitted: list[tuple[Slice, bytes]] = []
        crossing: list[Slice] = []
        for j, track in enumerate(proc.tracks):
            for sl in track:
                if id(sl) in nested:
                    continue
                if j and sl.imported is not None:
                    crossing.append(sl)
                else:
                    emit(sl, pspan, proc)
        # an import on an overlap track (it crosses a sub-step's end): under the innermost
        # span that holds it (bootstrap), not directly under the process
        for sl in sorted(crossing, key=lambda s: (s.start, -s.end, s.depth)):
            holders = [(s.end - s.start, -k, sid) for k, (s, sid) in enumerate(emitted)
                       if s.start <= sl.start + _EPS and sl.end <= s.end + _EPS]
            emit(sl, min(holders)[2] if holders else pspan, proc)
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[kv(k, v) for k, v in resource_attributes(run).items()]),
        scope_spans=[ScopeSpans(scope=InstrumentationScope(name="coldscope"), spans=spans)],
    )])
    data: bytes = req.SerializeToString()
    return data


class Sent(NamedTuple):
    """What a collector answered: HTTP status, and how many spans were in the request."""

    status: int
    spans: int

    def message(self, endpoint: str) -> str:
        return f"sent {self.spans} spans to {endpoint} (HTTP {self.status})"


def send_otlp(run: Run, endpoint: str, timeout: float = 10.0, *,
              imports: Imports | None = None) -> Sent:
    """POST the run's spans (``otlp_request``) to an OTLP/HTTP collector
    (``http://host:4318/v1/traces``); a one-line ``ColdscopeError`` when the collector cannot be
    reached or refuses them."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ColdscopeError(f"not an OTLP/HTTP endpoint URL: {endpoint!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    body = otlp_request(run, imports=imports)
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path or "/v1/traces", body,
                     {"Content-Type": "application/x-protobuf"})
        status = conn.getresponse().status
    except OSError as exc:
        raise ColdscopeError(f"cannot send spans to {endpoint}: {exc}") from None
    finally:
        conn.close()
    if status >= 300:
        raise ColdscopeError(f"collector at {endpoint} answered HTTP {status}")
    return Sent(status, n)
