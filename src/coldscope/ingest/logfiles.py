"""Many saved engine logs at once: the files, directories and standard input ``coldscope
parse`` is given, each read with size bounds and made a ``Run``, and a fleet summary of them.

Sources: a file, a directory (every file under it, recursively, in name order; hidden names
and the folder's documentation, a ``README.md`` beside the logs, skipped), ``-`` for standard
input. A file is read only if it is a regular file outside
``/proc`` and ``/sys`` (a FIFO, socket, device or kernel file found in a directory is skipped
with a line, never opened for reading, so it cannot hang the command); gzip data (``x.log.gz``,
by its magic bytes) is decompressed as it is read, under the same bound; a rotated file
(``x.log.1``) is one more log. A log that holds several start-ups (an engine restarted into
the same file, logs appended to one another: ``startups``) gives one ``ParsedLog`` per
start-up, its run named ``NAME#1``, ``NAME#2``, ...; otherwise each source gives one
``ParsedLog``:

- ``ok`` / ``failed``: a ``Run`` (``assemble.run_from_log``: whichever engine adapter knows the
  log), failed with the reason the adapter quoted;
- ``refused``: read, but no engine adapter knows its lines;
- ``unreadable``: could not be read (missing, not a regular file when named, under ``/proc``
  or ``/sys``, past a bound, broken gzip);
- ``skipped``: found in a directory and not a regular file (or under ``/proc``/``/sys``).

Reading is one streaming pass (``read_log_text``) whose cost is bounded whatever the file
holds: at most ``limit`` bytes (``--max-bytes``, else ``COLDSCOPE_MAX_INPUT_BYTES``, else 128 MiB)
read and, for gzip, decompressed (counted while decompressing: a bomb is never inflated into
memory), at most ``MAX_LOG_LINES`` lines held (``--max-lines``), each at most
``MAX_LINE_BYTES`` long (a longer line's first ``MAX_LINE_BYTES`` are read, with a note). Blank
lines are skipped as the bytes are scanned, except the last ``TAIL_LINES`` of each run of them
(what a start-up's ``log_tail`` may show); the lines held keep the file's own line numbers
(``logtext.NumberedLines``), so every quoted line number is the one the user sees.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import IO, TYPE_CHECKING, Any, Literal

from coldscope.capture.logtext import LinePrefix, NumberedLines
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.ingest.assemble import TAIL_LINES
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import MAX_LOG_BYTES

if TYPE_CHECKING:
    from coldscope.engines import LogFacts, LogReader

STDIN = "-"

#: Most lines of one log held for reading (``--max-lines``): blank lines skipped in a run of
#: them do not count. Each line held costs time and memory in every reader (30-70 us and
#: 300-600 bytes on a slow core); with the byte bound (``safeio.MAX_LOG_BYTES``) this keeps
#: the worst log under both to about 40 s and 330 MB, far above any start-up's log (a few
#: thousand lines).
MAX_LOG_LINES = 500_000
#: Longest line read: a longer line's first this many bytes are read and the rest skipped
#: (the longest in our real logs is 230 kB: a tqdm bar redrawn on one line, SGLang 0.5.7).
MAX_LINE_BYTES = 1024 * 1024
#: Directories deeper than this below a named directory are not walked (one line says so).
MAX_DEPTH = 64
#: Bytes read from a file (and from gzip, once decompressed) per step of the streaming pass.
_CHUNK = 1024 * 1024
#: Kernel and device trees: files there look regular but a read can block or never end
#: (``/proc/kmsg`` waits for the next kernel message).
SPECIAL_ROOTS = ("/proc", "/sys", "/dev")

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


def log_limit() -> int:
    """The default byte bound of a log: ``COLDSCOPE_MAX_INPUT_BYTES`` when set, else
    ``MAX_LOG_BYTES`` (128 MiB)."""
    from coldscope.util.safeio import input_limit
    return input_limit(MAX_LOG_BYTES)


def log_sources(inputs: Sequence[str]) -> list[LogSource]:
    """The logs ``inputs`` name: files as given, directories walked (sorted, recursively, links
    to directories not followed, hidden names and documentation skipped: ``_walk``), ``-``
    once."""
    out: list[LogSource] = []
    for given in inputs:
        if given == STDIN:
            out.append(LogSource(STDIN, None))
            continue
        path = Path(given)
        if not path.is_dir():
            out.append(LogSource(given, path))
            continue
        out.extend(_walk(path))
    return out


def _walk(top: Path) -> Iterator[LogSource]:
    """The files under ``top`` in ``os.walk``'s order (top-down; each directory's files, then
    its sub-directories, both sorted; hidden names, links to directories and documentation
    (``documentation``) left out, without a line: a folder of logs often holds a README that
    says what they are, and listing it as a refused log is noise), walked with a stack rather
    than recursion, at most ``MAX_DEPTH`` levels down."""
    stack: list[tuple[Path, int]] = [(top, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue  # as os.walk: a directory that cannot be listed is left out
        dirs: list[tuple[str, bool]] = []
        files: list[str] = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                try:
                    dirs.append((entry.name, entry.is_symlink()))
                except OSError:
                    continue
            elif not documentation(entry.name):
                files.append(entry.name)
        for name in sorted(files):
            found = folder / name
            yield LogSource(str(found), found, named=False, skip=_not_readable(found))
        below = [(folder / name, depth + 1) for name, link in sorted(dirs) if not link]
        if below and depth + 1 > MAX_DEPTH:
            yield LogSource(str(folder), folder, named=False,
                            skip=f"directories deeper than {MAX_DEPTH} levels are not walked")
            continue
        stack.extend(reversed(below))


#: File names a folder of logs holds to document them, lowercased: a README, a licence.
_DOC_NAMES = ("readme", "license", "licence", "copying", "notice", "changelog", "authors")
#: Extensions of text that is written to be read, never an engine's output (Markdown,
#: reStructuredText, AsciiDoc).
_DOC_EXTENSIONS = (".md", ".markdown", ".rst", ".adoc")


def documentation(name: str) -> bool:
    """Whether a file named ``name`` is clearly documentation, not a log: a Markdown,
    reStructuredText or AsciiDoc file, or a README, licence, changelog or the like with no
    extension or ``.txt``. Only names that no engine's output is saved under: ``notes.txt``,
    ``x.json``, ``notice.log`` are logs until read (JSON lines are logs too); a walk leaves
    documentation out, while a file named on the command line is always read."""
    lower = name.lower()
    stem, dot, ext = lower.partition(".")
    return lower.endswith(_DOC_EXTENSIONS) or (
        stem in _DOC_NAMES and (not dot or ext == "txt"))


def _not_readable(path: Path) -> str | None:
    """Why a file found in a directory is not read (without opening it), or None."""
    from coldscope.util.safeio import file_kind
    try:
        mode = path.stat().st_mode  # follows links: a link to a log is a log
    except (OSError, ValueError) as exc:
        return f"cannot stat: {getattr(exc, 'strerror', None) or exc}"
    if not stat.S_ISREG(mode):
        return f"{file_kind(mode)}, not a regular file: skipped"
    special = _special_root(path)
    if special is not None:
        return f"a file under {special}, not a log: skipped"
    return None


def _special_root(path: Path) -> str | None:
    """``/proc``, ``/sys`` or ``/dev`` when ``path`` (links resolved) lies under it."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    return next((r for r in SPECIAL_ROOTS if real == r or real.startswith(r + "/")), None)


