"""The simulate and traces commands: JSON contract, readable output, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from coldscope.cli.main import main
from coldscope.sim.traces import read_trace

ROOT = Path(__file__).resolve().parents[2]
AZURE_CODE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"


def test_simulate_json_contract(capsys):
    assert main(["simulate", "--trace", str(AZURE_CODE), "--policy", "warm-pool",
                 "--min-workers", "2", "--startup-s", "30", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("requests", "ttft_s", "sla_attainment", "cold_start_requests", "cold_starts",
                "gpu_hours", "cost", "timeline"):
        assert key in out
    assert set(out["ttft_s"]) >= {"p50", "p90", "p99", "max"}
    assert out["requests"] == len(read_trace(AZURE_CODE))
    assert out["startup"]["default"] is False and out["startup"]["seconds"] == 30
    assert out["policy"]["params"]["min_workers"] == 2
    assert sum(out["timeline"]["arrivals"]) == out["requests"]
    assert out["cost"] == out["gpu_hours"] * 2.5


def test_simulate_summary_says_the_default_start_up(capsys):
    assert main(["simulate", "--trace", str(AZURE_CODE)]) == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "paper's measured H100" in text


def test_bad_trace_is_a_one_line_error(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,context_tokens,generated_tokens\n0,1,1\n2,-1,3\n")
    assert main(["simulate", "--trace", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "negative" in err and err.count("\n") == 1
    assert main(["simulate", "--trace", str(p), "--repair", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace"]["repairs"] == {"negative_token_rows_dropped": 1}
    assert out["requests"] == 1


def test_bad_options_are_errors(tmp_path, capsys):
    assert main(["simulate", "--trace", str(AZURE_CODE), "--startup-model", "x.json"]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["simulate", "--trace", str(AZURE_CODE), "--set", "nonsense=1"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_synth_then_sweep(tmp_path, capsys):
    out = tmp_path / "day.csv"
    assert main(["traces", "synth", "--days", "0.02", "--rate", "120/min", "--bursts",
                 "-o", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["requests"] == len(read_trace(out))
    sweep = tmp_path / "s.yaml"
    sweep.write_text("grid:\n  policy.min_workers: [0, 1]\n")
    assert main(["simulate", "--trace", str(out), "--sweep", str(sweep), "--jobs", "1",
                 "--startup-s", "20", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["cases"]
    assert [r["params"] for r in rows] == [{"policy.min_workers": 0}, {"policy.min_workers": 1}]
    assert rows[1]["result"]["warm_at_start"] == 1
