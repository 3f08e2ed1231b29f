"""Cold-start distributions: how long a new replica takes from "scale out" to "ready".

The simulator draws one start-up time per new replica from one of these objects, through a
``numpy.random.Generator`` it is handed (never a global one). Each object says where its numbers
come from (``source``) so that the simulation's output can say it too.

Sources, from best to worst:

* a startup model's ``Prediction`` of the engine start-up of a given model, with its 90 %
  interval (:func:`from_prediction`);
* measured runs (``Run`` records, e.g. from the store: :func:`from_store_runs`): resample their
  time to ready;
* a ``PlanReport`` (what ``coldscope plan --json`` writes, :func:`from_plan`): its end-to-end
  low..high estimate, i.e. with the planner's mitigations already applied;
* :func:`paper_default`: the spread the paper measured on one H100 (17 models, 5 runs each).

Every source is data: reading the files they come from (a startup model, a plan file, the
store) is the caller's (``coldscope.sim.request.load_startup``).

:class:`Mitigated` applies a simple mitigation on top of any of them: multiply by ``scale``
(e.g. 0.5 for a layer that halves the start-up) and add ``extra_s`` (e.g. node provisioning and
image pull that the engine start-up does not include). :class:`Shortened` takes a standby
launcher's saving (seconds, e.g. the bootstrap ``b - a`` of ``coldscope compare --b-standby``)
off each engine start-up first, never below 0 s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.core.records import Run
    from coldscope.planning.result import PlanReport
    from coldscope.prediction.core import Prediction

#: z such that P(Z <= z) = 0.95 for a standard normal: the half-width of a 90 % interval.
_Z90 = 1.6448536269514722

#: Engine time to ready (``actual_total_time``, seconds) of each of the 5 measured runs of the
#: 17 models in the paper's main table (vLLM 0.10.1.1, one H100 NVL, warm compile cache, weights
#: in page cache or on PCIe 5 SSD): /work/shared/data/paper/figures/figure-rest/iterations/{1..5}/
#: comparison_results.json. Engine start-up only: no node provisioning, image pull or download.
PAPER_H100_TIME_TO_READY_S: tuple[float, ...] = (
    18.88, 18.9, 18.9, 18.92, 18.93, 21.65, 21.69, 21.7, 21.75, 21.76, 26.76, 26.8, 26.81,
    26.82, 26.86, 29.02, 29.02, 29.06, 29.09, 29.14, 40.21, 40.22, 40.22, 40.33, 40.35, 45.06,
    45.1, 45.16, 45.27, 45.28, 47.2, 47.43, 47.49, 47.6, 47.75, 47.87, 47.98, 47.98, 48.03,
    48.45, 50.18, 50.27, 50.28, 50.31, 50.38, 50.46, 50.54, 50.84, 51.1, 51.42, 53.11, 53.14,
    53.24, 53.32, 53.36, 55.7, 55.91, 56.09, 56.2, 56.2, 60.92, 61.01, 61.05, 61.06, 61.17,
    74.0, 74.02, 74.07, 74.17, 74.42, 74.44, 74.65, 74.8, 74.85, 74.92, 79.3, 79.36, 79.72,
    79.77, 79.89, 80.22, 80.29, 80.31, 80.79, 80.81,
)


class ColdStart(Protocol):
    """What the simulator needs from a start-up distribution (seconds)."""

    @property
    def source(self) -> str:
        """Where the numbers come from, as the simulation's output says it."""
        ...

    def sample(self, rng: np.random.Generator) -> float: ...

    def quantile(self, q: float) -> float: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Fixed:
    """Always the same start-up time: for tests and for "what if start-up were S" questions."""

    seconds: float
    source: str = "fixed"

    def __post_init__(self) -> None:
        if not (self.seconds >= 0 and math.isfinite(self.seconds)):
            raise ColdscopeError(f"start-up time must be a finite number >= 0, got {self.seconds}")

    def sample(self, rng: np.random.Generator) -> float:
        return self.seconds

    def quantile(self, q: float) -> float:
        return self.seconds

    def describe(self) -> dict[str, Any]:
        return {"kind": "fixed", "source": self.source, "seconds": self.seconds}


@dataclass(frozen=True)
class Empirical:
    """Resample measured start-up times uniformly (a bootstrap of the measurements)."""

    values: tuple[float, ...]
    source: str

    def __post_init__(self) -> None:
        if not self.values:
            raise ColdscopeError(f"no start-up measurements to draw from ({self.source})")
        if any(not (v >= 0 and math.isfinite(v)) for v in self.values):
            raise ColdscopeError(f"start-up measurements must be finite and >= 0 ({self.source})")

    def sample(self, rng: np.random.Generator) -> float:
        return float(self.values[int(rng.integers(len(self.values)))])

    def quantile(self, q: float) -> float:
        return float(np.quantile(np.asarray(self.values), q))

    def describe(self) -> dict[str, Any]:
        v = np.asarray(self.values)
        return {"kind": "empirical", "source": self.source, "n": int(v.size),
                "min": float(v.min()), "median": float(np.median(v)), "max": float(v.max())}


