"""Is b faster than a? The one comparison core of coldscope: plain functions of data.

Two sets of start-ups in (``Run`` records, or per-run bucket dicts), one typed, frozen
``Comparison`` out: for every stage, every sub-step and time to ready, each side's mean, the
difference ``delta = b - a`` in seconds with a 95 % interval (``low``, ``high``) and a
``verdict``: ``faster`` (the whole interval below 0), ``slower`` (above 0) or ``unresolved``.
``coldscope compare`` prints it; tune and ``releases`` are meant to build on it.

Example::

    from coldscope.analysis.comparison import compare
    result = compare(runs_a, runs_b)            # Runs, or dicts like {"bootstrap": 9.1, ...}
    row = result.stages["torch_compile"]
    row.delta, row.low, row.high, row.verdict   # e.g. -13.2, -15.0, -11.4, "faster"
    row.interval                                # Interval(low=-15.0, high=-11.4), or None

How the numbers are made (docs/compare.md says why):

- **Values.** A stage that does not apply to a run (``Run.not_applicable``: eager's
  ``torch_compile``, graph capture on CPU) counts as 0 s. A stage no source could see (None and
  not "not applicable") is unknown: that run is left out of that stage's row only (``a_n``,
  ``b_n`` say how many runs a row rests on). A sub-step missing from a run whose stage is known
  counts as 0 s (it did not happen, e.g. model inspection on a warm cache). Runs that did not
  become ready, or saw other caches than asked for (``cache=``), are left out, each listed in
  its side's ``excluded`` with the reason.
- **Interval.** Welch's t-interval for the difference of two means (unequal variances,
  Welch–Satterthwaite degrees of freedom; ``scipy.stats.ttest_ind(..., equal_var=False)``).
  It does not assume the runs are paired, so it holds for stored runs of unequal counts as for
  interleaved ones. With fewer than 2 runs on a side there is no interval and the verdict is
  ``unresolved``.
- **Clock floor.** No interval is narrower than the runs' clock can resolve: where a
  quantity's values all lie on a coarse grid (``core.clock.clock_resolution``: a saved log's
  1 s stamps), each side's mean is wrong by up to one grid step, so the interval spans at least
  ``delta`` ± two steps. Both sides constant with no known clock (e.g. a stage not applicable
  on either): the interval is the point ``delta`` and the verdict ``unresolved`` -- zero spread
  is no evidence of a difference (40, 40 s vs 41, 41 s on a 1 s clock is [-1, 3] s).
- **Practical size.** A resolved difference smaller than ``practical_size(a's mean time to
  ready)`` = max(0.05 s, 1 % of it) is reported ``unresolved``: a difference nobody would act
  on is not called one. Rows are per quantity, not simultaneous: among twenty rows where
  nothing differs, about one interval misses 0 by chance (most such are below the practical
  size).
- **Regression gate.** ``parse_threshold("2s" | "5%")`` and ``regression(result, threshold)``:
  b is resolvably slower (verdict ``slower``) and the interval's low end exceeds the allowance.

Seconds everywhere; time origins do not matter here (durations only).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from coldscope.core.clock import clock_resolution
from coldscope.core.interval import Interval
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS, stage_of
from coldscope.util.errors import ColdscopeError

#: Version of the ``Comparison`` JSON (``compare --json``, ``coldscope schema compare``).
COMPARE_SCHEMA_VERSION: Final = 1
CONFIDENCE: Final = 0.95
#: A difference smaller than this many seconds is never called one ...
PRACTICAL_MIN_S: Final = 0.05
#: ... nor one smaller than this share of a's mean time to ready.
PRACTICAL_SHARE: Final = 0.01

Side = Literal["a", "b"]
Verdict = Literal["faster", "slower", "unresolved"]


# -- records -------------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Row(_Frozen):
    """One quantity (a stage, a sub-step or time to ready) compared. Seconds; ``delta`` is
    ``b_mean - a_mean`` (negative: b is faster); ``low``/``high`` bound its interval (None with
    fewer than 2 runs on a side); ``note`` says why a verdict is ``unresolved``."""

    a_mean: float | None
    b_mean: float | None
    delta: float | None
    low: float | None
    high: float | None
    verdict: Verdict
    a_n: int = Field(description="runs of a this row rests on")
    b_n: int = Field(description="runs of b this row rests on")
    note: str | None = None

    @property
    def interval(self) -> Interval | None:
        """``low``..``high`` as an ``Interval`` (None without one). The JSON keeps the two
        bounds flat beside ``delta``: that is the published ``compare --json`` contract."""
        if self.low is None or self.high is None:
            return None
        return Interval(low=self.low, high=self.high)


class Excluded(_Frozen):
    id: str | None
    reason: str


class SideSummary(_Frozen):
    """One configuration: what it was (``command``, ``env``, or the stored-run selectors as
    ``label``), the runs measured (in time order), their times to ready, and the runs left
    out with the reason."""

    label: str | None = None
    command: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    standby: str | None = None
    """The standby launcher the side's engines were started through (``--b-standby``)."""
    runs: list[str] = Field(default_factory=list)
    n: int = 0
    time_to_ready_s: list[float] = Field(default_factory=list)
    excluded: list[Excluded] = Field(default_factory=list)


