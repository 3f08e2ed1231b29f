"""Follow engine log files as they are written and cut them into start-ups.

A fleet writes one log per replica (a pod's log file, a systemd unit's journal export, a
terminal redirected to a file). The watcher polls the files and directories it is given, reads
what was appended since the last poll, and cuts each replica's lines into start-ups exactly as
``coldscope parse`` cuts a saved file: it holds the lines of the start-up in progress and asks
``ingest.logfiles.startups`` (the one rule for where a start-up begins and ends) what is
complete, and ``ingest.logfiles.read_startup_lines`` reads each one, so that the same start-up
gets the same lines, id and values whichever way it was stored. This module knows no engine:
what a line means comes from the engine adapters (``LogReader.startup_boundary``, asked through
:func:`coldscope.engines.follow_boundary`), and only says when the held lines are worth cutting
again (a start, ready or failure line, argparse's ``usage:``/``error:``).

Why polling and not inotify: it works the same on every filesystem (NFS, overlay, bind mounts
of pod logs), needs no extra dependency, and at the default 0.2 s period costs a few stat calls
per file — well under 1 % of a core for hundreds of files (``benches/bench_serve_watch.py``).

File events handled:

* new files in a watched directory (matching ``--glob``, recursively);
* appends (partial last lines wait for their newline);
* rotation (the path now names another inode: the old file is drained, then the new one is
  read from its start, continuing the replica's start-up);
* truncation (the size fell below what was read: read again from the start);
* deletion or a file that cannot be read: an error is logged once and the watcher goes on; a
  file gone for ``FORGET_AFTER_S`` is forgotten (a start-up it left running is failed);
* a path that is not a regular file (a FIFO, a device, a socket) is never opened: it is skipped
  with one logged line (files are opened with ``O_NONBLOCK`` and checked with ``fstat``);
* text that shows no engine start line within its first ``MAX_UNCONFIRMED_LINES`` lines or
  ``MAX_UNCONFIRMED_BYTES`` bytes is not an engine log: the file is no longer read (until it is
  truncated or replaced).

Bounds: each poll reads at most ``MAX_READ_BYTES`` of each file (a 2 GB file is caught up over
many polls, never in one) and ``MAX_POLL_BYTES`` of all files together (the next poll goes on
where this one stopped, so a burst of new files costs a bounded amount of work per poll and is
caught up over several); lines are cut at ``MAX_LINE_BYTES``; one start-up holds at most
``MAX_STARTUP_LINES`` / ``MAX_STARTUP_BYTES`` (and what follows one stored at its end, until the
next begins, at most twice ``MAX_GAP_LINES``); at most ``MAX_FILES`` files are followed (a file
past them is never followed, and counted in ``dropped``); and the memory all running start-ups
hold together is kept under ``max_held_bytes`` (the biggest running start-up is failed past it,
and counted). A start-up's lines are held as one UTF-8 buffer, and what is counted against
the bound is that buffer's allocation plus the start-up's own objects: memory as measured, not
characters. A half-written last line is not held at all: it stays in the file and is read again
once the file grows. Directories are listed at most every ``scan_interval`` seconds and never
more than a fifth of the time, however many files they hold.

The polling thread holds its lock only while it polls; what HTTP handlers ask (``running()``,
``drops()``) is published after each poll or is a plain count, so a slow poll never makes
``/metrics`` wait.

Where a start-up begins and ends is ``startups``'s rule (its own first line: the launcher's or
the engine's, never the previous one's traceback). It is *running* until its ready line (stored
then), its failure line (stored once the next start-up begins or its log has been quiet for
``SETTLE_S``, with the reason ``parse`` quotes from its traceback), or ``timeout`` seconds
without either (stored as failed). The live-only verdicts (a timeout, a bound, a deleted file)
are the watcher's own reason on ``parse``'s reading of the lines so far.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from coldscope import engines
from coldscope.capture.logtext import PREFIX_SAMPLE, LinePrefix, repeated_prefix
from coldscope.engines import FAILED, READY, START_PREFIX, LogReader
from coldscope.ingest.logfiles import StartupLines, StartupReading, may_cut
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import open_regular

if TYPE_CHECKING:
    from coldscope.capture.logtext import NumberedLines
    from coldscope.core.records import Run

log = logging.getLogger("coldscope.serve.watcher")

#: Longest line kept (bytes); longer ones are cut, so one runaway line cannot exhaust memory.
MAX_LINE_BYTES = 64 * 1024
#: Most lines and bytes one start-up may hold before it is failed as runaway (a real vLLM
#: start-up prints a few hundred lines, a few thousand with DEBUG logging).
MAX_STARTUP_LINES = 200_000
MAX_STARTUP_BYTES = 32 * 1024 * 1024
#: Text before any engine line is read this far at most; past it the file is not an engine
#: log and is no longer followed.
MAX_UNCONFIRMED_LINES = 10_000
MAX_UNCONFIRMED_BYTES = 4 * 1024 * 1024
#: Most bytes read from one file per poll (the rest is read on the next polls).
MAX_READ_BYTES = 1024 * 1024
#: Most bytes read from all files together per poll (about a tenth of a second of reading
#: engine lines here; the files not reached are read first on the next poll).
MAX_POLL_BYTES = 8 * 1024 * 1024
#: Most bytes read from a file that was just rotated or deleted (its last words).
MAX_DRAIN_BYTES = 16 * 1024 * 1024
#: Most files followed at once (a file found past them is never followed: logged, and
#: counted in ``drops()``, once).
MAX_FILES = 4096
#: Default bound on the memory all running start-ups hold together.
MAX_HELD_BYTES = 256 * 1024 * 1024
#: Memory one start-up costs besides its text (its object, the text buffer's header), rounded
#: up from tracemalloc's count (about 700 bytes).
STARTUP_OVERHEAD_BYTES = 1024
#: Seconds a followed file may be missing (a rotation's gap) before it is forgotten.
FORGET_AFTER_S = 30.0
#: Seconds a failed start-up's log must be quiet before it is stored (unless the next start-up
#: begins first): its traceback and its processes' last words, from which ``parse`` quotes
#: the reason, come within a second of its failure line.
SETTLE_S = 5.0
#: Lines held after a start-up stored at its end while the next has not begun (a server's
#: request log): past twice this many, only the last this many are kept. ``startups`` finds
#: the next start-up's first line among them (after the last line that is the previous one's).
MAX_GAP_LINES = 5_000


def classify(line: str) -> str | None:
    """What one line means to the state machine: ``"start:<what>"``, ``"ready"``,
    ``"failed"`` or None, as the first registered engine that knows the line says (for a line
    of a stream whose engine is not known yet)."""
    return engines.startup_boundary(line)


@dataclass(slots=True)
class Startup:
    """One start-up seen in one replica's log: its lines so far and where it stands.

    ``first_seen``/``last_line_at`` are on the watcher's clock (monotonic seconds);
    ``started_wall`` is the wall-clock time the first line was read. ``confirmed`` becomes
    True once a line shows it is an engine start-up (a start or ready line); unconfirmed
    text (a file that is not an engine log) is never reported or stored.

    The lines are held in ``text``, UTF-8, each followed by a newline, and ``lines`` decodes
    them when asked. A list of ``str`` cost a 50 to 80-byte object per line and up to 4 bytes a
    character (one emoji makes its whole line 4 bytes a character): 100 logs of 2,000 one-letter
    and 200 emoji lines each, counted as 2.1 MB of characters, held 9.4 MB (tracemalloc).
    """

    replica: str
    path: str
    seq: int
    first_seen: float
    started_wall: float
    text: bytearray = field(default_factory=bytearray)
    count: int = 0  # lines held
    last_line_at: float = 0.0
    confirmed: bool = False
    status: str = "running"
    reason: str | None = None
    finished_at: float | None = None
    run: Run | None = None
    """``parse``'s reading of the lines (``ingest.logfiles.read_startup_lines``), once
    finished."""

    @property
    def lines(self) -> list[str]:
        """The lines so far (a new list each call; a running start-up's text is copied first,
        as the polling thread may be adding to it)."""
        return bytes(self.text).decode("utf-8", "surrogatepass").split("\n")[:-1]

    @property
    def size(self) -> int:
        """Bytes of text held (UTF-8, newlines included)."""
        return len(self.text)

    def add(self, line: str) -> None:
        self.text += line.encode("utf-8", "surrogatepass")  # exactly ``line`` when decoded
        self.text.append(0x0A)
        self.count += 1

    def memory(self) -> int:
        """Bytes of memory this start-up holds: its text buffer as allocated (growth room
        included) and its own objects."""
        return sys.getsizeof(self.text) + STARTUP_OVERHEAD_BYTES

    @property
    def elapsed(self) -> float:
        return (self.finished_at if self.finished_at is not None else self.last_line_at) - \
            self.first_seen


class _Stream:
    """One replica's log (one watched path) cut into start-ups as ``coldscope parse`` cuts a
    saved file: the same ``ingest.logfiles.startups`` asked of the lines held, the same
    ``read_startup_lines`` reading each start-up, so that a start-up has the same lines, id
    and values whichever way it was stored.

    ``held`` is a file's lines from the first line of its first start-up not yet settled
    on. Whenever a line comes that may end a start-up or open the next (a start, ready or
    failure line, argparse's ``usage:``/``error:``), the held lines are cut again
    (``settle``), once per slice read: every start-up followed by another is complete, and
    is handed over (``on_finish``) unless it was already; the held lines then begin at the
    last one's first line. The last start-up is handed over as soon as it is ready (its
    ready line is its end in ``parse`` too); a failed one once the next begins or its log
    has been quiet for ``SETTLE_S`` (its traceback, whose exception is the reason ``parse``
    quotes, comes after its failure line); one neither ready nor failed after ``timeout``
    seconds, as failed. A start-up handed over at its end stays held (its own lines, then
    at most ``MAX_GAP_LINES`` of what follows) until the next one begins, for ``startups``
    tells where that one's first line is from them."""

    def __init__(self, replica: str, path: str, timeout: float,
                 on_finish: Callable[[Startup], None], on_start: Callable[[Startup], None]):
        self.replica, self.path, self.timeout = replica, path, timeout
        self.on_finish, self.on_start = on_finish, on_start
        self.buffer: Startup | None = None
        self.fed = 0  # lines fed: the file's line number (from 0) of the next line
        self.numbers: range | list[int] = range(0)  # the line number of each held line
        self.seq = 0
        self.stored: int | None = None  # the held start-up's end (index), once handed over
        self.ended = False  # the held lines' last start-up has its ready or failure line
        self.dirty = False  # a line that may cut came since the last ``settle``
        self.skipping = False  # a start-up was given up at a bound: wait for a start line
        self.foreign = False  # not an engine log: stop reading the file
        self.engine: LogReader | None = None  # identified at the first start line
        self.sample: list[str] | None = []  # the file's first lines, until its prefix is known
        self.prefix: LinePrefix | None = None
        self.prefix_of = -1  # how many of ``sample`` ``prefix`` was found from (-1: not yet)
        self.reader: LogReader | None = None  # ``identify_log`` of the held lines, once known

    def _launch(self, line: str) -> tuple[str | None, LogReader | None]:
        """After a start-up ended, a start line of any engine (``startups`` asks every
        adapter there, as the next launch may be another engine's: ``engines.follow_boundary``
        with no engine) and the engine it is of; else (None, the stream's engine)."""
        kind, reader = engines.follow_boundary(line, None)
        if kind is not None and kind.startswith(START_PREFIX) and reader is not None:
            return kind, reader
        return None, self.engine

    @property
    def current(self) -> Startup | None:
        """The start-up being followed: the held lines' last one, until it is handed over."""
        return self.buffer if self.stored is None else None

    def held(self) -> int:
        """Bytes of memory this stream holds (its held lines)."""
        return self.buffer.memory() if self.buffer is not None else 0

    def _begin(self, now: float, lines: NumberedLines | None = None) -> Startup:
        self.seq += 1
        self.buffer = Startup(self.replica, self.path, self.seq, now, time.time(),
                            last_line_at=now)
        self.numbers = range(self.fed, self.fed)
        if lines:
            for line in lines:
                self.buffer.add(line)
            first, last = lines.numbers[0], lines.numbers[-1]
            self.numbers = range(first, last + 1) if last - first + 1 == len(lines) \
                else list(lines.numbers)
        self.stored, self.ended, self.reader = None, False, None
        return self.buffer

    def _held_lines(self) -> NumberedLines:
        """The held lines, numbered by the file's lines (counted since the watcher began
        following the path: after a rotation or truncation, on from the last file's)."""
        from coldscope.capture.logtext import NumberedLines
        assert self.buffer is not None
        return NumberedLines(self.buffer.lines, self.numbers)

    def _add(self, cur: Startup, line: str) -> None:
        cur.add(line)
        if isinstance(self.numbers, list):
            self.numbers.append(self.fed)
        elif self.numbers.stop == self.fed:
            self.numbers = range(self.numbers.start, self.fed + 1)
        else:
            self.numbers = [*self.numbers, self.fed]

    def feed(self, line: str, now: float) -> None:
        if self.foreign:
            return
        kind, self.engine = engines.follow_boundary(line, self.engine)
        if kind is None and self.engine is not None and (self.ended or self.stored is not None):
            kind, self.engine = self._launch(line)
        start = kind is not None and kind.startswith(START_PREFIX)
        if self.skipping:
            if not start:
                self.fed += 1
                return
            self.skipping = False
            self.buffer = None
        cur = self.buffer if self.buffer is not None else self._begin(now)
        self._add(cur, line)
        self.fed += 1
        cur.last_line_at = now
        if self.sample is not None and line.strip():
            self.sample.append(line)
            if len(self.sample) >= PREFIX_SAMPLE:
                self.prefix, self.sample = repeated_prefix(self.sample), None
            else:
                self.prefix_of = -1  # the prefix of fewer lines: found again when asked
        if kind in (READY, FAILED) or may_cut(line) or (
                start and (self.ended or self.stored is not None)):
            self.dirty = True  # a line that may end a start-up, or open one after an end
        if kind is not None:
            if (start or kind == READY) and not cur.confirmed:
                cur.confirmed = True
                if self.stored is None and not self.ended:  # (else announced once cut)
                    self.on_start(cur)
        if not cur.confirmed:
            if cur.count >= MAX_UNCONFIRMED_LINES or cur.size >= MAX_UNCONFIRMED_BYTES:
                # not an engine log: forget the text and stop reading the file
                self.buffer, self.foreign = None, True
        elif self.stored is not None:
            if cur.count - self.stored > 2 * MAX_GAP_LINES:
                self._trim()
        elif cur.count >= MAX_STARTUP_LINES or cur.size >= MAX_STARTUP_BYTES:
            self.give_up(f"no ready line in {cur.count} lines ({cur.size} bytes)", now)

    def _trim(self) -> None:
        """Of what follows a start-up handed over at its end, the last ``MAX_GAP_LINES``."""
        cur = self.buffer
        assert cur is not None and self.stored is not None
        lines, numbers = cur.lines, self.numbers
        cur.text = bytearray()
        cur.count = 0
        for line in [*lines[:self.stored + 1], *lines[-MAX_GAP_LINES:]]:
            cur.add(line)
        self.numbers = [*numbers[:self.stored + 1], *numbers[-MAX_GAP_LINES:]]

    def settle(self, now: float) -> None:
        """Cut the held lines into start-ups (``startups``) after a line that may cut came,
        and hand over what is complete."""
        cur = self.buffer
        if not self.dirty or cur is None or not cur.confirmed:
            return
        self.dirty = False
        from coldscope.capture.logtext import NumberedLines
        from coldscope.ingest.logfiles import read_startup_lines
        lines = self._held_lines()
        parts = self._startups(lines)
        carried = NumberedLines()
        for k, part in enumerate(parts[:-1]):
            read = read_startup_lines(part, carried, self.replica, log=lines, last=False,
                                      cut_only=True)
            carried = read.carried
            if k or self.stored is None:
                self._hand_over(read, part.failed, None, now)
        last = parts[-1]
        if len(parts) > 1:
            new = self._begin(now, carried.then(last.lines))
            new.confirmed = True  # it has its start line
            self.on_start(new)
        self.ended = last.end is not None
        if self.stored is None and self.ended and not last.failed:
            self._settled(last, carried, None, now)

    def _settled(self, part: StartupLines, carried: NumberedLines, reason: str | None,
                 now: float) -> None:
        """Hand over the held lines' last start-up (``part``, after ``carried``), which no
        start-up follows yet; ``reason``: why the watcher gave it up, if it did."""
        from coldscope.ingest.logfiles import read_startup_lines
        held = self.buffer
        assert held is not None
        if part.end is not None and not part.failed and reason is None:
            # ready: its lines to its ready line, whatever else the slice brought
            part = replace(part, lines=part.lines.part(None, part.end + 1), tail=0)
        read = read_startup_lines(part, carried, self.replica, log=self._held_lines(),
                                  last=True, cut_only=True)
        self._hand_over(read, part.end is None or part.failed, reason, now)
        self.stored = len(held.lines) - 1 if part.end is None else len(carried) + part.end

    def _startups(self, lines: NumberedLines) -> list[StartupLines]:
        """``startups`` of the held lines, with the file's prefix and the lines' engine."""
        from coldscope.engines import identify_log
        from coldscope.ingest.logfiles import startups
        if self.reader is None:
            self.reader = identify_log(lines)  # the same once found: its first marker stays
        if self.sample is not None and self.prefix_of < 0:
            self.prefix, self.prefix_of = repeated_prefix(self.sample), len(self.sample)
        return startups(lines, prefix=self.prefix, reader=self.reader)

    def _last(self) -> tuple[StartupLines, NumberedLines]:
        from coldscope.capture.logtext import NumberedLines
        return self._startups(self._held_lines())[-1], NumberedLines()

    def _hand_over(self, read: StartupReading, failed: bool, reason: str | None,
                   now: float) -> None:
        """One start-up's lines (``read.lines``: ``parse``'s) to ``on_finish``: ``failed``
        by its log or by the watcher (``reason``: why, if the watcher gave it up). The storing
        side reads them (``serve.runs.build_run``) unless the cut needed the reading already
        (``read.run``); nothing when that reading found no engine's (``parse`` refuses them
        too)."""
        held = self.buffer
        assert held is not None
        if read.refusal is not None:
            return
        s = Startup(self.replica, self.path, held.seq, held.first_seen, held.started_wall,
                    last_line_at=held.last_line_at, confirmed=True, run=read.run)
        for line in read.lines:
            s.add(line)
        s.text = s.text[:]  # no growth room in a finished start-up waiting to be stored
        if read.run is not None:
            failed = read.run.status != "ok"
        s.status = "failed" if failed or reason is not None else "ok"
        s.reason, s.finished_at = reason, now
        self.on_finish(s)

    def give_up(self, reason: str, now: float) -> None:
        """The start-up being followed is failed for ``reason`` (a bound, a deleted file);
        the held lines are let go, and the next start line opens the next start-up."""
        cur = self.current
        if cur is not None and cur.confirmed:
            part, carried = self._last()
            self._settled(part, carried, reason, now)
        self.buffer, self.stored, self.skipping = None, None, True

    def check_timeout(self, now: float) -> None:
        """A failed start-up is handed over once its log has been quiet for ``SETTLE_S``;
        one neither ready nor failed, ``timeout`` seconds after its first line."""
        cur = self.current
        if cur is None or not cur.confirmed:
            return
        self.settle(now)
        if self.current is None:
            return
        if self.ended and now - cur.last_line_at >= SETTLE_S:
            part, carried = self._last()
            self._settled(part, carried, None, now)
        elif not self.ended and now - cur.first_seen > self.timeout:
            part, carried = self._last()
            self._settled(part, carried, f"not ready {self.timeout:g} s after its first line",
                          now)

    def running(self) -> Startup | None:
        cur = self.current
        return cur if cur is not None and cur.confirmed and not self.ended else None

    def reset(self) -> None:
        """The file was truncated or replaced: what it shows next is judged afresh."""
        self.engine = None
        if self.foreign:
            self.foreign, self.buffer, self.stored = False, None, None


