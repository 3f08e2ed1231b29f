"""What ``coldscope serve`` does, apart from HTTP: watch logs, store runs, keep metrics, and
answer predict / plan / runs / scale-hint questions with the same functions as the CLI.

One ``Service`` per process, three kinds of threads: the watcher's polling thread finds
start-ups; one storing thread builds each finished one's run, writes it (the only writer of the
store) and updates the metrics; a few workers (``serve.workers``) do every request's file
reading and computing, each call with a time limit, and open their own read connection per
request (SQLite connections belong to one thread). The event loop itself never reads a file.

What a request may make serve read: paths inside a ``--model-root`` once symbolic links are
resolved; a model directory whose entries are all regular files or directories that resolve
inside a root (checked before anything is read); and, while its work runs, every file opened
through ``coldscope.util.safeio`` is checked against the roots again (``safeio.confined``), so a
weight file linked elsewhere or an index entry ``../../x.safetensors`` is refused without a
byte (or the size) of the outside file in the answer.
"""

from __future__ import annotations

import logging
import os
import queue
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from coldscope.core.records import Run
from coldscope.ingest.logfiles import percentile
from coldscope.prediction.startup_model import predict_json
from coldscope.serve.metrics import StartupMetrics, model_path
from coldscope.serve.runs import build_run
from coldscope.serve.watcher import MAX_HELD_BYTES, LogWatcher, Startup
from coldscope.serve.workers import Workers
from coldscope.util.errors import ColdscopeError, validation_error
from coldscope.util.safeio import confined, file_kind

if TYPE_CHECKING:
    from coldscope.store.db import Store

log = logging.getLogger("coldscope.serve")

MAX_PATH_CHARS = 4096
#: Most entries a model directory may have (each is checked before anything is read).
MAX_MODEL_DIR_ENTRIES = 10_000
#: Most finished start-ups waiting to be stored (past it they are dropped, logged, counted).
MAX_STORE_QUEUE = 1000


class NotFound(ColdscopeError):
    """No such run, or no store yet (HTTP 404)."""


class NotConfigured(ColdscopeError):
    """The question needs an option serve was not started with (HTTP 409)."""