@dataclass(frozen=True)
class LogNormal:
    """A log-normal start-up time with a given median and 90 % interval.

    ``sigma`` comes from the interval's width in log space; a lopsided interval uses its wider
    side, so the spread is never understated.
    """

    median: float
    low: float
    high: float
    source: str
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.median <= self.high and math.isfinite(self.high)):
            raise ColdscopeError(
                f"start-up interval must satisfy 0 < low <= median <= high, got "
                f"{self.low}, {self.median}, {self.high} ({self.source})")

    @property
    def sigma(self) -> float:
        m = math.log(self.median)
        return max(m - math.log(self.low), math.log(self.high) - m) / _Z90

    def sample(self, rng: np.random.Generator) -> float:
        return float(math.exp(math.log(self.median) + self.sigma * rng.standard_normal()))

    def quantile(self, q: float) -> float:
        from statistics import NormalDist

        return float(math.exp(math.log(self.median) + self.sigma * NormalDist().inv_cdf(q)))

    def describe(self) -> dict[str, Any]:
        return {"kind": "lognormal", "source": self.source, "median": self.median,
                "interval": {"low": self.low, "high": self.high},
                "warnings": list(self.warnings)}


@dataclass(frozen=True)
class Uniform:
    """Uniform between a low and a high estimate (the planner gives no shape in between)."""

    low: float
    high: float
    source: str

    def __post_init__(self) -> None:
        if not (0 <= self.low <= self.high and math.isfinite(self.high)):
            raise ColdscopeError(f"start-up range must satisfy 0 <= low <= high, got "
                                 f"{self.low}..{self.high} ({self.source})")

    def sample(self, rng: np.random.Generator) -> float:
        return float(self.low + (self.high - self.low) * rng.random())

    def quantile(self, q: float) -> float:
        return self.low + (self.high - self.low) * q

    def describe(self) -> dict[str, Any]:
        return {"kind": "uniform", "source": self.source,
                "interval": {"low": self.low, "high": self.high}}


@dataclass(frozen=True)
class Mitigated:
    """``base`` start-up x ``scale`` + ``extra_s``: a mitigation or an added platform delay."""

    base: ColdStart
    scale: float = 1.0
    extra_s: float = 0.0
    source: str = field(init=False)

    def __post_init__(self) -> None:
        if not (self.scale >= 0 and math.isfinite(self.scale)):
            raise ColdscopeError(f"start-up scale must be >= 0, got {self.scale}")
        if not (self.extra_s >= 0 and math.isfinite(self.extra_s)):
            raise ColdscopeError(f"extra start-up seconds must be >= 0, got {self.extra_s}")
        object.__setattr__(self, "source", self.base.source)

    def sample(self, rng: np.random.Generator) -> float:
        return self.base.sample(rng) * self.scale + self.extra_s

    def quantile(self, q: float) -> float:
        return self.base.quantile(q) * self.scale + self.extra_s

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "scale": self.scale, "extra_s": self.extra_s}


@dataclass(frozen=True)
class Shortened:
    """``base`` start-up less ``saving_s``, never below 0 s: a standby launcher on the node
    (a process with the engine's modules imported forks each new engine, which skips its
    imports). ``why`` says where the saving comes from."""

    base: ColdStart
    saving_s: float
    why: str = "a standby launcher"
    source: str = field(init=False)

    def __post_init__(self) -> None:
        if not (self.saving_s >= 0 and math.isfinite(self.saving_s)):
            raise ColdscopeError(f"a start-up saving must be a finite number >= 0, got "
                                 f"{self.saving_s}")
        object.__setattr__(self, "source", f"{self.base.source}; less {self.saving_s:g} s per "
                                           f"start-up: {self.why}")

    def sample(self, rng: np.random.Generator) -> float:
        return max(0.0, self.base.sample(rng) - self.saving_s)

    def quantile(self, q: float) -> float:
        return max(0.0, self.base.quantile(q) - self.saving_s)

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "source": self.source, "standby_saving_s": self.saving_s}


def shorten(base: ColdStart, saving_s: float = 0.0, why: str = "a standby launcher"
            ) -> ColdStart:
    """``base`` itself when nothing is saved, else a :class:`Shortened` wrapper."""
    if saving_s == 0.0:
        return base
    return Shortened(base, saving_s, why)


def mitigate(base: ColdStart, scale: float = 1.0, extra_s: float = 0.0) -> ColdStart:
    """``base`` itself when nothing changes, else a :class:`Mitigated` wrapper."""
    if scale == 1.0 and extra_s == 0.0:
        return base
    return Mitigated(base, scale, extra_s)


def paper_default() -> Empirical:
    """The documented default: the paper's measured H100 engine start-ups (18.9-80.8 s)."""
    return Empirical(PAPER_H100_TIME_TO_READY_S,
                     source="default: paper's measured H100 engine start-up spread "
                            "(17 models x 5 runs, 18.9-80.8 s); no startup model given")


def from_prediction(prediction: Prediction, source: str) -> LogNormal:
    """A log-normal from a ``StartupModel`` prediction: median ``total_s``, 90 % ``interval``."""
    total = float(prediction.total_s)
    low = min(float(prediction.interval.low), total)
    high = max(float(prediction.interval.high), total)
    if low <= 0:  # a linear model's interval can cross zero; keep the upper side's spread
        low = total * total / high if high > 0 else total
    return LogNormal(median=total, low=low, high=high, source=source,
                     warnings=tuple(prediction.warnings))


def from_store_runs(runs: Sequence[Run], source: str) -> Empirical:
    """Resample the measured time to ready of runs (failed or unfinished ones skipped)."""
    values = tuple(float(r.time_to_ready_s) for r in runs
                   if r.status == "ok" and r.time_to_ready_s is not None)
    if not values:
        raise ColdscopeError(f"no successful runs with a time to ready in {source}")
    return Empirical(values, source=f"{len(values)} measured runs in {source}")


def from_plan(plan: PlanReport, source: str) -> Uniform:
    """The end-to-end cold start of a plan (``coldscope plan``; mitigations applied), drawn
    uniformly between its low and high estimates: the planner gives no shape in between."""
    return Uniform(plan.total_s.low, plan.total_s.high, source=f"plan {source}")
