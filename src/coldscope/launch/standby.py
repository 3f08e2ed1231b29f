"""Standby launchers: start, ask and stop them, and launch an engine through one.

A standby launcher (``standby_server.py``, the process) has imported what an engine's processes
import and waits; ``launch`` asks it to fork the engine's server with a run's arguments and
environment. This module is coldscope's side of that: it resolves the engine command into what
the launcher runs (a module or a script of one interpreter), starts the launcher in its own
session with the adapter's module list and child hook, and gives the runner a handle
(``StandbyChild``) that stands where a ``Popen`` does. Where launchers live: one directory
(``.coldscope/standby`` by default), with per launcher ``NAME.json`` (its state, written by the
launcher), ``NAME.sock`` (its socket) and ``NAME.log`` (its own output).

A launcher serves one interpreter (its environment's packages); the engine's arguments are the
request's. It refuses a launch when a module it imported changed on disk since, or when a device
runtime was initialised in it (see ``standby_server``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from coldscope.capture.probe import PROBE_DIR
from coldscope.engines import ProcessEvidence, StandbyLaunch, resolve
from coldscope.launch.envs import engine_path, engine_python
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import write_atomic

STANDBY_ROOT = Path(".coldscope") / "standby"
"""Where launchers keep their state, socket and log (relative to the working directory, as the
runner's caches are)."""
SERVER = Path(__file__).with_name("standby_server.py")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: Environment variables a launcher must not carry: a run's own (its marker, its probe files).
_RUN_ONLY_ENV = ("COLDSCOPE_RUN_ID", "COLDSCOPE_PROBE_DIR", "COLDSCOPE_PROBE_IMPORTS")


@dataclass(frozen=True)
class Entry:
    """What a launcher runs for a command: ``python -m MODULE`` (``kind`` ``module``) or a
    Python file (``path``: a script, or a console script's file), with ``args``, on
    ``python``."""

    python: str
    kind: str
    target: str
    args: tuple[str, ...]


def entry_of(argv: Sequence[str]) -> Entry:
    """The interpreter and entry of an engine command, or ``ColdscopeError`` for a command a
    launcher cannot run in-process (not Python, or interpreter options it does not take)."""
    if not argv:
        raise ColdscopeError("no engine command given")
    program = shutil.which(argv[0], path=engine_path())
    if program is None:
        raise ColdscopeError(f"{argv[0]}: command not found")
    if Path(program).name.startswith("python"):
        if len(argv) >= 3 and argv[1] == "-m":
            return Entry(program, "module", argv[2], tuple(argv[3:]))
        if len(argv) >= 2 and not argv[1].startswith("-") and os.path.isfile(argv[1]):
            return Entry(program, "path", os.path.abspath(argv[1]), tuple(argv[2:]))
        raise ColdscopeError("a standby launcher runs `python -m MODULE ...`, `python SCRIPT "
                             f"...` or a Python console script, not {' '.join(argv[:3])!r}")
    python = engine_python(program, engine_path())
    if python is None:
        raise ColdscopeError(f"{argv[0]} is not a Python program: a standby launcher runs the "
                             "engine's Python in its own process")
    return Entry(python, "path", program, tuple(argv[1:]))


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ColdscopeError(f"standby name {name!r}: use letters, digits, '_', '.', '-' (at "
                             "most 64, starting with a letter or digit)")
    return name


def _paths(root: Path, name: str) -> tuple[Path, Path, Path]:
    base = Path(root) / check_name(name)
    return base.with_suffix(".sock"), base.with_suffix(".json"), base.with_suffix(".log")


@dataclass(frozen=True)
class Standby:
    """A launcher as its state file and its process show it."""

    name: str
    pid: int
    python: str
    status: str
    """``importing``, ``ready``, ``refused`` (``reason`` says why), ``stopped``, or ``gone``
    (its process is not running)."""
    command: tuple[str, ...]
    engine: str | None
    reason: str | None
    import_s: float | None
    modules_loaded: int | None
    imports: tuple[dict[str, Any], ...]
    rss_bytes: int | None
    """The launcher's resident memory now (shared with the engines it forked until they write
    to those pages)."""
    uss_bytes: int | None
    """Its memory no other process shares (what stopping it would free)."""
    children: int
    started_wall: float | None
    ready_wall: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "python": self.python,
                "status": self.status, "reason": self.reason, "command": list(self.command),
                "engine": self.engine, "import_s": self.import_s,
                "modules_loaded": self.modules_loaded, "imports": list(self.imports),
                "rss_bytes": self.rss_bytes, "uss_bytes": self.uss_bytes,
                "children": self.children, "started_wall": self.started_wall,
                "ready_wall": self.ready_wall}