class Unavailable(ColdscopeError):
    """The store cannot be read (HTTP 503)."""


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
    workers: int = 4


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
        self.startup_model = None
        if config.startup_model:
            from coldscope.prediction.startup_model import StartupModel
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
                                      errors=self.errors)
        self._stored = 0
        self._queue: queue.Queue[Startup | None] | None = None
        self._storer: threading.Thread | None = None
        self._errors = 0  # start-ups that could not be stored
        self._predictions: dict[str, dict[str, Any] | None] = {}
        self.workers = Workers(config.workers)
        self._stopping = threading.Event()

    # -- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start following the logs. Finished start-ups are then stored by their own thread,
        so a slow or locked store (a campaign writing) never stops the watcher's polling."""
        self._stopping.clear()
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
                self._errors += 1
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
            try:
                store.run(run.id)
            except ColdscopeError:
                store.add_run(run)
            else:
                log.info("start-up %s of %s is already stored", run.id, s.replica)
                return
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
                prediction = self.workers.call(self.predict, {"model": candidate},
                                               timeout=self.config.request_timeout,
                                               what=f"the prediction for {candidate!r}")
                break
            except ColdscopeError:
                continue
        if len(self._predictions) >= 1024:  # model paths come from logs: keep the memo bounded
            self._predictions.clear()
        self._predictions[path] = prediction
        return prediction

    # -- questions ---------------------------------------------------------------------------------

    def resolve_model(self, path: str) -> Path:
        """``path`` (absolute, or relative to a --model-root) if it lies inside a --model-root
        once symlinks are resolved; a one-line error otherwise."""
        if not self.model_roots:
            raise NotConfigured("model paths are not accepted: start serve with --model-root")
        if not path or len(path) > MAX_PATH_CHARS or "\x00" in path:
            raise ColdscopeError("model path is empty, too long or has a NUL byte")
        given = Path(path)
        candidates = [given] if given.is_absolute() else [r / given for r in self.model_roots]
        try:
            resolved_all = [c.resolve() for c in candidates]
        except (OSError, RuntimeError) as exc:  # a symbolic-link loop, a path too long
            raise ColdscopeError(f"model path {path!r} cannot be resolved: {exc}") from None
        inside = [c for c in resolved_all
                  if any(c.is_relative_to(r) for r in self.model_roots)]
        if not inside:
            raise ColdscopeError(f"model path {path!r} is outside every --model-root")
        for resolved in inside:
            try:
                exists = resolved.exists()
            except OSError as exc:  # a name too long for the filesystem
                raise ColdscopeError(f"model path {path[:200]!r} cannot be resolved: "
                                     f"{exc.strerror}") from None
            if exists:
                self._check_files(resolved, path)
                return resolved
        raise ColdscopeError(f"no model at {path!r} under the --model-root(s)")

    def _inside_roots(self, real: str) -> bool:
        return any(Path(real).is_relative_to(r) for r in self.model_roots)

    def _check_files(self, resolved: Path, given: str) -> None:
        """Before anything is read: ``resolved`` is a regular file, or a directory whose
        entries are all regular files or directories lying inside a --model-root once links
        are resolved. Messages name the entry, never anything read from it."""
        try:
            mode = os.stat(resolved).st_mode
        except OSError as exc:
            raise ColdscopeError(f"model path {given!r} cannot be read: {exc.strerror}") from None
        if stat.S_ISREG(mode):
            return
        if not stat.S_ISDIR(mode):
            raise ColdscopeError(f"model path {given!r} is {file_kind(mode)}, not a regular "
                                 "file or a directory; not read")
        try:
            with os.scandir(resolved) as entries:
                for n, entry in enumerate(entries):
                    if n >= MAX_MODEL_DIR_ENTRIES:
                        raise ColdscopeError(f"model directory {given!r} has more than "
                                             f"{MAX_MODEL_DIR_ENTRIES} entries; not read")
                    real = os.path.realpath(entry.path)
                    if not self._inside_roots(real):
                        raise ColdscopeError(f"model {given!r}: {entry.name!r} lies outside "
                                             "every --model-root; not read")
                    try:
                        mode = os.stat(real).st_mode
                    except OSError:
                        continue  # a dangling link: reading it later says it is missing
                    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                        raise ColdscopeError(f"model {given!r}: {entry.name!r} is "
                                             f"{file_kind(mode)}, not a regular file; not read")
        except OSError as exc:
            raise ColdscopeError(f"model path {given!r} cannot be listed: {exc.strerror}") \
                from None

    def confined(self, *extra: str | Path) -> Any:
        """A block in which every file opened through ``coldscope.util.safeio`` must lie inside a
        --model-root, or be one of ``extra`` (serve's own files) or coldscope's own package
        data (default profiles and the like)."""
        return confined([*self.model_roots, *extra, _PACKAGE_DIR])

    def predict(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``predict --json`` for a features document (as ``features --json`` prints it),
        ``{"features": {...}}`` or ``{"model": PATH}`` under a model root; the options
        ``capture_sizes``, ``storage_bandwidth`` (bytes/s) and ``page_cache`` (hot | cold) as
        the CLI's."""
        if self.startup_model is None:
            raise NotConfigured("no startup model loaded: start serve with --startup-model")
        body = dict(body)
        options = {k: body.pop(k) for k in _PREDICT_OPTIONS if k in body}
        capture_sizes = options.get("capture_sizes")
        if capture_sizes is not None and (not isinstance(capture_sizes, int) or
                                          isinstance(capture_sizes, bool) or capture_sizes < 0):
            raise ColdscopeError("capture_sizes must be a non-negative integer")
        bandwidth = options.get("storage_bandwidth")
        if bandwidth is not None and (isinstance(bandwidth, bool) or
                                      not isinstance(bandwidth, int | float) or bandwidth <= 0):
            raise ColdscopeError("storage_bandwidth must be a positive number (bytes/s)")
        if set(body) == {"model"}:
            if not isinstance(body["model"], str):
                raise ColdscopeError("model must be a path (a string)")
            target: Any = str(self.resolve_model(body["model"]))
            with self.confined():
                return predict_json(self.startup_model, target, **options)
        elif set(body) == {"features"}:
            target = body["features"]
        else:
            target = body  # a features document as `coldscope features --json` prints it
        if not isinstance(target, Mapping | str):
            raise ColdscopeError("features must be a JSON object")
        return predict_json(self.startup_model, target, **options)

    def plan(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``plan --json`` for plan options given by their CLI names. Files named in the body
        must lie under a --model-root; the startup model and the store are serve's own."""
        from coldscope.planning import PlanRequest, plan
        options = dict(body)
        for key in ("startup_model", "store"):
            if key in options:
                raise ColdscopeError(f"{key} is serve's own (--{key.replace('_', '-')}); "
                                     "it cannot be set per request")
        for key in _PLAN_FILES:
            if options.get(key) is not None:
                if not isinstance(options[key], str):
                    raise ColdscopeError(f"{key} must be a path (a string)")
                options[key] = str(self.resolve_model(options[key]))
        if self.config.startup_model and options.get("model") is not None:
            options["startup_model"] = self.config.startup_model
        if self.store_path.exists():
            options["store"] = str(self.store_path)
        else:
            options["no_store"] = True  # what the CLI does when the default store is absent
        try:
            request = PlanRequest(**options)
        except ValidationError as exc:
            raise validation_error(exc, "plan request") from None
        own = [p for p in (self.config.startup_model,) if p]
        with self.confined(*own):
            return plan(request).to_json()

    def scale_hint(self, model: str, rate: float, sla: str, *, gpu: str | None = None,
                   replica_rps: float | None = None,
                   params: str | None = None) -> dict[str, Any]:
        """The warm replicas the planner's SLA rule asks for now
        (``coldscope.planning.scale_hint``),
        and the start-up it used: the startup model's prediction for ``model`` (a directory
        under a --model-root) when there is one, else the observed start-ups of ``model`` in
        the store (median to P90), else the planner's budget for ``params``."""
        from coldscope.planning import ScaleHintRequest, scale_hint
        startup, source = None, None
        if self.startup_model is not None and self.model_roots:
            try:
                path = self.resolve_model(model)
            except ColdscopeError:
                path = None
            if path is not None:
                from coldscope.prediction.features import model_features
                with self.confined():
                    features = model_features(path)
                prediction = predict_json(self.startup_model, features)
                startup = _interval_dict(prediction["interval"])
                source = (f"startup model prediction for {path.name} (its "
                          f"{prediction.get('level', 0.9):.0%} interval)")
                params = params or str(features.params)
        if startup is None:
            observed = self.observed_startup(model)
            if observed is not None:
                startup = {"low": observed["low"], "high": observed["high"]}
                source = (f"observed: median to P90 of {observed['n']} stored start-up(s) of "
                          f"{Path(model).name}")
        if startup is None and params is None:
            raise ColdscopeError(f"no start-up known for model {model!r}: no prediction (needs "
                                 "--startup-model and the model under a --model-root), no "
                                 "stored start-up of it, and no params given")
        try:
            request = ScaleHintRequest(rate_rps=rate, sla_p99_ttft=sla, startup_s=startup,
                                       gpu=gpu, replica_rps=replica_rps, params=params)
        except ValidationError as exc:
            raise validation_error(exc, "scale-hint query") from None
        hint = scale_hint(request).model_dump(mode="json")
        if source is not None:
            hint["startup_source"] = source
        return hint

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
            tl = timeline_dict(found[1].timeline if found is not None else
                               Timeline(time_to_ready=None, stages={}))
            out.append({"replica": s.replica, "path": s.path, "status": "running",
                        "seconds_since_first_line": round(now - s.first_seen, 3),
                        "lines": len(s.lines), "stages_so_far": tl["stages"]})
        return out

    def observed_startup(self, model: str) -> dict[str, float] | None:
        """{low: median, high: P90} of the stored time to ready of ``model`` (by name)."""

        if not self.store_path.exists():
            return None
        with self._reader() as store:
            runs = store.runs("ok")
        name = Path(model).name
        ttrs = [r.time_to_ready_s for r in runs
                if r.time_to_ready_s is not None and
                (r.model.name == name or Path(r.model.path or "").name == name)]
        if not ttrs:
            return None
        return {"low": percentile(ttrs, 0.5), "high": percentile(ttrs, 0.9), "n": len(ttrs)}


_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # src/coldscope
_PREDICT_OPTIONS = ("capture_sizes", "storage_bandwidth", "page_cache")
_PLAN_FILES = ("model", "profile", "traffic", "trace", "tiers")


def _interval_dict(value: Any) -> dict[str, float]:
    if isinstance(value, Mapping):
        return {"low": float(value["low"]), "high": float(value["high"])}
    return {"low": float(value[0]), "high": float(value[1])}

