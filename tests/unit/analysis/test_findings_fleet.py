"""Findings without noise (issue 33): seconds at stake never above what the change can save,
one engine-warning finding per run with ERROR lines apart, and a headline change only from
two or more runs a side with an interval. Expected values come from the logs' own lines or
closed forms, never from the code under test."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from coldscope.analysis.findings import (
    RunFacts,
    evaluate,
    facts_from_log,
    findings_from_log,
)
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.engines import EngineWarning, LogFacts
from coldscope.report import configurations as cf
from coldscope.report.sections import compare
from coldscope.report.sections import findings as key_findings
from coldscope.report.stats import TOTAL

FIX = Path(__file__).resolve().parents[4] / "shared" / "fixtures"
if not FIX.exists():
    FIX = Path("/work/shared/fixtures")
GPU = FIX / "vllm-logs"
CPU = FIX / "vllm-cpu-0.32"
LLAMA = GPU / "v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log"
GPT_OSS = GPU / "v0.10.1.1_h100_gpt-oss-20b-moe_compile-cache-disabled_35-cudagraph-sizes.log"


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").split("\n")


def _seconds(lines: list[str], pattern: str) -> float:
    """The number a log line says, e.g. ``torch.compile takes (\\S+) s``."""
    for text in lines:
        m = re.search(pattern, text)
        if m:
            return float(m.group(1))
    raise AssertionError(pattern)


def test_kv_profiling_is_capped_by_its_stage_on_vllm_0_10():
    # The log says "Memory profiling takes 11.88 seconds", which on 0.10 includes the
    # compile; the kv_cache_profiling stage is what "init engine ... took 14.29 seconds" leaves
    # after the compile (Dynamo 5.39 s + graph load 4.555 s) and the capture (1.88 s).
    lines = _lines(LLAMA)
    init = _seconds(lines, r"init engine .* took (\S+) seconds")
    dynamo = _seconds(lines, r"torch.compile takes (\S+) s in total")
    load = _seconds(lines, r"from the cache, took (\S+) s")
    capture = _seconds(lines, r"Graph capturing finished in (\S+) secs")
    said = _seconds(lines, r"Memory profiling takes (\S+) seconds")
    assert said == 11.88
    [kv] = [f for f in findings_from_log(lines) if f.id == "kv_profiling_every_start"]
    assert kv.seconds_at_stake == pytest.approx(init - dynamo - load - capture, abs=0.01)
    assert kv.seconds_at_stake < said
    assert "Memory profiling takes 11.88 seconds" in kv.evidence
    assert "includes the torch.compile" in kv.evidence


@pytest.mark.parametrize("path", sorted(GPU.glob("*.log")) + sorted(CPU.glob("*.log")),
                         ids=lambda p: p.name[:40])
def test_no_finding_claims_more_than_its_stage(path: Path):
    lines = _lines(path)
    stages = facts_from_log(lines).stages
    for f in findings_from_log(lines):
        own = stages.get(f.stage) if f.stage else None
        if f.seconds_at_stake is not None and own is not None:
            assert f.seconds_at_stake <= own + 1e-9, (f.id, f.seconds_at_stake, own)


def test_an_estimate_above_its_stage_is_capped_and_says_so():
    # two child processes with 8 and 9 s gaps: the estimate is 8 s x 2 = 16 s of imports, but
    # the whole bootstrap took 10 s, so no change to it can save more than 10 s
    facts = RunFacts(log=LogFacts(child_process_gaps={"engine_core": 8.0, "worker": 9.0}),
                     stages={"bootstrap": 10.0})
    [f] = [x for x in evaluate(facts) if x.id == "repeated_imports"]
    assert f.seconds_at_stake == 10.0
    assert "capped at the bootstrap stage's own 10.00 s" in f.evidence
    assert "16.00 s" in f.evidence


def _warning(line_no: int, level: str, message: str) -> EngineWarning:
    return EngineWarning(line_no=line_no, level=level, where="x.py:1", message=message)


def test_warnings_are_one_finding_per_run_and_errors_apart():
    log = LogFacts(warnings=(
        _warning(3, "WARNING", "Triton is not installed"),
        _warning(7, "WARNING", "FlashInfer is not available"),
        _warning(9, "WARNING", "Triton is not installed"),
        _warning(11, "ERROR", "Error retrieving safetensors"),
    ))
    found = evaluate(RunFacts(lines=["x"] * 20, log=log))
    [warn] = [f for f in found if f.id == "engine_warning"]
    [err] = [f for f in found if f.id == "engine_error"]
    assert warn.evidence.startswith("3 WARNING lines, 2 distinct: ")
    assert "line 4 (x2): WARNING [x.py:1] Triton is not installed" in warn.evidence
    assert "line 8: WARNING [x.py:1] FlashInfer is not available" in warn.evidence
    assert "ERROR" not in warn.evidence and "safetensors" not in warn.evidence
    assert err.evidence == "line 12: ERROR [x.py:1] Error retrieving safetensors"
    assert warn.seconds_at_stake is None and err.seconds_at_stake is None
    assert [f.id for f in found][-2:] == ["engine_warning", "engine_error"]


def test_a_real_error_line_is_an_error_not_a_warning():
    lines = _lines(GPT_OSS)
    at = next(i for i, t in enumerate(lines) if "ERROR" in t and "Error retrieving" in t)
    found = findings_from_log(lines)
    [err] = [f for f in found if f.id == "engine_error"]
    assert f"line {at + 1}: ERROR" in err.evidence
    assert all("Error retrieving" not in f.evidence for f in found if f.id == "engine_warning")


@pytest.mark.parametrize("path", sorted(GPU.glob("*.log")), ids=lambda p: p.name[:40])
def test_at_most_one_warning_and_one_error_finding_per_log(path: Path):
    ids = [f.id for f in findings_from_log(_lines(path))]
    assert ids.count("engine_warning") <= 1 and ids.count("engine_error") <= 1


# -- the report's headline change --------------------------------------------------------------


def _run(rid: str, cache: str, total: float) -> Run:
    stages = dict.fromkeys(BUCKETS)
    stages.update(bootstrap=total - 2.0, model_loading=2.0)
    return Run.model_validate({
        "id": rid, "status": "ok", "cache": cache, "time_to_ready_s": total,
        "started_at": "2026-01-01T00:00:00+00:00", "stages": stages,
        "engine": {"name": "vllm", "version": "0.10.1.1", "argv": []},
        "model": {"path": "/models/m", "name": "m"},
    })


def _headline(runs: list[Run]) -> key_findings.LargestChange | None:
    return key_findings._largest_change(compare.build(cf.group_runs(runs)))


def test_one_run_a_side_is_never_the_headline():
    # a 20x ratio from one saved log a side (the 20.2x): shown in the comparisons,
    # never headlined
    runs = [_run("a", "cold", 100.0), _run("b", "warm", 5.0)]
    (cmp,) = compare.build(cf.group_runs(runs)).items
    assert cmp.geomean[TOTAL] == pytest.approx(0.05)
    assert _headline(runs) is None


def test_the_headline_has_two_runs_a_side_and_fiellers_interval():
    from scipy.stats import t as student_t
    cold, warm = [10.0, 12.0], [20.0, 22.0]
    runs = [_run(f"c{i}", "cold", v) for i, v in enumerate(cold)] + \
        [_run(f"w{i}", "warm", v) for i, v in enumerate(warm)]
    ch = _headline(runs)
    assert ch is not None and ch.pairs == 1
    # Fieller's 95 % interval of mean(warm) / mean(cold), by hand: x = 21, y = 11, each
    # mean's squared standard error 2 / 2 = 1; Welch-Satterthwaite df of x - r y
    x, y, vx, vy = 21.0, 11.0, 1.0, 1.0
    r = x / y
    a, b = vx, r * r * vy
    df = (a + b) ** 2 / (a * a + b * b)
    t2 = student_t.ppf(0.975, df) ** 2
    lead = y * y - t2 * vy
    root = math.sqrt((x * y) ** 2 - lead * (x * x - t2 * vx))
    assert ch.ratio == pytest.approx(r)
    assert (ch.low, ch.high) == (pytest.approx((x * y - root) / lead),
                                 pytest.approx((x * y + root) / lead))
    html = key_findings.draw(key_findings.KeyFindings((), (), 0, len(runs), ch))
    assert "95&nbsp;% interval" in html and "at least 2 runs a side" in html


def test_a_headline_ignores_pairs_with_one_run_a_side():
    # model m: 2 runs a side (ratio 0.5); model n: 1 run a side (ratio 0.05): the headline
    # rests on m's pair only
    def run(rid: str, cache: str, total: float, model: str) -> Run:
        return _run(rid, cache, total).evolve(model={"path": f"/models/{model}",
                                                     "name": model})
    runs = [run("c1", "cold", 10.0, "m"), run("c2", "cold", 12.0, "m"),
            run("w1", "warm", 5.0, "m"), run("w2", "warm", 6.0, "m"),
            run("c3", "cold", 100.0, "n"), run("w3", "warm", 5.0, "n")]
    ch = _headline(runs)
    assert ch is not None and (ch.pairs, ch.pairs_total) == (1, 2)
    assert ch.ratio == pytest.approx(5.5 / 11.0)
    assert ch.low is not None and ch.high is not None and ch.low < ch.ratio < ch.high
