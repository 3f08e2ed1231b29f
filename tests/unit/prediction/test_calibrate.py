"""Calibration to a new machine, the startup-model file's schema, storage settings, layering."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coldscope.core.clock import clock_resolution
from coldscope.prediction import core
from coldscope.prediction.calibrate import calibrate, suggest
from coldscope.prediction.features import ModelFeatures
from coldscope.prediction.fit import Observation
from coldscope.prediction.paper import observations_from_paper, paper_environment, paper_storage
from coldscope.prediction.startup_model import StartupModel, StartupModelFile, predict_json
from coldscope.util.errors import ColdscopeError

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
PAPER = SHARED / "data" / "paper"
L40S = PAPER / "figures" / "figure-10" / "gpu1" / "avg_comparison_results.json"


def _features(name: str, layers: int, weight_gb: float) -> ModelFeatures:
    return ModelFeatures(name=name, source="features", kind="dense", params=int(weight_gb * 5e8),
                         params_source="published", weight_bytes=int(weight_gb * 1e9),
                         bytes_per_param=2.0, num_layers=layers, tokenizer_bytes=2 * 2**20)


def _machine(loading_s_per_gb: float, compile_per_layer: float, bootstrap: float,
             models: list[tuple[str, int, float]]) -> list[Observation]:
    out = []
    for name, layers, gb in models:
        b = {"bootstrap": bootstrap, "tokenizer": 0.1, "model_loading": loading_s_per_gb * gb,
             "torch_compile": compile_per_layer * layers, "kv_cache_profiling": 0.5,
             "cuda_graph_capture": None}
        out.append(Observation(name, _features(name, layers, gb), b,
                               sum(v for v in b.values() if v is not None) + 0.2))
    return out


MODELS = [(f"m{i}", 8 + 4 * i, 1.0 + 1.7 * ((i * 7) % 10)) for i in range(10)]


@pytest.fixture(scope="module")
def base() -> StartupModel:
    return StartupModel(formulas={"model_loading": ("weight_gb",), "torch_compile": ("layers",),
                                  "tokenizer": ("1",), "kv_cache_profiling": ("1",)}
                        ).fit(_machine(2.0, 0.3, 5.0, MODELS), {}, {})


def test_per_stage_transfer_recovers_a_new_machine_exactly(base: StartupModel) -> None:
    """New machine: loading 10x faster (ratio), compile 0.8x (ratio), bootstrap +2 s (offset).
    Two calibration models must recover every other model's start-up."""
    new = _machine(0.2, 0.24, 7.0, MODELS)
    cal = calibrate(base.file_, new, environment={"gpu": "other"}, source="test",
                    base_source="base.json", models=["m3", "m8"])
    c = cal.calibration
    assert c is not None and c.models == ["m3", "m8"] and c.base_source == "base.json"
    assert c.stages["model_loading"].kind == "ratio"
    assert c.stages["model_loading"].value == pytest.approx(0.1)
    assert c.stages["torch_compile"].value == pytest.approx(0.8)
    assert c.stages["bootstrap"].kind == "offset"
    assert c.stages["bootstrap"].value == pytest.approx(2.0)
    for o in new:
        p = core.predict(cal, o.features)
        assert p.total_s == pytest.approx(o.total_s, abs=1e-6)
        assert p.interval.low <= o.total_s <= p.interval.high
    assert cal.environment == {"gpu": "other"}


def test_disagreement_widens_the_intervals(base: StartupModel) -> None:
    new = _machine(0.2, 0.24, 7.0, MODELS)
    agree = calibrate(base.file_, new, environment={}, source="t", base_source="b",
                      models=["m3", "m8"])
    noisy = [Observation(o.model, o.features, {**o.buckets, "torch_compile":
                                               o.buckets["torch_compile"] * (1.3 if i == 3 else 1)},
                         o.total_s + (0.3 * o.buckets["torch_compile"] if i == 3 else 0))
             for i, o in enumerate(new)]
    disagree = calibrate(base.file_, noisy, environment={}, source="t", base_source="b",
                         models=["m3", "m8"])
    assert disagree.calibration.stages["torch_compile"].spread > 0.1
    f = _features("x", 30, 5.0)
    wide, narrow = core.predict(disagree, f), core.predict(agree, f)
    assert (wide.stages["torch_compile"].interval.high - wide.stages["torch_compile"].s) > \
        (narrow.stages["torch_compile"].interval.high - narrow.stages["torch_compile"].s) + 1.0


