"""A fleet's own startup model from its saved logs (issue 33): ``fit --store`` selects runs
(``--label``, ``--engine``), finds each logged model's config (``--model-root``,
``--model-map``), refuses mixed engines with advice naming options that exist, and the
README's ``calibrate ... --store --models a,b`` runs as written; ``--suggest`` leaves out
models ``predict`` calls out of domain.

The store is made by ``coldscope parse --save`` from real vLLM logs; the expected training
sets are counted by hand from the logs chosen and the configs given."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from coldscope.cli.main import main
from coldscope.core.records import Run
from coldscope.prediction.training import ModelPlaces, training_set
from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError

FIX = Path(__file__).resolve().parents[4] / "shared" / "fixtures"
if not FIX.exists():
    FIX = Path("/work/shared/fixtures")
LOGS = FIX / "vllm-logs"
CONFIGS = FIX / "model-configs"
#: vLLM 0.10.1.1 logs and the model each names (``model='./models/llama2-7b-hf'`` ...):
#: three dense models whose configs are given below, one MoE (gpt-oss-20b, config given) and
#: one hybrid (granite4.0-h-3b, no config anywhere).
CHOSEN = {
    "v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log": "llama2-7b-hf",
    "v0.10.1.1_h100_yi-6b_runai-streamer.log": "yi-6b",
    "v0.10.1.1_h100_falcon-7b_tensorizer.log": "falcon-7b-tensorized",
    "v0.10.1.1_h100_gpt-oss-20b-moe_compile-cache-disabled_35-cudagraph-sizes.log":
        "gpt-oss-20b",
    "v0.10.1.1_h100_granite4.0-h-micro-3b-hybrid_no-prefix-caching.log": "granite4.0-h-3b",
}
#: Yi-6B's published config (01-ai/Yi-6B): a Llama architecture.
YI_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
             "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 64000,
             "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store of the chosen logs saved by ``parse --save``, and a model root holding the
    configs under other spellings than logged: ``llama2-7b-hf`` as logged, ``Yi-6B`` in
    another case, ``gpt-oss-20b``; falcon's is given by ``--model-map`` only."""
    root = tmp_path_factory.mktemp("fleet")
    models = root / "models"
    models.mkdir()
    shutil.copytree(CONFIGS / "llama-2-7b-hf", models / "llama2-7b-hf")
    shutil.copytree(CONFIGS / "gpt-oss-20b", models / "gpt-oss-20b")
    (models / "Yi-6B").mkdir()
    (models / "Yi-6B" / "config.json").write_text(json.dumps(YI_CONFIG))
    store = root / "s.db"
    assert main(["parse", "--save", "--store", str(store),
                 *(str(LOGS / name) for name in CHOSEN)]) == 0
    return {"store": store, "models": models, "root": root}


def _where(fleet: dict[str, Path]) -> list[str]:
    return ["--model-root", str(fleet["models"]),
            "--model-map", f"falcon-7b-tensorized={CONFIGS / 'falcon-7b-instruct'}"]


def test_parse_save_stored_one_run_per_log(fleet: dict[str, Path]) -> None:
    with Store(fleet["store"], create=False) as store:
        runs = store.runs(status=None)
    assert sorted(r.model.name or "" for r in runs) == sorted(CHOSEN.values())