class _Tail:
    """An open file being followed, and how far it has been read.

    ``pos`` is the end of the last complete line fed (where the next read starts); ``end`` is
    how far the file has been looked at (``pos`` plus a half-written last line, which stays in
    the file instead of in memory and is read again once the file grows past ``end``).
    """

    def __init__(self, path: str, stream: _Stream, report: Callable[[str], None]):
        self.path, self.stream, self.report = path, stream, report
        self.fh: IO[bytes] | None = None
        self.ident: tuple[int, int] | None = None
        self.pos = 0
        self.end = 0
        self.error: str | None = None  # the last error logged, so each is logged once
        self.retired: set[tuple[int, int]] = set()  # files this tail followed before rotation
        self.gone_since: float | None = None  # when the path was first found missing

    def close(self) -> None:
        if self.ident is not None:
            self.retired.add(self.ident)
        if self.fh is not None:
            try:
                self.fh.close()
            except OSError:
                pass
        self.fh, self.ident, self.pos, self.end = None, None, 0, 0

    def _problem(self, message: str) -> None:
        if self.error != message:
            self.report(message)
            self.error = message

    def _read(self, now: float) -> int:
        """Read one slice from ``pos``; feed its complete lines. Returns the bytes read."""
        assert self.fh is not None
        try:
            chunk = os.pread(self.fh.fileno(), MAX_READ_BYTES, self.pos)
        except OSError as exc:
            self._problem(f"cannot read {self.path}: {exc.strerror}")
            return 0
        self.end = self.pos + len(chunk)
        complete = chunk.rfind(b"\n") + 1  # bytes of whole lines; what follows waits
        cut = len(chunk) - complete > MAX_LINE_BYTES  # a line with no end in sight: cut it
        start = 0
        # one line at a time, no list of them: a slice of short lines would be a million
        # objects at once
        while start < complete or (cut and start == complete):
            stop = chunk.find(b"\n", start) if start < complete else len(chunk)
            raw = chunk[start:min(stop, start + MAX_LINE_BYTES)]
            start = stop + 1
            self.stream.feed(raw.decode("utf-8", "replace"), now)
            if self.stream.foreign:
                log.warning("%s is not an engine log (no engine start line in its first %d "
                            "lines or %d bytes); no longer read", self.path,
                            MAX_UNCONFIRMED_LINES, MAX_UNCONFIRMED_BYTES)
                self.pos = self.end
                return len(chunk)
        self.pos = self.end if cut else self.pos + complete
        self.stream.settle(now)  # once per slice: what its lines completed is handed over
        return len(chunk)

    def _drain(self, now: float) -> int:
        """The last words of a file that was rotated or deleted, within a bound. Returns the
        bytes read."""
        read = 0
        while self.fh is not None and not self.stream.foreign and read < MAX_DRAIN_BYTES:
            before = self.pos
            read += self._read(now)
            if self.pos == before:  # nothing more, or only a line that never ended
                break
        return read

    def poll(self, now: float) -> int:
        """Follow the path one step (rotation, truncation, deletion, one slice of what was
        appended). Returns the bytes read."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self.gone_since is None:
                self.gone_since = now
            read = 0
            if self.fh is not None:
                read = self._drain(now)  # what the writer wrote before the rename / deletion
                self.close()
                log.warning("%s is gone (deleted or rotated); waiting for it to reappear",
                            self.path)
            return read
        except OSError as exc:
            self._problem(f"cannot stat {self.path}: {exc.strerror}")
            return 0
        self.gone_since = None
        ident = (st.st_dev, st.st_ino)
        read = 0
        if self.fh is not None and ident != self.ident:
            read = self._drain(now)  # rotated: finish the old file, then follow the new one
            self.close()
            self.stream.reset()
            log.info("%s was rotated; following the new file", self.path)
        if self.fh is None:
            if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block the open
                self._problem(f"{self.path} is not a regular file; not followed")
                return read
            try:
                self.fh = open_regular(self.path, "log")  # O_NONBLOCK + fstat
            except ColdscopeError as exc:
                self._problem(f"{exc}; not followed")
                return read
            self.ident, self.pos, self.end, self.error = ident, 0, 0, None
        elif st.st_size < self.end:
            log.info("%s was truncated; reading it again from the start", self.path)
            self.pos = self.end = 0
            self.stream.reset()
        if st.st_size > self.end and not self.stream.foreign:
            read += self._read(now)  # one bounded slice per poll: the rest on the next polls
        return read


def replica_name(path: str, pattern: re.Pattern[str] | None) -> str:
    """The replica a log belongs to: the first group (or the whole match) of ``pattern``
    searched in the path, else the file name without its extension."""
    if pattern is not None:
        m = pattern.search(path)
        if m:
            return m.group(1) if m.groups() else m.group(0)
    name = os.path.basename(path)
    return name[: -len(".log")] if name.endswith(".log") else name


class LogWatcher:
    """Follow ``targets`` (files or directories) and report start-ups.

    ``on_start(startup)`` is called when a start-up is recognised, ``on_finish(startup)`` once
    it is ready or failed (status ``ok`` / ``failed``, with ``reason``). Both are called from
    the polling thread; exceptions they raise are logged, never fatal.
    ``clock`` is injectable so tests can drive time.

    ``drops()`` counts what a bound made the watcher give up, by reason: ``max_files`` (a file
    never followed, ``MAX_FILES`` being followed already) and ``memory`` (a start-up whose text
    was dropped at ``max_held_bytes``: stored as failed with that reason, or, not yet an
    engine's, forgotten).
    """

    def __init__(self, targets: Iterable[str | Path], *, on_finish: Callable[[Startup], None],
                 on_start: Callable[[Startup], None] | None = None, glob: str = "*.log",
                 replica_label: str | None = None, timeout: float = 900.0,
                 interval: float = 0.2, scan_interval: float = 1.0,
                 max_held_bytes: int = MAX_HELD_BYTES,
                 clock: Callable[[], float] = time.monotonic):
        self.targets = [str(t) for t in targets]
        self.glob = glob
        self.replica_label = re.compile(replica_label) if replica_label else None
        self.timeout, self.interval, self.scan_interval = timeout, interval, scan_interval
        self.clock = clock
        self.max_held_bytes = max_held_bytes
        self._running: tuple[Startup, ...] = ()  # published after each poll, read without a lock
        self._on_finish, self._on_start = on_finish, on_start or (lambda s: None)
        self.tails: dict[str, _Tail] = {}
        self._last_scan = -float("inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors = 0
        self._scan_errors: set[str] = set()
        self._retired: set[tuple[int, int]] = set()
        self._dropped = {"max_files": 0, "memory": 0}
        self._unfollowed: set[str] = set()  # paths left out at MAX_FILES, each counted once
        self._scan_took = 0.0  # seconds the last directory scan took (on ``clock``)
        self._next = 0  # where the next poll starts reading, in ``tails`` order

    # -- callbacks, guarded --------------------------------------------------------------------

    def _guard(self, fn: Callable[[Startup], None], s: Startup) -> None:
        try:
            fn(s)
        except Exception:  # a bad start-up must not stop the watcher
            self.errors += 1
            log.exception("handling the start-up of %s (%s) failed", s.replica, s.path)

    # -- discovery -----------------------------------------------------------------------------

    def _files(self) -> list[str]:
        found: list[str] = []
        for target in self.targets:
            if os.path.isdir(target):
                for root, dirs, files in os.walk(target, onerror=self._walk_error):
                    dirs.sort()
                    for name in sorted(files):
                        if fnmatch.fnmatch(name, self.glob):
                            found.append(os.path.join(root, name))
            else:
                found.append(target)  # a file, present or still to come
        return found

    def _walk_error(self, exc: OSError) -> None:
        self._report(f"cannot list {exc.filename}: {exc.strerror}")

    def _report(self, message: str) -> None:
        """Log an error once (a file that stays unreadable is not logged every poll)."""
        if message not in self._scan_errors:
            if len(self._scan_errors) > 10_000:
                self._scan_errors.clear()
            self._scan_errors.add(message)
            self.errors += 1
            log.error("%s", message)

    def _scan(self) -> None:
        # Inodes once followed under another name (rotated files, x.log -> x.log.1): they are
        # not new replicas. Forgotten once no file has them, so a reused inode is new again.
        self._retired |= {i for t in self.tails.values() for i in t.retired}
        followed = {t.ident for t in self.tails.values() if t.ident is not None}
        present = set(followed)
        paths = self._files()
        left_out: list[str] = []
        for path in paths:
            if path in self.tails or path in self._unfollowed:
                continue  # followed (its tail stats it every poll), or never to be
            try:
                st = os.stat(path)
            except FileNotFoundError:
                ident = None
            except OSError as exc:
                self._report(f"cannot stat {path}: {exc.strerror}")
                continue
            else:
                ident = (st.st_dev, st.st_ino)
                present.add(ident)
            if ident is None and path not in self.targets:
                continue
            if ident is not None and (ident in followed or ident in self._retired):
                continue
            if ident is not None and not stat.S_ISREG(st.st_mode):
                # a FIFO would block whoever opens it; a device or socket has no log to read
                self._report(f"{path} is not a regular file; not followed")
                continue
            if len(self.tails) >= MAX_FILES:
                left_out.append(path)
                continue
            stream = _Stream(replica_name(path, self.replica_label), path, self.timeout,
                             lambda s: self._guard(self._on_finish, s),
                             lambda s: self._guard(self._on_start, s))
            self.tails[path] = _Tail(path, stream, self._report)
        if left_out:
            self._unfollowed.update(left_out)
            self._dropped["max_files"] += len(left_out)
            log.warning("%d more files to follow than the %d followed already, %s first; "
                        "they are not followed", len(left_out), MAX_FILES, left_out[0])
        self._unfollowed.intersection_update(paths)
        self._retired &= present
        for t in self.tails.values():
            t.retired.clear()

    # -- polling -------------------------------------------------------------------------------

    def poll_once(self) -> None:
        """One pass: discover files (every ``scan_interval``, and at most a fifth of the
        time), read one bounded slice of each file's appends until ``MAX_POLL_BYTES`` are read
        (the next pass begins with the files this one did not reach), apply timeouts, forget
        files gone for good, bound the memory held."""
        with self._lock:
            now = self.clock()
            # scan_interval 0 asks for a scan every pass (the tests' deterministic mode)
            due = max(self.scan_interval, 4 * self._scan_took) if self.scan_interval > 0 else 0
            if now - self._last_scan >= due:
                self._last_scan = now
                self._scan()
                self._scan_took = self.clock() - now
            tails = list(self.tails.values())
            first = self._next % len(tails) if tails else 0
            budget, reached = MAX_POLL_BYTES, len(tails)
            for n, tail in enumerate(tails[first:] + tails[:first]):
                if budget <= 0:
                    reached = min(reached, n)
                else:
                    try:
                        budget -= tail.poll(now)
                    except Exception:
                        self.errors += 1
                        log.exception("following %s failed", tail.path)
                tail.stream.check_timeout(now)
                if tail.gone_since is not None and now - tail.gone_since > FORGET_AFTER_S \
                        and tail.path not in self.targets:
                    self._forget(tail, now)
            self._next = first + reached
            self._bound_memory(now)
            self._running = tuple(s for t in self.tails.values()
                                  if (s := t.stream.running()) is not None)

    def _forget(self, tail: _Tail, now: float) -> None:
        """A file deleted for good: drop it (a start-up it left running is failed)."""
        tail.close()
        if tail.stream.running() is not None:
            tail.stream.give_up("its log file was deleted before it became ready", now)
        del self.tails[tail.path]
        log.info("%s has been gone for %g s; forgotten", tail.path, FORGET_AFTER_S)

    def _bound_memory(self, now: float) -> None:
        """Keep the memory all streams hold under ``max_held_bytes``: past it the biggest
        holder's start-up is failed (a running one) or forgotten (text not yet an engine's)."""
        held = {t.path: t.stream.held() for t in self.tails.values()}
        total = sum(held.values())
        while total > self.max_held_bytes:
            path = max(held, key=held.__getitem__)
            stream = self.tails[path].stream
            if stream.buffer is None:
                break
            self._report(f"the watched start-ups hold {total} bytes, more than "
                         f"{self.max_held_bytes}: {path}'s is dropped")
            self._dropped["memory"] += 1
            stream.give_up(f"the watcher's memory bound was reached ({self.max_held_bytes} "
                           "bytes)", now)
            total -= held.pop(path)

    def drops(self) -> dict[str, int]:
        """What the bounds made the watcher give up so far, by reason (see the class)."""
        return dict(self._dropped)

    def running(self) -> list[Startup]:
        """Start-ups recognised and not yet ready, failed or timed out, as of the last poll
        (never waits for a poll in progress)."""
        return list(self._running)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.poll_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="coldscope-watch",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)  # a daemon: never waited for longer than this
            self._thread = None
        if self._lock.acquire(timeout=0.1):  # a poll still running: its files close at exit
            try:
                for tail in self.tails.values():
                    tail.close()
            finally:
                self._lock.release()
