"""The run store: one SQLite file, all SQL in this module.

Each run is written in one transaction (the run row, its stage and sub-step rows, its raw
evidence), so a process killed half-way leaves the store as it was before that run: finished
runs are never lost and no run is half there. WAL journaling lets readers (``runs``,
``report``) work while a campaign writes. The full ``Run`` (``Run.to_json()``) is kept as JSON
in ``runs.record``; stages and sub-steps are also normalised into tables for queries, and the
raw evidence (log lines with arrival times, probe events, received spans, launch clocks) is
kept so that ``Store.timeline`` can rebuild a run's timeline from it.

Opening checks before it touches anything: a store, or one of the ``-wal``, ``-journal`` and
``-shm`` files SQLite keeps beside it, that exists and is not a regular file (a FIFO would hang
the open, a device or a ``/proc`` file would feed SQLite garbage) is refused without being
opened (``stat`` only; the companions may not be symbolic links either); a file that is not
SQLite, an SQLite file that is not a coldscope store, or a store written by a newer coldscope
is refused with a one-line error and left as it was. An SQLite error after opening (a disk
I/O error, a lock held past the timeout) is a one-line error too. Read-only opens
(``create=False``) never write, so they never create tables or migrate; they read schema 1
stores (coldscope 0.1) as they are. Writable opens migrate a schema 1 store to schema 2 in one
transaction.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from coldscope.core.records import RUN_SCHEMA_VERSION, Run
from coldscope.core.stages import BUCKETS
from coldscope.core.timeline import Timeline
from coldscope.util.errors import ColdscopeError, one_line

SCHEMA_VERSION = RUN_SCHEMA_VERSION

#: How long an open or a write waits for another process's lock on the store.
BUSY_TIMEOUT_S = 30.0
#: Candidates an ambiguous id prefix's error names.
AMBIGUOUS_SHOWN = 8
#: The files SQLite keeps beside a store (write-ahead log, rollback journal, shared memory).
COMPANIONS = ("-wal", "-journal", "-shm")
#: What ``Store.save_startup`` did: stored the run, gave the run the store held already the
#: label asked for now, or nothing (held already, with that label or with none asked).
Saved = Literal["stored", "relabelled", "held"]

_RUNS_TABLE = """
CREATE TABLE {name} (
    id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    origin TEXT NOT NULL DEFAULT 'profile',
    started_at TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'running', 'lost')),
    reason TEXT,
    cache TEXT,
    label TEXT,
    config_key TEXT,
    model_path TEXT,
    engine_version TEXT,
    time_to_ready_s REAL,
    first_token_s REAL,
    record TEXT NOT NULL
)
"""

_SCHEMA = "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n" + \
    _RUNS_TABLE.format(name="runs") + """;