def test_a_tiny_calibration_model_cannot_identify_loading(base: StartupModel) -> None:
    tiny = _machine(0.2, 0.24, 7.0, [("tiny", 20, 0.5)])
    cal = calibrate(base.file_, tiny, environment={}, source="t", base_source="b")
    c = cal.calibration
    assert not c.stages["model_loading"].identified
    assert any("model_loading is not identified" in w for w in c.warnings)
    assert any("one model" in w for w in c.warnings)
    # the warnings travel with every prediction of the calibrated model
    assert any("not identified" in w for w in core.predict(cal, _features("y", 20, 9)).warnings)


def test_calibration_errors(base: StartupModel) -> None:
    new = _machine(0.2, 0.24, 7.0, MODELS[:3])
    with pytest.raises(ColdscopeError, match="no calibration run of m9"):
        calibrate(base.file_, new, environment={}, source="t", base_source="b", models=["m9"])
    cal = calibrate(base.file_, new, environment={}, source="t", base_source="b")
    with pytest.raises(ColdscopeError, match="already calibrated"):
        calibrate(cal, new, environment={}, source="t", base_source="b")


def test_suggest_prefers_large_distinct_models(base: StartupModel) -> None:
    cands = [_features("tiny", 8, 0.3), _features("big", 40, 16.0), _features("mid", 24, 9.0),
             _features("big-twin", 40, 16.5)]
    ranked = suggest(base.file_, cands)
    best = ranked[0]
    assert best.accepted and set(best.models) == {"big", "mid"} or \
        set(best.models) == {"big-twin", "mid"}
    by_pair = {frozenset(s.models): s for s in ranked}
    assert not by_pair[frozenset({"big", "big-twin"})].accepted  # near-duplicates
    assert "too small" in by_pair[frozenset({"tiny", "big"})].reason
    with pytest.raises(ColdscopeError, match="at least two"):
        suggest(base.file_, cands[:1])


def test_paper_l40s_calibration_meets_the_target_with_the_suggested_pair() -> None:
    """Issue 13: main table (H100, SSD) -> L40S node (page cache), two models."""
    base = StartupModel().fit(observations_from_paper(PAPER), paper_environment(PAPER),
                              {"capture_sizes": 67}, source=str(PAPER))
    obs = observations_from_paper(PAPER, L40S)
    pair = suggest(base.file_, [o.features for o in obs])[0]
    assert pair.accepted
    cal = calibrate(base.file_, obs, environment=paper_environment(PAPER, L40S), source="l40s",
                    base_source="h100", models=list(pair.models))
    errors = [core.predict(cal, o.features).total_s - o.total_s for o in obs
              if o.model not in pair.models]
    assert sum(e * e for e in errors) / len(errors) <= 0.3
    assert max(map(abs, errors)) <= 1.0
    assert cal.storage is not None and cal.storage.page_cache == "hot"
    assert base.file_.storage is not None and base.file_.storage.page_cache == "cold"


def test_a_clock_is_read_only_from_enough_distinct_values() -> None:
    assert clock_resolution([3.0, 5.0, 3.0]) == 1.0
    assert clock_resolution([11.6, 10.4, 11.8, 12.0]) == 0.2  # means of five 1 s-clock runs
    assert clock_resolution([0.25, 0.25, 0.25, 0.25]) is None  # one value, four times
    assert clock_resolution([0.3, 0.7]) is None  # two values on 0.1 s: 1 % by chance
    assert clock_resolution([0.3, 0.7, 1.1]) == 0.1
    assert clock_resolution([1.23, 4.56, 7.89]) is None
    assert clock_resolution([]) is None


def _on_a_seconds_clock(obs: list[Observation], stage: str) -> list[Observation]:
    """The same start-ups with one stage timed on a 1 s clock (the total is unchanged: the
    rounding moves time between adjacent stages)."""
    return [Observation(o.model, o.features, {**o.buckets, stage: float(round(o.buckets[stage]))},
                        o.total_s) for o in obs]


