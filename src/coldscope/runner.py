"""The runner: the only part of coldscope that starts processes.

``profile(config)`` launches the engine command ``repeat`` times, each in its own process group
with its own caches, and for each run records every output line with its arrival time, the
probe's events, the engine's own OpenTelemetry spans and per-core CPU use; it waits for
readiness (HTTP health check or a log pattern), sends one real streaming request to time the
first token, and always shuts the whole process group down (also on Ctrl-C, timeout or crash).
The raw evidence is then reconciled into a ``Timeline`` (a pure function, ``build_timeline``)
and the run is stored. Time origin: the monotonic time just before ``Popen``.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field

from coldscope import __version__
from coldscope.capture import environment
from coldscope.capture.otel_stages import otel_spans_to_stage_spans
from coldscope.capture.otlp import OtelSpan, Receiver
from coldscope.capture.probe import PROBE_DIR, probe_spans, process_table, read_probe_dir
from coldscope.errors import ColdscopeError
from coldscope.stages import CUDA_GRAPH_CAPTURE, TORCH_COMPILE
from coldscope.timeline import Span, Timeline, reconcile, timeline_dict

RUN_ID_ENV = "COLDSCOPE_RUN_ID"


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
    spans: bool = True
    cpu_interval: float = Field(0.5, gt=0)
    drop_page_cache: bool = False
    cache_root: Path = Path(".coldscope") / "caches"
    keep_cold_caches: bool = False
    label: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    shutdown_grace: float = 10.0


# -- command-line introspection (pure) -------------------------------------------------------


def _flag(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def engine_model(argv: list[str]) -> str | None:
    """The model the engine serves: ``--model X`` or ``vllm serve X``."""
    model = _flag(argv, "--model")
    if model is None and "serve" in argv:
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            model = argv[i + 1]
    return model


def default_health_url(argv: list[str]) -> str:
    host = _flag(argv, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    port = _flag(argv, "--port") or "8000"
    return f"http://{host}:{port}/health"


def is_vllm_server(argv: list[str]) -> bool:
    joined = " ".join(argv)
    return "vllm.entrypoints.openai.api_server" in joined or (
        "vllm" in Path(argv[0]).name and "serve" in argv
    )


def compile_enabled(argv: list[str]) -> bool:
    """torch.compile is on unless the command turns it off (``--enforce-eager``, ``-O0``)."""
    if "--enforce-eager" in argv or "-O0" in argv:
        return False
    level = _flag(argv, "--compilation-config") or _flag(argv, "-O")
    return not (level is not None and level.strip() in ("0", '{"level":0}', '{"mode":0}'))


def config_key(config: RunConfig) -> str:
    """Identity of a configuration: same command and environment overrides, same key. Warm
    caches are shared only between runs of one key."""
    payload = json.dumps({"command": config.command, "env": config.env}, sort_keys=True)
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


# -- evidence to timeline (pure) -------------------------------------------------------------


@dataclass
class Evidence:
    """Everything one run observed, times in seconds since launch unless stated."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    probe_dir: Path | None = None
    otel: list[OtelSpan] = field(default_factory=list)
    launch_mono: float = 0.0
    launch_wall: float = 0.0
    root_pid: int | None = None
    ready_at: float | None = None
    first_token_at: float | None = None
    cpu: dict | None = None


def log_evidence_spans(lines: list[tuple[float, str]]) -> tuple[list[Span], dict]:
    """Spans from log lines and their arrival times, via the version-aware log adapters."""
    from coldscope.capture.logs import log_spans, parse_vllm_log

    parsed = parse_vllm_log([text for _, text in lines])
    spans = log_spans(parsed, [t for t, _ in lines])
    info = {
        "version": parsed.version,
        "family": parsed.family,
        "device": parsed.device,
        "enforce_eager": parsed.enforce_eager,
    }
    return spans, info


