"""serve's scale advice: ``/v1/scale-hint`` answers and the ``--advise`` gauges, both from
``coldscope.ScaleAdvisor`` on the same start-up.

**What one model's advice rests on** (:class:`Basis`, built once per :class:`HintKey` and kept):
the start-up distribution (``scaling.startup.choose`` over the stored runs of the model and
the startup model's prediction for its directory, as ``source`` says), the requests/s one
replica serves (``replica_rps``, else the default profile's), the SLA, and the profile's
keep-alive, burstiness and warm TTFT for the warm floor. Building reads the store, the
default profile (YAML) and, for a prediction, the model's files in a process of its own
(``Workers.isolated``); after that nothing is read: a hint costs one advisor's construction
and one tick (tens of microseconds), on the event loop. Built bases are kept in an LRU of
:data:`CACHE_SIZE` entries, each for :data:`CACHE_TTL_S` and only while serve has stored no
new run (a new start-up of the model changes its observed distribution).

**Model names** (:func:`match_name`): a name is matched against the stored runs' model names
(each run's recorded name and its path's last part) and the directories directly under each
``--model-root``: exactly first, else ignoring case, ``-`` and ``_`` (``Llama2_7B-hf`` finds
``llama2-7b-hf``). Runs and directory are matched separately, so ``llama-2-7b-hf`` has the
observed runs of ``llama2-7b-hf`` *and* the prediction for the directory ``llama-2-7b-hf``, and
``source`` chooses. A name that matches two or more candidates of one kind is an error naming
them. A name with a ``/`` is a path under a root (the one rule, ``service.resolve_path``) and
its last part names the runs.

**The hint** (:meth:`Advice.hint`): a fresh advisor's first tick at ``rate``, so with a steady
rate it equals what the ``--advise`` loop's long-lived advisor settles on (the forecast's level
is the rate, and the scale-down delay holds the same answer). Its JSON is the
``ScaleDecision``'s (:class:`ScaleHintAnswer`).

**Errors** on ``/v1/scale-hint``: 422 for anything wrong with the query (an unknown or repeated
parameter, a bad value, an ambiguous model name, a model directory that cannot be read for
``source=predicted``); 404 when nothing is known of the model; 409 when the question needs an
option serve was not started with; 503 when serve is busy. Every body is
``{"error": "<one line>"}``.

**The gauges** (:class:`AdviseLoop`, ``serve --advise MODEL``): every ``--advise-interval`` a
thread asks Prometheus (``/api/v1/query``) for each model's rate (``--rate-query``, ``{model}``
replaced by the name), ticks that model's advisor and sets ``coldscope_desired_replicas`` and
``coldscope_scale_ahead_seconds``; a failed query is counted
(``coldscope_advise_errors_total``), logged when its message changes, and leaves the gauges as
they were (``coldscope_advise_last_tick_timestamp_seconds`` says since when).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import threading
import time
import typing
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from coldscope.scaling import ScaleAdvisor, ScaleDecision, StartupDistribution, choose
from coldscope.scaling.build import startup_inputs
from coldscope.scaling.startup import SourceChoice
from coldscope.serve.service import (  # noqa: F401 - DEFAULT_RATE_QUERY: said here too
    DEFAULT_RATE_QUERY,
    MAX_MODEL_DIR_ENTRIES,
    NotConfigured,
    NotFound,
    Sandbox,
    Service,
    Unavailable,
    resolve_path,
)
from coldscope.serve.workers import TooSlow
from coldscope.util.errors import ColdscopeError

log = logging.getLogger("coldscope.serve")

#: The query parameters ``/v1/scale-hint`` takes; any other is a 422 naming it.
HINT_PARAMS = ("model", "rate", "sla_p99_ttft", "replica_rps", "gpu", "params", "source",
               "provisioning_s", "image_pull_s", "weight_transfer_s", "startup_saving_s")
SOURCES = ("auto", "observed", "predicted")
#: Bases kept, and for how long (seconds): a store written by another process shows up then.
CACHE_SIZE = 256
CACHE_TTL_S = 300.0
#: The most replicas an answer may ask for (``rate / replica_rps`` past it is a unit mix-up).
MAX_REPLICAS = 1_000_000
#: Bytes of a Prometheus answer read (one number's answer is a few hundred).
MAX_PROMETHEUS_BYTES = 1024 * 1024
#: What the JSON of a hint is (``schema_version``): 2 since it is a ``ScaleDecision``.
HINT_SCHEMA_VERSION = 2


class BadQuery(ColdscopeError):
    """Something wrong with a scale-hint query (HTTP 422)."""


# -- the query -------------------------------------------------------------------------------

def check_query(items: Iterable[tuple[str, str]]) -> None:
    """Every parameter is one ``/v1/scale-hint`` takes, given once."""
    seen: set[str] = set()
    for key, _ in items:
        if key not in HINT_PARAMS:
            near = get_close_matches(key, HINT_PARAMS, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise BadQuery(f"unknown query parameter {key[:64]!r}{hint}; /v1/scale-hint takes "
                           f"{', '.join(HINT_PARAMS)}")
        if key in seen:
            raise BadQuery(f"query parameter {key!r} is given more than once")
        seen.add(key)


def alias_key(name: str) -> str:
    """What two spellings of one model name share: case, ``-`` and ``_`` ignored."""
    return name.casefold().replace("-", "").replace("_", "")


def match_name(given: str, candidates: Iterable[str], what: str) -> str | None:
    """The candidate ``given`` names: itself, else the one equal but for case, ``-`` and
    ``_``; None when none is; an error naming them when several are."""
    names = set(candidates)
    if given in names:
        return given
    key = alias_key(given)
    found = sorted(n for n in names if alias_key(n) == key)
    if len(found) > 1:
        listed = ", ".join(repr(n) for n in found[:8])
        raise BadQuery(f"model {given!r} is ambiguous: it matches {what} {listed}; give one "
                       "of them exactly")
    return found[0] if found else None


@dataclass(frozen=True)
class HintKey:
    """What a hint's basis depends on (everything but the rate)."""

    model: str
    sla_p99_ttft: str
    source: SourceChoice = "auto"
    replica_rps: float | None = None
    gpu: str | None = None
    params: str | None = None


