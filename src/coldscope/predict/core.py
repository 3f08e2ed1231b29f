"""Predicting with a fitted (or calibrated) startup model: pure Python, no numpy.

Given a ``StartupModelFile`` and a model's features, ``predict`` returns per-bucket seconds,
the total, their prediction intervals and warnings. The steps, in order:

1. the base formulas (``predict.fit`` explains how they were chosen) and their intervals:
   classical OLS prediction intervals per bucket ``s +- t sqrt(sigma_ss (1 + a'(X'X)^-1 a))``,
   the total from the cross-bucket residual covariance (every bucket is fitted on the same
   models, so their errors are correlated), or CV+ (jackknife+ with one fold per model) where
   the training set is large enough;
2. extrapolation: a term whose value lies outside its training range widens its bucket's
   interval by that term's contribution beyond the range (``|coef| x excess``) on both sides,
   so a prediction far from the data is visibly uncertain rather than confidently wrong;
3. calibration (``predict.calibrate``): each bucket moves to the calibrated machine by a ratio
   or an offset; its interval is scaled alike and widened by what the calibration runs
   disagreed on (``disagreement_t x spread``, in quadrature);
4. another storage setting (``--storage-bandwidth`` / ``--page-cache``): model loading becomes
   its fixed part plus weight bytes / bandwidth.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from coldscope.errors import ColdscopeError
from coldscope.predict.formulas import FEATURES, INTERCEPT, term_value
from coldscope.predict.modelfile import StartupModelFile, StorageSetting
from coldscope.stages import MODEL_LOADING

if TYPE_CHECKING:
    from coldscope.features import ModelFeatures

#: Model loading from a hot page cache when no bandwidth is given: the paper's figure 13 case 0
#: (DRAM page cache, H100 node) measured 0.122 s per GB, i.e. about 8.2 GB/s.
DEFAULT_PAGE_CACHE_BPS = 1e9 / 0.122


@dataclass(frozen=True)
class Observation:
    """One measured start-up: bucket seconds (None = unknown) and time to ready (seconds)."""

    model: str
    features: ModelFeatures
    buckets: Mapping[str, float | None]
    total_s: float


class Interval(NamedTuple):
    """(low, high) seconds; a tuple, so ``low, high = p.interval`` keeps working."""

    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"low": round(self.low, 4), "high": round(self.high, 4)}


@dataclass(frozen=True)
class StagePrediction:
    """Predicted seconds of one bucket and its prediction interval (seconds)."""

    s: float
    interval: Interval


@dataclass(frozen=True)
class LoadingSetting:
    """The storage setting model loading is predicted for (None fields: as fitted)."""

    page_cache: Literal["hot", "cold"] | None = None
    bandwidth_bps: float | None = None


@dataclass
class Prediction:
    """A start-up prediction: per-bucket seconds, the total, intervals, and warnings."""

    total_s: float
    interval: Interval
    stages: dict[str, StagePrediction]
    warnings: list[str] = field(default_factory=list)
    level: float = 0.9
    model: str = ""
    storage: dict[str, Any] | None = None
    calibrated_on: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of ``coldscope predict --json`` (and ``serve``'s /v1/predict)."""
        return {
            "model": self.model,
            "total_s": round(self.total_s, 4),
            "interval": self.interval.to_dict(),
            "level": self.level,
            "stages": {k: {"s": round(v.s, 4), "interval": v.interval.to_dict()}
                       for k, v in self.stages.items()},
            "storage": self.storage,
            "calibrated_on": self.calibrated_on,
            "warnings": list(self.warnings),
        }


# ---------------------------------------------------------------------------------------------


def settings_of(file: StartupModelFile, **overrides: Any) -> dict[str, Any]:
    merged = dict(file.settings or {})
    merged.update({k: v for k, v in overrides.items() if v is not None})
    return merged


def term_values(file: StartupModelFile, features: ModelFeatures, settings: Mapping[str, Any],
                missing: set[str] | None = None) -> dict[str, list[float]]:
    """Each bucket's term values; an unknown feature takes its training median (reported)."""
    return {b: [_value(file, t, features, settings, missing) for t in spec.terms]
            for b, spec in file.buckets.items()}


def _value(file: StartupModelFile, term: str, features: ModelFeatures,
           settings: Mapping[str, Any], missing: set[str] | None = None) -> float:
    value = term_value(term, features, settings)
    if value is not None:
        return float(value)
    median = file.feature_medians.get(term)
    if median is None:
        raise ColdscopeError(f"a formula needs {term} ({FEATURES[term].unit}), which is "
                             f"unknown for {features.name}")
    if missing is not None:
        missing.add(term)
    return float(median)