def _process(pid: int, started_wall: float | None) -> psutil.Process | None:
    """The launcher's process, if it still runs (a reused pid started later is not it)."""
    try:
        proc = psutil.Process(pid)
        if started_wall is not None and proc.create_time() > started_wall + 2:
            return None
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc
    except psutil.Error:
        return None


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("pid"), int) else None


def _standby(name: str, doc: Mapping[str, Any]) -> Standby:
    proc = _process(doc["pid"], doc.get("started_wall"))
    rss = uss = None
    children = 0
    status = str(doc.get("status", "gone"))
    if proc is None:
        status = "gone" if status != "stopped" else status
    else:
        with contextlib.suppress(psutil.Error):
            rss = proc.memory_info().rss
            uss = proc.memory_full_info().uss
            children = len(proc.children())
    return Standby(
        name=name, pid=doc["pid"], python=str(doc.get("python", "")), status=status,
        command=tuple(doc.get("command") or ()), engine=doc.get("engine"),
        reason=doc.get("reason"), import_s=doc.get("import_s"),
        modules_loaded=doc.get("modules_loaded"), imports=tuple(doc.get("imports") or ()),
        rss_bytes=rss, uss_bytes=uss, children=children,
        started_wall=doc.get("started_wall"), ready_wall=doc.get("ready_wall"))


def find(name: str, *, root: Path = STANDBY_ROOT) -> Standby | None:
    """The launcher called ``name``, or None when there is none (or its state is unreadable)."""
    _sock, state_path, _log = _paths(root, name)
    doc = _read_state(state_path)
    return None if doc is None else _standby(name, doc)


def listing(*, root: Path = STANDBY_ROOT) -> list[Standby]:
    """Every launcher under ``root`` that has a state file, by name."""
    out = []
    for path in sorted(Path(root).glob("*.json")):
        doc = _read_state(path)
        if doc is not None and _NAME.fullmatch(path.stem):
            out.append(_standby(path.stem, doc))
    return out


def start(name: str, command: Sequence[str], *, root: Path = STANDBY_ROOT,
          preload: Sequence[str] = (), timeout: float = 600.0,
          die_with_parent: bool = False) -> Standby:
    """Start a launcher for ``command``'s interpreter and engine and return once it is ready
    (its imports done), or raise ``ColdscopeError`` with why it is not. ``die_with_parent``:
    the launcher stops (with any engine it runs) when this process ends, however it ends (a
    launcher a command owns for its own span, as tune's session does; ``standby start``'s
    outlives it)."""
    sock_path, state_path, log_path = _paths(root, name)
    entry = entry_of(command)
    existing = find(name, root=root)
    if existing is not None and existing.status in ("ready", "importing"):
        raise ColdscopeError(f"standby {name!r} is already running (pid {existing.pid}): "
                             f"`coldscope standby stop {name}` first")
    if len(str(sock_path.resolve())) > 100:  # sun_path is 108 bytes on Linux
        raise ColdscopeError(f"standby directory {root} is too deep for a Unix socket path: "
                             "give a shorter --dir")
    engine = resolve(list(command))
    modules = list(dict.fromkeys(
        [*(engine.standby_modules(command) if isinstance(engine, StandbyLaunch) else ()),
         *preload]))
    hook = engine.standby_hook() if isinstance(engine, StandbyLaunch) else None
    Path(root).mkdir(parents=True, exist_ok=True)
    state_path.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _RUN_ONLY_ENV}
    env["PATH"] = engine_path()
    for key, value in engine.env_defaults().items():
        env.setdefault(key, value)
    # the probe loads armed but silent: its hooks are placed as the engine's modules load, and
    # a run's child starts recording into the run's directory (``activate``)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROBE_DIR), env.get("PYTHONPATH", ""))
                                        if p)
    env["COLDSCOPE_PROBE_ARMED"] = "1"
    if isinstance(engine, ProcessEvidence):
        env["COLDSCOPE_PROBE_HOOKS"] = ";".join(f"{m}:{q}={n}"
                                                for m, q, n in engine.probe_hooks())
    argv = [entry.python, str(SERVER), "--name", name, "--socket", str(sock_path.resolve()),
            "--state", str(state_path.resolve())]
    for module in modules:
        argv += ["--module", module]
    if hook is not None:
        argv += ["--hook", str(hook)]
    if die_with_parent:
        argv.append("--die-with-parent")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                cwd=os.getcwd())
    deadline = time.monotonic() + timeout
    try:
        while True:
            doc = _read_state(state_path)
            status = doc.get("status") if doc else None
            if status == "ready" or status == "refused" or proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise ColdscopeError(f"standby {name!r} not ready after {timeout:g} s (its "
                                     f"log: {log_path})")
            time.sleep(0.1)
    except BaseException:  # the timeout, Ctrl-C: no half-started launcher is left behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        state_path.unlink(missing_ok=True)
        raise
    if doc is None or doc.get("status") != "ready":
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reason = (doc or {}).get("reason") or _tail(log_path)
        raise ColdscopeError(f"standby {name!r} did not start: {reason}")
    doc.update(command=list(command), engine=engine.name)
    write_atomic(state_path, json.dumps(doc))
    return _standby(name, doc)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(text[-lines:]) or "its process exited with no output"