def build_timeline(ev: Evidence, argv: list[str], *, has_gpu: bool) -> tuple[Timeline, dict]:
    """Reconcile the three sources into one timeline (pure: no process, no clock).

    ``has_gpu`` comes from the run's recorded environment, so the machine is not probed again.
    """
    if ev.ready_at is None:
        raise ValueError("a timeline needs the time the engine became ready")
    compiled = compile_enabled(argv)
    spans: list[Span] = []
    log_info: dict = {}
    if ev.lines:
        log_part, log_info = log_evidence_spans(ev.lines)
        spans += log_part
    processes = []
    if ev.probe_dir is not None and ev.root_pid is not None:
        processes = read_probe_dir(ev.probe_dir)
        spans += probe_spans(processes, launch_mono=ev.launch_mono, root_pid=ev.root_pid,
                             ready_at=ev.ready_at, compile_enabled=compiled)
    if ev.otel:
        spans += otel_spans_to_stage_spans(ev.otel, origin_unix=ev.launch_wall,
                                           compile_enabled=compiled)
    not_applicable = set()
    if not compiled:
        not_applicable.add(TORCH_COMPILE)
    on_cpu = log_info.get("device") == "cpu" or not has_gpu
    if not compiled or on_cpu:
        not_applicable.add(CUDA_GRAPH_CAPTURE)
    tl = reconcile(spans, ev.ready_at, not_applicable=not_applicable,
                   origin_unix=ev.launch_wall)
    extra = {"log": log_info, "processes": process_table(processes, ev.launch_mono)}
    return tl, extra


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


def kill_run(proc: subprocess.Popen | None, run_id: str, grace: float) -> None:
    """Stop the engine: SIGTERM to its process group, SIGKILL after ``grace`` seconds, then
    SIGKILL to any process that escaped the group but still carries the run's marker."""
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

    def __init__(self, stream, log_file: Path, launch_mono: float,
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

    def stop(self) -> dict:
        self._halt.set()
        self.join(timeout=2)
        return {"interval_s": self.interval, "t": self.t, "per_core": self.per_core}


def _get_ok(url: str, timeout: float = 1.0) -> bool:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
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
    parts = urllib.parse.urlsplit(base_url)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "stream": True, "temperature": 0})
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ColdscopeError(f"first request got HTTP {resp.status}: {resp.read(300)!r}")
        ttft = None
        text = ""
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            choices = json.loads(line[5:]).get("choices") or []
            if choices and ttft is None:
                ttft = time.monotonic() - t0
            text += "".join(c.get("text") or "" for c in choices)
        if ttft is None:
            raise ColdscopeError("first request returned no tokens")
        return ttft, text
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise ColdscopeError(f"first request failed: {exc}") from None
    finally:
        conn.close()


