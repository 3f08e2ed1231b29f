"""Read what the in-process probe (``coldscope/probe/sitecustomize.py``) recorded, and turn it
into timeline spans.

The probe writes ``probe-<pid>.jsonl`` per Python process of the engine. Times there are
``time.monotonic()`` (one system-wide clock on Linux); the runner gives the monotonic time of
the launch, so every span here is in seconds since launch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Required, TypedDict

from coldscope.core.records import ProcessRecord
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TOKENIZER,
    TORCH_COMPILE,
)
from coldscope.core.timeline import Span

PROBE_DIR = Path(__file__).resolve().parent.parent / "probe"
"""The directory to put first on the engine's PYTHONPATH (it holds ``sitecustomize.py``)."""

ROOT_ROLE = "api_server"
"""The role of the process coldscope launched (the server users reach); its imports, up to
its first hooked call, are ``bootstrap/api_server_imports``."""
HELPER = "helper"
"""The role of a process no ``ProcessRole`` claims (a subprocess, a compiler worker)."""


class ProbeEvent(TypedDict, total=False):
    """One line of ``probe-<pid>.jsonl`` as ``json.loads`` reads it back: what the probe's
    ``_event`` wrote (``pid`` and ``mono`` are checked on reading, so always there)."""

    ev: str
    """``process``, ``begin``, ``end`` or ``exit``."""
    name: str
    """A hook's event name (a stage, a stage/substep, or ``mark:<what>``)."""
    mono: Required[float]
    wall: float
    pid: Required[int]
    cost: float
    """Seconds the probe had spent in this process so far."""
    io_read: int | None
    """Bytes read from storage so far (``begin``/``end``); None where the kernel does not say."""
    argv: list[str]
    ppid: int
    start_mono: float | None
    """The process's start from ``/proc`` (another clock: see ``probe_spans``)."""
    executable: str


@dataclass(frozen=True)
class ProcessRole:
    """A kind of engine process, as the engine's adapter tells the probe to recognise it
    (``Engine.process_roles``): a process with an event named in ``marks`` has role ``name``;
    its start (spawn, interpreter, imports) runs until the first begin of a ``main`` event and
    is the sub-step ``start_substep``; from the first begin of ``init`` to the first model
    loading is ``init_substep``. Checked in the adapter's order: the first role that claims a
    process wins."""

    name: str
    marks: tuple[str, ...]
    main: tuple[str, ...] = ()
    start_substep: str | None = None
    init: str | None = None
    init_substep: str | None = None


@dataclass
class ProbedProcess:
    """One Python process of the engine as the probe saw it."""

    pid: int
    ppid: int | None
    argv: list[str]
    loaded: float  # monotonic time the probe loaded (after interpreter start-up)
    start_proc: float | None  # start time from /proc (another clock; see ``probe_spans``)
    events: list[ProbeEvent] = field(default_factory=list)
    role: str = HELPER

    @property
    def cost(self) -> float:
        """Seconds the probe itself spent in this process, as of its last event."""
        return max((e.get("cost") or 0.0 for e in self.events), default=0.0)

    def first(self, ev: str, name: str) -> float | None:
        return next((e["mono"] for e in self.events if e["ev"] == ev and e["name"] == name), None)

    def calls(self, name: str) -> list[tuple[ProbeEvent, ProbeEvent]]:
        """Matched begin/end events of ``name`` (outermost calls, in order)."""
        out: list[tuple[ProbeEvent, ProbeEvent]] = []
        begin = None
        for e in self.events:
            if e.get("name") != name:
                continue
            if e.get("ev") == "begin":
                begin = e
            elif e.get("ev") == "end" and begin is not None:
                out.append((begin, e))
                begin = None
        return out

    def intervals(self, name: str) -> list[tuple[float, float]]:
        """Matched begin/end times of ``name`` (outermost calls, in order)."""
        return [(a["mono"], b["mono"]) for a, b in self.calls(name)]


@dataclass(frozen=True)
class StorageRead:
    """What one process read from storage during one hooked call (``name``): bytes, from the
    probe's ``io_read`` at its begin and end, and the call's seconds."""

    pid: int
    role: str
    name: str
    bytes: int
    seconds: float


def storage_reads(processes: list[ProbedProcess], name: str) -> list[StorageRead]:
    """Per process, the storage reads of each outermost ``name`` call whose begin and end
    both carry ``io_read`` (a kernel without ``/proc/PID/io`` gives none)."""
    out = []
    for p in processes:
        for begin, end in p.calls(name):
            a, b = begin.get("io_read"), end.get("io_read")
            if isinstance(a, int) and isinstance(b, int) and b >= a:
                out.append(StorageRead(p.pid, p.role, name, b - a,
                                       float(end["mono"]) - float(begin["mono"])))
    return out


