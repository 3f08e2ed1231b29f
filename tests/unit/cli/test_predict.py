"""``coldscope features / fit / predict`` end to end on files (no engine)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from coldscope.cli.main import main
from coldscope.core.stages import BUCKETS
from tests.shapes import shape_run, write_shape

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The paper fit, once for the module: (model file, what ``fit`` printed)."""
    out = tmp_path_factory.mktemp("fit") / "h100.json"
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(["fit", "--paper", str(PAPER), "--out", str(out)]) == 0
    return out, text.getvalue()


@pytest.fixture
def startup_model(fitted: tuple[Path, str]) -> Path:
    return fitted[0]


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_features_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["features", str(CONFIGS / "llama-2-7b-hf"), "--json"]) == 0
    f = _json(capsys)
    index = json.loads((CONFIGS / "llama-2-7b-hf" / "model.safetensors.index.json").read_text())
    assert f["weight_bytes"] == index["metadata"]["total_size"]
    assert f["num_layers"] == 32 and f["kind"] == "dense"


def test_features_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["features", str(CONFIGS / "mixtral-8x7b-v0.1")]) == 0
    out = capsys.readouterr().out
    assert "experts (active)" in out and "8 (2)" in out


def test_fit_json_reports_formulas_correlations_and_lomo(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    assert main(["fit", "--paper", str(PAPER), "--formulas", "paper", "--out", str(out),
                 "--json"]) == 0
    s = _json(capsys)
    assert s["buckets"]["model_loading"]["terms"] == ["1", "weight_gb"]
    assert set(s["buckets"]["torch_compile"]["pcc"]) >= {"graph_mib", "layers"}
    assert s["lomo"]["total"]["mse"] > 0 and len(s["lomo"]["per_model"]) == 12
    assert json.loads(out.read_text())["kind"] == "coldscope-startup-model"


def test_fit_text(fitted: tuple[Path, str]) -> None:
    out = fitted[1]
    assert "leave-one-model-out total" in out and "Pearson correlation" in out
    assert "extrapolation folds (deepest, largest, smallest held out" in out
    assert "loading rate:" in out and "constant" in out
    assert "excluded (other kinds): deepseek-v2-lite-16b" in out


def test_predict_json_contract(startup_model: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    entry = json.loads((PAPER / "models_config.json").read_text())["falcon-11b"]
    features = tmp_path / "falcon-11b.json"
    features.write_text(json.dumps({**entry, "params": 11_100_000_000}))
    assert main(["predict", str(features), "--startup-model", str(startup_model), "--json"]) == 0
    p = _json(capsys)
    assert set(p) >= {"total_s", "interval", "stages", "warnings"}
    assert set(p["stages"]) <= set(BUCKETS)
    assert all(set(v) == {"s", "interval"} for v in p["stages"].values())
    assert p["interval"]["low"] <= p["total_s"] <= p["interval"]["high"]
    assert any("outside the training range" in w for w in p["warnings"])  # 60 layers
    # which formula served each stage, and why: compile switched to the graph formula
    assert set(p["formulas"]) == set(p["stages"])
    compile_ = p["formulas"]["torch_compile"]
    assert compile_["switched"] and compile_["terms"] == ["1", "graph_mib"]
    assert "layers = 60 outside 24-48" in compile_["why"]
    assert not p["formulas"]["model_loading"]["switched"]
    from coldscope.prediction.startup_model import PredictionReport
    PredictionReport.model_validate(p)  # the published schema accepts it


def test_predict_text_for_a_model_directory(startup_model: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(CONFIGS / "llama-3.1-8b"),
                 "--startup-model", str(startup_model)]) == 0
    out = capsys.readouterr().out
    assert "total" in out and "90% interval" in out


@pytest.mark.parametrize("args, message", [
    (["predict", "/nonexistent/model", "--startup-model", "{model}"], "no such model path"),
    (["predict", str(CONFIGS / "llama-3.1-8b"), "--startup-model", "/nonexistent.json"],
     "cannot read startup model"),
    (["fit", "--paper", "/nonexistent", "--out", "x.json"], "does not exist"),
    (["fit", "--paper", str(PAPER), "--kinds", "sparse", "--out", "x.json"], "--kinds"),
])
def test_bad_input_prints_one_error_line(args: list[str], message: str, startup_model: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.replace("{model}", str(startup_model)) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and err.count("\n") == 1


def test_fit_from_an_empty_store_is_a_clear_error(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from coldscope.store.db import Store
    Store(tmp_path / "store.db").close()
    assert main(["fit", "--store", str(tmp_path / "store.db"), "--out",
                 str(tmp_path / "m.json")]) == 2
    assert "empty training set" in capsys.readouterr().err


def _store_of_shapes(tmp_path: Path, db: str, layer_counts: tuple[int, ...],
                     compile_per_layer: float = 5.0, bootstrap: float = 30.0,
                     storage: dict | None = None) -> Path:
    """A real store with one run per config-only llama shape (compile = 20 + k x layers)."""
    from coldscope.store.db import Store
    store = Store(tmp_path / db)
    store.add_runs(
        (shape_run(f"run{i}", write_shape(tmp_path / f"shape{i}", layers, i), layers,
                   bootstrap=bootstrap, compile_per_layer=compile_per_layer,
                   started_at=f"2026-11-29T10:0{i}:00Z", storage=storage or {}), None)
        for i, layers in enumerate(layer_counts))
    store.close()
    return tmp_path / db


def test_calibrate_from_store_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fit on one machine's store, calibrate with two runs from another machine's store."""
    base = tmp_path / "base.json"
    cold = {"page_cache": "cold", "kind": "nvme"}
    assert main(["fit", "--store", str(_store_of_shapes(tmp_path, "a.db", (2, 4, 6, 8),
                                                        storage=cold)),
                 "--formulas", "auto", "--out", str(base)]) == 0
    assert json.loads(base.read_text())["storage"]["page_cache"] == "cold"  # runs' setting
    other = _store_of_shapes(tmp_path, "b.db", (2, 4, 6, 8), compile_per_layer=2.5,
                             bootstrap=33.0, storage={"page_cache": "hot", "kind": "tmpfs"})
    new = tmp_path / "new.json"
    capsys.readouterr()
    assert main(["calibrate", str(base), "--store", str(other), "--models", "shape0,shape3",
                 "--out", str(new), "--json"]) == 0
    s = _json(capsys)
    assert s["stages"]["torch_compile"]["kind"] == "ratio"
    assert s["stages"]["torch_compile"]["value"] == pytest.approx(0.5)
    assert s["stages"]["bootstrap"]["value"] == pytest.approx(3.0)
    assert s["storage"]["page_cache"] == "hot" and s["storage"]["kind"] == "tmpfs"
    for i, layers in ((1, 4), (2, 6)):
        assert main(["predict", str(tmp_path / f"shape{i}"), "--startup-model", str(new),
                     "--json"]) == 0
        p = _json(capsys)
        assert p["total_s"] == pytest.approx(33 + 0.2 + 1 + 2.5 * (4 + layers) + 2 + 1 + 0.5)


def test_fit_from_store_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs of four config-only model shapes in a real store, fitted through the CLI."""
    _store_of_shapes(tmp_path, "store.db", (2, 4, 6, 8))  # compile = 20 + 5 s x layers
    out = tmp_path / "cpu.json"
    assert main(["fit", "--store", str(tmp_path / "store.db"), "--out", str(out),
                 "--json"]) == 0
    s = _json(capsys)
    assert s["trained_on"]["n_models"] == 4
    assert "cuda_graph_capture" not in s["buckets"]
    assert s["buckets"]["torch_compile"]["lomo_rmse"] == pytest.approx(0.0, abs=1e-9)
    assert main(["predict", str(tmp_path / "shape1"), "--startup-model", str(out),
                 "--json"]) == 0
    p = _json(capsys)
    assert p["stages"]["torch_compile"]["s"] == pytest.approx(20.0 + 5.0 * 4)
    assert p["total_s"] == pytest.approx(30 + 0.2 + 1 + 40 + 2 + 1 + 0.5)


L40S = PAPER / "figures" / "figure-10" / "gpu1" / "avg_comparison_results.json"


def test_calibrate_then_predict(startup_model: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "l40s.json"
    assert main(["calibrate", str(startup_model), "--paper", str(PAPER), "--timings", str(L40S),
                 "--models", "llama2-13b-hf,yi-9b", "--out", str(out), "--json"]) == 0
    s = _json(capsys)
    assert s["calibrated_on"] == ["llama2-13b-hf", "yi-9b"] and s["replicates"] == [1, 1]
    assert s["stages"]["model_loading"]["kind"] == "ratio"
    assert 0.05 < s["stages"]["model_loading"]["value"] < 0.1  # SSD -> page cache
    assert s["stages"]["bootstrap"]["kind"] == "offset"
    assert s["storage"]["page_cache"] == "hot"
    saved = json.loads(out.read_text())
    assert saved["calibration"]["base_source"] == str(startup_model)
    assert saved["calibration"]["source"] == str(L40S)
    assert main(["predict", str(CONFIGS / "llama-2-7b-hf"), "--startup-model", str(out),
                 "--json"]) == 0
    p = _json(capsys)
    assert p["calibrated_on"] == ["llama2-13b-hf", "yi-9b"]
    # the L40S node measured 24.55 s for llama2-7b
    assert abs(p["total_s"] - 24.55) < 1.0
    assert p["interval"]["low"] <= 24.55 <= p["interval"]["high"]
    assert main(["predict", str(CONFIGS / "llama-2-7b-hf"), "--startup-model", str(out)]) == 0
    assert "calibrated on: llama2-13b-hf, yi-9b" in capsys.readouterr().out


def test_calibrate_suggest(startup_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(startup_model), "--paper", str(PAPER), "--timings", str(L40S),
                 "--suggest", "--json"]) == 0
    ranked = _json(capsys)["suggestions"]
    assert len(ranked) == 36 and ranked[0]["accepted"]
    assert not any(r["accepted"] for r in ranked if "qwen-0.5b" in r["models"])
    assert main(["calibrate", str(startup_model), "--suggest",
                 "--candidates", str(CONFIGS / "llama-3.2-1b"),
                 "--candidates", str(CONFIGS / "llama-2-7b-hf"),
                 "--candidates", str(CONFIGS / "llama-3.1-8b")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run: llama-2-7b-hf and llama-3.1-8b")
    assert "llama-3.2-1b is too small to identify" in out


@pytest.mark.parametrize("args, message", [
    (["--paper", str(PAPER), "--timings", str(L40S)], "needs --out"),
    (["--paper", str(PAPER), "--timings", str(L40S), "--models", "gpt-5", "--out", "x.json"],
     "no calibration run of gpt-5"),
    (["--paper", str(PAPER), "--suggest", "--candidates", str(CONFIGS / "llama-2-7b-hf")],
     "at least two"),
])
def test_calibrate_errors_are_one_line(startup_model: Path, args: list[str], message: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(startup_model), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and err.count("\n") == 1


def test_predict_for_another_storage_setting(startup_model: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    model = str(CONFIGS / "llama-2-7b-hf")
    assert main(["predict", model, "--startup-model", str(startup_model), "--json"]) == 0
    ssd = _json(capsys)
    assert main(["predict", model, "--startup-model", str(startup_model), "--json",
                 "--page-cache", "hot", "--storage-bandwidth", "10GB/s"]) == 0
    hot = _json(capsys)
    weight_bytes = json.loads((CONFIGS / "llama-2-7b-hf" / "model.safetensors.index.json")
                              .read_text())["metadata"]["total_size"]
    assert hot["stages"]["model_loading"]["s"] == pytest.approx(weight_bytes / 10e9, rel=1e-3)
    assert ssd["stages"]["model_loading"]["s"] > 10 * hot["stages"]["model_loading"]["s"]
    assert hot["storage"]["page_cache"] == "hot" and ssd["storage"]["page_cache"] == "cold"
    assert main(["predict", model, "--startup-model", str(startup_model),
                 "--page-cache", "cold"]) == 0  # the model was measured cold: as fitted
    capsys.readouterr()


def test_calibrate_suggest_by_size(startup_model: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Without candidates or runs, --suggest says how large the two models must be."""
    assert main(["calibrate", str(startup_model), "--suggest", "--json"]) == 0
    guide = _json(capsys)["minimums"]
    weights = guide["weight_gb"]
    assert weights["at_least"] == pytest.approx(0.3 * weights["median"])
    assert "model_loading" in weights["buckets"]
    # the paper's 12 dense models: median weight 14.54 GB -> at least 4.36 GB
    assert weights["at_least"] == pytest.approx(4.362, abs=0.01)
    assert main(["calibrate", str(startup_model), "--suggest"]) == 0
    assert "weight_gb            >= 4.362 GB" in capsys.readouterr().out