def explain(file: StartupModelFile, features: ModelFeatures,
            **settings: Any) -> dict[str, dict[str, float]]:
    """Each base bucket's terms and their contributions in seconds (they sum to the bucket)."""
    values = term_values(file, features, settings_of(file, **settings), set())
    return {b: {t: c * v for t, c, v in zip(spec.terms, spec.coef, values[b], strict=True)}
            for b, spec in file.buckets.items()}


def predict(file: StartupModelFile, features: ModelFeatures, capture_sizes: int | None = None,
            loading: LoadingSetting | None = None) -> Prediction:
    """Per-bucket seconds, total, and their ``level`` prediction intervals (see module doc)."""
    settings = settings_of(file, capture_sizes=capture_sizes)
    order = list(file.buckets)
    missing: set[str] = set()
    a = term_values(file, features, settings, missing)
    means = {b: _dot(file.buckets[b].coef, a[b]) for b in order}
    if file.interval.method == "cv+":
        intervals = _cv_plus(file, features, settings)
    else:
        intervals = _ols_intervals(file, a)
    # half-widths below / above each mean (the interval methods centre differently)
    lo_hw = {b: max(means[b] - intervals[b][0], 0.0) for b in order}
    hi_hw = {b: max(intervals[b][1] - means[b], 0.0) for b in order}
    total_mean = sum(means.values())
    t_lo = max(total_mean - intervals["total"][0], 0.0)
    t_hi = max(intervals["total"][1] - total_mean, 0.0)

    warnings = [f"{name} ({FEATURES[name].unit}) is unknown for {features.name}: the "
                f"training median was used, so the {', '.join(_users(file, name))} "
                "prediction is only typical" for name in sorted(missing)]
    warnings += domain_warnings(file, features, settings)

    # 2. extrapolation widens
    extra = _extrapolation(file, features, settings)
    for b, e in extra.items():
        lo_hw[b] += e
        hi_hw[b] += e
    t_lo += sum(extra.values())
    t_hi += sum(extra.values())

    # 3. calibration
    cal = file.calibration
    if cal is not None:
        base_means = dict(means)
        dis_sq = 0.0
        for b in order:
            tr = cal.stages[b]
            if tr.kind == "ratio":
                scale, dis = tr.value, cal.disagreement_t * tr.spread * abs(means[b])
                means[b] *= tr.value
            else:
                scale, dis = 1.0, cal.disagreement_t * tr.spread
                means[b] += tr.value
            lo_hw[b] = math.hypot(lo_hw[b] * scale, dis)
            hi_hw[b] = math.hypot(hi_hw[b] * scale, dis)
            dis_sq += dis * dis
        # the total: the base total interval scaled by the total's ratio (it keeps the
        # correlation of the stages' errors - the remainder bucket absorbs what the others
        # miss - which a root-sum-square of the stage intervals would not), widened by the
        # disagreement. Two estimates of the total's disagreement: the spread of the totals
        # each calibration model alone predicts (stage disagreements that cancel in the total,
        # e.g. a coarse clock moving time between adjacent stages, cancel there too; but it
        # rests on n - 1 degrees of freedom), and the root-sum-square of the stages' (more
        # degrees of freedom, but blind to that cancelling: too wide). Their quadratic mean.
        ratio = sum(means.values()) / total_mean if total_mean > 0 else 1.0
        dis_total = cal.disagreement_t * math.sqrt(
            (_total_spread(cal, base_means) ** 2 + dis_sq / cal.disagreement_t ** 2) / 2)
        t_lo = math.hypot(t_lo * ratio, dis_total)
        t_hi = math.hypot(t_hi * ratio, dis_total)
        warnings += cal.warnings

    # 4. another storage setting
    storage = _fitted_storage(file)
    if loading is not None and MODEL_LOADING in means:
        old_lo, old_hi = lo_hw[MODEL_LOADING], hi_hw[MODEL_LOADING]
        storage, note = _reload(file, features, means, lo_hw, hi_hw, loading)
        t_lo = max(t_lo + lo_hw[MODEL_LOADING] - old_lo, 0.0)
        t_hi = max(t_hi + hi_hw[MODEL_LOADING] - old_hi, 0.0)
        if note:
            warnings.append(note)

    stages = {}
    for b in order:
        s = max(means[b], 0.0)
        stages[b] = StagePrediction(s, Interval(min(max(means[b] - lo_hw[b], 0.0), s),
                                                max(means[b] + hi_hw[b], s)))
    total = sum(sp.s for sp in stages.values())
    interval = Interval(max(min(total - t_lo, total), 0.0), max(total + t_hi, total))
    return Prediction(total, interval, stages, warnings, file.interval.level,
                      model=features.name, storage=storage,
                      calibrated_on=list(cal.models) if cal is not None else None)


