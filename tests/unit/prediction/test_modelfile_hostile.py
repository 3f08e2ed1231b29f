"""Hostile startup model files: a real fitted (and a real calibrated) file from the paper's data,
mutated one class at a time. Each must fail on load with one line naming the field it broke -
in the library, in ``predict --startup-model`` and ``calibrate`` (exit 2, no traceback), and in
``serve --startup-model`` before it binds - and ``calibrate`` must refuse what would overflow.

The expected field of each error is the path the test itself mutated; the sign rule's boundary
is checked against scipy's Student t and numpy's least squares, not against the code.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from coldscope.cli.main import main
from coldscope.prediction.calibrate import calibrate
from coldscope.prediction.core import Observation
from coldscope.prediction.features import ModelFeatures
from coldscope.prediction.formulas import t_tail
from coldscope.prediction.modelfile import MAX_MAGNITUDE, SIGN_ALPHA
from coldscope.prediction.paper import observations_from_paper, paper_environment
from coldscope.prediction.startup_model import StartupModel
from coldscope.util.errors import ColdscopeError

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
PAPER = SHARED / "data" / "paper"
L40S = PAPER / "figures" / "figure-10" / "gpu1" / "avg_comparison_results.json"
PAIR = ["qwen-14b", "yi-9b"]


@pytest.fixture(scope="module")
def fitted() -> dict[str, Any]:
    """The paper's main table fitted as ``coldscope fit --paper`` does: CV+ folds, candidates
    with their own folds, the loading rate, LOMO and extrapolation reports."""
    model = StartupModel().fit(observations_from_paper(PAPER), paper_environment(PAPER),
                               {"capture_sizes": 67}, source=str(PAPER))
    data = model.to_dict()
    assert data["interval"]["method"] == "cv+" and data["folds"] and data["loading_rate"]
    return data


@pytest.fixture(scope="module")
def calibrated(fitted: dict[str, Any]) -> dict[str, Any]:
    """That model calibrated on two models of the paper's L40S node."""
    base = StartupModel.from_dict(fitted).file_
    cal = calibrate(base, observations_from_paper(PAPER, L40S),
                    environment=paper_environment(PAPER, L40S), source="l40s",
                    base_source="h100", models=PAIR)
    return cal.model_dump(mode="json", exclude_none=True)