@dataclass
class LogText:
    """One log as ``read_log_text`` read it: the lines held (numbered by the file's own lines),
    the SHA-256 of all its bytes (decompressed), and how many lines were cut."""

    lines: NumberedLines
    digest: str
    cut: int = 0


def read_log_text(source: LogSource, *, limit: int | None = None,
                  max_lines: int = MAX_LOG_LINES, stdin: IO[bytes] | None = None) -> LogText:
    """One log read in a single streaming pass, within the bounds of the module docstring.
    Raises ``ColdscopeError`` saying why it cannot be read."""
    limit = log_limit() if limit is None else limit
    if source.path is None:
        stream = stdin if stdin is not None else _stdin()
        return _read_stream(stream, limit, max_lines, "standard input")
    special = _special_root(source.path)
    if special is not None and special != "/dev":  # a device is not a regular file, below
        raise ColdscopeError(f"cannot read log {source.name}: a file under {special}, not a "
                             "log; refused")
    from coldscope.util.safeio import open_regular
    with open_regular(source.path, "log") as fh:
        return _read_stream(fh, limit, max_lines, f"log {source.name}")


def _stdin() -> IO[bytes]:
    import sys

    return sys.stdin.buffer


def _chunks(fh: IO[bytes], limit: int, what: str) -> Iterator[bytes]:
    """The bytes of ``fh`` in steps of ``_CHUNK``; more than ``limit`` in all is refused."""
    total = 0
    while True:
        try:
            chunk = fh.read(_CHUNK)
        except OSError as exc:
            raise ColdscopeError(f"cannot read {what}: {exc.strerror or exc}") from None
        if not chunk:
            return
        total += len(chunk)
        if total > limit:
            raise ColdscopeError(f"{what} is larger than {limit} bytes; refused (raise the "
                                 "bound with --max-bytes)")
        yield chunk