def read_probe_events(directory: Path) -> list[ProbeEvent]:
    """Every event the probe wrote in ``directory`` (all processes, file order); torn or
    foreign lines are skipped. This raw list is what the store keeps as ``probe`` evidence."""
    events: list[ProbeEvent] = []
    for path in sorted(Path(directory).glob("probe-*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
                int(e["pid"])
                float(e["mono"])
            except (ValueError, KeyError, TypeError):
                continue
            events.append(e)
    return events


def processes_from_events(events: Sequence[ProbeEvent],
                          roles: Sequence[ProcessRole] = ()) -> list[ProbedProcess]:
    """Group raw probe events into processes and give each its role: the first of ``roles``
    (the engine adapter's) whose marks it has; else the root role for a process without a
    parent that inspected the model; else ``helper``."""
    processes: dict[int, ProbedProcess] = {}
    for e in events:
        try:
            pid = int(e["pid"])
            float(e["mono"])
        except (ValueError, KeyError, TypeError):
            continue
        if e.get("ev") == "process":
            processes[pid] = ProbedProcess(
                pid=pid, ppid=e.get("ppid"), argv=list(e.get("argv") or []),
                loaded=e["mono"], start_proc=e.get("start_mono"),
                events=processes[pid].events if pid in processes else [],
            )
            processes[pid].events.append(e)
        else:
            processes.setdefault(
                pid, ProbedProcess(pid=pid, ppid=None, argv=[], loaded=e["mono"],
                                   start_proc=None)
            ).events.append(e)
    for p in processes.values():
        p.events.sort(key=lambda e: e["mono"])
        names = {e.get("name") for e in p.events}
        role = next((r for r in roles if names.intersection(r.marks)), None)
        if role is not None:
            p.role = role.name
        elif "bootstrap/model_inspect" in names and p.ppid is None:
            p.role = ROOT_ROLE
    return sorted(processes.values(), key=lambda p: p.loaded)


def probe_spans(
    processes: list[ProbedProcess],
    *,
    launch_mono: float,
    root_pid: int,
    ready_at: float | None,
    compile_enabled: bool,
    roles: Sequence[ProcessRole] = (),
) -> list[Span]:
    """Spans (seconds since launch) from probe data.

    ``bootstrap`` runs from launch to the first model-loading call: everything the engine does
    before it touches the model (interpreter start, imports, config and model-info resolution,
    spawning the engine core and workers), with sub-steps for each process's start and imports.
    The process start times in ``/proc`` use the kernel's boot clock in 10 ms ticks, not
    ``time.monotonic()``; they are put on the monotonic clock by the root process, whose launch
    time the runner knows exactly. ``roles`` (the engine adapter's, as given to
    ``processes_from_events``) name each child process's start and init sub-steps.
    """
    if not processes:
        return []
    by_pid = {p.pid: p for p in processes}
    root = by_pid.get(root_pid)
    if root is not None:
        root.role = ROOT_ROLE
    offset = 0.0
    if root is not None and root.start_proc is not None:
        offset = launch_mono - root.start_proc

    def rel(t: float) -> float:
        return t - launch_mono

    def started(p: ProbedProcess) -> float:
        if p is root:
            return 0.0
        if p.start_proc is not None:
            return min(rel(p.start_proc + offset), rel(p.loaded))
        return rel(p.loaded)

    spans: list[Span] = []

    def add(name: str, a: float, b: float, p: ProbedProcess) -> None:
        if b > a:
            spans.append(Span(name, a, b, "probe", p.role, p.pid))

    hooked = {
        "bootstrap/engine_config", "bootstrap/model_inspect", TOKENIZER, MODEL_LOADING,
        "model_loading/init_model", "model_loading/weights", KV_CACHE_PROFILING,
        "kv_cache_profiling/allocate", CUDA_GRAPH_CAPTURE,
    }
    loading_starts: list[float] = []
    engine_ready: float | None = None
    for p in processes:
        for name in sorted(hooked):
            for a, b in p.intervals(name):
                add(name, rel(a), rel(b), p)
                if name == MODEL_LOADING:
                    loading_starts.append(rel(a))
        for a, b in p.intervals("mark:warmup"):
            add(f"{TORCH_COMPILE}/warmup" if compile_enabled else f"{KV_CACHE_PROFILING}/warmup",
                rel(a), rel(b), p)
            warmup_end = rel(b)
            # After the warm-up, the rest of KV-cache initialisation (allocation) follows.
            for ka, kb in _engine_kv_intervals(processes):
                if ka <= b <= kb:
                    add(f"{KV_CACHE_PROFILING}/allocate", warmup_end, rel(kb), p)
        for _, b in p.intervals("mark:initialize_kv_caches"):
            engine_ready = rel(b) if engine_ready is None else max(engine_ready, rel(b))

    first_loading = min(loading_starts) if loading_starts else None
    bootstrap_end = first_loading
    if bootstrap_end is None:
        bootstrap_end = ready_at if ready_at is not None else None
    if bootstrap_end is not None and root is not None:
        add(BOOTSTRAP, 0.0, bootstrap_end, root)
        add("bootstrap/interpreter", 0.0, rel(root.loaded), root)
        first_hook = next((e["mono"] for e in root.events if e["ev"] == "begin"), None)
        if first_hook is not None:
            add("bootstrap/api_server_imports", rel(root.loaded), rel(first_hook), root)
        by_name = {r.name: r for r in roles}
        for p in processes:
            role = by_name.get(p.role) if p is not root else None
            if role is None:
                continue
            main = next((t for t in (p.first("begin", m) for m in role.main) if t is not None),
                        None)
            if main is not None and role.start_substep:
                add(role.start_substep, started(p), rel(main), p)
            init = p.first("begin", role.init) if role.init else None
            if init is not None and role.init_substep and first_loading is not None:
                add(role.init_substep, rel(init), first_loading, p)
    if engine_ready is not None and ready_at is not None and ready_at > engine_ready:
        add(SERVER_READY, engine_ready, ready_at, root or processes[0])
    return spans


def _engine_kv_intervals(processes: list[ProbedProcess]) -> list[tuple[float, float]]:
    out = []
    for p in processes:
        out.extend(p.intervals("mark:initialize_kv_caches"))
    return out


def process_table(processes: list[ProbedProcess], launch_mono: float) -> list[ProcessRecord]:
    """One record per probed process: pid, parent, role, start (s since launch), argv."""
    return [
        ProcessRecord(
            pid=p.pid,
            ppid=p.ppid,
            role=p.role,
            probe_loaded_s=p.loaded - launch_mono,
            probe_cost_s=round(p.cost, 6),
            argv=p.argv,
        )
        for p in processes
    ]