def _refused(data: dict[str, Any], *fragments: str) -> str:
    """The one-line error loading ``data`` gives; it names every fragment."""
    with pytest.raises(ColdscopeError) as info:
        StartupModel.from_dict(data, "m.json")
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith("malformed startup model m.json: ") or "startup model" in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def _mutated(data: dict[str, Any], change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    change(out)
    return out


def test_the_fitted_and_calibrated_files_load_and_round_trip(
        fitted: dict[str, Any], calibrated: dict[str, Any], tmp_path: Path) -> None:
    for data in (fitted, calibrated):
        path = tmp_path / "m.json"
        path.write_text(json.dumps(data))
        assert StartupModel.load(path).to_dict() == data


# -- a missing bucket or key -------------------------------------------------------------------


@pytest.mark.parametrize("change, fragments", [
    (lambda d: d["residual_cov"].pop("bootstrap"), ["residual_cov lacks bootstrap"]),
    (lambda d: d["residual_cov"]["tokenizer"].pop("model_loading"),
     ["residual_cov.tokenizer lacks model_loading"]),
    (lambda d: d["cross"].pop("model_loading|torch_compile"),
     ["cross lacks model_loading|torch_compile"]),
    (lambda d: d["folds"][4]["buckets"].pop("kv_cache_profiling"),
     ["folds[4].buckets lacks kv_cache_profiling"]),
    (lambda d: d["cv_residuals"][3]["buckets"].pop("torch_compile"),
     ["cv_residuals[3].buckets lacks torch_compile"]),
    (lambda d: d["buckets"].pop("model_loading"),
     ["residual_cov has 'model_loading', which is not a bucket of this model"]),
    (lambda d: d["buckets"]["model_loading"].pop("coef"),
     ["buckets.model_loading.coef", "required"]),
    (lambda d: d.pop("interval"), ["interval", "required"]),
    (lambda d: d.pop("cv_residuals"), ["cv+ interval needs folds and cv_residuals"]),
    (lambda d: d["feature_ranges"].pop("weight_gb"), ["feature_ranges", "weight_gb"]),
    (lambda d: d["feature_medians"].pop("layers"), ["feature_medians", "layers"]),
    (lambda d: d["folds"].pop(), ["folds: 11 for 12 training models"]),
    (lambda d: d["cv_residuals"].pop(0), ["cv_residuals: 11 for 12 training runs"]),
])
def test_a_missing_bucket_or_key_is_one_line_naming_it(
        fitted: dict[str, Any], change: Callable[[dict[str, Any]], object],
        fragments: list[str]) -> None:
    _refused(_mutated(fitted, change), *fragments)


def test_a_calibration_without_a_bucket(calibrated: dict[str, Any]) -> None:
    _refused(_mutated(calibrated, lambda d: d["calibration"]["stages"].pop("torch_compile")),
             "calibration.stages lacks torch_compile")


# -- buckets that are not stages, terms that are not features, shapes -------------------------


def test_a_bucket_named_total_or_anything_else_is_refused(fitted: dict[str, Any]) -> None:
    def rename(d: dict[str, Any], new: str) -> None:
        d["buckets"][new] = d["buckets"].pop("unattributed")
    for name in ("total", "Total", "model-loading", "unattributed "):
        _refused(_mutated(fitted, lambda d, n=name: rename(d, n)),  # type: ignore[misc]
                 "buckets:", repr(name), "is not a start-up bucket")
    added = _mutated(fitted, lambda d: d["buckets"].__setitem__(
        "total", copy.deepcopy(d["buckets"]["bootstrap"])))
    _refused(added, "buckets:", "'total' is not a start-up bucket")
    folded = _mutated(fitted, lambda d: d["folds"][0]["buckets"].__setitem__(
        "total", d["folds"][0]["buckets"]["bootstrap"]))
    _refused(folded, "'total' is not a start-up bucket (in folds[0].buckets)")


@pytest.mark.parametrize("change, fragments", [
    (lambda d: d["buckets"]["model_loading"].__setitem__("terms", ["weight_tb"]),
     ["buckets.model_loading.terms", "unknown term 'weight_tb'"]),
    (lambda d: d["buckets"]["kv_cache_profiling"].__setitem__("terms", ["1", "1"]),
     ["buckets.kv_cache_profiling.terms", "appears twice"]),
    (lambda d: d["folds"][2]["buckets"]["bootstrap"].__setitem__("terms", ["secret"]),
     ["folds[2].buckets.bootstrap.terms", "unknown term"]),
    (lambda d: d["buckets"]["model_loading"].__setitem__("xtx_inv", [[1.0, 0.0], [0.0, 1.0]]),
     ["buckets.model_loading", "disagree in length"]),
    (lambda d: d["cross"].__setitem__("bootstrap|tokenizer", [[1.0, 2.0]]),
     ["cross.bootstrap|tokenizer is not 1 x 1"]),
    (lambda d: d["cross"].__setitem__("bootstrap|total", [[1.0]]),
     ["cross has 'bootstrap|total', which is not a pair of this model's buckets"]),
    (lambda d: d["folds"][0].__setitem__("left_out", "qwen-14b"),
     ["folds[0] leaves out 'qwen-14b'"]),
    (lambda d: d["cv_residuals"][0].__setitem__("fold", 99),
     ["cv_residuals[0] names fold 99"]),
    (lambda d: d["buckets"]["torch_compile"]["candidates"][0]["folds"].pop(),
     ["buckets.torch_compile.candidates[0]", "folds or cv_residuals"]),
    (lambda d: d["trained_on"].__setitem__("n_models", 13), ["trained_on", "13 models"]),
    (lambda d: d["buckets"]["bootstrap"]["pcc"].__setitem__("layers", 1.5),
     ["buckets.bootstrap.pcc", "[-1, 1]"]),
    (lambda d: d["lomo"]["per_model"]["yi-6b"].__setitem__("interval",
                                                          {"low": 30.0, "high": 20.0}),
     ["lomo.per_model.yi-6b.interval", "low <= high"]),
])
def test_shapes_that_do_not_fit_together(fitted: dict[str, Any],
                                         change: Callable[[dict[str, Any]], object],
                                         fragments: list[str]) -> None:
    _refused(_mutated(fitted, change), *fragments)


def test_a_loading_rate_without_model_loading(fitted: dict[str, Any]) -> None:
    def drop(d: dict[str, Any]) -> None:
        for key in ("buckets", "residual_cov"):
            d[key].pop("model_loading")
        for row in d["residual_cov"].values():
            row.pop("model_loading")
        d["cross"] = {k: v for k, v in d["cross"].items() if "model_loading" not in k}
        for fold in d["folds"]:
            fold["buckets"].pop("model_loading")
        for r in d["cv_residuals"]:
            r["buckets"].pop("model_loading")
    _refused(_mutated(fitted, drop), "loading_rate: the model has no model_loading bucket")


# -- signs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bucket, where, term", [
    ("model_loading", "buckets.model_loading", "weight_gb"),
    ("torch_compile", "buckets.torch_compile", "layers"),
    ("tokenizer", "buckets.tokenizer", "tokenizer_mib"),
    ("bootstrap", "buckets.bootstrap", "coefficient of 1"),
])
def test_a_flipped_cost_or_mean_is_refused(fitted: dict[str, Any], bucket: str, where: str,
                                           term: str) -> None:
    """Each of these one-term formulas is measured far beyond noise (numpy's t below)."""
    spec = fitted["buckets"][bucket]
    assert len(spec["terms"]) == 1
    flipped = _mutated(fitted, lambda d: d["buckets"][bucket].__setitem__(
        "coef", [-spec["coef"][0]]))
    _refused(flipped, where, term, "cannot be negative")


