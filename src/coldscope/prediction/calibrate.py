"""Moving a startup model to another machine from a few start-ups there (``calibrate``).

A model fitted on one machine mispredicts another mostly through per-stage speed: the paper's
H100 model predicts its L40S node with 763 s^2 MSE, almost all of it model loading (SSD there,
page cache here). Each bucket is moved by one number measured on the new machine:

* **ratio** for size-driven buckets (the base formula has a size term: weights, layers,
  compiled graphs, capture sizes): ``new = r x base``, ``r = sum(measured) / sum(base)`` over
  the calibration models - the new machine does the same work at another speed;
* **offset** for fixed costs (an intercept-only formula: bootstrap, server_ready,
  unattributed): ``new = base + d``, ``d`` the mean difference.

What the calibration runs disagree on (each model's own ratio or offset; their standard
deviation) widens the intervals: ``z x spread x sqrt(1 + 1/n)`` per bucket, in quadrature with
the base interval scaled by the ratio. ``z`` is the normal quantile; Student's t with n - 1 = 1
degree of freedom (6.3) would make two-run intervals useless, and the coverage benchmark
(``benches/bench_calibrate.py``) checks the choice on the paper's L40S and Xeon nodes.

A bucket is *identified* when some calibration model's size-driven part of it is at least
``IDENTIFY_FRACTION`` of that part at the training median; otherwise (e.g. model loading from
one tiny model, where fixed costs dominate) the ratio is still used but a warning says so.
``suggest`` picks the calibration models to run: identifying every bucket, as large as
available, and not near-duplicates of each other.

A coarse clock (vLLM's default log timestamps have 1 s resolution) can make a ratio
unreliable however large the models: ``clock_resolution`` reads the clock each stage was timed
on from the runs themselves, ``clock_error`` propagates it into each ratio, and
``clock_verdict`` rejects (``suggest``, given the runs) or warns (``calibrate``) when that
error exceeds the base model's own. It cannot see what sinks calibration on the paper's Xeon
node: there every size-driven stage is timed to 10 ms (only bootstrap, a fixed cost, is on the
1 s clock), and the misses come from fixed costs that differ from model to model (standard
deviation 0.41 s, vs 0.13 s on the L40S node), which two runs cannot average out and no feature
foretells (``benches/bench_calibrate.py`` prints both).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from coldscope.core.clock import clock_resolution
from coldscope.core.stages import UNATTRIBUTED
from coldscope.prediction import core
from coldscope.prediction.core import Observation
from coldscope.prediction.formulas import INTERCEPT, term_value
from coldscope.prediction.modelfile import (
    MAX_MAGNITUDE,
    Calibration,
    StageTransfer,
    StartupModelFile,
    StorageSetting,
    model_file_error,
)
from coldscope.util.errors import ColdscopeError, validation_error

if TYPE_CHECKING:
    from coldscope.prediction.features import ModelFeatures

#: A calibration model identifies a size-driven bucket when its size part is at least this
#: fraction of the size part at the training set's median features.
IDENTIFY_FRACTION = 0.3

#: Two calibration models closer than this in weight bytes and layer count are near-duplicates.
DUPLICATE_TOLERANCE = 0.1


def size_part(file: StartupModelFile, bucket: str, features: ModelFeatures,
              settings: Mapping[str, Any]) -> float:
    """Seconds of a base bucket that come from its size terms (everything but the intercept)."""
    spec = file.buckets[bucket]
    total = 0.0
    for t, c in zip(spec.terms, spec.coef, strict=True):
        if t == INTERCEPT:
            continue
        v = term_value(t, features, settings)
        if v is None:
            v = file.feature_medians.get(t, 0.0)
        total += c * v
    return total


def median_size_part(file: StartupModelFile, bucket: str) -> float:
    """A bucket's size part at the training medians of its features."""
    spec = file.buckets[bucket]
    return sum(c * file.feature_medians.get(t, 0.0)
               for t, c in zip(spec.terms, spec.coef, strict=True) if t != INTERCEPT)


@dataclass(frozen=True)
class ClockError:
    """What a coarse clock does to one ratio bucket (see ``clock_error``)."""

    bucket: str
    resolution_s: float
    measured_s: float
    error_s: float

    def describe(self) -> str:
        return (f"{self.bucket} ({self.measured_s:.2f} s on a {self.resolution_s:g} s clock: "
                f"{self.error_s:.2f} s)")


