"""What ``coldscope serve`` does, apart from HTTP: watch logs, store runs, keep metrics, and
answer predict / plan / runs questions with the same functions as the CLI (scale hints and
``--advise``: ``serve.advise``).

One ``Service`` per process. The watcher's polling thread finds start-ups; one storing thread
builds each finished one's run, writes it (the only writer of the store) and updates the
metrics; a few worker threads (``serve.workers``) do every request's store reading and
waiting, each call with a time limit, and open their own read connection per request (SQLite
connections belong to one thread). The event loop itself never reads a file.

Work that reads model files or computes from them (a prediction from a path, a plan, a scale
hint from a model directory) runs in a process of its own (``Workers.isolated``): at most
``--workers`` at once, its memory bounded by ``--request-memory`` and killed at
``--request-timeout``. What it gets is a ``Sandbox`` (the roots, serve's own files, the loaded
startup model) and the request; nothing else of serve.

What a request may make serve read, one rule for every path it names (``model``, ``features``
given as a string, the plan files): ``resolve_path``. A path must lie inside a
``--model-root`` once symbolic links are resolved, and exist there; missing, outside or
unresolvable is one and the same answer, so an answer never tells what lies outside. Without a
``--model-root`` no path is accepted at all. A model directory's entries must all be regular
files or directories that resolve inside a root (checked before anything is read); while the
work runs, every file opened through ``coldscope.util.safeio`` is checked against the roots
again (``safeio.confined``), and errors about a file's content name the field, never its
value (``features.values_withheld``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import stat
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from coldscope.core.records import Run
from coldscope.prediction.core import MAX_CAPTURE_SIZES, MAX_STORAGE_BPS, MIN_STORAGE_BPS
from coldscope.prediction.features import values_withheld
from coldscope.prediction.startup_model import StartupModel, predict_json
from coldscope.serve.metrics import StartupMetrics, model_path
from coldscope.serve.runs import build_run
from coldscope.serve.watcher import MAX_HELD_BYTES, LogWatcher, Startup
from coldscope.serve.workers import REQUEST_MEMORY_BYTES, Unavailable, Workers
from coldscope.util.errors import ColdscopeError, validation_error
from coldscope.util.safeio import confined, file_kind, finite_or_none

if TYPE_CHECKING:
    from coldscope.planning.planner import PlanRequest
    from coldscope.store.db import Store

log = logging.getLogger("coldscope.serve")

# Unavailable (HTTP 503) is the workers' too: a store that cannot be read, work past its bounds
__all__ = ["NotConfigured", "NotFound", "Sandbox", "ServeConfig", "Service", "Unavailable",
           "resolve_path"]

MAX_PATH_CHARS = 4096
#: Most entries a model directory may have (each is checked before anything is read).
MAX_MODEL_DIR_ENTRIES = 10_000
#: ``--rate-query``'s default: vLLM's finished requests per second over the last minute, of the
#: model ``{model}`` (``serve.advise``).
DEFAULT_RATE_QUERY = 'sum(rate(vllm:request_success_total{model_name="{model}"}[1m]))'
#: Most finished start-ups waiting to be stored (past it they are dropped, logged, counted).
MAX_STORE_QUEUE = 1000


class NotFound(ColdscopeError):
    """No such run, or no store yet (HTTP 404)."""


class NotConfigured(ColdscopeError):
    """The question needs an option serve was not started with (HTTP 409)."""


@dataclass
class ServeConfig:
    """Everything ``coldscope serve`` was told (the CLI builds it, tests too)."""

    store: str | None = None
    startup_model: str | None = None
    watch: list[str] = field(default_factory=list)
    glob: str = "*.log"
    replica_label: str | None = None
    timeout: float = 900.0
    poll_interval: float = 0.2
    model_roots: list[str] = field(default_factory=list)
    token: str | None = None
    max_body_bytes: int = 1024 * 1024
    max_replicas: int = 512
    max_models: int = 64
    request_timeout: float = 30.0  # seconds one request's work may take (then 503)
    max_watch_bytes: int = MAX_HELD_BYTES  # text all running start-ups may hold together
    workers: int = 4  # heavy requests at once, each in its own process (more: 503 at once)
    request_memory: int = REQUEST_MEMORY_BYTES  # bytes one heavy request's process may add
    # --advise: gauges of desired replicas per model, the rate from Prometheus (serve.advise)
    advise: list[str] = field(default_factory=list)
    sla_p99_ttft: str | None = None
    prometheus: str | None = None
    rate_query: str = DEFAULT_RATE_QUERY
    advise_interval: float = 5.0
    replica_rps: float | None = None
    advise_source: str = "auto"


class Service:
    """The state behind the HTTP app: loaded startup model, metrics, watcher, store path.
    ``start()``/``stop()`` run the threads (the app's lifespan calls them)."""

    def __init__(self, config: ServeConfig):
        from coldscope.store.db import default_store_path
        self.config = config
        self.store_path = Path(config.store) if config.store else default_store_path()
        self.model_roots = [Path(r).resolve() for r in config.model_roots]
        for root in self.model_roots:
            if not root.is_dir():
                raise ColdscopeError(f"--model-root {root} is not a directory")
        self.startup_model: StartupModel | None = None
        if config.startup_model:
            self.startup_model = StartupModel.load(config.startup_model)
        self.watcher: LogWatcher | None = None
        if config.watch:
            self.watcher = LogWatcher(config.watch, on_finish=self._on_finish,
                                      on_start=self._on_start, glob=config.glob,
                                      replica_label=config.replica_label,
                                      timeout=config.timeout, interval=config.poll_interval,
                                      max_held_bytes=config.max_watch_bytes)
        self.metrics = StartupMetrics(max_replicas=config.max_replicas,
                                      max_models=config.max_models,
                                      in_progress=self._in_progress,
                                      errors=self.errors, dropped=self.dropped)
        self._stored = 0
        self._queue: queue.Queue[Startup | None] | None = None
        self._storer: threading.Thread | None = None
        self._errors = 0  # start-ups that could not be stored
        self._not_queued = 0  # finished start-ups dropped: MAX_STORE_QUEUE already waited
        self._predictions: dict[str, dict[str, Any] | None] = {}
        # a thread for each heavy request's wait, and a few more for store queries
        self.workers = Workers(config.workers + 4, processes=config.workers,
                               memory_bytes=config.request_memory)
        self.sandbox = Sandbox(tuple(self.model_roots), self.startup_model,
                               Path(config.startup_model).absolute()
                               if config.startup_model else None,
                               self.store_path.absolute())
        self._stopping = threading.Event()

    # -- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start following the logs. Finished start-ups are then stored by their own thread,
        so a slow or locked store (a campaign writing) never stops the watcher's polling."""
        self._stopping.clear()
        # the fork server loads coldscope once (about a second), off the lifespan's path
        threading.Thread(target=self.workers.warm, name="coldscope-warm", daemon=True).start()
        if self.watcher is not None:
            self._queue = queue.Queue(maxsize=MAX_STORE_QUEUE)
            self._storer = threading.Thread(target=self._store_loop, name="coldscope-store",
                                            daemon=True)
            self._storer.start()
            self.watcher.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop within about ``2 * timeout`` seconds whatever is in flight: the threads are
        daemons, waited for that long at most. Start-ups not stored yet are left to the next
        start (the logs are read again and stored ids are never stored twice)."""
        self._stopping.set()
        if self.watcher is not None:
            self.watcher.stop(timeout=timeout)
        if self._storer is not None and self._queue is not None:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass  # the storing thread sees _stopping before its next start-up
            self._storer.join(timeout=timeout)
            if self._storer.is_alive():
                log.warning("the storing thread is still busy; not waited for")
            self._storer, self._queue = None, None
        self.workers.stop()

    def _store_loop(self) -> None:
        q = self._queue
        assert q is not None
        while not self._stopping.is_set() and (s := q.get()) is not None:
            try:
                self._store(s)
            except Exception:
                self._errors += 1
                log.exception("storing the start-up of %s (%s) failed", s.replica, s.path)

    def errors(self) -> int:
        """Errors logged and survived: the watcher's, and start-ups that could not be stored."""
        return (self.watcher.errors if self.watcher else 0) + self._errors

    def dropped(self) -> dict[str, int]:
        """What a bound made serve give up, by reason: the watcher's (``max_files``,
        ``memory``) and finished start-ups not stored as too many waited (``store_queue``)."""
        counts = self.watcher.drops() if self.watcher is not None else {}
        counts["store_queue"] = self._not_queued
        return counts

    @property
    def stored(self) -> int:
        """Runs this process stored from watched logs."""
        return self._stored

    # -- the watcher's side ----------------------------------------------------------------------

    def _in_progress(self) -> list[tuple[str, float]]:
        if self.watcher is None:
            return []
        now = self.watcher.clock()
        return [(s.replica, now - s.first_seen) for s in self.watcher.running()]

    def _on_start(self, s: Startup) -> None:
        log.info("start-up of %s began (%s)", s.replica, s.path)

    def _on_finish(self, s: Startup) -> None:
        if self._queue is not None:
            try:
                self._queue.put_nowait(s)  # a finished Startup is never changed again
            except queue.Full:  # the store is stuck: never make the watcher wait for it
                self._not_queued += 1
                log.error("start-up of %s (%s) not stored: %d start-ups already wait to be "
                          "stored", s.replica, s.path, MAX_STORE_QUEUE)
        else:
            self._store(s)  # not started (tests driving poll_once): store at once

    def _store(self, s: Startup) -> None:
        from coldscope.store.db import Store
        try:
            run = build_run(s)
        except ColdscopeError as exc:  # no engine adapter knows these lines
            log.warning("start-up of %s not stored: %s", s.replica, exc)
            return
        with Store(self.store_path) as store:  # a connection per run: cheap, thread-safe
            if store.has_run(run.id):  # the same start-up, stored before (or by parse --save)
                log.info("start-up %s of %s is already stored", run.id, s.replica)
                return
            store.add_run(run)
        self._stored += 1
        log.info("stored %s: %s %s (%s)", run.id, s.replica, run.status,
                 run.reason or f"{run.time_to_ready_s} s to ready")
        self.metrics.observe(run, s.replica, self._prediction_for(run))

    def _prediction_for(self, run: Run) -> dict[str, Any] | None:
        """The startup model's prediction for the run's model, when a model is loaded and the
        run's model directory is found under a --model-root (by path, else by name)."""
        if self.startup_model is None or not self.model_roots:
            return None
        path = model_path(run)
        if not path:
            return None
        if path in self._predictions:
            return self._predictions[path]
        prediction = None
        for candidate in (path, Path(path).name):
            try:  # on a worker, with a time limit: no model a log names can wedge this thread
                prediction = self.workers.call(self._predict, {"model": candidate}, True,
                                               timeout=2 * self.config.request_timeout,
                                               what=f"the prediction for {candidate!r}")
                break
            except ColdscopeError:
                continue
        if len(self._predictions) >= 1024:  # model paths come from logs: keep the memo bounded
            self._predictions.clear()
        self._predictions[path] = prediction
        return prediction

    # -- questions ---------------------------------------------------------------------------------

    @staticmethod
    def reads_files(body: Mapping[str, Any]) -> bool:
        """Whether a /v1/predict body names a path (``model``, or ``features`` as a string): its
        work then runs in a process of its own; a features document is answered at once."""
        return "model" in body or isinstance(body.get("features"), str)

    def predict(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``predict --json`` for a features document (as ``features --json`` prints it),
        ``{"features": {...}}``, or ``{"model": PATH}`` / ``{"features": PATH}`` under a model
        root; the options ``capture_sizes``, ``storage_bandwidth`` (bytes/s) and ``page_cache``
        (hot | cold) as the CLI's, with its bounds."""
        return self._predict(body, False)

    def _predict(self, body: Mapping[str, Any], wait: bool) -> dict[str, Any]:
        if self.startup_model is None:
            raise NotConfigured("no startup model loaded: start serve with --startup-model")
        body = dict(body)
        options = PredictOptions.pop_from(body)
        if len(body) == 1 and self.reads_files(body):
            (name, given), = body.items()
            check_path_name(self.model_roots, given, name)  # before a process is started
            return self.workers.isolated(_predict_job, self.sandbox, name, given, options,
                                         timeout=self.config.request_timeout, what="predict",
                                         wait=wait)
        target = body["features"] if set(body) == {"features"} else body
        if not isinstance(target, Mapping):
            raise ColdscopeError("features must be a JSON object (a features document) or a "
                                 "path under a --model-root")
        return options.predict(self.startup_model, target)

    def plan(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``plan --json`` for plan options given by their CLI names, in a process of its own.
        Files named in the body must lie under a --model-root (``resolve_path``); the startup
        model and the store are serve's own. The body becomes the CLI's ``PlanRequest`` here,
        before a process is started; the process resolves its files and plans."""
        from coldscope.planning.planner import PlanRequest
        for key in ("startup_model", "store", "no_store"):
            if key in body:
                raise ColdscopeError(f"{key} is serve's own (--{key.replace('_', '-')}); "
                                     "it cannot be set per request")
        for key in _PLAN_FILES:
            if body.get(key) is not None:
                check_path_name(self.model_roots, body[key], key)
        try:
            request = PlanRequest(**body)
        except ValidationError as exc:
            raise validation_error(exc, "plan request") from None
        return self.workers.isolated(_plan_job, self.sandbox, request,
                                     timeout=self.config.request_timeout, what="plan")

    def runs(self, status: str | None = None, cache: str | None = None,
             label: str | None = None) -> dict[str, Any]:
        """``runs --json``."""
        with self._reader() as store:
            return {"runs": [r.to_json() for r in
                             store.runs(status=status, cache=cache, label=label)]}

    def run(self, run_id: str) -> dict[str, Any]:
        """``show --json``."""
        with self._reader() as store:
            try:
                return store.run(run_id).to_json()
            except ColdscopeError as exc:
                if str(exc).startswith("no run "):
                    raise NotFound(str(exc)) from None
                raise

    def _reader(self) -> Store:
        """A read connection to the store for this request."""
        from coldscope.store.db import Store
        try:
            return Store(self.store_path, create=False)
        except ColdscopeError as exc:
            kind = Unavailable if self.store_path.exists() else NotFound
            raise kind(str(exc)) from None

    def in_progress(self) -> list[dict[str, Any]]:
        """Start-ups seen and not yet ready, with what their lines show so far."""
        if self.watcher is None:
            return []
        from coldscope.core.timeline import Timeline, timeline_dict
        from coldscope.engines import read_log
        now = self.watcher.clock()
        out = []
        for s in self.watcher.running():
            found = read_log(list(s.lines))  # the engine adapter that knows these lines
            tl = timeline_dict(found.timeline if found is not None else
                               Timeline(time_to_ready=None, stages={}))
            out.append({"replica": s.replica, "path": s.path, "status": "running",
                        "seconds_since_first_line": round(now - s.first_seen, 3),
                        "lines": len(s.lines), "stages_so_far": tl["stages"]})
        return out


# -- the one rule for request paths --------------------------------------------------------------

def check_path_name(roots: Sequence[Path], given: Any, name: str) -> None:
    """What can be told of a request path without looking at the filesystem: it is a string
    of a sane length, and serve has a --model-root to look under."""
    if not isinstance(given, str):
        raise ColdscopeError(f"{name} must be a path (a string)")
    if not roots:
        raise ColdscopeError(f"{name} names a path, and serve reads paths only under a "
                             "--model-root: start serve with --model-root DIR")
    if not given or len(given) > MAX_PATH_CHARS or "\x00" in given:
        raise ColdscopeError(f"{name} path is empty, longer than {MAX_PATH_CHARS} characters "
                             "or has a NUL byte")


def resolve_path(roots: Sequence[Path], given: Any, name: str) -> Path:
    """The one rule for every path a request names (field ``name``): ``given`` (absolute, or
    relative to a --model-root) once symbolic links are resolved must lie inside a root and
    exist there. Missing, outside, a link leading out, a link loop: one answer, word for word,
    so that it tells nothing of what lies outside the roots. A path inside is then checked
    before anything is read (``_check_files``)."""
    check_path_name(roots, given, name)
    p = Path(given)
    for candidate in ([p] if p.is_absolute() else [r / p for r in roots]):
        try:
            resolved = candidate.resolve()
            if any(resolved.is_relative_to(r) for r in roots) and resolved.exists():
                _check_files(roots, resolved, given, name)
                return resolved
        except (OSError, RuntimeError, ValueError):  # a link loop, a name too long
            continue
    raise ColdscopeError(f"{name} path {given!r} is missing or outside every --model-root")


def _inside_roots(roots: Sequence[Path], real: str) -> bool:
    return any(Path(real).is_relative_to(r) for r in roots)


def _check_files(roots: Sequence[Path], resolved: Path, given: str, name: str) -> None:
    """Before anything is read: ``resolved`` is a regular file, or a directory whose entries
    are all regular files or directories lying inside a --model-root once links are
    resolved. Messages name the entry, never anything read from it."""
    try:
        mode = os.stat(resolved).st_mode
    except OSError as exc:
        raise ColdscopeError(f"{name} path {given!r} cannot be read: {exc.strerror}") from None
    if stat.S_ISREG(mode):
        return
    if not stat.S_ISDIR(mode):
        raise ColdscopeError(f"{name} path {given!r} is {file_kind(mode)}, not a regular "
                             "file or a directory; not read")
    try:
        with os.scandir(resolved) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_MODEL_DIR_ENTRIES:
                    raise ColdscopeError(f"{name} directory {given!r} has more than "
                                         f"{MAX_MODEL_DIR_ENTRIES} entries; not read")
                real = os.path.realpath(entry.path)
                if not _inside_roots(roots, real):
                    raise ColdscopeError(f"{name} {given!r}: {entry.name!r} lies outside "
                                         "every --model-root; not read")
                try:
                    mode = os.stat(real).st_mode
                except OSError:
                    continue  # a dangling link inside the root: reading it says it is missing
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise ColdscopeError(f"{name} {given!r}: {entry.name!r} is "
                                         f"{file_kind(mode)}, not a regular file; not read")
    except OSError as exc:
        raise ColdscopeError(f"{name} path {given!r} cannot be listed: {exc.strerror}") \
            from None


# -- the work of heavy requests, in a process of its own (``Workers.isolated``) --------------------

@dataclass(frozen=True)
class Sandbox:
    """What a heavy request's process knows of serve: the roots it may read under, serve's
    own files, and the startup model it loaded (pickled over, a few tens of kB)."""

    roots: tuple[Path, ...]
    startup_model: StartupModel | None
    startup_model_path: Path | None
    store_path: Path

    @contextlib.contextmanager
    def bounds(self) -> Iterator[None]:
        """Files opened only inside the roots (or serve's own, or coldscope's package data);
        errors naming a file's field, never its value."""
        own = [self.startup_model_path] if self.startup_model_path else []
        with confined([*self.roots, *own, _PACKAGE_DIR]), values_withheld():
            yield


@dataclass(frozen=True)
class PredictOptions:
    """The options of a /v1/predict body, each checked against the CLI's bounds (so every
    answer stays finite): CUDA-graph capture sizes, storage bandwidth in bytes/s, page cache."""

    capture_sizes: int | None = None
    storage_bandwidth: float | None = None
    page_cache: Literal["hot", "cold"] | None = None

    @classmethod
    def pop_from(cls, body: dict[str, Any]) -> PredictOptions:
        """The options taken out of ``body`` (what is left names the model); ``ColdscopeError``
        (one line) for a value out of bounds or of the wrong type."""
        given = {k: body.pop(k) for k in _PREDICT_OPTIONS if k in body}
        sizes = given.get("capture_sizes")
        if sizes is not None and (type(sizes) is not int or not
                                  0 <= sizes <= MAX_CAPTURE_SIZES):
            raise ColdscopeError(f"capture_sizes must be a whole number in "
                                 f"0-{MAX_CAPTURE_SIZES}")
        bandwidth = given.get("storage_bandwidth")
        if bandwidth is not None and (type(bandwidth) not in (int, float) or not
                                      MIN_STORAGE_BPS <= bandwidth <= MAX_STORAGE_BPS):
            raise ColdscopeError(f"storage_bandwidth must be a number of bytes/s in "
                                 f"{MIN_STORAGE_BPS:.0e}-{MAX_STORAGE_BPS:.0e} "
                                 "(1 MB/s-10 TB/s)")
        page_cache = given.get("page_cache")
        if page_cache not in (None, "hot", "cold"):
            raise ColdscopeError("page_cache must be hot or cold")
        return cls(sizes, bandwidth, page_cache)

    def predict(self, startup_model: StartupModel,
                model: str | Mapping[str, Any]) -> dict[str, Any]:
        """``predict --json`` of ``model`` (a path, or a features document) with these
        options, as JSON may hold it (``finite``)."""
        return finite(predict_json(startup_model, model, capture_sizes=self.capture_sizes,
                                   storage_bandwidth=self.storage_bandwidth,
                                   page_cache=self.page_cache))


def _predict_job(sandbox: Sandbox, name: str, given: str,
                 options: PredictOptions) -> dict[str, Any]:
    """/v1/predict for a path: the model at ``given`` under a root, predicted."""
    assert sandbox.startup_model is not None
    with sandbox.bounds():
        target = resolve_path(sandbox.roots, given, name)
        return options.predict(sandbox.startup_model, str(target))


def _plan_job(sandbox: Sandbox, request: PlanRequest) -> dict[str, Any]:
    """/v1/plan: every file the request names resolved by the one rule, serve's own startup
    model and store added, then ``plan`` as the CLI's."""
    from coldscope.planning import plan
    with sandbox.bounds():
        files = {key: str(resolve_path(sandbox.roots, getattr(request, key), key))
                 for key in _PLAN_FILES if getattr(request, key) is not None}
        own: dict[str, Any] = {"store": str(sandbox.store_path)} \
            if sandbox.store_path.exists() else {"no_store": True}  # as the CLI without one
        if sandbox.startup_model_path is not None and request.model is not None:
            own["startup_model"] = str(sandbox.startup_model_path)
        request = request.model_copy(update={**files, **own})
        try:
            return finite(plan(request).to_json())
        except ColdscopeError as exc:
            raise ColdscopeError(_withhold_quotes(str(exc), list(files.values()))) from None


def _withhold_quotes(message: str, paths: Sequence[str]) -> str:
    """A planner error about one of the files a request named, with what it quotes from the
    file elided: the readers of profiles, traffic, traces and tiers quote the values they
    refuse (a GPU name, a CSV header line), and the file is not the client's to read. The
    field each names (a key, a column) stays."""
    for path in paths:
        at = message.find(path)
        if at >= 0:
            head, tail = message[:at + len(path)], message[at + len(path):]
            return head + _QUOTED.sub("'...'", tail)
    return message


def finite(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer as JSON may hold it: a number that overflowed is null, as the CLI writes it."""
    result: dict[str, Any] = finite_or_none(answer)
    return result


_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # src/coldscope
_PREDICT_OPTIONS = ("capture_sizes", "storage_bandwidth", "page_cache")
_PLAN_FILES = ("model", "profile", "traffic", "trace", "tiers")
#: A quoted value in a message: 'x', "x" or a list [...] of them.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]")
