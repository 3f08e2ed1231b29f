"""``coldscope compare`` end to end: the fake engine started as a and b, interleaved; stored
runs compared again; the regression gate's exit codes. The fake engine is evidence of the
command's handling, never of a real engine's behaviour."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest

from coldscope.cli.schema import schema_of
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.store.db import Store
from tests.conftest import as_vllm
from tests.serve_replay import free_port

FAKE = str(Path(__file__).resolve().parents[2] / "fake_engine.py")
SRC = str(Path(__file__).resolve().parents[3] / "src")


def coldscope(*args, timeout=180):
    """The CLI of this checkout (not whatever coldscope is installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


_LAUNCHER = as_vllm(Path(tempfile.mkdtemp(prefix="test-cli-compare-")))


def fake(port, delay, *extra):
    """The fake engine's command line, run through an interpreter named ``vllm`` so that
    coldscope reads it as vLLM (and ``--enforce-eager`` turns torch_compile "not applicable",
    as for the real engine)."""
    return " ".join([_LAUNCHER, FAKE, "--port", str(port), "--delay", str(delay),
                     "--model", "vllm-fake", *extra])


@pytest.fixture(scope="module")
def warm_compare(tmp_path_factory):
    """One live warm comparison: a ready after 0.1 s, b after 0.9 s and eager, 2 runs each."""
    tmp = tmp_path_factory.mktemp("cmp")
    port = free_port()
    proc = coldscope("compare", "--store", str(tmp / "s.db"), "--cache-root", str(tmp / "c"),
                     "--repeat", "2", "--cache", "warm", "--json", "--label", "t1",
                     "--fail-if-slower", "0.3s", "--a", fake(port, 0.1),
                     "--b", f"FAKE_ARM=b {fake(port, 0.9, '--enforce-eager')}")
    return tmp, proc


def test_live_compare_interleaves_primes_apart_and_trips_the_gate(warm_compare):
    tmp, proc = warm_compare
    assert proc.returncode == 1, proc.stderr  # b is slower by ~0.8 s, more than 0.3 s
    assert proc.stderr.strip().splitlines()[-1].startswith("fail: b is slower than a by")
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, schema_of("compare"))
    assert doc["order"] == ["a", "b", "a", "b"]
    assert [p["side"] for p in doc["primes"]] == ["a", "b"]
    assert doc["b"]["env"] == {"FAKE_ARM": "b"}
    assert doc["time_to_ready"]["verdict"] == "slower"
    assert 0.5 < doc["time_to_ready"]["delta"] < 1.1
    # eager: torch_compile does not apply to b, so b's is 0 s; a's fake engine shows none
    assert doc["stages"]["torch_compile"]["b_mean"] == 0.0
    assert doc["stages"]["torch_compile"]["a_n"] == 0

    with Store(tmp / "s.db") as store:
        runs = store.runs(status=None)
    by_id = {r.id: r for r in runs}
    assert len(runs) == 6
    primes = [by_id[p["run"]] for p in doc["primes"]]
    assert [(r.label, r.cache) for r in primes] == [("t1:a:prime", "cold"),
                                                    ("t1:b:prime", "cold")]
    measured = sorted((r for r in runs if r not in primes), key=lambda r: r.started_at)
    assert [r.label for r in measured] == ["t1:a", "t1:b", "t1:a", "t1:b"]
    assert all(r.cache == "warm" for r in measured)
    assert measured[1].env_overrides == {"FAKE_ARM": "b"}
    assert not (tmp / "c" / "t1" / "caches" / "warm").exists()  # the warm caches are removed


def test_stored_runs_compare_again_by_label_and_the_gate_passes_within_allowance(warm_compare):
    tmp, live = warm_compare
    first = json.loads(live.stdout)
    proc = coldscope("compare", "--store", str(tmp / "s.db"), "--runs-a", "t1:a",
                     "--runs-b", "t1:b", "--json", "--fail-if-slower", "5s")
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    assert again["order"] == first["order"] and again["primes"] == []
    assert again["time_to_ready"] == first["time_to_ready"]
    text = coldscope("compare", "--store", str(tmp / "s.db"), "--runs-a", "t1:a",
                     "--runs-b", "t1:b")
    assert text.returncode == 0
    assert "b is slower" in text.stdout.splitlines()[0]
    assert "time to ready" in text.stdout


def test_cold_compare_of_one_run_each_says_there_is_no_interval(tmp_path):
    port = free_port()
    proc = coldscope("compare", "--store", str(tmp_path / "s.db"), "--cache-root",
                     str(tmp_path / "c"), "--repeat", "1", "--json", "--fail-if-slower", "0",
                     "--a", fake(port, 0.1), "--b", fake(port, 0.5))
    assert proc.returncode == 0, proc.stderr  # no interval: never a resolvable regression
    doc = json.loads(proc.stdout)
    assert doc["order"] == ["a", "b"] and doc["primes"] == []
    assert doc["time_to_ready"]["verdict"] == "unresolved"
    assert doc["time_to_ready"]["low"] is None
    assert any("no interval" in n for n in doc["notes"])