class Prime(_Frozen):
    """A start-up that only filled a side's warm cache (``--cache warm``); never measured."""

    side: Side
    run: str | None
    status: str


class Comparison(_Frozen):
    """b against a (``compare --json``). ``order`` lists the measured start-ups' sides in the
    order they ran (primes apart, in ``primes``); ``stages`` has every bucket of
    ``coldscope.core.stages.BUCKETS``; ``substeps`` every sub-step either side recorded."""

    schema_version: Literal[1] = COMPARE_SCHEMA_VERSION
    order: list[Side] = Field(default_factory=list)
    primes: list[Prime] = Field(default_factory=list)
    a: SideSummary
    b: SideSummary
    stages: dict[str, Row]
    substeps: dict[str, Row]
    time_to_ready: Row
    cache: str | None = Field(None, description="the caches every measured run had to see")
    method: Literal["welch-t"] = "welch-t"
    confidence: float = CONFIDENCE
    practical_size_s: float = Field(description="smaller differences are reported unresolved")
    notes: list[str] = Field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# -- one start-up's numbers ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One start-up as the comparison sees it: seconds per bucket and sub-step, not-applicable
    stages already 0, unknown ones None."""

    id: str | None
    time_to_ready: float | None
    stages: Mapping[str, float | None]
    substeps: Mapping[str, float] = field(default_factory=dict)
    status: str = "ok"
    cache: str | None = None
    reason: str | None = None
    started_at: str | None = None
    config: str | None = None


def sample_of(item: Run | Mapping[str, Any] | Sample) -> Sample:
    """A ``Sample`` from a ``Run``, from a Run-JSON-like dict (``stages``, ``substeps``,
    ``not_applicable``, ``time_to_ready_s``, optional ``id``/``status``/``cache``), or from a
    flat bucket dict (``{"bootstrap": 9.1, ..., "time_to_ready": 30.2}``; time to ready, when
    absent, is the sum of its known buckets)."""
    if isinstance(item, Sample):
        return item
    if isinstance(item, Run):
        d: Mapping[str, Any] = {
            "id": item.id, "status": item.status, "cache": item.cache, "reason": item.reason,
            "time_to_ready_s": item.time_to_ready_s, "stages": item.stages,
            "substeps": item.substeps, "not_applicable": item.not_applicable,
            "started_at": item.started_at, "config_key": item.config_key,
        }
    elif "stages" in item:
        d = item
    else:
        stages = {k: v for k, v in item.items() if k in BUCKETS}
        unknown = [k for k in item if k not in BUCKETS and k not in (
            "time_to_ready", "time_to_ready_s", "id")]
        if unknown:
            raise ColdscopeError(f"not a bucket: {unknown[0]!r} (buckets: {', '.join(BUCKETS)})")
        ttr = item.get("time_to_ready", item.get("time_to_ready_s"))
        if ttr is None:
            ttr = sum(v for v in stages.values() if v is not None)
        d = {"id": item.get("id"), "stages": stages, "time_to_ready_s": ttr}
    na = set(d.get("not_applicable") or ())
    raw = d.get("stages") or {}
    stages_out: dict[str, float | None] = {}
    for bucket in BUCKETS:
        v = raw.get(bucket)
        stages_out[bucket] = float(v) if v is not None else (0.0 if bucket in na else None)
    return Sample(
        id=d.get("id"), time_to_ready=_float(d.get("time_to_ready_s")), stages=stages_out,
        substeps={k: float(v) for k, v in (d.get("substeps") or {}).items() if v is not None},
        status=d.get("status") or "ok", cache=d.get("cache"), reason=d.get("reason"),
        started_at=d.get("started_at"), config=d.get("config_key"),
    )


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def _substep_value(s: Sample, name: str) -> float | None:
    if name in s.substeps:
        return s.substeps[name]
    return 0.0 if s.stages.get(stage_of(name)) is not None else None


# -- statistics ----------------------------------------------------------------------------------


def welch_interval(a: Sequence[float], b: Sequence[float],
                   confidence: float = CONFIDENCE) -> Interval:
    """Welch's ``confidence`` t-interval for ``mean(b) - mean(a)`` (two or more values on each
    side).

    Both sides constant: the interval is the point ``mean(b) - mean(a)`` (no spread to speak
    of)."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("a t-interval needs at least 2 values on each side")
    if _var(a) == 0 and _var(b) == 0:
        delta = _mean(b) - _mean(a)
        return Interval(low=delta, high=delta)
    from scipy.stats import ttest_ind

    with warnings.catch_warnings():  # one side constant (a stage 0 s in every run) is fine
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = ttest_ind(list(b), list(a), equal_var=False).confidence_interval(confidence)
    return Interval(low=float(ci.low), high=float(ci.high))


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


