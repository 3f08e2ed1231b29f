"""The start-up distribution a scaling policy plans with: measured runs, a prediction, or given.

A replica asked for now serves only after its cold path; :class:`StartupDistribution` is the
engine's share of that path (launch to ready, seconds) as a quantile function, with where it
comes from (``source``) and what makes it doubtful (``warnings``):

* ``observed``: measured times to ready (e.g. a store's runs of the model: :func:`times_to_ready`),
  read through their empirical quantiles (linear interpolation between order statistics, as
  ``numpy.quantile``'s default does);
* ``predicted``: a ``coldscope.predict`` result, read as a log-normal with the prediction's total
  as its median and its interval (at the prediction's ``level``) as the spread, the wider side
  of a lopsided interval setting it (as the simulator's ``sim.startup.from_prediction`` does);
  the prediction's own warnings (out of the training domain, beyond range) are carried through;
* ``given``: any quantile function, e.g. the simulator's own cold-start distribution.

:func:`choose` is the rule ``ScaleAdvisor(source="auto")`` applies: the measured runs when there
are at least :data:`MIN_OBSERVED_RUNS` of them, else the prediction. Standard library only, so
that an autoscaler importing it loads nothing heavy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal, Protocol

from coldscope.util.errors import ColdscopeError

#: Measured start-ups needed before ``source="auto"`` prefers them to a prediction: with fewer,
#: the p90 is little more than the largest run.
MIN_OBSERVED_RUNS = 5

#: Where a start-up distribution comes from.
Source = Literal["observed", "predicted", "given"]
#: What a caller may ask for: one of those, or ``auto`` (:func:`choose`).
SourceChoice = Literal["auto", "observed", "predicted"]

#: The longest start-up believed (one day): a larger figure is a unit mix-up.
MAX_STARTUP_S = 86_400.0


class _Bounds(Protocol):
    @property
    def low(self) -> float: ...

    @property
    def high(self) -> float: ...


class PredictionLike(Protocol):
    """What is read of a prediction: ``coldscope.Prediction`` has these."""

    @property
    def total_s(self) -> float: ...

    @property
    def interval(self) -> _Bounds: ...

    @property
    def level(self) -> float: ...

    @property
    def warnings(self) -> Sequence[str]: ...


class RunLike(Protocol):
    """What is read of a run: ``coldscope.Run`` has these."""

    @property
    def status(self) -> str: ...

    @property
    def time_to_ready_s(self) -> float | None: ...


@dataclass(frozen=True)
class Percentiles:
    """Three percentiles of a duration, in seconds."""

    p50: float
    p90: float
    p99: float

    def to_dict(self) -> dict[str, float]:
        return {"p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class StartupDistribution:
    """An engine start-up distribution (seconds from launch to ready), as a quantile function.

    Build one with :meth:`observed`, :meth:`predicted` or :meth:`given`. ``detail`` says in
    words what it rests on; ``warnings`` what makes it doubtful.
    """

    source: Source
    detail: str
    quantile_fn: Callable[[float], float] = field(repr=False, compare=False)
    warnings: tuple[str, ...] = ()

    def quantile(self, q: float) -> float:
        """The start-up (s) that a share ``q`` (0 < q < 1) of start-ups stay within."""
        if not 0 < q < 1:
            raise ColdscopeError(f"a start-up quantile must be between 0 and 1, not {q:g}")
        value = float(self.quantile_fn(q))
        if not (0 <= value <= MAX_STARTUP_S):
            raise ColdscopeError(f"start-up quantile {q:g} is {value:g} s, outside 0-86,400 s "
                                 f"({self.detail})")
        return value

    def percentiles(self) -> Percentiles:
        return Percentiles(self.quantile(0.5), self.quantile(0.9), self.quantile(0.99))

    @classmethod
    def observed(cls, times_s: Iterable[float], *,
                 min_runs: int = MIN_OBSERVED_RUNS) -> StartupDistribution:
        """Measured times to ready; a warning when there are fewer than ``min_runs``."""
        values = sorted(_seconds(t, "an observed start-up") for t in times_s)
        if not values:
            raise ColdscopeError("no observed start-up times to plan with")
        n = len(values)
        warnings: tuple[str, ...] = ()
        if n < min_runs:
            warnings = (f"only {n} observed start-up{'s' if n != 1 else ''} (fewer than "
                        f"{min_runs}): the p90 and p99 are little more than the slowest run",)
        median = _linear_quantile(values, 0.5)
        detail = f"{n} measured start-up{'s' if n != 1 else ''}, median {median:.1f} s"
        return cls("observed", detail, lambda q: _linear_quantile(values, q), warnings)

    @classmethod
    def predicted(cls, prediction: PredictionLike) -> StartupDistribution:
        """A prediction's total and interval read as a log-normal; its warnings kept."""
        total = _seconds(prediction.total_s, "the predicted start-up")
        if total <= 0:
            raise ColdscopeError("the predicted start-up must be above 0 s")
        level = float(prediction.level)
        if not 0 < level < 1:
            raise ColdscopeError(f"the prediction's interval level must be between 0 and 1, "
                                 f"not {level:g}")
        low = min(_seconds(prediction.interval.low, "the interval's low end", signed=True),
                  total)
        high = max(_seconds(prediction.interval.high, "the interval's high end"), total)
        if low <= 0:  # a linear model's interval can cross zero: keep the upper side's spread
            low = total * total / high
        z = NormalDist().inv_cdf(0.5 + level / 2)
        sigma = max(math.log(total / low), math.log(high / total)) / z
        normal = NormalDist()

        def quantile(q: float) -> float:
            return total * math.exp(sigma * normal.inv_cdf(q))

        detail = (f"predicted {total:.1f} s, {level:.0%} interval "
                  f"{prediction.interval.low:.1f}-{prediction.interval.high:.1f} s")
        return cls("predicted", detail, quantile, tuple(str(w) for w in prediction.warnings))

    @classmethod
    def given(cls, quantile: Callable[[float], float], detail: str,
              warnings: Sequence[str] = ()) -> StartupDistribution:
        """Any quantile function (seconds), e.g. the simulator's ``ColdStart.quantile``."""
        return cls("given", detail, quantile, tuple(warnings))

    def less(self, seconds: float, why: str) -> StartupDistribution:
        """Every start-up ``seconds`` shorter, never below 0 s (e.g. what a standby launcher
        saves): the same source, its detail saying by how much and why."""
        cut = _seconds(seconds, "a start-up saving")
        if cut == 0:
            return self
        base = self.quantile_fn

        def quantile(q: float) -> float:
            return max(0.0, float(base(q)) - cut)

        return StartupDistribution(self.source, f"{self.detail}, less {cut:g} s ({why})",
                                   quantile, self.warnings)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "detail": self.detail, "warnings": list(self.warnings)}


