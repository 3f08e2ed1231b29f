"""The runner: the only part of coldscope that starts processes.

``profile(config)`` launches the engine command ``repeat`` times, each in its own process group
with its own caches, and for each run collects raw evidence: every output line with its arrival
time, the probe's events, the engine's own OpenTelemetry spans and per-core CPU use. It waits
for readiness (HTTP health check or a log pattern), sends one real streaming request to time
the first token, and always shuts the whole process group down (also on Ctrl-C, SIGTERM,
SIGHUP, timeout or crash). What the engine is and how to read its evidence is the engine
adapter's business (``coldscope.engines``); turning evidence into a timeline and findings is
``coldscope.ingest.assemble``'s. Time origin: the monotonic time just before ``Popen``.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import functools
import hashlib
import http.client
import json
import os
import py_compile
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coldscope.capture.environment import collect as environment_of
from coldscope.capture.environment import storage_kind
from coldscope.capture.imports import read_import_files
from coldscope.capture.otlp import Receiver
from coldscope.capture.probe import PROBE_DIR, read_probe_events
from coldscope.capture.sources import Context
from coldscope.capture.storage import residency
from coldscope.core.records import (
    CacheState,
    CompileKey,
    CpuSamples,
    EngineInfo,
    Environment,
    Launch,
    Membership,
    ModelRef,
    Run,
    Storage,
    Tool,
)
from coldscope.core.version import __version__
from coldscope.engines import (
    Engine,
    LogReader,
    ProcessEvidence,
    identify_output,
    probe_hooks_of,
    resolve,
    run_reader,
)
from coldscope.ingest.assemble import finish
from coldscope.launch import standby
from coldscope.launch.envs import engine_path, engine_python
from coldscope.launch.standby import STANDBY_ROOT
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.store.db import Store

Evidence = dict[str, Any]
AfterReady = Callable[[str, str, Callable[[], float]], dict[str, Any]]
"""A check run while an engine is up: (base URL, served model, the engine tree's CPU seconds
so far) -> what is stored as the run's ``verification``."""
"""One run's raw evidence by kind (``log``, ``otel``, ``launch``, and ``probe``, ``imports``
when collected): the JSON data the store keeps so that the timeline can be rebuilt."""

RUN_ID_ENV = "COLDSCOPE_RUN_ID"
COMPILE_KEYS_FILE = "coldscope-compile-keys.json"
"""In a warm cache directory: the compile keys (``CompileKey``) of the runs that used it,
newest last, so a later run knows what the cache held and ``compile_cache_miss`` can say what
changed."""
KEEP_COMPILE_KEYS = 20
TMP_PREFIX = "coldscope-"
OWNER_FILE = ".coldscope-owner"
"""In each run's TMPDIR: ``PID START_TIME`` of the coldscope that made it, so a later coldscope
can tell a stale directory (owner gone) from one in use."""


