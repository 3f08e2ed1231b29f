"""``StartupModelFile``: the startup model JSON file, typed and versioned.

Every startup model is written and read through this pydantic model, so a hand-edited,
truncated or hostile file fails with one line naming the field, never deep inside a
prediction (a KeyError, an overflow, a 500 from ``serve``); and ``coldscope schema
startup-model`` publishes its JSON Schema. Version 2 added the storage setting the model was
fitted under and the calibration record; version-1 files (no such fields) still load.

What a file must hold to load (``fit`` and ``calibrate`` only ever write such files):

* **shape**: unknown keys are refused, as in every coldscope record; buckets are start-up
  stage names (``core.stages.BUCKETS``; ``total`` is not one), formula terms are the intercept
  or known features (``formulas.FEATURES``), each once; every bucket has its row and column in
  ``residual_cov`` (and ``within_cov``), every pair its ``cross`` matrix of the right shape,
  every fold and held-out residual every bucket, every used term its training range and median;
  counts agree (one fold per training model, one held-out residual per training run);
* **numbers**: JSON numbers, not strings or booleans, finite and at most ``MAX_MAGNITUDE`` in
  size; whole numbers where they count something;
* **ranges**: a feature's training range is ``low <= high``, both sizes (>= 0), its median
  inside it; an interval level in (0, 1); correlations in [-1, 1]; a held-out interval finite
  with ``low <= high`` (or null, where the fit made none);
* **signs**, from what each quantity is. Variances, standard deviations, RMS errors and
  Student t's are >= 0. A calibration ratio is seconds on the new machine over seconds on the
  base one, >= 0 (an offset may have either sign). A bucket's formula is a fixed cost plus
  per-unit costs times sizes (seconds per GB read, per layer compiled, per MiB of graphs or
  tokenizer, per captured layer or GB), every size >= 0, and a larger model does not do a
  stage's work sooner. So a stage's mean duration (an intercept-only formula) is >= 0, and so
  is the slope of a formula with one size term: least squares gives it the sign of the
  stage's covariance with that size. With two size terms or more each slope is a partial
  effect: the sizes grow together (layers and weights, say), and one slope may be negative
  while the formula still grows with the model, so those are not constrained; nor is an
  intercept beside a size term (where the line meets size zero, which the data need not
  reach), nor ``unattributed`` (the remainder of the measured total after the stages, which
  overlapping stages can make negative). A fit's estimate of a nil cost is negative about half
  the time, so a constrained coefficient is refused only where its sign cannot be noise and it
  takes more than ``NEGLIGIBLE_S`` off its bucket at the top of its term's training range: in
  the chosen formula, where a nil cost would put it this far below zero with a chance under
  ``SIGN_ALPHA`` (Student's t of ``coef / se``, ``se = residual_sd x sqrt(xtx_inv[i][i])``, at
  the bucket's ``n_models - terms`` degrees of freedom); in a candidate or a fold model (no
  standard errors kept), where what it takes off the bucket exceeds ``SIGN_MULTIPLE`` times
  the bucket's error (the larger of its residual sd and leave-one-model-out RMSE, a
  candidate's own if larger; for a fold, the largest of the bucket's).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from coldscope.core.interval import Interval
from coldscope.core.stages import BUCKETS, MODEL_LOADING, UNATTRIBUTED
from coldscope.prediction.formulas import FEATURES, INTERCEPT, MAX_CAPTURE_SIZES, t_tail
from coldscope.util.errors import ColdscopeError, one_line

SCHEMA_VERSION: Literal[2] = 2
FILE_KIND: Literal["coldscope-startup-model"] = "coldscope-startup-model"

#: The largest magnitude of any number in a startup model file. No fitted quantity comes near
#: it (start-up seconds and per-unit costs are far below; ``xtx_inv`` grows as one over the
#: square of a feature's spread, so 1e12 takes a spread of a millionth of a unit), and it keeps
#: every product a prediction or a calibration forms (a coefficient times a term value, a
#: quadratic form, a squared spread) finite.
MAX_MAGNITUDE = 1e12
#: The largest count (models, runs, degrees of freedom) a file may state.
MAX_COUNT = 10**9
#: Seconds below any clock coldscope reads: a negative contribution this small is rounding.
NEGLIGIBLE_S = 1e-3
#: The chance below which a chosen formula's negative coefficient cannot be a nil cost's noise:
#: small enough for the ~1,000 such tests of one fit of 12 models (``fit`` validates every
#: fold model, and each fold's own) to refuse an honest fit with a chance under 1e-6. It still
#: catches a flipped sign of every one-size-term cost the paper's data measure (t = 32 to 388,
#: where 22 is needed at their 11 degrees of freedom).
SIGN_ALPHA = 1e-10
#: How many times its bucket's error a candidate's or fold model's negative coefficient may
#: take off the bucket before it cannot be noise: in 620 fits of nil costs on noisy synthetic
#: campaigns (4 to 12 models) the worst of 4,646 negative coefficients reaches 45 (4 models).
SIGN_MULTIPLE = 100.0


def _whole(value: Any) -> Any:
    """A JSON whole number, not a boolean, a string or a float that happens to be whole."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"must be a whole number, not {_show(value)}")
    return int(value)


