"""The profiler's commands through the real CLI entry point (subprocesses, fake engine)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coldscope.capture.otlp import Receiver
from coldscope.store.db import Store
from tests.conftest import run_processes
from tests.serve_replay import free_port

CLI = str(Path(sys.executable).parent / "coldscope")
FAKE = str(Path(__file__).resolve().parents[2] / "fake_engine.py")


def cli(*args, check=True, **kw):
    proc = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, **kw)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def fake_profile(tmp_path, *extra, mode="ok", port=None):
    port = port or free_port()
    return [CLI, "profile", "--store", str(tmp_path / "s.db"), "--cache-root",
            str(tmp_path / "c"), "--no-spans", *extra, "--", sys.executable, FAKE, "--mode",
            mode, "--port", str(port), "--model", "fake"]


def test_profile_json_contract_then_runs_show_trace_export(tmp_path):
    out = subprocess.run(fake_profile(tmp_path, "--json", "--repeat", "2"), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)["runs"]
    assert len(runs) == 2
    for r in runs:
        assert {"id", "status", "reason", "cache", "time_to_ready_s", "first_token_s", "stages",
                "substeps", "sources", "environment"} <= set(r)
        assert r["status"] == "ok" and r["cache"] == "cold"
    listed = json.loads(cli("runs", "--json", "--store", str(tmp_path / "s.db")).stdout)
    assert [r["id"] for r in listed["runs"]] == [r["id"] for r in runs]
    shown = json.loads(cli("show", runs[0]["id"], "--json", "--store",
                           str(tmp_path / "s.db")).stdout)
    assert shown["stages"] == runs[0]["stages"]
    assert "time to ready" in cli("show", runs[0]["id"], "--store", str(tmp_path / "s.db")).stdout

    with Receiver() as rx:
        cli("trace", runs[0]["id"], "-o", str(tmp_path / "t.json"), "--store",
            str(tmp_path / "s.db"), "--otlp-export", rx.endpoint)
        received = rx.spans()
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in events)
    assert any(s.name == "coldscope.startup" for s in received)
    cli("export", "-o", str(tmp_path / "runs.csv"), "--store", str(tmp_path / "s.db"))
    assert len((tmp_path / "runs.csv").read_text().splitlines()) == 3


def test_all_runs_failed_exits_non_zero_and_stores_them(tmp_path):
    out = subprocess.run(fake_profile(tmp_path, "--quiet", mode="exit"), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error: all 1 run(s) failed")
    assert "Traceback" not in out.stderr
    [run] = Store(tmp_path / "s.db").runs(status="failed")
    assert "exited with code 3" in run.reason


def _as_a_terminal_starts_it() -> None:
    """In the child before exec: SIGINT and SIGHUP as a terminal's foreground job has them.
    A test runner started in the background by a non-interactive shell (``make test &``)
    ignores SIGINT, and its children inherit that: coldscope then ignores Ctrl-C as a
    background job should (the test below of an inherited SIG_IGN), which is not what this
    test presses Ctrl-C to see."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _interrupted(tmp_path, signals, *, preexec):
    """Start ``profile --repeat 3`` of the hanging fake engine and, once the engine is up,
    send each of ``signals`` (a signal, or a pause in seconds: ``signal.SIGHUP, 1.0,
    signal.SIGTERM``); return (returncode, stderr, engine processes left, whether the profile
    was still running before the last signal). The profile is killed rather than left running
    if it does not end within 60 s (a leftover profile would go on to its next start-up and be
    seen by the tests after this one)."""
    proc = subprocess.Popen(fake_profile(tmp_path, "--quiet", "--repeat", "3", mode="hang"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not run_processes():
            time.sleep(0.1)
        assert run_processes(), "the engine never started"
        time.sleep(0.5)
        running = True
        for step in signals:
            if isinstance(step, float):
                time.sleep(step)
                continue
            running = proc.poll() is None and bool(run_processes())
            proc.send_signal(step)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            return None, "", run_processes(), running
        return proc.returncode, err, run_processes(), running
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_sigterm_and_sighup_stop_the_engine_and_store_the_run(tmp_path, sig):
    code, err, left, _ = _interrupted(tmp_path, [sig], preexec=_as_a_terminal_starts_it)
    assert code == 130, f"profile did not stop on {signal.Signals(sig).name} within 60 s"
    assert "Traceback" not in err
    assert not left
    runs = Store(tmp_path / "s.db").runs(status=None)
    assert [(r.status, r.reason) for r in runs] == [("failed", "interrupted")]
    assert not list((tmp_path / "c").glob("cold/*"))  # the run's caches went with it


def _ignoring_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does before it execs


def test_a_sighup_ignored_from_the_start_stays_ignored_and_sigterm_still_stops(tmp_path):
    """``nohup coldscope profile``: a closed terminal (SIGHUP) does not stop the run; SIGTERM
    still does, as interrupted. The profile must still be running a second after SIGHUP."""
    code, err, left, running = _interrupted(tmp_path, [signal.SIGHUP, 1.0, signal.SIGTERM],
                                            preexec=_ignoring_sighup)
    assert running, "SIGHUP stopped a nohup'ed profile"
    assert code == 130 and "Traceback" not in err
    assert not left
    runs = Store(tmp_path / "s.db").runs(status=None)
    assert [(r.status, r.reason) for r in runs] == [("failed", "interrupted")]


@pytest.mark.parametrize("args, message", [
    (["show", "nope"], "no store at"),
    (["parse", "/nonexistent.log"], "cannot read"),
    (["profile", "--repeat", "0", "--", "x"], "Invalid value"),
    (["export", "-o", "x.xlsx"], "no store at"),
    (["profile", "--ready-pattern", "([", "--", "x"], "not a valid regular expression"),
    (["profile", "--health-url", "notaurl", "--", "x"], "must look like http://"),
    (["profile", "--health-url", "http://127.0.0.1:99999/health", "--", "x"], "out of range"),
])
def test_bad_input_is_one_line_error(tmp_path, args, message):
    out = cli(*args, check=False, cwd=tmp_path, env={**os.environ, "COLDSCOPE_STORE":
                                                      str(tmp_path / "none.db")})
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert message in lines[-1]


def test_parse_reproduces_the_paper_parser_on_a_real_log(shared):
    log = shared / "fixtures/vllm-logs/v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log"
    r = json.loads(cli("parse", str(log), "--json", "--vs-paper").stdout)
    assert r["paper_metrics"]["load_weights"] == pytest.approx(1.69, abs=0.05)
    assert r["stages"]["cuda_graph_capture"] == pytest.approx(1.88, abs=0.05)
    # first line to model loading on the log's clock, less the lines before the harness
    assert r["stages"]["bootstrap"] == pytest.approx(7.222, abs=0.01)
    assert r["sources"]["bootstrap"] == "log-clock"


def test_sigkilled_profile_run_is_recovered_as_lost_by_the_next_profile(tmp_path):
    """SIGKILL cannot be handled: the run was recorded as running before the engine started;
    the launcher dies with coldscope (parent-death signal); the next profile stops what
    escaped, removes the run's temporary directories and marks it lost."""
    db = tmp_path / "s.db"
    cmd = fake_profile(tmp_path, "--quiet", mode="stubborn")
    cmd += ["--delay", "60"]  # the engine's escaped child is up long before it is ready
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline and len(run_processes()) < 2:
        time.sleep(0.1)
    assert len(run_processes()) >= 2, "the engine and its escaped child never started"
    [running] = Store(db, create=False).runs(status="running")
    tmp_dir = Path(running.launch.tmp_dir)
    assert tmp_dir.exists()
    proc.kill()
    proc.wait(timeout=10)
    time.sleep(0.5)
    assert run_processes(), "the escaped child should outlive a SIGKILLed coldscope"
    out = subprocess.run(fake_profile(tmp_path, "--quiet"), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert not run_processes()
    assert not tmp_dir.exists()
    lost = Store(db, create=False).run(running.id)
    assert lost.status == "lost" and "leftover engine process" in lost.reason
    assert [r.status for r in Store(db, create=False).runs(status=None)] == ["lost", "ok"]


def test_profile_says_when_it_binds_the_engine_to_loopback(tmp_path):
    vllm = tmp_path / "bin" / "vllm"  # `vllm serve ...` without --host, run by the fake engine
    vllm.parent.mkdir()
    vllm.symlink_to(sys.executable)
    out = cli("profile", "--quiet", "--no-spans", "--json", "--store", str(tmp_path / "s.db"),
              "--cache-root", str(tmp_path / "c"), "--", str(vllm), FAKE, "serve", "--port",
              str(free_port()))
    assert "bound to 127.0.0.1" in out.stderr
    [run] = json.loads(out.stdout)["runs"]
    assert run["engine"]["argv"][-2:] == ["--host", "127.0.0.1"]
