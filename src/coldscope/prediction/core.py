"""Predicting with a fitted (or calibrated) startup model: pure Python, no numpy.

Given a ``StartupModelFile`` and a model's features, ``predict`` returns per-bucket seconds,
the total, their prediction intervals and warnings. The steps, in order:

1. the formula serving each bucket (``served``): the one chosen by leave-one-model-out error,
   unless it extrapolates for this model and a candidate of comparable error (not
   significantly worse, ``predict.fit._comparable``) stays closer to the data - the range
   rule, which serves the candidate with the smallest ``hypot(LOMO rmse, contribution beyond
   the training range)``; then the base formulas' intervals:
   classical OLS prediction intervals per bucket ``s +- t sqrt(sigma_ss (1 + a'(X'X)^-1 a))``,
   the total from the cross-bucket residual covariance (every bucket is fitted on the same
   models, so their errors are correlated), or CV+ (jackknife+ with one fold per model) where
   the training set is large enough;
2. extrapolation: a term whose value lies outside its training range widens its bucket's
   interval by that term's contribution beyond the range (``|coef| x excess``) on both sides,
   so a prediction far from the data is visibly uncertain rather than confidently wrong -
   except model loading's weight term where the training data show one marginal rate across
   its sizes (``LoadingRate.constant``): there it widens by the rate's uncertainty only;
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
from typing import TYPE_CHECKING, Any, Literal

from coldscope.core.interval import Interval
from coldscope.core.stages import MODEL_LOADING
from coldscope.prediction.formulas import FEATURES, INTERCEPT, formula_text, term_value
from coldscope.prediction.modelfile import StartupModelFile, StorageSetting
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.prediction.features import ModelFeatures
#: Model loading from a hot page cache when no bandwidth is given: the paper's figure 13 case 0
#: (DRAM page cache, H100 node) measured 0.122 s per GB, i.e. about 8.2 GB/s.
DEFAULT_PAGE_CACHE_BPS = 1e9 / 0.122
#: Bounds of the settings a prediction is asked for (``predict`` and serve's /v1/predict), so
#: that every answer stays finite: CUDA-graph capture sizes (vLLM captures at most a few
#: hundred), and a storage read bandwidth of 1 MB/s to 10 TB/s.
MAX_CAPTURE_SIZES = 100_000
MIN_STORAGE_BPS = 1e6
MAX_STORAGE_BPS = 1e13


@dataclass(frozen=True)
class Observation:
    """One measured start-up: bucket seconds (None = unknown) and time to ready (seconds)."""

    model: str
    features: ModelFeatures
    buckets: Mapping[str, float | None]
    total_s: float


def _rounded(interval: Interval) -> dict[str, float]:
    """An interval as ``predict --json`` writes it: both ends to 0.1 ms."""
    return {"low": round(interval.low, 4), "high": round(interval.high, 4)}


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


@dataclass(frozen=True)
class Served:
    """The formula serving one bucket for one model: terms, coefficients, and why.

    ``candidate``: its index in the bucket's candidates when the range rule switched to it,
    else None (the LOMO choice, ``BucketFormula.terms``). ``beyond_s``: its contribution
    beyond the training range of its inputs (seconds).
    """

    terms: list[str]
    coef: list[float]
    formula: str
    candidate: int | None
    beyond_s: float
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"formula": self.formula, "terms": list(self.terms),
                "switched": self.candidate is not None,
                "beyond_range_s": round(self.beyond_s, 4), "why": self.why}


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
    formulas: dict[str, Served] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of ``coldscope predict --json`` (and ``serve``'s /v1/predict)."""
        return {
            "model": self.model,
            "total_s": round(self.total_s, 4),
            "interval": _rounded(self.interval),
            "level": self.level,
            "stages": {k: {"s": round(v.s, 4), "interval": _rounded(v.interval)}
                       for k, v in self.stages.items()},
            "storage": self.storage,
            "calibrated_on": self.calibrated_on,
            "formulas": ({b: v.to_dict() for b, v in self.formulas.items()}
                         if self.formulas is not None else None),
            "warnings": list(self.warnings),
        }


# ---------------------------------------------------------------------------------------------


