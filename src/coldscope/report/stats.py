"""The numbers every section reads the same way: a bucket's seconds in a run, a summary of
repetitions, a least-squares line, a geometric mean, and stages laid out on the launch clock.

Seconds are floats throughout; times inside one run are seconds since the engine's launch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coldscope.core.records import Run, Segment
from coldscope.core.stages import BUCKETS

#: The total of a run (launch to ready) as a pseudo-bucket in tables and ratios.
TOTAL = "time_to_ready"

#: Durations below this (seconds) are too small for a meaningful ratio.
RATIO_FLOOR_S = 0.005


@dataclass(frozen=True)
class Summary:
    """Known values of one quantity over repetitions: their count, mean, sample standard
    deviation (0 for one value), least and greatest."""

    n: int
    mean: float
    sd: float
    min: float
    max: float


def summary(values: Iterable[float | None]) -> Summary | None:
    """The ``Summary`` of the known values; None when none is known."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return None
    return Summary(n=len(known), mean=statistics.fmean(known),
                   sd=statistics.stdev(known) if len(known) > 1 else 0.0,
                   min=min(known), max=max(known))


def bucket_value(run: Run, bucket: str) -> float | None:
    """Seconds of one bucket of a run, or of the whole start-up for ``TOTAL``."""
    if bucket == TOTAL:
        return run.time_to_ready_s
    return run.stages.get(bucket)


@dataclass(frozen=True)
class Fit:
    """A least-squares line ``y = intercept + slope x`` over ``n`` points, with Pearson's
    ``r`` (None when y is constant)."""

    slope: float
    intercept: float
    r: float | None
    n: int


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> Fit | None:
    """The ``Fit`` of the points (the standard library's ``statistics``); None with fewer than
    two distinct x or three points, where r would say nothing."""
    n = len(xs)
    if n < 3 or len(set(xs)) < 2:
        return None
    slope, intercept = statistics.linear_regression(xs, ys)
    r = statistics.correlation(xs, ys) if len(set(ys)) > 1 else None
    return Fit(slope=slope, intercept=intercept, r=r, n=n)


def geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the known positive values; None when there are none."""
    known = [v for v in values if v is not None and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in known)) if known else None


def stacked(stages: Mapping[str, float | None]) -> tuple[Segment, ...]:
    """Stage seconds laid end to end from 0 in stage order, unknown and zero ones left out:
    a bar of means, or the timeline of data with durations only (the paper's logs)."""
    t = 0.0
    out = []
    for bucket in BUCKETS:
        v = stages.get(bucket)
        if v:
            out.append(Segment(bucket=bucket, start=t, end=t + v))
            t += v
    return tuple(out)


def drawn_segments(run: Run) -> tuple[Segment, ...]:
    """The stage segments a run's charts draw: its reconciled segments; for a run with no
    segments and no evidence intervals (durations only), its stages laid end to end, which is
    not a measured timeline and is drawn as such."""
    if run.segments or run.intervals:
        return tuple(run.segments)
    return stacked(run.stages)
