"""``coldscope export``: stored runs as one flat table, CSV or Parquet, with a fixed schema.

The schema (``SCHEMA``) is the same for every store and both formats: the same columns in the
same order with the same types, whatever the runs hold, so a file made today and one made
after the first GPU run arrives can be concatenated. Hence:

- every duration is seconds, in a column ending ``_s``, typed float even when all empty;
- stage columns exist for every bucket (``bootstrap_s`` ... ``unattributed_s``), known or not;
- sub-steps, whose names depend on the engine and its version, are one JSON column
  (``substeps_json``: ``{"model_loading/weights": 1.23, ...}``), not one column each;
- no column name contains "/" (a problem for SQL engines and pandas' attribute access);
- ``started_at`` is a timestamp (UTC); booleans and counts are typed.

The columns are documented in docs/export.md, which a test checks against ``SCHEMA``.

A CSV is opened in spreadsheets, and a run's text comes from outside (a ``--label``, a log's
model path, an engine's failure reason): a text cell that starts with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return would be run as a formula (``=HYPERLINK(...)``). Such a cell
is written with a single quote before it (``'=HYPERLINK(...)``; ``safeio.csv_text``), as
OWASP's CSV injection guidance advises; numbers, booleans and times are not text and stay as
they are. Parquet holds typed data that no spreadsheet evaluates: every value stays as it is.
"""

from __future__ import annotations

import csv
import datetime as dt
import shlex
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from coldscope.capture.environment import machine_name
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS, STAGES
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import atomic_path, check_output_target, csv_text, dumps_json

if TYPE_CHECKING:
    import pyarrow as pa

Kind = Literal["string", "float", "int", "bool", "timestamp"]


class Column(NamedTuple):
    name: str
    kind: Kind
    doc: str
    get: Callable[[Run], Any]


def _started(run: Run) -> dt.datetime | None:
    if not run.started_at:
        return None
    try:
        t = dt.datetime.fromisoformat(run.started_at)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


def _capture_sizes(run: Run) -> int | None:
    from coldscope.engines import resolve
    return resolve(run.engine.argv).capture_sizes(run.engine.argv) if run.engine.argv else None


def _machine(run: Run) -> str | None:
    return machine_name(run.environment)


def _membership(attr: str) -> Callable[[Run], Any]:
    return lambda r: getattr(r.campaign, attr) if r.campaign is not None else None


def _stage(bucket: str) -> Callable[[Run], float | None]:
    return lambda r: r.stages.get(bucket)


def _source(stage: str) -> Callable[[Run], str | None]:
    return lambda r: r.sources.get(stage)


def _fs(run: Run) -> str | None:
    fs = run.environment.weights_fs
    return " ".join(x for x in (fs.fstype, fs.device, fs.mountpoint) if x) or None if fs else None


#: The export's columns, in order. Stage and source columns are generated from the one stage
#: vocabulary (``coldscope.core.stages``).
SCHEMA: tuple[Column, ...] = (
    Column("id", "string", "run id", lambda r: r.id),
    Column("started_at", "timestamp", "when the engine was launched (UTC)", _started),
    Column("status", "string", "ok, failed, running or lost", lambda r: r.status),
    Column("reason", "string", "why a run failed", lambda r: r.reason),
    Column("origin", "string", "profile, campaign, tune or log", lambda r: r.origin),
    Column("cache", "string", "caches' state the run saw: cold, warm or unknown",
           lambda r: r.cache),
    Column("cache_requested", "string", "what was asked for (--cache)",
           lambda r: r.cache_requested),
    Column("label", "string", "--label, or the campaign's name", lambda r: r.label),
    Column("config_key", "string", "hash of command and environment: equal = same config",
           lambda r: r.config_key),
    Column("campaign", "string", "campaign name or tune session", _membership("name")),
    Column("campaign_cell", "string", "the campaign cell", _membership("cell")),
    Column("campaign_role", "string", "measure or prime; baseline, trial or verify",
           _membership("role")),
    Column("flags", "string", "the campaign's name for the engine flags", _membership("flags")),
    Column("model_name", "string", "model (directory name)", lambda r: r.model.name),
    Column("model_path", "string", "model directory", lambda r: r.model.path),
    Column("engine_name", "string", "engine adapter", lambda r: r.engine.name),
    Column("engine_version", "string", "engine version", lambda r: r.engine.version),
    Column("argv", "string", "the engine's command line (shell quoting)",
           lambda r: shlex.join(r.engine.argv) if r.engine.argv else None),
    Column("mode", "string", "eager or compiled", lambda r: r.engine.mode),
    Column("enforce_eager", "bool", "--enforce-eager given", lambda r: r.engine.enforce_eager),
    Column("compile", "bool", "torch.compile enabled", lambda r: r.engine.compile),
    Column("load_format", "string", "--load-format", lambda r: r.engine.load_format),
    Column("capture_sizes", "int", "number of CUDA-graph capture sizes given", _capture_sizes),
    Column("machine", "string", "CPU model and cores, GPUs (as the report names it)", _machine),
    Column("hostname", "string", "host", lambda r: r.environment.hostname),
    Column("cpu_model", "string", "CPU model", lambda r: r.environment.cpu_model),
    Column("cpu_cores", "int", "logical CPU cores", lambda r: r.environment.cpu_cores),
    Column("memory_bytes", "int", "memory", lambda r: r.environment.memory_bytes),
    Column("gpu_count", "int", "GPUs seen", lambda r: len(r.environment.gpus)),
    Column("gpu_name", "string", "GPU model(s), comma-separated",
           lambda r: ", ".join(g.name or "gpu" for g in r.environment.gpus) or None),
    Column("page_cache", "string", "what was done to the page cache before the run",
           lambda r: r.page_cache),
    Column("weights", "string", "\"page cache dropped\" when it was (as the report names it)",
           lambda r: "page cache dropped" if str(r.page_cache or "").startswith("done")
           else None),
    Column("storage_page_cache", "string", "weights in the page cache: hot or cold",
           lambda r: r.storage.page_cache),
    Column("storage_kind", "string", "nvme, ssd, hdd, nfs, tmpfs, dram, ...",
           lambda r: r.storage.kind),
    Column("storage_read_bandwidth_bps", "float", "measured read bandwidth, bytes/s",
           lambda r: r.storage.read_bandwidth_bps),
    Column("weights_fs", "string", "file system of the weights: type, device, mount point",
           _fs),
    Column("time_to_ready_s", "float", "launch to ready", lambda r: r.time_to_ready_s),
    Column("first_token_s", "float", "launch to first token", lambda r: r.first_token_s),
    *(Column(f"{b}_s", "float", f"seconds in {b} (buckets sum to time_to_ready_s)", _stage(b))
      for b in BUCKETS),
    *(Column(f"{s}_source", "string", f"evidence behind {s}: span, probe or log", _source(s))
      for s in (*STAGES, "server_ready")),
    Column("substeps_json", "string", "sub-steps as a JSON object: name -> seconds",
           lambda r: dumps_json(dict(sorted(r.substeps.items())), indent=None)
           if r.substeps else None),
    Column("findings", "string", "finding ids, comma-separated",
           lambda r: ", ".join(f.id for f in r.findings) or None),
    Column("findings_count", "int", "number of findings", lambda r: len(r.findings)),
    Column("probe_cost_s", "float", "the probe's own time in all processes",
           lambda r: r.probe_cost_s),
    Column("tool_version", "string", "coldscope that made the run", lambda r: r.tool.version),
)

