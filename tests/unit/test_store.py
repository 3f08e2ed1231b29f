import csv
import multiprocessing
import os
import sqlite3

import pytest

from coldscope.errors import ColdscopeError
from coldscope.stages import BUCKETS
from coldscope.store import Store


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
    s.add_run(record("r-01"), {"log": [[0.1, "hello"]]})
    s.add_run(record("r-02", status="failed"))
    assert [r["id"] for r in s.runs()] == ["r-01"]
    assert [r["id"] for r in s.runs(status=None)] == ["r-01", "r-02"]
    assert s.run("r-01")["stages"]["model_loading"] == 5.0
    assert s.run("r-02")["reason"] == "boom"
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
    s.add_run(record("r-01"))
    with pytest.raises(sqlite3.IntegrityError):
        s.add_run(record("r-01", ttr=99))
    assert s.count() == 1 and s.run("r-01")["time_to_ready_s"] == 10.0


def _write_then_die(path: str) -> None:
    s = Store(path)
    s.add_run(record("r-01"))
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
    assert [r["id"] for r in s.runs(status=None)] == ["r-01"]
    s.add_run(record("r-02"))  # and the store still takes writes
    assert s.count() == 2


def test_export_csv_and_parquet(tmp_path):
    s = Store(tmp_path / "s.db")
    s.add_run(record("r-01"))
    s.add_run(record("r-02", ttr=12.5))
    assert s.export(tmp_path / "runs.csv") == 2
    rows = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert [float(r["time_to_ready_s"]) for r in rows] == [10.0, 12.5]
    assert rows[0]["model_loading/weights"] == "4.5"
    pq = pytest.importorskip("pyarrow.parquet")
    s.export(tmp_path / "runs.parquet")
    table = pq.read_table(tmp_path / "runs.parquet")
    assert table.column("model_loading").to_pylist() == [5.0, 5.0]
    with pytest.raises(ColdscopeError, match="unknown export format"):
        s.export(tmp_path / "runs.xlsx")


def test_not_a_store(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(ColdscopeError, match="not a coldscope store"):
        Store(bad)
    with pytest.raises(ColdscopeError, match="no store"):
        Store(tmp_path / "missing.db", create=False)
