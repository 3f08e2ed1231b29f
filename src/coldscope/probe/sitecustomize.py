"""coldscope's in-process start-up probe (standard library only).

The runner puts this directory first on the engine's ``PYTHONPATH`` and sets
``COLDSCOPE_PROBE_DIR``. Python imports ``sitecustomize`` in every interpreter it starts, so the
probe runs in the API server and in every process it spawns (engine core, workers).

It writes one JSON line per event to ``$COLDSCOPE_PROBE_DIR/probe-<pid>.jsonl``:
``{"ev", "name", "mono", "wall", "pid", ...}``. ``mono`` is ``time.monotonic()``, which on Linux
is one system-wide clock, so events of different processes are comparable with the runner's own
launch time; ``wall`` is ``time.time()``.

Events:
- ``process``: once per process at probe load, with argv, ppid and the process start time read
  from ``/proc/self/stat`` (so interpreter start-up before the probe is counted too).
- ``begin``/``end`` around the functions of ``HOOKS`` (from ``COLDSCOPE_PROBE_HOOKS``), wrapped
  when their module is imported, each with ``io_read``: the bytes the process has read from
  storage so far (``/proc/self/io``), so the reads of one hooked call are the difference.
  A hook whose module or attribute does not exist in this engine version is skipped silently:
  the probe must never change the engine's behaviour or fail it.

With ``COLDSCOPE_PROBE_IMPORTS=1`` it also times every module import of the process and writes
one tab-separated line per finished import to ``$COLDSCOPE_PROBE_DIR/imports-<pid>.tsv``:
``start`` (``time.monotonic()`` s), ``self`` and ``cumulative`` (integer microseconds), ``depth``
(0 for an import no other timed import encloses), the module's name, and its importer's (the
enclosing import's module; for depth 0, the ``__name__`` of the code that imported it, or empty).
It measures what ``python -X importtime`` measures, at the same point: the import system's
``_find_and_load`` (finding, loading and executing a module not yet in ``sys.modules``), wrapped
in place, so no finder or loader is replaced and modules see no difference; a name already in
``sys.modules`` (``importlib.import_module`` of a loaded module) is not timed. ``self`` excludes
the nested imports and the probe's own bookkeeping for them. Modules imported before the probe
loads (``site``, ``encodings``, ``os`` ...) are not seen. A forked child writes its own file.

If another ``sitecustomize`` exists further down ``sys.path``, it is loaded afterwards.

The probe imports only modules that the interpreter has already loaded before ``site`` runs
(``os``, ``sys``) or that are built in (``time``, ``_thread``). ``json``, ``threading`` and
``importlib.abc`` would pull in ``re``, ``pathlib``, ``typing``, ``tempfile`` ... and cost about
27 ms in every process, more than everything else the probe does; so events are encoded by
``_dumps`` below and the finder and loader are plain classes. For the same reason, and because
the engine's interpreter may be older than coldscope's, annotations that name more than a
builtin are strings: mypy checks them, Python never evaluates them.
"""

import time

_T0 = time.perf_counter()

import _thread  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

# ``TYPE_CHECKING`` as mypy reads it, without importing ``typing`` (about 5 ms) at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import FrameType, ModuleType
    from typing import Any, TextIO

    # what the import system takes as a loader; _Loader duck-types it at run time, where
    # importing importlib.abc would cost what the docstring says
    _LoaderBase = Loader
else:
    _LoaderBase = object

_DIR = os.environ.get("COLDSCOPE_PROBE_DIR")

def _hooks() -> "tuple[tuple[str, str, str], ...]":
    """The hooks to place, from ``COLDSCOPE_PROBE_HOOKS``: ``module:Qual.name=event;...``.
    The runner fills it from the engine adapter's table (``coldscope.engines``), so the probe
    itself knows no engine. Event names are stage or stage/substep names of coldscope.core.stages,
    or "mark:<what>" for boundaries the timeline interprets."""
    out: list[tuple[str, str, str]] = []
    for item in os.environ.get("COLDSCOPE_PROBE_HOOKS", "").split(";"):
        try:
            target, name = item.strip().rsplit("=", 1)
            module, qualname = target.split(":", 1)
            out.append((module, qualname, name))
        except ValueError:
            continue
    return tuple(out)


HOOKS = _hooks()

