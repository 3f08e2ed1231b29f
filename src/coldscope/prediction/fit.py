"""Fitting the startup model: per-bucket least squares, formula choice by leave-one-model-out.

Training data is a list of ``Observation`` (one measured start-up of one model, its bucket
seconds and total). Replicate runs of a model are averaged into one row, so every model weighs
the same and leave-one-model-out (LOMO) leaves out all of a model's runs at once.

Besides LOMO, ``_extrapolate`` scores every candidate formula and the whole fit on
extrapolation folds (the deepest, the largest and the smallest training model held out in
turn); ``_comparable`` marks the candidates whose LOMO error is not significantly worse than
the choice, and ``_candidate_folds`` saves their CV+ ingredients, so that ``core.served`` can
serve one of them where the choice would extrapolate (the range rule); ``_loading_rate``
checks whether model loading keeps one marginal rate across the training sizes.

Which buckets: those with a value in every row. ``unattributed`` is always the remainder
``total - sum(other buckets)``, so the buckets of a prediction add up to the predicted total.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coldscope.core.stages import BUCKETS, MODEL_LOADING, UNATTRIBUTED
from coldscope.core.version import __version__
from coldscope.prediction import core
from coldscope.prediction.core import Observation
from coldscope.prediction.features import ModelFeatures
from coldscope.prediction.formulas import (
    CANDIDATE_FORMULAS,
    FEATURES,
    INTERCEPT,
    PAPER_FORMULAS,
    formula_text,
    t_quantile,
    term_value,
)
from coldscope.prediction.modelfile import FILE_KIND, SCHEMA_VERSION, StartupModelFile
from coldscope.util.errors import ColdscopeError

__all__ = ["FitOptions", "Observation", "cv_plus_min_points", "fit_startup_model"]


@dataclass(frozen=True)
class FitOptions:
    """The hyper-parameters of a fit (``StartupModel``'s constructor arguments)."""

    formulas: Any = "auto"
    kinds: tuple[str, ...] = ("dense",)
    level: float = 0.9


@dataclass
class _Rows:
    models: list[str]
    features: list[ModelFeatures]
    y: dict[str, np.ndarray]          # bucket -> per-model mean seconds
    total: np.ndarray
    within: np.ndarray | None         # pooled within-model covariance of bucket seconds
    replicates: list[int]
    columns: dict[str, np.ndarray | None] = field(default_factory=dict)


def fit_startup_model(model: FitOptions, observations: list[Observation],
                      environment: Mapping[str, Any], settings: Mapping[str, Any],
                      source: str, depth: int = 2) -> StartupModelFile:
    """The fitted startup model file of hyper-parameters ``model`` on ``observations``.

    ``depth`` 1: also refit without each model in turn (formula choice included) - these fold
    models give the CV+ intervals and the LOMO report. ``depth`` 2: the folds get their own
    folds, so the report can say whether each held-out model fell inside its fold's interval.
    """
    if not observations:
        raise ColdscopeError("empty training set: no measured start-ups to fit")
    kinds = tuple(model.kinds)
    excluded = sorted({o.model for o in observations if o.features.kind not in kinds})
    used = [o for o in observations if o.features.kind in kinds]
    if not used:
        raise ColdscopeError(
            f"empty training set: none of the {len(observations)} start-ups is of a "
            f"{'/'.join(kinds)} model (use --kinds to include others)"
        )
    buckets = _buckets_present(used)
    rows = _aggregate(used, buckets)
    n = len(rows.models)
    if n < 3:
        raise ColdscopeError(
            f"need start-ups of at least 3 different models to fit and cross-validate; got {n}"
        )
    level = float(model.level)
    chosen: dict[str, tuple[str, ...]] = {}
    reports: dict[str, list[dict[str, Any]]] = {}
    for b in buckets:
        usable = [c for c in _candidates(model.formulas, b) if _usable(c, rows, settings)]
        if not usable:
            usable = [(INTERCEPT,)]
        scored = []
        held_out = []
        for terms in usable:
            X = _design(terms, rows, settings)
            res = _lomo_residuals(X, rows.y[b])
            held_out.append(res)
            scored.append({"terms": list(terms), "lomo_rmse": _rms(res),
                           "lomo_max_abs": float(np.max(np.abs(res))),
                           "coef": _ols(X, rows.y[b])[0].tolist()})
        k_best = min(range(len(scored)),
                     key=lambda k: (round(scored[k]["lomo_rmse"], 9), len(scored[k]["terms"])))
        for k, entry in enumerate(scored):
            entry["comparable"] = k == k_best or _comparable(held_out[k], held_out[k_best])
        chosen[b] = tuple(scored[k_best]["terms"])
        reports[b] = scored

    designs = {b: _design(chosen[b], rows, settings) for b in buckets}
    coefs, ginvs, resid = {}, {}, {}
    for b in buckets:
        coefs[b], ginvs[b], resid[b] = _ols(designs[b], rows.y[b])
    p = {b: designs[b].shape[1] for b in buckets}
    sigma: dict[str, dict[str, float]] = {b: {} for b in buckets}
    cross: dict[str, list[list[float]]] = {}
    for i, b in enumerate(buckets):
        for c in buckets[i:]:
            cov = float(resid[b] @ resid[c]) / max(n - max(p[b], p[c]), 1)
            sigma[b][c] = sigma[c][b] = cov
            if b != c:
                m = ginvs[b] @ designs[b].T @ designs[c] @ ginvs[c]
                cross[f"{b}|{c}"] = m.tolist()
                cross[f"{c}|{b}"] = m.T.tolist()
    within = None
    if rows.within is not None:
        within = {b: {c: float(rows.within[i, j]) for j, c in enumerate(buckets)}
                  for i, b in enumerate(buckets)}
    p_max = max(p.values())
    upper = 1 - (1 - level) / 2
    state: dict[str, Any] = {
        "kind": FILE_KIND,
        "schema_version": SCHEMA_VERSION,
        "created_by": f"coldscope {__version__}",
        "trained_on": {
            "source": source, "models": rows.models, "replicates": rows.replicates,
            "n_models": n, "kinds": list(kinds), "excluded": excluded,
            "selection": model.formulas if isinstance(model.formulas, str) else "given",
        },
        "environment": {k: v for k, v in environment.items() if k != "storage"},
        "settings": dict(settings),
        "storage": environment.get("storage"),
        "graph_size_source": _common(f.graph_size_source for f in rows.features),
        "interval": {"level": level, "t": t_quantile(upper, max(n - p_max, 1)),
                     "dof": max(n - p_max, 1), "method": "ols"},
        "buckets": {},
        "residual_cov": sigma,
        "within_cov": within,
        "cross": cross,
        "feature_ranges": _ranges(rows, settings),
        "feature_medians": _medians(rows, settings),
    }
    for b in buckets:
        state["buckets"][b] = {
            "terms": list(chosen[b]),
            "coef": coefs[b].tolist(),
            "formula": formula_text(b, chosen[b], coefs[b].tolist()),
            "t": t_quantile(upper, max(n - p[b], 1)),
            "xtx_inv": ginvs[b].tolist(),
            "residual_sd": math.sqrt(sigma[b][b]),
            "lomo_rmse": next(s["lomo_rmse"] for s in reports[b]
                              if tuple(s["terms"]) == chosen[b]),
            "candidates": reports[b],
            "pcc": _pcc_row(rows.y[b], rows, settings) if source != _FOLD else {},
            "mean_s": float(np.mean(rows.y[b])),
        }
    if MODEL_LOADING in buckets:
        state["loading_rate"] = _loading_rate(rows, level)
    if depth >= 1 and n >= 4:
        report, folds, residuals = _cross_validate(model, used, rows, environment, settings,
                                                   depth - 1)
        state["lomo"] = report
        if len(residuals) >= cv_plus_min_points(level):
            state["interval"]["method"] = "cv+"
            state["folds"] = folds
            state["cv_residuals"] = residuals
            _candidate_folds(state, rows, used, settings)
        if source != _FOLD:
            state["extrapolation"] = _extrapolate(model, used, rows, environment, settings,
                                                  state)
    state["interval"]["description"] = INTERVAL_METHODS[state["interval"]["method"]] + (
        "; plus pooled within-model run-to-run covariance" if within and
        state["interval"]["method"] == "ols" else "")
    return StartupModelFile.model_validate(state)


_FOLD = "lomo fold"  # the source of fold fits: they skip the correlation table

#: How each interval method works, recorded in the startup model file.
INTERVAL_METHODS = {
    "cv+": "CV+ (Barber et al. 2021, jackknife+ with one fold per model): the fold models' "
           "predictions widened by the held-out residuals of every training run, "
           "order-statistic quantiles",
    "ols": "OLS prediction interval per bucket; total from the cross-bucket residual covariance "
           "(SUR); Student t with n - p degrees of freedom",
}


def cv_plus_min_points(level: float) -> int:
    """Fewest held-out residuals for a finite CV+ interval: ceil(level (n + 1)) <= n."""
    n = 1
    while math.ceil(level * (n + 1) - 1e-9) > n:
        n += 1
    return n


# ---------------------------------------------------------------------------------------------


def _candidates(formulas: Any, bucket: str) -> tuple[tuple[str, ...], ...]:
    if formulas == "auto":
        return CANDIDATE_FORMULAS.get(bucket, ((INTERCEPT,),))
    if formulas == "paper":
        return (PAPER_FORMULAS.get(bucket, (INTERCEPT,)),)
    if isinstance(formulas, Mapping):
        terms = formulas.get(bucket, (INTERCEPT,))
        unknown = [t for t in terms if t != INTERCEPT and t not in FEATURES]
        if unknown:
            raise ColdscopeError(f"unknown feature {unknown[0]!r} in the {bucket} formula; "
                                 f"known: {', '.join(FEATURES)}")
        return (tuple(terms),)
    raise ColdscopeError(f"formulas must be 'auto', 'paper' or a mapping, not {formulas!r}")


def _buckets_present(observations: list[Observation]) -> list[str]:
    present = [b for b in BUCKETS if b != UNATTRIBUTED
               and all(o.buckets.get(b) is not None for o in observations)]
    return present + [UNATTRIBUTED]


def _aggregate(observations: list[Observation], buckets: list[str]) -> _Rows:
    by_model: dict[str, list[Observation]] = {}
    for o in observations:
        by_model.setdefault(o.model, []).append(o)
    models = sorted(by_model)
    per_run: dict[str, list[np.ndarray]] = {}
    y = {b: np.zeros(len(models)) for b in buckets}
    total = np.zeros(len(models))
    deviations: list[np.ndarray] = []
    replicates = []
    for i, m in enumerate(models):
        runs = by_model[m]
        mat = np.array([_bucket_vector(o, buckets) for o in runs])  # runs x buckets
        per_run[m] = list(mat)
        mean = mat.mean(axis=0)
        for j, b in enumerate(buckets):
            y[b][i] = mean[j]
        total[i] = float(np.mean([o.total_s for o in runs]))
        replicates.append(len(runs))
        if len(runs) > 1:
            deviations.extend(mat - mean)
    within = None
    dof = sum(r - 1 for r in replicates)
    if dof > 0:
        d = np.array(deviations)
        within = d.T @ d / dof
    return _Rows(models, [by_model[m][0].features for m in models], y, total, within, replicates)


def _bucket_vector(o: Observation, buckets: list[str]) -> list[float]:
    known = [float(o.buckets[b]) for b in buckets if b != UNATTRIBUTED]  # type: ignore[arg-type]
    return known + [float(o.total_s) - sum(known)]


def _usable(terms: tuple[str, ...], rows: _Rows, settings: Mapping[str, Any]) -> bool:
    n = len(rows.models)
    if n < len(terms) + 2:  # LOMO needs n - 1 > p
        return False
    try:
        X = _design(terms, rows, settings)
    except _Missing:
        return False
    return bool(np.linalg.matrix_rank(X) == X.shape[1])


class _Missing(Exception):
    pass


def _design(terms: tuple[str, ...], rows: _Rows, settings: Mapping[str, Any]) -> np.ndarray:
    """The design matrix of ``terms`` over the rows (columns cached per fit)."""
    X = np.empty((len(rows.features), len(terms)))
    for j, t in enumerate(terms):
        if t not in rows.columns:
            values = [term_value(t, f, settings) for f in rows.features]
            rows.columns[t] = None if any(v is None for v in values) else np.array(values, float)
        column = rows.columns[t]
        if column is None:
            raise _Missing(t)
        X[:, j] = column
    return X


def _ols(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ginv = np.linalg.pinv(X.T @ X)
    coef = ginv @ X.T @ y
    return coef, ginv, y - X @ coef


def _lomo_residuals(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Leave-one-out residuals of OLS, ``e_i / (1 - h_ii)`` (exact), refitting where h_ii ~ 1."""
    ginv = np.linalg.pinv(X.T @ X)
    resid = y - X @ (ginv @ X.T @ y)
    leverage = np.einsum("ij,jk,ik->i", X, ginv, X)
    res = np.empty(len(y))
    for i in range(len(y)):
        if 1.0 - leverage[i] > 1e-9:
            res[i] = resid[i] / (1.0 - leverage[i])
        else:
            keep = np.arange(len(y)) != i
            coef = np.linalg.lstsq(X[keep], y[keep], rcond=None)[0]
            res[i] = y[i] - X[i] @ coef
    return res


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


def _pcc_row(y: np.ndarray, rows: _Rows,
             settings: Mapping[str, Any]) -> dict[str, float | None]:
    """Pearson correlation of a bucket with every candidate feature (the paper's PCC table)."""
    out: dict[str, float | None] = {}
    for name in FEATURES:
        try:
            x = _design((name,), rows, settings)[:, 0]
        except _Missing:
            out[name] = None
            continue
        try:
            out[name] = statistics.correlation(x.tolist(), y.tolist())
        except statistics.StatisticsError:  # a constant column: no correlation to speak of
            out[name] = None
    return out


def _ranges(rows: _Rows, settings: Mapping[str, Any]) -> dict[str, list[float]]:
    out = {}
    for name in FEATURES:
        try:
            x = _design((name,), rows, settings)[:, 0]
        except _Missing:
            continue
        out[name] = [float(x.min()), float(x.max())]
    return out


def _medians(rows: _Rows, settings: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for name in FEATURES:
        try:
            out[name] = float(np.median(_design((name,), rows, settings)[:, 0]))
        except _Missing:
            continue
    return out


def _common(values: Any) -> Any:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None


def _cross_validate(model: FitOptions, observations: list[Observation], rows: _Rows,
                    environment: Mapping[str, Any], settings: Mapping[str, Any],
                    depth: int) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """Leave each model out, refit (choosing formulas again), predict it.

    Returns the LOMO report (held-out errors of each model's mean total, and whether it fell
    inside its fold's interval when the folds have intervals of their own), the fold models
    (bucket terms and coefficients) and the CV+ residuals: for every training run, its bucket
    and total seconds minus the prediction of the fold that left its model out.
    """
    per_model: dict[str, Any] = {}
    folds: list[dict[str, Any]] = []
    residuals: list[dict[str, Any]] = []
    covered = checked = 0
    for i, m in enumerate(rows.models):
        rest = [o for o in observations if o.model != m]
        fold = fit_startup_model(model, rest, environment, settings, _FOLD, depth=depth)
        names = list(fold.buckets)
        folds.append({"left_out": m, "buckets": {
            b: {"terms": v.terms, "coef": v.coef} for b, v in fold.buckets.items()}})
        # the held-out model is predicted as users' models are: with the range rule
        fitted = {b: sum(c.values()) for b, c in core.explain(fold, rows.features[i]).items()}
        for o in observations:
            if o.model == m:
                values = dict(zip(names, _bucket_vector(o, names), strict=True))
                residuals.append({"fold": i, "total": o.total_s - sum(fitted.values()),
                                  "buckets": {b: values[b] - fitted[b] for b in names}})
        actual = float(rows.total[i])
        entry: dict[str, Any] = {
            "actual_s": actual, "predicted_s": sum(fitted.values()),
            "error_s": sum(fitted.values()) - actual,
            "stages": {b: {"actual_s": float(rows.y[b][i]), "predicted_s": fitted[b]}
                       for b in names if b in rows.y},
        }
        if fold.interval.method == "cv+":
            pred = core.predict(fold, rows.features[i])
            entry["interval"] = {"low": pred.interval.low, "high": pred.interval.high}
            entry["inside"] = pred.interval.low <= actual <= pred.interval.high
            covered += entry["inside"]
            checked += 1
        per_model[m] = entry
    e = np.array([v["error_s"] for v in per_model.values()])
    total: dict[str, Any] = {"mse": float(np.mean(e**2)), "rmse": _rms(e),
                             "max_abs": float(np.max(np.abs(e)))}
    if checked:
        total["coverage"] = f"{covered}/{checked}"
    return {"total": total, "per_model": per_model}, folds, residuals


# -- the range rule's ingredients -------------------------------------------------------------


def _comparable(res: np.ndarray, best: np.ndarray, alpha: float = 0.05) -> bool:
    """Whether a candidate's LOMO error is not significantly worse than the best's.

    One-sided paired t-test on the per-model squared held-out errors (a Diebold-Mariano test
    on leave-one-model-out losses): comparable unless the mean excess squared error exceeds
    ``t_{1-alpha}(n-1)`` standard errors of that mean.
    """
    d = np.square(res) - np.square(best)
    n = len(d)
    mean = float(np.mean(d))
    if mean <= 0:
        return True
    if n < 3:
        return False
    se = float(np.std(d, ddof=1)) / math.sqrt(n)
    return mean <= t_quantile(1 - alpha, n - 1) * se


def _candidate_folds(state: dict[str, Any], rows: _Rows, observations: list[Observation],
                     settings: Mapping[str, Any]) -> None:
    """CV+ ingredients of every comparable alternative: per-fold coefficients (fold ``i``
    leaves out ``rows.models[i]``, the order of ``state["folds"]``) and per-run held-out
    residuals (the order of ``state["cv_residuals"]``)."""
    names = list(state["buckets"])
    runs = [(i, _bucket_vector(o, names)) for i, m in enumerate(rows.models)
            for o in observations if o.model == m]
    for j, b in enumerate(names):
        spec = state["buckets"][b]
        for cand in spec["candidates"]:
            if not cand.get("comparable") or cand["terms"] == spec["terms"]:
                continue
            X = _design(tuple(cand["terms"]), rows, settings)
            coefs = []
            for i in range(len(rows.models)):
                keep = np.arange(len(rows.models)) != i
                coefs.append(np.linalg.lstsq(X[keep], rows.y[b][keep], rcond=None)[0])
            cand["folds"] = [c.tolist() for c in coefs]
            cand["cv_residuals"] = [float(v[j] - X[i] @ coefs[i]) for i, v in runs]


def _loading_rate(rows: _Rows, level: float) -> dict[str, Any] | None:
    """The marginal loading rate (s/GB) on the smaller and the larger half of the models."""
    try:
        gb = _design(("weight_gb",), rows, {})[:, 0]
    except _Missing:
        return None
    n = len(gb)
    half = (n + 1) // 2
    if half < 3:
        return None
    order = np.argsort(gb, kind="stable")
    y = rows.y[MODEL_LOADING]
    out: dict[str, Any] = {}
    dof = half - 2
    for side, idx in (("lower", order[:half]), ("upper", order[n - half:])):
        X = np.column_stack([np.ones(half), gb[idx]])
        if np.linalg.matrix_rank(X) < 2:  # one size in this half: no rate to measure
            return None
        coef, ginv, resid = _ols(X, y[idx])
        s2 = float(resid @ resid) / max(dof, 1)
        out[f"{side}_rate"] = float(coef[1])
        out[f"{side}_se"] = math.sqrt(max(s2 * ginv[1, 1], 0.0))
        out[f"{side}_models"] = [rows.models[i] for i in idx]
    t = t_quantile(1 - (1 - level) / 2, 2 * max(dof, 1))
    out["t"] = t
    diff = abs(out["upper_rate"] - out["lower_rate"])
    out["constant"] = diff <= t * math.hypot(out["lower_se"], out["upper_se"])
    return out


def _extreme_models(rows_models: list[str], features: list[ModelFeatures]) -> dict[str, list[str]]:
    """model -> which extremes it is: the deepest (most layers, then parameters), the largest
    and the smallest (parameters, else weight bytes) of the training models."""
    def size(f: ModelFeatures) -> float | None:
        return f.params if f.params is not None else f.weight_bytes

    out: dict[str, list[str]] = {}
    picks = []
    layered = [(f.num_layers, size(f) or 0, m) for m, f in zip(rows_models, features, strict=True)
               if f.num_layers is not None]
    if layered:
        picks.append(("deepest", max(layered)[2]))
    sized = [(size(f), m) for m, f in zip(rows_models, features, strict=True)
             if size(f) is not None]
    if sized:
        picks.append(("largest", max(sized)[1]))
        picks.append(("smallest", min(sized)[1]))
    for label, m in picks:
        out.setdefault(m, []).append(label)
    return out


def _extrapolate(model: FitOptions, observations: list[Observation], rows: _Rows,
                 environment: Mapping[str, Any], settings: Mapping[str, Any],
                 state: dict[str, Any]) -> dict[str, Any] | None:
    """Extrapolation folds: hold out each extreme training model, refit on the rest.

    Per candidate formula (refitted alone): its held-out error, into the candidate's
    ``extrap_rmse`` / ``extrap_max_abs``. The whole fit (formula choice, range rule, CV+
    intervals of its own) on the rest: the held-out total's error and whether it fell inside
    its interval - the check that the range rule and the intervals hold where users need them.
    The fold fits have depth 1 (their own CV+ residuals come from un-nested folds), which
    keeps ``fit`` fast; ``benches/bench_predict.py`` redoes them at full depth.
    """
    extremes = _extreme_models(rows.models, rows.features)
    if len(rows.models) < 5 or not extremes:
        return None
    index = {m: i for i, m in enumerate(rows.models)}
    errors: dict[tuple[str, int], list[float]] = {}
    per_model: dict[str, Any] = {}
    covered = checked = 0
    for m, labels in extremes.items():
        i = index[m]
        keep = np.arange(len(rows.models)) != i
        for b, spec in state["buckets"].items():
            for k, cand in enumerate(spec["candidates"]):
                X = _design(tuple(cand["terms"]), rows, settings)
                if np.linalg.matrix_rank(X[keep]) < X.shape[1]:
                    continue
                coef = np.linalg.lstsq(X[keep], rows.y[b][keep], rcond=None)[0]
                errors.setdefault((b, k), []).append(float(X[i] @ coef - rows.y[b][i]))
        rest = [o for o in observations if o.model != m]
        fold = fit_startup_model(model, rest, environment, settings, _FOLD, depth=1)
        pred = core.predict(fold, rows.features[i])
        served = core.served(fold, rows.features[i])
        actual = float(rows.total[i])
        entry: dict[str, Any] = {
            "extremes": labels, "actual_s": actual, "predicted_s": pred.total_s,
            "error_s": pred.total_s - actual,
            "stages": {b: {"actual_s": float(rows.y[b][i]), "predicted_s": sp.s}
                       for b, sp in pred.stages.items() if b in rows.y},
            "served": {b: v.formula for b, v in served.items()},
        }
        if fold.interval.method == "cv+":
            entry["interval"] = {"low": pred.interval.low, "high": pred.interval.high}
            entry["inside"] = pred.interval.low <= actual <= pred.interval.high
            inside = [pred.stages[b].interval.low - 1e-9 <= rows.y[b][i]
                      <= pred.stages[b].interval.high + 1e-9
                      for b in pred.stages if b in rows.y]
            entry["stages_inside"] = f"{sum(inside)}/{len(inside)}"
            covered += entry["inside"]
            checked += 1
        per_model[m] = entry
    for (b, k), errs in errors.items():
        e = np.array(errs)
        state["buckets"][b]["candidates"][k]["extrap_rmse"] = _rms(e)
        state["buckets"][b]["candidates"][k]["extrap_max_abs"] = float(np.max(np.abs(e)))
    e = np.array([v["error_s"] for v in per_model.values()])
    total: dict[str, Any] = {"mse": float(np.mean(e**2)), "rmse": _rms(e),
                             "max_abs": float(np.max(np.abs(e)))}
    if checked:
        total["coverage"] = f"{covered}/{checked}"
    return {"total": total, "per_model": per_model}