def drop_page_cache(model_path: str | None) -> str:
    """Evict the model's files from the page cache (posix_fadvise DONTNEED, no root needed).
    Returns what was done, or why it was not possible."""
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

    def env(self) -> dict[str, str]:
        for sub in ("home", "vllm", "inductor", "xdg", "triton"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if self.tmp is None:
            self.tmp = Path(tempfile.mkdtemp(prefix="coldscope-"))
        return {
            "HOME": str(self.root / "home"),
            "VLLM_CACHE_ROOT": str(self.root / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(self.root / "inductor"),
            "TMPDIR": str(self.tmp),
            "XDG_CACHE_HOME": str(self.root / "xdg"),
            "TRITON_CACHE_DIR": str(self.root / "triton"),
        }


def cache_dirs(config: RunConfig, run_id: str) -> CacheDirs:
    root = Path(config.cache_root).resolve()
    if config.cache == "cold":
        return CacheDirs(root / "cold" / run_id, warm_filled=False)
    d = root / "warm" / config_key(config)
    return CacheDirs(d, warm_filled=(d / ".filled").exists())


# -- one run ---------------------------------------------------------------------------------


def run_once(config: RunConfig, *, run_id: str | None = None, cache_state: str | None = None,
             on_line: Callable[[str], None] | None = None,
             after_ready: Callable[[str, str], dict] | None = None) -> tuple[dict, dict]:
    """Launch, time, and stop the engine once. Returns (run record, raw evidence).

    Never raises for an engine failure: a failed run is returned with status "failed", its
    reason and the tail of its log. KeyboardInterrupt still propagates, after the engine is
    stopped, so the caller can store the interrupted run and stop.
    """
    run_id = run_id or new_run_id()
    argv = list(config.command)
    health_url = config.health_url or default_health_url(argv)
    dirs = cache_dirs(config, run_id)
    cache = cache_state or ("warm" if config.cache == "warm" and dirs.warm_filled else "cold")
    run_dir = Path(config.cache_root).resolve().parent / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    probe_dir = run_dir / "probe"
    probe_dir.mkdir(exist_ok=True)
    model = engine_model(argv)
    notes: list[str] = []
    if config.cache == "warm" and not dirs.warm_filled:
        notes.append("warm cache was empty: this run fills it and counts as cold")

    env = dict(os.environ)
    # `python` in the command means coldscope's own interpreter, as in an activated venv.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(dirs.env())
    env.update(config.env)
    env[RUN_ID_ENV] = run_id
    if config.probe:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_compiled_probe_dir(), env.get("PYTHONPATH", "")) if p
        )
        env["COLDSCOPE_PROBE_DIR"] = str(probe_dir)

    receiver = None
    if config.spans and is_vllm_server(argv) and _flag(argv, "--otlp-traces-endpoint") is None:
        receiver = Receiver().start()
        argv += ["--otlp-traces-endpoint", receiver.endpoint]
        env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = receiver.endpoint
        # Export spans within 0.2 s (default 5 s), so that the last start-up spans arrive
        # before the engine is stopped after its first request.
        env.setdefault("OTEL_BSP_SCHEDULE_DELAY", "200")

    page_cache = drop_page_cache(model) if config.drop_page_cache else "not requested"
    engine_python = shutil.which(argv[0], path=env["PATH"])
    record: dict = {
        "id": run_id,
        "schema_version": 1,
        "tool": {"name": "coldscope", "version": __version__},
        "status": "failed",
        "reason": None,
        "cache": cache,
        "label": config.label,
        "config_key": config_key(config),
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "time_to_ready_s": None,
        "first_token_s": None,
        "stages": {},
        "substeps": {},
        "sources": {},
        "intervals": [],
        "cpu": None,
        "notes": notes,
        "page_cache": page_cache,
        "model": {"path": os.path.abspath(model) if model and os.path.exists(model) else model,
                  "name": os.path.basename(model.rstrip("/")) if model else None},
        "engine": {
            "name": "vllm" if "vllm" in " ".join(argv) else Path(argv[0]).name,
            "version": None,
            "argv": argv,
            "model": model,
            "enforce_eager": "--enforce-eager" in argv,
            "compile": compile_enabled(argv),
            "load_format": _flag(argv, "--load-format"),
        },
        "environment": environment.collect(
            engine_python=engine_python if engine_python and "python" in engine_python else None,
            weights_path=model if model and os.path.exists(model) else None,
            env={**config.env, **dirs.env()},
        ),
        "health_url": health_url,
        "log_path": str(run_dir / "engine.log"),
    }
    record["engine"]["version"] = record["environment"].get("vllm")
    ev = Evidence(probe_dir=probe_dir if config.probe else None)
    interrupted = False
    proc = None
    reader = sampler = None
    pattern = re.compile(config.ready_pattern) if config.ready_pattern else None
    pattern_hit = threading.Event()

    def _on_line(text: str) -> None:
        if pattern is not None and pattern.search(text):
            pattern_hit.set()
        if on_line:
            on_line(text)

    try:
        if pattern is None and port_in_use(health_url):
            raise _RunFailed(f"port already in use: {health_url}")
        ev.launch_wall = time.time()
        ev.launch_mono = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, cwd=os.getcwd(),
            )
        except OSError as exc:
            raise _RunFailed(f"cannot start the engine: {exc}") from None
        ev.root_pid = proc.pid
        sampler = _CpuSampler(config.cpu_interval, ev.launch_mono)
        sampler.start()
        reader = _LineReader(proc.stdout, run_dir / "engine.log", ev.launch_mono, _on_line)
        reader.start()
        while True:
            now = time.monotonic() - ev.launch_mono
            if pattern is not None:
                if pattern_hit.is_set():
                    ev.ready_at = time.monotonic() - ev.launch_mono
                    break
            elif _get_ok(health_url, timeout=1.0):
                ev.ready_at = time.monotonic() - ev.launch_mono
                break
            if proc.poll() is not None:
                raise _RunFailed(f"engine exited with code {proc.returncode} before ready")
            if now > config.timeout:
                raise _RunFailed(f"not ready after {config.timeout:g} s (timeout)")
            time.sleep(0.05)
        if config.first_request:
            base = urllib.parse.urlunsplit(urllib.parse.urlsplit(health_url)._replace(path=""))
            served = _flag(argv, "--served-model-name") or model or "default"
            ttft, _text = first_token(base, served, config.prompt, config.max_tokens,
                                      config.request_timeout)
            ev.first_token_at = ev.ready_at + ttft
        if after_ready is not None:  # e.g. tune's verification, while the engine is still up
            base = urllib.parse.urlunsplit(urllib.parse.urlsplit(health_url)._replace(path=""))
            served = _flag(argv, "--served-model-name") or model or "default"
            record["verification"] = after_ready(base, served)
        if receiver is not None:
            time.sleep(0.6)  # > OTEL_BSP_SCHEDULE_DELAY: let the last batch of spans arrive
        record["status"] = "ok"
    except _RunFailed as exc:
        record["reason"] = str(exc)
    except ColdscopeError as exc:
        record["reason"] = str(exc)
    except KeyboardInterrupt:
        record["reason"] = "interrupted"
        interrupted = True
    finally:
        kill_run(proc, run_id, config.shutdown_grace)
        if reader is not None:
            reader.join(timeout=10)
        if sampler is not None:
            ev.cpu = sampler.stop()
        if receiver is not None:
            receiver.stop()
            ev.otel = receiver.spans()
        if reader is not None:
            ev.lines = reader.lines
        _finish(record, ev, argv, config, dirs)
    evidence = {
        "log": [[round(t, 4), text] for t, text in ev.lines],
        "otel": [s.to_dict() for s in ev.otel],
        "launch": {"mono": ev.launch_mono, "wall": ev.launch_wall, "root_pid": ev.root_pid},
    }
    if interrupted:
        raise RunInterrupted(record, evidence)
    return record, evidence