_local = _thread._local()
_lock = _thread.allocate_lock()
_file: "TextIO | None" = None
# Seconds this process has spent in probe code (import, hooks' bookkeeping, writing events):
# a direct measure of the probe's own overhead, written into every event as "cost".
_cost = [0.0]


def _str(s: str) -> str:
    out: list[str] = []
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif o < 0x20 or 0xD800 <= o <= 0xDFFF:  # control characters, lone surrogates
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _dumps(value: object) -> str:
    """JSON for the few types events hold (``json.loads`` reads it back)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) \
            else "null"
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(_str(str(k)) + ": " + _dumps(v) for k, v in value.items()) + "}"
    return _str(str(value))


def _write(record: "dict[str, object]") -> None:
    global _file
    if _DIR is None:  # never so: events are written only once the directory is set (below)
        return
    try:
        with _lock:
            if _file is None:
                _file = open(  # noqa: SIM115 - kept open for the process's life
                    os.path.join(_DIR, f"probe-{os.getpid()}.jsonl"), "a", buffering=1,
                    encoding="utf-8"
                )
            _file.write(_dumps(record) + "\n")
    except Exception:
        pass


def _io_read() -> "int | None":
    """Bytes this process has caused to be read from storage so far (``read_bytes`` of
    /proc/self/io: page-cache hits are not counted, page faults on mapped files are); None
    where the kernel does not say."""
    try:
        with open("/proc/self/io", "rb") as f:
            for line in f.read().splitlines():
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except Exception:
        pass
    return None


def _event(ev: str, name: str, **extra: object) -> None:
    t = time.perf_counter()
    rec: dict[str, object] = {"ev": ev, "name": name, "mono": time.monotonic(),
                              "wall": time.time(), "pid": os.getpid()}
    if ev in ("begin", "end"):
        # storage reads around each hooked call: what model_loading/weights read from disk
        rec["io_read"] = _io_read()
    rec.update(extra)
    rec["cost"] = round(_cost[0], 6)
    _write(rec)
    _cost[0] += time.perf_counter() - t


def _process_start_mono() -> "float | None":
    """Process start in the monotonic clock, from /proc/self/stat (10 ms resolution)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat(5), counted after the ")"
        return start_ticks / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None


# What functools.wraps copies (WRAPPER_ASSIGNMENTS, WRAPPER_UPDATES, __wrapped__), without
# importing functools before the engine does.
_ASSIGNED = ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__",
             "__type_params__")
_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE


def _enter(name: str) -> int:
    t = time.perf_counter()
    depth: int = getattr(_local, name, 0)
    setattr(_local, name, depth + 1)
    _cost[0] += time.perf_counter() - t
    if depth == 0:
        _event("begin", name)
    return depth


def _leave(name: str, depth: int) -> None:
    t = time.perf_counter()
    setattr(_local, name, depth)
    _cost[0] += time.perf_counter() - t
    if depth == 0:
        _event("end", name)


def _wrap(func: "Callable[..., Any]", name: str) -> "Callable[..., Any]":
    """``func`` timed as ``name`` (outermost call only). The wrapper looks like ``func`` to
    introspection, as with ``functools.wraps``; a coroutine function stays a coroutine
    function (``inspect.iscoroutinefunction``), timed until its coroutine finishes. ``func``
    is any engine function, so its arguments and result are ``Any``: the wrapper passes them
    through untouched."""

    async def timed_coroutine(*args: "Any", **kwargs: "Any") -> "Any":
        depth = _enter(name)
        try:
            return await func(*args, **kwargs)
        finally:
            _leave(name, depth)

    def timed(*args: "Any", **kwargs: "Any") -> "Any":
        depth = _enter(name)
        try:
            return func(*args, **kwargs)
        finally:
            _leave(name, depth)

    code = getattr(func, "__code__", None)
    wrapper: Callable[..., Any] = (
        timed_coroutine if code is not None and code.co_flags & _CO_COROUTINE else timed)

    for attr in _ASSIGNED:
        try:
            setattr(wrapper, attr, getattr(func, attr))
        except Exception:
            pass
    try:
        wrapper.__dict__.update(func.__dict__)
    except Exception:
        pass
    wrapper.__dict__["__wrapped__"] = func
    return wrapper


