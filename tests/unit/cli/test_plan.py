"""``coldscope plan``: the JSON contract, the lesson's figures end to end, and clean errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from coldscope.cli.main import main
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS, MODEL_LOADING
from coldscope.planning import PlanReport

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
PAPER = SHARED / "data" / "paper"


def _plan(capsys, *args):
    code = main(["plan", *args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_json_contract_and_the_70b_budget(capsys):
    r = _plan(capsys, "--params", "70e9", "--dtype", "bf16")
    assert {"total_s", "parts", "mitigations", "monthly_cost", "meets_sla"} <= set(r)
    assert (round(r["total_s"]["low"]), round(r["total_s"]["high"])) == (220, 510)
    assert [p["name"] for p in r["parts"]] == ["provisioning", "image_pull", "weight_transfer",
                                               "weight_load", "engine_startup"]
    assert all({"name", "low", "high", "source"} == set(p) for p in r["parts"])
    assert r["meets_sla"] is None and r["mitigations"] == []


def test_json_validates_against_the_published_schema(capsys, tmp_path):
    dest = tmp_path / "plan.json"
    r = _plan(capsys, "--params", "13B", "--sla-p99-ttft", "3s", "-o", str(dest))
    jsonschema.validate(r, PlanReport.model_json_schema())
    assert r["schema_version"] == 2 and json.loads(dest.read_text()) == r
    assert r["gpu"]["currency"] == r["monthly_cost"]["currency"] == "USD"
    assert r["gpu"]["price_per_gpu_hour"] == 4.0  # the one default price (simulate's too)


def test_params_accepts_suffixes_and_exponents(capsys):
    a = _plan(capsys, "--params", "70B")
    b = _plan(capsys, "--params", "7e10")
    assert a["model"]["params"] == b["model"]["params"] == 70e9
    assert a["total_s"] == b["total_s"]


def test_source_column_says_which_lesson_figure(capsys):
    assert main(["plan", "--params", "70B"]) == 0
    out = capsys.readouterr().out
    assert "mitigation lesson, 70B worked example" in out
    assert "220-510 s" in out  # the legend under the table gives the example's figure
    assert "lesson:" not in out


@pytest.mark.parametrize("content", [os.urandom(2048), b"", b"TIMESTAMP\n2023-01-01\n"])
def test_trace_of_random_bytes_is_one_line(capsys, tmp_path, content):
    p = tmp_path / "t.csv"
    p.write_bytes(content)
    assert main(["plan", "--params", "7B", "--trace", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_five_products_one_warm_replica_each(capsys, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("gpus_per_replica: 1\n")
    r = _plan(capsys, "--params", "7B", "--products", "5", "--min-workers", "1",
              "--profile", str(prof))
    assert r["monthly_cost"]["warm_pool_gpu_hours"] == 3600
    assert r["monthly_cost"]["warm_pool"] == 3600 * 4.0
    assert r["mitigations"][-1]["name"] == "warm_pool"


def test_cheapest_stack_for_13b_under_3s(capsys):
    r = _plan(capsys, "--params", "13e9", "--sla-p99-ttft", "3s", "--cheapest")
    assert r["meets_sla"] is True and r["stack"] == "warm_pool(1)"
    assert r["search"]["cheaper_failures"]


def test_tiers_file_carries_the_model(capsys, tmp_path):
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text("params: 70e9\ntiers:\n  - {name: paid, sla_p99_ttft: 2s, products: 2}\n"
                     "  - {name: batch, products: 3}\n")
    r = _plan(capsys, "--tiers", str(tiers))
    paid, batch = r["tiers"]
    assert paid["min_workers"] == 1 and paid["warm_pool_gpu_hours"] == 2 * 1 * 2 * 720
    assert batch["min_workers"] == 0
    assert r["tiers_total_monthly_cost"] == pytest.approx(paid["monthly_cost"]
                                                          + batch["monthly_cost"])


def test_table_output_names_the_dominant_part(capsys):
    assert main(["plan", "--params", "70e9", "--mitigate", "preseeded_image,gpu_snapshot"]) == 0
    out = capsys.readouterr().out
    assert "dominant: provisioning" in out and "What each layer removes" in out


@pytest.mark.parametrize("args, message", [
    ([], "give one of --model DIR or --params N"),
    (["--params", "lots"], "cannot read parameter count"),
    (["--params", "7e9", "--mitigate", "magic"], "unknown mitigation 'magic'"),
    (["--params", "7e9", "--sla-p99-ttft", "soon"], "cannot read --sla-p99-ttft"),
    (["--params", "70"], "did you mean 70B?"),
    (["--params", "1e400", "--json"], "outside"),
    (["--params", "inf"], "cannot read parameter count"),
    (["--params", "7e9", "--min-workers", "-3"], "min_workers"),
    (["--params", "7e9", "--min-workers", "1000000000"], "min_workers"),
    (["--params", "7e9", "--products", "0"], "products"),
    (["--params", "7e9", "--cheapest"], "--cheapest needs --sla-p99-ttft"),
    (["--params", "7e9", "--gpu", "TPU"], "TPU"),
])
def test_bad_input_is_one_line(capsys, args, message):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


# --- engine start-up from a startup model and from the store (needs the paper data) ---


@pytest.fixture(scope="module")
def startup_model(tmp_path_factory):
    if not PAPER.exists():
        pytest.skip("shared paper data not present")
    from coldscope.prediction.paper import observations_from_paper
    from coldscope.prediction.startup_model import StartupModel
    path = tmp_path_factory.mktemp("sm") / "startup.json"
    StartupModel().fit(observations_from_paper(PAPER)).save(path)
    return path


@pytest.fixture(scope="module")
def features_file(tmp_path_factory):
    entry = json.loads((PAPER / "models_config.json").read_text())["llama2-13b-hf"]
    path = tmp_path_factory.mktemp("m") / "llama2-13b-hf.json"
    path.write_text(json.dumps(entry))
    return path


def _record(i, model_path, ttr, loading):
    stages = {b: None for b in BUCKETS}
    stages[MODEL_LOADING] = loading
    return {"id": f"run{i}", "status": "ok", "reason": None, "cache": "warm", "label": None,
            "started_at": f"2026-01-01T00:00:0{i}Z", "time_to_ready_s": ttr,
            "first_token_s": None, "stages": stages, "substeps": {}, "sources": {},
            "intervals": [], "cpu": None, "environment": {}, "engine": {"model": str(model_path)},
            "model": {"path": str(model_path), "name": Path(model_path).name}}


def test_engine_from_startup_model_and_check_against_store(capsys, tmp_path, startup_model,
                                                           features_file):
    from coldscope.prediction.features import model_features
    from coldscope.prediction.startup_model import StartupModel
    from coldscope.store.db import Store
    pred = StartupModel.load(startup_model).predict(
        model_features(features_file))
    loading = pred.stages[MODEL_LOADING].s
    engine = pred.total_s - loading
    r = _plan(capsys, "--model", str(features_file), "--startup-model", str(startup_model),
              "--no-store")
    eng = r["parts"][-1]
    assert eng["source"].startswith("startup model")
    assert eng["low"] == pytest.approx(pred.interval.low - loading)
    assert eng["high"] == pytest.approx(pred.interval.high - loading)

    db = tmp_path / "store.db"
    with Store(db) as store:  # three runs whose engine part is the prediction +- 1 s
        for i, delta in enumerate((-1.0, 0.0, 1.0)):
            store.add_run(Run.from_json(_record(i, features_file, engine + delta + 5.0, 5.0)))
    r = _plan(capsys, "--model", str(features_file), "--startup-model", str(startup_model),
              "--store", str(db))
    check = r["engine_check"]
    assert check["runs"] == 3 and check["store_median_s"] == pytest.approx(engine)
    assert check["within"] is True
    r = _plan(capsys, "--model", str(features_file), "--store", str(db))
    eng = r["parts"][-1]
    assert eng["source"].startswith("store: median")
    assert (eng["low"], eng["high"]) == (pytest.approx(engine - 1), pytest.approx(engine + 1))


def test_tuned_session_sets_the_engine_figure(capsys, tmp_path):
    tune = tmp_path / "tune.json"
    tune.write_text(json.dumps({
        "schema_version": 2, "session": "s1",
        "baselines": {"cold": {"time_to_ready_s": 30.0}, "warm": {"time_to_ready_s": 20.0}},
        "best": {"time_to_ready_s": 12.5, "knobs": ["eager"], "seeded_caches": True}}))
    r = _plan(capsys, "--params", "7B", "--tuned", str(tune))
    eng = r["parts"][-1]
    assert (eng["low"], eng["high"]) == (12.5, 12.5)
    # a scale-up starts on a new node: the cold default is the figure saved against
    assert eng["source"].startswith(f"tuned {tune}") and "eager" in eng["source"]
    assert "default cold 30.0 s, 17.5 s saved" in eng["source"]
    assert any("new node" in n for n in r["notes"])
    assert not any("standby launcher" in n for n in r["notes"])
    tune.write_text(json.dumps({  # a winner through a standby launcher needs one on the node
        "schema_version": 2, "session": "s2",
        "baselines": {"cold": {"time_to_ready_s": 40.0}},
        "best": {"time_to_ready_s": 12.0, "knobs": ["standby_launcher"],
                 "standby_launcher": True}}))
    r = _plan(capsys, "--params", "7B", "--tuned", str(tune))
    assert any("launcher is already running" in n and "new node pays the launcher's imports"
               in n for n in r["notes"])
    assert any("through a standby launcher already running on the node" in n
               for n in r["notes"])
    tune.write_text('{"schema_version": 2}')
    assert main(["plan", "--params", "7B", "--tuned", str(tune)]) == 2
    assert "not what `coldscope tune --json` prints" in capsys.readouterr().err
    tune.write_text('{"best": {"time_to_ready_s": 12.5}, "baseline_time_to_ready_s": 30}')
    assert main(["plan", "--params", "7B", "--tuned", str(tune)]) == 2
    assert "schema 2" in capsys.readouterr().err


def test_no_infinity_in_the_json(capsys, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("gpus:\n  H100: {memory_bytes: 80.0e+9, price_per_hour: 1e308}\n")
    assert main(["plan", "--params", "7B", "--profile", str(prof), "--min-workers", "2",
                 "--json"]) == 2
    captured = capsys.readouterr()
    assert "Infinity" not in captured.out and "out of range" in captured.err