def settings_of(file: StartupModelFile, **overrides: Any) -> dict[str, Any]:
    merged = dict(file.settings or {})
    merged.update({k: v for k, v in overrides.items() if v is not None})
    return merged


def term_values(file: StartupModelFile, features: ModelFeatures, settings: Mapping[str, Any],
                missing: set[str] | None = None,
                formulas: Mapping[str, Served] | None = None) -> dict[str, list[float]]:
    """Each bucket's term values (of ``formulas``, else the LOMO choices); an unknown feature
    takes its training median (reported)."""
    return {b: [_value(file, t, features, settings, missing)
                for t in (formulas[b].terms if formulas else spec.terms)]
            for b, spec in file.buckets.items()}


def served(file: StartupModelFile, features: ModelFeatures,
           **settings: Any) -> dict[str, Served]:
    """The formula that serves each bucket for ``features``, and why (the range rule).

    Each bucket's LOMO choice serves unless it extrapolates (a term outside its training
    range); then every candidate of comparable LOMO error (``Candidate.comparable``, with its
    own CV+ ingredients saved) competes on ``hypot(lomo_rmse, beyond)``, ``beyond`` being its
    contribution beyond the training range (``|coef| x excess``, summed over its terms): the
    part of a prediction the data do not support, counted as error. Inside the data every
    ``beyond`` is 0 and the LOMO choice wins.
    """
    return _served(file, features, settings_of(file, **settings))


def _served(file: StartupModelFile, features: ModelFeatures,
            settings: Mapping[str, Any]) -> dict[str, Served]:
    rule = file.interval.method == "cv+"
    out: dict[str, Served] = {}
    for b, spec in file.buckets.items():
        base_beyond, base_why = _beyond(file, b, spec.terms, spec.coef, features, settings)
        best = Served(list(spec.terms), list(spec.coef),
                      formula_text(b, spec.terms, spec.coef), None, base_beyond, "")
        best_score = math.hypot(spec.lomo_rmse, base_beyond)
        rivals = []
        if rule and base_beyond > 0:
            for k, c in enumerate(spec.candidates):
                if not c.comparable or c.coef is None or c.folds is None \
                        or c.terms == spec.terms:
                    continue
                beyond, _ = _beyond(file, b, c.terms, c.coef, features, settings)
                score = math.hypot(c.lomo_rmse, beyond)
                rivals.append(("+".join(c.terms), c.lomo_rmse, beyond))
                if score < best_score - 1e-9:
                    best_score = score
                    best = Served(list(c.terms), list(c.coef),
                                  formula_text(b, c.terms, c.coef), k, beyond, "")
        if base_beyond == 0:
            why = (f"lowest leave-one-model-out error ({spec.lomo_rmse:.3f} s rmse); its "
                   "inputs are inside the training range")
        elif best.candidate is None:
            why = (f"lowest leave-one-model-out error ({spec.lomo_rmse:.3f} s rmse); it "
                   f"extrapolates ({base_why}: {base_beyond:.2f} s beyond the range)")
            why += ("; no candidate of comparable error stays closer to the data" if rivals
                    else "; no candidate of comparable error to switch to" if rule
                    else "; the range rule needs CV+ intervals (at least "
                         "9 training runs)")
        else:
            c = spec.candidates[best.candidate]
            why = (f"range rule: the LOMO choice {'+'.join(spec.terms)} "
                   f"({spec.lomo_rmse:.3f} s rmse) extrapolates ({base_why}: "
                   f"{base_beyond:.2f} s beyond the range); {'+'.join(c.terms)} has comparable "
                   f"error ({c.lomo_rmse:.3f} s rmse, not significantly worse) and "
                   + (f"only {best.beyond_s:.2f} s beyond the range" if best.beyond_s > 0
                      else "its inputs inside the training range"))
        out[b] = Served(best.terms, best.coef, best.formula, best.candidate, best.beyond_s, why)
    return out


