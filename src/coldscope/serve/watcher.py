"""Follow engine log files as they are written and cut them into start-ups.

A fleet writes one log per replica (a pod's log file, a systemd unit's journal export, a
terminal redirected to a file). The watcher polls the files and directories it is given, reads
what was appended since the last poll, and runs each replica's lines through a small state
machine that recognises where a start-up begins, when it became ready, and when it failed.
What a line *means* comes from the engine adapters (``Engine.startup_boundary``, asked through
:func:`coldscope.engines.startup_boundary`), the same package ``coldscope parse`` reads logs
with; this module knows no engine and only decides where one start-up's lines begin and end.

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
many polls, never in one), lines are cut at ``MAX_LINE_BYTES``, one start-up holds at most
``MAX_STARTUP_LINES`` / ``MAX_STARTUP_BYTES``, at most ``MAX_FILES`` files are followed, and the
text held for all running start-ups together is kept under ``max_held_bytes`` (the biggest
running start-up is failed past it). The polling thread holds its lock only while it polls; what
HTTP handlers ask (``running()``) is a snapshot published after each poll, so a slow poll never
makes ``/metrics`` wait.

A start-up begins at a file's first line, or — after the previous one finished — at the next
line an engine says opens a start-up (for vLLM: the API server's version banner or the engine's
``Initializing … LLM engine (vX)`` line). It is *running* until a line an engine says shows it
ready (vLLM: ``Application startup complete``) or failed (vLLM: ``EngineCore failed to
start``), a second start line of the same kind (the replica restarted), or ``timeout`` seconds
without becoming ready.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from coldscope import engines
from coldscope.engines import FAILED, READY, START_PREFIX
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import open_regular

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
#: Most bytes read from a file that was just rotated or deleted (its last words).
MAX_DRAIN_BYTES = 16 * 1024 * 1024
#: Most files followed at once (more are logged once and left alone).
MAX_FILES = 4096
#: Default bound on the text all running start-ups hold together.
MAX_HELD_BYTES = 256 * 1024 * 1024
#: Seconds a followed file may be missing (a rotation's gap) before it is forgotten.
FORGET_AFTER_S = 30.0


def classify(line: str) -> str | None:
    """What one line means to the state machine: ``"start:<what>"``, ``"ready"``,
    ``"failed"`` or None, as the first registered engine that knows the line says."""
    return engines.startup_boundary(line)


@dataclass
class Startup:
    """One start-up seen in one replica's log: its lines so far and where it stands.

    ``first_seen``/``last_line_at`` are on the watcher's clock (monotonic seconds);
    ``started_wall`` is the wall-clock time the first line was read. ``confirmed`` becomes
    True once a line shows it is an engine start-up (a start or ready line); unconfirmed
    text (a file that is not an engine log) is never reported or stored.
    """

    replica: str
    path: str
    seq: int
    first_seen: float
    started_wall: float
    lines: list[str] = field(default_factory=list)
    last_line_at: float = 0.0
    confirmed: bool = False
    kinds: set[str] = field(default_factory=set)
    status: str = "running"
    reason: str | None = None
    size: int = 0
    finished_at: float | None = None

    @property
    def elapsed(self) -> float:
        return (self.finished_at if self.finished_at is not None else self.last_line_at) - \
            self.first_seen


class _Stream:
    """The start-up state machine of one replica (one watched path)."""

    def __init__(self, replica: str, path: str, timeout: float,
                 on_finish: Callable[[Startup], None], on_start: Callable[[Startup], None]):
        self.replica, self.path, self.timeout = replica, path, timeout
        self.on_finish, self.on_start = on_finish, on_start
        self.current: Startup | None = None
        self.seq = 0
        self.done = False  # the last start-up finished: wait for a start line
        self.foreign = False  # not an engine log: stop reading the file

    def held(self) -> int:
        """Bytes of text this stream holds (its running or unconfirmed start-up)."""
        return self.current.size if self.current is not None else 0

    def _begin(self, now: float) -> Startup:
        self.seq += 1
        self.current = Startup(self.replica, self.path, self.seq, now, time.time(),
                               last_line_at=now)
        return self.current

    def _finish(self, s: Startup, status: str, reason: str | None, now: float) -> None:
        s.status, s.reason, s.finished_at = status, reason, now
        # The stream lets go of the lines: the storing side owns them now.
        self.current, self.done = None, True
        if s.confirmed:
            self.on_finish(s)

    def feed(self, line: str, now: float) -> None:
        if self.foreign:
            return
        kind = classify(line)
        cur = self.current
        if cur is None:
            if self.done and (kind is None or not kind.startswith(START_PREFIX)):
                return  # after ready: requests, shutdown; nothing to do until the next start
            cur = self._begin(now)  # a file's first line opens its first start-up
        elif kind is not None and kind.startswith(START_PREFIX) and kind in cur.kinds:
            self._finish(cur, "failed", "a new start-up began before this one became ready",
                         now)
            cur = self._begin(now)
        cur.lines.append(line)
        cur.size += len(line)
        cur.last_line_at = now
        if kind is not None and kind.startswith(START_PREFIX):
            cur.kinds.add(kind)
            if not cur.confirmed:
                cur.confirmed = True
                self.on_start(cur)
        elif kind == READY:
            if not cur.confirmed:
                cur.confirmed = True
                self.on_start(cur)
            self._finish(cur, "ok", None, now)
        elif kind == FAILED and cur.confirmed:
            self._finish(cur, "failed", f"the log says so: {line.strip()[:300]}", now)
        elif not cur.confirmed:
            if len(cur.lines) >= MAX_UNCONFIRMED_LINES or cur.size >= MAX_UNCONFIRMED_BYTES:
                # not an engine log: forget the text and stop reading the file
                self.current, self.foreign = None, True
        elif len(cur.lines) >= MAX_STARTUP_LINES or cur.size >= MAX_STARTUP_BYTES:
            self._finish(cur, "failed", f"no ready line in {len(cur.lines)} lines "
                                        f"({cur.size} bytes)", now)

    def check_timeout(self, now: float) -> None:
        cur = self.current
        if cur is not None and cur.status == "running" and cur.confirmed and \
                now - cur.first_seen > self.timeout:
            self._finish(cur, "failed", f"not ready {self.timeout:g} s after its first line",
                         now)

    def running(self) -> Startup | None:
        cur = self.current
        return cur if cur is not None and cur.status == "running" and cur.confirmed else None

    def reset(self) -> None:
        """The file was truncated or replaced: what it shows next is judged afresh."""
        if self.foreign:
            self.foreign, self.current, self.done = False, None, False


class _Tail:
    """An open file being followed, and how far it has been read."""

    def __init__(self, path: str, stream: _Stream, report: Callable[[str], None]):
        self.path, self.stream, self.report = path, stream, report
        self.fh: IO[bytes] | None = None
        self.ident: tuple[int, int] | None = None
        self.pos = 0
        self.buf = b""
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
        self.fh, self.ident, self.pos, self.buf = None, None, 0, b""

    def _problem(self, message: str) -> None:
        if self.error != message:
            self.report(message)
            self.error = message

    def _read(self, now: float) -> int:
        """Read one slice of what was appended; feed complete lines. Returns the bytes read."""
        assert self.fh is not None
        try:
            chunk = os.pread(self.fh.fileno(), MAX_READ_BYTES, self.pos)
        except OSError as exc:
            self._problem(f"cannot read {self.path}: {exc.strerror}")
            return 0
        if not chunk:
            return 0
        self.pos += len(chunk)
        data = self.buf + chunk
        parts = data.split(b"\n")
        self.buf = parts.pop()
        if len(self.buf) > MAX_LINE_BYTES:  # a line with no end in sight: cut it here
            parts.append(self.buf)
            self.buf = b""
        for raw in parts:
            self.stream.feed(raw[:MAX_LINE_BYTES].decode("utf-8", "replace"), now)
            if self.stream.foreign:
                self.buf = b""
                log.warning("%s is not an engine log (no engine start line in its first %d "
                            "lines or %d bytes); no longer read", self.path,
                            MAX_UNCONFIRMED_LINES, MAX_UNCONFIRMED_BYTES)
                break
        return len(chunk)

    def _drain(self, now: float) -> None:
        """The last words of a file that was rotated or deleted, within a bound."""
        read = 0
        while self.fh is not None and not self.stream.foreign and read < MAX_DRAIN_BYTES:
            n = self._read(now)
            if n == 0:
                break
            read += n

    def poll(self, now: float) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self.gone_since is None:
                self.gone_since = now
            if self.fh is not None:
                self._drain(now)  # what the writer wrote before the rename / deletion
                self.close()
                log.warning("%s is gone (deleted or rotated); waiting for it to reappear",
                            self.path)
            return
        except OSError as exc:
            self._problem(f"cannot stat {self.path}: {exc.strerror}")
            return
        self.gone_since = None
        ident = (st.st_dev, st.st_ino)
        if self.fh is not None and ident != self.ident:
            self._drain(now)  # rotated: finish the old file, then follow the new one
            self.close()
            self.stream.reset()
            log.info("%s was rotated; following the new file", self.path)
        if self.fh is None:
            if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block the open
                self._problem(f"{self.path} is not a regular file; not followed")
                return
            try:
                self.fh = open_regular(self.path, "log")  # O_NONBLOCK + fstat
            except ColdscopeError as exc:
                self._problem(f"{exc}; not followed")
                return
            self.ident, self.pos, self.buf, self.error = ident, 0, b"", None
        elif st.st_size < self.pos:
            log.info("%s was truncated; reading it again from the start", self.path)
            self.pos, self.buf = 0, b""
            self.stream.reset()
        if st.st_size > self.pos and not self.stream.foreign:
            self._read(now)  # one bounded slice per poll: the rest on the next polls


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
        followed = {t.ident for t in self.tails.values() if t.ident is not None}
        # Inodes once followed under another name (rotated files, x.log -> x.log.1): they are
        # not new replicas. Forgotten once no file has them, so a reused inode is new again.
        self._retired |= {i for t in self.tails.values() for i in t.retired}
        present: set[tuple[int, int]] = set()
        for path in self._files():
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
            if path in self.tails:
                continue
            if ident is None and path not in self.targets:
                continue
            if ident is not None and (ident in followed or ident in self._retired):
                continue
            if ident is not None and not stat.S_ISREG(st.st_mode):
                # a FIFO would block whoever opens it; a device or socket has no log to read
                self._report(f"{path} is not a regular file; not followed")
                continue
            if len(self.tails) >= MAX_FILES:
                self._report(f"more than {MAX_FILES} files to follow; {path} and later ones "
                             "are not followed")
                break
            stream = _Stream(replica_name(path, self.replica_label), path, self.timeout,
                             lambda s: self._guard(self._on_finish, s),
                             lambda s: self._guard(self._on_start, s))
            self.tails[path] = _Tail(path, stream, self._report)
        self._retired &= present
        for t in self.tails.values():
            t.retired.clear()

    # -- polling -------------------------------------------------------------------------------

    def poll_once(self) -> None:
        """One pass: discover files (every ``scan_interval``), read one bounded slice of each
        file's appends, apply timeouts, forget files gone for good, bound the text held."""
        with self._lock:
            now = self.clock()
            if now - self._last_scan >= self.scan_interval:
                self._last_scan = now
                self._scan()
            for tail in list(self.tails.values()):
                try:
                    tail.poll(now)
                except Exception:
                    self.errors += 1
                    log.exception("following %s failed", tail.path)
                tail.stream.check_timeout(now)
                if tail.gone_since is not None and now - tail.gone_since > FORGET_AFTER_S \
                        and tail.path not in self.targets:
                    self._forget(tail, now)
            self._bound_memory(now)
            self._running = tuple(s for t in self.tails.values()
                                  if (s := t.stream.running()) is not None)

    def _forget(self, tail: _Tail, now: float) -> None:
        """A file deleted for good: drop it (a start-up it left running is failed)."""
        tail.close()
        cur = tail.stream.running()
        if cur is not None:
            tail.stream._finish(cur, "failed", "its log file was deleted before it became "
                                               "ready", now)
        del self.tails[tail.path]
        log.info("%s has been gone for %g s; forgotten", tail.path, FORGET_AFTER_S)

    def _bound_memory(self, now: float) -> None:
        """Keep the text all streams hold under ``max_held_bytes``: past it the biggest
        holder's start-up is failed (a running one) or forgotten (text not yet an engine's)."""
        held = {t.path: t.stream.held() for t in self.tails.values()}
        total = sum(held.values())
        while total > self.max_held_bytes:
            path = max(held, key=held.__getitem__)
            stream = self.tails[path].stream
            cur = stream.current
            if cur is None:
                break
            self._report(f"the watched start-ups hold {total} bytes of text, more than "
                         f"{self.max_held_bytes}: {path}'s is dropped")
            if cur.confirmed:
                stream._finish(cur, "failed", f"the watcher's memory bound was reached "
                                              f"({self.max_held_bytes} bytes)", now)
            else:
                stream.current = None
            total -= held.pop(path)

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
