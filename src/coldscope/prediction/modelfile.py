"""``StartupModelFile``: the startup model JSON file, typed and versioned.

Every startup model is written and read through this pydantic model, so a hand-edited or
truncated file fails with one line naming the field, never deep inside a prediction; and
``coldscope schema startup-model`` publishes its JSON Schema. Version 2 added the storage
setting the model was fitted under and the calibration record; version-1 files (no such
fields) still load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coldscope.core.interval import Interval
from coldscope.util.errors import ColdscopeError, validation_error

SCHEMA_VERSION: Literal[2] = 2
FILE_KIND: Literal["coldscope-startup-model"] = "coldscope-startup-model"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StorageSetting(_Record):
    """Where the weights came from during the measured start-ups.

    ``page_cache``: ``hot`` (weights already in the OS page cache), ``cold`` (read from the
    storage device), ``mixed`` (a table whose rows differ). ``seconds_per_gb``: the measured
    model-loading seconds per GB of weights under this setting, when known.
    """

    page_cache: Literal["hot", "cold", "mixed"] | None = None
    kind: str | None = Field(None, description="storage kind, e.g. nvme, ssd, nfs, dram")
    read_bandwidth_bps: float | None = Field(None, gt=0, description="bytes per second")
    seconds_per_gb: float | None = Field(None, ge=0)
    source: str = Field("", description="how the setting is known")


class TrainedOn(_Record):
    source: str
    models: list[str]
    replicates: list[int]
    n_models: int = Field(ge=1)
    kinds: list[Literal["dense", "moe", "hybrid"]]
    excluded: list[str]
    selection: str


class IntervalSpec(_Record):
    """How the file's prediction intervals are made (not an interval: each prediction's is an
    ``Interval``): their coverage ``level``, Student's ``t`` quantile at ``dof`` degrees of
    freedom, and the ``method``, ``ols`` (classical prediction intervals) or ``cv+``
    (jackknife+ over the leave-one-model-out folds)."""

    level: float = Field(gt=0, lt=1)
    t: float = Field(gt=0)
    dof: int = Field(ge=1)
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

    terms: list[str]
    lomo_rmse: float
    lomo_max_abs: float
    comparable: bool | None = None
    extrap_rmse: float | None = None
    extrap_max_abs: float | None = None
    coef: list[float] | None = None
    folds: list[list[float]] | None = None
    cv_residuals: list[float] | None = None


class BucketFormula(_Record):
    """One bucket's fitted formula ``sum(coef_i x term_i)`` and its interval ingredients."""

    terms: list[str] = Field(min_length=1)
    coef: list[float]
    formula: str
    t: float = Field(gt=0)
    xtx_inv: list[list[float]]
    residual_sd: float = Field(ge=0)
    lomo_rmse: float = Field(ge=0)
    candidates: list[Candidate]
    pcc: dict[str, float | None]
    mean_s: float

    @model_validator(mode="after")
    def _shapes(self) -> BucketFormula:
        p = len(self.terms)
        if len(self.coef) != p or len(self.xtx_inv) != p or any(len(r) != p for r in self.xtx_inv):
            raise ValueError(f"terms, coef and xtx_inv disagree in length ({p} terms)")
        return self


class FoldBucket(_Record):
    terms: list[str]
    coef: list[float]


class Fold(_Record):
    left_out: str
    buckets: dict[str, FoldBucket]


class CvResidual(_Record):
    fold: int = Field(ge=0)
    total: float
    buckets: dict[str, float]


class LomoStage(_Record):
    actual_s: float
    predicted_s: float


class LomoModel(_Record):
    actual_s: float
    predicted_s: float
    error_s: float
    stages: dict[str, LomoStage]
    interval: Interval | None = None
    inside: bool | None = None


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

    lower_rate: float
    lower_se: float
    lower_models: list[str]
    upper_rate: float
    upper_se: float
    upper_models: list[str]
    t: float = Field(gt=0)
    constant: bool


class LomoTotal(_Record):
    mse: float
    rmse: float
    max_abs: float
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
    one model), which widens the intervals.
    """

    kind: Literal["ratio", "offset"]
    value: float
    per_model: dict[str, float]
    spread: float = Field(ge=0)
    identified: bool = True
    note: str = ""


class Calibration(_Record):
    """What a calibrated model was calibrated on, and the per-bucket transfer."""

    base_source: str = Field(description="the base model file or its training source")
    base_environment: dict[str, Any]
    base_storage: StorageSetting | None = None
    source: str = Field(description="where the calibration runs came from")
    models: list[str]
    replicates: list[int]
    environment: dict[str, Any]
    stages: dict[str, StageTransfer]
    disagreement_t: float = Field(gt=0, description="multiplier of the spread in intervals")
    warnings: list[str]


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


class StartupModelFile(_Record):
    """The startup model JSON file (``coldscope fit`` / ``coldscope calibrate`` write it)."""

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
    residual_cov: dict[str, dict[str, float]]
    within_cov: dict[str, dict[str, float]] | None = None
    cross: dict[str, list[list[float]]]
    feature_ranges: dict[str, tuple[float, float]]
    feature_medians: dict[str, float]
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

    @model_validator(mode="after")
    def _consistent(self) -> StartupModelFile:
        names = list(self.buckets)
        for b in names:
            if b not in self.residual_cov or any(c not in self.residual_cov[b] for c in names):
                raise ValueError(f"residual_cov lacks bucket {b}")
        if self.interval.method == "cv+" and not (self.folds and self.cv_residuals):
            raise ValueError("a cv+ interval needs folds and cv_residuals")
        for r in self.cv_residuals or []:
            if self.folds is None or r.fold >= len(self.folds):
                raise ValueError(f"cv_residuals name fold {r.fold}, which does not exist")
        for b, spec in self.buckets.items():
            for c in spec.candidates:
                if c.coef is not None and len(c.coef) != len(c.terms):
                    raise ValueError(f"a {b} candidate has {len(c.coef)} coefficients for "
                                     f"{len(c.terms)} terms")
                if c.folds is not None and (
                        len(c.folds) != len(self.folds or [])
                        or any(len(f) != len(c.terms) for f in c.folds)
                        or len(c.cv_residuals or []) != len(self.cv_residuals or [])):
                    raise ValueError(f"a {b} candidate's folds or cv_residuals do not match "
                                     "the file's")
        if self.calibration is not None:
            missing = [b for b in names if b not in self.calibration.stages]
            if missing:
                raise ValueError(f"calibration lacks bucket {missing[0]}")
        return self


def parse_model_file(data: Any, where: str) -> StartupModelFile:
    """Validate a startup model's JSON (already parsed); one-line error naming the field."""
    if not isinstance(data, dict) or data.get("kind") != FILE_KIND:
        raise ColdscopeError(f"{where} is not a coldscope startup model file")
    version = data.get("schema_version")
    if version not in (1, SCHEMA_VERSION):
        raise ColdscopeError(f"startup model schema {version!r} is not supported "
                             f"(this coldscope reads versions 1 and {SCHEMA_VERSION})")
    try:
        return StartupModelFile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, f"malformed startup model {where}") from None


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