@dataclass(frozen=True)
class ColdPathParts:
    """The seconds of a cold path before the engine starts (``ScaleAdvisor``'s
    ``provisioning_s``, ``image_pull_s``, ``weight_transfer_s``; e.g. a plan's parts), and the
    seconds a standby launcher on the node takes off the engine's start-up
    (``startup_saving_s``: ``coldscope standby``; refused with a new node's provisioning): a
    hint's own, not part of the cached basis."""

    provisioning_s: float = 0.0
    image_pull_s: float = 0.0
    weight_transfer_s: float = 0.0
    startup_saving_s: float = 0.0


@dataclass(frozen=True)
class Basis:
    """What one model's advice rests on, built once (see the module doc)."""

    model: str
    runs_of: str | None  # the stored model name matched
    model_dir: str | None  # the directory under a --model-root matched
    startup: StartupDistribution
    replica_rps: float
    sla_s: float
    keep_alive_s: float
    warm_ttft_s: float
    burstiness: float

    @property
    def startup_source(self) -> str:
        """In words: where the start-up comes from, and what it is."""
        if self.startup.source == "observed":
            return f"stored start-ups of {self.runs_of}: {self.startup.detail}"
        if self.startup.source == "predicted":
            return f"startup model prediction for {self.model_dir}: {self.startup.detail}"
        return self.startup.detail

    def advisor(self, **kwargs: Any) -> ScaleAdvisor:
        """A fresh advisor: one request/s per ``replica_rps``, the warm floor for the SLA."""
        return ScaleAdvisor(target_in_flight=1.0, service_time_s=1.0 / self.replica_rps,
                            startup=self.startup, sla_ttft_s=self.sla_s,
                            keep_alive_s=self.keep_alive_s, warm_ttft_s=self.warm_ttft_s,
                            burstiness=self.burstiness, **kwargs)