def test_a_store_of_saved_logs_fits_with_model_root_and_map(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = fleet["root"] / "m.json"
    assert main(["fit", "--store", str(fleet["store"]), *_where(fleet), "--out", str(out),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    # 5 runs; granite's config is nowhere (skipped); gpt-oss-20b is MoE (excluded from a
    # dense fit); the other three are the training set
    trained = json.loads(out.read_text())["trained_on"]
    assert sorted(trained["models"]) == ["falcon-7b-tensorized", "llama2-7b-hf", "yi-6b"]
    assert any("granite4.0-h-3b" in n for n in printed["notes"])


def test_the_training_set_holds_each_logs_own_seconds(fleet: dict[str, Path]) -> None:
    places = ModelPlaces(root=fleet["models"],
                         mapping={"falcon-7b-tensorized": str(CONFIGS / "falcon-7b-instruct")})
    training = training_set(store_path=fleet["store"], places=places)
    by_model = {o.model: o for o in training.observations}
    assert sorted(by_model) == ["falcon-7b-tensorized", "gpt-oss-20b", "llama2-7b-hf",
                                "yi-6b"]
    for name, model in CHOSEN.items():
        if model not in by_model:
            continue
        text = (LOGS / name).read_text(errors="replace")
        capture = float(re.search(r"Graph capturing finished in (\S+) secs", text).group(1))
        assert by_model[model].buckets["cuda_graph_capture"] == pytest.approx(capture)
    # the features are the configs': Yi-6B's 32 layers and 64,000-token vocabulary
    assert by_model["yi-6b"].features.num_layers == 32


def test_without_a_place_for_the_models_the_error_says_how(fleet: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    assert main(["fit", "--store", str(fleet["store"]),
                 "--out", str(fleet["root"] / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "empty training set" in err and "--model-root DIR" in err
    assert "--model-map NAME=DIR" in err and "Traceback" not in err
    # one model found (falcon's, by the map): too few to fit, and the error says why
    assert main(["fit", "--store", str(fleet["store"]), "--model-map",
                 f"falcon-7b-tensorized={CONFIGS / 'falcon-7b-instruct'}",
                 "--out", str(fleet["root"] / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "at least 3 different models" in err and "4 run(s) skipped" in err
    assert "--model-root DIR" in err


def _copy_store(fleet: dict[str, Path], name: str, change: dict[str, dict[str, object]]
                ) -> Path:
    """The fleet's store with some runs changed (by model name): a label, another engine."""
    path = fleet["root"] / name
    with Store(fleet["store"], create=False) as src, Store(path) as dst:
        for run in src.runs(status=None):
            dst.add_run(run.evolve(**change.get(run.model.name or "", {})))
    return path


def test_label_and_engine_select_the_runs(fleet: dict[str, Path]) -> None:
    sglang = {"engine": {"name": "sglang", "version": "0.5.7", "argv": []}}
    store = _copy_store(fleet, "labelled.db", {
        "llama2-7b-hf": {"label": "a"}, "yi-6b": {"label": "a"},
        "falcon-7b-tensorized": {"label": "a"}, "gpt-oss-20b": sglang,
        "granite4.0-h-3b": {"label": "b"}})
    places = ModelPlaces(root=fleet["models"],
                         mapping={"falcon-7b-tensorized": str(CONFIGS / "falcon-7b-instruct")})
    a = training_set(store_path=store, label="a", places=places)
    assert sorted(o.model for o in a.observations) == ["falcon-7b-tensorized",
                                                       "llama2-7b-hf", "yi-6b"]
    assert "(label a)" in a.source
    vllm = training_set(store_path=store, engine="vllm", places=places)
    # vLLM: llama2, yi, falcon (granite has no config); gpt-oss is now SGLang's
    assert sorted(o.model for o in vllm.observations) == ["falcon-7b-tensorized",
                                                          "llama2-7b-hf", "yi-6b"]
    with pytest.raises(ColdscopeError, match="labels in the store: a, b"):
        training_set(store_path=store, label="c", places=places)
    with pytest.raises(ColdscopeError, match="unknown engine 'nope'"):
        training_set(store_path=store, engine="nope", places=places)


def test_mixed_engines_are_refused_with_options_that_exist(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sglang = {"engine": {"name": "sglang", "version": "0.5.7", "argv": []}}
    store = _copy_store(fleet, "mixed.db", {"granite4.0-h-3b": sglang})
    assert main(["fit", "--store", str(store), *_where(fleet),
                 "--out", str(fleet["root"] / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "runs mix engines (sglang: 1, vllm: 4)" in err
    named = set(re.findall(r"(--[a-z-]+)", err))
    assert {"--engine", "--label"} <= named
    assert main(["fit", "--help"]) == 0
    helptext = capsys.readouterr().out
    assert all(option in helptext for option in named)
    assert main(["fit", "--store", str(store), *_where(fleet), "--engine", "vllm",
                 "--out", str(fleet["root"] / "x.json")]) == 0


def test_the_readmes_calibrate_command_runs_as_written(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    base = fleet["root"] / "base.json"
    assert main(["fit", "--store", str(fleet["store"]), *_where(fleet),
                 "--out", str(base)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("COLDSCOPE_STORE", str(fleet["store"]))
    here = fleet["root"] / "here.json"
    # README: coldscope calibrate h100-v0.10.json --store --models a,b --out here.json
    assert main(["calibrate", str(base), "--store", "--models", "llama2-7b-hf,yi-6b",
                 "--out", str(here), *_where(fleet)]) == 0
    assert json.loads(here.read_text())["calibration"]["models"] == ["llama2-7b-hf", "yi-6b"]
    # and --store FILE still takes its file
    assert main(["calibrate", str(base), "--store", str(fleet["store"]), "--models",
                 "llama2-7b-hf,yi-6b", "--out", str(here), *_where(fleet)]) == 0


def test_suggest_leaves_out_what_predict_calls_out_of_domain(
        fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base = fleet["root"] / "base2.json"
    assert main(["fit", "--store", str(fleet["store"]), *_where(fleet),
                 "--out", str(base)]) == 0
    capsys.readouterr()
    # predict calls gpt-oss-20b (32 experts) out of domain for a dense model
    assert main(["predict", str(fleet["models"] / "gpt-oss-20b"), "--startup-model",
                 str(base), "--json"]) == 0
    assert any("out of domain" in w for w in json.loads(capsys.readouterr().out)["warnings"])
    assert main(["calibrate", str(base), "--store", str(fleet["store"]), "--suggest",
                 *_where(fleet), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    suggested = {m for s in printed["suggestions"] for m in s["models"]}
    assert suggested == {"falcon-7b-tensorized", "llama2-7b-hf", "yi-6b"}
    assert [x["model"] for x in printed["left_out"]] == ["gpt-oss-20b"]
    cands = ["--candidates", str(fleet["models"] / "gpt-oss-20b"),
             "--candidates", str(fleet["models"] / "Yi-6B")]
    assert main(["calibrate", str(base), "--suggest", *cands]) == 2
    assert "left out: gpt-oss-20b (moe)" in capsys.readouterr().err


def _run(**model: str) -> Run:
    return Run.model_validate({"id": "r", "status": "ok", "started_at": "2026-01-01T00:00:00",
                               "engine": {"name": "vllm", "model": model.get("logged")},
                               "model": {"name": model.get("name"), "path": model.get("path")}})


def test_model_root_matches_logged_names_any_case(tmp_path: Path) -> None:
    (tmp_path / "Qwen2.5-7B").mkdir()
    (tmp_path / "meta-llama" / "llama-3.1-8b").mkdir(parents=True)
    hub = tmp_path / "models--google--gemma-2b-it" / "snapshots" / "abc123"
    hub.mkdir(parents=True)
    places = ModelPlaces(root=tmp_path)
    qwen = _run(logged="Qwen/Qwen2.5-7B", name="Qwen2.5-7B", path="Qwen/Qwen2.5-7B")
    assert places.find(qwen) == str(tmp_path / "Qwen2.5-7B")
    llama = _run(logged="meta-llama/Llama-3.1-8B", path="meta-llama/Llama-3.1-8B")
    assert places.find(llama) == str(tmp_path / "meta-llama" / "llama-3.1-8b")
    logged_path = _run(logged="/local/models/QWEN2.5-7b", path="/local/models/QWEN2.5-7b")
    assert places.find(logged_path) == str(tmp_path / "Qwen2.5-7B")
    assert places.find(_run(logged="google/gemma-2b-it")) == str(hub)
    # not under the root: the path the run recorded
    assert places.find(_run(logged="org/other", path="org/other")) == "org/other"
    # a map wins over the root, matched by any form of the name, any case
    mapped = ModelPlaces(root=tmp_path, mapping={"qwen/qwen2.5-7b": "/elsewhere"})
    assert mapped.find(qwen) == "/elsewhere"


def test_model_map_items_are_checked(fleet: dict[str, Path],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    for bad, says in (("nonsense", "is not NAME=DIR"), ("x=/no/such/dir", "does not exist")):
        assert main(["fit", "--store", str(fleet["store"]), "--model-map", bad,
                     "--out", str(fleet["root"] / "x.json")]) == 2
        assert says in capsys.readouterr().err