class RunConfig(BaseModel):
    """What to profile and how. One config gives ``repeat`` runs."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, description="the engine command line")
    cache: Literal["cold", "warm"] = "cold"
    repeat: int = Field(1, ge=1)
    timeout: float = Field(900.0, gt=0, description="seconds from launch to ready, per run")
    health_url: str | None = Field(None, description="default: http://HOST:PORT/health")
    ready_pattern: str | None = Field(None, description="regex on output; replaces health check")
    first_request: bool = True
    prompt: str = "The cold start of an inference server"
    max_tokens: int = Field(8, ge=1)
    request_timeout: float = 120.0
    probe: bool = True
    imports: bool = Field(False, description="time every import in each engine process (the "
                                             "probe's import timing; needs probe)")
    spans: bool = True
    cpu_interval: float = Field(0.5, gt=0)
    drop_page_cache: bool = False
    cache_root: Path = Path(".coldscope") / "caches"
    cache_dir: Path | None = Field(
        None, description="one cache directory for every run, whatever its command, kept as a "
                          "persistent volume keeps it: each run finds what earlier runs left "
                          "(needs cache warm; no priming run)")
    keep_cold_caches: bool = False
    label: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    shutdown_grace: float = 10.0
    bind_localhost: bool = Field(
        True, description="add --host 127.0.0.1 when the command chooses no host (engines "
                          "whose adapter knows the flag)")
    origin: Literal["profile", "campaign", "tune"] = "profile"
    membership: Membership | None = Field(
        None, description="what the runs were measured for (``Run.campaign``), on every "
                          "record of them from the first")
    standby: str | None = Field(
        None, description="start the engine through this standby launcher (``coldscope "
                          "standby start NAME``): forked from a process that has imported "
                          "the engine's modules, instead of a new interpreter")
    standby_dir: Path = STANDBY_ROOT

    @model_validator(mode="after")
    def _shared_dir_is_kept(self) -> RunConfig:
        if self.cache_dir is not None and self.cache != "warm":
            raise ValueError("a shared cache directory is kept between runs: it needs cache "
                             "'warm', not 'cold'")
        return self


# -- identity ----------------------------------------------------------------------------


def config_key(config: RunConfig) -> str:
    """Identity of a configuration: same command and environment overrides, same key. Warm
    caches are shared only between runs of one key."""
    identity: dict[str, Any] = {"command": config.command, "env": config.env}
    if config.standby is not None:  # another way to start the same command: its own caches
        identity["standby"] = config.standby
    payload = json.dumps(identity, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@functools.cache
def _compiled_probe_dir() -> str:
    """The probe's directory, its ``sitecustomize.py`` byte-compiled first. Engines often run
    with ``PYTHONDONTWRITEBYTECODE=1`` (containers, CI), and then every engine process would
    compile the probe again: 3.5 ms each, ten times the probe's own work in a process. Once per
    coldscope process is enough: if the source changes later, Python sees the stale ``.pyc``
    by its recorded mtime and compiles in memory, as without it."""
    with contextlib.suppress(OSError, py_compile.PyCompileError):
        py_compile.compile(str(PROBE_DIR / "sitecustomize.py"), doraise=True)
    return str(PROBE_DIR)


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


# -- processes -------------------------------------------------------------------------------


def port_in_use(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _processes_of_run(run_id: str) -> list[psutil.Process]:
    """Every live process that carries this run's marker in its environment."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(RUN_ID_ENV) == run_id:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_run(proc: subprocess.Popen[bytes] | standby.StandbyChild | None, run_id: str,
             grace: float) -> None:
    """Stop the engine: SIGTERM to its process group, SIGKILL after ``grace`` seconds, then
    SIGKILL to any process that escaped the group but still carries the run's marker (a
    process a standby launcher forked carries the launcher's environment in ``/proc``, not
    the run's: its group is what stops it, and the launcher stops the group too when the
    run lets go of it)."""
    if proc is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if isinstance(proc, standby.StandbyChild):
            proc.close()
    for _ in range(3):
        stragglers = _processes_of_run(run_id)
        if not stragglers:
            return
        for p in stragglers:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(stragglers, timeout=5)


class _LineReader(threading.Thread):
    """Reads the engine's merged stdout/stderr; stamps each line on arrival (monotonic)."""

    def __init__(self, stream: IO[bytes], log_file: Path, launch_mono: float,
                 on_line: Callable[[str], None] | None = None) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[tuple[float, str]] = []
        self.launch_mono = launch_mono
        self.log_file = log_file
        self.on_line = on_line

    def run(self) -> None:
        buf = b""
        with self.log_file.open("wb") as out:
            while True:
                chunk = os.read(self.stream.fileno(), 65536)
                now = time.monotonic() - self.launch_mono
                if not chunk:
                    break
                out.write(chunk)
                buf += chunk
                *complete, buf = re.split(rb"\r\n|\n|\r", buf)
                for raw in complete:
                    text = raw.decode("utf-8", "replace")
                    self.lines.append((now, text))
                    if self.on_line:
                        self.on_line(text)
            if buf:
                self.lines.append((time.monotonic() - self.launch_mono,
                                   buf.decode("utf-8", "replace")))