def _hint_answer_schema() -> type[BaseModel]:
    """``/v1/scale-hint``'s JSON for the OpenAPI document: the ``ScaleDecision`` of a fresh
    advisor's first tick at ``rate`` (``desired_replicas`` = running + starting replicas to
    have now), its fields read from the record itself so the two cannot drift, and what it
    rests on. ``warm_replicas`` is ``desired_replicas`` under the name the hint had before."""
    hints = typing.get_type_hints(ScaleDecision)
    fields: dict[str, Any] = {"schema_version": (Literal[2], ...)}
    for name in ScaleDecision.__dataclass_fields__:
        fields[name] = (hints[name], ...)
    fields["warnings"] = (list[str], ...)  # a tuple in the record, a list in JSON
    fields.update(model=(str, ...), matched=(dict[str, str | None], ...),
                  startup_source=(str, ...), warm_replicas=(int, ...),
                  replica_rps=(float, ...), sla_p99_ttft_s=(float, ...))
    return create_model("ScaleHintAnswer", __config__=ConfigDict(extra="forbid"),
                        __doc__=_hint_answer_schema.__doc__, **fields)


ScaleHintAnswer = _hint_answer_schema()


# -- building a basis --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Predicted:
    """A prediction as the start-up reads it (``scaling.startup.PredictionLike``), plain data
    that crosses from the process that predicted."""

    total_s: float
    low: float
    high: float
    level: float
    warnings: tuple[str, ...]

    @property
    def interval(self) -> _Predicted:
        return self


def _predict_job(sandbox: Sandbox, given: str) -> _Predicted:
    """In a process of its own: the startup model's prediction for the model directory."""
    from coldscope.prediction.features import model_features
    from coldscope.prediction.startup_model import predict_json
    assert sandbox.startup_model is not None
    with sandbox.bounds():
        path = resolve_path(sandbox.roots, given, "model")
        out = predict_json(sandbox.startup_model, model_features(path))
    interval = out["interval"]
    low, high = (interval["low"], interval["high"]) if isinstance(interval, dict) \
        else (interval[0], interval[1])
    return _Predicted(float(out["total_s"]), float(low), float(high),
                      float(out.get("level", 0.9)), tuple(str(w) for w in out["warnings"]))


