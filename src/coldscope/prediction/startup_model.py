"""The white-box startup model: one small linear formula per start-up bucket, summed.

A ``StartupModel`` holds, per bucket (the six stages, plus ``server_ready`` / ``unattributed``
where the training data has them), a formula such as ``model_loading = 3.67 s/GB x weight_gb``,
the training ranges of its features, and what its 90 % prediction intervals need. It is saved
as a ``StartupModelFile`` (typed, versioned JSON) and loaded without the training data;
prediction is pure Python (no numpy), so an autoscaler can call it in well under a millisecond.

The layers, bottom up (no module imports one above it):

* ``predict.formulas`` - features, candidate formulas, Student's t;
* ``predict.modelfile`` - ``StartupModelFile``, the JSON file's schema;
* ``predict.core`` - prediction, intervals, extrapolation, calibration and storage settings;
* ``predict.fit`` (numpy) - least squares, formula choice by leave-one-model-out, CV+;
* ``predict.calibrate`` - moving a model to another machine from a few runs there;
* this module - the scikit-learn-shaped estimator and the one prediction function that
  ``predict --json`` and ``serve``'s /v1/predict both call (``predict_json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from coldscope.core.interval import Interval
from coldscope.core.stages import BUCKETS
from coldscope.prediction import core
from coldscope.prediction.core import (
    LoadingSetting,
    Observation,
    Prediction,
    StagePrediction,
)
from coldscope.prediction.formulas import (
    CANDIDATE_FORMULAS,
    FEATURES,
    INTERCEPT,
    PAPER_FORMULAS,
    formula_text,
    t_quantile,
    term_value,
)
from coldscope.prediction.modelfile import (
    SCHEMA_VERSION,
    PredictionReport,
    StartupModelFile,
    StorageSetting,
    parse_model_file,
)
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import write_atomic

if TYPE_CHECKING:
    from coldscope.prediction.features import ModelFeatures
class StartupModel:
    """Per-bucket linear formulas fitted on measured start-ups (scikit-learn's estimator shape).

    ``formulas``: ``"auto"`` (choose each bucket's formula among ``CANDIDATE_FORMULAS`` by
    leave-one-model-out error), ``"paper"`` (the paper's choices), or a dict bucket -> terms.
    ``kinds``: model kinds to train on (``dense``, ``moe``, ``hybrid``); others are reported as
    excluded and flagged out of domain at prediction time. ``level``: interval coverage.

    ``__init__`` only stores these; ``fit`` (or ``load``) sets the learned ``file_``.
    """

    def __init__(self, formulas: str | Mapping[str, tuple[str, ...]] = "auto",
                 kinds: tuple[str, ...] = ("dense",), level: float = 0.9) -> None:
        self.formulas = formulas
        self.kinds = kinds
        self.level = level

    # -- fitting ------------------------------------------------------------------------------

    def fit(self, observations: list[Observation],
            environment: Mapping[str, Any] | None = None,
            settings: Mapping[str, Any] | None = None,
            source: str = "") -> StartupModel:
        """Fit every bucket on ``observations``; returns ``self``. See ``predict.fit``.

        The fitted file passes the checks every loaded file passes (``predict.modelfile``);
        training data that would make one it does not (a setting no formula uses, durations
        beyond its number bound) is one line, as a bad file is."""
        from pydantic import ValidationError

        from coldscope.prediction.fit import FitOptions, fit_startup_model
        from coldscope.prediction.modelfile import model_file_error
        options = FitOptions(self.formulas, tuple(self.kinds), float(self.level))
        try:
            self.file_ = fit_startup_model(options, observations, environment or {},
                                           settings or {}, source)
        except ValidationError as exc:
            raise model_file_error(exc, f"fitted on {source or 'these runs'}") from None
        return self

    # -- persistence --------------------------------------------------------------------------

    @property
    def level_(self) -> float:
        """The interval level of the fitted (or loaded) model."""
        return self._fitted().interval.level

    def _fitted(self) -> StartupModelFile:
        file: StartupModelFile | None = getattr(self, "file_", None)  # set by fit or load
        if file is None:
            raise ColdscopeError("the startup model is not fitted; fit or load one first")
        return file

    def to_dict(self) -> dict[str, Any]:
        """The startup model file as JSON-ready data."""
        return self._fitted().model_dump(mode="json", exclude_none=True)

    def save(self, path: str | Path) -> None:
        p = Path(path)
        text = self._fitted().model_dump_json(indent=2, exclude_none=True) + "\n"
        try:
            write_atomic(p, text.encode("utf-8"))
        except OSError as exc:
            raise ColdscopeError(f"cannot write {p}: {exc.strerror or exc}") from None

    @classmethod
    def from_file(cls, file: StartupModelFile) -> StartupModel:
        model = cls(kinds=tuple(file.trained_on.kinds), level=file.interval.level)
        model.file_ = file
        return model

    @classmethod
    def from_dict(cls, state: Mapping[str, Any], where: str = "data") -> StartupModel:
        return cls.from_file(parse_model_file(dict(state), where))

    @classmethod
    def load(cls, path: str | Path) -> StartupModel:
        """Load a startup model JSON file (no training data needed)."""
        from coldscope.util.config_file import read_mapping
        p = Path(path)
        if p.is_dir():
            raise ColdscopeError(f"{p} is a directory, not a startup model file")
        return cls.from_dict(read_mapping(p, "startup model"), str(p))

    # -- prediction ---------------------------------------------------------------------------

    def explain(self, features: ModelFeatures, **settings: Any) -> dict[str, dict[str, float]]:
        """Each base bucket's terms and their contributions in seconds (they sum to it), of
        the formula that serves this model (``served`` says which and why)."""
        return core.explain(self._fitted(), features, **settings)

    def served(self, features: ModelFeatures, **settings: Any) -> dict[str, core.Served]:
        """Per bucket, the formula that serves ``features`` and why (the range rule): the
        LOMO choice, or a candidate of comparable error that stays inside the data."""
        return core.served(self._fitted(), features, **settings)

    def predict(self, features: ModelFeatures, capture_sizes: int | None = None,
                storage_bandwidth: float | None = None,
                page_cache: Literal["hot", "cold"] | None = None) -> Prediction:
        """Per-bucket seconds, total, and their ``level`` prediction intervals.

        ``storage_bandwidth`` (bytes/s) / ``page_cache``: predict model loading for that
        storage setting instead of the one the model was measured under.
        """
        loading = None
        if storage_bandwidth is not None or page_cache is not None:
            loading = LoadingSetting(page_cache, storage_bandwidth)
        return core.predict(self._fitted(), features, capture_sizes, loading)


def features_of(model: str | Path | ModelFeatures | Mapping[str, Any],
                compile_cache: str | Path | None = None) -> ModelFeatures:
    """Features of a model given as a path, ``ModelFeatures`` or a features mapping."""
    from coldscope.prediction.features import ModelFeatures, features_from_paper, model_features
    if isinstance(model, ModelFeatures):
        return model
    if isinstance(model, Mapping):
        data = dict(model)
        if "source" in data and "params_source" in data:
            from pydantic import ValidationError

            from coldscope.util.errors import validation_error
            try:
                return ModelFeatures.model_validate(data)
            except ValidationError as exc:
                raise validation_error(exc, "model features") from None
        return features_from_paper(data, name=str(data.get("name", "model")))
    return model_features(model, compile_cache=compile_cache)


def predict_json(startup_model: str | Path | StartupModel,
                 model: str | Path | ModelFeatures | Mapping[str, Any], *,
                 capture_sizes: int | None = None, compile_cache: str | Path | None = None,
                 storage_bandwidth: float | None = None,
                 page_cache: Literal["hot", "cold"] | None = None) -> dict[str, Any]:
    """What ``coldscope predict --json`` prints (and ``serve``'s POST /v1/predict returns).

    Bad input of any kind raises ``ColdscopeError`` with a one-line message.
    """
    if page_cache not in (None, "hot", "cold"):
        raise ColdscopeError(f"page cache must be hot or cold, not {page_cache!r}")
    sm = startup_model if isinstance(startup_model, StartupModel) \
        else StartupModel.load(startup_model)
    features = features_of(model, compile_cache)
    return sm.predict(features, capture_sizes=capture_sizes, storage_bandwidth=storage_bandwidth,
                      page_cache=page_cache).to_dict()


def estimate_startup(startup_model_path: str | Path,
                     model_path_or_features: str | Path | ModelFeatures | Mapping[str, Any],
                     capture_sizes: int | None = None) -> Prediction:
    """Predict the start-up of a model (path, ``ModelFeatures`` or features dict) in one call."""
    return StartupModel.load(startup_model_path).predict(features_of(model_path_or_features),
                                                         capture_sizes=capture_sizes)


__all__ = ["BUCKETS", "CANDIDATE_FORMULAS", "FEATURES", "INTERCEPT", "PAPER_FORMULAS",
           "SCHEMA_VERSION", "Interval", "Observation", "Prediction", "PredictionReport",
           "StagePrediction",
           "StartupModel", "StartupModelFile", "StorageSetting", "estimate_startup",
           "features_of", "formula_text", "predict_json", "t_quantile", "term_value"]