def test_a_coarse_clock_rejects_small_pairs_and_passes_large_ones() -> None:
    """L40S loading (0.12 s/GB) on a 1 s clock: qwen-4b + yi-6b hold 3 s of it, so its ratio
    is known to +-19 % (0.42 s at a typical model) - more than the base model's own error
    there; llama2-13b + qwen-14b hold 7 s (0.15 s: the clock passes; the pair is rejected only
    as near-duplicates). Finely timed, the small pair is fine."""
    base = StartupModel().fit(observations_from_paper(PAPER), paper_environment(PAPER),
                              {"capture_sizes": 67}, source=str(PAPER))
    fine = observations_from_paper(PAPER, L40S)
    coarse = _on_a_seconds_clock(fine, "model_loading")
    feats = [o.features for o in fine]
    small, large = frozenset({"qwen-4b", "yi-6b"}), frozenset({"llama2-13b-hf", "qwen-14b"})
    coarse_verdicts = {frozenset(s.models): s for s in suggest(base.file_, feats, coarse)}
    fine_verdicts = {frozenset(s.models): s for s in suggest(base.file_, feats, fine)}
    assert not coarse_verdicts[small].accepted
    assert "coarse clock" in coarse_verdicts[small].reason
    assert "model_loading" in coarse_verdicts[small].reason
    assert "1 s clock" in coarse_verdicts[small].reason
    assert fine_verdicts[small].accepted
    assert coarse_verdicts[large].reason.startswith("llama2-13b-hf and qwen-14b are near-dup")
    assert "coarse clock" not in coarse_verdicts[large].reason
    assert {p for p, s in fine_verdicts.items() if s.accepted} == \
        {frozenset(s.models) for s in suggest(base.file_, feats) if s.accepted}
    env = paper_environment(PAPER, L40S)
    warned = calibrate(base.file_, coarse, environment=env, source="t", base_source="b",
                       models=sorted(small)).calibration
    assert any("coarse clock" in w for w in warned.warnings)
    for ok in (calibrate(base.file_, coarse, environment=env, source="t", base_source="b",
                         models=sorted(large)),
               calibrate(base.file_, fine, environment=env, source="t", base_source="b",
                         models=sorted(small))):
        assert not any("coarse clock" in w for w in ok.calibration.warnings)


def test_paper_tables_are_labelled_with_their_storage() -> None:
    assert paper_storage(PAPER)["page_cache"] == "cold"
    assert paper_storage(PAPER, L40S)["page_cache"] == "hot"
    case0 = PAPER / "figures" / "figure-13" / "case0" / "avg_comparison_results.json"
    assert paper_storage(PAPER, case0)["seconds_per_gb"] == pytest.approx(0.122)
    one_run = PAPER / "figures" / "figure-rest" / "iterations" / "1" / "comparison_results.json"
    assert paper_storage(PAPER, one_run)["page_cache"] == "cold"


def test_storage_bandwidth_predicts_loading_from_bytes(base: StartupModel) -> None:
    f = _features("x", 30, 8.0)
    p = base.predict(f, storage_bandwidth=4e9)
    assert p.stages["model_loading"].s == pytest.approx(8e9 / 4e9)
    assert any("4 GB/s" in w for w in p.warnings)
    hot = base.predict(f, page_cache="hot")
    assert hot.stages["model_loading"].s == pytest.approx(8e9 * 0.122 / 1e9)
    with pytest.raises(ColdscopeError, match="--page-cache cold needs --storage-bandwidth"):
        base.predict(f, page_cache="cold")
    same = base.predict(f)
    assert hot.total_s - same.total_s == pytest.approx(
        hot.stages["model_loading"].s - same.stages["model_loading"].s)


def test_fit_keeps_its_hyper_parameters() -> None:
    model = StartupModel(formulas="paper", kinds=("dense", "moe"), level=0.8)
    model.fit(_machine(2.0, 0.3, 5.0, MODELS), {}, {})
    assert (model.formulas, model.kinds, model.level) == ("paper", ("dense", "moe"), 0.8)
    assert model.level_ == 0.8 and model.file_.trained_on.kinds == ["dense", "moe"]


def test_a_written_model_validates_against_the_published_schema(base: StartupModel,
                                                                tmp_path: Path) -> None:
    import jsonschema

    path = tmp_path / "m.json"
    base.save(path)
    data = json.loads(path.read_text())
    jsonschema.validate(data, StartupModelFile.model_json_schema())
    new = calibrate(base.file_, _machine(0.2, 0.24, 7.0, MODELS), environment={}, source="t",
                    base_source="b", models=["m1", "m2"])
    jsonschema.validate(json.loads(new.model_dump_json(exclude_none=True)),
                        StartupModelFile.model_json_schema())


