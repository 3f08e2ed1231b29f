"""The ``standby_launcher`` knob: vLLM's catalogue lists it, the tuner keeps it unavailable where
a launcher cannot run the command, the search treats it like every knob (on the fake tunable
engine), and a tune session runs its start-ups through a launcher of its own, on the fake
tunable engine's process, and leaves no launcher behind however it ends."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import psutil
import pytest

from coldscope.engines import resolve
from coldscope.engines.knobs import ALL_CACHES
from coldscope.store.db import Store
from coldscope.tuning import session as ts
from coldscope.tuning import tune as tt
from coldscope.tuning import verify as tv
from coldscope.tuning.search import Search, cache_key, warm_knob
from tests.conftest import as_vllm, process_gone
from tests.fake_tunable_engine import FakeTunable
from tests.serve_replay import free_port
from tests.unit.tuning.test_search import cpu_knobs

FAKE = str(Path(__file__).resolve().parents[2] / "fake_tunable_engine.py")
LAUNCHER_NAME = "standby_launcher"


def _by_name(launcher: bool = True):
    return {k.name: k for k in cpu_knobs(launcher=launcher)}


# -- the catalogue ------------------------------------------------------------------------------


def test_vllm_catalogue_lists_the_launcher_knob_and_it_leaves_the_command_alone():
    knob = _by_name()[LAUNCHER_NAME]
    assert knob.available and knob.reason is None
    assert knob.launcher and knob.stage == "bootstrap"
    assert "repeated_imports" in knob.addresses
    assert not knob.serving_tradeoff
    # no transform: the command line and environment come back as given
    argv, env = ["python", "-m", "vllm.entrypoints.openai.api_server", "--port", "1"], {"A": "1"}
    assert knob.apply(list(argv), dict(env)) == (argv, env)
    assert not knob.changes_command
    # the only launcher knob of the catalogue
    assert [k.name for k in cpu_knobs(launcher=True) if k.launcher] == [LAUNCHER_NAME]
    assert LAUNCHER_NAME not in {k.name for k in cpu_knobs()}


def test_the_launcher_shares_the_caches_of_the_same_command_and_is_not_the_warm_knob():
    by = _by_name()
    assert cache_key(["warm_caches", LAUNCHER_NAME], by) == "default"
    assert cache_key([LAUNCHER_NAME], by) == "default"
    assert cache_key(["warm_caches", LAUNCHER_NAME, "aot_compile_off"], by) == "aot_compile_off"
    # listed first, it is still not the "start from every cache" knob
    knobs = [by[LAUNCHER_NAME], *(k for k in by.values() if k.name != LAUNCHER_NAME)]
    warm = warm_knob(knobs)
    assert warm is not None and warm.name == "warm_caches" and warm.seed == (ALL_CACHES,)


def test_tuner_keeps_the_knob_only_where_a_launcher_can_run_the_command(tmp_path):
    knobs = cpu_knobs(launcher=True)
    # a module of this interpreter, read as vLLM (an adapter that plays StandbyLaunch)
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    fitted = {k.name: k for k in tt.fit_launcher_knobs(knobs, argv, resolve(argv))}
    assert fitted[LAUNCHER_NAME].available
    # vLLM's console script made a shell script (tests/conftest.py's as_vllm): not Python
    shell = [as_vllm(tmp_path), FAKE, "--port", "1"]
    assert resolve(shell).name == "vllm"
    fitted = {k.name: k for k in tt.fit_launcher_knobs(knobs, shell, resolve(shell))}
    assert not fitted[LAUNCHER_NAME].available
    assert "a standby launcher cannot run this command" in fitted[LAUNCHER_NAME].reason
    assert "not a Python program" in fitted[LAUNCHER_NAME].reason
    # a command no adapter with a launcher reads: the generic engine
    generic = [sys.executable, FAKE, "--port", "1"]
    fitted = {k.name: k for k in tt.fit_launcher_knobs(knobs, generic, resolve(generic))}
    assert not fitted[LAUNCHER_NAME].available
    assert "cannot start its engine through a standby launcher" in \
        fitted[LAUNCHER_NAME].reason
    # the other knobs are as the catalogue gave them
    before = {k.name: k for k in knobs}
    assert all(fitted[n] == before[n] for n in before if n != LAUNCHER_NAME)


# -- the search ---------------------------------------------------------------------------------


def test_search_keeps_the_launcher_and_combines_it_with_a_compile_knob():
    knobs = [k for k in cpu_knobs(launcher=True)
             if k.name in ("warm_caches", LAUNCHER_NAME, "aot_compile_off")]
    fake = FakeTunable()
    out = Search(knobs, fake, budget=10).run()
    assert out.best_knobs == ["warm_caches", LAUNCHER_NAME, "aot_compile_off"]
    # fake_tunable_engine's stage costs, summed by hand (stages bootstrap, model_loading,
    # torch_compile, kv_cache_profiling, server_ready, unattributed):
    # warm default 16 + 3 x 10 imports, 2, 18, 1, 1, 10 = 78 s; through the launcher the three
    # processes start in 0.5 s each: 17.5 + 2 + 18 + 1 + 1 + 10 = 49.5 s; with aot_compile_off
    # on its own seeded caches 17.5 + 2 + 5 + 1 + 1 + 10 = 36.5 s
    trials = {r.change: r for r in out.rows if r.role == "trial"}
    assert trials[LAUNCHER_NAME].time_to_ready_s == pytest.approx(49.5)
    assert trials[LAUNCHER_NAME].kept and trials[LAUNCHER_NAME].cache == "seeded"
    assert trials["aot_compile_off"].time_to_ready_s == pytest.approx(36.5)
    assert out.best_s == pytest.approx(36.5)
    assert out.vs_warm.value == pytest.approx(78.0 / 36.5)
    # the launcher needs no prime of its own (the default's caches serve it); the compile knob's
    # configuration is primed once
    primes = [r for r in fake.calls if r.role == "prime"]
    assert [p.knobs for p in primes] == [("warm_caches", LAUNCHER_NAME, "aot_compile_off")]
    assert any("standby launcher" in n and "does not reproduce it" in n for n in out.notes)


class _Launched(FakeTunable):
    """The fake, with a launcher that changes the greedy text or costs serving throughput."""

    def __init__(self, *, greedy: str | None = None, throughput: float = 1.0) -> None:
        super().__init__()
        self.greedy, self.factor = greedy, throughput

    def __call__(self, req):
        m = super().__call__(req)
        if LAUNCHER_NAME not in req.knobs:
            return m
        rounds = [r * self.factor for r in m.rounds]
        return m.evolve(greedy=self.greedy or m.greedy, rounds=rounds,
                        throughput=m.throughput * self.factor)


@pytest.mark.parametrize("fake, limit, why", [
    (_Launched(greedy="other words"), None, "greedy output differs"),
    (_Launched(throughput=0.7), 0.10, "is not shown within the allowed -10 %"),
])
def test_output_and_throughput_rules_hold_for_the_launcher(fake, limit, why):
    knobs = [k for k in cpu_knobs(launcher=True) if k.name in ("warm_caches", LAUNCHER_NAME)]
    out = Search(knobs, fake, budget=6, max_throughput_loss=limit).run()
    (trial,) = [r for r in out.rows if r.change == LAUNCHER_NAME and r.role == "trial"]
    assert trial.kept is False and why in trial.reason
    assert out.best_knobs == ["warm_caches"]
    assert not any("standby launcher" in n for n in out.notes)


# -- a session through its launcher, on the fake engine's process -------------------------------




def _session(tmp_path, model_dir, *, budget, command=None):
    """A session of the fake tunable engine's process (a Python script: one a launcher runs)
    whose catalogue is the warm default and the launcher knob."""
    port = free_port()
    command = command or [sys.executable, FAKE]
    command = [*command, "--port", str(port), "--model", str(model_dir), "--scale", "0.03",
               "--served-model-name", "vllm-fake"]
    knobs = [k for k in cpu_knobs(launcher=True) if k.name in ("warm_caches", LAUNCHER_NAME)]
    spec = ts.SessionSpec(id=f"tune-sb-{uuid.uuid4().hex[:8]}", created_at="2026-01-01T00:00:00Z",
                          command=command, budget=budget, timeout=60, knobs=knobs)
    store_path = tmp_path / "store.db"
    directory = ts.sessions_dir(store_path) / spec.id
    ts.save(spec, directory)
    return tt.TuneSession(spec, directory), Store(store_path), port


def _listener(port: int) -> psutil.Process:
    """The process listening on ``port`` (the engine's server), found by the kernel's sockets."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return psutil.Process(c.pid)
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


def _is_launcher(proc: psutil.Process, session_id: str) -> bool:
    """A standby launcher's process (the launcher script, run with the session's name)."""
    with contextlib.suppress(psutil.Error):
        cmd = proc.cmdline()
        return any(Path(a).name == "standby_server.py" for a in cmd) and session_id in cmd
    return False


def _launchers_left(session_id: str) -> list[psutil.Process]:
    left = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE and _is_launcher(proc, session_id):
                left.append(proc)
    return left




def _quick_verify(base: str, served: str, cpu) -> dict:
    """A serving check that answers at once, the same for every start-up."""
    return {"greedy": "the same words", "throughput": 100.0,
            "rounds_tokens_per_s": [100.0] * 6}


def test_session_runs_the_knobs_start_ups_through_its_launcher_and_stops_it(
        tmp_path, model_dir, monkeypatch):
    session, store, port = _session(tmp_path, model_dir, budget=4)
    parents = []  # per start-up, in order: the engine server's parent process
    real_verify = tv.verify

    def watching(base, served, cpu):
        assert urllib.parse.urlsplit(base).port == port
        parent = _listener(port).parent()
        parents.append((parent.pid, _is_launcher(parent, session.spec.id)))
        return real_verify(base, served, cpu)

    monkeypatch.setattr(tv, "verify", watching)
    result = tt.run_session(session, store)
    runs = sorted(store.runs(status=None), key=lambda r: r.campaign.trial)
    assert [r.status for r in runs] == ["ok"] * 4
    assert len(parents) == 4
    launched = [LAUNCHER_NAME in r.campaign.flags.split("+") for r in runs]
    # cold, warm, then the launcher's trial (the search's only candidate), then the confirmation
    assert launched[:3] == [False, False, True]
    for run, through, (parent_pid, parent_is_launcher) in zip(runs, launched, parents,
                                                               strict=True):
        noted = any("launched through standby" in n for n in run.notes)
        assert noted == through, run.notes
        assert parent_is_launcher == through
        assert (parent_pid == os.getpid()) == (not through)  # else the runner started it
    # one launcher for the session: every launched engine had the same parent
    assert len({pid for (pid, is_l), t in zip(parents, launched, strict=True) if t}) == 1
    assert sum("started the session's standby launcher" in n for r in runs for n in r.notes) == 1
    # the session is over: no launcher of it runs, and its state is gone
    launcher_pid = next(pid for (pid, _), t in zip(parents, launched, strict=True) if t)
    assert process_gone(launcher_pid)
    assert _launchers_left(session.spec.id) == []
    # its log stays with the session, and nothing of it elsewhere
    assert (session.directory / "standby" / f"{session.spec.id}.log").exists()
    root = ts.launcher_dir(session.spec, session.directory)
    assert not (root / f"{session.spec.id}.json").exists()
    assert not (root / f"{session.spec.id}.sock").exists()
    # the JSON and the table show the knob like the others
    doc = result.to_json()
    (row,) = [t for t in doc["trials"] if t["change"] == LAUNCHER_NAME and t["role"] == "trial"]
    assert row["ok"] and row["knobs"] == ["warm_caches", LAUNCHER_NAME]
    # the winner says it needs a launcher when it does (what `plan --tuned` reads)
    assert doc["best"]["standby_launcher"] is (LAUNCHER_NAME in doc["best"]["knobs"])
    from rich.console import Console

    from coldscope.render.tune import tune_tables
    con = Console(record=True, width=200)
    con.print(tune_tables(result))
    assert LAUNCHER_NAME in con.export_text()


def test_interrupted_session_leaves_no_launcher_and_resumes_through_a_new_one(
        tmp_path, model_dir, monkeypatch):
    session, store, port = _session(tmp_path, model_dir, budget=4)
    seen = []

    def ctrl_c_in_the_launchers_engine(base, served, cpu):
        parent = _listener(port).parent()
        seen.append(parent.pid)
        if _is_launcher(parent, session.spec.id) and len(seen) == 3:
            raise KeyboardInterrupt  # Ctrl-C while the launched engine is up
        return _quick_verify(base, served, cpu)

    monkeypatch.setattr(tv, "verify", ctrl_c_in_the_launchers_engine)
    with pytest.raises(KeyboardInterrupt):
        tt.run_session(session, store)
    assert len(seen) == 3
    assert process_gone(seen[2])
    assert _launchers_left(session.spec.id) == []
    # resumed: nothing was left to reap, and the launcher's start-up runs again through a new
    # launcher, which the end of the session stops
    resumed = tt.resume_session(store.path, session.spec.id)
    assert resumed.reaped_launcher is None
    tt.run_session(resumed, store)
    assert len(seen) == 5  # start-ups 3 and 4: the first two were replayed
    assert seen[3] != seen[2] and process_gone(seen[3])
    assert _launchers_left(session.spec.id) == []


def test_the_launcher_lives_in_the_session_directory_unless_its_socket_path_is_too_long(
        tmp_path):
    spec = ts.SessionSpec(id="tune-20260101T000000-abcd", created_at="2026-01-01T00:00:00Z",
                          command=["python"], budget=2, knobs=[])
    assert ts.launcher_name(spec) == spec.id
    short = Path("/tmp") / "t" / spec.id
    assert ts.launcher_dir(spec, short) == short / "standby"
    # a socket path over 100 bytes (sun_path holds 108) goes under the temporary directory
    deep = tmp_path / ("d" * 80) / spec.id
    elsewhere = ts.launcher_dir(spec, deep)
    assert not elsewhere.is_relative_to(deep)
    assert len(str(elsewhere / f"{spec.id}.sock")) <= 100
    assert ts.launcher_dir(spec, deep) == elsewhere  # found again on resume


def test_a_killed_sessions_launcher_is_reaped_on_resume(tmp_path, model_dir):
    session, _store, _port = _session(tmp_path, model_dir, budget=4)
    # as a tune killed with -9 leaves it: the session's launcher started and never stopped
    launcher = ts.SessionLauncher(session.spec, session.directory)
    assert launcher.ensure() is None
    (left,) = _launchers_left(session.spec.id)
    resumed = tt.resume_session(tmp_path / "store.db", session.spec.id)
    assert resumed.reaped_launcher == left.pid
    assert process_gone(left.pid)
    assert _launchers_left(session.spec.id) == []


def test_a_launcher_that_cannot_start_fails_the_trial_not_the_session(
        tmp_path, model_dir, monkeypatch):
    # `python -c CODE SCRIPT ...` runs the fake engine, but is no command a launcher runs
    runner = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
    session, store, _port = _session(tmp_path, model_dir, budget=3,
                                     command=[sys.executable, "-c", runner, FAKE])
    monkeypatch.setattr(tv, "verify", _quick_verify)
    result = tt.run_session(session, store)
    (row,) = [t for t in result.trials if t.change == LAUNCHER_NAME]
    assert not row.ok and row.kept is False and row.run_id is None
    assert "standby launcher did not start" in row.reason
    assert "python -m MODULE" in row.reason
    assert result.best.knobs == ["warm_caches"]
    assert _launchers_left(session.spec.id) == []