CREATE INDEX runs_config ON runs(config_key);
CREATE TABLE stages (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    stage TEXT NOT NULL,
    seconds REAL,
    source TEXT,
    PRIMARY KEY (run_id, stage)
);
CREATE TABLE evidence (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, kind)
);
CREATE TABLE substeps (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (run_id, name)
);
"""

_TABLES = {"meta", "runs", "stages", "evidence", "substeps"}


def default_store_path() -> Path:
    """``$COLDSCOPE_STORE``, else ``./.coldscope/store.db``."""
    env = os.environ.get("COLDSCOPE_STORE")
    return Path(env) if env else Path(".coldscope") / "store.db"


def check_store_files(path: Path) -> bool:
    """Whether a store exists at ``path``; refuses (one line) a store that is not a regular
    file, and a companion (``COMPANIONS``, beside the file the store's links lead to, where
    SQLite keeps them) that exists and is not a regular file, or is a link. By ``stat`` only:
    SQLite would open a FIFO and wait for a writer forever."""
    from coldscope.util.safeio import check_regular

    found = check_regular(path, "store") is not None
    real = os.path.realpath(path)
    for base in dict.fromkeys((str(path), real)):
        for suffix in COMPANIONS:
            check_regular(base + suffix, "store file", follow=False)
    return found


def _warn(message: str) -> None:
    from coldscope.util.safeio import clean_text  # the message may quote a stored record

    print(f"warning: {clean_text(message)}", file=sys.stderr)


class Store:
    """The embedded run store. Cheap to open; safe to use from one process at a time per
    connection, and from several processes at once (SQLite locking, WAL).

    ``create=False`` opens read-only: the file must exist and be a coldscope store.
    """

    def __init__(self, path: str | Path | None = None, *, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.readonly = not create
        self.skipped: list[str] = []
        """Ids of stored runs that could not be read (each also reported on stderr)."""
        if os.path.isdir(self.path):
            raise ColdscopeError(f"{self.path} is a directory, not a coldscope store")
        found = check_store_files(self.path)
        if not create and not found:
            raise ColdscopeError(f"no store at {self.path} (run `coldscope profile` first)")
        sidecars = [Path(f"{self.path}{suffix}") for suffix in ("-wal", "-shm")]
        had = [p.exists() for p in sidecars]
        try:
            self._open()
        except ColdscopeError:
            # Refused: leave the file as it was found, without the empty WAL sidecars that
            # SQLite makes when it merely reads a WAL-mode database.
            with contextlib.suppress(Exception):
                self._conn.close()
            wal, shm = sidecars
            if not any(had) and wal.exists() and wal.stat().st_size == 0:
                for side in sidecars:
                    side.unlink(missing_ok=True)
            raise

    def _open(self) -> None:
        try:
            if self.readonly:
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                self._conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S,
                                             isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S,
                                             isolation_level=None)
            self.schema = self._check()
            if not self.readonly:
                self._prepare()
            self._conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise ColdscopeError(f"store {self.path} stayed locked by another process for "
                                     f"{BUSY_TIMEOUT_S:.0f} s ({exc})") from None
            raise ColdscopeError(f"{self.path} is not a coldscope store ({exc})") from None
        except sqlite3.DatabaseError as exc:
            raise ColdscopeError(f"{self.path} is not a coldscope store ({exc})") from None
        except OSError as exc:
            raise ColdscopeError(f"cannot open store {self.path}: {exc.strerror or exc}") from None

    # -- opening -----------------------------------------------------------------------------

    @contextmanager
    def _sql(self, doing: str) -> Iterator[None]:
        """SQLite's errors while ``doing`` something with an open store, as one line."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise ColdscopeError(f"store {self.path} stayed locked by another process for "
                                     f"{BUSY_TIMEOUT_S:.0f} s while {doing} ({exc})") from None
            raise ColdscopeError(f"store {self.path}: {exc} while {doing}") from None
        except sqlite3.DatabaseError as exc:
            raise ColdscopeError(f"store {self.path}: {exc} while {doing}") from None

    def _check(self) -> int | None:
        """The store's schema version, None for an empty file; raises for anything that is
        not a coldscope store this version can read. Reads only."""
        tables = {r[0] for r in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            if self.readonly:
                raise ColdscopeError(f"{self.path} is an empty database, not a coldscope store")
            return None
        if "meta" not in tables or "runs" not in tables:
            raise ColdscopeError(f"{self.path} is an SQLite file but not a coldscope store "
                                 "(no runs/meta tables); left untouched")
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        try:
            version = int(row[0]) if row is not None else 0
        except ValueError:
            version = 0
        if version < 1:
            raise ColdscopeError(f"{self.path}: no valid schema version in its meta table; "
                                 "not a coldscope store")
        if version > SCHEMA_VERSION:
            raise ColdscopeError(
                f"{self.path} was written by a newer coldscope (schema {version}, this one reads "
                f"up to {SCHEMA_VERSION}); upgrade coldscope")
        missing = _TABLES - tables
        if missing:
            raise ColdscopeError(f"{self.path}: coldscope store lacks table(s) "
                                 f"{', '.join(sorted(missing))}; left untouched")
        return version

    def _prepare(self) -> None:
        """Create the tables of a new store, or migrate an old one; then switch to WAL. The
        state is read again under the write lock, so two processes opening the same new (or
        old) store at once create (or migrate) it once."""
        if self.schema != SCHEMA_VERSION:
            self._conn.execute("PRAGMA foreign_keys=OFF")  # a migration must not cascade
            with self._tx() as cur:
                self.schema = self._check()
                if self.schema is None:
                    for stmt in _SCHEMA.split(";"):
                        if stmt.strip():
                            cur.execute(stmt)
                    cur.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                                (str(SCHEMA_VERSION),))
                elif self.schema == 1:
                    self._migrate_v1(cur)
                self.schema = SCHEMA_VERSION
        self._switch_to_wal()

    def _switch_to_wal(self) -> None:
        """WAL, so readers and the writer do not block each other. Switching needs every other
        connection's lock gone, and when two processes open a new store in the same instant
        SQLite answers "database is locked" at once rather than waiting its busy timeout (it
        would otherwise deadlock); so the switch is retried for as long as that timeout. A
        store another process has already switched stays WAL (the mode is kept in the file)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                if self._conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _migrate_v1(self, cur: sqlite3.Cursor) -> None:
        """Schema 1 -> 2, inside the caller's transaction: the runs table gets an ``origin``
        column and the statuses ``running``/``lost``; each record is rewritten as a schema 2
        ``Run``. A record that cannot be read is kept as it was (and skipped, with a message,
        when read)."""
        cur.execute(_RUNS_TABLE.format(name="runs_v2"))
        rows = cur.execute(
            "SELECT id, started_at, status, reason, cache, label, config_key, model_path,"
            " engine_version, time_to_ready_s, first_token_s, record FROM runs ORDER BY rowid"
        ).fetchall()
        for row in rows:
            record, version, origin = row[-1], 1, "profile"
            try:
                run = Run.from_legacy(json.loads(record))
                record, version, origin = json.dumps(run.to_json()), SCHEMA_VERSION, run.origin
            except (ValueError, TypeError, ValidationError) as exc:
                _warn(f"run {row[0]} in {self.path} could not be migrated ({_short(exc)}); "
                      "kept as it was")
            cur.execute(
                "INSERT INTO runs_v2 (id, schema_version, origin, started_at, status, reason,"
                " cache, label, config_key, model_path, engine_version, time_to_ready_s,"
                " first_token_s, record) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (row[0], version, origin, *row[1:-1], record),
            )
        cur.execute("DROP TABLE runs")
        cur.execute("ALTER TABLE runs_v2 RENAME TO runs")
        cur.execute("CREATE INDEX runs_config ON runs(config_key)")
        cur.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    (str(SCHEMA_VERSION),))

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        cur = self._conn.cursor()
        with self._sql("writing"):
            cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur  # an IntegrityError (a run stored twice) stays what it is
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                cur.execute("ROLLBACK")
            raise
        else:
            with self._sql("writing"):
                cur.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def add_run(self, run: Run, evidence: Mapping[str, object] | None = None) -> Run:
        """Store one run atomically, with its raw evidence (by kind: ``log``, ``probe``,
        ``otel``, ``launch``) so its timeline can be rebuilt later. A run stored earlier with
        status ``running`` (recorded before its engine started) is replaced; any other run with
        the same id is an integrity error."""
        self.add_runs([(run, evidence)])
        return run

    def add_runs(self, items: Iterable[tuple[Run, Mapping[str, object] | None]]) -> int:
        """Store many runs (each with its evidence, or None) in one transaction: all or none.
        For imports and fleets, where a commit per run would cost a sync per run. Returns how
        many were stored."""
        if self.readonly:
            raise ColdscopeError(f"{self.path} was opened read-only")
        n = 0
        with self._tx() as cur:
            for run, evidence in items:
                self._insert(cur, run, evidence)
                n += 1
        return n

    def save_startup(self, run: Run, lines: Sequence[str]) -> Saved:
        """Store ``run``, a start-up read from a log's ``lines`` (kept as its ``saved_log``
        evidence) under the id of what it is (``logruns.startup_id``), once. One the store
        holds already is not stored again (its timeline is the same lines read again); but a
        label given now (``run.label`` not None: ``parse --save --label NAME`` a second time)
        that differs from the one it was stored with replaces it (``relabel``). Another
        process that stored the same start-up in the meantime counts as held."""
        if not self.has_run(run.id):
            try:
                self.add_run(run, {"saved_log": list(lines)})
                return "stored"
            except sqlite3.IntegrityError:  # stored by another process since has_run
                pass
        if run.label is not None and self.relabel(run.id, run.label):
            return "relabelled"
        return "held"

    def relabel(self, run_id: str, label: str | None) -> bool:
        """Give the stored run ``run_id`` (exactly this id) the label ``label``, in its column
        and its record, in one transaction; False, changing nothing, when it has that label
        already. A label is what a user says of a run (``parse --save --label``), not what was
        measured, so saving a start-up again under another label renames it rather than
        storing it twice."""
        if self.readonly:
            raise ColdscopeError(f"{self.path} was opened read-only")
        with self._tx() as cur:
            row = cur.execute("SELECT label, record FROM runs WHERE id = ?",
                              (run_id,)).fetchone()
            if row is None:
                raise ColdscopeError(f"no run {run_id!r} in {self.path}")
            if row[0] == label:
                return False
            run = self._load(run_id, row[1])
            if run is None:
                raise ColdscopeError(f"run {run_id} in {self.path} is unreadable")
            cur.execute("UPDATE runs SET label = ?, record = ? WHERE id = ?",
                        (label, json.dumps(run.evolve(label=label).to_json()), run_id))
        return True

    @staticmethod
    def _insert(cur: sqlite3.Cursor, run: Run, evidence: Mapping[str, object] | None) -> None:
        if not isinstance(run, Run):  # a programming error, not bad user input
            raise TypeError(f"Store.add_run takes a Run, not {type(run).__name__}")
        cur.execute("DELETE FROM runs WHERE id = ? AND status = 'running'", (run.id,))
        cur.execute(
            "INSERT INTO runs (id, schema_version, origin, started_at, status, reason, cache,"
            " label, config_key, model_path, engine_version, time_to_ready_s, first_token_s,"
            " record) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run.id, SCHEMA_VERSION, run.origin, run.started_at, run.status, run.reason,
                run.cache, run.label, run.config_key, run.model.path, run.engine.version,
                run.time_to_ready_s, run.first_token_s, json.dumps(run.to_json()),
            ),
        )
        cur.executemany(
            "INSERT INTO stages (run_id, stage, seconds, source) VALUES (?,?,?,?)",
            [(run.id, b, run.stages.get(b), run.sources.get(b)) for b in BUCKETS],
        )
        cur.executemany(
            "INSERT INTO substeps (run_id, name, seconds) VALUES (?,?,?)",
            [(run.id, k, v) for k, v in run.substeps.items()],
        )
        cur.executemany(
            "INSERT INTO evidence (run_id, kind, data) VALUES (?,?,?)",
            [(run.id, k, json.dumps(v)) for k, v in (evidence or {}).items()],
        )

    # -- reading -----------------------------------------------------------------------------

    def _load(self, run_id: str, record: str) -> Run | None:
        try:
            return Run.from_json(json.loads(record))
        except (ValueError, TypeError, AttributeError) as exc:
            why = one_line(exc, "record") if isinstance(exc, ValidationError) else _short(exc)
            _warn(f"run {run_id} in {self.path} is unreadable ({why}); skipped")
            self.skipped.append(run_id)
            return None

    def runs(
        self,
        status: str | None = "ok",
        *,
        cache: str | None = None,
        label: str | None = None,
        config_key: str | None = None,
        model_path: str | None = None,
        origin: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Run]:
        """Runs, oldest first, filtered by the given columns (None = any). Unreadable records
        are skipped, each with a one-line warning on stderr. ``progress(read, total)`` is
        called as records are read (reading dominates on large stores: ~1.3 ms a record)."""
        where: list[str] = []
        args: list[str | int] = []
        for col, val in (("status", status), ("cache", cache), ("label", label),
                         ("config_key", config_key), ("model_path", model_path)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if origin is not None:
            if self.schema == 1:  # schema 1 had profile and campaign runs only
                where.append("(record LIKE '%\"campaign\": {%') = ?")
                args.append(1 if origin == "campaign" else 0)
                if origin not in ("profile", "campaign"):
                    return []
            else:
                where.append("origin = ?")
                args.append(origin)
        cond = " WHERE " + " AND ".join(where) if where else ""
        with self._sql("reading runs"):
            total = 0
            if progress is not None:
                total = self._conn.execute("SELECT COUNT(*) FROM runs" + cond, args).fetchone()[0]
                progress(0, total)
            out = []
            rows = self._conn.execute("SELECT id, record FROM runs" + cond
                                      + " ORDER BY started_at, rowid", args)
            for i, (run_id, record) in enumerate(rows, 1):
                run = self._load(run_id, record)
                if run is not None:
                    out.append(run)
                if progress is not None and (i % 100 == 0 or i == total):
                    progress(i, total)
        return out

    def run(self, run_id: str) -> Run:
        """One run by id, or by a unique id prefix."""
        with self._sql("reading a run"):
            rows = self._conn.execute(
                "SELECT id, record FROM runs WHERE id = ? OR id LIKE ? ESCAPE '\\' ORDER BY id",
                (run_id, _like_prefix(run_id)),
            ).fetchall()
        exact = [r for r in rows if r[0] == run_id]
        if exact:
            rows = exact
        if not rows:
            raise ColdscopeError(f"no run {run_id!r} in {self.path}")
        if len(rows) > 1:
            shown = ", ".join(r[0] for r in rows[:AMBIGUOUS_SHOWN])
            more = f", ... ({len(rows)} in all)" if len(rows) > AMBIGUOUS_SHOWN else ""
            raise ColdscopeError(f"run id prefix {run_id!r} is ambiguous: {shown}{more}")
        run = self._load(*rows[0])
        if run is None:
            raise ColdscopeError(f"run {rows[0][0]} in {self.path} is unreadable")
        return run

    def has_run(self, run_id: str) -> bool:
        """Whether a run of exactly this id is stored (``run`` would also take a prefix)."""
        with self._sql("reading a run"):
            return self._conn.execute("SELECT 1 FROM runs WHERE id = ?",
                                      (run_id,)).fetchone() is not None

    def evidence(self, run_id: str) -> dict[str, Any]:
        """The raw evidence stored with a run, by kind (``log``, ``probe``, ``otel``,
        ``launch``; ``saved_log`` for a log stored by ``parse --save``)."""
        with self._sql("reading evidence"):
            rows = self._conn.execute(
                "SELECT kind, data FROM evidence WHERE run_id = ?", (run_id,)
            ).fetchall()
        return {k: json.loads(d) for k, d in rows}

    def timeline(self, run_id: str) -> Timeline:
        """The run's timeline, reconciled again from its stored raw evidence. Runs stored
        before probe events were kept (schema 1) rebuild from their log and spans only."""
        from coldscope.capture.reconcile import build_timeline
        from coldscope.capture.sources import Context
        from coldscope.engines import read_log, resolve, run_reader
        run = self.run(run_id)
        if run.time_to_ready_s is None:
            raise ColdscopeError(f"run {run.id} never became ready ({run.reason}); no timeline")
        evidence = self.evidence(run.id)
        if "saved_log" in evidence:  # a log read alone: no arrival times, read it again
            from coldscope.store.logruns import laid_end_to_end
            reading = read_log(evidence["saved_log"])
            if reading is None:
                raise ColdscopeError(f"run {run.id}: its stored log is no longer recognised")
            return laid_end_to_end(reading.timeline)
        launch = evidence.get("launch") or {}
        engine = resolve(run.engine.argv)
        ctx = Context(
            engine=run_reader(engine, [str(text) for _, text in evidence.get("log") or ()]),
            launch_mono=float(launch.get("mono") or 0.0),
            launch_wall=float(launch.get("wall") or run.origin_unix or 0.0),
            root_pid=launch.get("root_pid"),
            ready_at=run.time_to_ready_s,
            compile_enabled=engine.compile_enabled(run.engine.argv),
            has_gpu=bool(run.environment.gpus),
        )
        return build_timeline(evidence, ctx).timeline

    def count(self) -> int:
        with self._sql("counting runs"):
            return int(self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _short(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