def choose(observed_s: Iterable[float] = (), prediction: PredictionLike | None = None,
           source: SourceChoice = "auto", *,
           min_runs: int = MIN_OBSERVED_RUNS) -> StartupDistribution:
    """The distribution to plan with. ``observed``/``predicted``: that one (an error when it
    is missing). ``auto``: the measured runs when there are at least ``min_runs``, else the
    prediction, else the few runs there are (with a warning); neither is an error."""
    runs = list(observed_s)
    if source == "observed":
        if not runs:
            raise ColdscopeError("source='observed' needs observed start-up times (observed_s)")
        return StartupDistribution.observed(runs, min_runs=min_runs)
    if source == "predicted":
        if prediction is None:
            raise ColdscopeError("source='predicted' needs a prediction (coldscope.predict)")
        return StartupDistribution.predicted(prediction)
    if source != "auto":
        raise ColdscopeError(f"source must be auto, observed or predicted, not {source!r}")
    if len(runs) >= min_runs:
        return StartupDistribution.observed(runs, min_runs=min_runs)
    if prediction is not None:
        chosen = StartupDistribution.predicted(prediction)
        if runs:
            note = (f"{len(runs)} observed start-up{'s' if len(runs) != 1 else ''} (fewer than "
                    f"{min_runs}): planned with the prediction")
            chosen = StartupDistribution(chosen.source, chosen.detail, chosen.quantile_fn,
                                         (*chosen.warnings, note))
        return chosen
    if runs:
        return StartupDistribution.observed(runs, min_runs=min_runs)
    raise ColdscopeError("no start-up to plan with: give observed start-up times (observed_s) "
                         "or a prediction")


def times_to_ready(runs: Iterable[RunLike]) -> list[float]:
    """The time to ready of each successful run (e.g. ``Store.runs(model_path=...)``)."""
    return [float(r.time_to_ready_s) for r in runs
            if r.status == "ok" and r.time_to_ready_s is not None]


def _seconds(value: float, what: str, *, signed: bool = False) -> float:
    x = float(value)
    if not math.isfinite(x) or x > MAX_STARTUP_S or (x < 0 and not signed):
        raise ColdscopeError(f"{what} must be a finite number of seconds in 0-86,400, "
                             f"not {value!r}")
    return x


def _linear_quantile(values: Sequence[float], q: float) -> float:
    """Type-7 quantile (numpy's default) of sorted ``values``."""
    h = (len(values) - 1) * q
    lo = math.floor(h)
    if lo + 1 >= len(values):
        return values[-1]
    return values[lo] + (h - lo) * (values[lo + 1] - values[lo])
