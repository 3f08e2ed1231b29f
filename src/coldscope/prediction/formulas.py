"""The vocabulary of the startup model's formulas: features, candidate formulas, Student's t.

Pure Python and imported by both the fitting side (``predict.fit``, numpy) and the predicting
side (``predict.core``), so neither has to import the other's module to name a feature.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.prediction.features import ModelFeatures
INTERCEPT = "1"

#: The most CUDA-graph capture sizes a prediction or a startup model's settings may name
#: (vLLM captures a few hundred at most; the bound keeps a ``*_x_capture`` term finite).
MAX_CAPTURE_SIZES = 100_000


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


def formula_text(bucket: str, terms: tuple[str, ...] | list[str], coef: list[float]) -> str:
    """``bucket = 0.120 + 3.670 x weight_gb`` - the formula as a person reads it."""
    parts = [f"{c:.4g}" if t == INTERCEPT else f"{c:.4g} x {t}"
             for t, c in zip(terms, coef, strict=True)]
    return f"{bucket} = " + " + ".join(parts).replace("+ -", "- ")


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


def t_tail(t: float, dof: int) -> float:
    """``P(T >= t)`` for Student's t with ``dof`` degrees of freedom: ``I_x(dof/2, 1/2) / 2``
    with ``x = dof / (dof + t^2)`` for ``t >= 0`` (one minus that below), the regularized
    incomplete beta by its continued fraction (Numerical Recipes 6.4), to about 1e-12."""
    if dof < 1:
        raise ValueError("dof must be >= 1")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    half = 0.5 * _incomplete_beta(dof / 2, 0.5, dof / (dof + t * t))
    return half if t >= 0 else 1.0 - half


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta ``I_x(a, b)``, 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the continued fraction converges fast below this
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * f / a
