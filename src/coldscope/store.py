"""The run store: one SQLite file, all SQL in this module.

Each run is written in one transaction (the run row, its stage and sub-step rows), so a process
killed half-way leaves the store as it was before that run: finished runs are never lost and no
run is half there. WAL journaling lets readers (``runs``, ``report``) work while a campaign
writes. The full run record (the JSON contract of ``coldscope show --json``) is kept as JSON in
``runs.record``; stages and sub-steps are also normalised into tables for queries.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from coldscope.errors import ColdscopeError
from coldscope.stages import BUCKETS

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    reason TEXT,
    cache TEXT,
    label TEXT,
    config_key TEXT,
    model_path TEXT,
    engine_version TEXT,
    time_to_ready_s REAL,
    first_token_s REAL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_config ON runs(config_key);
CREATE TABLE IF NOT EXISTS stages (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    stage TEXT NOT NULL,
    seconds REAL,
    source TEXT,
    PRIMARY KEY (run_id, stage)
);
CREATE TABLE IF NOT EXISTS evidence (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, kind)
);
CREATE TABLE IF NOT EXISTS substeps (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (run_id, name)
);
"""


def default_store_path() -> Path:
    """``$COLDSCOPE_STORE``, else ``./.coldscope/store.db``."""
    env = os.environ.get("COLDSCOPE_STORE")
    return Path(env) if env else Path(".coldscope") / "store.db"


class Store:
    """The embedded run store. Cheap to open; safe to use from one process at a time per
    connection, and from several processes at once (SQLite locking, WAL)."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        if not create and not self.path.exists():
            raise ColdscopeError(f"no store at {self.path} (run `coldscope profile` first)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise ColdscopeError(f"{self.path} is not a coldscope store ({exc})") from None

    def _migrate(self) -> None:
        self._conn.executescript(_SCHEMA)
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
            )
        elif int(row[0]) > SCHEMA_VERSION:
            raise ColdscopeError(
                f"{self.path} was written by a newer coldscope (schema {row[0]}); upgrade coldscope"
            )

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        else:
            cur.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def add_run(self, record: dict, evidence: dict[str, object] | None = None) -> None:
        """Store one finished run (ok or failed) atomically, with its raw evidence (log lines
        with arrival times, probe events, received spans) so timelines can be rebuilt later."""
        stages = record.get("stages") or {}
        sources = record.get("sources") or {}
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO runs (id, schema_version, started_at, status, reason, cache, label,"
                " config_key, model_path, engine_version, time_to_ready_s, first_token_s, record)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record["id"], SCHEMA_VERSION, record["started_at"], record["status"],
                    record.get("reason"), record.get("cache"), record.get("label"),
                    record.get("config_key"), (record.get("model") or {}).get("path"),
                    (record.get("engine") or {}).get("version"), record.get("time_to_ready_s"),
                    record.get("first_token_s"), json.dumps(record),
                ),
            )
            cur.executemany(
                "INSERT INTO stages (run_id, stage, seconds, source) VALUES (?,?,?,?)",
                [(record["id"], b, stages.get(b), sources.get(b)) for b in BUCKETS],
            )
            cur.executemany(
                "INSERT INTO substeps (run_id, name, seconds) VALUES (?,?,?)",
                [(record["id"], k, v) for k, v in (record.get("substeps") or {}).items()],
            )
            cur.executemany(
                "INSERT INTO evidence (run_id, kind, data) VALUES (?,?,?)",
                [(record["id"], k, json.dumps(v)) for k, v in (evidence or {}).items()],
            )

    def delete_run(self, run_id: str) -> None:
        with self._tx() as cur:
            cur.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # -- reading -----------------------------------------------------------------------------

    def runs(
        self,
        status: str | None = "ok",
        *,
        cache: str | None = None,
        label: str | None = None,
        config_key: str | None = None,
        model_path: str | None = None,
    ) -> list[dict]:
        """Run records, oldest first, filtered by the given columns (None = any)."""
        where, args = [], []
        for col, val in (("status", status), ("cache", cache), ("label", label),
                         ("config_key", config_key), ("model_path", model_path)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        sql = "SELECT record FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at, rowid"
        return [json.loads(r[0]) for r in self._conn.execute(sql, args)]

    def run(self, run_id: str) -> dict:
        """One run by id, or by a unique id prefix."""
        rows = self._conn.execute(
            "SELECT record FROM runs WHERE id = ? OR id LIKE ? ORDER BY id", (run_id, run_id + "%")
        ).fetchall()
        exact = [r for r in rows if json.loads(r[0])["id"] == run_id]
        if exact:
            return json.loads(exact[0][0])
        if not rows:
            raise ColdscopeError(f"no run {run_id!r} in {self.path}")
        if len(rows) > 1:
            raise ColdscopeError(f"run id prefix {run_id!r} is ambiguous ({len(rows)} runs)")
        return json.loads(rows[0][0])

    def evidence(self, run_id: str) -> dict[str, object]:
        """The raw evidence stored with a run, by kind (``log``, ``probe``, ``otel``)."""
        rows = self._conn.execute(
            "SELECT kind, data FROM evidence WHERE run_id = ?", (run_id,)
        ).fetchall()
        return {k: json.loads(d) for k, d in rows}

    def count(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    # -- export ------------------------------------------------------------------------------

    def export(self, out: Path, fmt: str | None = None, runs: Iterable[dict] | None = None) -> int:
        """Write one row per run (stage columns in seconds) as CSV or Parquet; returns rows."""
        out = Path(out)
        fmt = fmt or out.suffix.lstrip(".").lower()
        rows = [flat_row(r) for r in (runs if runs is not None else self.runs(status=None))]
        if fmt == "csv":
            columns = _columns(rows)
            with out.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)
        elif fmt == "parquet":
            try:
                import pyarrow as pa
                import pyarrow.parquet as pq
            except ImportError:
                raise ColdscopeError("Parquet export needs pyarrow: pip install pyarrow") from None
            columns = _columns(rows)
            table = pa.table({c: [r.get(c) for r in rows] for c in columns})
            pq.write_table(table, out)
        else:
            raise ColdscopeError(f"unknown export format {fmt!r}; use csv or parquet")
        return len(rows)


def flat_row(record: dict) -> dict:
    """A run as one flat row: identity, totals, one column per bucket and sub-step."""
    env = record.get("environment") or {}
    row = {
        "id": record["id"],
        "started_at": record.get("started_at"),
        "status": record.get("status"),
        "reason": record.get("reason"),
        "cache": record.get("cache"),
        "label": record.get("label"),
        "model": (record.get("model") or {}).get("path"),
        "engine_version": (record.get("engine") or {}).get("version"),
        "cpu_model": env.get("cpu_model"),
        "time_to_ready_s": record.get("time_to_ready_s"),
        "first_token_s": record.get("first_token_s"),
    }
    for b in BUCKETS:
        row[b] = (record.get("stages") or {}).get(b)
    for k, v in sorted((record.get("substeps") or {}).items()):
        row[k] = v
    return row


def _columns(rows: list[dict]) -> list[str]:
    columns: list[str] = []
    for r in rows:
        for k in r:
            if k not in columns:
                columns.append(k)
    return columns or ["id"]
