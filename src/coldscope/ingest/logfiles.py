"""Many saved engine logs at once: the files, directories and standard input ``coldscope
parse`` is given, each read with a size bound and made a ``Run``, and a fleet summary of them.

Sources: a file, a directory (every file under it, recursively, in name order; hidden names
skipped), ``-`` for standard input. A file is read only if it is a regular file (a FIFO, socket
or device found in a directory is skipped with a line, never opened for reading, so it cannot
hang the command); gzip data (``x.log.gz``, by its magic bytes) is decompressed under the same
bound; a rotated file (``x.log.1``) is one more log. A log that holds several start-ups (an
engine restarted into the same file, logs appended to one another: ``startups``) gives one
``ParsedLog`` per start-up, its run named ``NAME#1``, ``NAME#2``, ...; otherwise each source gives
one ``ParsedLog``:

- ``ok`` / ``failed``: a ``Run`` (``assemble.run_from_log``: whichever engine adapter knows the
  log), failed with the reason the adapter quoted;
- ``refused``: read, but no engine adapter knows its lines;
- ``unreadable``: could not be read (missing, not a regular file when named, larger than the
  bound, broken gzip);
- ``skipped``: found in a directory and not a regular file.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from coldscope.capture.logtext import split_lines
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import MAX_LOG_BYTES

STDIN = "-"

Status = Literal["ok", "failed", "refused", "unreadable", "skipped"]


@dataclass(frozen=True)
class LogSource:
    """One log to read: ``name`` as shown (the path as given or found, ``-`` for standard
    input), ``path`` (None for standard input), whether the user named it, and why it is
    skipped (a non-regular file found in a directory)."""

    name: str
    path: Path | None
    named: bool = True
    skip: str | None = None


@dataclass
class ParsedLog:
    """What one source (or one start-up of it) gave: its status, the run (``ok``/``failed``),
    the reason (every other status, and ``failed``), the lines read (for ``--save``), and
    ``part`` (``#2``: which start-up of a log that holds several; empty otherwise)."""

    source: LogSource
    status: Status
    run: Run | None = None
    reason: str | None = None
    lines: list[str] = field(default_factory=list)
    digest: str | None = None
    part: str = ""

    def to_json(self) -> dict[str, Any]:
        """A log that gave no run, as ``parse --json`` lists it under ``"refused"``."""
        return {"log": self.source.name, "status": self.status, "reason": self.reason}


def log_sources(inputs: Sequence[str]) -> list[LogSource]:
    """The logs ``inputs`` name: files as given, directories walked (sorted, recursively, links
    to directories not followed, hidden names skipped), ``-`` once."""
    out: list[LogSource] = []
    for given in inputs:
        if given == STDIN:
            out.append(LogSource(STDIN, None))
            continue
        path = Path(given)
        if not path.is_dir():
            out.append(LogSource(given, path))
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(f for f in files if not f.startswith(".")):
                found = Path(root) / name
                out.append(LogSource(str(found), found, named=False, skip=_not_regular(found)))
    return out


def _not_regular(path: Path) -> str | None:
    """Why a file found in a directory is not read (without opening it), or None."""
    import stat

    from coldscope.util.safeio import file_kind
    try:
        mode = path.stat().st_mode  # follows links: a link to a log is a log
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    return f"{file_kind(mode)}, not a regular file: skipped"


def read_log_bytes(source: LogSource, *, limit: int = MAX_LOG_BYTES,
                   stdin: IO[bytes] | None = None) -> bytes:
    """The bytes of one log, gzip data decompressed, at most ``limit`` bytes (read and after
    decompression). Raises ``ColdscopeError`` saying why it cannot be read."""
    from coldscope.util.safeio import read_bytes
    if source.path is None:
        stream = stdin if stdin is not None else _stdin()
        data = stream.read(limit + 1)
        if len(data) > limit:
            raise ColdscopeError(f"standard input is larger than {limit} bytes; refused "
                                 "(raise the bound with --max-bytes)")
    else:
        try:
            data = read_bytes(source.path, limit=limit, what="log")
        except ColdscopeError as exc:
            raise ColdscopeError(str(exc).replace("COLDSCOPE_MAX_INPUT_BYTES",
                                                  "--max-bytes")) from None
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, limit, source.name)
    return data


