import hashlib
import multiprocessing
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError


def record(run_id: str, status="ok", ttr=10.0) -> dict:
    stages = dict.fromkeys(BUCKETS, None)
    stages.update(bootstrap=4.0, model_loading=5.0, unattributed=1.0)
    return {
        "id": run_id, "status": status, "reason": None if status == "ok" else "boom",
        "cache": "cold", "label": "t", "started_at": f"2026-11-29T10:00:{run_id[-2:]}",
        "time_to_ready_s": ttr, "first_token_s": ttr + 0.1, "stages": stages,
        "substeps": {"model_loading/weights": 4.5}, "sources": {"bootstrap": "probe"},
        "model": {"path": "/m/tiny", "name": "tiny"}, "engine": {"version": "0.32.0"},
        "environment": {"cpu_model": "x"},
    }


def test_round_trip_and_filters(tmp_path):
    s = Store(tmp_path / "s.db")
    s.add_run(Run.from_json(record("r-01")), {"log": [[0.1, "hello"]]})
    s.add_run(Run.from_json(record("r-02", status="failed")))
    assert [r.id for r in s.runs()] == ["r-01"]
    assert [r.id for r in s.runs(status=None)] == ["r-01", "r-02"]
    assert s.run("r-01").stages["model_loading"] == 5.0
    assert s.run("r-02").reason == "boom"
    assert s.evidence("r-01") == {"log": [[0.1, "hello"]]}
    with pytest.raises(ColdscopeError, match="ambiguous"):
        s.run("r-0")
    with pytest.raises(ColdscopeError, match="no run"):
        s.run("zzz")
    rows = sqlite3.connect(tmp_path / "s.db").execute(
        "SELECT stage, seconds FROM stages WHERE run_id='r-01' AND seconds IS NOT NULL"
    ).fetchall()
    assert dict(rows) == {"bootstrap": 4.0, "model_loading": 5.0, "unattributed": 1.0}


def test_duplicate_run_leaves_store_unchanged(tmp_path):
    s = Store(tmp_path / "s.db")
    s.add_run(Run.from_json(record("r-01")))
    with pytest.raises(sqlite3.IntegrityError):
        s.add_run(Run.from_json(record("r-01", ttr=99)))
    assert s.count() == 1 and s.run("r-01").time_to_ready_s == 10.0


def _write_then_die(path: str) -> None:
    s = Store(path)
    s.add_run(Run.from_json(record("r-01")))
    cur = s._conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    cur.execute("INSERT INTO runs (id, schema_version, started_at, status, record) "
                "VALUES ('half', 1, 'x', 'ok', '{}')")
    os._exit(9)  # killed half-way through the second run's transaction


def test_process_killed_mid_write_loses_no_finished_run(tmp_path):
    path = str(tmp_path / "s.db")
    p = multiprocessing.get_context("spawn").Process(target=_write_then_die, args=(path,))
    p.start()
    p.join(60)
    assert p.exitcode == 9
    s = Store(path)
    assert [r.id for r in s.runs(status=None)] == ["r-01"]
    s.add_run(Run.from_json(record("r-02")))  # and the store still takes writes
    assert s.count() == 2


