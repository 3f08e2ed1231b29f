"""The simulate and traces commands: the SimResult contract, readable output, bounds checked
before any work, one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from coldscope.cli.main import main
from coldscope.planning.traces import read_trace
from coldscope.sim import SimResult, SweepResult

ROOT = Path(__file__).resolve().parents[3]
AZURE_CODE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"


def _json(capsys, *args):
    code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def _error(capsys, *args) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_simulate_json_validates_against_the_published_schema(capsys):
    out = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--policy", "warm-pool",
                "--min-workers", "2", "--startup-s", "30")
    jsonschema.validate(out, SimResult.model_json_schema())
    assert out["schema_version"] == 2
    assert out["requests"] == len(read_trace(AZURE_CODE))
    assert out["startup"]["default"] is False and out["startup"]["seconds"] == 30
    assert out["policy"] == {"name": "warm-pool", "params": out["policy"]["params"]}
    assert out["policy"]["params"]["min_workers"] == 2
    assert out["timeline"] is None  # only with --timeline


def test_timeline_only_when_asked_and_output_file(capsys, tmp_path):
    dest = tmp_path / "r.json"
    out = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-s", "30s",
                "--timeline", "-o", str(dest))
    assert sum(out["timeline"]["arrivals"]) == out["requests"]
    assert json.loads(dest.read_text()) == out
    jsonschema.validate(out, SimResult.model_json_schema())


def test_one_default_gpu_price_with_its_currency(capsys):
    from coldscope.planning.infra import load_profile
    h100 = load_profile().gpus["H100"].price_per_hour
    out = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-s", "30")
    assert out["replica"]["gpu_hour_price"] == h100 == 4.0
    assert out["currency"] == "USD"
    assert out["cost"] == pytest.approx(out["gpu_hours"] * h100)
    assert main(["simulate", "--trace", str(AZURE_CODE), "--startup-s", "30"]) == 0
    assert "USD" in capsys.readouterr().out
    out = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-s", "30",
                "--gpu", "L4")
    assert out["replica"]["gpu_hour_price"] == load_profile().gpus["L4"].price_per_hour


def test_sla_is_a_duration(capsys):
    fast = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-s", "30",
                 "--sla", "500ms")
    slow = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-s", "30",
                 "--sla", "2s")
    assert fast["sla_ttft_s"] == 0.5 and slow["sla_ttft_s"] == 2.0
    assert fast["sla_attainment"] < slow["sla_attainment"]
    assert "--sla" in _error(capsys, "simulate", "--trace", str(AZURE_CODE), "--sla", "soon")


def test_summary_names_the_policy_and_the_default_start_up(capsys):
    assert main(["simulate", "--trace", str(AZURE_CODE), "--policy", "warm-pool",
                 "--min-workers", "3"]) == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "paper's measured H100" in text
    assert "policy     warm-pool (min_workers=3)" in text and "{" not in text


def test_bad_trace_is_a_one_line_error(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,context_tokens,generated_tokens\n0,1,1\n2,-1,3\n")
    assert "negative" in _error(capsys, "simulate", "--trace", str(p))
    out = _json(capsys, "simulate", "--trace", str(p), "--repair")
    assert out["trace"]["repairs"] == {"negative_token_rows_dropped": 1}
    assert out["requests"] == 1


@pytest.mark.parametrize("args, message", [
    (["--startup-model", "x.json"], "--model"),
    (["--set", "nonsense=1"], "nonsense"),
    (["--min-workers", "-3"], "min_workers=-3"),
    (["--policy", "fixed", "--min-workers", "-1"], "workers=-1"),
    (["--min-workers", "1000000000"], "above the limit of 100,000"),
    (["--set", "tick_s=0"], "tick_s=0"),
    (["--concurrency", "0"], "replica.concurrency"),
    (["--startup-s", "1e400s"], "finite"),
    (["--jobs", "0", "--sweep", "x.yaml"], "jobs"),
])
def test_bad_options_are_one_line_errors_before_any_work(tmp_path, capsys, args, message):
    assert message in _error(capsys, "simulate", "--trace", str(AZURE_CODE), *args)


def test_a_billion_warm_workers_is_refused_at_once(capsys):
    # Used to allocate slot heaps for every replica (16 GB after 120 s).
    err = _error(capsys, "simulate", "--trace", str(AZURE_CODE), "--policy", "fixed",
                 "--min-workers", "1000000000")
    assert "--replica-limit" in err


def test_a_trace_spanning_years_is_refused(tmp_path, capsys):
    p = tmp_path / "t.csv"  # milliseconds written where seconds were meant
    p.write_text("arrival_s,context_tokens,generated_tokens\n0,10,10\n1000000000,10,10\n")
    err = _error(capsys, "simulate", "--trace", str(p))
    assert "above the limit of 31 days" in err and "--max-span" in err


@pytest.mark.parametrize("content", [os.urandom(4096), b"\x00" * 100, b"\xff\xfe" + b"a" * 50])
def test_random_bytes_as_a_trace(tmp_path, capsys, content):
    p = tmp_path / "t.csv"
    p.write_bytes(content)
    _error(capsys, "simulate", "--trace", str(p))
    q = tmp_path / "t.parquet"
    q.write_bytes(content)
    _error(capsys, "simulate", "--trace", str(q))


def test_synth_then_sweep(tmp_path, capsys):
    out = tmp_path / "day.csv"
    info = _json(capsys, "traces", "synth", "--days", "0.02", "--rate", "120/min", "--bursts",
                 "-o", str(out))
    assert info["requests"] == len(read_trace(out))
    sweep = tmp_path / "s.yaml"
    sweep.write_text("grid:\n  policy.min_workers: [0, 1]\n")
    result = _json(capsys, "simulate", "--trace", str(out), "--sweep", str(sweep), "--jobs", "1",
                   "--startup-s", "20")
    jsonschema.validate(result, SweepResult.model_json_schema())
    rows = result["cases"]
    assert [r["params"] for r in rows] == [{"policy.min_workers": 0}, {"policy.min_workers": 1}]
    assert rows[1]["result"]["warm_at_start"] == 1


def test_synth_output_option_names(tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert main(["traces", "synth", "--days", "0.001", "--output", str(a)]) == 0
    assert main(["traces", "synth", "--days", "0.001", "--out", str(b)]) == 0  # old name
    capsys.readouterr()
    assert a.read_bytes() == b.read_bytes()
    assert "-o/--output" in _error(capsys, "traces", "synth", "--days", "0.001")


@pytest.mark.parametrize("args, message", [
    (["--rate", "1e9/s"], "above the limit"),
    (["--days", "1e9"], "above the limit of 366 days"),
    (["--days", "-1"], "above 0"),
    (["--days", "nan"], "above 0"),
    (["--rate", "0/s"], "bad rate"),
])
def test_synth_bounds_before_any_work(tmp_path, capsys, args, message):
    assert message in _error(capsys, "traces", "synth", *args, "-o", str(tmp_path / "x.csv"))
    assert not (tmp_path / "x.csv").exists()


def test_no_progress_bar_when_piped(tmp_path, capsys):
    # Under pytest stdout is not a terminal: the output is exactly the summary, nothing else.
    assert main(["traces", "synth", "--days", "0.001", "-o", str(tmp_path / "a.csv")]) == 0
    out = capsys.readouterr()
    assert out.err == "" and out.out.startswith("wrote ")


def test_progress_bar_on_a_terminal_only(tmp_path):
    """On a pseudo-terminal `traces synth` draws a bar on stderr; with --json it draws none."""
    import pty
    import subprocess
    import sys

    def run(*extra: str) -> bytes:
        out_master, out_slave = pty.openpty()
        err_master, err_slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "coldscope.cli.main", "traces", "synth", "--days", "0.5",
             "--rate", "20/s", "-o", str(tmp_path / "t.csv"), *extra],
            stdout=out_slave, stderr=err_slave, env={**os.environ, "COLUMNS": "100",
                                                     "TERM": "xterm"})
        os.close(out_slave)
        os.close(err_slave)
        chunks = []
        while True:
            try:
                data = os.read(err_master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=120) == 0
        os.close(out_master)
        os.close(err_master)
        return b"".join(chunks)

    assert b"writing" in run() or b"generating" in run()
    assert run("--json") == b""


def test_startup_from_a_plan_report(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["plan", "--params", "7B", "--mitigate", "gpu_snapshot", "-o", str(plan)]) == 0
    capsys.readouterr()
    total = json.loads(plan.read_text())["total_s"]
    out = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-plan", str(plan))
    assert out["startup"]["kind"] == "uniform"
    assert out["startup"]["interval"] == total
    # the same simulation from data, no file read by the simulator: a Trace and a PlanReport
    from coldscope.planning import PlanRequest
    from coldscope.planning import plan as make_plan
    from coldscope.sim.request import SimInputs, run
    from coldscope.sim.startup import from_plan
    report = make_plan(PlanRequest(params="7B", mitigate=["gpu_snapshot"]))
    direct = run(SimInputs(trace=read_trace(AZURE_CODE), startup=from_plan(report, str(plan))))
    assert direct.model_dump(mode="json") == out


def test_replica_spec_file_and_its_old_option_name(tmp_path, capsys):
    spec = tmp_path / "r.yaml"
    spec.write_text("concurrency: 4\ngpus_per_replica: 2\n")
    new = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-s", "30",
                "--replica", str(spec))
    old = _json(capsys, "simulate", "--trace", str(AZURE_CODE), "--startup-s", "30",
                "--profile", str(spec))
    assert new == old and new["replica"]["concurrency"] == 4
    assert new["gpu_hours"] == new["replica_seconds"] * 2 / 3600