def _total_spread(cal: Any, base_means: Mapping[str, float]) -> float:
    """Standard deviation of the totals each calibration model's own transfer predicts."""
    totals = []
    for m in cal.models:
        total = 0.0
        for b, mean in base_means.items():
            tr = cal.stages[b]
            v = tr.per_model.get(m, tr.value)
            total += v * mean if tr.kind == "ratio" else mean + v
        totals.append(total)
    return statistics.stdev(totals) if len(totals) > 1 else 0.0


def _fitted_storage(file: StartupModelFile) -> dict[str, Any] | None:
    """The storage setting the prediction's model loading stands for (the model's own)."""
    setting = (file.calibration.environment.get("storage") if file.calibration else None)
    if setting is None and file.storage is not None:
        setting = file.storage.model_dump(exclude_none=True)
    if setting is None:
        return None
    return {**setting, "from": "calibration runs" if file.calibration else "training runs"}


def model_storage(file: StartupModelFile) -> StorageSetting | None:
    """The storage setting the model's loading formula was measured under, if recorded."""
    if file.calibration is not None:
        raw = file.calibration.environment.get("storage")
        return StorageSetting.model_validate(raw) if raw else None
    return file.storage


def _reload(file: StartupModelFile, features: ModelFeatures, means: dict[str, float],
            lo_hw: dict[str, float], hi_hw: dict[str, float],
            loading: LoadingSetting) -> tuple[dict[str, Any], str]:
    """Model loading for another storage setting: fixed part + weight bytes / bandwidth."""
    fitted = model_storage(file)
    fitted_cache = fitted.page_cache if fitted else None
    bandwidth = loading.bandwidth_bps
    how = "--storage-bandwidth"
    if bandwidth is None:
        if loading.page_cache is not None and loading.page_cache == fitted_cache:
            return {**(fitted.model_dump(exclude_none=True) if fitted else {}),
                    "from": "as fitted"}, ""
        if loading.page_cache == "hot":
            bandwidth, how = DEFAULT_PAGE_CACHE_BPS, "default hot page cache"
        else:
            raise ColdscopeError(
                "--page-cache cold needs --storage-bandwidth (the read bandwidth of the storage "
                "the weights come from, e.g. 2GB/s): this model's loading was measured "
                f"with page cache {fitted_cache or 'unknown'}")
    if bandwidth <= 0 or not math.isfinite(bandwidth):
        raise ColdscopeError(f"storage bandwidth must be a positive number, not {bandwidth}")
    spec = file.buckets[MODEL_LOADING]
    fixed = 0.0
    if INTERCEPT in spec.terms:
        fixed = max(spec.coef[spec.terms.index(INTERCEPT)], 0.0)
        tr = file.calibration.stages[MODEL_LOADING] if file.calibration else None
        if tr is not None:
            fixed = fixed * tr.value if tr.kind == "ratio" else max(fixed + tr.value, 0.0)
    old = max(means[MODEL_LOADING], 1e-9)
    new = fixed + features.weight_bytes / bandwidth
    means[MODEL_LOADING] = new
    lo_hw[MODEL_LOADING] *= new / old
    hi_hw[MODEL_LOADING] *= new / old
    cache = loading.page_cache
    setting = {"page_cache": cache, "read_bandwidth_bps": bandwidth, "from": how}
    target = f"page cache {cache}" if cache else "another setting"
    plus = f" plus the fitted formula's fixed {fixed:.2f} s" if fixed else ""
    note = (f"model_loading predicted for {target} from weight bytes / "
            f"{bandwidth / 1e9:.3g} GB/s ({how}){plus}; the model was measured with page cache "
            f"{fitted_cache or 'unknown'}")
    if how == "default hot page cache":
        note += (": the bandwidth is the paper's H100 node (0.122 s/GB); give "
                 "--storage-bandwidth for this machine")
    return setting, note


def _users(file: StartupModelFile, name: str) -> list[str]:
    return [b for b, spec in file.buckets.items() if name in spec.terms]


def _extrapolation(file: StartupModelFile, features: ModelFeatures,
                   settings: Mapping[str, Any]) -> dict[str, float]:
    """Per bucket: the contribution of its terms beyond their training range (seconds)."""
    out: dict[str, float] = {}
    for b, spec in file.buckets.items():
        extra = 0.0
        for t, c in zip(spec.terms, spec.coef, strict=True):
            if t == INTERCEPT or t not in file.feature_ranges:
                continue
            value = term_value(t, features, settings)
            if value is None:
                continue
            lo, hi = file.feature_ranges[t]
            excess = max(value - hi, lo - value, 0.0)
            extra += abs(c) * excess
        if extra:
            out[b] = extra
    return out