class Advice:
    """One per serve: the hint bases (an LRU), the hints, and the ``--advise`` loop."""

    def __init__(self, service: Service, *, cache_size: int = CACHE_SIZE,
                 ttl_s: float = CACHE_TTL_S, clock: Callable[[], float] = time.monotonic):
        self.service = service
        self.cache_size = cache_size
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: OrderedDict[HintKey, tuple[float, int, Basis]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[HintKey, Future[Basis]] = {}
        self.builds = 0  # bases built (the cache's misses)
        config = service.config
        self.loop: AdviseLoop | None = None
        if config.advise:
            if config.sla_p99_ttft is None or config.prometheus is None:
                raise ColdscopeError("--advise needs --sla-p99-ttft and --prometheus URL (the "
                                     "rate comes from a PromQL query)")
            self.loop = AdviseLoop(self, config.advise, HintKey(
                "", config.sla_p99_ttft, _source(config.advise_source),
                config.replica_rps), config.prometheus, config.rate_query,
                config.advise_interval)

    # the hint

    def cached(self, key: HintKey) -> Basis | None:
        """The basis built for ``key`` if it is still good (see the module doc)."""
        with self._lock:
            return self._kept(key)

    def _kept(self, key: HintKey) -> Basis | None:
        entry = self._cache.get(key)  # the caller holds the lock
        if entry is None:
            return None
        built, generation, basis = entry
        if self.clock() - built > self.ttl_s or generation != self.service.stored:
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return basis

    def basis(self, key: HintKey) -> Basis:
        """The basis for ``key``, built (blocking: reads files) unless kept. Calls that ask for
        the same key while it is built wait for that one build (a burst of first calls costs
        one prediction, not one process each)."""
        with self._lock:
            kept = self._kept(key)
            if kept is not None:
                return kept
            pending = self._pending.get(key)
            building = pending is None
            if pending is None:
                pending = self._pending[key] = Future()
        if not building:
            try:
                return pending.result(timeout=self.service.config.request_timeout)
            except FutureTimeout:
                raise TooSlow("scale-hint: the model's start-up is still being read; try "
                              "again shortly") from None
        try:
            generation = self.service.stored
            basis = self._build(key)
        except BaseException as exc:
            pending.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._pending.pop(key, None)
        with self._lock:
            self.builds += 1
            self._cache[key] = (self.clock(), generation, basis)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        pending.set_result(basis)
        return basis

    def hint(self, basis: Basis, rate: float,
             before_engine: ColdPathParts = ColdPathParts()) -> dict[str, Any]:
        """A fresh advisor's first tick at ``rate`` (requests/s), as JSON data; the cold path
        it scales ahead by is ``before_engine``'s seconds plus the engine's start-up."""
        if isinstance(rate, bool) or not isinstance(rate, int | float) or \
                not math.isfinite(rate) or not 0 <= rate <= 1e6:
            raise BadQuery(f"rate must be 0-1e6 requests/s, not {rate!r}")
        if rate / basis.replica_rps > MAX_REPLICAS:
            raise BadQuery(f"rate / replica_rps asks for more than {MAX_REPLICAS:,} replicas "
                           f"(rate {rate:g} req/s, one replica {basis.replica_rps:g} req/s); "
                           "check both")
        # no seasonal term: a first tick has no day of history, so it would change nothing
        decision = basis.advisor(season_s=None, **dataclasses.asdict(before_engine)).tick(
            0.0, rate_rps=float(rate), running=0, starting=0)
        return answer(basis, decision)

    def answer(self, key: HintKey, rate: float) -> dict[str, Any]:
        """``/v1/scale-hint`` as one blocking call (the basis built when not kept)."""
        return self.hint(self.basis(key), rate)

    def _build(self, key: HintKey) -> Basis:
        from coldscope.planning.hint import sla_seconds
        from coldscope.planning.infra import load_profile
        service = self.service
        try:
            sla = sla_seconds(key.sla_p99_ttft)
        except ColdscopeError as exc:
            raise BadQuery(str(exc)) from None
        if key.source not in SOURCES:
            raise BadQuery(f"source must be auto, observed or predicted, not {key.source!r}")
        try:
            profile = load_profile(None, {"gpu": key.gpu} if key.gpu else {})
        except ColdscopeError as exc:
            raise BadQuery(f"gpu: {exc}") from None
        rps = key.replica_rps if key.replica_rps is not None else \
            float(profile.traffic.replica_rps)
        if not 1e-3 <= rps <= 1e6:
            raise BadQuery(f"replica_rps must be 0.001-1e6 requests/s, not {rps!r}")
        by_name = self._stored_startups()
        if "/" in key.model or Path(key.model).is_absolute():
            runs_of: str | None = Path(key.model).name if Path(key.model).name in by_name \
                else None
            model_dir: str | None = key.model if service.model_roots else None
        else:
            runs_of = match_name(key.model, by_name, "the stored models")
            model_dir = match_name(key.model, self._model_dirs(), "the directories")
        observed = by_name.get(runs_of, []) if runs_of is not None else []
        can_predict = service.startup_model is not None and model_dir is not None
        if key.source == "observed" and not observed:
            raise NotFound(f"no stored start-up of model {key.model!r} (source=observed)")
        if key.source == "predicted" and not can_predict:
            if service.startup_model is None or not service.model_roots:
                raise NotConfigured("source=predicted needs serve's --startup-model and "
                                    "--model-root")
            raise NotFound(f"no model directory {key.model!r} under a --model-root "
                           "(source=predicted)")
        notes: list[str] = []
        predict = None
        if can_predict:
            assert model_dir is not None
            directory = model_dir

            def predict() -> _Predicted:
                return service.workers.isolated(_predict_job, service.sandbox, directory,
                                                timeout=service.config.request_timeout,
                                                what="scale-hint")
        try:
            runs, prediction = startup_inputs(key.source, observed=lambda: observed,
                                              predict=predict)
        except Unavailable:
            raise
        except ColdscopeError as exc:
            if key.source == "predicted":
                raise BadQuery(f"model {key.model!r}: {exc}") from None
            runs, prediction = observed, None  # auto: the runs or the budget answer
            notes.append(f"no prediction for model directory {model_dir!r}: {exc}")
        if runs or prediction is not None:
            startup = choose(runs, prediction, key.source)
        elif key.params is not None:
            startup = _budget_startup(profile, key.params)
        else:
            raise NotFound(f"no start-up known for model {key.model!r}: no stored start-up "
                           "of it, no prediction (needs --startup-model and the model's "
                           "directory under a --model-root), and no params given")
        if notes:
            startup = dataclasses.replace(startup, warnings=(*startup.warnings, *notes))
        return Basis(model=key.model, runs_of=runs_of if runs else None,
                     model_dir=model_dir if prediction is not None else None,
                     startup=startup, replica_rps=float(rps), sla_s=sla,
                     keep_alive_s=float(profile.economics.keep_alive_s),
                     warm_ttft_s=float(profile.warm_ttft_s.high),
                     burstiness=float(profile.traffic.burstiness))

    def _stored_startups(self) -> dict[str, list[float]]:
        """Times to ready of the stored finished runs, by each name their model goes by."""
        from coldscope.store.db import Store
        path = self.service.store_path
        if not path.exists():
            return {}
        try:
            with Store(path, create=False) as store:
                runs = store.runs("ok")
        except ColdscopeError as exc:
            raise Unavailable(str(exc)) from None
        out: dict[str, list[float]] = {}
        for run in runs:
            if run.time_to_ready_s is None:
                continue
            names = {run.model.name, Path(run.model.path or "").name} - {"", None}
            for name in names:
                out.setdefault(str(name), []).append(float(run.time_to_ready_s))
        return out

    def _model_dirs(self) -> list[str]:
        """The names of the directories directly under each --model-root."""
        names: list[str] = []
        for root in self.service.model_roots:
            try:
                with os.scandir(root) as entries:
                    for n, entry in enumerate(entries):
                        if n >= MAX_MODEL_DIR_ENTRIES:
                            break
                        if entry.is_dir():
                            names.append(entry.name)
            except OSError:
                continue
        return names

    # the --advise loop

    def prepare(self) -> None:
        """Build the ``--advise`` models' advisors (a one-line error for a model it cannot
        advise on: serve does not start)."""
        if self.loop is not None:
            self.loop.prepare()

    def start(self) -> None:
        if self.loop is not None:
            self.loop.prepare()
            self.loop.start()

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.stop()

    @property
    def models(self) -> tuple[str, ...]:
        """The ``--advise`` models, as named on the command line."""
        return () if self.loop is None else tuple(self.loop.names)

    @property
    def sla_p99_ttft_s(self) -> float | None:
        """The SLA (seconds) the ``--advise`` models plan with; None without ``--advise``."""
        if self.loop is None:
            return None
        from coldscope.planning.hint import sla_seconds
        return sla_seconds(self.loop.key.sla_p99_ttft)

    def decision(self, model: str) -> ScaleDecision | None:
        """The latest decision of an ``--advise`` model (matched by name, else ignoring case,
        ``-`` and ``_``); None before its first tick or for a model not advised."""
        return None if self.loop is None else self.loop.decision(model)


def answer(basis: Basis, decision: ScaleDecision) -> dict[str, Any]:
    """A decision as ``/v1/scale-hint`` answers it (:class:`ScaleHintAnswer`)."""
    out = decision.to_dict()
    out.update(schema_version=HINT_SCHEMA_VERSION, model=basis.model,
               matched={"runs": basis.runs_of, "model_dir": basis.model_dir},
               startup_source=basis.startup_source, warm_replicas=decision.desired_replicas,
               replica_rps=basis.replica_rps, sla_p99_ttft_s=basis.sla_s)
    return out  # finite by construction: the rate, replica_rps and start-ups are bounded


def _source(value: str) -> SourceChoice:
    if value == "observed":
        return "observed"
    if value == "predicted":
        return "predicted"
    if value == "auto":
        return "auto"
    raise BadQuery(f"source must be auto, observed or predicted, not {value!r}")


def _budget_startup(profile: Any, params: str) -> StartupDistribution:
    """The planner's engine start-up budget for a model of ``params`` parameters (bf16), read
    as a log-normal whose 90 % interval is the budget's low-high."""
    from coldscope.planning import budget as bud
    from coldscope.planning.infra import parse_count
    from coldscope.planning.mitigations import apply_layers, canonical
    try:
        size = bud.size_from_params(parse_count(params), "bf16")
    except ColdscopeError as exc:
        raise BadQuery(f"params: {exc}") from None
    base = bud.baseline_conditions(profile, bud.engine_from_default(profile))
    stack = apply_layers(size, profile, base, canonical([]))
    low, high = float(stack.budget.low), float(stack.budget.high)
    mid = math.sqrt(max(low, 1e-3) * high)
    shape = StartupDistribution.predicted(_Predicted(mid, low, high, 0.9, ()))
    return StartupDistribution.given(
        shape.quantile_fn, f"planner budget for {size.params:.3g} parameters (bf16), "
                           f"{low:.1f}-{high:.1f} s", (
            f"no start-up of the model is known: planned with the planner's budget for "
            f"{params} parameters ({low:.0f}-{high:.0f} s)",))


# -- the --advise loop ----------------------------------------------------------------------------

@dataclass
class _Advised:
    name: str
    basis: Basis
    advisor: ScaleAdvisor
    last: ScaleDecision | None = None
    errors: int = 0
    last_error: str | None = None


class AdviseLoop:
    """``serve --advise``: one advisor per model, ticked every ``interval`` seconds on the
    rate Prometheus answers for ``rate_query`` (see the module doc)."""

    def __init__(self, advice: Advice, models: Sequence[str], key: HintKey, prometheus: str,
                 rate_query: str, interval: float):
        self.advice = advice
        self.names = list(dict.fromkeys(models))
        self.key = key
        self.prometheus = check_url(prometheus)
        self.rate_query = check_rate_query(rate_query)
        if not 0.05 <= interval <= 3600:
            raise ColdscopeError(f"--advise-interval must be 0.05-3600 s, not {interval!r}")
        self.interval = interval
        self.models: dict[str, _Advised] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = False

    def prepare(self) -> None:
        if self._ready:
            return
        for name in self.names:
            try:
                basis = self.advice.basis(dataclasses.replace(self.key, model=name))
            except ColdscopeError as exc:
                raise ColdscopeError(f"--advise {name}: {exc}") from None
            self.models[name] = _Advised(name, basis, basis.advisor())
        self._ready = True

    def query(self, model: str) -> str:
        return self.rate_query.replace("{model}", model)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="coldscope-advise", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.tick_all(started)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def tick_all(self, now: float) -> None:
        """One round: each model's rate asked, its advisor ticked, its gauges set. Never
        raises: a failure is counted, logged when its message changes, and skips the tick."""
        metrics = self.advice.service.metrics
        timeout = min(max(self.interval, 1.0), 10.0)
        for name, advised in self.models.items():
            try:
                rate, note = fetch_rate(self.prometheus, self.query(name), timeout)
                decision = advised.advisor.tick(now, rate_rps=rate, running=0, starting=0)
                if note:
                    decision = dataclasses.replace(decision,
                                                   warnings=(*decision.warnings, note))
            except Exception as exc:  # never stop the loop, never crash serve
                message = " ".join(str(exc).split()) or type(exc).__name__
                advised.errors += 1
                metrics.advise_error(name)
                if message != advised.last_error:
                    log.warning("advise %s: %s (the gauges keep their last value)", name,
                                message)
                advised.last_error = message
                continue
            if advised.last_error is not None:
                log.info("advise %s: the rate query answers again", name)
            advised.last_error = None
            advised.last = decision
            metrics.set_advice(name, decision.desired_replicas, decision.scale_ahead_s,
                               rate, time.time())

    def decision(self, model: str) -> ScaleDecision | None:
        advised = self.models.get(model)
        if advised is None:
            key = alias_key(model)
            found = [a for n, a in self.models.items() if alias_key(n) == key]
            advised = found[0] if len(found) == 1 else None
        return None if advised is None else advised.last


def check_url(url: str) -> str:
    """A Prometheus base URL: http(s)://host[:port][/path], without query or fragment."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or \
            parts.fragment:
        raise ColdscopeError(f"--prometheus must be an http(s)://host[:port] URL, not "
                             f"{url[:200]!r}")
    try:
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise ColdscopeError(f"--prometheus {url[:200]!r} has a bad port") from None
    return url.rstrip("/")


def check_rate_query(promql: str) -> str:
    """A ``--rate-query``: a PromQL expression of 1-4096 characters."""
    if not promql.strip() or len(promql) > 4096:
        raise ColdscopeError("--rate-query must be a PromQL expression (1-4096 characters)")
    return promql


def fetch_rate(base: str, promql: str, timeout: float) -> tuple[float, str | None]:
    """The one number ``promql`` gives now (``/api/v1/query``), and a note when it gave no
    series (then the rate is 0: nothing of the model was counted). Several series, a value
    that is not a finite number >= 0, or Prometheus' own error is a ``ColdscopeError``."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http(s)
            raw = response.read(MAX_PROMETHEUS_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raw = exc.read(MAX_PROMETHEUS_BYTES + 1)
        try:
            detail = str(json.loads(raw).get("error", ""))
        except (ValueError, AttributeError):
            detail = ""
        raise ColdscopeError(f"Prometheus answered {exc.code}"
                             f"{': ' + detail if detail else ''}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ColdscopeError(f"Prometheus at {base} cannot be reached: {reason}") from None
    if len(raw) > MAX_PROMETHEUS_BYTES:
        raise ColdscopeError(f"Prometheus answered more than {MAX_PROMETHEUS_BYTES} bytes")
    try:
        body = json.loads(raw)
        if body.get("status") != "success":
            raise ColdscopeError(f"Prometheus: {body.get('error', 'no success')}")
        data = body["data"]
        kind, result = data["resultType"], data["result"]
        if kind == "scalar":
            value = result[1]
        elif kind == "vector":
            if not result:
                return 0.0, "the rate query returned no series: rate taken as 0"
            if len(result) > 1:
                raise ColdscopeError(f"the rate query returned {len(result)} series, not one: "
                                     "wrap it in sum(...)")
            value = result[0]["value"][1]
        else:
            raise ColdscopeError(f"the rate query returned a {kind}, not one number")
        rate = float(value)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise ColdscopeError("Prometheus' answer is not a query result") from None
    if not math.isfinite(rate) or rate < 0:
        raise ColdscopeError(f"the rate query gave {rate!r}, not a rate >= 0")
    return rate, None