def _install(module: "ModuleType", qualname: str, name: str) -> None:
    try:
        owner: object = module
        parts = qualname.split(".")
        for part in parts[:-1]:
            owner = getattr(owner, part)
        attr = parts[-1]
        raw: object = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        new: object
        if isinstance(raw, staticmethod):
            new = staticmethod(_wrap(raw.__func__, name))
        elif isinstance(raw, classmethod):
            new = classmethod(_wrap(raw.__func__, name))
        elif callable(raw):
            new = _wrap(raw, name)
        else:
            return
        setattr(owner, attr, new)
    except Exception:
        pass


_BY_MODULE: "dict[str, list[tuple[str, str]]]" = {}
for _m, _q, _n in HOOKS:
    _BY_MODULE.setdefault(_m, []).append((_q, _n))


class _Loader(_LoaderBase):
    """Runs the real loader, then installs the module's hooks. It is only the import system's
    loader for the one import: the module's ``__loader__`` and ``__spec__.loader`` are set
    back to the real loader before its code runs, so the module sees what it would without
    the probe. Anything else (``get_source``, resource readers ...) is the real loader's."""

    def __init__(self, inner: "Loader", fullname: str) -> None:
        self._inner = inner
        self._fullname = fullname

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        return self._inner.create_module(spec)

    def exec_module(self, module: "ModuleType") -> None:
        try:
            spec = module.__spec__
            if spec is not None:
                spec.loader = self._inner
                module.__loader__ = self._inner
        except Exception:
            pass
        self._inner.exec_module(module)
        t = time.perf_counter()
        for qualname, name in _BY_MODULE.get(self._fullname, ()):
            _install(module, qualname, name)
        _cost[0] += time.perf_counter() - t

    def __getattr__(self, item: str) -> object:
        return getattr(self._inner, item)


class _Finder:
    """First on ``sys.meta_path``; answers only for the modules of ``HOOKS``."""

    def find_spec(self, fullname: str, path: "Sequence[str] | None",
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname not in _BY_MODULE:
            return None
        t = time.perf_counter()
        try:
            return self._find(fullname, path, target)
        finally:
            _cost[0] += time.perf_counter() - t

    def _find(self, fullname: str, path: "Sequence[str] | None",
              target: "ModuleType | None") -> "ModuleSpec | None":
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec: ModuleSpec | None = find(fullname, path, target)
            except Exception:
                return None
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader, fullname)
                return spec
            if spec is not None:
                return spec
        return None


# -- import timing (COLDSCOPE_PROBE_IMPORTS=1) ------------------------------------------------

_ilocal = _thread._local()  # .stack: an _Import per level of the imports under way


class _Import:
    """One import under way: its module's name and the seconds spent in the imports it
    encloses (and the probe's bookkeeping for them)."""

    __slots__ = ("name", "nested")

    def __init__(self, name: str) -> None:
        self.name = name
        self.nested = 0.0


_ifile: "list[TextIO | None]" = [None]
# Importers that are the import system itself, skipped when naming a depth-0 import's importer.
_IMPORT_SYSTEM = ("importlib._bootstrap", "importlib._bootstrap_external", "importlib",
                  "_frozen_importlib", "_frozen_importlib_external", __name__)


def _importer() -> str:
    """``__name__`` of the code that started a depth-0 import (an ``import`` statement's module,
    or ``importlib.import_module``'s caller)."""
    try:
        f: FrameType | None = sys._getframe(2)
        while f is not None:
            name = f.f_globals.get("__name__")
            if name not in _IMPORT_SYSTEM:
                return name if isinstance(name, str) else ""
            f = f.f_back
    except Exception:
        pass
    return ""


def _write_import(line: str) -> None:
    if _DIR is None:  # never so: imports are timed only once the directory is set (below)
        return
    try:
        f = _ifile[0]
        if f is None:
            f = _ifile[0] = open(  # noqa: SIM115 - kept open for the process's life
                os.path.join(_DIR, f"imports-{os.getpid()}.tsv"), "a", buffering=1,
                encoding="utf-8", errors="replace")
        f.write(line)
    except Exception:
        pass


def _after_fork() -> None:
    _ifile[0] = None  # the child writes its own file, and starts with no import in progress
    _ilocal.stack = []