def test_compare_over_a_store_built_by_hand(tmp_path):
    def rec(i, label, ttr, compile_s, na=()):
        stages = dict.fromkeys(BUCKETS)
        stages.update({"bootstrap": ttr - (compile_s or 0.0), "torch_compile": compile_s,
                       "unattributed": 0.0})
        return Run(id=f"run{i}", status="ok", cache="warm", time_to_ready_s=ttr, stages=stages,
                   not_applicable=list(na), label=label,
                   started_at=f"2026-01-01T00:00:{i:02d}")

    with Store(tmp_path / "s.db") as store:
        for i, (ttr, c) in enumerate([(45.0, 14.0), (47.0, 15.0), (46.0, 13.0)]):
            store.add_run(rec(2 * i, "compiled", ttr, c))
            store.add_run(rec(2 * i + 1, "eager", ttr - 14.0, None, na=["torch_compile"]))
    proc = coldscope("compare", "--store", str(tmp_path / "s.db"), "--runs-a", "compiled",
                     "--runs-b", "eager", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    tc = doc["stages"]["torch_compile"]
    assert (tc["a_mean"], tc["b_mean"], tc["delta"]) == (14.0, 0.0, -14.0)
    assert tc["verdict"] == "faster"
    # a constant 14 s less on every pair: b - a of time to ready is exactly -14, zero spread
    assert doc["time_to_ready"]["delta"] == pytest.approx(-14.0)
    assert doc["order"] == ["a", "b"] * 3
    ids = coldscope("compare", "--store", str(tmp_path / "s.db"), "--runs-a", "run0,run2",
                    "--runs-b", "run1,run3,run5", "--json")
    assert json.loads(ids.stdout)["b"]["runs"] == ["run1", "run3", "run5"]


@pytest.mark.parametrize("args, message", [
    (["--a", "x"], "give either --a and --b"),
    (["--a", "x", "--runs-b", "y"], "give either --a and --b"),
    (["--runs-a", "nothing", "--runs-b", "y"], "no stored runs match --runs-a"),
    (["--a", "A=1", "--b", "x"], "no command in"),
    (["--a", "'unclosed", "--b", "x"], "cannot read the command"),
    (["--runs-a", "a", "--runs-b", "b", "--fail-if-slower", "soon"], "--fail-if-slower takes"),
    (["--runs-a", "a", "--runs-b", "b", "--b-standby", "x"], "not with stored runs"),
    (["--runs-a", "a", "--runs-b", "b", "--serving-check"], "not with stored runs"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    Store(tmp_path / "s.db").close()
    proc = coldscope("compare", "--store", str(tmp_path / "s.db"), *args)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_two_sides_leaves_out_running_runs_and_refuses_overlap():
    """``compare --runs-a/--runs-b`` choose their sides through the library
    (``store.selection.two_sides``): a run still running is on no side, and a run that both
    selectors match is refused rather than compared with itself."""
    from coldscope.store.selection import two_sides
    from coldscope.util.errors import ColdscopeError

    def run(i, label, status="ok"):
        return Run(id=f"r{i}", status=status, cache="cold", label=label,
                   started_at=f"2026-01-01T00:00:0{i}",
                   time_to_ready_s=10.0 + i if status == "ok" else None)

    runs = [run(0, "x"), run(1, "x", status="running"), run(2, "y"), run(3, "y")]
    a, b = two_sides(runs, "x", "y")
    assert ([r.id for r in a], [r.id for r in b]) == (["r0"], ["r2", "r3"])
    with pytest.raises(ColdscopeError, match="1 run\\(s\\) match both sides \\(first: r2\\)"):
        two_sides(runs, "x,r2", "y")
    with pytest.raises(ColdscopeError, match="--runs-b names no runs"):
        two_sides(runs, "x", " , ")
    with pytest.raises(ColdscopeError, match="no stored runs match --runs-a r1"):
        two_sides(runs, "r1", "y")


def test_b_through_a_standby_launcher(tmp_path):
    """``--b-standby NAME``: b's start-ups are forked by the launcher (its notes say so, its
    engine's parent is the launcher), a's are started as usual; the JSON names the launcher
    on b's side only."""
    from coldscope.launch import standby
    root = tmp_path / "sb"
    launcher = standby.start("fake", [sys.executable, FAKE], root=root)
    try:
        port = free_port()
        cmd = f"{sys.executable} {FAKE} --port {port} --delay 0.1"
        proc = coldscope("compare", "--store", str(tmp_path / "s.db"), "--cache-root",
                         str(tmp_path / "c"), "--repeat", "2", "--json", "--a", cmd, "--b", cmd,
                         "--b-standby", "fake", "--standby-dir", str(root))
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        jsonschema.validate(doc, schema_of("compare"))
        assert (doc["a"]["standby"], doc["b"]["standby"]) == (None, "fake")
        with Store(tmp_path / "s.db", create=False) as store:
            runs = {r.id: r for r in store.runs()}
            for side in ("a", "b"):
                for rid in doc[side]["runs"]:
                    through = any("launched through standby 'fake'" in n
                                  for n in runs[rid].notes)
                    assert through is (side == "b")
                    root_pid = store.evidence(rid)["launch"]["root_pid"]
                    parents = {e["pid"]: e["ppid"] for e in store.evidence(rid)["probe"]
                               if e["ev"] == "process"}
                    assert (parents[root_pid] == launcher.pid) is (side == "b")
    finally:
        standby.stop("fake", root=root)
