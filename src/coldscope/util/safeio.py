"""Reading and writing files a user (or an attacker) hands coldscope, safely.

Every file input goes through here so that the same rules hold everywhere:

- only a **regular file** is read: it is opened with ``O_NONBLOCK`` and checked with ``fstat``
  before a byte is read, so a FIFO, a device or a socket is refused at once instead of hanging;
  a file of the kernel's pseudo file systems (``/proc``, ``/sys``: "regular" files that can
  block, never end or act when read) is refused too, and so is a path with a NUL byte;
- files that others open (SQLite opens a store and its ``-wal``/``-journal``/``-shm``
  companions) and files coldscope keeps beside its own (markers, locks) are checked with
  ``stat``/``lstat`` before anything opens them, never by opening them (``check_regular``,
  ``open_lock``);
- reads are **bounded** while reading (never checked after): ``read_bytes`` reads at most
  ``limit + 1`` bytes and refuses the file when there are more;
- JSON and YAML are parsed **without unbounded recursion or alias expansion**, and numbers are
  checked to be finite (``NaN``/``Infinity`` are refused in input and never written in output);
- outputs are written to a temporary file in the target's directory and renamed over a
  **regular file only**; a failed write leaves the old target as it was. A target that is a
  symbolic link is written through (the file it names is replaced, the link stays) when the
  link leads to a regular file, or to none in an existing directory, by plain links; a link
  that leads through ``/proc`` or ``/sys`` (``/proc/self/fd/1``) or to anything else is
  refused. A device or a pipe is written only when the target names it under ``/dev``
  (``-o /dev/stdout``, ``-o /dev/null``): then the bytes are written to it in place, never
  renamed over it; a block device is never written;
- text from logs and stores is passed through ``clean_text`` before it reaches a terminal or a
  pipe, so a log cannot set a window title or hide a hyperlink; and through ``csv_text`` before
  it becomes a CSV cell, so a spreadsheet shows a label ``=HYPERLINK(...)`` and never runs it.

Limits default to generous sizes for real inputs and can be raised with
``COLDSCOPE_MAX_INPUT_BYTES`` (any file input) where a real input is bigger.
A refusal is a ``ColdscopeError``: one line, exit 2.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    import yaml

#: Default bound for a structured input file (startup model, timings, YAML, config.json, ...).
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: Default bound for a saved engine log (``parse``), read and once decompressed: logs of
#: long-running servers are large, and what ``parse`` holds of one is bounded by this and by
#: its line bound (``ingest.logfiles.MAX_LOG_LINES``), so that the worst log under both
#: parses in under a minute and 500 MB.
MAX_LOG_BYTES = 128 * 1024 * 1024
#: Deepest nesting accepted in a JSON or YAML input.
MAX_NESTING = 200
#: Most digits accepted in one JSON integer literal.
MAX_INT_DIGITS = 100
_INT_BOUND = 10**MAX_INT_DIGITS


def input_limit(default: int = MAX_INPUT_BYTES) -> int:
    """The byte bound for a file input: ``COLDSCOPE_MAX_INPUT_BYTES`` when set, else ``default``."""
    raw = os.environ.get("COLDSCOPE_MAX_INPUT_BYTES")
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ColdscopeError(f"COLDSCOPE_MAX_INPUT_BYTES must be a whole number of bytes, "
                                 f"got {raw!r}") from None
        if value > 0:
            return value
    return default


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words ("a FIFO", "a directory", ...), for one-line errors."""
    return "a regular file" if stat.S_ISREG(mode) else _kind(mode)