def _show(value: Any) -> str:
    """A value as an error message quotes it: short whatever it is."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


Number = Annotated[float, Field(strict=True, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
NonNegative = Annotated[float, Field(strict=True, ge=0, le=MAX_MAGNITUDE)]
Positive = Annotated[float, Field(strict=True, gt=0, le=MAX_MAGNITUDE)]
Count = Annotated[int, BeforeValidator(_whole), Field(ge=0, le=MAX_COUNT)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _check_terms(terms: Sequence[str]) -> None:
    unknown = [t for t in terms if t != INTERCEPT and t not in FEATURES]
    if unknown:
        raise ValueError(f"unknown term {_show(unknown[0])} (the intercept {INTERCEPT!r} or a "
                         f"feature: {', '.join(FEATURES)})")
    if len(set(terms)) != len(terms):
        raise ValueError(f"a term appears twice in {_show(list(terms))}")


class StorageSetting(_Record):
    """Where the weights came from during the measured start-ups.

    ``page_cache``: ``hot`` (weights already in the OS page cache), ``cold`` (read from the
    storage device), ``mixed`` (a table whose rows differ). ``seconds_per_gb``: the measured
    model-loading seconds per GB of weights under this setting, when known.
    """

    page_cache: Literal["hot", "cold", "mixed"] | None = None
    kind: str | None = Field(None, description="storage kind, e.g. nvme, ssd, nfs, dram")
    read_bandwidth_bps: Annotated[float, Field(strict=True)] | None = Field(
        None, gt=0, description="bytes per second")
    seconds_per_gb: NonNegative | None = None
    source: str = Field("", description="how the setting is known")


class TrainedOn(_Record):
    source: str
    models: list[str]
    replicates: list[Annotated[Count, Field(ge=1)]]
    n_models: Count = Field(ge=1)
    kinds: list[Literal["dense", "moe", "hybrid"]] = Field(min_length=1)
    excluded: list[str]
    selection: str

    @model_validator(mode="after")
    def _counts(self) -> TrainedOn:
        if len(self.models) != self.n_models or len(self.replicates) != self.n_models:
            raise ValueError(f"{self.n_models} models but {len(self.models)} names and "
                             f"{len(self.replicates)} replicate counts")
        if len(set(self.models)) != len(self.models):
            raise ValueError("a training model is named twice")
        return self


class IntervalSpec(_Record):
    """How the file's prediction intervals are made (not an interval: each prediction's is an
    ``Interval``): their coverage ``level``, Student's ``t`` quantile at ``dof`` degrees of
    freedom, and the ``method``, ``ols`` (classical prediction intervals) or ``cv+``
    (jackknife+ over the leave-one-model-out folds)."""

    level: Number = Field(gt=0, lt=1)
    t: Positive
    dof: Count = Field(ge=1)
    method: Literal["ols", "cv+"]
    description: str = ""


class Candidate(_Record):
    """One candidate formula of a bucket and how it validated.

    ``comparable``: its leave-one-model-out error is not significantly worse than the chosen
    formula's (one-sided paired t-test on the held-out squared errors, 5 %), so the range rule
    may serve it where the chosen one extrapolates; ``coef`` is then its fit on every model and
    ``folds`` / ``cv_residuals`` its CV+ ingredients (one coefficient vector per LOMO fold, in
    the file's fold order; one held-out residual per training run, in ``cv_residuals`` order).
    ``extrap_*``: its error on the extrapolation folds (the deepest, largest and smallest
    training model held out in turn, the formula refitted on the rest).
    """

    terms: list[str] = Field(min_length=1)
    lomo_rmse: NonNegative
    lomo_max_abs: NonNegative
    comparable: bool | None = None
    extrap_rmse: NonNegative | None = None
    extrap_max_abs: NonNegative | None = None
    coef: list[Number] | None = None
    folds: list[list[Number]] | None = None
    cv_residuals: list[Number] | None = None

    @field_validator("terms")
    @classmethod
    def _terms(cls, terms: list[str]) -> list[str]:
        _check_terms(terms)
        return terms


class BucketFormula(_Record):
    """One bucket's fitted formula ``sum(coef_i x term_i)`` and its interval ingredients."""

    terms: list[str] = Field(min_length=1)
    coef: list[Number]
    formula: str
    t: Positive
    xtx_inv: list[list[Number]]
    residual_sd: NonNegative
    lomo_rmse: NonNegative
    candidates: list[Candidate]
    pcc: dict[str, Number | None]
    mean_s: Number

    @field_validator("terms")
    @classmethod
    def _terms(cls, terms: list[str]) -> list[str]:
        _check_terms(terms)
        return terms

    @field_validator("pcc")
    @classmethod
    def _correlations(cls, pcc: dict[str, float | None]) -> dict[str, float | None]:
        for name, r in pcc.items():
            if name not in FEATURES:
                raise ValueError(f"{_show(name)} is not a feature")
            if r is not None and abs(r) > 1 + 1e-9:
                raise ValueError(f"{name}: a correlation lies in [-1, 1], not {r:g}")
        return pcc

    @model_validator(mode="after")
    def _shapes(self) -> BucketFormula:
        p = len(self.terms)
        if len(self.coef) != p or len(self.xtx_inv) != p or any(len(r) != p for r in self.xtx_inv):
            raise ValueError(f"terms, coef and xtx_inv disagree in length ({p} terms)")
        for k, c in enumerate(self.candidates):
            if c.coef is not None and len(c.coef) != len(c.terms):
                raise ValueError(f"candidates[{k}] has {len(c.coef)} coefficients for "
                                 f"{len(c.terms)} terms")
        return self


class FoldBucket(_Record):
    terms: list[str] = Field(min_length=1)
    coef: list[Number]

    @field_validator("terms")
    @classmethod
    def _terms(cls, terms: list[str]) -> list[str]:
        _check_terms(terms)
        return terms

    @model_validator(mode="after")
    def _shape(self) -> FoldBucket:
        if len(self.coef) != len(self.terms):
            raise ValueError(f"{len(self.coef)} coefficients for {len(self.terms)} terms")
        return self


class Fold(_Record):
    left_out: str
    buckets: dict[str, FoldBucket]


class CvResidual(_Record):
    fold: Count
    total: Number
    buckets: dict[str, Number]


class LomoStage(_Record):
    actual_s: Number
    predicted_s: Number


class LomoModel(_Record):
    actual_s: Number
    predicted_s: Number
    error_s: Number
    stages: dict[str, LomoStage]
    interval: Interval | None = None
    inside: bool | None = None

    @field_validator("interval")
    @classmethod
    def _finite(cls, interval: Interval | None) -> Interval | None:
        if interval is not None and not (
                math.isfinite(interval.low) and math.isfinite(interval.high)
                and -MAX_MAGNITUDE <= interval.low <= interval.high <= MAX_MAGNITUDE):
            raise ValueError(f"a held-out interval is finite with low <= high, not "
                             f"{interval.low:g}-{interval.high:g}")
        return interval


class ExtrapolationModel(LomoModel):
    """One extrapolation fold: a training extreme held out, the whole fit redone on the rest."""

    extremes: list[str] = Field(description="deepest, largest and/or smallest")
    stages_inside: str | None = Field(None, description="stages inside their interval, k/n")
    served: dict[str, str] = Field(default_factory=dict,
                                   description="the formula that served each bucket")


class LoadingRate(_Record):
    """Does model loading keep one marginal rate (seconds per GB) across the training sizes?

    Least squares ``loading = a + rate x weight_gb`` on the smaller and on the larger half of the
    training models; the rate is ``constant`` when the two agree within ``t`` times their
    combined standard error. Then a model beyond the weight range is predicted along that rate
    and its interval widens by ``t x se x excess`` of the nearer half instead of by the whole
    contribution beyond the range.
    """

    lower_rate: Number
    lower_se: NonNegative
    lower_models: list[str]
    upper_rate: Number
    upper_se: NonNegative
    upper_models: list[str]
    t: Positive
    constant: bool


class LomoTotal(_Record):
    mse: NonNegative
    rmse: NonNegative
    max_abs: NonNegative
    coverage: str | None = None


class Lomo(_Record):
    total: LomoTotal
    per_model: dict[str, LomoModel]


class Extrapolation(_Record):
    total: LomoTotal
    per_model: dict[str, ExtrapolationModel]


class StageTransfer(_Record):
    """How one bucket moves from the base machine to the calibrated one.

    ``ratio``: calibrated = value x base prediction (size-driven stages: the base formula has a
    size term); ``offset``: calibrated = base prediction + value (fixed costs). ``per_model``:
    the value each calibration model alone implies; ``spread``: their standard deviation (0 with
    one model), which widens the intervals. A ratio is seconds over seconds, so >= 0.
    """

    kind: Literal["ratio", "offset"]
    value: Number
    per_model: dict[str, Number]
    spread: NonNegative
    identified: bool = True
    note: str = ""

    @model_validator(mode="after")
    def _sign(self) -> StageTransfer:
        if self.kind == "ratio":
            negative = [v for v in (self.value, *self.per_model.values()) if v < 0]
            if negative:
                raise ValueError(f"a ratio (seconds on the new machine over seconds on the "
                                 f"base one) cannot be negative: {negative[0]:g}")
        return self


class Calibration(_Record):
    """What a calibrated model was calibrated on, and the per-bucket transfer."""

    base_source: str = Field(description="the base model file or its training source")
    base_environment: dict[str, Any]
    base_storage: StorageSetting | None = None
    source: str = Field(description="where the calibration runs came from")
    models: list[str] = Field(min_length=1)
    replicates: list[Annotated[Count, Field(ge=1)]]
    environment: dict[str, Any]
    stages: dict[str, StageTransfer]
    disagreement_t: Positive = Field(description="multiplier of the spread in intervals")
    warnings: list[str]

    @model_validator(mode="after")
    def _consistent(self) -> Calibration:
        if len(self.replicates) != len(self.models):
            raise ValueError(f"{len(self.models)} calibration models but "
                             f"{len(self.replicates)} replicate counts")
        for b, transfer in self.stages.items():
            strangers = sorted(set(transfer.per_model) - set(self.models))
            if strangers:
                raise ValueError(f"stages.{b}.per_model names {_show(strangers[0])}, not a "
                                 "calibration model")
        storage = self.environment.get("storage")
        if storage is not None:
            try:
                StorageSetting.model_validate(storage)
            except ValidationError as exc:
                raise ValueError(one_line(exc, "environment.storage")) from None
        return self


class StagePredictionOut(_Record):
    s: float = Field(ge=0, description="predicted seconds")
    interval: Interval


class ServedFormula(_Record):
    """The formula that served one bucket of a prediction, and why (the range rule)."""

    formula: str
    terms: list[str]
    switched: bool = Field(description="the range rule replaced the LOMO choice")
    beyond_range_s: float = Field(ge=0, description="its contribution beyond the training "
                                                    "range of its inputs (seconds)")
    why: str


class PredictionReport(_Record):
    """What ``coldscope predict --json`` prints and ``serve``'s POST /v1/predict returns."""

    model: str
    total_s: float = Field(ge=0)
    interval: Interval
    level: float = Field(gt=0, lt=1)
    stages: dict[str, StagePredictionOut]
    storage: dict[str, Any] | None = Field(
        None, description="the storage setting model_loading was predicted for")
    calibrated_on: list[str] | None = Field(
        None, description="the calibration models, for a calibrated startup model")
    formulas: dict[str, ServedFormula] | None = Field(
        None, description="per bucket, the formula that served it and why")
    warnings: list[str]


def _unknown(names: Iterable[str], known: Iterable[str], what: str) -> None:
    """Refuse the first of ``names`` not among ``known``."""
    allowed = set(known)
    for name in names:
        if name not in allowed:
            raise ValueError(f"{_show(name)} is not {what}")


def _same_keys(where: str, keys: Iterable[str], expected: Sequence[str]) -> None:
    """``keys`` must be exactly ``expected``: the missing one or the stranger is named."""
    have = set(keys)
    for name in expected:
        if name not in have:
            raise ValueError(f"{where} lacks {name}")
    strangers = sorted(have - set(expected))
    if strangers:
        raise ValueError(f"{where} has {_show(strangers[0])}, which is not a bucket of this "
                         "model")


class StartupModelFile(_Record):
    """The startup model JSON file (``coldscope fit`` / ``coldscope calibrate`` write it);
    what it must hold to load is the module doc's list."""

    kind: Literal["coldscope-startup-model"] = FILE_KIND
    schema_version: Literal[2] = SCHEMA_VERSION
    created_by: str
    trained_on: TrainedOn
    environment: dict[str, Any]
    settings: dict[str, Any]
    storage: StorageSetting | None = None
    graph_size_source: str | None = None
    interval: IntervalSpec
    buckets: dict[str, BucketFormula] = Field(min_length=1)
    residual_cov: dict[str, dict[str, Number]]
    within_cov: dict[str, dict[str, Number]] | None = None
    cross: dict[str, list[list[Number]]]
    feature_ranges: dict[str, tuple[NonNegative, NonNegative]]
    feature_medians: dict[str, NonNegative]
    lomo: Lomo | None = None
    extrapolation: Extrapolation | None = None
    loading_rate: LoadingRate | None = None
    folds: list[Fold] | None = None
    cv_residuals: list[CvResidual] | None = None
    calibration: Calibration | None = None

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """Version 1 (before storage and calibration) reads as version 2."""
        if isinstance(data, dict) and data.get("schema_version") == 1:
            data = {**data, "schema_version": 2}
            for entry in ((data.get("lomo") or {}).get("per_model") or {}).values():
                if isinstance(entry, dict) and isinstance(entry.get("interval"), list) \
                        and len(entry["interval"]) == 2:
                    entry["interval"] = {"low": entry["interval"][0],
                                         "high": entry["interval"][1]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _counts_first(cls, data: Any) -> Any:
        """Refuse folds or held-out residuals out of proportion to the training set before
        validating them one by one: a file of a million residuals is refused at once."""
        if not isinstance(data, dict) or not isinstance(data.get("trained_on"), dict):
            return data
        replicates = data["trained_on"].get("replicates")
        if not isinstance(replicates, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) for r in replicates):
            return data  # the field check names what is wrong
        for key, expected, per in (("folds", len(replicates), "model"),
                                   ("cv_residuals", sum(replicates), "run")):
            entries = data.get(key)
            if isinstance(entries, list) and len(entries) != expected:
                raise ValueError(f"{key}: {len(entries)} for {expected} training {per}s "
                                 f"(one per {per})")
        return data

    @field_validator("buckets")
    @classmethod
    def _bucket_names(cls, buckets: dict[str, BucketFormula]) -> dict[str, BucketFormula]:
        _unknown(buckets, BUCKETS, f"a start-up bucket (the buckets are {', '.join(BUCKETS)})")
        return buckets

    @field_validator("settings")
    @classmethod
    def _settings(cls, settings: dict[str, Any]) -> dict[str, Any]:
        _unknown(settings, ["capture_sizes"], "an engine setting a formula uses (capture_sizes)")
        sizes = settings.get("capture_sizes")
        if sizes is not None and (isinstance(sizes, bool) or not isinstance(sizes, int)
                                  or not 0 <= sizes <= MAX_CAPTURE_SIZES):
            raise ValueError(f"capture_sizes is a whole number from 0 to {MAX_CAPTURE_SIZES}, "
                             f"not {_show(sizes)}")
        return settings

    @field_validator("feature_ranges")
    @classmethod
    def _ranges(cls, ranges: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        _unknown(ranges, FEATURES, "a feature")
        for name, (low, high) in ranges.items():
            if low > high:
                raise ValueError(f"{name}: the low end {low:g} is above the high end {high:g}")
        return ranges

    @field_validator("feature_medians")
    @classmethod
    def _medians(cls, medians: dict[str, float]) -> dict[str, float]:
        _unknown(medians, FEATURES, "a feature")
        return medians

    @model_validator(mode="after")
    def _consistent(self) -> StartupModelFile:
        names = list(self.buckets)
        self._check_covariances(names)
        self._check_features()
        self._check_folds(names)
        self._check_signs()
        if self.loading_rate is not None and MODEL_LOADING not in self.buckets:
            raise ValueError(f"loading_rate: the model has no {MODEL_LOADING} bucket")
        if self.calibration is not None:
            _same_keys("calibration.stages", self.calibration.stages, names)
        return self

    def _check_covariances(self, names: list[str]) -> None:
        for field, cov in (("residual_cov", self.residual_cov), ("within_cov", self.within_cov)):
            if cov is None:
                continue
            _same_keys(field, cov, names)
            for b in names:
                _same_keys(f"{field}.{b}", cov[b], names)
                if cov[b][b] < 0:
                    raise ValueError(f"{field}.{b}.{b} is a variance, not {cov[b][b]:g}")
        pairs = [f"{b}|{c}" for b in names for c in names if b != c]
        for key in pairs:
            if key not in self.cross:
                raise ValueError(f"cross lacks {key}")
        strangers = sorted(set(self.cross) - set(pairs))
        if strangers:
            raise ValueError(f"cross has {_show(strangers[0])}, which is not a pair of this "
                             "model's buckets")
        for key in pairs:
            b, c = key.split("|")
            m = self.cross[key]
            rows, cols = len(self.buckets[b].terms), len(self.buckets[c].terms)
            if len(m) != rows or any(len(r) != cols for r in m):
                raise ValueError(f"cross.{key} is not {rows} x {cols} (the terms of {b} by "
                                 f"those of {c})")

    def _check_features(self) -> None:
        if set(self.feature_medians) != set(self.feature_ranges):
            odd = sorted(set(self.feature_medians) ^ set(self.feature_ranges))[0]
            raise ValueError(f"feature_ranges and feature_medians disagree on {odd}")
        for name, median in self.feature_medians.items():
            low, high = self.feature_ranges[name]
            if not low <= median <= high:
                raise ValueError(f"feature_medians.{name} = {median:g} is outside its training "
                                 f"range {low:g}-{high:g}")
        formulas = [(f"buckets.{b}", spec.terms) for b, spec in self.buckets.items()]
        formulas += [(where, terms) for where, _, terms, _, _ in self._formulas()]
        for where, terms in formulas:
            for t in terms:
                if t != INTERCEPT and t not in self.feature_ranges:
                    raise ValueError(f"{where} uses {t}, which has no training range "
                                     "(feature_ranges)")

    def _check_folds(self, names: list[str]) -> None:
        if self.interval.method == "cv+" and not (self.folds and self.cv_residuals):
            raise ValueError("a cv+ interval needs folds and cv_residuals")
        models = self.trained_on.models
        if self.folds is not None:
            if len(self.folds) != len(models):
                raise ValueError(f"folds: {len(self.folds)} for {len(models)} training models "
                                 "(one per model)")
            for i, fold in enumerate(self.folds):
                if fold.left_out != models[i]:
                    raise ValueError(f"folds[{i}] leaves out {_show(fold.left_out)}, not "
                                     f"training model {i} ({models[i]})")
                self._check_fold_buckets(f"folds[{i}].buckets", fold.buckets, names)
        if self.cv_residuals is not None:
            runs = sum(self.trained_on.replicates)
            if len(self.cv_residuals) != runs:
                raise ValueError(f"cv_residuals: {len(self.cv_residuals)} for {runs} training "
                                 "runs (one per run)")
            for j, r in enumerate(self.cv_residuals):
                if self.folds is None or r.fold >= len(self.folds):
                    raise ValueError(f"cv_residuals[{j}] names fold {r.fold}, which does not "
                                     "exist")
                self._check_fold_buckets(f"cv_residuals[{j}].buckets", r.buckets, names)
        for b, spec in self.buckets.items():
            for k, c in enumerate(spec.candidates):
                if c.folds is not None and (
                        len(c.folds) != len(self.folds or [])
                        or any(len(f) != len(c.terms) for f in c.folds)
                        or len(c.cv_residuals or []) != len(self.cv_residuals or [])):
                    raise ValueError(f"buckets.{b}.candidates[{k}]: its folds or cv_residuals "
                                     "do not match the file's")

    @staticmethod
    def _check_fold_buckets(where: str, buckets: Mapping[str, object],
                            names: list[str]) -> None:
        """A fold refitted without one model may hold a bucket more (one that model lacked),
        never one less."""
        _unknown(buckets, BUCKETS, f"a start-up bucket (in {where})")
        for b in names:
            if b not in buckets:
                raise ValueError(f"{where} lacks {b}")

    def _formulas(self) -> Iterable[tuple[str, str, list[str], list[float], float]]:
        """Every formula the file holds but the chosen ones (candidates, fold models): where,
        bucket, terms, coefficients, and the bucket error it is judged against (seconds)."""
        for b, spec in self.buckets.items():
            own = max(spec.residual_sd, spec.lomo_rmse)
            for k, c in enumerate(spec.candidates):
                error = max(own, c.lomo_rmse)
                if c.coef is not None:
                    yield f"buckets.{b}.candidates[{k}]", b, c.terms, c.coef, error
                for i, coef in enumerate(c.folds or []):
                    yield f"buckets.{b}.candidates[{k}].folds[{i}]", b, c.terms, coef, error
        worst = {b: max([spec.residual_sd, spec.lomo_rmse]
                        + [c.lomo_rmse for c in spec.candidates])
                 for b, spec in self.buckets.items()}
        for i, fold in enumerate(self.folds or []):
            for b, f in fold.buckets.items():
                yield f"folds[{i}].buckets.{b}", b, f.terms, f.coef, worst.get(b, 0.0)

    def _negatives(self, terms: list[str], coef: list[float]
                   ) -> Iterable[tuple[int, str, float, float]]:
        """The sign-constrained coefficients of a formula (a mean; the slope of its one size
        term) that are negative beyond rounding: (index, term, coefficient, seconds it takes
        off the bucket at the top of the term's training range)."""
        sizes = [t for t in terms if t != INTERCEPT]
        if len(sizes) > 1:
            return
        for i, (t, c) in enumerate(zip(terms, coef, strict=True)):
            if c >= 0 or (t == INTERCEPT and sizes):
                continue
            loss = -c * (1.0 if t == INTERCEPT else self.feature_ranges[t][1])
            if loss > NEGLIGIBLE_S:
                yield i, t, c, loss

    def _check_signs(self) -> None:
        """The sign rule of the module doc."""
        n = self.trained_on.n_models
        for b, spec in self.buckets.items():
            if b == UNATTRIBUTED:
                continue
            for i, t, c, _ in self._negatives(spec.terms, spec.coef):
                se = spec.residual_sd * math.sqrt(max(spec.xtx_inv[i][i], 0.0))
                dof = max(n - len(spec.terms), 1)
                if se == 0 or t_tail(-c / se, dof) < SIGN_ALPHA:
                    raise ValueError(
                        f"buckets.{b}: the coefficient of {t} is {c:.4g}"
                        + (f", {-c / se:.3g} standard errors below zero" if se else "")
                        + f"; {_meaning(t)} cannot be negative")
        for where, bucket, terms, coef, error in self._formulas():
            if bucket == UNATTRIBUTED:
                continue
            for _, t, c, loss in self._negatives(terms, coef):
                if loss > SIGN_MULTIPLE * error:
                    raise ValueError(
                        f"{where}: the coefficient of {t} is {c:.4g}, {loss:.3g} s off the "
                        f"bucket against an error of {error:.3g} s; {_meaning(t)} cannot be "
                        "negative")


def _meaning(term: str) -> str:
    """What a formula's coefficient of ``term`` is, as a sign error names it."""
    return ("a stage's mean duration" if term == INTERCEPT
            else f"a cost in seconds per unit of {term}")


def parse_model_file(data: Any, where: str) -> StartupModelFile:
    """Validate a startup model's JSON (already parsed); one-line error naming the field."""
    if not isinstance(data, dict) or data.get("kind") != FILE_KIND:
        raise ColdscopeError(f"{where} is not a coldscope startup model file (its kind is not "
                             f"{FILE_KIND})")
    version = data.get("schema_version")
    if version not in (1, SCHEMA_VERSION):
        raise ColdscopeError(f"startup model schema {_show(version)} is not supported "
                             f"(this coldscope reads versions 1 and {SCHEMA_VERSION})")
    try:
        return StartupModelFile.model_validate(data)
    except ValidationError as exc:
        raise model_file_error(exc, where) from None


def model_file_error(exc: ValidationError, where: str) -> ColdscopeError:
    """The one-line error of a startup model that does not validate: ``malformed startup
    model WHERE: FIELD: problem``. A problem found across fields (the file-level checks)
    names its field in its own text."""
    source = f"malformed startup model {where}"
    return ColdscopeError(one_line(exc, source).replace(f"{source}: (top level): ",
                                                        f"{source}: ", 1))


class FitSummaryBucket(_Record):
    """One bucket of a ``FitSummary``: its chosen formula, the candidates and how each
    validated, and its Pearson correlation with each feature (None where undefined)."""

    formula: str
    terms: list[str]
    coef: list[float]
    residual_sd: float
    lomo_rmse: float
    candidates: list[Candidate]
    pcc: dict[str, float | None]


class FitSummary(_Record):
    """What ``coldscope fit`` reports (``--json`` prints it): the model file it wrote, less
    the interval matrices, and the notes on the training runs (which were skipped, why)."""

    out: str = Field(description="the startup model file written")
    trained_on: TrainedOn
    environment: dict[str, Any]
    storage: StorageSetting | None
    interval: IntervalSpec
    buckets: dict[str, FitSummaryBucket]
    lomo: Lomo | None
    extrapolation: Extrapolation | None
    loading_rate: LoadingRate | None
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data: a part the fit did not make (``storage``, ``lomo``, ...) is null;
        below the top, empty fields are left out, as in the model file."""
        data = self.model_dump(mode="json", exclude_none=True)
        return {name: data.get(name) for name in type(self).model_fields}


def fit_summary(file: StartupModelFile, out: str, notes: Sequence[str] = ()) -> FitSummary:
    """The ``FitSummary`` of the fitted model ``file``, written to ``out``."""
    return FitSummary(
        out=out, trained_on=file.trained_on, environment=file.environment,
        storage=file.storage, interval=file.interval,
        buckets={b: FitSummaryBucket(formula=f.formula, terms=f.terms, coef=f.coef,
                                     residual_sd=f.residual_sd, lomo_rmse=f.lomo_rmse,
                                     candidates=f.candidates, pcc=f.pcc)
                 for b, f in file.buckets.items()},
        lomo=file.lomo, extrapolation=file.extrapolation, loading_rate=file.loading_rate,
        notes=list(notes))
