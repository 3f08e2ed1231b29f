"""The startup model: fits compared with least squares solved directly, paper data mapping,
interval methods against independent implementations, domain warnings, store records."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS, STAGES, UNATTRIBUTED
from coldscope.prediction.features import ModelFeatures
from coldscope.prediction.fit import Observation, cv_plus_min_points
from coldscope.prediction.paper import (
    PAPER_CAPTURE_SIZES,
    model_name,
    observations_from_paper,
    paper_environment,
    paper_features,
)
from coldscope.prediction.startup_model import (
    StartupModel,
    estimate_startup,
    t_quantile,
    term_value,
)
from coldscope.prediction.training import observations_from_runs
from coldscope.util.errors import ColdscopeError

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
PAPER = SHARED / "data" / "paper"
AVG = PAPER / "figures" / "figure-rest" / "avg_comparison_results.json"
SETTINGS = {"capture_sizes": PAPER_CAPTURE_SIZES}


@pytest.fixture(scope="module")
def paper_model() -> StartupModel:
    obs = observations_from_paper(PAPER)
    return StartupModel().fit(obs, paper_environment(PAPER), SETTINGS, source=str(PAPER))


def _features(name: str, layers: int, weight_gb: float, kind: str = "dense",
              tokenizer_mib: float = 2.0) -> ModelFeatures:
    return ModelFeatures(name=name, source="features", kind=kind, params=int(weight_gb * 5e8),
                         params_source="published", weight_bytes=int(weight_gb * 1e9),
                         bytes_per_param=2.0, num_layers=layers,
                         tokenizer_bytes=int(tokenizer_mib * 2**20), is_moe=kind == "moe")


def _synthetic(n: int = 10, noise: float = 0.0, seed: int = 0) -> list[Observation]:
    """Start-ups made from known formulas: loading 2 s/GB, compile 0.3 s/layer + 1 s."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        layers, gb = 8 + 4 * i, 1.0 + 1.7 * ((i * 7) % n)
        f = _features(f"m{i}", layers, gb)
        b = {"bootstrap": 5.0, "tokenizer": 0.05 * 2.0, "model_loading": 2.0 * gb,
             "torch_compile": 1.0 + 0.3 * layers, "kv_cache_profiling": 0.5,
             "server_ready": 0.2}
        b = {k: v + noise * rng.standard_normal() for k, v in b.items()}
        out.append(Observation(f.name, f, {**b, "cuda_graph_capture": None},
                               sum(b.values()) + 0.1))
    return out


def test_paper_metrics_map_onto_buckets_and_add_up() -> None:
    data = json.loads(AVG.read_text())
    obs = observations_from_paper(PAPER)
    assert len(obs) == len(data["labels"]) == 17
    for i, o in enumerate(obs):
        six = sum(o.buckets[s] for s in STAGES)
        assert six == pytest.approx(data["data"]["total_time"][i], abs=1e-6)
        assert six + o.buckets[UNATTRIBUTED] == pytest.approx(o.total_s, abs=1e-9)
        assert o.total_s == data["data"]["actual_total_time"][i]
    assert model_name("output_model_gpt-oss-20b_cuda-graph-sizes_1_2.txt") == "gpt-oss-20b"
    assert model_name("output_model_qwen-0.5b.txt") == "qwen-0.5b"


def test_paper_fit_trains_on_the_dense_models_only(paper_model: StartupModel) -> None:
    trained = paper_model.to_dict()["trained_on"]
    # the paper's README: MoE and hybrid models are qwen-14.3b, gpt-oss-20b,
    # deepseek-v2-lite-16b and granite4.0-h-*; the five validation models are withheld
    assert trained["excluded"] == ["deepseek-v2-lite-16b", "gpt-oss-20b", "granite4.0-h-32b",
                                   "granite4.0-h-3b", "qwen-14.3b"]
    assert trained["n_models"] == 12
    withheld = {"falcon-11b", "gemma-7b", "mistral-7b", "llama3-3b", "qwen-7b"}
    assert not withheld & set(trained["models"])