COLUMNS: tuple[str, ...] = tuple(c.name for c in SCHEMA)


def rows(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """One dict per run, every column of ``SCHEMA`` present (None when unknown)."""
    out = []
    for run in runs:
        row = {}
        for c in SCHEMA:
            v = c.get(run)
            if v is not None and c.kind == "float":
                v = float(v)
            row[c.name] = v
        out.append(row)
    return out


def arrow_schema() -> pa.Schema:
    """The Parquet schema: the same for every export."""
    import pyarrow as pa

    types = {"string": pa.string(), "float": pa.float64(), "int": pa.int64(),
             "bool": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([pa.field(c.name, types[c.kind], nullable=True) for c in SCHEMA])


def _csv_value(v: Any, kind: Kind) -> str:
    if v is None:
        return ""
    if kind == "timestamp":
        stamp: dt.datetime = v
        return stamp.isoformat(timespec="milliseconds")
    if kind == "bool":
        return "true" if v else "false"
    if kind == "float":
        return repr(float(v))
    if kind == "int":
        return str(int(v))
    return csv_text(str(v))


def export_runs(runs: Sequence[Run], out: str | Path, fmt: str | None = None) -> int:
    """Write ``runs`` to ``out`` as CSV or Parquet (by ``fmt``, else the file's extension);
    returns the number of rows."""
    out = Path(out)
    fmt = (fmt or out.suffix.lstrip(".")).lower()
    if fmt not in ("csv", "parquet"):
        raise ColdscopeError(f"unknown export format {fmt!r}; use csv or parquet "
                             "(-o FILE.csv / FILE.parquet, or --format)")
    check_output_target(out)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ColdscopeError("Parquet export needs pyarrow: pip install "
                                 "'coldscope[parquet]'") from None
    table = rows(runs)
    # written beside the target and renamed over it: a failed write leaves the old file
    try:
        with atomic_path(out) as tmp:
            if fmt == "csv":
                with tmp.open("w", newline="", encoding="utf-8") as f:
                    writer = csv.writer(f)
                    writer.writerow(COLUMNS)
                    for row in table:
                        writer.writerow([_csv_value(row[c.name], c.kind) for c in SCHEMA])
            else:
                try:
                    pq.write_table(pa.Table.from_pylist(table, schema=arrow_schema()), tmp)
                except pa.ArrowException as exc:
                    raise ColdscopeError(f"cannot write {out}: {exc}") from None
    except OSError as exc:
        raise ColdscopeError(f"cannot write {out}: {exc.strerror or exc}") from None
    return len(table)


def schema_markdown() -> str:
    """The schema as a Markdown table (docs/export.md holds this)."""
    lines = ["| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{c.name}` | {c.kind} | {c.doc} |" for c in SCHEMA]
    return "\n".join(lines)
