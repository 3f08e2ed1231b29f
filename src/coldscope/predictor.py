"""The white-box startup model: one small linear formula per start-up bucket, summed.

A ``StartupModel`` holds, per bucket (the six stages, plus ``server_ready`` / ``unattributed``
where the training data has them), a formula such as ``model_loading = 3.67 s/GB x weight_gb``,
the training ranges of its features, and what its 90 % prediction intervals need. It is saved as
plain JSON and loaded without the training data; ``predict`` is pure Python (no numpy), so an
autoscaler can call it in well under a millisecond.

Fitting (``StartupModel.fit``) lives in ``coldscope.predict.fit``; the training data comes from
the store (``coldscope.predict.store``) or the paper's artifact (``coldscope.predict.paper``).

Intervals: classical OLS prediction intervals, per bucket
``s +- t * sqrt(sigma_ss * (1 + a' (X'X)^-1 a))``, and for the total the same with the
cross-bucket residual covariance (a seemingly-unrelated-regressions view: every bucket is fitted
on the same models, so their errors are correlated) -
``var_total = sum_{s,s'} sigma_ss' * (1 + a_s' M_ss' a_s')`` with
``M_ss' = (X_s'X_s)^-1 X_s' X_s' (X_s''X_s')^-1``. ``t`` is Student's t at the model's level
with n - p degrees of freedom. Where the training rows are means of replicate runs, the pooled
within-model covariance is added, so the interval covers a single run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from coldscope.errors import ColdscopeError
from coldscope.stages import BUCKETS

if TYPE_CHECKING:
    from coldscope.features import ModelFeatures
    from coldscope.predict.fit import Observation

SCHEMA_VERSION = 1
INTERCEPT = "1"


@dataclass(frozen=True)
class Feature:
    """A named predictor input derived from ``ModelFeatures`` (and the engine settings)."""

    unit: str
    get: Callable[[ModelFeatures, Mapping[str, Any]], float | None]


def _scaled(attr: str, scale: float) -> Callable[[Any, Mapping[str, Any]], float | None]:
    def get(f: Any, settings: Mapping[str, Any]) -> float | None:
        value = getattr(f, attr)
        return None if value is None else value / scale
    return get


def _times_capture(attr: str, scale: float) -> Callable[[Any, Mapping[str, Any]], float | None]:
    def get(f: Any, settings: Mapping[str, Any]) -> float | None:
        value, sizes = getattr(f, attr), settings.get("capture_sizes")
        return None if value is None or sizes is None else value / scale * sizes
    return get


#: Every feature a formula may use. Units chosen so coefficients read as plain seconds-per-unit.
FEATURES: dict[str, Feature] = {
    "weight_gb": Feature("GB of weights (1e9 B)", _scaled("weight_bytes", 1e9)),
    "params_b": Feature("billions of parameters", _scaled("params", 1e9)),
    "layers": Feature("decoder layers", _scaled("num_layers", 1)),
    "graph_mib": Feature("MiB of compiled graphs", _scaled("graph_size", 2**20)),
    "tokenizer_mib": Feature("MiB of tokenizer files", _scaled("tokenizer_bytes", 2**20)),
    "hidden_k": Feature("hidden size / 1000", _scaled("hidden_size", 1000)),
    "vocab_k": Feature("vocabulary / 1000", _scaled("vocab_size", 1000)),
    "layers_x_capture": Feature("layers x capture sizes", _times_capture("num_layers", 1)),
    "weight_gb_x_capture": Feature("GB x capture sizes", _times_capture("weight_bytes", 1e9)),
}

#: The paper's per-stage choices (its released predictor), the baseline ``fit --formulas paper``.
PAPER_FORMULAS: dict[str, tuple[str, ...]] = {
    "bootstrap": (INTERCEPT,),
    "tokenizer": (INTERCEPT, "tokenizer_mib"),
    "model_loading": (INTERCEPT, "weight_gb"),
    "torch_compile": (INTERCEPT, "graph_mib"),
    "kv_cache_profiling": (INTERCEPT, "weight_gb"),
    "cuda_graph_capture": (INTERCEPT, "weight_gb_x_capture"),
    "server_ready": (INTERCEPT,),
    "unattributed": (INTERCEPT,),
}

#: Physically motivated alternatives per bucket; ``fit`` keeps the one with the lowest
#: leave-one-model-out error (ties: fewer terms). The paper's choice is always among them.
CANDIDATE_FORMULAS: dict[str, tuple[tuple[str, ...], ...]] = {
    "bootstrap": ((INTERCEPT,),),
    "tokenizer": ((INTERCEPT, "tokenizer_mib"), ("tokenizer_mib",)),
    "model_loading": ((INTERCEPT, "weight_gb"), ("weight_gb",)),
    "torch_compile": ((INTERCEPT, "graph_mib"), (INTERCEPT, "layers"), ("layers",),
                      (INTERCEPT, "layers", "graph_mib")),
    "kv_cache_profiling": ((INTERCEPT, "weight_gb"), (INTERCEPT, "layers"),
                           (INTERCEPT, "weight_gb", "layers")),
    "cuda_graph_capture": ((INTERCEPT, "weight_gb_x_capture"), (INTERCEPT, "layers_x_capture"),
                           (INTERCEPT, "layers_x_capture", "weight_gb_x_capture")),
    "server_ready": ((INTERCEPT,),),
    "unattributed": ((INTERCEPT,),),
}


def term_value(term: str, features: ModelFeatures, settings: Mapping[str, Any]) -> float | None:
    """The value of one formula term (the intercept is 1)."""
    if term == INTERCEPT:
        return 1.0
    if term not in FEATURES:
        raise ColdscopeError(f"unknown feature {term!r} in a startup model formula")
    return FEATURES[term].get(features, settings)


def formula_text(bucket: str, terms: tuple[str, ...], coef: list[float]) -> str:
    """``bucket = 0.120 + 3.670 x weight_gb`` - the formula as a person reads it."""
    parts = [f"{c:.4g}" if t == INTERCEPT else f"{c:.4g} x {t}"
             for t, c in zip(terms, coef, strict=True)]
    return f"{bucket} = " + " + ".join(parts).replace("+ -", "- ")


@dataclass(frozen=True)
class StagePrediction:
    """Predicted seconds of one bucket and its prediction interval (seconds)."""

    s: float
    interval: tuple[float, float]


@dataclass
class Prediction:
    """A start-up prediction: per-bucket seconds, the total, intervals, and warnings."""

    total_s: float
    interval: tuple[float, float]
    stages: dict[str, StagePrediction]
    warnings: list[str] = field(default_factory=list)
    level: float = 0.9

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of ``coldscope predict --json``."""
        return {
            "total_s": round(self.total_s, 4),
            "interval": [round(x, 4) for x in self.interval],
            "level": self.level,
            "stages": {k: {"s": round(v.s, 4), "interval": [round(x, 4) for x in v.interval]}
                       for k, v in self.stages.items()},
            "warnings": list(self.warnings),
        }