def test_bucket_coefficients_are_least_squares(paper_model: StartupModel) -> None:
    state = paper_model.to_dict()
    rows = {o.model: o for o in observations_from_paper(PAPER) if o.features.kind == "dense"}
    names = sorted(rows)
    spec = state["buckets"]["model_loading"]
    x = {"weight_gb": [rows[m].features.weight_bytes / 1e9 for m in names]}
    X = np.column_stack([np.ones(len(names)) if t == "1" else x[t] for t in spec["terms"]])
    y = np.array([rows[m].buckets["model_loading"] for m in names])
    expected = np.linalg.lstsq(X, y, rcond=None)[0]
    assert spec["coef"] == pytest.approx(expected.tolist(), rel=1e-9)
    # Pearson correlation with the weights, computed directly
    r = np.corrcoef(x["weight_gb"], y)[0, 1]
    assert spec["pcc"]["weight_gb"] == pytest.approx(r, abs=1e-12)


def test_candidate_lomo_error_matches_direct_refits(paper_model: StartupModel) -> None:
    rows = sorted((o for o in observations_from_paper(PAPER) if o.features.kind == "dense"),
                  key=lambda o: o.model)
    layers = np.array([o.features.num_layers for o in rows], dtype=float)
    y = np.array([o.buckets["torch_compile"] for o in rows])
    errs = []
    for i in range(len(rows)):
        keep = np.arange(len(rows)) != i
        slope = (layers[keep] @ y[keep]) / (layers[keep] @ layers[keep])
        errs.append(y[i] - slope * layers[i])
    cands = paper_model.to_dict()["buckets"]["torch_compile"]["candidates"]
    layers_only = next(c for c in cands if c["terms"] == ["layers"])
    assert layers_only["lomo_rmse"] == pytest.approx(math.sqrt(np.mean(np.square(errs))))


def test_paper_lomo_is_reported_and_better_than_the_paper_formulas(
        paper_model: StartupModel) -> None:
    lomo = paper_model.to_dict()["lomo"]["total"]
    baseline = StartupModel(formulas="paper").fit(observations_from_paper(PAPER), {}, SETTINGS)
    assert lomo["mse"] < baseline.to_dict()["lomo"]["total"]["mse"]
    assert lomo["coverage"].endswith("/12")