def clock_error(file: StartupModelFile, bucket: str, runs: Mapping[str, Sequence[float]],
                ratio: float) -> ClockError | None:
    """The error a coarse clock puts into a ratio bucket's prediction at the training median,
    in the new machine's seconds; None when ``runs`` (model -> that bucket's seconds in each
    of its runs) are finer than ``core.clock.CLOCK_GRIDS``.

    Error propagation: a duration between two timestamps rounded to ``q`` is off by the
    difference of two uniform errors, standard deviation ``q / sqrt(6)``; a model's mean of
    ``k`` runs, ``q / sqrt(6 k)``. The ratio ``r = sum(y) / sum(base)`` is then off by the
    relative error ``e = q sqrt(sum_i 1 / (6 k_i)) / sum(y)``, and the bucket's prediction at
    the training median (``r x m`` seconds) by ``e r m``."""
    runs = {m: vs for m, vs in runs.items() if vs}
    q = clock_resolution([v for vs in runs.values() for v in vs])
    measured = sum(statistics.fmean(vs) for vs in runs.values())
    if q is None or measured <= 0 or ratio <= 0:
        return None
    e = q * math.sqrt(sum(1 / (6 * len(vs)) for vs in runs.values())) / measured
    spec = file.buckets[bucket]
    median = sum(c * (1.0 if t == INTERCEPT else file.feature_medians.get(t, 0.0))
                 for t, c in zip(spec.terms, spec.coef, strict=True))
    return ClockError(bucket, q, measured, e * ratio * median)


def clock_verdict(file: StartupModelFile, errors: Sequence[ClockError],
                  total_ratio: float) -> str | None:
    """None when the clock errors of the ratio buckets together (root-sum-square) are at most
    the base model's own error of the total, moved to the new machine (its LOMO RMSE, else the
    buckets' residual spreads, times ``total_ratio``, the new machine's total over the base
    prediction): the coarse clock then at most doubles the error variance of a prediction.
    Otherwise the reason, for the user."""
    if not errors:
        return None
    own = (file.lomo.total.rmse if file.lomo is not None else
           math.sqrt(sum(spec.residual_sd ** 2 for spec in file.buckets.values())))
    budget = own * total_ratio
    clock = math.sqrt(sum(e.error_s ** 2 for e in errors))
    if clock <= budget:
        return None
    return (f"the coarse clock puts {clock:.2f} s of error into a typical prediction "
            f"({', '.join(e.describe() for e in errors)}), more than the base model's own "
            f"{budget:.2f} s on this machine")


def _clock_errors(file: StartupModelFile, runs: Sequence[Observation],
                  models: Sequence[ModelFeatures],
                  ratios: Mapping[str, float] | None = None) -> tuple[list[ClockError], float]:
    """Clock errors of the size-driven buckets calibrated from ``runs`` of ``models``, and the
    new machine's total over the base prediction for them. ``ratios``: the calibrated ratios
    (else computed here the same way)."""
    names = {m.name for m in models}
    runs = [o for o in runs if o.model in names]
    base_total = {m.name: {b: sum(c.values()) for b, c in core.explain(file, m).items()}
                  for m in models}
    errors = []
    for b in size_driven(file):
        measured = {n: [float(v) for o in runs if o.model == n
                        for v in [o.buckets.get(b)] if v is not None] for n in names}
        if not all(measured.values()):
            continue
        if ratios is not None and b in ratios:
            ratio = ratios[b]
        else:
            base_s = sum(base_total[n][b] for n in names)
            if base_s <= 0:
                continue
            ratio = sum(statistics.fmean(vs) for vs in measured.values()) / base_s
        err = clock_error(file, b, measured, ratio)
        if err is not None:
            errors.append(err)
    new = sum(statistics.fmean(o.total_s for o in runs if o.model == n) for n in names
              if any(o.model == n for o in runs))
    old = sum(sum(base_total[n].values()) for n in names if any(o.model == n for o in runs))
    return errors, (new / old if old > 0 else 1.0)