def _beyond(file: StartupModelFile, bucket: str, terms: list[str], coef: list[float],
            features: ModelFeatures, settings: Mapping[str, Any]) -> tuple[float, str]:
    """A formula's contribution beyond the training range (seconds), and which inputs.

    ``|coef| x excess`` per term outside its range - the part of the prediction the data do
    not support - except model loading's weight term where the training data keep one
    marginal rate across their sizes (``LoadingRate.constant``): there only the rate's
    uncertainty, ``t x se x excess`` of the nearer half of the training sizes. The same
    quantity picks the serving formula (``served``) and widens the interval.
    """
    total = 0.0
    notes = []
    for t, c in zip(terms, coef, strict=True):
        if t == INTERCEPT or t not in file.feature_ranges:
            continue
        value = term_value(t, features, settings)
        if value is None:
            continue
        lo, hi = file.feature_ranges[t]
        excess = max(value - hi, lo - value, 0.0)
        if excess <= 0:
            continue
        if _rate_holds(file, bucket, t):
            rate = file.loading_rate
            assert rate is not None
            total += rate.t * (rate.upper_se if value > hi else rate.lower_se) * excess
        else:
            total += abs(c) * excess
        notes.append(f"{t} = {value:.4g} outside {lo:.4g}-{hi:.4g}")
    return total, ", ".join(notes)


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
    """Each base bucket's terms and their contributions in seconds (they sum to the bucket),
    of the formula that serves it for ``features`` (``served`` says which and why)."""
    merged = settings_of(file, **settings)
    formulas = _served(file, features, merged)
    values = term_values(file, features, merged, set(), formulas)
    return {b: {t: c * v for t, c, v in zip(f.terms, f.coef, values[b], strict=True)}
            for b, f in formulas.items()}


def predict(file: StartupModelFile, features: ModelFeatures, capture_sizes: int | None = None,
            loading: LoadingSetting | None = None) -> Prediction:
    """Per-bucket seconds, total, and their ``level`` prediction intervals (see module doc)."""
    if capture_sizes is not None and not 0 <= capture_sizes <= MAX_CAPTURE_SIZES:
        raise ColdscopeError(f"capture sizes must be a whole number in 0-{MAX_CAPTURE_SIZES}")
    settings = settings_of(file, capture_sizes=capture_sizes)
    order = list(file.buckets)
    missing: set[str] = set()
    formulas = _served(file, features, settings)
    a = term_values(file, features, settings, missing, formulas)
    means = {b: _dot(formulas[b].coef, a[b]) for b in order}
    if file.interval.method == "cv+":
        intervals = _cv_plus(file, features, settings, formulas)
    else:
        intervals = _ols_intervals(file, a)
    # half-widths below / above each mean (the interval methods centre differently)
    lo_hw = {b: max(means[b] - intervals[b][0], 0.0) for b in order}
    hi_hw = {b: max(intervals[b][1] - means[b], 0.0) for b in order}
    total_mean = sum(means.values())
    t_lo = max(total_mean - intervals["total"][0], 0.0)
    t_hi = max(intervals["total"][1] - total_mean, 0.0)

    warnings = [f"{name} ({FEATURES[name].unit}) is unknown for {features.name}: the "
                f"training median was used, so the {', '.join(_users(file, name, formulas))} "
                "prediction is only typical" for name in sorted(missing)]
    warnings += domain_warnings(file, features, settings, formulas)
    warnings += [f"{b}: {f.why}" for b, f in formulas.items() if f.candidate is not None]

    # 2. extrapolation widens
    extra = _extrapolation(file, features, settings, formulas)
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
        stages[b] = StagePrediction(s, Interval(low=min(max(means[b] - lo_hw[b], 0.0), s),
                                                high=max(means[b] + hi_hw[b], s)))
    total = sum(sp.s for sp in stages.values())
    interval = Interval(low=max(min(total - t_lo, total), 0.0), high=max(total + t_hi, total))
    return Prediction(total, interval, stages, warnings, file.interval.level,
                      model=features.name, storage=storage,
                      calibrated_on=list(cal.models) if cal is not None else None,
                      formulas=formulas)


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
    if not MIN_STORAGE_BPS <= bandwidth <= MAX_STORAGE_BPS:  # NaN fails too
        raise ColdscopeError(f"storage bandwidth must be {MIN_STORAGE_BPS:.0e}-"
                             f"{MAX_STORAGE_BPS:.0e} bytes/s (1 MB/s-10 TB/s), not {bandwidth}")
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


def _users(file: StartupModelFile, name: str,
           formulas: Mapping[str, Served] | None = None) -> list[str]:
    return [b for b, spec in file.buckets.items()
            if name in (formulas[b].terms if formulas else spec.terms)]