def _stdin() -> IO[bytes]:
    import sys

    return sys.stdin.buffer


def _gunzip(data: bytes, limit: int, name: str) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            out = fh.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise ColdscopeError(f"{name}: broken gzip data ({exc})") from None
    if len(out) > limit:
        raise ColdscopeError(f"{name}: more than {limit} bytes once decompressed; refused "
                             "(raise the bound with --max-bytes)")
    return out


def parse_logs(inputs: Sequence[str], *, limit: int = MAX_LOG_BYTES,
               stdin: IO[bytes] | None = None, single: bool = False) -> Iterator[ParsedLog]:
    """Each log ``inputs`` name, read and parsed (``ParsedLog``), in order. Runs are named
    after the file (``single``: its base name, as ``parse LOG`` always did; else the path as
    shown) and carry the model the engine's log names."""
    for source in log_sources(inputs):
        if source.skip is not None:
            yield ParsedLog(source, "skipped", reason=source.skip)
            continue
        try:
            data = read_log_bytes(source, limit=limit, stdin=stdin)
        except ColdscopeError as exc:
            yield ParsedLog(source, "unreadable", reason=str(exc))
            continue
        # newline-separated lines only, so that quoted line numbers are the file's own
        lines = split_lines(data.decode("utf-8", "replace"))
        name = "stdin" if source.path is None else (
            source.path.name if single else source.name)
        parts = list(_read_startups(lines, name))
        for k, (part, run, refusal) in enumerate(parts, 1):
            tag = f"#{k}" if len(parts) > 1 else ""
            if run is None:
                yield ParsedLog(source, "refused", reason=refusal, lines=part, part=tag)
                continue
            run = _with_log_facts(run, part, source)
            yield ParsedLog(source, "ok" if run.status == "ok" else "failed", run=run,
                            reason=run.reason, lines=part,
                            digest=hashlib.sha256(data).hexdigest(), part=tag)


@dataclass(frozen=True)
class StartupLines:
    """One start-up's run of a log's lines (``startups``): from its first line to the line
    before the next start-up's start line. The last ``tail`` of them come after its end (its
    ready or failure line): requests, shutdown, a wrapper's lines, or the next start-up's
    first lines, printed before its start line."""

    lines: list[str]
    tail: int = 0


def startups(lines: Sequence[str]) -> list[StartupLines]:
    """The start-ups one log holds, in order; every line is in exactly one.

    A new start-up begins at a line an engine says opens one (``engines.startup_boundary``:
    vLLM's version banner or engine line, SGLang's server arguments) once the start-up before
    it has ended: shown the engine ready, or said it failed. A start line before the previous
    start-up ended does not cut: one start-up prints several (the API server's banner, then
    each data-parallel engine core's line), and a harness may repeat them in a summary above
    the full log, so a restart that left no ready or failure line stays one start-up, read as
    before. A log with no start line is one start-up."""
    from coldscope.engines import FAILED, READY, START_PREFIX, startup_boundary
    cuts, ends = [0], []
    begun = ended = False
    for i, line in enumerate(lines):
        kind = startup_boundary(line)
        if kind is None:
            continue
        if kind.startswith(START_PREFIX):
            if ended:
                cuts.append(i)
                ended = False
            begun = True
        elif kind == READY or (kind == FAILED and begun):
            # (a failure-like line before any start line is not a start-up's)
            if not ended:
                ends.append(i)
            ended = True
    bounds = zip(cuts, [*cuts[1:], len(lines)], strict=True)
    return [StartupLines(list(lines[a:b]), b - 1 - ends[k] if k < len(ends) else 0)
            for k, (a, b) in enumerate(bounds)]


