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
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from coldscope.errors import ColdscopeError
from coldscope.predict import core
from coldscope.predict.core import Observation
from coldscope.predict.formulas import INTERCEPT, term_value
from coldscope.predict.modelfile import (
    Calibration,
    StageTransfer,
    StartupModelFile,
    StorageSetting,
)
from coldscope.stages import UNATTRIBUTED

if TYPE_CHECKING:
    from coldscope.features import ModelFeatures

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
    buckets = list(base.buckets)
    rows = _aggregate(obs, buckets)
    n = len(rows)
    level = base.interval.level
    z = NormalDist().inv_cdf(1 - (1 - level) / 2) * math.sqrt(1 + 1 / n)
    settings = core.settings_of(base)
    base_means = {r.model: {b: sum(c.values()) for b, c in
                            core.explain(base, r.features).items()} for r in rows}
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
    env = dict(environment)
    storage = env.get("storage")
    calibration = Calibration(
        base_source=base_source, base_environment=dict(base.environment),
        base_storage=base.storage, source=source, models=[r.model for r in rows],
        replicates=[r.runs for r in rows], environment=env, stages=stages,
        disagreement_t=z, warnings=warnings)
    data = base.model_dump()
    data.update(environment=env, calibration=calibration.model_dump(),
                storage=StorageSetting.model_validate(storage).model_dump() if storage else None)
    return StartupModelFile.model_validate(data)


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
    from coldscope.predict.formulas import FEATURES

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


def suggest(file: StartupModelFile, candidates: Sequence[ModelFeatures]) -> list[Suggestion]:
    """Every pair of ``candidates`` ranked for calibration; ``accepted`` ones identify every
    bucket (each model on its own) and are not near-duplicates. The score is the pair's
    size-driven base seconds relative to the training median's (larger: each ratio is
    measured over more seconds, so timer resolution and noise matter less)."""
    if len(candidates) < 2:
        raise ColdscopeError("--suggest needs at least two candidate models")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ColdscopeError("candidate models must have different names")
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
        if _near(a, b):
            reasons.append(f"{a.name} and {b.name} are near-duplicates (weights and layers "
                           f"within {DUPLICATE_TOLERANCE:.0%}): the second run adds little")
        accepted = not reasons
        out.append(Suggestion((a.name, b.name), score, accepted,
                              "; ".join(reasons) if reasons else
                              "identifies every stage; larger models give steadier ratios"))
    out.sort(key=lambda s: (not s.accepted, -s.score, s.models))
    return out