def open_regular(path: str | Path, what: str = "file") -> IO[bytes]:
    """Open ``path`` for binary reading if, and only if, it is a regular file that is not a
    ``/proc`` or ``/sys`` pseudo-file (``PSEUDO_ROOTS``).

    ``O_NONBLOCK`` makes opening a FIFO return at once; ``fstat`` on the open descriptor (not
    the name, which could change in between) decides. Raises ``ColdscopeError`` otherwise, and
    for a name with a NUL byte.
    """
    path = Path(path)
    _check_name(path, f"cannot read {what}")
    check_confined(path, what)
    if _pseudo_name(path):
        raise ColdscopeError(f"cannot read {what} {path}: {_PSEUDO}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ColdscopeError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        _check_confined_fd(fd, path, what)  # the name may have been swapped since the check
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ColdscopeError(f"cannot read {what} {path}: {_kind(st.st_mode)}, "
                                 "not a regular file")
        if st.st_dev in _pseudo_devices():
            raise ColdscopeError(f"cannot read {what} {path}: {_PSEUDO}")
        # Back to blocking reads for a regular file (O_NONBLOCK has no effect on them anyway).
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_name(path: str | Path, doing: str) -> None:
    """Refuse a path with a NUL byte (no file can have one; ``os`` functions raise
    ``ValueError`` on it) with one line."""
    if "\0" in str(path):
        raise ColdscopeError(f"{doing} {str(path)!r}: a path cannot hold a NUL byte")


# --- the kernel's pseudo file systems ---------------------------------------------------------

#: Mount points of the pseudo file systems whose "regular" files are not data: a read can
#: block (``/proc/kmsg``), never end, or act (``/sys``, ``/proc/sys``); a write can change the
#: kernel. No coldscope input, store or output is one.
PSEUDO_ROOTS = ("/proc", "/sys")
_PSEUDO = "a file of the kernel's /proc or /sys pseudo file systems, not data; refused"


@functools.cache
def _pseudo_devices() -> frozenset[int]:
    """The devices of ``PSEUDO_ROOTS`` (those that are mount points of their own: a machine
    without /proc mounted must not refuse its root file system)."""
    devices = set()
    try:
        root = os.stat("/").st_dev
    except OSError:
        return frozenset()
    for top in PSEUDO_ROOTS:
        with contextlib.suppress(OSError):
            dev = os.stat(top).st_dev
            if dev != root:
                devices.add(dev)
    return frozenset(devices)


def _under_pseudo_root(name: str) -> bool:
    return any(name == top or name.startswith(top + "/") for top in PSEUDO_ROOTS)


def _pseudo_name(path: str | Path) -> bool:
    """Whether ``path``, its links followed as text, names a file under ``PSEUDO_ROOTS``, or
    (followed by the kernel, which also follows ``/proc``'s magic links) one on their
    devices. Only ``stat``, never an open."""
    if _under_pseudo_root(os.path.realpath(path)):
        return True
    try:
        return os.stat(path).st_dev in _pseudo_devices()
    except OSError:
        return False


def _link_chain(path: str | Path, limit: int = 40) -> list[str]:
    """Every name ``path`` passes through as its final component's links are followed one at
    a time (``path`` itself first, absolute), each as written and with its directory resolved:
    a link whose chain goes through ``/proc/self/fd/1`` shows that name, where the result of
    ``os.path.realpath`` would not (it follows ``/proc``'s magic links as plain text)."""
    current = os.path.normpath(os.path.abspath(path))
    chain = []
    for _ in range(limit):
        head, tail = os.path.split(current)
        chain += [current, os.path.join(os.path.realpath(head), tail)]
        try:
            target = os.readlink(current)
        except OSError:  # not a link (or missing): the end of the chain
            return chain
        current = os.path.normpath(os.path.join(head, target))
    return chain


def check_regular(path: str | Path, what: str = "file", *,
                  follow: bool = True) -> os.stat_result | None:
    """``path``'s ``stat`` when it is a regular file (not a pseudo-file), None when it does not
    exist; else a one-line ``ColdscopeError``. Only ``stat`` (``lstat`` when not ``follow``:
    then a symbolic link is refused too) — never an open, which blocks on a FIFO. For files that
    others open (SQLite: a store and its companions) or that coldscope creates beside its own."""
    _check_name(path, f"cannot open {what}")
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ColdscopeError(f"cannot open {what} {path}: {exc.strerror or exc}") from None
    if not follow and stat.S_ISLNK(st.st_mode):
        raise ColdscopeError(f"cannot open {what} {path}: it is a symbolic link, not a regular "
                             "file")
    if not stat.S_ISREG(st.st_mode):
        raise ColdscopeError(f"cannot open {what} {path}: it is {_kind(st.st_mode)}, not a "
                             "regular file")
    if st.st_dev in _pseudo_devices() or _under_pseudo_root(os.path.realpath(path)):
        raise ColdscopeError(f"cannot open {what} {path}: {_PSEUDO}")
    return st


def open_lock(path: str | Path, what: str = "lock file") -> int:
    """A descriptor on the lock file ``path`` (made if absent, mode 0o644), opened read-write
    for ``flock``: only a regular file that is not a symbolic link. ``O_NONBLOCK`` and
    ``O_NOFOLLOW`` make a FIFO, a device or a link planted there fail at once instead of
    blocking (or opening ``/dev/zero``); ``fstat`` on the descriptor decides."""
    check_regular(path, what, follow=False)
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise ColdscopeError(f"cannot open {what} {path}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_dev in _pseudo_devices():
        os.close(fd)
        why = _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else "a pseudo-file"
        raise ColdscopeError(f"cannot open {what} {path}: it became {why} while it was "
                             "opened; refused")
    os.set_blocking(fd, True)
    return fd


# --- confinement ------------------------------------------------------------------------------

#: (roots after resolving, what to call them) while inside ``confined``; None elsewhere.
_CONFINED: ContextVar[tuple[tuple[str, ...], str] | None] = ContextVar("coldscope_confined",
                                                                       default=None)


@contextlib.contextmanager
def confined(roots: Iterable[str | Path], name: str = "--model-root") -> Iterator[None]:
    """Within this block (this thread or task only), ``open_regular`` — and so every bounded
    read here — refuses a file that does not lie inside one of ``roots`` once symbolic links
    are resolved, before anything of it is read. ``coldscope serve`` runs the work of a
    request under its ``--model-root``s, so a link or an index entry that points outside a
    root can make no byte (and no size) of the outside file reach an answer."""
    token = _CONFINED.set((tuple(os.path.realpath(r) for r in roots), name))
    try:
        yield
    finally:
        _CONFINED.reset(token)


def _inside(real: str, roots: tuple[str, ...]) -> bool:
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def check_confined(path: str | Path, what: str = "file") -> None:
    """Refuse ``path`` when a ``confined`` block is active and ``path`` resolves outside it.
    The message names the path as given, never anything read from it."""
    state = _CONFINED.get()
    if state is not None and not _inside(os.path.realpath(path), state[0]):
        raise ColdscopeError(f"{what} {path} lies outside every {state[1]}; not read")


def _check_confined_fd(fd: int, path: Path, what: str) -> None:
    state = _CONFINED.get()
    if state is None:
        return
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: the check on the name before opening stands
        return
    if not _inside(real, state[0]):
        raise ColdscopeError(f"{what} {path} lies outside every {state[1]}; not read")


def is_regular(path: str | Path) -> bool:
    """True when ``path`` (followed through links) is a regular file; never blocks."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_bytes(path: str | Path, *, limit: int | None = None, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (default ``input_limit()``)."""
    limit = input_limit() if limit is None else limit
    with open_regular(path, what) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ColdscopeError(f"{what} {path} is larger than {limit} bytes; refused "
                             "(raise the bound with COLDSCOPE_MAX_INPUT_BYTES)")
    return data


def read_text(path: str | Path, *, limit: int | None = None, what: str = "file") -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes."""
    data = read_bytes(path, limit=limit, what=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ColdscopeError(f"{path}: not a text file ({exc.reason} at byte {exc.start})") \
            from None


# --- structured text --------------------------------------------------------------------------

#: A JSON string, escapes included (unrolled: one C-level scan, no backtracking per char).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _depth_ok(text: str, limit: int = MAX_NESTING) -> bool:
    """A cheap upper bound on JSON nesting (an unterminated string's brackets still count; an
    over-estimate only refuses absurd inputs, which is the point). Strings and everything but
    brackets are cut out by regular expressions and the running depth is summed by numpy,
    where a Python loop over the characters took 32 s for 40 MB."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return len(brackets) <= limit or _max_depth(brackets) <= limit


def _max_depth(brackets: str, chunk: int = 1 << 22) -> int:
    """The deepest running sum of a string of brackets (opening +1, closing -1), in chunks
    with numpy: an adversarial 40 MB of brackets in a fraction of a second."""
    import numpy as np

    raw = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    deepest = level = 0
    for start in range(0, len(raw), chunk):
        part = raw[start:start + chunk]
        steps = np.where((part == ord("[")) | (part == ord("{")), 1, -1).astype(np.int64)
        sums = np.cumsum(steps)
        deepest = max(deepest, level + int(sums.max()))
        level += int(sums[-1])
    return deepest


def _int_literal(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer with {len(s)} digits")
    return int(s)


def _no_constant(s: str) -> float:
    raise ValueError(f"{s} is not a finite number")


def _finite_float(s: str) -> float:
    value = float(s)
    if not math.isfinite(value):  # 1e999 parses to inf
        raise ValueError(f"{s[:40]} is not a finite number")
    return value


def loads_json(text: str, source: str) -> Any:
    """Parse JSON with bounded nesting, bounded integer literals and no NaN/Infinity."""
    if not _depth_ok(text):
        raise ColdscopeError(f"{source}: nested deeper than {MAX_NESTING} levels; refused")
    try:
        # every number is checked as it is parsed: no second walk over the data
        data = json.loads(text, parse_int=_int_literal, parse_float=_finite_float,
                          parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ColdscopeError(f"{source}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise ColdscopeError(f"{source}: not valid JSON ({str(exc).splitlines()[0][:120]})") \
            from None
    return data


def _safe_loader() -> type[yaml.SafeLoader]:
    import yaml  # here: most commands never read YAML

    class NoAliasLoader(yaml.SafeLoader):
        """A safe loader that refuses aliases (``*name``): alias expansion turns a few KB into
        gigabytes ("billion laughs"), and no coldscope input needs one."""

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                # PyYAML's stubs leave peek_event unannotated (it returns the next Event)
                event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
                mark = event.start_mark
                where = f"line {mark.line + 1}: " if mark is not None else ""
                raise yaml.YAMLError(f"{where}YAML aliases (*name) are not accepted")
            if self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
                self._cs_depth = getattr(self, "_cs_depth", 0) + 1
                try:
                    if self._cs_depth > MAX_NESTING:
                        raise yaml.YAMLError(f"nested deeper than {MAX_NESTING} levels")
                    return super().compose_node(parent, index)
                finally:
                    self._cs_depth -= 1
            return super().compose_node(parent, index)

    return NoAliasLoader


def loads_yaml(text: str, source: str) -> Any:
    """Parse YAML safely: no aliases, bounded nesting, finite numbers."""
    import yaml

    try:
        data = yaml.load(text, Loader=_safe_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ColdscopeError(f"{source}:{where} not valid YAML ({problem})") from None
    except RecursionError:
        raise ColdscopeError(f"{source}: nested too deeply; refused") from None
    except (ValueError, OverflowError, TypeError) as exc:  # a constructor's: 2001-13-45, 10**5000
        raise ColdscopeError(f"{source}: not valid YAML ({str(exc).splitlines()[0][:120]})") \
            from None
    check_finite(data, source)
    return data


def load_structured(path: str | Path, *, what: str = "file", limit: int | None = None) -> Any:
    """The parsed content of a JSON (``.json``) or YAML file, read with a size bound."""
    text = read_text(path, limit=limit, what=what)
    if Path(path).suffix == ".json":
        return loads_json(text, str(path))
    return loads_yaml(text, str(path))


def check_finite(data: Any, source: str) -> None:
    """Refuse NaN and infinities anywhere in parsed data (YAML's ``.nan``, ``1e999``), and
    integers of more than ``MAX_INT_DIGITS`` digits (what JSON's parser refuses, for YAML)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ColdscopeError(f"{source}: {item} is not a finite number")
        if isinstance(item, int) and abs(item) >= _INT_BOUND:
            raise ColdscopeError(f"{source}: an integer of more than {MAX_INT_DIGITS} digits; "
                                 "refused")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def finite_or_none(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None``: what JSON output may hold."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_none(v) for v in obj]
    return obj


def dumps_json(obj: Any, *, indent: int | None = 2) -> str:
    """Valid JSON always: non-finite floats become ``null``, unknown objects their ``str``."""
    return json.dumps(finite_or_none(obj), indent=indent, default=str, allow_nan=False)


# --- outputs ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class OutputTarget:
    """Where an output the user named ``name`` goes: ``path``, the regular file (or the name of
    a new one) that a finished temporary file is renamed over — ``name`` itself, or the file
    its symbolic links lead to, so the links stay — or, when ``in_place``, the device or pipe
    named under ``/dev`` that the bytes are written to as they are (``fd``: the descriptor of
    this process it names, for ``/dev/stdout``, ``/dev/stderr`` and ``/dev/fd/N``)."""

    name: Path
    path: Path
    in_place: bool = False
    fd: int | None = None


_OWN_FDS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_WRITABLE_IN_PLACE = (stat.S_ISCHR, stat.S_ISFIFO, stat.S_ISREG, stat.S_ISSOCK)


def _own_fd(name: str) -> int | None:
    """The descriptor of this process that a ``/dev`` name stands for, if it is one."""
    if name in _OWN_FDS:
        return _OWN_FDS[name]
    found = re.fullmatch(r"/dev/fd/(\d{1,9})", name)
    return int(found.group(1)) if found else None


def _device_target(path: Path, name: str) -> OutputTarget:
    """A name under ``/dev`` that is a link, a device or a pipe: written in place, whatever
    its links pass through (``/dev/stdout`` leads through ``/proc/self/fd/1``), when it leads to
    a character device, a pipe, a socket or a regular file (a redirected stdout); never a block
    device or a directory."""
    fd = _own_fd(name)
    try:
        st = os.fstat(fd) if fd is not None else os.stat(path)
    except OSError as exc:
        raise ColdscopeError(f"cannot write {path}: {exc.strerror or exc}") from None
    if not any(test(st.st_mode) for test in _WRITABLE_IN_PLACE):
        raise ColdscopeError(f"cannot write {path}: it is {_kind(st.st_mode)}; refused")
    if st.st_dev in _pseudo_devices():
        raise ColdscopeError(f"cannot write {path}: {_PSEUDO}")
    return OutputTarget(path, path, in_place=True, fd=fd)


def output_target(path: str | Path) -> OutputTarget:
    """Where an output named ``path`` may be written (see ``OutputTarget``), or a one-line
    ``ColdscopeError``. Only ``lstat``/``stat``/``readlink``: nothing is opened.

    - absent, or a regular file: written by renaming a finished temporary file over it;
    - a symbolic link: followed when every name it passes through is a plain file name (none
      under ``/proc`` or ``/sys``) and it ends in a regular file or in no file in an existing
      directory; the file is replaced and the link stays. A link to a device, a pipe or a
      socket is refused: a device is written only when ``path`` names it under ``/dev``;
    - a name under ``/dev`` that is a link, a character device or a pipe (``/dev/stdout``,
      ``/dev/null``, ``/dev/fd/3``): written in place;
    - anything else (a FIFO, a socket, a directory, a device elsewhere, a file of ``/proc`` or
      ``/sys``) is refused.
    """
    path = Path(path)
    _check_name(path, "cannot write")
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        lst = None
    except OSError as exc:
        raise ColdscopeError(f"cannot write {path}: {exc.strerror or exc}") from None
    name = os.path.normpath(os.path.abspath(path))
    if lst is not None and name.startswith("/dev/") and \
            (stat.S_ISLNK(lst.st_mode) or stat.S_ISCHR(lst.st_mode) or stat.S_ISFIFO(lst.st_mode)):
        return _device_target(path, name)
    chain = _link_chain(path)
    passed = next((n for n in chain if _under_pseudo_root(n)), None)
    if passed is not None:
        how = "it is" if passed == chain[0] else f"it is a symbolic link through {passed},"
        raise ColdscopeError(f"cannot write {path}: {how} a file of the kernel's /proc or /sys "
                             "pseudo file systems; refused (to write to this process's output, "
                             "name /dev/stdout)")
    target = path
    if lst is not None and stat.S_ISLNK(lst.st_mode):
        target = Path(os.path.realpath(path))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ColdscopeError(f"cannot write {path}: {exc.strerror or exc}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if target is not path:
            device = " (name the device itself, under /dev, to write to it)" \
                if stat.S_ISCHR(st.st_mode) else ""
            raise ColdscopeError(f"cannot write {path}: it is a symbolic link to "
                                 f"{_kind(st.st_mode)}, not a regular file{device}")
        raise ColdscopeError(f"cannot write {path}: it exists and is {_kind(st.st_mode)}, "
                             "not a regular file")
    with contextlib.suppress(OSError):
        if os.stat(target.parent if str(target.parent) else ".").st_dev in _pseudo_devices():
            raise ColdscopeError(f"cannot write {path}: {_PSEUDO}")
    return OutputTarget(path, target)


def check_output_target(path: str | Path) -> Path:
    """``path`` if it may be written (``output_target``), else a one-line ``ColdscopeError``.
    Called before the work, so a refused target costs nothing and is left as it was."""
    output_target(path)
    return Path(path)


def writes_to_stdout(path: str | Path) -> bool:
    """Whether an output named ``path`` is this process's standard output (``/dev/stdout``,
    ``/dev/fd/1``): a command then says what it wrote on stderr, not in the output."""
    return _own_fd(os.path.normpath(os.path.abspath(path))) == 1


def _umask() -> int:
    try:  # Linux says it without changing it (os.umask would, for a moment, in every thread)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _output_mode(path: Path) -> int:
    """The permissions a written output gets: the old target's, else what ``open(path, "w")``
    would give (0o666 less the umask), not ``mkstemp``'s private 0o600."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode) & 0o777  # never set-id bits
    except OSError:
        return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path in the target's directory; renamed over the target (``output_target``:
    ``path``, or the regular file its links lead to) when the block ends without an error,
    removed (leaving any old target untouched) when it raises. For a device or a pipe named
    under ``/dev`` the temporary file is made in the temporary directory and its bytes are
    written to the device when the block ends."""
    target = output_target(path)
    if target.in_place:
        directory = Path(tempfile.gettempdir())
    else:
        directory = target.path.parent if str(target.path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.path.name}.", suffix=".tmp",
                                        dir=directory)
    except OSError as exc:
        raise ColdscopeError(f"cannot write {target.name}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600 if target.in_place else _output_mode(target.path))
    finally:
        os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        again = output_target(path)  # it may have been replaced while we wrote
        if again != target:
            raise ColdscopeError(f"cannot write {target.name}: it was changed while the output "
                                 "was written; left as it is now")
        if target.in_place:
            _write_in_place(target, tmp)
        else:
            os.replace(tmp, target.path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _write_in_place(target: OutputTarget, source: Path) -> None:
    """Copy ``source`` to the device or pipe of ``target``: this process's own descriptor
    when the name stands for one (so the bytes land where that descriptor's offset is, as a
    shell's ``>`` into ``/dev/stdout`` would), else the device opened by its name without
    blocking (a pipe with no reader is refused, not waited for)."""
    import sys

    if target.fd is not None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        fd, close = target.fd, False
    else:
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(target.path, flags)
        except OSError as exc:
            raise ColdscopeError(f"cannot write {target.name}: {exc.strerror or exc}") from None
        close = True
    try:
        st = os.fstat(fd)
        if not any(test(st.st_mode) for test in _WRITABLE_IN_PLACE) or \
                st.st_dev in _pseudo_devices():
            raise ColdscopeError(f"cannot write {target.name}: it is {file_kind(st.st_mode)} "
                                 "now; refused")
        if close:
            os.set_blocking(fd, True)
            if stat.S_ISREG(st.st_mode):
                os.ftruncate(fd, 0)
        with open(source, "rb") as src:
            while chunk := src.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
    finally:
        if close:
            os.close(fd)


def write_atomic(path: str | Path, data: bytes | str | Callable[[Path], None]) -> Path:
    """Write ``data`` (bytes, text, or a function that writes a given path) atomically."""
    with atomic_path(path) as tmp:
        if callable(data):
            data(tmp)
        elif isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
    return Path(path)


# --- terminals --------------------------------------------------------------------------------

# ESC-introduced sequences: CSI (ESC [ ... final), OSC/DCS/APC/PM/SOS strings up to BEL or ST,
# and two-character escapes; then lone C0 (but tab and newline) and C1 controls and DEL.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"                 # CSI
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC strings
    r"|\x9b[0-?]*[ -/]*[@-~]"                  # 8-bit CSI
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # 8-bit string introducers
    r"|\x1b[ -/]*[0-~]?"                       # other escapes (and a lone ESC)
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_text(text: str) -> str:
    """``text`` without terminal control sequences (colours, titles, hyperlinks, cursor moves)
    or other control characters; tabs and newlines stay."""
    if not text:
        return text
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


# --- spreadsheets -----------------------------------------------------------------------------

#: What a spreadsheet takes as the start of a formula in a cell (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(text: str) -> str:
    """``text`` as a CSV cell that a spreadsheet shows and never runs: with a single quote
    before it when it starts like a formula (``FORMULA_STARTS``), as OWASP advises. Only for
    text: a number (``-1.5``) is written as it is."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text
