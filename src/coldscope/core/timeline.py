"""The start-up timeline: evidence from any source reconciled into the six stages.

Pure data and pure functions. Times are seconds since the engine's launch (the runner's
``Popen``), as floats; a timeline also keeps the wall-clock origin (Unix seconds) so that it can
be exported to trace viewers. This module imports nothing else from coldscope but ``stages``.

Reconciliation: every evidence source (log lines, the engine's OpenTelemetry spans, the probe)
is first turned into ``Span`` objects naming a stage or a sub-step. Wall time from launch to
ready is then cut at every span boundary; each elementary segment goes to the most specific
stage that covers it (``PRIORITY``), segments no span covers go to ``unattributed``. The stage
durations are the lengths of their segments, so the buckets sum to time to ready exactly, and
time that two processes spend in parallel is counted once, on the stage that explains it best.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coldscope.core.stages import (
    BOOTSTRAP,
    BUCKETS,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    STAGES,
    TOKENIZER,
    TORCH_COMPILE,
    UNATTRIBUTED,
    stage_of,
)

#: Evidence sources, best first: when two sources time the same stage, the better one wins.
SOURCE_RANK: tuple[str, ...] = ("span", "probe", "log")

#: When spans of different stages overlap, the segment goes to the first stage listed here.
#: Specific work (compile, loading) is carved out of the broad stages that contain it.
PRIORITY: tuple[str, ...] = (
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    TORCH_COMPILE,
    MODEL_LOADING,
    TOKENIZER,
    SERVER_READY,
    BOOTSTRAP,
)


@dataclass(frozen=True, slots=True)  # (slots: a long log gives one per duration line)
class Span:
    """One piece of evidence: ``name`` (a stage or ``stage/substep``) ran from ``start`` to
    ``end`` (seconds since launch) in ``process``, as seen by ``source``."""

    name: str
    start: float
    end: float
    source: str
    process: str = "engine"
    pid: int | None = None

    @property
    def stage(self) -> str:
        return stage_of(self.name)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "process": self.process,
            "pid": self.pid,
            "start": self.start,
            "end": self.end,
            "source": self.source,
        }


@dataclass(frozen=True)
class Timeline:
    """A reconciled start-up.

    ``stages`` maps every bucket to seconds, or None when the stage is unknown (no source could
    see it) or not applicable (``not_applicable``, e.g. CUDA-graph capture on CPU).
    ``substeps`` are measured durations of sub-steps (union of their spans); they nest under a
    stage but need not sum to it. ``sources`` names the source that backed each stage.
    """

    time_to_ready: float | None
    stages: dict[str, float | None]
    substeps: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    spans: tuple[Span, ...] = ()
    not_applicable: frozenset[str] = frozenset()
    origin_unix: float | None = None
    segments: tuple[tuple[str, float, float], ...] = ()
    """The cut of [0, time_to_ready] into buckets: (bucket, start, end), in time order."""

    def total(self) -> float:
        """Sum of the known buckets (equals ``time_to_ready`` for a profiled run)."""
        return sum(v for v in self.stages.values() if v is not None)


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of closed intervals (overlaps counted once)."""
    total = 0.0
    current: tuple[float, float] | None = None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = (start, end)
        else:
            current = (current[0], max(current[1], end))
    if current is not None:
        total += current[1] - current[0]
    return total