def test_negative_costs_in_candidates_folds_and_calibration(
        fitted: dict[str, Any], calibrated: dict[str, Any]) -> None:
    cands = fitted["buckets"]["model_loading"]["candidates"]
    k = next(i for i, c in enumerate(cands) if c["terms"] == ["weight_gb"] and "coef" in c)
    _refused(_mutated(fitted, lambda d: d["buckets"]["model_loading"]["candidates"][k]
                      .__setitem__("coef", [-1.84])),
             f"buckets.model_loading.candidates[{k}]", "weight_gb", "cannot be negative")
    _refused(_mutated(fitted, lambda d: d["folds"][5]["buckets"]["model_loading"]
                      .__setitem__("coef", [-1.84])),
             "folds[5].buckets.model_loading", "cannot be negative")
    _refused(_mutated(calibrated, lambda d: d["calibration"]["stages"]["model_loading"]
                      .__setitem__("value", -0.1)),
             "calibration.stages.model_loading", "ratio", "cannot be negative")
    _refused(_mutated(fitted, lambda d: d["residual_cov"]["bootstrap"]
                      .__setitem__("bootstrap", -0.5)),
             "residual_cov.bootstrap.bootstrap is a variance")
    _refused(_mutated(fitted, lambda d: d["buckets"]["tokenizer"].__setitem__(
        "residual_sd", -0.1)), "buckets.tokenizer.residual_sd")
    _refused(_mutated(fitted, lambda d: d["loading_rate"].__setitem__("upper_se", -1.0)),
             "loading_rate.upper_se")