class Ratio(_Frozen):
    """``value = mean(num) / mean(den)`` with its 95 % interval [``low``, ``high``] (Fieller's;
    None with fewer than 2 values on a side, or when ``den``'s mean cannot be told from 0).
    A speed-up is ``ratio(baseline times, new times)``; a throughput ratio ``ratio(new,
    baseline)``. ``num``/``den`` list the values it rests on, in the order given."""

    value: float | None
    low: float | None
    high: float | None
    num: list[float] = Field(default_factory=list)
    den: list[float] = Field(default_factory=list)
    method: Literal["fieller-welch"] = "fieller-welch"
    note: str | None = None


def ratio_interval(num: Sequence[float], den: Sequence[float],
                   confidence: float = CONFIDENCE) -> Ratio:
    """The ratio of two independent means and its Fieller interval, Welch style.

    Fieller's theorem: the set of rho for which ``mean(num) - rho * mean(den)`` is within
    ``t * its standard error`` of 0, i.e. the roots of ``(x - rho y)^2 = t^2 (vx + rho^2 vy)``
    (x, y the means, vx, vy their squared standard errors). It is exact for normal data and,
    unlike a delta-method interval, asymmetric as a ratio's should be. The t quantile takes the
    Welch-Satterthwaite degrees of freedom of ``num - rho * den`` at the estimated rho (the
    sides' variances differ: a cold baseline scatters more than a seeded winner). The value is
    the ratio of the means, which always lies inside the interval."""
    nums, dens = [float(v) for v in num], [float(v) for v in den]
    value = _mean(nums) / _mean(dens) if nums and dens and _mean(dens) != 0 else None
    if len(nums) < 2 or len(dens) < 2 or value is None:
        return Ratio(value=value, low=None, high=None, num=nums, den=dens,
                     note="fewer than 2 values on a side: no interval")
    x, y = _mean(nums), _mean(dens)
    vx, vy = _var(nums) / len(nums), _var(dens) / len(dens)
    if vx == 0 and vy == 0:
        return Ratio(value=value, low=value, high=value, num=nums, den=dens)
    from scipy.stats import t as student_t

    a, b = vx, value ** 2 * vy
    df_parts = (a * a / (len(nums) - 1) if a else 0.0) + (b * b / (len(dens) - 1) if b else 0.0)
    df = (a + b) ** 2 / df_parts
    t2 = float(student_t.ppf(0.5 + confidence / 2, df)) ** 2
    lead = y * y - t2 * vy
    if lead <= 0:  # the denominator's mean is within its own noise of 0: no bounded interval
        return Ratio(value=value, low=None, high=None, num=nums, den=dens,
                     note="the denominator cannot be told from 0: no bounded interval")
    root = math.sqrt(max(0.0, (x * y) ** 2 - lead * (x * x - t2 * vx)))
    low, high = (x * y - root) / lead, (x * y + root) / lead
    return Ratio(value=value, low=low, high=high, num=nums, den=dens)