def test_not_a_store(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(ColdscopeError, match="not a coldscope store"):
        Store(bad)
    with pytest.raises(ColdscopeError, match="no store"):
        Store(tmp_path / "missing.db", create=False)


# -- schema 1 stores (coldscope 0.1) and opening checks -----------------------------------------

V1 = Path(__file__).resolve().parents[2] / "data" / "store-v1.db"
"""A store written by coldscope 0.1 (git 0b345fb): one ok and one failed fake-engine run."""


def _v1_copy(tmp_path) -> Path:
    path = tmp_path / "v1.db"
    shutil.copy(V1, path)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_v1_store_reads_read_only_without_a_write(tmp_path):
    path = _v1_copy(tmp_path)
    before = _digest(path)
    s = Store(path, create=False)
    runs = s.runs(status=None)
    assert [r.status for r in runs] == ["ok", "failed"]
    ok = runs[0]
    assert isinstance(ok, Run) and ok.schema_version == 2 and ok.origin == "profile"
    assert ok.stages["bootstrap"] == pytest.approx(ok.time_to_ready_s)
    assert ok.timeline.total() == pytest.approx(ok.time_to_ready_s)
    assert ok.environment.package("vllm") == "0.32.0"
    assert "exited with code 3" in runs[1].reason
    s.close()
    assert _digest(path) == before
    assert sqlite3.connect(path).execute(
        "SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)


def test_v1_store_migrates_on_first_write_and_keeps_every_run(tmp_path):
    path = _v1_copy(tmp_path)
    old = {r.id: r.to_json() for r in Store(path, create=False).runs(status=None)}
    s = Store(path)
    assert s.schema == 2
    assert {r.id: r.to_json() for r in s.runs(status=None)} == old
    # evidence and normalised rows survive the table rebuild
    ok_id = next(i for i, r in old.items() if r["status"] == "ok")
    assert {"log", "otel", "launch"} <= set(s.evidence(ok_id))
    assert sqlite3.connect(path).execute(
        "SELECT COUNT(*) FROM stages WHERE run_id = ?", (ok_id,)).fetchone()[0] == len(BUCKETS)
    # the new statuses are accepted now, and the timeline rebuilds from schema 1 evidence
    s.add_run(Run.from_json(record("r-09") | {"status": "lost", "reason": "coldscope was killed"}))
    assert s.run("r-09").status == "lost"
    tl = s.timeline(ok_id)
    assert tl.time_to_ready == pytest.approx(old[ok_id]["time_to_ready_s"])
    assert sum(v for v in tl.stages.values() if v is not None) == pytest.approx(tl.time_to_ready)


def test_timeline_is_rebuilt_from_stored_evidence_including_probe_events(tmp_path):
    s = Store(tmp_path / "s.db")
    launch = {"mono": 1000.0, "wall": 1.7e9, "root_pid": 42}
    probe = [
        {"ev": "process", "name": "process", "pid": 42, "ppid": 1, "mono": 1000.05,
         "argv": ["x"], "start_mono": None},
        {"ev": "begin", "name": "model_loading", "pid": 42, "mono": 1002.0},
        {"ev": "end", "name": "model_loading", "pid": 42, "mono": 1005.0},
    ]
    run = Run(id="r-probe", status="ok", started_at="2026-11-29T10:00:00", time_to_ready_s=6.0,
              engine={"argv": ["python", "serve.py"]})
    s.add_run(run, {"launch": launch, "probe": probe, "log": [], "otel": []})
    tl = s.timeline("r-probe")
    assert tl.stages["model_loading"] == pytest.approx(3.0)
    assert tl.stages["bootstrap"] == pytest.approx(2.0)  # launch to first model loading
    assert tl.sources["model_loading"] == "probe"
    assert tl.total() == pytest.approx(6.0)


def test_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "foreign.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (x TEXT)")
    conn.commit()
    conn.close()
    before = _digest(path)
    for create in (True, False):
        with pytest.raises(ColdscopeError, match="not a coldscope store"):
            Store(path, create=create)
    assert _digest(path) == before
    assert not (tmp_path / "foreign.db-wal").exists()
    assert [r[0] for r in sqlite3.connect(path).execute(
        "SELECT name FROM sqlite_master")] == ["notes"]


def test_newer_schema_is_refused_not_altered(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.execute("DROP TABLE substeps")
    conn.commit()
    conn.close()
    before = _digest(path)
    for create in (True, False):
        with pytest.raises(ColdscopeError, match="newer coldscope"):
            Store(path, create=create)
    assert _digest(path) == before
    assert not list(tmp_path.glob("s.db-*"))  # no WAL sidecars left beside it either
    assert "substeps" not in {r[0] for r in sqlite3.connect(path).execute(
        "SELECT name FROM sqlite_master")}


def test_read_only_open_of_an_empty_file_creates_nothing(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(ColdscopeError, match="not a coldscope store"):
        Store(path, create=False)
    assert path.stat().st_size == 0


def test_one_corrupt_record_is_skipped_with_a_message(tmp_path, capsys):
    s = Store(tmp_path / "s.db")
    s.add_run(Run.from_json(record("r-01")))
    s.add_run(Run.from_json(record("r-02")))
    s._conn.execute("UPDATE runs SET record = '{not json' WHERE id = 'r-01'")
    assert [r.id for r in s.runs()] == ["r-02"]
    assert s.skipped == ["r-01"]
    assert "run r-01" in capsys.readouterr().err
    with pytest.raises(ColdscopeError, match="unreadable"):
        s.run("r-01")


def test_run_id_prefix_is_literal_not_a_like_pattern(tmp_path):
    s = Store(tmp_path / "s.db")
    s.add_run(Run.from_json(record("ab-01")))
    with pytest.raises(ColdscopeError, match="no run"):
        s.run("a_")
    assert s.run("ab").id == "ab-01"


def _open_and_add(path: str, run_id: str, barrier) -> None:
    barrier.wait()
    s = Store(path)
    s.add_run(Run.from_json(record(run_id)))


@pytest.mark.parametrize("start", ["new", "v1"])
def test_stores_opened_by_several_processes_at_once_are_made_once(tmp_path, start):
    path = tmp_path / "s.db"
    if start == "v1":
        shutil.copy(V1, path)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_open_and_add, args=(str(path), f"r-0{i}", barrier))
             for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    s = Store(path)
    assert sorted(r.id for r in s.runs(status="ok") if r.id.startswith("r-0")) == [
        "r-00", "r-01", "r-02", "r-03"]
    assert s.count() == 4 + (2 if start == "v1" else 0)