def size_driven(file: StartupModelFile) -> list[str]:
    return [b for b, spec in file.buckets.items() if any(t != INTERCEPT for t in spec.terms)]


@dataclass(frozen=True)
class _Row:
    model: str
    features: ModelFeatures
    buckets: dict[str, float | None]
    runs: int


def _aggregate(observations: Sequence[Observation], buckets: list[str]) -> list[_Row]:
    by_model: dict[str, list[Observation]] = {}
    for o in observations:
        by_model.setdefault(o.model, []).append(o)
    rows = []
    for m in sorted(by_model):
        runs = by_model[m]
        values: dict[str, float | None] = {}
        for b in buckets:
            if b == UNATTRIBUTED:
                continue
            known = [o.buckets.get(b) for o in runs]
            values[b] = None if any(v is None for v in known) else \
                statistics.fmean(float(v) for v in known)  # type: ignore[arg-type]
        if UNATTRIBUTED in buckets:
            values[UNATTRIBUTED] = statistics.fmean(
                o.total_s - sum(float(v) for k, v in o.buckets.items()
                                if k != UNATTRIBUTED and v is not None and k in buckets)
                for o in runs)
        rows.append(_Row(m, runs[0].features, values, len(runs)))
    return rows


def calibrate(base: StartupModelFile, observations: Sequence[Observation], *,
              environment: Mapping[str, Any], source: str, base_source: str,
              models: Sequence[str] | None = None) -> StartupModelFile:
    """``base`` moved to the machine of ``observations`` (see the module doc)."""
    if base.calibration is not None:
        raise ColdscopeError("this startup model is already calibrated; calibrate its base "
                             f"model ({base.calibration.base_source}) instead")
    obs = list(observations)
    if models:
        present = {o.model for o in obs}
        unknown = [m for m in models if m not in present]
        if unknown:
            raise ColdscopeError(
                f"no calibration run of {', '.join(unknown)}; the runs are of "
                f"{', '.join(sorted(present)) or 'no model'}")
        obs = [o for o in obs if o.model in set(models)]
    kinds = base.trained_on.kinds
    skipped = sorted({o.model for o in obs if o.features.kind not in kinds})
    obs = [o for o in obs if o.features.kind in kinds]
    if not obs:
        raise ColdscopeError("no calibration runs: none of the runs is of a "
                             f"{'/'.join(kinds)} model like the base model's training set")
    for o in obs:  # durations: finite, bounded, and a stage's not negative
        for name, v in [("time to ready", o.total_s), *o.buckets.items()]:
            if v is not None:
                _check_seconds(v, f"calibration run of {o.model}: {name}")
                if v < 0 and name != UNATTRIBUTED:
                    raise ColdscopeError(f"calibration run of {o.model}: {name} is {v:.4g} s; "
                                         "a duration cannot be negative")
    buckets = list(base.buckets)
    rows = _aggregate(obs, buckets)
    n = len(rows)
    level = base.interval.level
    z = NormalDist().inv_cdf(1 - (1 - level) / 2) * math.sqrt(1 + 1 / n)
    settings = core.settings_of(base)
    base_means = {r.model: {b: sum(c.values()) for b, c in
                            core.explain(base, r.features).items()} for r in rows}
    for m, means in base_means.items():
        for b, v in means.items():
            _check_seconds(v, f"the base model's {b} for {m}")
    driven = set(size_driven(base))
    stages: dict[str, StageTransfer] = {}
    warnings: list[str] = []
    if skipped:
        warnings.append(f"calibration runs of {', '.join(skipped)} were not used: not of a "
                        f"{'/'.join(kinds)} model")
    if n == 1:
        warnings.append(f"calibrated on one model ({rows[0].model}): what the runs disagree on "
                        "cannot be measured, so the intervals only carry the base model's "
                        "uncertainty; calibrate with two models (coldscope calibrate --suggest)")
    for b in buckets:
        pairs = [(r.model, base_means[r.model][b], r.buckets.get(b)) for r in rows]
        known = [(m, p, y) for m, p, y in pairs if y is not None]
        if not known:
            # its time, if the stage happens there at all, is in the runs' unattributed
            # remainder, whose offset carries it: predicting it too would count it twice
            stages[b] = StageTransfer(kind="ratio", value=0.0, per_model={}, spread=0.0,
                                      identified=False, note="not measured by any run")
            warnings.append(f"{b}: no calibration run measured it (not applicable on this "
                            "machine, or not seen); predicted as 0 s, its time if any is in "
                            "unattributed")
            continue
        total_p = sum(max(p, 0.0) for _, p, _ in known)
        if b in driven and total_p > 0:
            value = sum(y for _, _, y in known) / total_p
            per = {m: (y / p if p > 0 else value) for m, p, y in known}
            kind = "ratio"
        else:
            per = {m: y - p for m, p, y in known}
            value = statistics.fmean(per.values())
            kind = "offset"
        for m, v in [*per.items(), ("all calibration models", value)]:
            _check_seconds(v, f"the {kind} of {b} from {m}", kind)
        spread = statistics.stdev(per.values()) if len(per) > 1 else 0.0
        identified, note = True, ""
        if kind == "ratio":
            ref = median_size_part(base, b)
            best = max(size_part(base, b, r.features, settings) for r in rows
                       if r.buckets.get(b) is not None)
            if ref > 0 and best < IDENTIFY_FRACTION * ref:
                identified = False
                note = (f"size part at most {best:.2f} s on the base machine vs "
                        f"{ref:.2f} s at the training median")
                warnings.append(
                    f"{b} is not identified by the calibration runs: their models are too "
                    f"small for it ({note}), so the ratio {value:.3g} mostly measures fixed "
                    "costs; add a larger model (coldscope calibrate --suggest)")
            if len(per) > 1 and value > 0 and spread / value > 0.5:
                warnings.append(
                    f"the calibration runs disagree on {b}: ratios "
                    f"{', '.join(f'{m} {v:.3g}' for m, v in per.items())}; its interval is "
                    "widened accordingly")
        stages[b] = StageTransfer(kind=kind, value=value, per_model=per, spread=spread,
                                  identified=identified, note=note)
    errors, total_ratio = _clock_errors(
        base, obs, [r.features for r in rows],
        {b: t.value for b, t in stages.items() if t.kind == "ratio"})
    verdict = clock_verdict(base, errors, total_ratio)
    if verdict is not None:
        warnings.append(f"{verdict}: calibrate with larger models or more runs of each "
                        "(coldscope calibrate --suggest --store)")
    env = dict(environment)
    storage = env.get("storage")
    try:
        setting = StorageSetting.model_validate(storage).model_dump() if storage else None
    except ValidationError as exc:
        raise validation_error(exc, "the storage setting of the calibration runs") from None
    try:
        calibration = Calibration(
            base_source=base_source, base_environment=dict(base.environment),
            base_storage=base.storage, source=source, models=[r.model for r in rows],
            replicates=[r.runs for r in rows], environment=env, stages=stages,
            disagreement_t=z, warnings=warnings)
        data = base.model_dump()
        data.update(environment=env, calibration=calibration.model_dump(), storage=setting)
        return StartupModelFile.model_validate(data)
    except ValidationError as exc:  # not expected (each part is checked above): one line still
        raise model_file_error(exc, "made by calibrate") from None