class _CpuSampler(threading.Thread):
    """Per-core CPU utilisation (percent) every ``interval`` seconds since launch."""

    def __init__(self, interval: float, launch_mono: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.launch_mono = launch_mono
        self.t: list[float] = []
        self.per_core: list[list[float]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        psutil.cpu_percent(percpu=True)
        while not self._halt.wait(self.interval):
            self.per_core.append(psutil.cpu_percent(percpu=True))
            self.t.append(round(time.monotonic() - self.launch_mono, 3))

    def stop(self) -> CpuSamples:
        self._halt.set()
        self.join(timeout=2)
        return CpuSamples(interval_s=self.interval, t=self.t, per_core=self.per_core)


def _get_ok(url: str, timeout: float = 1.0) -> bool:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "localhost", parts.port or 80,
                                      timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def first_token(base_url: str, model: str, prompt: str, max_tokens: int,
                timeout: float) -> tuple[float, str]:
    """Send one streaming completion; return (seconds to the first token, text received)."""
    from coldscope.engines.openai_api import first_token as streamed
    return streamed(base_url, {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                               "temperature": 0}, timeout=timeout)


def drop_page_cache(model_path: str | None, *, sync: bool = True) -> str:
    """Evict the model's files (or any directory's) from the page cache (posix_fadvise
    DONTNEED, no root needed). Returns what was done, or why it was not possible.

    ``sync``: fsync each file first, so that pages written and not yet on disk (a model just
    downloaded) go too. A tree installed long ago has none, and the fsync is most of the cost:
    a venv's site-packages (71,351 files) took 13-40 s with it and 3-5 s without, here."""
    if not model_path or not os.path.isdir(model_path):
        return "not possible: the model is not a local directory"
    if not hasattr(os, "posix_fadvise"):
        return "not possible: posix_fadvise unavailable"
    n = 0
    for path in Path(model_path).rglob("*"):
        if path.is_file():
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    if sync:
                        os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
                n += 1
            except OSError as exc:
                return f"not possible: {path.name}: {exc.strerror}"
    return f"done: fadvise DONTNEED on {n} files"


@dataclass
class CacheDirs:
    """Per-run (cold) or per-configuration (warm) cache directories, and a fresh TMPDIR.

    TMPDIR is always per run and short (under the system temp dir, not ``root``): vLLM binds
    ZeroMQ IPC sockets there, and a Unix socket path must stay under 108 bytes.
    """

    root: Path
    warm_filled: bool
    tmp: Path | None = None

    def env(self, engine: Engine) -> dict[str, str]:
        """The engine's cache variables pointing under ``root`` (created), and TMPDIR."""
        out = engine.cache_env(self.root)
        for path in out.values():
            Path(path).mkdir(parents=True, exist_ok=True)
        if self.tmp is None:
            self.tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
            (self.tmp / OWNER_FILE).write_text(_owner_stamp())
        out["TMPDIR"] = str(self.tmp)
        return dict(sorted(out.items()))


def cache_dirs(config: RunConfig, run_id: str) -> CacheDirs:
    if config.cache_dir is not None:
        d = Path(config.cache_dir).resolve()
        return CacheDirs(d, warm_filled=(d / ".filled").exists())
    root = Path(config.cache_root).resolve()
    if config.cache == "cold":
        return CacheDirs(root / "cold" / run_id, warm_filled=False)
    d = root / "warm" / config_key(config)
    return CacheDirs(d, warm_filled=(d / ".filled").exists())


# -- one run ---------------------------------------------------------------------------------


def run_once(config: RunConfig, *, run_id: str | None = None,
             cache_state: CacheState | None = None,
             on_line: Callable[[str], None] | None = None,
             after_ready: AfterReady | None = None,
             on_start: Callable[[Run], None] | None = None,
             on_stage: Callable[[str, float], None] | None = None
             ) -> tuple[Run, Evidence]:
    """Launch, time, and stop the engine once. Returns (run, raw evidence).

    Never raises for an engine failure: a failed run is returned with status "failed", its
    reason and the tail of its log. KeyboardInterrupt (Ctrl-C, and SIGTERM/SIGHUP under
    ``profile``) still propagates as ``RunInterrupted``, after the engine is stopped, so the
    caller can store the interrupted run and stop. ``on_start`` gets the run (status
    ``running``) just before the engine is launched, so a caller can record it first.
    ``after_ready(base_url, served_model, cpu_seconds)`` runs while the engine is up (after
    the first request; ``cpu_seconds()`` reads the engine process tree's CPU time so far); its
    dict is stored as ``run.verification``. ``on_stage(stage, seconds since
    launch)`` is called when the engine's output shows it entering a stage (live progress;
    the engine adapter's ``live_stage``).
    """
    run_id = run_id or new_run_id()
    pattern = _ready_pattern(config.ready_pattern)
    prep = _prepare(config, run_id, cache_state)
    seen = _launch(config, prep, pattern, on_line=on_line, on_stage=on_stage,
                   after_ready=after_ready, on_start=on_start)
    evidence: Evidence = {
        "log": [[round(t, 4), text] for t, text in seen.lines],
        "otel": seen.otel,
        "launch": seen.launch,
    }
    if config.probe:
        evidence["probe"] = read_probe_events(prep.probe_dir)
        if config.imports:
            evidence["imports"] = read_import_files(prep.probe_dir)
    ok = seen.status == "ok"
    run = prep.run.evolve(
        status=seen.status, reason=seen.reason, verification=seen.verification,
        cpu=seen.cpu,
        log_tail="\n".join(text for _, text in seen.lines[-40:]),
        time_to_ready_s=seen.ready_at if ok else None,
        first_token_s=seen.first_token_at if ok else None,
    )
    key = compile_key(prep, [text for _, text in seen.lines])
    if key is not None:
        run = run.evolve(compile_key=key)
        if config.cache == "warm" and ok:
            _remember_compile_key(prep.dirs.root, key)
    ctx = Context(engine=run_reader(prep.engine, [text for _, text in seen.lines]),
                  launch_mono=seen.launch["mono"],
                  launch_wall=seen.launch["wall"], root_pid=seen.launch["root_pid"],
                  ready_at=seen.ready_at, compile_enabled=prep.engine.compile_enabled(prep.argv),
                  has_gpu=bool(run.environment.gpus))
    run = finish(run, evidence, ctx)
    if seen.interrupted:
        raise RunInterrupted(run, evidence)
    return run, evidence


def compile_key(prep: _Prepared, lines: Sequence[str]) -> CompileKey | None:
    """What the run's compile cache was keyed by (see ``CompileKey``): the directories its log
    names, relative to the run's cache root when under it, what the engine's adapter says the
    key depends on, the versions, and the engine's own factors file when it wrote one. None
    when the log names no compile-cache directory."""
    from coldscope.engines import log_facts
    known = log_facts(lines, engine=prep.engine.name)  # a wrapper's log: its engine's reading
    dirs = list(known[1].compile_dirs) if known is not None else []
    if known is None or not dirs:
        return None
    flags, env = prep.engine.compile_key_inputs(prep.argv, prep.env)
    run = prep.run
    versions = {prep.engine.name: run.engine.version,
                "torch": run.environment.package("torch")}
    return CompileKey(
        run=run.id, dirs=[_under(d, prep.dirs.root) for d in dirs], flags=flags, env=env,
        versions={k: v for k, v in versions.items() if v},
        factors=_compile_factors(dirs, known[0].compile_factors_file))


def _under(path: str, root: Path) -> str:
    """``path`` relative to ``root`` when it lies under it, else as given."""
    try:
        return str(Path(path).resolve().relative_to(root))
    except (ValueError, OSError):
        return path


def _compile_factors(dirs: Sequence[str], name: str | None) -> dict[str, str]:
    """The first factors file (``name``) found in ``dirs``, flattened to strings
    (``env.VLLM_X``, ``config_hash`` ...); empty when there is none or it cannot be read."""
    for d in dirs if name else ():
        path = Path(d) / str(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return dict(_flatten(data))
    return {}


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for key, value in sorted(data.items()):
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value if isinstance(value, str) else json.dumps(value)


def held_compile_keys(root: Path) -> list[CompileKey]:
    """The compile keys a warm cache directory's runs left there (oldest first); unreadable
    entries are skipped (a cache written by another tool or an older coldscope)."""
    try:
        items = json.loads((root / COMPILE_KEYS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for item in items if isinstance(items, list) else ():
        with contextlib.suppress(ValueError, TypeError):
            out.append(CompileKey.model_validate(item))
    return out


def _remember_compile_key(root: Path, key: CompileKey) -> None:
    """Add ``key`` to the directory's list (a key with the same directories replaces the
    older one), keeping the newest ``KEEP_COMPILE_KEYS``."""
    from coldscope.util.safeio import write_atomic
    keys = [k for k in held_compile_keys(root) if k.dirs != key.dirs] + [key]
    with contextlib.suppress(OSError):
        write_atomic(root / COMPILE_KEYS_FILE, json.dumps(
            [k.model_dump(mode="json") for k in keys[-KEEP_COMPILE_KEYS:]], indent=1))


@dataclass
class _Prepared:
    """Everything made for one run before its engine starts."""

    engine: Engine
    argv: list[str]
    env: dict[str, str]
    health_url: str
    dirs: CacheDirs
    run_dir: Path
    probe_dir: Path
    receiver: Receiver | None
    run: Run


@dataclass
class _Observed:
    """What one launch saw (raw evidence) and how it ended."""

    launch: dict[str, Any] = field(
        default_factory=lambda: {"mono": 0.0, "wall": 0.0, "root_pid": None})
    lines: list[tuple[float, str]] = field(default_factory=list)
    otel: list[dict[str, Any]] = field(default_factory=list)
    cpu: CpuSamples | None = None
    status: str = "failed"
    reason: str | None = None
    verification: dict[str, Any] | None = None
    ready_at: float | None = None
    first_token_at: float | None = None
    interrupted: bool = False


def _prepare(config: RunConfig, run_id: str, cache_state: CacheState | None) -> _Prepared:
    """The engine's command line (its adapter's reading of it), caches, environment, span
    receiver and the ``running`` record. What was made is removed again if anything fails."""
    argv = list(config.command)
    engine = resolve(argv)
    notes: list[str] = []
    if config.standby is not None:
        launcher = standby.ready(config.standby, root=config.standby_dir)
        notes.append(f"launched through standby {config.standby!r} (pid {launcher.pid}): "
                     f"{launcher.modules_loaded} modules imported before the request")
    if config.bind_localhost and engine.host(argv) is None:
        bound = engine.with_host(argv, "127.0.0.1")
        if bound is not None:
            argv = bound
            notes.append("engine bound to 127.0.0.1 (no --host given); pass --host to choose")
    health_url = _checked_url(config.health_url or engine.health_url(argv))
    dirs = cache_dirs(config, run_id)
    cache: CacheState = cache_state or (
        "warm" if config.cache == "warm" and dirs.warm_filled else "cold")
    run_dir = Path(config.cache_root).resolve().parent / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    probe_dir = run_dir / "probe"
    probe_dir.mkdir(exist_ok=True)
    model = engine.model(argv)
    if config.cache == "warm" and not dirs.warm_filled:
        notes.append("warm cache was empty: this run fills it and counts as cold")
    if config.cache_dir is not None:
        notes.append(f"caches in {dirs.root}, shared with every run given that directory")
    held_keys = held_compile_keys(dirs.root) if cache == "warm" else []

    receiver = None
    try:  # anything failing before the launch still removes what was made for the run
        cache_env = dirs.env(engine)
        env = dict(os.environ)
        # `python` in the command means coldscope's own interpreter, as in an activated venv.
        env["PATH"] = engine_path(env.get("PATH", ""))
        for key, value in engine.env_defaults().items():
            env.setdefault(key, value)
        env.update(cache_env)
        env.update(config.env)
        env[RUN_ID_ENV] = run_id
        if config.probe:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (_compiled_probe_dir(), env.get("PYTHONPATH", "")) if p
            )
            env["COLDSCOPE_PROBE_DIR"] = str(probe_dir)
            if config.imports:
                env["COLDSCOPE_PROBE_IMPORTS"] = "1"
            else:  # only what the config asks for: the runner reads the files only then
                env.pop("COLDSCOPE_PROBE_IMPORTS", None)
            hooks = ";".join(f"{m}:{q}={n}" for m, q, n in probe_hooks_of(engine))
            env["COLDSCOPE_PROBE_HOOKS"] = ";".join(
                h for h in (hooks, env.get("COLDSCOPE_PROBE_HOOKS", "")) if h)

        if config.spans:
            receiver = Receiver()
            otlp = engine.otlp(argv, receiver.endpoint) \
                if isinstance(engine, ProcessEvidence) else None
            if otlp is None:
                receiver.stop()  # never started: just close its socket
                receiver = None
            else:
                receiver.start()
                argv += otlp[0]
                for key, value in otlp[1].items():
                    if key == "OTEL_BSP_SCHEDULE_DELAY":  # the user's own setting wins
                        env.setdefault(key, value)
                    else:
                        env[key] = value

        page_cache = drop_page_cache(model) if config.drop_page_cache else "not requested"
        held = residency(model) if model and os.path.isdir(model) else None
        environment = Environment.model_validate(environment_of(
            engine_python=engine_python(argv[0], env["PATH"]),
            weights_path=model if model and os.path.exists(model) else None,
            env={**config.env, **cache_env},
            packages=engine.packages, env_prefixes=engine.env_prefixes,
        ))
        run = Run(
            id=run_id, status="running", cache=cache,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            tool=Tool(version=__version__), label=config.label, config_key=config_key(config),
            cache_requested=config.cache, env_overrides=dict(config.env), origin=config.origin,
            notes=notes, page_cache=page_cache, cache_held=held_keys,
            campaign=config.membership,
            storage=Storage(
                page_cache="cold" if page_cache.startswith("done") else None,
                kind=storage_kind(environment.weights_fs.model_dump() if environment.weights_fs
                                  else None),
                source="weights filesystem; page cache dropped" if page_cache.startswith("done")
                else "weights filesystem",
                weights_bytes=held.bytes if held else None,
                resident_at_launch=round(held.share, 4) if held and held.share is not None
                else None),
            model=ModelRef(
                path=os.path.abspath(model) if model and os.path.exists(model) else model,
                name=os.path.basename(model.rstrip("/")) if model else None),
            engine=EngineInfo(**engine.describe(argv), version=engine.version(
                {k: environment.package(k) for k in engine.packages}, None)),
            environment=environment,
            health_url=health_url, log_path=str(run_dir / "engine.log"),
            launch=Launch(owner_pid=os.getpid(), owner_started=_SELF_STARTED,
                          host=socket.gethostname(), tmp_dir=str(dirs.tmp),
                          cache_dir=str(dirs.root) if config.cache == "cold"
                          and not config.keep_cold_caches else None),
        )
    except BaseException:
        if receiver is not None:
            receiver.stop()
        _cleanup(config, dirs, ok=False)
        raise
    return _Prepared(engine=engine, argv=argv, env=env, health_url=health_url, dirs=dirs,
                     run_dir=run_dir, probe_dir=probe_dir, receiver=receiver, run=run)


def _launch(config: RunConfig, prep: _Prepared, pattern: re.Pattern[str] | None, *,
            on_line: Callable[[str], None] | None, on_stage: Callable[[str, float], None] | None,
            after_ready: Callable[[str, str, Callable[[], float]], dict[str, Any]] | None,
            on_start: Callable[[Run], None] | None) -> _Observed:
    """Start the engine, wait until it is ready, time the first token, run ``after_ready``;
    always stop the whole process tree and collect the raw evidence, whatever happens."""
    seen = _Observed()
    proc: subprocess.Popen[bytes] | standby.StandbyChild | None = None
    reader: _LineReader | None = None
    sampler: _CpuSampler | None = None
    pattern_hit = threading.Event()
    current_stage: list[str | None] = [None]
    # the adapter that reads the output: the engine's own, else (a wrapper script) the one
    # whose own line comes first, identified once
    live: list[LogReader | None] = [prep.engine if isinstance(prep.engine, LogReader) else None]

    def _on_line(text: str) -> None:
        if pattern is not None and pattern.search(text):
            pattern_hit.set()
        if on_line:
            on_line(text)
        if on_stage is not None:
            if live[0] is None:
                live[0] = identify_output(text)
            stage = live[0].live_stage(text) if live[0] is not None else None
            if stage is not None and stage != current_stage[0]:
                current_stage[0] = stage
                on_stage(stage, time.monotonic() - seen.launch["mono"])

    try:
        if on_start is not None:
            on_start(prep.run)
        if pattern is None and port_in_use(prep.health_url):
            raise _RunFailed(f"port already in use: {prep.health_url}")
        seen.launch["wall"] = time.time()
        seen.launch["mono"] = launch_mono = time.monotonic()
        try:
            if config.standby is not None:  # forked by the launcher, in its own session
                proc = standby.launch(config.standby, prep.argv, prep.env, os.getcwd(),
                                      root=config.standby_dir)
            else:
                proc = subprocess.Popen(
                    prep.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env=prep.env, start_new_session=True,
                    cwd=os.getcwd(), preexec_fn=_die_with_parent,
                )
        except OSError as exc:
            raise _RunFailed(f"cannot start the engine: {exc}") from None
        seen.launch["root_pid"] = proc.pid
        sampler = _CpuSampler(config.cpu_interval, launch_mono)
        sampler.start()
        assert proc.stdout is not None  # stdout=PIPE
        reader = _LineReader(proc.stdout, prep.run_dir / "engine.log", launch_mono, _on_line)
        reader.start()
        while True:
            now = time.monotonic() - launch_mono
            if pattern is not None:
                if pattern_hit.is_set():
                    seen.ready_at = time.monotonic() - launch_mono
                    break
            elif _get_ok(prep.health_url, timeout=1.0):
                seen.ready_at = time.monotonic() - launch_mono
                break
            if proc.poll() is not None:
                raise _RunFailed(f"engine exited with code {proc.returncode} before ready")
            if now > config.timeout:
                raise _RunFailed(f"not ready after {config.timeout:g} s (timeout)")
            time.sleep(0.05)
        base = urllib.parse.urlunsplit(urllib.parse.urlsplit(prep.health_url)._replace(path=""))
        served = prep.engine.served_model(prep.argv) or "default"
        if config.first_request:
            ttft, _text = first_token(base, served, config.prompt, config.max_tokens,
                                      config.request_timeout)
            seen.first_token_at = seen.ready_at + ttft
        if after_ready is not None:  # e.g. tune's verification, while the engine is still up
            seen.verification = after_ready(base, served, _tree_cpu_seconds(proc.pid))
        if prep.receiver is not None:
            time.sleep(0.6)  # > OTEL_BSP_SCHEDULE_DELAY: let the last batch of spans arrive
        seen.status = "ok"
    except _RunFailed as exc:
        seen.reason = str(exc)
    except ColdscopeError as exc:
        seen.reason = str(exc)
    except KeyboardInterrupt:
        seen.reason = "interrupted"
        seen.interrupted = True
    finally:
        kill_run(proc, prep.run.id, config.shutdown_grace)
        if reader is not None:
            reader.join(timeout=10)
            seen.lines = reader.lines
        if sampler is not None:
            seen.cpu = sampler.stop()
        if prep.receiver is not None:
            prep.receiver.stop()
            seen.otel = [s.to_dict() for s in prep.receiver.spans()]
        _cleanup(config, prep.dirs, ok=seen.status == "ok")
    return seen


def _tree_cpu_seconds(root_pid: int) -> Callable[[], float]:
    """A probe of the CPU seconds (user + system) the engine's process tree has used so far,
    for checks that run while it is up (tune's serving check divides CPU time by tokens: other
    work on a shared machine stretches wall time, not the engine's own CPU time)."""

    def total() -> float:
        try:
            root = psutil.Process(root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        seconds = 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                seconds += t.user + t.system
        return seconds

    return total


def _ready_pattern(text: str | None) -> re.Pattern[str] | None:
    try:
        return re.compile(text) if text else None
    except re.error as exc:
        raise ColdscopeError(f"--ready-pattern {text!r} is not a valid regular expression "
                             f"({exc})") from None


def _checked_url(url: str) -> str:
    """The health URL, refused with a one-line error before anything starts if unusable."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ColdscopeError(f"health URL {url!r}: port out of range 0-65535") from None
    if parts.scheme != "http" or not parts.hostname:
        raise ColdscopeError(f"health URL {url!r} must look like http://HOST:PORT/PATH")
    if port == 0:
        raise ColdscopeError(f"health URL {url!r}: port 0 is not a port to poll")
    return url


class _RunFailed(Exception):
    pass


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM/SIGHUP under ``profile``) during a run: the engine is already
    stopped; the failed run travels along so the caller can store it before stopping."""

    def __init__(self, record: Run, evidence: Evidence) -> None:
        super().__init__("interrupted")
        self.record = record
        self.evidence = evidence


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up once in the parent: the child between fork and exec must not load libraries
# (another thread may hold the loader's lock at fork time).
_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the engine's launcher, before exec: have the kernel send it SIGKILL when coldscope
    dies (Linux ``PR_SET_PDEATHSIG``), so a SIGKILLed coldscope does not leave the engine
    running. Children the engine forks are stopped by ``kill_run`` or the next start's
    recovery. (The signal follows the thread that forked; every caller of ``run_once`` keeps
    that thread alive until the engine is stopped.)"""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _cleanup(config: RunConfig, dirs: CacheDirs, *, ok: bool) -> None:
    """Decide what to keep of the caches; the per-run TMPDIR always goes."""
    if dirs.tmp is not None:
        shutil.rmtree(dirs.tmp, ignore_errors=True)
    if config.cache == "warm" and ok:
        (dirs.root / ".filled").touch()
    if config.cache == "cold" and not config.keep_cold_caches:
        shutil.rmtree(dirs.root, ignore_errors=True)


def profile(config: RunConfig, store: Store | None = None, *,
            on_run: Callable[[Run], None] | None = None,
            on_line: Callable[[str], None] | None = None,
            on_stage: Callable[[str, float], None] | None = None,
            on_launch: Callable[[Run], None] | None = None) -> list[Run]:
    """Run ``config.repeat`` start-ups (plus one priming run when a warm cache is empty),
    storing each as soon as it ends. Ctrl-C, SIGTERM and SIGHUP store the interrupted run as
    failed, stop the engine, and stop. ``on_launch(run)`` is called just before each engine
    starts and ``on_stage`` as in ``run_once`` (live progress displays)."""
    todo = config.repeat + (1 if needs_priming(config) else 0)
    return run_sequence([config] * todo, store, on_run=on_run, on_line=on_line,
                        on_stage=on_stage, on_launch=on_launch)


def needs_priming(config: RunConfig) -> bool:
    """Whether ``config``'s warm cache is still empty, so a priming run must fill it before a
    warm start-up can be measured. A shared ``cache_dir`` is never primed: each run finds
    what earlier ones left, as on a persistent volume."""
    return config.cache == "warm" and config.cache_dir is None \
        and not cache_dirs(config, "probe").warm_filled


def run_sequence(configs: Sequence[RunConfig], store: Store | None = None, *,
                 on_run: Callable[[Run], None] | None = None,
                 on_line: Callable[[str], None] | None = None,
                 on_stage: Callable[[str, float], None] | None = None,
                 on_launch: Callable[[Run], None] | None = None,
                 checks: Sequence[AfterReady | None] = ()) -> list[Run]:
    """One start-up per config, in the order given (``repeat`` is not read, and an empty warm
    cache is not primed first: the caller lists what it wants, e.g. ``compare``'s primes and
    interleaved a/b runs), each stored as soon as it ends; interruptions as in ``profile``.
    ``checks[i]``, when given, runs while the i-th engine is up (``run_once``'s
    ``after_ready``: e.g. ``compare --serving-check``)."""
    records = []
    if store is not None:
        recover_lost(store)
    sweep_stale_tmp()

    def on_start(run: Run) -> None:
        if store is not None:
            store.add_run(run)
        if on_launch is not None:
            on_launch(run)

    with signals_interrupt():
        for i, config in enumerate(configs):
            run_id = new_run_id()
            try:
                run, evidence = run_once(config, run_id=run_id, on_line=on_line,
                                         on_start=on_start, on_stage=on_stage,
                                         after_ready=checks[i] if i < len(checks) else None)
            except RunInterrupted as stop:
                if store is not None:
                    store.add_run(stop.record, stop.evidence)
                raise
            if store is not None:
                store.add_run(run, evidence)
            records.append(run)
            if on_run:
                on_run(run)
    return records


_SELF_STARTED = psutil.Process().create_time()


def _owner_stamp() -> str:
    return f"{os.getpid()} {_SELF_STARTED}"


def _alive(pid: int, started: float) -> bool:
    """Is the process ``pid`` that started at ``started`` (Unix s) still running? A reused
    pid has another start time."""
    try:
        created: float = psutil.Process(pid).create_time()
        return abs(created - started) < 0.5
    except (psutil.Error, OSError):
        return False


def recover_lost(store: Store) -> list[str]:
    """Runs left ``running`` by a coldscope that is gone (SIGKILL, power loss): stop any of
    their processes still alive, remove their temporary and cold-cache directories, and mark
    them ``lost`` with the reason. Runs whose coldscope still runs (on this host) are left
    alone. Returns the ids recovered."""
    recovered = []
    host = socket.gethostname()
    for run in store.runs(status="running"):
        launch = run.launch
        if launch is not None and launch.host not in (None, host):
            continue  # another machine's run: its own coldscope recovers it
        if launch is not None and _alive(launch.owner_pid, launch.owner_started):
            continue
        survivors = _processes_of_run(run.id)
        for p in survivors:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(survivors, timeout=5)
        for d in (launch.tmp_dir, launch.cache_dir) if launch is not None else ():
            if d:
                shutil.rmtree(d, ignore_errors=True)
        reason = "coldscope stopped before the run ended (killed?)"
        if survivors:
            reason += f"; {len(survivors)} leftover engine process(es) stopped"
        store.add_run(run.evolve(status="lost", reason=reason))
        recovered.append(run.id)
    return recovered


def sweep_stale_tmp() -> list[Path]:
    """Remove per-run TMPDIRs (``/tmp/coldscope-*``, vLLM's sockets among them) whose
    coldscope is gone. Directories without an owner stamp are not ours to judge and stay."""
    removed = []
    for d in Path(tempfile.gettempdir()).glob(TMP_PREFIX + "*"):
        try:
            pid, started = (d / OWNER_FILE).read_text().split()
            stale = not _alive(int(pid), float(started))
        except (OSError, ValueError):
            continue
        if stale:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (``timeout``, a CI cancel, ``docker stop``, a closed terminal) act
    like Ctrl-C while profiling: the run is stored as interrupted and the engine stopped.

    A signal this process was started ignoring stays ignored, as Unix tools do: ``nohup
    coldscope profile`` survives its terminal closing (SIGHUP ignored), and a job a
    non-interactive shell put in the background (``coldscope profile … &``: SIGINT ignored,
    which Python then leaves as it is) is not stopped by a Ctrl-C meant for the foreground.
    SIGTERM is always handled."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    handled = [s for s in (signal.SIGTERM, signal.SIGHUP)
               if s == signal.SIGTERM or signal.getsignal(s) != signal.SIG_IGN]
    previous = {s: signal.signal(s, interrupt) for s in handled}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
