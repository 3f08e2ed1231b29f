"""A standby launcher: the process ``coldscope standby start`` leaves running (standard library
only: it runs in the engine's interpreter, which need not have coldscope installed).

It imports the modules an engine's processes import (the adapter lists them), then waits on a
Unix socket. A launch request carries a command (a module or a script of this interpreter, with
its arguments), the run's environment and working directory, and two file descriptors (the
engine's stdin, and the pipe its output goes to). The launcher forks; the child becomes the
engine's server in a new session (its own process group, as ``Popen(start_new_session=True)``
makes it), with the run's environment, and runs the command as ``python -m``/``python SCRIPT``
would, minus the imports already done. The adapter's child hook (a file) runs first, so that
the engine's own children fork from this prepared process instead of starting a fresh
interpreter (vLLM: ``engines/vllm/standby_child.py``).

Why these rules:

- **No device before the fork.** The launcher only imports. After its imports and before every
  fork it checks that torch has not initialised CUDA (``torch.cuda.is_initialized()``): a
  process that has cannot fork a usable child. If an import did, the launcher refuses to become
  ready (and says which check failed); a launch is refused the same way.
- **What it imported must still be what is on disk.** At ready it records every loaded module's
  file (mtime, size) and the mtime of each ``site-packages`` directory; a launch first checks
  them and refuses, naming the first file that changed (an upgrade, an edit): a child would
  otherwise run code that is no longer installed.
- **The engine dies with its run.** The requester keeps the connection open while the engine
  runs; when it closes (coldscope exited, was killed), the launcher stops the child's process
  group (SIGTERM, then SIGKILL after the grace), as the runner's ``PR_SET_PDEATHSIG`` does for a
  process it started itself. The child's exit status is sent back on the same connection.
- **One thread.** The launcher never starts a thread: forking a process whose other threads
  hold locks leaves those locks held in the child.

Protocol (JSON, one object per line, on a Unix stream socket): ``{"op": "launch", "entry":
["module"|"path", target], "args": [...], "env": {...}, "cwd": "..."}`` with the descriptors
(``socket.send_fds``) answers ``{"pid": N}`` or ``{"error": "..."}`` and later ``{"exit": code}``;
``{"op": "status"}`` answers the state; ``{"op": "stop"}`` stops the launcher and its children.
"""

import argparse
import importlib
import json
import os
import runpy
import select
import selectors
import signal
import socket
import sys
import time
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: Seconds between SIGTERM and SIGKILL for a child whose requester went away.
GRACE_S = 10.0


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def device_initialized() -> "str | None":
    """What device runtime this process has initialised (``"torch.cuda"``), or None: checked
    after the imports and before every fork."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if cuda.is_initialized():
            return "torch.cuda"
    except Exception:
        return None
    return None


def module_files() -> "dict[str, list[int]]":
    """Every loaded module's file and each site-packages directory, with its (mtime_ns, size)."""
    seen: dict[str, list[int]] = {}
    paths = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    paths += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    for path in paths:
        if not isinstance(path, str) or path in seen:
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        seen[path] = [st.st_mtime_ns, st.st_size]
    return seen


def first_change(recorded: "dict[str, list[int]]") -> "str | None":
    """The first recorded file whose mtime or size differs now (or that is gone), or None."""
    for path, (mtime_ns, size) in recorded.items():
        try:
            st = os.stat(path)
        except OSError:
            return f"{path} is gone"
        if st.st_mtime_ns != mtime_ns or (not os.path.isdir(path) and st.st_size != size):
            return f"{path} changed"
    return None


def _send(conn: socket.socket, doc: "dict[str, Any]") -> None:
    try:
        conn.sendall((json.dumps(doc) + "\n").encode())
    except OSError:
        pass


def _receive(conn: socket.socket) -> "tuple[dict[str, Any], list[int]]":
    """One request line and the descriptors that came with it."""
    conn.settimeout(10.0)
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 4)
    while data and not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            break
        data += more
    conn.settimeout(None)
    doc = json.loads(data.decode()) if data else {}
    return (doc if isinstance(doc, dict) else {}), fds