def test_save_load_predicts_the_same(paper_model: StartupModel, tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    paper_model.save(path)
    loaded = StartupModel.load(path)
    gemma = paper_features(PAPER)["gemma-7b"]
    a, b = paper_model.predict(gemma), loaded.predict(gemma)
    assert a.to_dict() == b.to_dict()
    d = a.to_dict()
    assert set(d) >= {"total_s", "interval", "stages", "warnings"}
    assert d["total_s"] == pytest.approx(sum(v["s"] for v in d["stages"].values()), abs=1e-3)
    assert set(d["stages"]) <= set(BUCKETS)
    assert d["interval"]["low"] <= d["total_s"] <= d["interval"]["high"]
    for v in d["stages"].values():
        assert v["interval"]["low"] <= v["s"] <= v["interval"]["high"]
    # the explanation adds up to each bucket
    explained = loaded.explain(gemma)
    for bucket, parts in explained.items():
        assert sum(parts.values()) == pytest.approx(a.stages[bucket].s, abs=1e-9)


def test_warnings_for_out_of_range_and_out_of_domain(paper_model: StartupModel) -> None:
    features = paper_features(PAPER)
    moe = paper_model.predict(features["gpt-oss-20b"])
    assert any("out of domain" in w for w in moe.warnings)
    hybrid = paper_model.predict(features["granite4.0-h-3b"])
    assert any("hybrid" in w and "out of domain" in w for w in hybrid.warnings)
    falcon = paper_model.predict(features["falcon-11b"])
    assert falcon.formulas is not None
    ranges = paper_model.file_.feature_ranges
    for term in {t for f in falcon.formulas.values() for t in f.terms} - {"1"}:
        value = term_value(term, features["falcon-11b"], SETTINGS)
        assert value is not None
        outside = not ranges[term][0] <= value <= ranges[term][1]
        named = any(w.startswith(f"{term} = ") and "outside the training range" in w
                    for w in falcon.warnings)
        assert outside == named, term
    assert paper_model.predict(features["qwen-7b"]).warnings == []


def test_estimate_startup_accepts_paths_features_and_dicts(paper_model: StartupModel,
                                                           tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    paper_model.save(path)
    entry = json.loads((PAPER / "models_config.json").read_text())["mistral-7b"]
    features = paper_features(PAPER)["mistral-7b"]
    by_dict = estimate_startup(path, {**entry, "name": "mistral-7b", "params": 7_240_000_000})
    by_features = estimate_startup(path, features)
    assert by_dict.total_s == pytest.approx(by_features.total_s)
    by_config = estimate_startup(
        path, SHARED / "fixtures" / "model-configs" / "mistral-7b-instruct-v0.2-resaved-fp32")
    assert any("tokenizer" in w and "median" in w for w in by_config.warnings)


@pytest.mark.parametrize("dof, expected", [(1, 6.314), (3, 2.353), (5, 2.015), (10, 1.812),
                                           (30, 1.697), (120, 1.658)])
def test_t_quantile_matches_textbook_tables(dof: int, expected: float) -> None:
    assert t_quantile(0.95, dof) == pytest.approx(expected, abs=2e-3)


def test_cv_plus_min_points() -> None:
    assert cv_plus_min_points(0.9) == 9  # ceil(0.9 * 10) = 9 <= 9
    assert cv_plus_min_points(0.8) == 4


def test_exact_formulas_are_recovered_and_chosen() -> None:
    model = StartupModel().fit(_synthetic(10), {}, {})
    buckets = model.to_dict()["buckets"]
    assert "cuda_graph_capture" not in buckets  # None in the data: not applicable
    assert buckets["model_loading"]["coef"][-1] == pytest.approx(2.0)
    compile_ = buckets["torch_compile"]
    assert compile_["terms"] == ["1", "layers"]
    assert compile_["coef"] == pytest.approx([1.0, 0.3])
    assert buckets[UNATTRIBUTED]["coef"] == pytest.approx([0.1])


def test_ols_interval_is_the_textbook_prediction_interval() -> None:
    """With 6 models CV+ cannot reach 90 %, so the OLS interval applies; for one formula
    it must equal s * sqrt(1 + x0'(X'X)^-1 x0) * t(n - p)."""
    obs = _synthetic(6, noise=0.3, seed=1)
    model = StartupModel(formulas={"torch_compile": ("1", "layers")}).fit(obs, {}, {})
    assert model.to_dict()["interval"]["method"] == "ols"
    X = np.column_stack([np.ones(6), [o.features.num_layers for o in obs]])
    y = np.array([o.buckets["torch_compile"] for o in obs])
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    s2 = np.sum((y - X @ coef) ** 2) / (6 - 2)
    x0 = np.array([1.0, 22.0])  # inside the training range (8-28 layers)
    half = t_quantile(0.95, 4) * math.sqrt(s2 * (1 + x0 @ np.linalg.inv(X.T @ X) @ x0))
    pred = model.predict(_features("new", 22, 3.0)).stages["torch_compile"]
    assert pred.s == pytest.approx(x0 @ coef)
    assert pred.interval.high - pred.s == pytest.approx(half, rel=1e-9)
    # 50 layers is 22 beyond the range: the interval widens by that part of the formula
    x1 = np.array([1.0, 50.0])
    half = t_quantile(0.95, 4) * math.sqrt(s2 * (1 + x1 @ np.linalg.inv(X.T @ X) @ x1))
    far = model.predict(_features("new", 50, 3.0))
    assert far.stages["torch_compile"].interval.high - far.stages["torch_compile"].s == \
        pytest.approx(half + abs(coef[1]) * 22, rel=1e-9)
    assert any("layers = 50 is outside the training range" in w and "widened" in w
               for w in far.warnings)


def test_cv_plus_interval_matches_an_independent_jackknife_plus() -> None:
    obs = _synthetic(12, noise=0.2, seed=2)
    formulas = {"torch_compile": ("1", "layers"), "model_loading": ("weight_gb",)}
    model = StartupModel(formulas=formulas).fit(obs, {}, {})
    assert model.to_dict()["interval"]["method"] == "cv+"
    x0 = _features("new", 30, 4.0)
    pred = model.predict(x0)
    # jackknife+ by hand for torch_compile: refit without i, residual of i, quantiles
    X = np.column_stack([np.ones(12), [o.features.num_layers for o in obs]])
    y = np.array([o.buckets["torch_compile"] for o in obs])
    lows, highs = [], []
    for i in range(12):
        keep = np.arange(12) != i
        coef = np.linalg.lstsq(X[keep], y[keep], rcond=None)[0]
        r = abs(y[i] - X[i] @ coef)
        mu = coef @ np.array([1.0, 30.0])
        lows.append(mu - r)
        highs.append(mu + r)
    k_low, k_high = math.floor(0.1 * 13), math.ceil(0.9 * 13)
    expected = (sorted(lows)[k_low - 1], sorted(highs)[k_high - 1])
    iv = pred.stages["torch_compile"].interval
    assert (iv.low, iv.high) == pytest.approx(expected)


def test_bad_training_sets_are_clear_errors() -> None:
    with pytest.raises(ColdscopeError, match="empty training set"):
        StartupModel().fit([], {}, {})
    moe_only = [Observation(o.model, o.features.model_copy(update={"kind": "moe"}), o.buckets,
                            o.total_s) for o in _synthetic(5)]
    with pytest.raises(ColdscopeError, match="empty training set"):
        StartupModel().fit(moe_only, {}, {})
    with pytest.raises(ColdscopeError, match="at least 3 different models"):
        StartupModel().fit(_synthetic(2), {}, {})
    with pytest.raises(ColdscopeError, match="not fitted"):
        StartupModel().predict(_features("x", 4, 1.0))


def test_load_refuses_other_files(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(ColdscopeError, match="not a coldscope startup model"):
        StartupModel.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{")
    with pytest.raises(ColdscopeError, match="not valid JSON"):
        StartupModel.load(tmp_path / "y.json")


def _run(i: int, model: str, stages: dict[str, float | None], cache: str = "cold",
         **over) -> Run:
    return Run.model_validate({**{
            "id": f"r{i}", "status": "ok", "reason": None, "cache": cache, "label": None,
            "started_at": f"2026-11-29T10:{i:02d}:00Z",
            "time_to_ready_s": sum(v for v in stages.values() if v is not None),
            "first_token_s": None, "stages": {b: stages.get(b) for b in BUCKETS},
            "environment": {"cpu_model": "test cpu", "cpu_cores": 2, "vllm": "0.32.0"},
            "engine": {"name": "vllm", "version": "0.32.0", "enforce_eager": False,
                       "compile": True, "load_format": None},
            "model": {"path": f"/models/{model}", "name": model}}, **over})


def test_store_runs_become_observations_with_replicates() -> None:
    shapes = {f"s{i}": _features(f"s{i}", 2 + 2 * i, 0.01 * (i + 1)) for i in range(5)}
    runs, k = [], 0
    for name, f in shapes.items():
        for rep in range(2):
            stages = {"bootstrap": 30.0 + rep, "tokenizer": 0.5, "model_loading": 2.0,
                      "torch_compile": 10.0 + 3.0 * f.num_layers, "kv_cache_profiling": 1.0,
                      "cuda_graph_capture": None, "server_ready": 1.0, "unattributed": 0.25}
            runs.append(_run(k, name, stages))
            k += 1
    runs.append(_run(99, "s0", {}, status="failed", time_to_ready_s=None))
    obs, env, notes = observations_from_runs(runs, features_of=lambda p: shapes[Path(p).name])
    assert len(obs) == 10 and len(notes) == 1
    assert env["cache"] == "cold" and env["cpu_model"] == "test cpu"
    # the engine's own package version, by the runs' engine name
    assert env["vllm"] == "0.32.0" and env["engine"] == "vllm 0.32.0"
    model = StartupModel().fit(obs, env, {})
    state = model.to_dict()
    assert state["trained_on"]["replicates"] == [2] * 5
    assert state["within_cov"]["bootstrap"]["bootstrap"] == pytest.approx(0.5)  # var of 30, 31
    assert state["buckets"]["torch_compile"]["coef"][-1] == pytest.approx(3.0)


def test_store_refuses_mixed_cache_states() -> None:
    runs = [_run(0, "a", {"bootstrap": 1.0}), _run(1, "b", {"bootstrap": 1.0}, cache="warm")]
    with pytest.raises(ColdscopeError, match="--cache cold or --cache warm"):
        observations_from_runs(runs, features_of=lambda p: _features("a", 2, 0.1))
    obs, _, _ = observations_from_runs(runs, cache="warm",
                                       features_of=lambda p: _features("b", 2, 0.1))
    assert [o.model for o in obs] == ["b"]


def test_store_refuses_mixed_storage_and_records_the_shared_one() -> None:
    feats = lambda p: _features(Path(p).name, 2, 0.1)  # noqa: E731
    hot = _run(0, "a", {"bootstrap": 1.0}, storage={"page_cache": "hot", "kind": "nvme",
                                                     "read_bandwidth_bps": 2e9})
    cold = _run(1, "b", {"bootstrap": 1.0}, storage={"page_cache": "cold", "kind": "nvme"})
    unknown = _run(2, "c", {"bootstrap": 1.0})  # an older run: storage not recorded
    with pytest.raises(ColdscopeError, match="runs mix storage page cache"):
        observations_from_runs([hot, cold], features_of=feats)
    _, env, _ = observations_from_runs([hot, unknown], features_of=feats)
    assert env["storage"] == {"page_cache": "hot", "kind": "nvme", "read_bandwidth_bps": 2e9,
                              "source": "1 of 2 stored runs"}
    _, env, _ = observations_from_runs([unknown], features_of=feats)
    assert "storage" not in env
    obs, env, _ = observations_from_runs([hot, cold, unknown], features_of=feats,
                                         page_cache="cold")
    assert [o.model for o in obs] == ["b"] and env["storage"]["page_cache"] == "cold"


# -- the range rule, extrapolation folds and the loading rate ---------------------------------


def _graph_features(name: str, layers: int, graph_mib: float, gb: float) -> ModelFeatures:
    return _features(name, layers, gb).model_copy(
        update={"graph_size": int(graph_mib * 2**20), "graph_size_source": "published"})


def _compile_campaign(seed: int = 5) -> list[Observation]:
    """12 models whose compile time is 0.3 s per layer (plus noise) and whose graph size is
    0.03 MiB per layer (plus noise): layers and graph size both describe compile."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(12):
        layers = 16 + 2 * i
        f = _graph_features(f"m{i}", layers, 0.03 * layers + 0.02 * rng.standard_normal(),
                            2.0 + i)
        b = {"bootstrap": 5.0, "tokenizer": 0.1, "model_loading": 2.0 * (2.0 + i),
             "torch_compile": 0.3 * layers + 0.15 * rng.standard_normal(),
             "kv_cache_profiling": 0.5}
        out.append(Observation(f.name, f, {**b, "cuda_graph_capture": None},
                               sum(b.values()) + 0.1))
    return out


def _loo(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Held-out residuals and fold coefficients, each fold refitted by lstsq."""
    res, coefs = [], []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        coef = np.linalg.lstsq(X[keep], y[keep], rcond=None)[0]
        coefs.append(coef)
        res.append(y[i] - X[i] @ coef)
    return np.array(res), coefs


def test_comparable_is_a_one_sided_paired_t_test_on_lomo_losses() -> None:
    obs = _compile_campaign()
    model = StartupModel().fit(obs, {}, {})
    spec = model.file_.buckets["torch_compile"]
    y = np.array([o.buckets["torch_compile"] for o in obs])
    columns = {"1": np.ones(12), "layers": np.array([o.features.num_layers for o in obs]),
               "graph_mib": np.array([o.features.graph_size / 2**20 for o in obs])}
    design = {tuple(c.terms): np.column_stack([columns[t] for t in c.terms])
              for c in spec.candidates}
    losses = {k: _loo(X, y)[0] ** 2 for k, X in design.items()}
    best = min(losses, key=lambda k: losses[k].mean())
    assert list(best) == spec.terms == ["layers"]
    for c in spec.candidates:
        d = losses[tuple(c.terms)] - losses[best]
        t = d.mean() / (d.std(ddof=1) / math.sqrt(12)) if d.any() else 0.0
        assert c.comparable == (t <= 1.7959), c.terms  # t(0.95, 11), textbook table
        assert c.lomo_rmse == pytest.approx(math.sqrt(losses[tuple(c.terms)].mean()))


def test_range_rule_serves_the_comparable_formula_that_stays_inside_the_data() -> None:
    obs = _compile_campaign()
    model = StartupModel().fit(obs, {}, {})
    spec = model.file_.buckets["torch_compile"]
    graph = next(c for c in spec.candidates if c.terms == ["1", "graph_mib"])
    assert spec.terms == ["layers"] and graph.comparable  # the premise of this test
    y = np.array([o.buckets["torch_compile"] for o in obs])
    G = np.column_stack([np.ones(12), [o.features.graph_size / 2**20 for o in obs]])
    # inside the data the LOMO choice serves
    inside = _graph_features("inside", 30, 0.9, 6.0)
    assert model.served(inside)["torch_compile"].candidate is None
    assert model.predict(inside).formulas["torch_compile"].terms == ["layers"]
    # 60 layers lie beyond 16-38, a 0.9 MiB graph inside: the graph formula serves
    deep = _graph_features("deep", 60, 0.9, 6.0)
    served = model.served(deep)["torch_compile"]
    assert served.terms == ["1", "graph_mib"] and served.beyond_s == 0.0
    assert "range rule" in served.why and "layers = 60 outside 16-38" in served.why
    pred = model.predict(deep)
    coef = np.linalg.lstsq(G, y, rcond=None)[0]
    assert pred.stages["torch_compile"].s == pytest.approx(coef @ [1.0, 0.9])
    # its interval is the jackknife+ of the graph formula, computed here from scratch
    res, coefs = _loo(G, y)
    lows = sorted(c @ [1.0, 0.9] - abs(r) for c, r in zip(coefs, res, strict=True))
    highs = sorted(c @ [1.0, 0.9] + abs(r) for c, r in zip(coefs, res, strict=True))
    k_low, k_high = math.floor(0.1 * 13), math.ceil(0.9 * 13)
    iv = pred.stages["torch_compile"].interval
    assert (iv.low, iv.high) == pytest.approx((lows[k_low - 1], highs[k_high - 1]))
    assert pred.to_dict()["formulas"]["torch_compile"]["switched"] is True
    # the total's CV+ swaps compile's part of each run's residual: they add up to the total
    for r in model.file_.cv_residuals or []:
        assert r.total == pytest.approx(sum(r.buckets.values()), abs=1e-9)
    assert pred.interval.low <= pred.total_s <= pred.interval.high
    assert pred.total_s == pytest.approx(sum(sp.s for sp in pred.stages.values()))
    explained = model.explain(deep)["torch_compile"]
    assert set(explained) == {"1", "graph_mib"}
    assert sum(explained.values()) == pytest.approx(pred.stages["torch_compile"].s)
    # a graph beyond the range too: the layers formula extrapolates less in seconds and stays
    both = _graph_features("both", 40, 3.0, 6.0)
    assert model.served(both)["torch_compile"].candidate is None


def test_extrapolation_folds_score_each_candidate_like_numpy(paper_model: StartupModel) -> None:
    obs = [o for o in observations_from_paper(PAPER) if o.features.kind == "dense"]
    feats = {o.model: o.features for o in obs}
    held = {max(feats, key=lambda m: (feats[m].num_layers, feats[m].params)),
            max(feats, key=lambda m: feats[m].params), min(feats, key=lambda m: feats[m].params)}
    assert held == {"yi-9b", "qwen-14b", "qwen-0.5b"}
    extra = paper_model.file_.extrapolation
    assert extra is not None and set(extra.per_model) == held
    models = sorted(feats)
    y = np.array([next(o.buckets["torch_compile"] for o in obs if o.model == m) for m in models])
    layers = np.array([[feats[m].num_layers] for m in models], dtype=float)
    errors = []
    for m in held:
        keep = np.array([x != m for x in models])
        coef = np.linalg.lstsq(layers[keep], y[keep], rcond=None)[0]
        errors.append(float(layers[models.index(m)] @ coef - y[models.index(m)]))
    cand = next(c for c in paper_model.file_.buckets["torch_compile"].candidates
                if c.terms == ["layers"])
    assert cand.extrap_rmse == pytest.approx(math.sqrt(np.mean(np.square(errors))))
    assert cand.extrap_max_abs == pytest.approx(max(abs(e) for e in errors))
    for entry in extra.per_model.values():
        assert entry.error_s == pytest.approx(entry.predicted_s - entry.actual_s)
        assert entry.inside == (entry.interval.low <= entry.actual_s <= entry.interval.high)


def test_paper_falcon_compile_is_served_by_the_graph_formula(paper_model: StartupModel) -> None:
    """falcon-11b's 60 layers lie beyond 24-48; its compiled graph (1.676 MiB) only 1.4 %
    beyond 0.68-1.65 MiB; graph_mib's LOMO error is not significantly worse than layers'."""
    features = paper_features(PAPER)
    served = paper_model.served(features["falcon-11b"])
    assert served["torch_compile"].terms == ["1", "graph_mib"]
    assert served["torch_compile"].beyond_s < 0.25
    for name in ("mistral-7b", "llama3-3b", "qwen-7b"):  # inside the data: nothing switches
        assert all(f.candidate is None for f in paper_model.served(features[name]).values())


def _loading_campaign(rate_of: Any) -> list[Observation]:
    out = []
    for i in range(10):
        gb = 2.0 + 3.0 * i
        f = _features(f"w{i}", 16 + 2 * i, gb)
        b = {"bootstrap": 5.0, "tokenizer": 0.1, "model_loading": rate_of(gb) + 0.01 * (-1) ** i,
             "torch_compile": 0.3 * (16 + 2 * i), "kv_cache_profiling": 0.5}
        out.append(Observation(f.name, f, {**b, "cuda_graph_capture": None},
                               sum(b.values()) + 0.1))
    return out


def test_loading_rate_check_matches_numpy_and_narrows_loading_beyond_the_range() -> None:
    obs = _loading_campaign(lambda gb: 0.3 + 1.8 * gb)  # one marginal rate, a fixed cost
    model = StartupModel().fit(obs, {}, {})
    rate = model.file_.loading_rate
    assert rate is not None and rate.constant
    gb = np.array([o.features.weight_bytes / 1e9 for o in obs])
    y = np.array([o.buckets["model_loading"] for o in obs])
    for side, idx in (("lower", slice(0, 5)), ("upper", slice(5, 10))):
        (slope, icpt), cov = np.polyfit(gb[idx], y[idx], 1, cov="unscaled")
        resid = y[idx] - (icpt + slope * gb[idx])
        se = math.sqrt(resid @ resid / 3 * cov[0, 0])
        assert getattr(rate, f"{side}_rate") == pytest.approx(slope)
        assert getattr(rate, f"{side}_se") == pytest.approx(se)
    # 10 GB beyond the largest (29 GB): loading widens by t x se x 10, not by 1.8 s/GB x 10
    big = _features("big", 30, 39.0)
    pred = model.predict(big)
    inside = model.predict(_features("top", 30, 29.0))
    widening = (pred.stages["model_loading"].interval.high - pred.stages["model_loading"].s) \
        - (inside.stages["model_loading"].interval.high - inside.stages["model_loading"].s)
    assert widening == pytest.approx(rate.t * rate.upper_se * 10.0, abs=0.02)
    assert any("marginal rate" in w for w in pred.warnings)
    # one weight size only: no rate to measure, so no claim that it is constant
    same = [Observation(o.model, o.features.model_copy(update={"weight_bytes": int(2e9)}),
                        o.buckets, o.total_s) for o in obs]
    assert StartupModel().fit(same, {}, {}).file_.loading_rate is None
    # a rate that slows with size is not constant: the whole part beyond the range widens
    bent = StartupModel().fit(_loading_campaign(lambda gb: 4.0 * gb ** 0.7), {}, {})
    assert bent.file_.loading_rate is not None and not bent.file_.loading_rate.constant
    far = bent.predict(big).stages["model_loading"]
    assert far.interval.high - far.s > 0.9 * 10.0 * bent.file_.buckets["model_loading"].coef[-1]