def _check_seconds(value: float, what: str, kind: str = "") -> None:
    """Refuse a number calibration cannot carry: not finite, or beyond ``MAX_MAGNITUDE`` (a
    startup model file holds no larger number, and within it every sum, mean and spread here
    stays finite)."""
    if not (math.isfinite(value) and abs(value) <= MAX_MAGNITUDE):
        unit = "" if kind == "ratio" else " s"
        raise ColdscopeError(f"cannot calibrate: {what} is {value:.4g}{unit}, beyond the "
                             f"{MAX_MAGNITUDE:g} a startup model holds")


# -- which models to run ------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    """A pair (or single model) to calibrate with, and why."""

    models: tuple[str, ...]
    score: float
    accepted: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"models": list(self.models), "score": round(self.score, 4),
                "accepted": self.accepted, "reason": self.reason}


def identifies(file: StartupModelFile, features: ModelFeatures) -> list[str]:
    """The size-driven buckets this model alone would leave unidentified."""
    settings = core.settings_of(file)
    return [b for b in size_driven(file)
            if median_size_part(file, b) > 0 and
            size_part(file, b, features, settings) < IDENTIFY_FRACTION * median_size_part(file, b)]


def _near(a: ModelFeatures, b: ModelFeatures) -> bool:
    def close(x: float, y: float) -> bool:
        return abs(x - y) <= DUPLICATE_TOLERANCE * max(abs(x), abs(y), 1e-12)
    return close(a.weight_bytes, b.weight_bytes) and close(a.num_layers, b.num_layers)