def subtract(window: tuple[float, float],
             cuts: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of ``window`` that no interval in ``cuts`` covers, in time order (a stage's
    span less the phases inside it that are counted elsewhere)."""
    start, end = window
    pieces, cur = [], start
    for a, b in sorted(cuts):
        if b <= cur or a >= end:
            continue
        if a > cur:
            pieces.append((cur, a))
        cur = max(cur, b)
    if cur < end:
        pieces.append((cur, end))
    return pieces


def reconcile(
    spans: Iterable[Span],
    time_to_ready: float,
    *,
    not_applicable: Iterable[str] = (),
    origin_unix: float | None = None,
) -> Timeline:
    """Cut [0, time_to_ready] into buckets from the evidence ``spans``.

    Spans are clipped to [0, time_to_ready]. A stage with no span is unknown (None), unless it is
    in ``not_applicable`` (also None, but reported as such). For each stage, only spans of its
    best source (``SOURCE_RANK`` order) are used, so a coarse log duration never widens an
    exact span.
    """
    if time_to_ready < 0:
        raise ValueError("time_to_ready must be >= 0")
    not_applicable = frozenset(not_applicable)
    spans = tuple(s for s in spans if s.end > s.start)
    clipped = [
        (max(0.0, s.start), min(time_to_ready, s.end), s)
        for s in spans
        if s.end > 0 and s.start < time_to_ready
    ]

    best_source: dict[str, str] = {}
    for _, _, s in clipped:
        cur = best_source.get(s.stage)
        if cur is None or SOURCE_RANK.index(s.source) < SOURCE_RANK.index(cur):
            best_source[s.stage] = s.source
    chosen = [(a, b, s) for a, b, s in clipped if best_source[s.stage] == s.source]

    cuts = sorted({0.0, time_to_ready, *(a for a, _, _ in chosen), *(b for _, b, _ in chosen)})
    rank = {stage: i for i, stage in enumerate(PRIORITY)}
    durations = dict.fromkeys(BUCKETS, 0.0)
    segments: list[list[Any]] = []
    # One sweep over the cuts: the spans covering [left, right] are those open at ``left``
    # (opened at or before it, not closed), counted per stage; a stage outside PRIORITY loses
    # to every stage in it and, among its like, to the one whose span comes first in
    # ``chosen`` (as ``min`` over the covering spans in that order would give).
    by_start = sorted(range(len(chosen)), key=lambda k: chosen[k][0])
    by_end = sorted(range(len(chosen)), key=lambda k: chosen[k][1])
    opened = closed = 0
    open_ranked: dict[str, int] = {}
    open_other: dict[str, set[int]] = {}
    for left, right in zip(cuts, cuts[1:], strict=False):
        while opened < len(by_start) and chosen[by_start[opened]][0] <= left:
            k = by_start[opened]
            stage = chosen[k][2].stage
            if stage in rank:
                open_ranked[stage] = open_ranked.get(stage, 0) + 1
            else:
                open_other.setdefault(stage, set()).add(k)
            opened += 1
        while closed < len(by_end) and chosen[by_end[closed]][1] <= left:
            k = by_end[closed]
            stage = chosen[k][2].stage
            if stage in rank:
                open_ranked[stage] -= 1
                if not open_ranked[stage]:
                    del open_ranked[stage]
            else:
                open_other[stage].discard(k)
                if not open_other[stage]:
                    del open_other[stage]
            closed += 1
        if right <= left:
            continue
        if open_ranked:
            bucket = min(open_ranked, key=rank.__getitem__)
        elif open_other:
            bucket = min(open_other, key=lambda st: min(open_other[st]))
        else:
            bucket = UNATTRIBUTED
        durations[bucket] += right - left
        if segments and segments[-1][0] == bucket and segments[-1][2] == left:
            segments[-1][2] = right
        else:
            segments.append([bucket, left, right])

    stages: dict[str, float | None] = {}
    for bucket in BUCKETS:
        if bucket in (UNATTRIBUTED,) or bucket in best_source:
            stages[bucket] = durations[bucket]
        else:
            stages[bucket] = None
    # Exactness: float sums of many segments can drift by ulps; push the drift into unattributed.
    drift = time_to_ready - sum(v for v in stages.values() if v is not None)
    stages[UNATTRIBUTED] = max(0.0, durations[UNATTRIBUTED] + drift)

    substeps: dict[str, float] = {}
    by_name: dict[str, list[tuple[float, float]]] = {}
    for a, b, s in chosen:
        if "/" in s.name:
            by_name.setdefault(s.name, []).append((a, b))
    for name, ivs in sorted(by_name.items()):
        substeps[name] = union_length(ivs)

    return Timeline(
        time_to_ready=time_to_ready,
        stages=stages,
        substeps=substeps,
        sources={st: best_source[st] for st in BUCKETS if st in best_source},
        spans=tuple(s for _, _, s in chosen),
        not_applicable=not_applicable,
        origin_unix=origin_unix,
        segments=tuple((b, lo, hi) for b, lo, hi in segments),
    )


def from_durations(
    durations: Mapping[str, float | None],
    *,
    source: str,
    time_to_ready: float | None = None,
    substeps: Mapping[str, float] | None = None,
    not_applicable: Iterable[str] = (),
) -> Timeline:
    """A timeline from per-stage durations alone (a saved log with no arrival times).

    Stages missing from ``durations`` are unknown (None), never zero. When ``time_to_ready`` is
    known, ``unattributed`` is what the known stages leave of it (never below zero); otherwise
    unattributed is unknown too.
    """
    stages: dict[str, float | None] = {b: None for b in BUCKETS}
    for name, value in durations.items():
        if name not in BUCKETS:
            raise ValueError(f"unknown stage {name!r}")
        stages[name] = value
    if time_to_ready is not None:
        known = sum(v for k, v in stages.items() if v is not None and k != UNATTRIBUTED)
        stages[UNATTRIBUTED] = max(0.0, time_to_ready - known)
    return Timeline(
        time_to_ready=time_to_ready,
        stages=stages,
        substeps=dict(substeps or {}),
        sources={k: source for k, v in stages.items() if v is not None and k in STAGES},
        not_applicable=frozenset(not_applicable),
    )


def timeline_dict(tl: Timeline) -> dict[str, Any]:
    """The JSON shape other tools read (``stages``, ``substeps``, ``sources``, ``intervals``)."""
    return {
        "time_to_ready_s": tl.time_to_ready,
        "origin_unix": tl.origin_unix,
        "stages": {b: tl.stages.get(b) for b in BUCKETS},
        "not_applicable": sorted(tl.not_applicable),
        "substeps": dict(tl.substeps),
        "sources": dict(tl.sources),
        "intervals": [s.to_dict() for s in tl.spans],
        "segments": [{"bucket": b, "start": lo, "end": hi} for b, lo, hi in tl.segments],
    }