def _decompressed(fh: IO[bytes], limit: int, what: str) -> Iterator[bytes]:
    """The bytes of ``fh``, gunzipped when they begin with gzip's magic bytes."""
    chunks = _chunks(fh, limit, what)
    first = next(chunks, b"")
    if first[:2] == b"\x1f\x8b":
        yield from _inflated(_chained(first, chunks), limit, what.removeprefix("log "))
        return
    if first:
        yield first
    yield from chunks


def _inflated(blocks: Iterable[bytes], limit: int, name: str) -> Iterator[bytes]:
    """gzip members one after another (zero padding between them, as ``gzip`` reads them),
    inflated at most ``_CHUNK`` bytes at a time; more than ``limit`` bytes of output is
    refused while inflating, so a bomb never reaches memory."""
    inflater: Any = None
    total = 0

    def counted(piece: bytes) -> bytes:
        nonlocal total
        total += len(piece)
        if total > limit:
            raise ColdscopeError(f"{name}: more than {limit} bytes once decompressed; refused "
                                 "(raise the bound with --max-bytes)")
        return piece

    try:
        for data in blocks:
            while data:
                if inflater is None:
                    data = data.lstrip(b"\x00")  # padding after a member
                    if not data:
                        break
                    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                piece = counted(inflater.decompress(data, _CHUNK))
                data = inflater.unconsumed_tail
                while piece:
                    yield piece
                    if inflater.eof or data or len(piece) < _CHUNK:
                        break
                    piece = counted(inflater.decompress(b"", _CHUNK))  # output held inside
                if inflater.eof:
                    data, inflater = inflater.unused_data, None
    except zlib.error as exc:
        raise ColdscopeError(f"{name}: broken gzip data ({exc})") from None
    if inflater is not None:
        raise ColdscopeError(f"{name}: broken gzip data (compressed file ended before the "
                             "end-of-stream marker was reached)")