def size_guidance(file: StartupModelFile) -> dict[str, Any]:
    """Without candidates: the smallest feature values that identify every bucket.

    For each size term of a size-driven bucket, ``IDENTIFY_FRACTION`` of its training median
    (a model at least that large identifies the bucket on that term's account).
    """
    from coldscope.prediction.formulas import FEATURES
    minimums: dict[str, dict[str, Any]] = {}
    for b in size_driven(file):
        for t in file.buckets[b].terms:
            median = file.feature_medians.get(t)
            if t == INTERCEPT or median is None:
                continue
            entry = minimums.setdefault(t, {"at_least": IDENTIFY_FRACTION * median,
                                            "unit": FEATURES[t].unit, "median": median,
                                            "buckets": []})
            entry["buckets"].append(b)
    return {"minimums": minimums, "fraction": IDENTIFY_FRACTION,
            "duplicate_tolerance": DUPLICATE_TOLERANCE}


def out_of_domain(file: StartupModelFile, candidates: Sequence[ModelFeatures]
                  ) -> list[tuple[str, str]]:
    """The candidates ``predict`` calls out of domain (a kind the startup model was not
    trained on: MoE, hybrid), each with why; ``suggest`` leaves them out."""
    kinds = file.trained_on.kinds
    return [(c.name, f"a {c.kind} model; the startup model was trained on "
                     f"{'/'.join(kinds)} models only (out of domain for predict)")
            for c in candidates if c.kind not in kinds]


def suggest(file: StartupModelFile, candidates: Sequence[ModelFeatures],
            runs: Sequence[Observation] | None = None) -> list[Suggestion]:
    """Every pair of ``candidates`` ranked for calibration; ``accepted`` ones identify every
    bucket (each model on its own), are not near-duplicates, and - when ``runs`` of them on
    the new machine are given (``--store``/``--paper``) - time every size-driven bucket
    finely enough (``clock_verdict``). The score is the pair's size-driven base
    seconds relative to the training median's (larger: each ratio is measured over more
    seconds, so timer resolution and noise matter less)."""
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ColdscopeError("candidate models must have different names")
    # a model predict calls out of domain calibrates nothing it will be asked about
    outside = [c for c in candidates if c.kind not in file.trained_on.kinds]
    if outside:
        candidates = [c for c in candidates if c.kind in file.trained_on.kinds]
    if len(candidates) < 2:
        raise ColdscopeError(
            "--suggest needs at least two candidate models"
            + (f" in the startup model's domain ({'/'.join(file.trained_on.kinds)}); left "
               f"out: {', '.join(f'{c.name} ({c.kind})' for c in outside)}"
               if outside else ""))
    settings = core.settings_of(file)
    driven = size_driven(file)
    ref = sum(median_size_part(file, b) for b in driven) or 1.0
    parts = {c.name: sum(size_part(file, b, c, settings) for b in driven) for c in candidates}
    out = []
    for a, b in itertools.combinations(candidates, 2):
        score = (parts[a.name] + parts[b.name]) / (2 * ref)
        missing = {m.name: identifies(file, m) for m in (a, b)}
        reasons = [f"{m} is too small to identify {', '.join(s)}"
                   for m, s in missing.items() if s]
        if runs:
            verdict = clock_verdict(file, *_clock_errors(file, runs, (a, b)))
            if verdict:
                reasons.append(verdict)
        if _near(a, b):
            reasons.append(f"{a.name} and {b.name} are near-duplicates (weights and layers "
                           f"within {DUPLICATE_TOLERANCE:.0%}): the second run adds little")
        accepted = not reasons
        out.append(Suggestion((a.name, b.name), score, accepted,
                              "; ".join(reasons) if reasons else
                              "identifies every stage; larger models give steadier ratios"))
    out.sort(key=lambda s: (not s.accepted, -s.score, s.models))
    return out