def _noisy_campaign(n: int, seed: int) -> list[Observation]:
    """``n`` models; every stage a constant plus noise except loading (2 s/GB): the other size
    terms have nil costs, so their fitted slopes are negative about half the time."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        layers, gb = 8 + 4 * i, 1.0 + 1.7 * ((i * 7) % n)
        f = ModelFeatures(name=f"m{i}", source="features", kind="dense",
                          params=int(gb * 5e8), params_source="published",
                          weight_bytes=int(gb * 1e9), bytes_per_param=2.0, num_layers=layers,
                          tokenizer_bytes=2 * 2**20)
        b = {"bootstrap": 5.0 + 0.2 * rng.standard_normal(), "tokenizer": 0.3,
             "model_loading": 2.0 * gb + 0.3 * rng.standard_normal(),
             "torch_compile": 20.0 + 0.5 * rng.standard_normal(),
             "kv_cache_profiling": 0.5 + 0.1 * rng.standard_normal(),
             "cuda_graph_capture": None}
        out.append(Observation(f.name, f, b,
                               sum(v for v in b.values() if v is not None) + 0.2))
    return out


@pytest.mark.parametrize("n, seed", [(4, 27), (6, 3), (12, 34), (12, 1)])
def test_honest_fits_with_negative_slopes_still_load(n: int, seed: int,
                                                     tmp_path: Path) -> None:
    model = StartupModel().fit(_noisy_campaign(n, seed), {}, {})
    slopes = [c for spec in model.file_.buckets.values()
              for t, c in zip(spec.terms, spec.coef, strict=True) if t != "1"]
    path = tmp_path / "m.json"
    model.save(path)
    assert StartupModel.load(path).to_dict() == model.to_dict()
    assert slopes  # the campaigns do give size terms


def test_the_sign_rule_is_students_t_at_one_in_ten_billion(fitted: dict[str, Any]) -> None:
    """torch_compile = c x layers on 12 models (11 degrees of freedom): a negative c is
    refused exactly where scipy's t puts it below SIGN_ALPHA; the standard error is numpy's."""
    spec = fitted["buckets"]["torch_compile"]
    assert spec["terms"] == ["layers"]
    obs = observations_from_paper(PAPER)
    by_model: dict[str, list[Observation]] = {}
    for o in obs:
        if o.features.kind == "dense":  # what fit trains on by default
            by_model.setdefault(o.model, []).append(o)
    assert len(by_model) == 12
    x = np.array([float(v[0].features.num_layers) for v in by_model.values()])
    y = np.array([np.mean([o.buckets["torch_compile"] for o in v]) for v in by_model.values()])
    coef = float(np.linalg.lstsq(x[:, None], y, rcond=None)[0][0])
    dof = len(x) - 1
    se = math.sqrt(float(np.sum((y - coef * x) ** 2)) / dof / float(x @ x))
    assert spec["coef"][0] == pytest.approx(coef, rel=1e-9)
    limit = float(stats.t.isf(SIGN_ALPHA, dof)) * se
    StartupModel.from_dict(_mutated(fitted, lambda d: d["buckets"]["torch_compile"]
                                    .__setitem__("coef", [-0.99 * limit])))
    _refused(_mutated(fitted, lambda d: d["buckets"]["torch_compile"]
                      .__setitem__("coef", [-1.01 * limit])),
             "buckets.torch_compile", "standard errors below zero")
    for t, d in [(0.0, 1), (1.5, 2), (8.0, 5), (25.0, 11), (-3.0, 4), (300.0, 30)]:
        assert t_tail(t, d) == pytest.approx(float(stats.t.sf(t, d)), rel=1e-9)


def test_an_unattributed_remainder_and_a_multi_size_slope_may_be_negative(
        fitted: dict[str, Any]) -> None:
    """Not sign-constrained (the module doc): the remainder after overlapping stages, and a
    partial slope of a formula with several size terms."""
    assert fitted["buckets"]["cuda_graph_capture"]["terms"] == [
        "1", "layers_x_capture", "weight_gb_x_capture"]
    StartupModel.from_dict(_mutated(fitted, lambda d: d["buckets"]["unattributed"]
                                    .__setitem__("coef", [-0.5])))
    StartupModel.from_dict(_mutated(fitted, lambda d: d["buckets"]["cuda_graph_capture"]
                                    ["coef"].__setitem__(1, -0.0003)))


# -- ranges ---------------------------------------------------------------------------------


@pytest.mark.parametrize("change, fragments", [
    (lambda d: d["feature_ranges"].__setitem__("weight_gb", [28.34, 1.24]),
     ["feature_ranges: weight_gb: the low end 28.34 is above the high end 1.24"]),
    (lambda d: d["feature_ranges"].__setitem__("layers", [-24.0, 48.0]),
     ["feature_ranges.layers[0]", "greater than or equal to 0"]),
    (lambda d: d["feature_ranges"].__setitem__("layers", [24.0]), ["feature_ranges.layers"]),
    (lambda d: d["feature_medians"].__setitem__("layers", 96.0),
     ["feature_medians.layers = 96 is outside its training range 24-48"]),
    (lambda d: d["interval"].__setitem__("level", 1.5), ["interval.level"]),
    (lambda d: d["interval"].__setitem__("dof", 0), ["interval.dof"]),
    (lambda d: d["settings"].__setitem__("capture_sizes", 10**18),
     ["settings: capture_sizes is a whole number from 0 to 100000"]),
])
def test_ranges_out_of_order_or_out_of_bounds(fitted: dict[str, Any],
                                              change: Callable[[dict[str, Any]], object],
                                              fragments: list[str]) -> None:
    _refused(_mutated(fitted, change), *fragments)


# -- numbers: NaN, Infinity, 1e308, wrong types ----------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308, -1e308, 1e13])
@pytest.mark.parametrize("path", [
    ("buckets", "model_loading", "coef", 0),
    ("buckets", "torch_compile", "xtx_inv", 0, 0),
    ("residual_cov", "bootstrap", "tokenizer"),
    ("cross", "bootstrap|model_loading", 0, 0),
    ("feature_medians", "weight_gb"),
    ("cv_residuals", 2, "total"),
    ("folds", 1, "buckets", "torch_compile", "coef", 0),
    ("loading_rate", "lower_rate"),
    ("lomo", "per_model", "qwen-4b", "actual_s"),
])
def test_non_finite_and_huge_numbers(fitted: dict[str, Any], value: float,
                                     path: tuple[str | int, ...]) -> None:
    def put(d: dict[str, Any]) -> None:
        node: Any = d
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    where = ".".join(str(p) for p in path if not isinstance(p, int))
    _refused(_mutated(fitted, put), where.split(".")[0])
    message = _refused(_mutated(fitted, put))
    assert where.split(".")[-1] in message or where.split(".")[0] in message


def test_nan_and_infinity_in_the_json_text(fitted: dict[str, Any], tmp_path: Path) -> None:
    for token in ("NaN", "Infinity", "-Infinity", "1e999"):
        text = json.dumps(fitted).replace('"mean_s": ', f'"mean_s": {token}, "_x": ', 1)
        path = tmp_path / "m.json"
        path.write_text(text)
        with pytest.raises(ColdscopeError) as info:
            StartupModel.load(path)
        assert "\n" not in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("path, value", [
    (("buckets", "model_loading", "coef", 0), "1.84"),
    (("buckets", "model_loading", "coef", 0), True),
    (("buckets", "model_loading", "coef"), 1.84),
    (("buckets", "model_loading", "terms"), "weight_gb"),
    (("interval", "dof"), 9.5),
    (("interval", "dof"), "9"),
    (("trained_on", "n_models"), True),
    (("trained_on", "replicates", 0), 1.0),
    (("buckets",), ["bootstrap"]),
    (("interval",), None),
    (("calibration",), "yes"),
    (("settings", "capture_sizes"), "67"),
    (("settings", "capture_sizes"), 67.0),
])
def test_wrong_types(fitted: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    def put(d: dict[str, Any]) -> None:
        node: Any = d
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    _refused(_mutated(fitted, put), str(path[0]))


# -- unknown keys: refused, as core.records refuses them ----------------------------------------


@pytest.mark.parametrize("path, fragments", [
    ((), ["comment", "Extra inputs are not permitted"]),
    (("buckets", "model_loading"), ["buckets.model_loading.comment", "not permitted"]),
    (("interval",), ["interval.comment"]),
    (("folds", 0), ["folds[0].comment"]),
    (("settings",), ["settings: 'comment' is not an engine setting"]),
    (("feature_ranges",), ["feature_ranges: 'comment' is not a feature"]),
    (("buckets", "bootstrap", "pcc"), ["buckets.bootstrap.pcc: 'comment' is not a feature"]),
])
def test_unknown_keys_are_refused(fitted: dict[str, Any], path: tuple[str | int, ...],
                                  fragments: list[str]) -> None:
    value: Any = [0.0, 1.0] if path == ("feature_ranges",) else 0.5

    def put(d: dict[str, Any]) -> None:
        node: Any = d
        for key in path:
            node = node[key]
        node["comment"] = value
    _refused(_mutated(fitted, put), *fragments)


def test_a_bad_storage_setting_in_a_calibration(calibrated: dict[str, Any]) -> None:
    bad = _mutated(calibrated, lambda d: d["calibration"]["environment"].__setitem__(
        "storage", {"page_cache": "lukewarm"}))
    _refused(bad, "calibration", "environment.storage", "page_cache")


# -- empty and huge files ----------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "", "{}", "[]", "null", "3", '{"kind": "coldscope-startup-model"}',
    '{"kind": "coldscope-startup-model", "schema_version": 7}'])
def test_empty_and_trivial_files(text: str, tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ColdscopeError) as info:
        StartupModel.load(path)
    assert "\n" not in str(info.value)


def test_a_file_over_the_input_bound(fitted: dict[str, Any], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(fitted) + " " * 2_000_000)
    monkeypatch.setenv("COLDSCOPE_MAX_INPUT_BYTES", "1000000")
    with pytest.raises(ColdscopeError) as info:
        StartupModel.load(path)
    assert "\n" not in str(info.value) and "COLDSCOPE_MAX_INPUT_BYTES" in str(info.value)


def test_a_huge_file_under_the_bound_is_refused_by_its_counts(fitted: dict[str, Any],
                                                              tmp_path: Path) -> None:
    """12,012 held-out residuals (~2.5 MB) for 12 training runs: refused on the count before
    they are validated one by one."""
    data = _mutated(fitted, lambda d: d["cv_residuals"].extend(d["cv_residuals"] * 1000))
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    assert path.stat().st_size > 2_000_000
    with pytest.raises(ColdscopeError, match=r"cv_residuals: 12012 for 12 training runs"):
        StartupModel.load(path)


# -- calibrate: no overflow --------------------------------------------------------------------


def test_calibration_runs_that_would_overflow_are_refused(fitted: dict[str, Any]) -> None:
    base = StartupModel.from_dict(fitted).file_
    obs = observations_from_paper(PAPER, L40S)
    for bad in (1e308, math.inf, math.nan, 2 * MAX_MAGNITUDE):
        runs = [Observation(o.model, o.features, {**o.buckets, "bootstrap": bad}, o.total_s)
                if o.model == PAIR[0] else o for o in obs]
        with pytest.raises(ColdscopeError, match=f"calibration run of {PAIR[0]}: bootstrap"):
            calibrate(base, runs, environment={}, source="t", base_source="b", models=PAIR)
    runs = [Observation(o.model, o.features, dict(o.buckets), -1.0 if o.model == PAIR[1]
                        else o.total_s) for o in obs]
    with pytest.raises(ColdscopeError, match="cannot be negative"):
        calibrate(base, runs, environment={}, source="t", base_source="b", models=PAIR)


def test_a_ratio_beyond_the_bound_is_refused_not_an_overflow(fitted: dict[str, Any]) -> None:
    """A loadable base whose loading cost is 1e-300 s/GB: the L40S runs' ratio would be ~1e300,
    whose spread overflowed before."""
    tiny = _mutated(fitted, lambda d: d["buckets"]["model_loading"].__setitem__(
        "coef", [1e-300]))
    base = StartupModel.from_dict(tiny).file_
    with pytest.raises(ColdscopeError, match="the ratio of model_loading from") as info:
        calibrate(base, observations_from_paper(PAPER, L40S), environment={}, source="t",
                  base_source="b", models=PAIR)
    assert "\n" not in str(info.value)


# -- the CLI: predict, calibrate, serve ----------------------------------------------------------


BAD_FILES: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "missing bucket": (lambda d: d["residual_cov"].pop("bootstrap"), "residual_cov"),
    "total bucket": (lambda d: d["buckets"].__setitem__("total", d["buckets"]["bootstrap"]),
                     "'total'"),
    "negative cost": (lambda d: d["buckets"]["model_loading"].__setitem__("coef", [-1.84]),
                      "buckets.model_loading"),
    "inverted range": (lambda d: d["feature_ranges"].__setitem__("weight_gb", [28.0, 1.0]),
                       "feature_ranges"),
    "1e308": (lambda d: d["buckets"]["bootstrap"].__setitem__("coef", [1e308]),
              "buckets.bootstrap.coef"),
}


def _write_bad(fitted: dict[str, Any], kind: str, tmp_path: Path) -> tuple[Path, str]:
    change, field = BAD_FILES[kind]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_mutated(fitted, change)))
    return path, field


def _one_line_error(err: str, path: Path, field: str) -> None:
    assert "Traceback" not in err
    assert err.startswith(f"error: malformed startup model {path}: ") and err.count("\n") == 1
    assert field in err


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_predict_with_a_bad_startup_model(fitted: dict[str, Any], kind: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, field = _write_bad(fitted, kind, tmp_path)
    features = tmp_path / "x.json"
    features.write_text(_noisy_campaign(4, 0)[2].features.model_dump_json())
    assert main(["predict", str(features), "--startup-model", str(path), "--json"]) == 2
    _one_line_error(capsys.readouterr().err, path, field)


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_calibrate_with_a_bad_base_model(fitted: dict[str, Any], kind: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path, field = _write_bad(fitted, kind, tmp_path)
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(path), "--paper", str(PAPER), "--timings", str(L40S),
                 "--models", ",".join(PAIR), "--out", str(out)]) == 2
    _one_line_error(capsys.readouterr().err, path, field)
    assert not out.exists()


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_serve_refuses_a_bad_startup_model_before_binding(
        fitted: dict[str, Any], kind: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    def bind(self: object) -> None:
        raise AssertionError("serve started with a bad startup model")
    monkeypatch.setattr(uvicorn.Server, "run", bind)
    path, field = _write_bad(fitted, kind, tmp_path)
    assert main(["serve", "--startup-model", str(path), "--store", str(tmp_path / "s.db"),
                 "--port", "0"]) == 2
    _one_line_error(capsys.readouterr().err, path, field)