def _chained(first: bytes, rest: Iterable[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


class _LineReader:
    """Splits a stream of bytes into the lines ``read_log_text`` holds, numbered by the file's
    own lines: text decoded as UTF-8 with undecodable bytes replaced (as a whole-file decode
    would: a newline byte never falls inside a character), a run of more than
    ``TAIL_LINES`` blank lines reduced to its last ``TAIL_LINES`` (the most a run's tail can
    show) by a search over the bytes, never a step per line, and lines longer than
    ``MAX_LINE_BYTES`` cut."""

    def __init__(self, max_lines: int, what: str) -> None:
        self.lines: list[str] = []
        self.numbers: list[int] | None = None  # None while the lines held follow one another
        self.count = 0  # the file's lines so far
        self.cut = 0
        self.max_lines = max_lines
        self.what = what

    def feed(self, seg: bytes) -> None:
        """Whole lines: ``seg`` ends with a newline (or is the file's last, unended line)."""
        pos = 0
        for run in _BLANK_RUN.finditer(seg):
            start, end = run.span()
            if seg.count(b"\n", start, end) <= TAIL_LINES:
                continue  # a short run: held as it is
            self._hold(seg[pos:start])
            if self.numbers is None:
                self.numbers = list(range(len(self.lines)))
            self.count += seg.count(b"\n", start, end) - TAIL_LINES
            at = end - 1  # the run's last newline; back to the one before its last lines
            for _ in range(TAIL_LINES):
                at = seg.rfind(b"\n", start, at)
            self._hold(seg[at + 1:end])
            pos = end
        self._hold(seg[pos:])

    def _hold(self, block: bytes) -> None:
        if not block:
            return
        texts = block.decode("utf-8", "replace").split("\n")
        if texts[-1] == "" and block.endswith(b"\n"):
            texts.pop()
        if max(map(len, texts)) > MAX_LINE_BYTES:
            for i, text in enumerate(texts):
                if len(text) > MAX_LINE_BYTES:
                    texts[i] = text[:MAX_LINE_BYTES]
                    self.cut += 1
        self.lines.extend(texts)
        if self.numbers is not None:
            self.numbers.extend(range(self.count, self.count + len(texts)))
        self.count += len(texts)
        if len(self.lines) > self.max_lines:
            raise ColdscopeError(f"{self.what} has more than {self.max_lines:,} lines; "
                                 "refused (raise the bound with --max-lines)")

    def long_line(self, head: bytes) -> None:
        """A line longer than ``MAX_LINE_BYTES``: ``head`` is its first bytes."""
        self.cut += 1
        self._hold(head[:MAX_LINE_BYTES] + b"\n")

    def finish(self) -> NumberedLines:
        return NumberedLines(self.lines, self.numbers, self.count)  # (None: 0, 1, 2, ...)


#: Blank lines in a row (ASCII whitespace only), from a line's start to the newline ending the
#: last of them: one repeat of a character class, so a run of a million costs no memory.
_BLANK_RUN = re.compile(rb"(?m)^[ \t\r\n\x0b\x0c]*\n")


def _read_stream(fh: IO[bytes], limit: int, max_lines: int, what: str) -> LogText:
    """``read_log_text`` of an open stream: decompressed, hashed and split as it is read."""
    digest = hashlib.sha256()
    reader = _LineReader(max_lines, what)
    rest = b""          # the unfinished line carried to the next chunk
    skipping = False    # inside a line past MAX_LINE_BYTES: its first part is in ``rest``
    for chunk in _decompressed(fh, limit, what):
        digest.update(chunk)
        if skipping:
            at = chunk.find(b"\n")
            if at < 0:
                continue
            reader.long_line(rest)
            rest, chunk, skipping = b"", chunk[at + 1:], False
        data = rest + chunk if rest else chunk
        last = data.rfind(b"\n")
        if last < 0:
            rest = data
        else:
            reader.feed(data[:last + 1])
            rest = data[last + 1:]
        if len(rest) > MAX_LINE_BYTES:
            rest, skipping = rest[:MAX_LINE_BYTES], True
    if skipping:
        reader.long_line(rest)
    elif rest:
        reader.feed(rest)
    return LogText(reader.finish(), digest.hexdigest(), reader.cut)


def parse_logs(inputs: Sequence[str], *, limit: int | None = None,
               max_lines: int = MAX_LOG_LINES, stdin: IO[bytes] | None = None,
               single: bool = False, keep_lines: bool = True) -> Iterator[ParsedLog]:
    """Each log ``inputs`` name, read and parsed (``ParsedLog``), in order. Runs are named
    after the file (``single``: its base name, as ``parse LOG`` always did; else the path as
    shown) and carry the model the engine's log names. ``limit``: the byte bound (default
    ``log_limit()``); ``max_lines``: the line bound; ``keep_lines``: whether each
    ``ParsedLog`` keeps the lines it was read from (``--save`` stores them; a fleet of logs
    read only to be shown need not hold them all)."""
    limit = log_limit() if limit is None else limit
    for source in log_sources(inputs):
        if source.skip is not None:
            yield ParsedLog(source, "skipped", reason=source.skip)
            continue
        try:
            text = read_log_text(source, limit=limit, max_lines=max_lines, stdin=stdin)
        except ColdscopeError as exc:
            yield ParsedLog(source, "unreadable", reason=str(exc))
            continue
        name = "stdin" if source.path is None else (
            source.path.name if single else source.name)
        parts = list(_read_startups(text.lines, name))
        for k, (part, run, refusal, facts) in enumerate(parts, 1):
            tag = f"#{k}" if len(parts) > 1 else ""
            held = part if keep_lines else []
            if run is None:
                yield ParsedLog(source, "refused", reason=refusal, lines=held, part=tag)
                continue
            run = _with_log_facts(run, part, source, facts, cut=text.cut)
            yield ParsedLog(source, "ok" if run.status == "ok" else "failed", run=run,
                            reason=run.reason, lines=held, digest=text.digest, part=tag)


@dataclass(frozen=True)
class StartupLines:
    """One start-up's run of a log's lines (``startups``): from its first line to the line
    before the next start-up's first line. The last ``tail`` of them come after its end (its
    ready or failure line): requests, shutdown, a crash's traceback, a wrapper's lines. The
    last ``loose`` of those (at most ``tail``; ``tail`` when not given) are lines nothing ties
    to this start-up (no process of its, no traceback): they may instead be the next
    start-up's first lines, printed before its start line (``_read_startups`` decides)."""

    lines: NumberedLines
    tail: int = 0
    loose: int | None = None
    bad_arguments: int | None = None
    """The index (in ``lines``) of argparse's ``PROG: error:`` line of a launch that died at
    argument parsing; None otherwise."""
    end: int | None = None
    """The index (in ``lines``) of its ready or failure line; None while it has neither (a
    log cut off, or a start-up still running in a followed log)."""
    failed: bool = False
    """Whether its end (``end``) is a failure."""
    reader: LogReader | None = None
    """The adapter whose start line opened it (the log's engine, identified once by
    ``startups``; another adapter's after a switch): its lines are read by that adapter,
    not identified again."""

    @property
    def movable(self) -> int:
        """How many of the last lines may open the next start-up instead."""
        return self.tail if self.loose is None else min(self.loose, self.tail)


def startups(lines: Sequence[str], *, prefix: LinePrefix | None | EllipsisType = ...,
             reader: LogReader | None | EllipsisType = ...) -> list[StartupLines]:
    """The start-ups one log holds, in order; every line is in exactly one.

    A new start-up's start line is a line the log's engine (``engines.identify_log``, once)
    says opens one (``LogReader.startup_boundary``: vLLM's version banner or engine line,
    SGLang's server arguments) once the start-up before it has ended: shown the engine ready,
    or said it failed (also a launch that died at argument parsing, argparse's ``usage:`` and
    ``PROG: error:`` lines: a failed start-up of its own, though it printed no start line). A
    start line before the previous start-up ended does not cut: one start-up prints several
    (the API server's banner, then each data-parallel engine core's line), and a harness may
    repeat them in a summary above the full log, so a restart that left no ready or failure
    line stays one start-up, read as before. A log with no start line is one start-up.

    A start-up begins at its own first line, not at its start line: lines before the start
    line that announce the launch (a service manager's ``Started``, argparse's ``usage:``)
    open it, and after a failed start-up every line after the last one that is the failed
    start-up's (``_leftover``: its traceback, its processes' lines, an error, the service
    manager's report of its exit) is the new one's (the launcher's and the engine's first
    lines, such as vLLM's platform detection before its banner), so its clock never starts at
    the previous one's crash. The parts keep the file's line numbers (``NumberedLines``; a
    plain list is numbered from 0), so every line a reading quotes is the file's.

    ``prefix``: the file's repeated prefix (``logtext.repeated_prefix`` of its first lines)
    when ``lines`` are a later part of it (``serve``'s watcher holds a file's lines from its
    first unfinished start-up on), so that the part is cut as the whole file is; ``reader``:
    ``engines.identify_log`` of ``lines`` when the caller knows it already (the watcher asks
    it once, not at every cut). By default both are found from ``lines``."""
    from coldscope.engines import (
        FAILED,
        OWN_LINE,
        READY,
        START_PREFIX,
        follow_boundary,
        identify_log,
    )
    numbered = lines if isinstance(lines, NumberedLines) else NumberedLines(lines)
    if reader is ...:
        reader = identify_log(numbered)
    if reader is None:
        return [StartupLines(numbered)]
    from coldscope.capture.logtext import repeated_prefix, without_prefixes
    if prefix is ...:
        prefix = repeated_prefix(numbered)
    cuts, ends, failed = [0], [], []
    readers = [reader]  # the adapter of each start-up, beside its first line in ``cuts``
    arg_errors: dict[int, bool] = {}
    begun = ended = switched = False
    usage = -1  # the last argparse "usage:" line of a launch not yet begun
    for i, line in enumerate(numbered):
        if not line:
            continue
        text = without_prefixes(line, prefix)
        if not begun and not ended and _USAGE.search(text):
            usage = i
        elif usage >= 0 and not ended and _ARG_ERROR.search(text):
            ends.append(i)
            failed.append(True)
            arg_errors[i] = True
            ended, begun = True, True
            continue
        if ended:  # the next launch may be another engine's: every adapter is asked
            kind, other = follow_boundary(text, None)
            if kind is not None and kind.startswith(START_PREFIX) and other is not None:
                switched, reader = other is not reader, other
        else:
            kind = reader.startup_boundary(text)
        if kind is None or kind == OWN_LINE:
            continue
        if kind.startswith(START_PREFIX):
            if ended:
                cuts.append(_first_line(numbered, cuts[-1], ends[-1], i, failed[-1], prefix,
                                        reader, switched))
                readers.append(reader)
                ended = False
                usage = -1
            begun = True
        elif kind == READY or (kind == FAILED and begun):
            # (a failure-like line before any start line is not a start-up's)
            if not ended:
                ends.append(i)
                failed.append(kind == FAILED)
            ended = True
    bounds = list(zip(cuts, [*cuts[1:], len(numbered)], strict=True))
    out = []
    for k, (a, b) in enumerate(bounds):
        tail = b - 1 - ends[k] if k < len(ends) else 0
        loose = None
        if k + 1 < len(bounds):
            last = _last_leftover(numbered, a, ends[k], b, failed[k], prefix)
            loose = b - 1 - last if last is not None else None
        bad = ends[k] - a if k < len(ends) and ends[k] in arg_errors else None
        end = ends[k] - a if k < len(ends) else None
        out.append(StartupLines(numbered.part(a, b), tail, loose, bad, end,
                                k < len(ends) and failed[k], readers[k]))
    return out


#: argparse's report of a bad command line: ``usage: PROG ...`` then ``PROG: error: ...``.
_USAGE = re.compile(r"(?:^|\s)usage: \S")
_ARG_ERROR = re.compile(r"(?:^|\s)[\w.\-]+(?: [\w.\-]+)?: error: \S")


def may_cut(line: str) -> bool:
    """Whether ``line`` is argparse's ``usage:`` or ``PROG: error:`` line, which ``startups``
    may end a start-up at though no engine reads it (a follower, ``serve``'s watcher, asks
    ``startups`` again after such a line, as after an engine's start, ready or failure line)."""
    return ("usage: " in line and _USAGE.search(line) is not None) or (
        ": error: " in line and _ARG_ERROR.search(line) is not None)  # (substrings first: cheap)
#: A service manager announcing a launch (systemd's "Started vllm.service - ...", "Starting ...").
_LAUNCH = re.compile(r"\bsystemd\[\d+\]: Start(?:ed|ing) ")
#: A service manager's line on a unit, any other than a launch: a stop, an exit, a restart job.
_SERVICE = re.compile(r"\bsystemd\[\d+\]: ")
#: The process a line names: an engine's process tag ``(Name pid=N)``, journald's ``unit[N]:``
#: (short and short-iso formats).
_PID = re.compile(r"\bpid=(\d+)\)|^\S+ [ \d]\d \d\d:\d\d:\d\d \S+ [\w.@\-/]+\[(\d+)\]: "
                  r"|^\S+ \S+ [\w.@\-/]+\[(\d+)\]: ")
#: What a crash prints: a traceback's lines (its header, indented frames and source, the
#: caret marks, the exception), multiprocessing's "Process Name:", a Python warning, an error.
_CRASH = re.compile(
    r"Traceback \(most recent call last\)|^\s|^\^+$|^Process [\w\-]+:$"
    r"|^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning)\b"
    r"|\.py:\d+: \w*Warning\b|^\[?(?:ERROR|CRITICAL)\b")
#: An engine's process tag before a message (``(EngineCore_DP0 pid=N) ``).
_LEADING = re.compile(r"^(?:\([\w\-]+(?:\s+rank=\d+)?\s+pid=\d+\) ?)?")


def _message(line: str, prefix: LinePrefix | None = None) -> str:
    """``line`` without a collector's prefix, the file's repeated one (``prefix``) and an
    engine's process tag: what the crash patterns (``_CRASH``) look at."""
    from coldscope.capture.logtext import without_prefixes
    text = without_prefixes(line, prefix)
    m = _LEADING.match(text)
    return text[m.end():] if m else text


def _pids(lines: Iterable[str]) -> set[str]:
    """The processes (``_PID``) that ``lines`` name."""
    out = set()
    for line in lines:
        m = _PID.search(line)
        if m:
            out.add(next(g for g in m.groups() if g))
    return out


def _leftover(line: str, pids: set[str], crashed: bool, prefix: LinePrefix | None) -> bool:
    """Whether ``line``, after a start-up ended, is that start-up's: one of its processes'
    (``pids``), a service manager's line other than a launch, or, after a crash
    (``crashed``), a crash's (``_CRASH``: after a ready line a warning or a traceback is as
    likely the next launch's)."""
    if _SERVICE.search(line):  # (systemd's own pid is every unit's: its words tell)
        return not _LAUNCH.search(line)
    m = _PID.search(line)
    if m and next(g for g in m.groups() if g) in pids:
        return True
    return crashed and _CRASH.search(_message(line, prefix)) is not None


def _last_leftover(lines: NumberedLines, begin: int, end: int, stop: int,
                   crashed: bool, prefix: LinePrefix | None) -> int | None:
    """The last of ``lines[end + 1:stop]`` that is the start-up ``lines[begin:end + 1]``'s
    (``_leftover``; ``crashed``: it ended failed; ``prefix``: the file's repeated one); None
    when none is."""
    pids = _pids(lines[begin:end + 1])
    return next((i for i in range(stop - 1, end, -1)
                 if lines[i] and _leftover(lines[i], pids, crashed, prefix)), None)


def _first_line(lines: NumberedLines, begin: int, end: int, start: int, failed: bool,
                prefix: LinePrefix | None, reader: LogReader, switched: bool = False) -> int:
    """Where the start-up whose start line is ``lines[start]`` (an engine's, ``reader``'s)
    begins, the one before it (from ``lines[begin]``) having ended at ``lines[end]``: at a
    launch's announcement after the previous start-up's last own line (a service manager's,
    ``_LAUNCH``; argparse's ``usage:``; the engine's process starting, ``engines.LAUNCH``:
    vLLM's platform detection before its banner); after a failed one, right after that line;
    when the new start-up is another engine's (``switched``), at the first line of those that
    engine claims as its own (a container's version banner); else at the start line."""
    from coldscope.capture.logtext import without_prefixes
    from coldscope.engines import LAUNCH
    last = _last_leftover(lines, begin, end, start, failed, prefix)
    after = end if last is None else last
    if switched:
        own = reader.first_own_line(list(lines[after + 1:start]))
        if own is not None:
            return after + 1 + own
    announced = next((i for i in range(after + 1, start)
                      if lines[i] and (_LAUNCH.search(lines[i]) or _USAGE.search(lines[i])
                                       or reader.startup_boundary(
                                           without_prefixes(lines[i], prefix)) == LAUNCH)),
                     None)
    if announced is not None:
        return announced
    return after + 1 if failed else start


def _read_startups(lines: Sequence[str], name: str,
                   ) -> Iterator[tuple[NumberedLines, Run | None, str | None, LogFacts | None]]:
    """(lines, run, None, facts) or (lines, None, why refused, None) per start-up of
    ``lines``, runs named ``name`` (``name#k`` when there are several); ``facts`` are the
    findings' facts of the same reading.

    Lines between two start-ups (``StartupLines.tail``) are read with the earlier one when
    they leave its reading as it is without them (a restarted server's requests and
    shutdown: its serving life, after its ready line). Lines after a start-up's end cannot
    change that start-up, so when they do (its clock goes back, another engine's lines make
    it another engine's log, its stages change) they are the next start-up's first lines,
    printed before its start line, as when two logs are appended to one another, and open
    it instead. A restart whose first lines neither change the earlier reading nor carry an
    earlier clock stays split at its start line: its bootstrap is then timed from that line."""
    parts = startups(lines)
    carried = NumberedLines()
    for k, part in enumerate(parts, 1):
        tag = f"#{k}" if len(parts) > 1 else ""
        read = read_startup_lines(part, carried, name + tag, log=lines, last=k == len(parts))
        carried = read.carried
        yield read.lines, read.run, read.refusal, read.facts


@dataclass(frozen=True)
class StartupReading:
    """One start-up read as ``parse`` reads it (``read_startup_lines``): the lines it was
    read from, its run or why it was refused, the findings' facts of that reading, and the
    lines that turned out to be the next start-up's first lines (``carried``)."""

    lines: NumberedLines
    run: Run | None
    refusal: str | None
    facts: LogFacts | None
    carried: NumberedLines


def read_startup_lines(part: StartupLines, carried: NumberedLines, name: str, *,
                       log: Sequence[str], last: bool, cut_only: bool = False,
                       ) -> StartupReading:
    """One start-up of ``startups``, read: ``carried`` (the lines the start-up before it gave
    up, ``StartupReading.carried``) and its own lines, its run named ``name``; ``log`` is the
    file's lines held (whose engine a launch that died at argument parsing is given);
    ``last``: no start-up follows it (yet), so its lines after its end stay with it. One
    function for ``parse`` and ``serve``'s watcher, so both store the same start-up alike.

    ``cut_only``: read only where the start-up's lines end depends on its reading (lines
    it may give the next start-up) or no engine's reading gives its run (a launch that died
    at argument parsing); otherwise the reading's ``run``, ``refusal`` and ``facts`` are None,
    and the caller reads ``lines`` itself (``serve`` does, in its storing thread)."""
    body = carried.then(part.lines)
    if cut_only and part.bad_arguments is None and (last or not part.movable):
        return StartupReading(body, None, None, None, NumberedLines())
    run, refusal, facts = _read(body, name, part.reader)
    if run is None and part.bad_arguments is not None:
        run = _bad_arguments(log, body, part.bad_arguments - len(body) + len(part.lines), name)
    rest = NumberedLines()
    if part.movable and not last:
        head = body.part(None, -part.movable)
        alone, _, alone_facts = _read(head, name, part.reader)
        if alone is not None and (run is None or _reading(run) != _reading(alone)):
            body, run, facts, rest = head, alone, alone_facts, body.part(-part.movable)
    return StartupReading(body, run, None if run is not None else refusal, facts, rest)


def _bad_arguments(log: Sequence[str], lines: NumberedLines, at: int, name: str) -> Run | None:
    """A launch that died at argument parsing (``lines[at]``: argparse's ``PROG: error:``), as
    the failed run of the log's engine (``engines.identify_log`` of the whole ``log``): it
    printed nothing an engine reads, so no engine's reading gives one. None when no engine
    claims the log."""
    import datetime as dt

    from coldscope.core.records import EngineInfo, Tool
    from coldscope.core.version import __version__
    from coldscope.engines import identify_log
    from coldscope.ingest.assemble import TAIL_LINES
    engine = identify_log(log)
    if engine is None or not 0 <= at < len(lines):
        return None
    from coldscope.capture.logtext import repeated_prefix
    message = _message(lines[at], repeated_prefix(lines)).strip()
    return Run(id=name, status="failed", cache="unknown", origin="log",
               reason=f"died at argument parsing: {message[:200]} (line "
                      f"{lines.numbers[at] + 1})",
               started_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
               tool=Tool(version=__version__), engine=EngineInfo(name=engine.name),
               log_tail="\n".join(lines[-TAIL_LINES:]),
               notes=["the launch printed no version line: its engine is the log's"])


def _reading(run: Run) -> tuple[Any, ...]:
    """What a start-up's log says of it: the outcome, the engine and the timeline."""
    return (run.status, run.reason, run.engine.name, run.engine.version, run.time_to_ready_s,
            run.stages)


def _read(lines: NumberedLines, name: str, reader: LogReader | None = None,
          ) -> tuple[Run | None, str | None, LogFacts | None]:
    """``assemble.read_run`` of ``lines`` (the run and its facts) by ``reader``, the adapter
    ``startups`` identified, or why it refused them."""
    from coldscope.engines import LogEngine
    from coldscope.ingest.assemble import read_run
    try:
        run, facts = read_run(lines, name=name,
                              engine=reader if isinstance(reader, LogEngine) else None)
    except ColdscopeError as exc:
        return None, str(exc), None
    return run, None, facts


def _with_log_facts(run: Run, lines: Sequence[str], source: LogSource,
                    facts: LogFacts | None, *, cut: int = 0) -> Run:
    """The model the engine's log names (the facts of the run's own engine's reading), the
    file read, and a note when lines were cut at ``MAX_LINE_BYTES``."""
    from coldscope.core.records import ModelRef
    update: dict[str, Any] = {}
    if source.path is not None:
        update["log_path"] = str(source.path)
    if run.model.path is None and run.model.name is None:
        from coldscope.engines import LogFacts as Facts
        path = facts.model if facts is not None and facts != Facts() else None
        if path:
            update["model"] = ModelRef(path=path, name=path.rstrip("/").rsplit("/", 1)[-1])
    if cut:
        update["notes"] = [*run.notes, f"{cut} line{'s' if cut > 1 else ''} longer than "
                           f"{MAX_LINE_BYTES:,} bytes: only their first {MAX_LINE_BYTES:,} "
                           "bytes were read"]
    return run.evolve(**update) if update else run


# -- the fleet summary --------------------------------------------------------------------------

#: What the summary gives per group: every bucket, then time to ready.
SUMMARY_KEYS: tuple[str, ...] = (*BUCKETS, "time_to_ready")
#: Runs a group needs before its p50 and p90 say more than its runs do: of one run, both are
#: that run's own figures (the JSON keeps them, with the count; the table draws them from two).
MIN_SUMMARY_RUNS = 2


@dataclass(frozen=True)
class FleetGroup:
    """The ``ok`` runs of one engine, engine version and model: how many, and per bucket (and
    time to ready) the p50 and p90 over the runs that know it, with that count."""

    engine: str | None
    version: str | None
    model: str | None
    count: int
    stats: dict[str, tuple[float, float, int] | None]

    @property
    def summarised(self) -> bool:
        """Whether the group has ``MIN_SUMMARY_RUNS`` runs, so that its percentiles are more
        than one run's figures."""
        return self.count >= MIN_SUMMARY_RUNS

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