def _request(sock_path: Path, doc: Mapping[str, Any], fds: Sequence[int] = (),
             timeout: float = 10.0) -> tuple[socket.socket, dict[str, Any]]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(str(sock_path))
        socket.send_fds(conn, [(json.dumps(doc) + "\n").encode()], list(fds))
        reply = _read_line(conn)
    except (OSError, ValueError) as exc:
        conn.close()
        raise ColdscopeError(f"standby at {sock_path} did not answer: {exc}") from None
    return conn, reply


def _read_line(conn: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def ready(name: str, *, root: Path = STANDBY_ROOT) -> Standby:
    """Launcher ``name``, ready to launch; else ``ColdscopeError`` saying what it is."""
    found = find(name, root=root)
    if found is None:
        raise ColdscopeError(f"no standby named {name!r} in {root} (`coldscope standby "
                             "status` lists them)")
    if found.status != "ready":
        why = f": {found.reason}" if found.reason else ""
        raise ColdscopeError(f"standby {name!r} is {found.status}{why}")
    return found


def stop(name: str, *, root: Path = STANDBY_ROOT, timeout: float = 30.0) -> Standby:
    """Stop a launcher (and any engine it started that still runs); its state file goes."""
    sock_path, state_path, _log = _paths(root, name)
    found = find(name, root=root)
    if found is None:
        raise ColdscopeError(f"no standby named {name!r} in {root}")
    proc = _process(found.pid, found.started_wall)
    if proc is not None:
        try:
            conn, _reply = _request(sock_path, {"op": "stop"})
            conn.close()
        except ColdscopeError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(found.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except psutil.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(found.pid, signal.SIGKILL)
            with contextlib.suppress(psutil.Error):
                proc.wait(5)
        except psutil.Error:
            pass
    state_path.unlink(missing_ok=True)
    sock_path.unlink(missing_ok=True)
    return found


class StandbyChild:
    """An engine a launcher forked, as the runner sees it: where a ``Popen`` stands. The
    connection stays open while the engine runs; closing it (``close``, or this process
    dying) makes the launcher stop the engine's process group."""

    def __init__(self, pid: int, conn: socket.socket, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._conn = conn

    def _read_exit(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            return
        try:
            self._conn.settimeout(5.0)
            doc = _read_line(self._conn)
            code = doc.get("exit")
            self.returncode = code if isinstance(code, int) else -1
        except (OSError, ValueError):  # the launcher died: the engine went with it
            self.returncode = -1
        self._conn.close()

    def poll(self) -> int | None:
        self._read_exit(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read_exit(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"standby child {self.pid}", timeout or 0)
        return self.returncode

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()


def launch(name: str, argv: Sequence[str], env: Mapping[str, str], cwd: str, *,
           root: Path = STANDBY_ROOT) -> StandbyChild:
    """Have launcher ``name`` start ``argv`` with ``env`` in ``cwd``: its output comes back
    on the child's ``stdout``. ``ColdscopeError`` when the launcher refuses (another
    interpreter, a changed environment, a device initialised) or is not there."""
    found = ready(name, root=root)
    sock_path, _state, _log = _paths(root, name)
    entry = entry_of(argv)
    if os.path.realpath(entry.python) != os.path.realpath(found.python) and \
            entry.python != found.python:
        raise ColdscopeError(f"standby {name!r} runs {found.python}; this command runs "
                             f"{entry.python}: start a standby for its environment")
    read_end, write_end = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    try:
        conn, reply = _request(sock_path, {"op": "launch", "entry": [entry.kind, entry.target],
                                           "args": list(entry.args), "env": dict(env),
                                           "cwd": cwd}, fds=(stdin, write_end), timeout=30.0)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
        os.close(stdin)
    if "pid" not in reply:
        conn.close()
        os.close(read_end)
        raise ColdscopeError(f"standby {name!r} refused the launch: "
                             f"{reply.get('error', 'no reason given')}")
    conn.settimeout(None)
    return StandbyChild(int(reply["pid"]), conn, os.fdopen(read_end, "rb", buffering=0))
