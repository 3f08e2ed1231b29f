"""Spans for the profiler (section 4 of vLLM's log grammar): the evidence of
``grammar.parse_vllm_log`` on the caller's clock (each line's arrival time), for a live run."""


from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from coldscope.core.stages import (
    BOOTSTRAP,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TORCH_COMPILE,
)
from coldscope.core.timeline import Span, subtract
from coldscope.engines.vllm.grammar import (
    ANCHORED,
    APP_STARTUP_COMPLETE,
    COMPILE_SUBSTEPS,
    ENGINE_CORE_START,
    KV_CACHE_END,
    KV_CACHE_SIZED,
    MODEL_LOADING_END,
    MODEL_LOADING_START,
    SERVER_START,
    WARMUP_COMPILE,
    WARMUP_EAGER,
    WARMUP_END,
    WARMUP_START,
    LogEvidence,
    LogRecord,
)

# --------------------------------------------------------------------------------------------
# Spans for the profiler (arrival times known)




class _ByPid:
    """Records in line order, per process, looked up by line number (bisection)."""

    def __init__(self, records: Iterable[LogRecord]) -> None:
        self.records: dict[int | None, list[LogRecord]] = {}
        for r in records:
            self.records.setdefault(r.pid, []).append(r)
        self.lines = {pid: [r.line_no for r in rs] for pid, rs in self.records.items()}

    def next_after(self, after: int, pid: int | None) -> LogRecord | None:
        """``_next(records, after, pid)``: the process's first record after line ``after``."""
        lines = self.lines.get(pid)
        if lines is None:
            return None
        at = bisect.bisect_right(lines, after)
        return self.records[pid][at] if at < len(lines) else None


class _Union:
    """Intervals merged where they overlap or touch, for ``timeline.subtract``: what a window
    less them is does not change, and only those that reach into a window are handed over
    (bisection), so that many windows cost their own pieces, not all intervals each."""

    def __init__(self, intervals: Iterable[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for a, b in sorted(intervals):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def within(self, start: float, end: float) -> list[tuple[float, float]]:
        lo = bisect.bisect_right(self.ends, start)  # the first ending after the start
        hi = bisect.bisect_left(self.starts, end)   # those starting before the end
        return list(zip(self.starts[lo:hi], self.ends[lo:hi], strict=True))


def _next(records: Sequence[LogRecord], after: int, pid: int | None = None,
          any_pid: bool = False) -> LogRecord | None:
    for r in records:
        if r.line_no > after and (any_pid or r.pid == pid):
            return r
    return None


def log_spans(ev: LogEvidence, arrival: Sequence[float]) -> list[Span]:
    """Spans (source ``"log"``) from the log, given each line's arrival time.

    ``arrival[i]`` is when line ``i`` arrived, in seconds on the caller's clock (normally since
    the engine's launch, so that 0 is the launch). Duration lines become
    ``[arrival - duration, arrival]``; marker pairs become spans where the pair brackets one
    stage: the compile warm-up (torch_compile, or kv_cache_profiling/warmup when compile is
    off), model loading when no total is printed, the ``init engine`` window less compilation
    (kv_cache_profiling; CUDA-graph capture inside it wins in reconciliation), launch to model
    loading (bootstrap), and engine initialised to "Application startup complete"
    (server_ready).
    """
    if ev.records and len(arrival) <= max(r.line_no for r in ev.records):
        raise ValueError(f"arrival has {len(arrival)} times, the log has {ev.line_count} lines")

    def at(r: LogRecord) -> float:
        return float(arrival[r.line_no])

    def span(name: str, start: float, end: float, r: LogRecord | None = None,
             process: str | None = None) -> Span:
        proc = process or (r.process if r is not None and r.process else "engine")
        return Span(name, start, end, "log", proc, r.pid if r is not None else None)

    spans: list[Span] = []
    for r in ev.records:
        if r.name in ANCHORED and r.duration is not None:
            spans.append(span(r.name, at(r) - r.duration, at(r), r))

    # Compilation as one phase per process, from the first compile step to the last.
    by_pid: dict[int | None, list[Span]] = {}
    for s in spans:
        if s.name in COMPILE_SUBSTEPS:
            by_pid.setdefault(s.pid, []).append(s)
    for group in by_pid.values():
        spans.append(
            Span(
                TORCH_COMPILE,
                min(s.start for s in group),
                max(s.end for s in group),
                "log",
                group[0].process,
                group[0].pid,
            )
        )

    # CPU warm-up: where torch.compile runs on the CPU backends.
    ends = _ByPid(ev.named(WARMUP_END))
    for start in ev.named(WARMUP_START):
        end = ends.next_after(start.line_no, start.pid)
        if end is not None and at(end) >= at(start):
            name = WARMUP_EAGER if ev.compile_enabled is False else WARMUP_COMPILE
            spans.append(span(name, at(start), at(end), start))

    compiling = _Union((s.start, s.end) for s in spans if s.stage == TORCH_COMPILE)

    # init engine: profiling, KV-cache allocation, (capture), less the compilation inside it.
    init = ev.named(KV_CACHE_END)
    init_start = None
    for r in init:
        if r.duration is None:
            continue
        init_start = at(r) - r.duration if init_start is None else init_start
        window = (at(r) - r.duration, at(r))
        for a, b in subtract(window, compiling.within(*window)):
            spans.append(span(KV_CACHE_PROFILING, a, b, r))
    if not init:  # V0: weights loaded -> KV cache sized
        sized = ev.named(KV_CACHE_SIZED)
        loaded = ev.named(MODEL_LOADING_END)
        if sized and loaded and at(sized[0]) >= at(loaded[-1]):
            spans.append(span(KV_CACHE_PROFILING, at(loaded[-1]), at(sized[0]), sized[0]))

    # Model loading from markers when no line prints its total.
    if not ev.named(MODEL_LOADING):
        last_loaded: dict[int | None, LogRecord] = {}  # each process's last such line
        for r in ev.named(MODEL_LOADING_END):
            last_loaded[r.pid] = r
        for start in ev.named(MODEL_LOADING_START):
            end_t = None
            if init_start is not None and init_start > at(start):
                end_t = init_start
            else:
                last = last_loaded.get(start.pid)
                end_t = at(last) if last is not None and last.line_no > start.line_no else None
            if end_t is not None and end_t >= at(start):
                spans.append(span(MODEL_LOADING, at(start), end_t, start))

    # Bootstrap: launch to the first model-loading step (imports, config, process spawn).
    starts = ev.named(MODEL_LOADING_START)
    if starts:
        first_load = at(starts[0])
        engine = ev.named(ENGINE_CORE_START)
        served = any(r.process == "api_server" for r in ev.records)
        if engine and 0.0 < at(engine[0]) < first_load:
            frontend = "api_server" if served else "engine"
            spans.append(span(f"{BOOTSTRAP}/frontend", 0.0, at(engine[0]), process=frontend))
            spans.append(span(f"{BOOTSTRAP}/engine", at(engine[0]), first_load, engine[0]))
        elif first_load > 0:
            spans.append(span(BOOTSTRAP, 0.0, first_load))

    # Server ready: engine initialised -> the HTTP app has started.
    server = ev.named(SERVER_START)
    if server:
        done = _next(ev.named(APP_STARTUP_COMPLETE), server[0].line_no, any_pid=True)
        end_t = at(done) if done is not None else at(server[0])
        begin = at(init[-1]) if init and at(init[-1]) <= end_t else at(server[0])
        if end_t > begin:
            spans.append(span(SERVER_READY, begin, end_t, process="api_server"))

    return sorted(spans, key=lambda s: (s.start, s.end, s.name))