def _read_startups(lines: Sequence[str], name: str,
                   ) -> Iterator[tuple[list[str], Run | None, str | None]]:
    """(lines, run, None) or (lines, None, why refused) per start-up of ``lines``, runs named
    ``name`` (``name#k`` when there are several).

    Lines between two start-ups (``StartupLines.tail``) are read with the earlier one when
    they leave its reading as it is without them (a restarted server's requests and
    shutdown: its serving life, after its ready line). Lines after a start-up's end cannot
    change that start-up, so when they do (its clock goes back, another engine's lines make
    it another engine's log, its stages change) they are the next start-up's first lines,
    printed before its start line, as when two logs are appended to one another, and open
    it instead. A restart whose first lines neither change the earlier reading nor carry an
    earlier clock stays split at its start line: its bootstrap is then timed from that line."""
    parts = startups(lines)
    carried: list[str] = []
    for k, part in enumerate(parts, 1):
        tag = f"#{k}" if len(parts) > 1 else ""
        body, carried = carried + part.lines, []
        run, refusal = _read(body, name + tag)
        if part.tail and k < len(parts):
            head = body[:-part.tail]
            alone, _ = _read(head, name + tag)
            if alone is not None and (run is None or _reading(run) != _reading(alone)):
                body, run, carried = head, alone, body[-part.tail:]
        yield body, run, None if run is not None else refusal


def _reading(run: Run) -> tuple[Any, ...]:
    """What a start-up's log says of it: the outcome, the engine and the timeline."""
    return (run.status, run.reason, run.engine.name, run.engine.version, run.time_to_ready_s,
            run.stages)


def _read(lines: list[str], name: str) -> tuple[Run | None, str | None]:
    """``assemble.run_from_log`` of ``lines``, or why it refused them."""
    from coldscope.ingest.assemble import run_from_log
    try:
        return run_from_log(lines, name=name), None
    except ColdscopeError as exc:
        return None, str(exc)


def _with_log_facts(run: Run, lines: list[str], source: LogSource) -> Run:
    """The model the engine's log names (as the serve watcher fills it) and the file read."""
    from coldscope.core.records import ModelRef
    update: dict[str, Any] = {}
    if source.path is not None:
        update["log_path"] = str(source.path)
    if run.model.path is None and run.model.name is None:
        from coldscope.engines import log_facts
        known = log_facts(lines, engine=run.engine.name)
        path = known[1].model if known is not None else None
        if path:
            update["model"] = ModelRef(path=path, name=path.rstrip("/").rsplit("/", 1)[-1])
    return run.evolve(**update) if update else run


# -- the fleet summary --------------------------------------------------------------------------

#: What the summary gives per group: every bucket, then time to ready.
SUMMARY_KEYS: tuple[str, ...] = (*BUCKETS, "time_to_ready")


@dataclass(frozen=True)
class FleetGroup:
    """The ``ok`` runs of one engine, engine version and model: how many, and per bucket (and
    time to ready) the p50 and p90 over the runs that know it, with that count."""

    engine: str | None
    version: str | None
    model: str | None
    count: int
    stats: dict[str, tuple[float, float, int] | None]

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "model": self.model,
                "count": self.count,
                "stages": {k: None if v is None else {"p50": v[0], "p90": v[1], "n": v[2]}
                           for k, v in self.stats.items()}}


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, interpolated linearly between the two nearest
    ranks (numpy's default): p50 of an even count is the mean of the two middle values."""
    import numpy as np  # lazily: only a fleet summary needs it

    if not values:
        raise ValueError("no values")
    return float(np.quantile(values, q))


def fleet_summary(runs: Sequence[Run]) -> list[FleetGroup]:
    """The ``ok`` runs grouped by engine, engine version and model (the model name, else its
    path; unknown values group together), in order of first appearance."""
    groups: dict[tuple[str | None, str | None, str | None], list[Run]] = {}
    for run in runs:
        if run.status != "ok":
            continue
        key = (run.engine.name, run.engine.version,
               run.model.name or run.model.path or run.engine.model)
        groups.setdefault(key, []).append(run)
    out = []
    for (engine, version, model), members in groups.items():
        stats: dict[str, tuple[float, float, int] | None] = {}
        for k in SUMMARY_KEYS:
            values = [float(v) for r in members
                      if (v := (r.time_to_ready_s if k == "time_to_ready" else r.stages.get(k)))
                      is not None]
            stats[k] = (percentile(values, 0.5), percentile(values, 0.9), len(values)) \
                if values else None
        out.append(FleetGroup(engine, version, model, len(members), stats))
    return out