class _RunFailed(Exception):
    pass


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the engine is already stopped; the failed run travels along so
    the caller can store it before stopping."""

    def __init__(self, record: dict, evidence: dict) -> None:
        super().__init__("interrupted")
        self.record = record
        self.evidence = evidence


def _finish(record: dict, ev: Evidence, argv: list[str], config: RunConfig,
            dirs: CacheDirs) -> None:
    """Fill the record from the evidence; decide what to keep of the caches."""
    record["cpu"] = ev.cpu
    record["log_tail"] = "\n".join(text for _, text in ev.lines[-40:])
    if record["status"] == "ok" and ev.ready_at is not None:
        try:
            tl, extra = build_timeline(
                ev, argv, has_gpu=bool((record.get("environment") or {}).get("gpus")))
        except Exception as exc:  # a bug in evidence handling must not lose the run
            record["notes"].append(f"timeline could not be built: {exc!r}")
        else:
            record.update(timeline_dict(tl))
            record["log_info"] = extra["log"]
            record["processes"] = extra["processes"]
            # the probe's own time, summed over all processes: an upper bound of its overhead
            record["probe_cost_s"] = sum(p["probe_cost_s"] for p in extra["processes"])
            if extra["log"].get("version") and not record["engine"]["version"]:
                record["engine"]["version"] = extra["log"]["version"]
        record["time_to_ready_s"] = ev.ready_at
        record["first_token_s"] = ev.first_token_at
    if dirs.tmp is not None:
        shutil.rmtree(dirs.tmp, ignore_errors=True)
    if config.cache == "warm" and record["status"] == "ok":
        (dirs.root / ".filled").touch()
    if config.cache == "cold" and not config.keep_cold_caches:
        shutil.rmtree(dirs.root, ignore_errors=True)


def profile(config: RunConfig, store=None, *, on_run: Callable[[dict], None] | None = None,
            on_line: Callable[[str], None] | None = None) -> list[dict]:
    """Run ``config.repeat`` start-ups (plus one priming run when a warm cache is empty),
    storing each as soon as it ends. Ctrl-C stores the interrupted run as failed and stops."""
    records = []
    todo = config.repeat
    if config.cache == "warm" and not cache_dirs(config, "x").warm_filled:
        todo += 1
    for _ in range(todo):
        run_id = new_run_id()
        try:
            record, evidence = run_once(config, run_id=run_id, on_line=on_line)
        except RunInterrupted as stop:
            if store is not None:
                store.add_run(stop.record, stop.evidence)
            raise
        if store is not None:
            store.add_run(record, evidence)
        records.append(record)
        if on_run:
            on_run(record)
    return records