def practical_size(a_time_to_ready: float | None) -> float:
    """The smallest difference (seconds) called one: max(0.05 s, 1 % of a's time to ready)."""
    return max(PRACTICAL_MIN_S, PRACTICAL_SHARE * (a_time_to_ready or 0.0))


def row(a: Sequence[float], b: Sequence[float], *, practical: float = PRACTICAL_MIN_S,
        confidence: float = CONFIDENCE, resolution: float | None = None) -> Row:
    """One quantity compared: means, ``delta`` = b - a, its interval and the verdict.

    ``resolution``: the grid (seconds) the values were timed on, when known (see the module's
    "Clock floor"); the interval then spans at least ``delta`` ± ``2 * resolution``."""
    if len(a) < 2 or len(b) < 2:
        a_mean = _mean(a) if a else None
        b_mean = _mean(b) if b else None
        return Row(a_mean=a_mean, b_mean=b_mean,
                   delta=b_mean - a_mean if a_mean is not None and b_mean is not None else None,
                   low=None, high=None, verdict="unresolved", a_n=len(a), b_n=len(b),
                   note="fewer than 2 runs on a side: no interval")
    a_mean, b_mean = _mean(a), _mean(b)
    delta = b_mean - a_mean
    iv = welch_interval(a, b, confidence)
    floor = 2 * resolution if resolution else 0.0
    if floor:
        iv = Interval(low=min(iv.low, delta - floor), high=max(iv.high, delta + floor))
    verdict: Verdict = "unresolved"
    note = None
    if not floor and _var(a) == 0 and _var(b) == 0:
        if delta:
            note = "no spread on either side and no known clock resolution: no verdict"
        else:
            note = "the interval holds 0"
    elif iv.low > 0 or iv.high < 0:
        if abs(delta) < practical:
            note = f"resolved, but below the practical size ({practical:.2f} s)"
        else:
            verdict = "slower" if iv.low > 0 else "faster"
    else:
        note = "the interval holds 0"
    return Row(a_mean=a_mean, b_mean=b_mean, delta=delta, low=iv.low, high=iv.high,
               verdict=verdict, a_n=len(a), b_n=len(b), note=note)


# -- the comparison ------------------------------------------------------------------------------


def compare(a: Iterable[Run | Mapping[str, Any] | Sample],
            b: Iterable[Run | Mapping[str, Any] | Sample], *,
            cache: str | None = None, order: Sequence[Side] | None = None,
            primes: Sequence[Prime] = (), a_info: Mapping[str, Any] | None = None,
            b_info: Mapping[str, Any] | None = None,
            confidence: float = CONFIDENCE) -> Comparison:
    """Compare start-ups ``b`` against ``a`` (see the module docstring for the method).

    ``cache``: the cache state every measured run must have seen ("cold"/"warm"; others are
    excluded). ``order``: the sides in the order the runs ran (default: by ``started_at`` when
    every run has one, else empty). ``a_info``/``b_info``: ``label``, ``command``, ``env`` of
    each side, as shown in its summary."""
    sa = [sample_of(x) for x in a]
    sb = [sample_of(x) for x in b]
    ok_a, side_a = _side(sa, cache, a_info)
    ok_b, side_b = _side(sb, cache, b_info)
    ttr_a = [s.time_to_ready for s in ok_a if s.time_to_ready is not None]
    practical = practical_size(_mean(ttr_a) if ttr_a else None)

    def compared(values: Any) -> Row:
        va = [v for v in (values(s) for s in ok_a) if v is not None]
        vb = [v for v in (values(s) for s in ok_b) if v is not None]
        return row(va, vb, practical=practical, confidence=confidence,
                   resolution=clock_resolution(va + vb))

    stages = {bucket: compared(lambda s, k=bucket: s.stages.get(k)) for bucket in BUCKETS}
    names = sorted({n for s in ok_a + ok_b for n in s.substeps},
                   key=lambda n: (BUCKETS.index(stage_of(n)), n))
    substeps = {n: compared(lambda s, k=n: _substep_value(s, k)) for n in names}
    notes = []
    for name, side in (("a", side_a), ("b", side_b)):
        if side.n < 2:
            notes.append(f"{name} has {side.n} usable run(s): no interval, every verdict "
                         "unresolved")
        cached = {s.cache for s in (ok_a if name == "a" else ok_b) if s.cache is not None}
        if cache is None and len(cached) > 1:
            notes.append(f"{name} mixes cache states ({', '.join(sorted(cached))})")
        configs = {s.config for s in (ok_a if name == "a" else ok_b) if s.config is not None}
        if len(configs) > 1:
            notes.append(f"{name} mixes {len(configs)} configurations (command or "
                         "environment differ between its runs)")
    if order is None:
        order = _order_by_start(ok_a, ok_b)
    return Comparison(
        order=list(order), primes=list(primes), a=side_a, b=side_b, stages=stages,
        substeps=substeps, time_to_ready=compared(lambda s: s.time_to_ready), cache=cache,
        confidence=confidence, practical_size_s=practical, notes=notes,
    )