class StartupModel:
    """Per-bucket linear formulas fitted on measured start-ups (scikit-learn's estimator shape).

    ``formulas``: ``"auto"`` (choose each bucket's formula among ``CANDIDATE_FORMULAS`` by
    leave-one-model-out error), ``"paper"`` (the paper's choices), or a dict bucket -> terms.
    ``kinds``: model kinds to train on (``dense``, ``moe``, ``hybrid``); others are reported as
    excluded and flagged out of domain at prediction time. ``level``: interval coverage.
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
        """Fit every bucket on ``observations``; returns ``self``. See ``predict.fit``."""
        from coldscope.predict.fit import fit_startup_model

        state = fit_startup_model(self, observations, environment or {}, settings or {}, source)
        self._set_state(state)
        return self

    def _set_state(self, state: dict[str, Any]) -> None:
        if state.get("schema_version") != SCHEMA_VERSION:
            raise ColdscopeError(
                f"startup model schema {state.get('schema_version')!r} is not supported "
                f"(this coldscope reads version {SCHEMA_VERSION})"
            )
        self.state_ = state
        self.buckets_: dict[str, dict[str, Any]] = state["buckets"]
        self.order_: list[str] = list(self.buckets_)
        self.level = float(state["interval"]["level"])
        self.kinds = tuple(state["trained_on"]["kinds"])

    # -- persistence --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        self._check_fitted()
        return self.state_

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> StartupModel:
        model = cls()
        try:
            model._set_state(dict(state))
        except (KeyError, TypeError, ValueError) as exc:
            raise ColdscopeError(f"malformed startup model: missing or bad {exc}") from exc
        return model

    @classmethod
    def load(cls, path: str | Path) -> StartupModel:
        """Load a startup model JSON file (no training data needed)."""
        p = Path(path)
        try:
            state = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ColdscopeError(f"cannot read startup model {p}: {exc.strerror or exc}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ColdscopeError(f"malformed startup model {p}: {exc}") from exc
        if not isinstance(state, dict) or state.get("kind") != "coldscope-startup-model":
            raise ColdscopeError(f"{p} is not a coldscope startup model file")
        return cls.from_dict(state)

    # -- prediction ---------------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "state_"):
            raise ColdscopeError("the startup model is not fitted; fit or load one first")

    def settings(self, **overrides: Any) -> dict[str, Any]:
        merged = dict(self.state_.get("settings") or {})
        merged.update({k: v for k, v in overrides.items() if v is not None})
        return merged

    def explain(self, features: ModelFeatures, **settings: Any) -> dict[str, dict[str, float]]:
        """Each bucket's terms and their contributions in seconds (they sum to the bucket)."""
        self._check_fitted()
        values = self._term_values(features, self.settings(**settings), set())
        return {b: {t: c * v for t, c, v in zip(self.buckets_[b]["terms"],
                                                self.buckets_[b]["coef"], values[b], strict=True)}
                for b in self.order_}

    def _value(self, term: str, features: ModelFeatures, settings: Mapping[str, Any],
               missing: set[str] | None = None) -> float:
        """A term's value; an unknown feature takes its training median (and is reported)."""
        value = term_value(term, features, settings)
        if value is not None:
            return float(value)
        median = (self.state_.get("feature_medians") or {}).get(term)
        if median is None:
            raise ColdscopeError(f"a formula needs {term} ({FEATURES[term].unit}), which is "
                                 f"unknown for {features.name}")
        if missing is not None:
            missing.add(term)
        return float(median)

    def _term_values(self, features: ModelFeatures, settings: Mapping[str, Any],
                     missing: set[str] | None = None) -> dict[str, list[float]]:
        return {b: [self._value(t, features, settings, missing)
                    for t in self.buckets_[b]["terms"]] for b in self.order_}

    def predict(self, features: ModelFeatures, capture_sizes: int | None = None) -> Prediction:
        """Per-bucket seconds, total, and their ``level`` prediction intervals."""
        self._check_fitted()
        settings = self.settings(capture_sizes=capture_sizes)
        missing: set[str] = set()
        a = self._term_values(features, settings, missing)
        means = {b: _dot(self.buckets_[b]["coef"], a[b]) for b in self.order_}
        if self.state_["interval"]["method"] == "cv+":
            intervals = self._cv_plus(features, settings)
        else:
            intervals = self._ols_intervals(a)
        stages = {b: StagePrediction(max(means[b], 0.0), _clip(intervals[b]))
                  for b in self.order_}
        total = sum(s.s for s in stages.values())
        low, high = intervals["total"]
        warnings = [f"{name} ({FEATURES[name].unit}) is unknown for {features.name}: the "
                    f"training median was used, so the {', '.join(self._users(name))} "
                    "prediction is only typical" for name in sorted(missing)]
        warnings += self._warnings(features, settings)
        return Prediction(total, (max(min(low, total), 0.0), max(high, total)), stages,
                          warnings, self.level)

    def _users(self, name: str) -> list[str]:
        return [b for b in self.order_ if name in self.buckets_[b]["terms"]]

    def _cv_plus(self, features: ModelFeatures,
                 settings: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
        """CV+ intervals: fold predictions -/+ each held-out residual, order statistics."""
        st = self.state_
        fold_means = []
        for fold in st["folds"]:
            row = {}
            for b, spec in fold["buckets"].items():
                values = [self._value(t, features, settings) for t in spec["terms"]]
                row[b] = _dot(spec["coef"], values)
            fold_means.append(row)
        residuals = st["cv_residuals"]
        n = len(residuals)
        alpha = 1.0 - self.level
        k_low = max(math.floor(alpha * (n + 1) + 1e-9), 1)
        k_high = min(math.ceil((1 - alpha) * (n + 1) - 1e-9), n)
        out = {}
        for b in [*self.order_, "total"]:
            lows, highs = [], []
            for r in residuals:
                mean = fold_means[r["fold"]]
                mu = sum(mean.values()) if b == "total" else mean[b]
                dev = abs(r["total"] if b == "total" else r["buckets"][b])
                lows.append(mu - dev)
                highs.append(mu + dev)
            out[b] = (sorted(lows)[k_low - 1], sorted(highs)[k_high - 1])
        return out

    def _ols_intervals(self, a: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
        """OLS prediction intervals; the total's from the cross-bucket covariance (SUR)."""
        st = self.state_
        sigma, cross = st["residual_cov"], st["cross"]
        within = st.get("within_cov") or {}
        out = {}
        total_mean = var_total = 0.0
        for i, b in enumerate(self.order_):
            spec = self.buckets_[b]
            mean = _dot(spec["coef"], a[b])
            total_mean += mean
            var = sigma[b][b] * (1.0 + _quad(a[b], spec["xtx_inv"], a[b]))
            var += (within.get(b) or {}).get(b, 0.0)
            half = float(spec["t"]) * math.sqrt(max(var, 0.0))
            out[b] = (mean - half, mean + half)
            for c in self.order_[i:]:
                m = spec["xtx_inv"] if b == c else cross[f"{b}|{c}"]
                term = sigma[b][c] * (1.0 + _quad(a[b], m, a[c]))
                term += (within.get(b) or {}).get(c, 0.0)
                var_total += term if b == c else 2.0 * term
        half = float(st["interval"]["t"]) * math.sqrt(max(var_total, 0.0))
        out["total"] = (total_mean - half, total_mean + half)
        return out

    def _warnings(self, features: ModelFeatures, settings: Mapping[str, Any]) -> list[str]:
        st = self.state_
        warnings: list[str] = []
        if features.kind not in self.kinds:
            warnings.append(
                f"{features.name} is a {features.kind} model; this startup model was trained on "
                f"{'/'.join(self.kinds)} models only: out of domain (MoE/hybrid KV-cache "
                "profiling and loading do not scale like dense models)"
            )
        used = sorted({t for b in self.order_ for t in self.buckets_[b]["terms"]} - {INTERCEPT})
        ranges = st["feature_ranges"]
        for name in used:
            value = FEATURES[name].get(features, settings)
            lo, hi = ranges.get(name, (None, None))
            if value is None or lo is None:
                continue
            if value < lo * (1 - 1e-9) or value > hi * (1 + 1e-9):
                users = self._users(name)
                warnings.append(
                    f"{name} = {value:.4g} is outside the training range {lo:.4g}-{hi:.4g} "
                    f"({FEATURES[name].unit}): the {', '.join(users)} "
                    f"formula{'s extrapolate' if len(users) > 1 else ' extrapolates'}"
                )
        if "graph_mib" in used:
            trained = st.get("graph_size_source")
            if trained and features.graph_size_source and features.graph_size_source != trained:
                warnings.append(
                    f"compiled graph size of {features.name} is {features.graph_size_source}, "
                    f"the model was trained on {trained} sizes: they may not be comparable"
                )
        if features.params_source == "nominal":
            warnings.append(f"parameter count of {features.name} is the nominal size; give the "
                            "exact count (params) for a better weight-loading prediction")
        return warnings


def _clip(interval: tuple[float, float]) -> tuple[float, float]:
    return (max(interval[0], 0.0), max(interval[1], 0.0))


def _dot(x: list[float], y: list[float]) -> float:
    return sum(a * b for a, b in zip(x, y, strict=True))


def _quad(x: list[float], m: list[list[float]], y: list[float]) -> float:
    return sum(x[i] * _dot(m[i], y) for i in range(len(x)))


def t_quantile(p: float, dof: int) -> float:
    """Student's t quantile (e.g. p=0.95). Exact table for dof <= 4, else the Cornish-Fisher
    expansion (Abramowitz & Stegun 26.7.5), accurate to about 1e-3 for dof >= 5."""
    if dof < 1:
        raise ValueError("dof must be >= 1")
    z = NormalDist().inv_cdf(p)
    if dof <= 4 and abs(p - 0.95) < 1e-12:
        return (6.3138, 2.9200, 2.3534, 2.1318)[dof - 1]
    if dof <= 4 and abs(p - 0.975) < 1e-12:
        return (12.7062, 4.3027, 3.1824, 2.7764)[dof - 1]
    n = float(dof)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / n + g2 / n**2 + g3 / n**3 + g4 / n**4


def estimate_startup(startup_model_path: str | Path,
                     model_path_or_features: str | Path | ModelFeatures | Mapping[str, Any],
                     capture_sizes: int | None = None) -> Prediction:
    """Predict the start-up of a model (path, ``ModelFeatures`` or features dict) in one call."""
    from coldscope.features import ModelFeatures, features_from_paper, model_features

    if isinstance(model_path_or_features, ModelFeatures):
        features = model_path_or_features
    elif isinstance(model_path_or_features, Mapping):
        data = dict(model_path_or_features)
        if "source" in data and "params_source" in data:
            features = ModelFeatures(**data)
        else:
            features = features_from_paper(data, name=str(data.get("name", "model")))
    else:
        features = model_features(model_path_or_features)
    return StartupModel.load(startup_model_path).predict(features, capture_sizes=capture_sizes)


__all__ = ["BUCKETS", "FEATURES", "Prediction", "StagePrediction", "StartupModel",
           "estimate_startup", "t_quantile"]