def _timed_find_and_load(
        inner: "Callable[[str, object], ModuleType]") -> "Callable[[str, object], ModuleType]":
    """``inner`` (the import system's ``_find_and_load``) timed: one line per import."""
    mono = time.monotonic
    modules = sys.modules

    def _find_and_load(name: str, import_: object) -> "ModuleType":
        if name in modules:  # importlib.import_module of a loaded module, or a circular
            return inner(name, import_)  # import's wait: nothing loads (importtime skips it)
        t0 = mono()
        stack: list[_Import]
        try:
            stack = _ilocal.stack
        except AttributeError:
            stack = _ilocal.stack = []
        parent = stack[-1].name if stack else None
        frame = _Import(name)
        stack.append(frame)
        t1 = mono()
        try:
            return inner(name, import_)
        finally:
            t2 = mono()
            try:
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i] is frame:
                        del stack[i:]
                        break
                depth = len(stack)
                if parent is None:
                    parent = _importer()
                cum = t2 - t1
                line = (f"{t1:.6f}\t{round((cum - frame.nested) * 1e6)}\t{round(cum * 1e6)}\t"
                        f"{depth}\t{name}\t{parent}\n")
                if line.count("\t") == 5 and line.count("\n") == 1:  # else a name no import
                    _write_import(line)                                # statement makes
                t3 = mono()
                if stack:  # the enclosing import's self time excludes this one and its bookkeeping
                    stack[-1].nested += t3 - t0
                _cost[0] += (t1 - t0) + (t3 - t2)
            except Exception:
                pass

    _find_and_load.__dict__["__wrapped__"] = inner
    return _find_and_load


def _time_imports() -> None:
    try:
        bootstrap = vars(sys.modules["_frozen_importlib"])  # the module's own namespace
        inner = bootstrap["_find_and_load"]
        if getattr(inner, "__wrapped__", None) is None:
            bootstrap["_find_and_load"] = _timed_find_and_load(inner)
            os.register_at_fork(after_in_child=_after_fork)
    except Exception:
        pass


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            try:
                import importlib.util  # only here: it costs milliseconds to import

                spec = importlib.util.spec_from_file_location("_coldscope_next_sitecustomize",
                                                              candidate)
                if spec is None or spec.loader is None:
                    return
                mod = importlib.util.module_from_spec(spec)
                # Python would not cache it under this name: write no byte code beside it
                before, sys.dont_write_bytecode = sys.dont_write_bytecode, True
                try:
                    spec.loader.exec_module(mod)
                finally:
                    sys.dont_write_bytecode = before
            except Exception:
                pass
            return


def _start() -> None:
    """Begin recording in this process: the exit event, and the process event now."""
    import atexit

    if os.environ.get("COLDSCOPE_PROBE_IMPORTS") == "1":
        _time_imports()
    atexit.register(lambda: _event("exit", "exit"))
    _cost[0] += time.perf_counter() - _T0
    _event("process", "process", argv=sys.argv[:8], ppid=os.getppid(),
           start_mono=_process_start_mono(), executable=sys.executable)


def _forked() -> None:
    """In a child forked from a recording process: its own file, its own process event (its
    start in /proc is the fork), its own exit event."""
    global _file, _lock
    _file = None
    _lock = _thread.allocate_lock()  # the parent's may have been held by another thread
    _after_fork()
    _event("process", "process", argv=sys.argv[:8], ppid=os.getppid(),
           start_mono=_process_start_mono(), executable=sys.executable)


def activate(directory: str) -> bool:
    """Start recording into ``directory`` in a process whose probe was loaded armed but silent
    (``COLDSCOPE_PROBE_ARMED=1``: a standby launcher, which imports the engine's modules with
    the hooks in place and records nothing). Called by the launcher's child right after the
    fork, with the run's environment already in ``os.environ``; the engine processes that
    child forks record too. False (nothing recorded) when ``directory`` is not one."""
    global _DIR
    if _DIR is not None or not os.path.isdir(directory):
        return False
    _DIR = directory
    _start()
    os.register_at_fork(after_in_child=_forked)
    return True


if _DIR and os.path.isdir(_DIR):
    sys.meta_path.insert(0, _Finder())
    _start()
elif os.environ.get("COLDSCOPE_PROBE_ARMED") == "1":
    _DIR = None  # armed: the hooks are placed as modules load; ``activate`` starts recording
    sys.meta_path.insert(0, _Finder())

_chain_next_sitecustomize()