def _side(samples: list[Sample], cache: str | None,
          info: Mapping[str, Any] | None) -> tuple[list[Sample], SideSummary]:
    ok, excluded = [], []
    for s in samples:
        if s.status != "ok" or s.time_to_ready is None:
            excluded.append(Excluded(id=s.id, reason=f"{s.status}: {s.reason or 'not ready'}"))
        elif cache is not None and s.cache is not None and s.cache != cache:
            excluded.append(Excluded(id=s.id, reason=f"saw {s.cache} caches, not {cache}"))
        else:
            ok.append(s)
    info = dict(info or {})
    return ok, SideSummary(
        label=info.get("label"), command=info.get("command"), env=dict(info.get("env") or {}),
        standby=info.get("standby"), runs=[s.id for s in ok if s.id is not None], n=len(ok),
        time_to_ready_s=[s.time_to_ready for s in ok if s.time_to_ready is not None],
        excluded=excluded)


def _order_by_start(a: list[Sample], b: list[Sample]) -> list[Side]:
    tagged: list[tuple[str, Side]] = [(s.started_at or "", "a") for s in a] + \
        [(s.started_at or "", "b") for s in b]
    if any(not t for t, _ in tagged):
        return []
    return [side for _, side in sorted(tagged, key=lambda x: x[0])]


# -- regression gate -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """How much slower b may be: ``seconds``, or ``percent`` of a's mean time to ready."""

    value: float
    unit: Literal["s", "%"]

    def seconds(self, a_time_to_ready: float | None) -> float:
        if self.unit == "s":
            return self.value
        return self.value / 100 * (a_time_to_ready or 0.0)

    def __str__(self) -> str:
        return f"{self.value:g} s" if self.unit == "s" else f"{self.value:g} %"


_THRESHOLD = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|%)?\s*$")


def parse_threshold(text: str) -> Threshold:
    """``"2s"``, ``"2"`` (seconds) or ``"5%"`` (of a's time to ready)."""
    m = _THRESHOLD.match(text or "")
    if not m:
        raise ColdscopeError(f"--fail-if-slower takes seconds (2s) or a percent of a's time "
                             f"to ready (5%), got {text!r}")
    value = float(m.group(1))
    if not math.isfinite(value) or value > 1e9:
        raise ColdscopeError(f"--fail-if-slower {text!r} is out of range")
    return Threshold(value, "%" if m.group(2) == "%" else "s")


def regression(result: Comparison, threshold: Threshold) -> str | None:
    """Why b fails the gate (one line), or None: b's time to ready is resolvably slower
    (verdict ``slower``) and the interval's low end is above the allowance."""
    ttr = result.time_to_ready
    limit = threshold.seconds(ttr.a_mean)
    if ttr.verdict == "slower" and ttr.low is not None and ttr.low > limit:
        pct = round(result.confidence * 100)
        return (f"b is slower than a by {ttr.delta:.2f} s ({pct} % interval {ttr.low:.2f} to "
                f"{ttr.high:.2f} s), more than the {limit:.2f} s allowed ({threshold})")
    return None