def domain_warnings(file: StartupModelFile, features: ModelFeatures,
                    settings: Mapping[str, Any]) -> list[str]:
    """Out-of-domain kind, out-of-range features, incomparable graph sizes, nominal sizes."""
    warnings: list[str] = []
    kinds = file.trained_on.kinds
    if features.kind not in kinds:
        warnings.append(
            f"{features.name} is a {features.kind} model; this startup model was trained on "
            f"{'/'.join(kinds)} models only: out of domain (MoE/hybrid KV-cache "
            "profiling and loading do not scale like dense models)"
        )
    used = sorted({t for spec in file.buckets.values() for t in spec.terms} - {INTERCEPT})
    for name in used:
        value = FEATURES[name].get(features, settings)
        if value is None or name not in file.feature_ranges:
            continue
        lo, hi = file.feature_ranges[name]
        if value < lo * (1 - 1e-9) or value > hi * (1 + 1e-9):
            users = _users(file, name)
            warnings.append(
                f"{name} = {value:.4g} is outside the training range {lo:.4g}-{hi:.4g} "
                f"({FEATURES[name].unit}): the {', '.join(users)} "
                f"formula{'s extrapolate' if len(users) > 1 else ' extrapolates'}, and "
                f"{'their intervals are' if len(users) > 1 else 'its interval is'} widened by "
                "the part beyond the range"
            )
    if "graph_mib" in used:
        trained = file.graph_size_source
        if trained and features.graph_size_source and features.graph_size_source != trained:
            warnings.append(
                f"compiled graph size of {features.name} is {features.graph_size_source}, "
                f"the model was trained on {trained} sizes: they may not be comparable"
            )
    if features.params_source == "nominal":
        warnings.append(f"parameter count of {features.name} is the nominal size; give the "
                        "exact count (params) for a better weight-loading prediction")
    return warnings


def _cv_plus(file: StartupModelFile, features: ModelFeatures,
             settings: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """CV+ intervals: fold predictions -/+ each held-out residual, order statistics."""
    assert file.folds is not None and file.cv_residuals is not None
    fold_means = []
    for fold in file.folds:
        row = {}
        for b, spec in fold.buckets.items():
            values = [_value(file, t, features, settings) for t in spec.terms]
            row[b] = _dot(spec.coef, values)
        fold_means.append(row)
    residuals = file.cv_residuals
    n = len(residuals)
    alpha = 1.0 - file.interval.level
    k_low = max(math.floor(alpha * (n + 1) + 1e-9), 1)
    k_high = min(math.ceil((1 - alpha) * (n + 1) - 1e-9), n)
    out = {}
    for b in [*file.buckets, "total"]:
        lows, highs = [], []
        for r in residuals:
            mean = fold_means[r.fold]
            mu = sum(mean.values()) if b == "total" else mean[b]
            dev = abs(r.total if b == "total" else r.buckets[b])
            lows.append(mu - dev)
            highs.append(mu + dev)
        out[b] = (sorted(lows)[k_low - 1], sorted(highs)[k_high - 1])
    return out


def _ols_intervals(file: StartupModelFile,
                   a: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """OLS prediction intervals; the total's from the cross-bucket covariance (SUR)."""
    sigma, cross = file.residual_cov, file.cross
    within = file.within_cov or {}
    order = list(file.buckets)
    out = {}
    total_mean = var_total = 0.0
    for i, b in enumerate(order):
        spec = file.buckets[b]
        mean = _dot(spec.coef, a[b])
        total_mean += mean
        var = sigma[b][b] * (1.0 + _quad(a[b], spec.xtx_inv, a[b]))
        var += (within.get(b) or {}).get(b, 0.0)
        half = spec.t * math.sqrt(max(var, 0.0))
        out[b] = (mean - half, mean + half)
        for c in order[i:]:
            m = spec.xtx_inv if b == c else cross[f"{b}|{c}"]
            term = sigma[b][c] * (1.0 + _quad(a[b], m, a[c]))
            term += (within.get(b) or {}).get(c, 0.0)
            var_total += term if b == c else 2.0 * term
    half = file.interval.t * math.sqrt(max(var_total, 0.0))
    out["total"] = (total_mean - half, total_mean + half)
    return out


def _dot(x: list[float], y: list[float]) -> float:
    return sum(a * b for a, b in zip(x, y, strict=True))


def _quad(x: list[float], m: list[list[float]], y: list[float]) -> float:
    return sum(x[i] * _dot(m[i], y) for i in range(len(x)))