@pytest.mark.parametrize("path, value, where", [
    (("buckets", "bootstrap", "coef"), "fast", "buckets.bootstrap.coef"),
    (("interval", "level"), [0.9], "interval.level"),
    (("residual_cov",), 3, "residual_cov"),
])
def test_a_model_with_the_right_schema_but_wrong_types_is_one_line(
        base: StartupModel, tmp_path: Path, path: tuple[str, ...], value: object,
        where: str) -> None:
    data = base.to_dict()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ColdscopeError, match="malformed startup model") as info:
        StartupModel.load(p)
    assert where in str(info.value) and "\n" not in str(info.value)


def test_a_version_1_file_still_loads(base: StartupModel, tmp_path: Path) -> None:
    data = base.to_dict()
    data["schema_version"] = 1
    data.pop("storage", None)
    for entry in (data.get("lomo") or {}).get("per_model", {}).values():
        if "interval" in entry:
            entry["interval"] = [entry["interval"]["low"], entry["interval"]["high"]]
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(data))
    f = _features("x", 30, 8.0)
    assert StartupModel.load(p).predict(f).to_dict() == base.predict(f).to_dict()


def test_predict_json_is_what_the_cli_prints(base: StartupModel, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from coldscope.cli.main import main
    path = tmp_path / "m.json"
    base.save(path)
    features = tmp_path / "x.json"
    features.write_text(_features("x", 30, 8.0).model_dump_json())
    assert main(["predict", str(features), "--startup-model", str(path), "--json",
                 "--storage-bandwidth", "2GB/s"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(predict_json(path, features,
                                                         storage_bandwidth=2e9)))
    assert set(printed["interval"]) == {"low", "high"}
    import jsonschema

    from coldscope.prediction.startup_model import PredictionReport
    jsonschema.validate(printed, PredictionReport.model_json_schema())
    assert main(["predict", str(features), "--startup-model", str(path),
                 "--storage-bandwidth", "fast"]) == 2


def test_the_fitting_side_does_not_import_the_predictor_facade() -> None:
    """No cycle: predict.fit and predict.core never import coldscope.prediction.startup_model."""
    code = ("import sys, coldscope.prediction.fit, coldscope.prediction.calibrate; "
            "print('coldscope.prediction.startup_model' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_plan_and_simulate_accept_a_calibrated_model(base: StartupModel, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from coldscope.cli.main import main
    cal = StartupModel.from_file(calibrate(base.file_, _machine(0.2, 0.24, 7.0, MODELS),
                                           environment={}, source="t", base_source="b",
                                           models=["m3", "m8"]))
    path = tmp_path / "cal.json"
    cal.save(path)
    features = tmp_path / "x.json"
    features.write_text(_features("x", 30, 8.0).model_dump_json())
    expected = cal.predict(_features("x", 30, 8.0)).total_s
    assert main(["plan", "--model", str(features), "--startup-model", str(path), "--no-store",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert str(path) in out and f"{expected - 0.2 * 8:.1f}" in out  # engine = total - loading
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,context_tokens,generated_tokens\n"
                     + "".join(f"{i},100,10\n" for i in range(30)))
    assert main(["simulate", "--trace", str(trace), "--startup-model", str(path),
                 "--model", str(features), "--json"]) == 0
    assert str(path) in capsys.readouterr().out


def test_a_stage_the_new_machine_does_not_have(base: StartupModel) -> None:
    """A CPU machine has no CUDA-graph capture: its runs leave the stage unknown; the
    calibrated model predicts 0 s for it and the total stays right (the remainder has it)."""
    gpu = [Observation(o.model, o.features, {**o.buckets, "cuda_graph_capture": 1.0},
                       o.total_s + 1.0) for o in _machine(2.0, 0.3, 5.0, MODELS)]
    with_capture = StartupModel(formulas={"model_loading": ("weight_gb",),
                                          "torch_compile": ("layers",)}).fit(gpu, {}, {})
    assert "cuda_graph_capture" in with_capture.file_.buckets
    cpu = _machine(0.2, 0.24, 7.0, MODELS)  # cuda_graph_capture None
    cal = calibrate(with_capture.file_, cpu, environment={}, source="t", base_source="b",
                    models=["m3", "m8"])
    assert cal.calibration.stages["cuda_graph_capture"].value == 0.0
    assert any("cuda_graph_capture: no calibration run measured it" in w
               for w in cal.calibration.warnings)
    for o in cpu:
        p = core.predict(cal, o.features)
        assert p.stages["cuda_graph_capture"].s == 0.0
        assert p.total_s == pytest.approx(o.total_s, abs=1e-6)