class Launcher:
    """The launcher's state: its socket, its state file, the children it started."""

    def __init__(self, name: str, sock_path: str, state_path: str, hook: "str | None",
                 die_with_parent: bool = False) -> None:
        self.name = name
        # a launcher a command owns for its own span (tune's session) stops when that command
        # is gone, even by SIGKILL: it is then re-parented, and ``serve`` sees that
        self.parent = os.getppid() if die_with_parent else None
        self.sock_path = sock_path
        self.state_path = state_path
        self.hook = hook
        self.hook_ns: dict[str, Any] = {}
        self.state: dict[str, Any] = {"name": name, "pid": os.getpid(),
                                      "python": sys.executable, "status": "importing",
                                      "started_wall": time.time()}
        self.children: dict[int, socket.socket | None] = {}  # pid -> its requester
        self.kill_at: dict[int, float] = {}  # pid -> when to SIGKILL it
        self.stopping = False
        self.files: dict[str, list[int]] = {}
        self.selector = selectors.DefaultSelector()
        self.listener: socket.socket | None = None

    def write_state(self) -> None:
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.state, f)
        os.replace(tmp, self.state_path)

    def prepare(self, modules: "list[str]") -> bool:
        """Import ``modules`` (each timed; a failure recorded, not fatal), load the hook, check
        no device was initialised. False: refused (the state says why)."""
        started = time.monotonic()
        done: list[dict[str, Any]] = []
        for name in modules:
            t0 = time.monotonic()
            try:
                importlib.import_module(name)
                done.append({"module": name, "seconds": round(time.monotonic() - t0, 3)})
            except BaseException as exc:  # an import may raise anything, SystemExit included
                done.append({"module": name, "seconds": round(time.monotonic() - t0, 3),
                             "error": f"{type(exc).__name__}: {exc}"[:300]})
        if self.hook:
            self.hook_ns = runpy.run_path(self.hook, run_name="coldscope_standby_hook")
        self.state.update(imports=done, import_s=round(time.monotonic() - started, 3),
                          modules_loaded=len(sys.modules))
        device = device_initialized()
        if device is not None:
            self.state.update(status="refused",
                              reason=f"{device} was initialised by the imports: a process that "
                                     "has initialised a device cannot fork a usable engine")
            return False
        self.files = module_files()
        self.state["watched_files"] = len(self.files)
        return True

    def serve(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(self.sock_path)
        except FileNotFoundError:
            pass
        listener.bind(self.sock_path)
        listener.listen(16)
        self.listener = listener
        self.selector.register(listener, selectors.EVENT_READ)
        self.state.update(status="ready", socket=self.sock_path, ready_wall=time.time())
        self.write_state()
        signal.signal(signal.SIGTERM, self._stop_signal)
        signal.signal(signal.SIGINT, self._stop_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # it outlives the terminal it started in
        while not self.stopping:
            for key, _ in self.selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is listener:
                    self._accept(listener)
                else:
                    self._requester_readable(sock)
            self._reap()
            if self.parent is not None and os.getppid() != self.parent:
                self.state["reason"] = f"its owner (pid {self.parent}) is gone"
                self.stopping = True
        self._stop_children()

    def _stop_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError) as exc:
            _send(conn, {"error": f"unreadable request: {exc}"})
            conn.close()
            return
        op = request.get("op")
        if op == "launch":
            self._launch(conn, request, fds)
            return
        for fd in fds:
            os.close(fd)
        if op == "status":
            _send(conn, {**self.state, "children": sorted(self.children)})
        elif op == "stop":
            self.stopping = True
            _send(conn, {"stopping": True})
        else:
            _send(conn, {"error": f"unknown op {op!r}"})
        conn.close()

    def _refusal(self, request: "dict[str, Any]", fds: "list[int]") -> "str | None":
        if len(fds) != 2:
            return "a launch needs two descriptors (stdin, output)"
        entry = request.get("entry")
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] in ("module", "path")):
            return "a launch needs an entry ['module'|'path', target]"
        device = device_initialized()
        if device is not None:
            return f"{device} is initialised in the launcher: it cannot fork a usable engine"
        changed = first_change(self.files)
        if changed is not None:
            return (f"the environment changed since this launcher imported it ({changed}): "
                    "stop it and start it again")
        return None

    def _launch(self, conn: socket.socket, request: "dict[str, Any]", fds: "list[int]") -> None:
        refusal = self._refusal(request, fds)
        if refusal is not None:
            for fd in fds:
                os.close(fd)
            _send(conn, {"error": refusal})
            conn.close()
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        # the child says when it is in its own session (and directory): only then is the pid
        # sent, so the requester's killpg(pid) always reaches the engine's whole group
        in_session, said = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(in_session)
            self._become_engine(conn, request, fds, said)
        os.close(said)
        select.select([in_session], [], [], 10.0)
        os.close(in_session)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ)
        _send(conn, {"pid": pid})

    def _become_engine(self, conn: socket.socket, request: "dict[str, Any]",
                       fds: "list[int]", said: int) -> None:
        code = 1
        try:
            os.setsid()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            stdin_fd, out_fd = fds
            os.dup2(stdin_fd, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            for fd in (stdin_fd, out_fd):
                if fd > 2:
                    os.close(fd)
            self.selector.close()
            if self.listener is not None:
                self.listener.close()
            conn.close()
            for other in self.children.values():
                if other is not None:
                    other.close()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
                except Exception:
                    pass
            os.chdir(request.get("cwd") or "/")
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
            # in its own session, directory and environment: the requester may look now
            os.write(said, b"s")
            os.close(said)
            probe = sys.modules.get("sitecustomize")
            probe_dir = os.environ.get("COLDSCOPE_PROBE_DIR")
            if probe is not None and probe_dir and hasattr(probe, "activate"):
                probe.activate(probe_dir)
            prepare = self.hook_ns.get("prepare_child")
            if prepare is not None:
                prepare()
            kind, target = request["entry"]
            sys.argv = [target, *request.get("args", [])]
            if kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                sys.path[0] = os.path.dirname(os.path.abspath(target))
                runpy.run_path(target, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)

    def _requester_readable(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if data:
            return  # nothing else is expected from a requester; ignore it
        self.selector.unregister(conn)
        conn.close()
        for pid, owner in list(self.children.items()):
            if owner is conn:  # its requester went away: stop what it started
                self.children[pid] = None
                self._signal_group(pid, signal.SIGTERM)
                self.kill_at[pid] = time.monotonic() + GRACE_S

    def _signal_group(self, pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            conn = self.children.pop(pid, None)
            self.kill_at.pop(pid, None)
            self._signal_group(pid, signal.SIGKILL)  # whatever it left in its group
            if conn is not None:
                _send(conn, {"exit": code})
                try:
                    self.selector.unregister(conn)
                except (KeyError, ValueError):
                    pass
                conn.close()
        now = time.monotonic()
        for pid, deadline in list(self.kill_at.items()):
            if now >= deadline:
                self._signal_group(pid, signal.SIGKILL)
                del self.kill_at[pid]

    def _stop_children(self) -> None:
        for pid in list(self.children):
            self._signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.1)
        for pid in list(self.children):
            self._signal_group(pid, signal.SIGKILL)
        self._reap()
        self.state["status"] = "stopped"
        self.write_state()
        try:
            os.unlink(self.sock_path)
        except OSError:
            pass


_REEXEC = "COLDSCOPE_STANDBY_REEXEC"


def _reexec_with(hook: "dict[str, Any]") -> None:
    """Before any import: when the hook's ``launcher_env(environ)`` asks for variables the
    process did not start with (vLLM CPU: the ``LD_PRELOAD`` its spawned processes get, which
    only takes effect at exec), execute this launcher again with them, once."""
    wanted = hook.get("launcher_env")
    if wanted is None:
        return
    extra = wanted(dict(os.environ)) or {}
    if all(os.environ.get(k) == v for k, v in extra.items()):
        return
    env = {**os.environ, **{str(k): str(v) for k, v in extra.items()}, _REEXEC: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--module", action="append", default=[])
    parser.add_argument("--hook", default=None)
    parser.add_argument("--die-with-parent", action="store_true",
                        help="stop (and stop its engines) when the process that started it ends")
    args = parser.parse_args(argv)
    if args.hook and os.environ.get(_REEXEC) != "1":
        _reexec_with(runpy.run_path(args.hook, run_name="coldscope_standby_hook"))
    launcher = Launcher(args.name, args.socket, args.state, args.hook, args.die_with_parent)
    launcher.write_state()
    try:
        ready = launcher.prepare(args.module)
    except BaseException as exc:
        launcher.state.update(status="refused", reason=f"{type(exc).__name__}: {exc}"[:500])
        launcher.write_state()
        traceback.print_exc()
        return 1
    if not ready:
        launcher.write_state()
        return 1
    launcher.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