def _rate_holds(file: StartupModelFile, bucket: str, term: str) -> bool:
    rate = file.loading_rate
    return (bucket == MODEL_LOADING and term == "weight_gb" and rate is not None
            and rate.constant and file.calibration is None)


def _extrapolation(file: StartupModelFile, features: ModelFeatures,
                   settings: Mapping[str, Any],
                   formulas: Mapping[str, Served] | None = None) -> dict[str, float]:
    """Per bucket: the contribution of its formula beyond the training range (``_beyond``)."""
    out: dict[str, float] = {}
    for b, spec in file.buckets.items():
        terms, coef = (formulas[b].terms, formulas[b].coef) if formulas else (spec.terms,
                                                                               spec.coef)
        extra, _ = _beyond(file, b, terms, coef, features, settings)
        if extra:
            out[b] = extra
    return out


def domain_warnings(file: StartupModelFile, features: ModelFeatures,
                    settings: Mapping[str, Any],
                    formulas: Mapping[str, Served] | None = None) -> list[str]:
    """Out-of-domain kind, out-of-range features, incomparable graph sizes, nominal sizes."""
    warnings: list[str] = []
    kinds = file.trained_on.kinds
    if features.kind not in kinds:
        warnings.append(
            f"{features.name} is a {features.kind} model; this startup model was trained on "
            f"{'/'.join(kinds)} models only: out of domain (MoE/hybrid KV-cache "
            "profiling and loading do not scale like dense models)"
        )
    used = sorted({t for b, spec in file.buckets.items()
                   for t in (formulas[b].terms if formulas else spec.terms)} - {INTERCEPT})
    for name in used:
        value = FEATURES[name].get(features, settings)
        if value is None or name not in file.feature_ranges:
            continue
        lo, hi = file.feature_ranges[name]
        if value < lo * (1 - 1e-9) or value > hi * (1 + 1e-9):
            users = _users(file, name, formulas)
            rate = file.loading_rate
            if MODEL_LOADING in users and _rate_holds(file, MODEL_LOADING, name) \
                    and rate is not None:
                users.remove(MODEL_LOADING)
                warnings.append(
                    f"{name} = {value:.4g} is outside the training range {lo:.4g}-{hi:.4g} "
                    f"({FEATURES[name].unit}): model_loading follows the marginal rate the "
                    f"training data keep across their sizes ({rate.lower_rate:.4g} s/GB on "
                    f"the smaller half, {rate.upper_rate:.4g} on the larger), and its interval "
                    "is widened by that rate's uncertainty beyond the range")
                if not users:
                    continue
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


def _cv_plus(file: StartupModelFile, features: ModelFeatures, settings: Mapping[str, Any],
             formulas: Mapping[str, Served] | None = None) -> dict[str, tuple[float, float]]:
    """CV+ intervals: fold predictions -/+ each held-out residual, order statistics.

    A bucket the range rule switched uses its candidate's fold coefficients and held-out
    residuals; the total's residuals swap that bucket's part (the bucket residuals of a run
    add up to its total residual, ``unattributed`` being the remainder).
    """
    assert file.folds is not None and file.cv_residuals is not None
    swapped = {b: file.buckets[b].candidates[f.candidate]
               for b, f in (formulas or {}).items() if f.candidate is not None}
    fold_means = []
    for i, fold in enumerate(file.folds):
        row = {}
        for b, spec in fold.buckets.items():
            terms, coef = spec.terms, spec.coef
            if b in swapped:
                cand = swapped[b]
                assert cand.folds is not None
                terms, coef = cand.terms, cand.folds[i]
            values = [_value(file, t, features, settings) for t in terms]
            row[b] = _dot(coef, values)
        fold_means.append(row)
    residuals = file.cv_residuals
    if swapped:
        swapped_res = []
        for j, r in enumerate(residuals):
            buckets = dict(r.buckets)
            total = r.total
            for b, cand in swapped.items():
                assert cand.cv_residuals is not None
                total += cand.cv_residuals[j] - buckets[b]
                buckets[b] = cand.cv_residuals[j]
            swapped_res.append(r.model_copy(update={"total": total, "buckets": buckets}))
        residuals = swapped_res
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
