"""Ray Serve: ``ColdscopePolicy``, a class autoscaling policy that asks ``ScaleAdvisor``.

Set it on a deployment (tested on Ray 2.60.0,
``tests/integration/integrations/test_ray_serve.py``)::

    @serve.deployment(max_ongoing_requests=2, autoscaling_config={
        "min_replicas": 1, "max_replicas": 3,
        "upscale_delay_s": 0, "downscale_delay_s": 0,   # the advisor does its own holding
        "look_back_period_s": 2, "metrics_interval_s": 0.5,
        "policy": {"policy_function": "coldscope.integrations.ray_serve:ColdscopePolicy",
                   "policy_kwargs": {"observed_s": [3.0, 3.5, 4.0, 4.5, 5.0],
                                     "target_ongoing_requests": 2, "service_time_s": 1.0,
                                     "scale_down_delay_s": 8}}})

Ray's contract, as read in ray 2.60.0's own code (``site-packages/ray/serve``):

* ``config.py``, ``AutoscalingPolicy``: ``policy_function`` is an import path
  ``module:Name``; ``policy_kwargs`` must be JSON-serialisable (its validator
  ``policy_kwargs_json_serializable``); ``serialize_policy`` imports the module in the driver
  and cloudpickles ``Name`` *by value* (``cloudpickle.register_pickle_by_value(module)``), so
  the controller unpickles this class without importing this module; what it refers to
  (``coldscope.scaling``, the standard library) must be importable there, as it is wherever
  coldscope is installed.
* ``_private/autoscaling_state.py``: ``_resolve_policy_callable`` sees a class and builds it
  once, ``raw(**policy.policy_kwargs)``, in ``DeploymentAutoscalingState.register`` (at every
  deploy or config change: a new instance, so the advisor's history starts again); then
  ``get_decision_num_replicas`` calls the instance each control-loop tick
  (``RAY_SERVE_CONTROL_LOOP_INTERVAL_S``, 0.1 s) with an ``AutoscalingContext`` built by
  ``get_autoscaling_context``: ``current_num_replicas = len(running replicas)``,
  ``target_num_replicas`` = the current target (running + starting), ``total_num_requests``
  (running + queued, aggregated over ``look_back_period_s``), ``total_queued_requests``
  (queued at handles, same window), ``capacity_adjusted_min/max_replicas``,
  ``current_time = time.time()``, ``config`` (the ``AutoscalingConfig``). A float answer is
  rounded up; the answer is then bounded by ``apply_bounds``.
* ``autoscaling_policy.py``, ``_apply_autoscaling_config`` wraps the policy: with 0 replicas
  running and requests waiting it answers ``max(ceil(upscaling_factor), target)`` without
  calling the policy (``_get_cold_start_scale_up_replicas``); otherwise it applies
  ``upscaling_factor``/``downscaling_factor`` to the step from the running count
  (``_apply_scaling_factors``) and holds a change for ``upscale_delay_s`` (default 30 s) or
  ``downscale_delay_s`` (600 s) (``_apply_delay_logic``), and merges its own keys
  (``__decision_counters``, ``__decision_timestamp``) into the state dict returned. The
  advisor already scales ahead and holds scale-downs, so set both delays to 0; a decision's
  ``warnings`` say when they are not.
* ``_private/application_state.py``, ``ApplicationState.autoscale``: nothing catches an
  exception from the policy, so one would stop the controller's whole update. A tick that
  fails therefore holds the current target and reports the error in the state and the log.

Mapping, each tick: ``running = current_num_replicas``; ``starting = target_num_replicas -
current_num_replicas`` (0 while replicas stop); the requests in service ``total_num_requests
- total_queued_requests`` and the queued ones go to ``ScaleAdvisor.tick(in_flight=...,
queued=...)``. Ray reports no arrival rate, so the advisor's rate is Little's law on the
requests in service, ``in service / T``, with ``T`` given: ``service_time_s``, or
``replica_rps`` (``T = target_ongoing_requests / replica_rps``). The answer is bounded by
``capacity_adjusted_min/max_replicas``. The state returned is ``{"coldscope": decision}``,
``ScaleDecision.to_dict()`` plus ``returned_replicas``, ``bounded_by``,
``total_num_requests``, ``total_queued_requests`` and ``error``, JSON data; Ray keeps it in the
controller and hands it back as ``ctx.policy_state``, and shows it nowhere, so each change of
answer, driver, demand (``capacity_replicas``) or running/starting count is also logged as one
line on Ray Serve's logger (``ray.serve``: the controller's ``logs/serve/controller_<pid>.log``,
beside Ray's own ``Upscaling ...`` lines), ending ``decision=<the state's JSON>``. A tick costs
tens of microseconds (``benches/bench_ray_policy.py``); construction reads the store or predicts
once.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Protocol

from coldscope.scaling import MIN_OBSERVED_RUNS, ScaleAdvisor, times_to_ready
from coldscope.scaling.build import startup_inputs
from coldscope.scaling.startup import PredictionLike
from coldscope.util.errors import ColdscopeError

#: Ray Serve's logger (``ray.serve._private.constants.SERVE_LOGGER_NAME``).
SERVE_LOGGER_NAME = "ray.serve"
#: Ray's ``target_ongoing_requests`` default (``DEFAULT_TARGET_ONGOING_REQUESTS``).
RAY_DEFAULT_TARGET_ONGOING_REQUESTS = 2.0
#: The key of the policy state dict under which the decision is kept.
STATE_KEY = "coldscope"
#: What a decision's log line ends with, before the state's JSON.
LOG_MARK = "decision="

#: The advisor's own parameters, passed through under the same names.
ADVISOR_KWARGS = ("min_runs", "provisioning_s", "image_pull_s", "weight_transfer_s",
                  "scale_ahead_quantile", "alpha", "beta", "step_s", "trend_damping",
                  "season_s", "season_window_s", "rate_window_s", "keep_alive_s",
                  "scale_down_delay_s", "warm_ttft_s", "burstiness", "min_replicas",
                  "max_replicas")
#: Every keyword ``ColdscopePolicy`` takes.
KWARGS = frozenset(("observed_s", "store", "cache", "model", "model_root", "startup_model",
                    "source", "sla_p99_ttft", "target_ongoing_requests", "replica_rps",
                    "service_time_s", "log_decisions", *ADVISOR_KWARGS))

logger = logging.getLogger(SERVE_LOGGER_NAME)


class AutoscalingContextLike(Protocol):
    """What is read of Ray's ``ray.serve.config.AutoscalingContext``."""

    deployment_name: str
    app_name: str | None
    current_num_replicas: int
    target_num_replicas: int
    capacity_adjusted_min_replicas: int
    capacity_adjusted_max_replicas: int
    current_time: float | None
    config: Any  # AutoscalingConfig: its delays, look-back and factors, for the warnings

    @property
    def total_num_requests(self) -> float: ...

    @property
    def total_queued_requests(self) -> float | None: ...


class ColdscopePolicy:
    """A Ray Serve class autoscaling policy: one ``ScaleAdvisor`` per deployment.

    Keyword arguments (``policy_kwargs``, JSON values):

    * the start-up it plans with: ``observed_s`` (measured times to ready, seconds), or
      ``store`` (a coldscope store file) and ``model`` (its finished runs of that model,
      matched by path, else by directory name, as ``plan`` does; ``cache``: ``cold``/``warm``
      runs only); and/or ``startup_model`` (a fitted startup model's JSON) and ``model`` (a
      model directory, predicted with ``coldscope.predict``). ``model_root``: the directory
      ``model`` lies in (a relative ``model`` is taken under it; one outside is refused).
      ``source``: ``auto`` (default: the runs when there are ``min_runs``, else the
      prediction), ``observed`` or ``predicted``; ``provisioning_s``, ``image_pull_s``,
      ``weight_transfer_s``: the platform's seconds before the engine starts;
    * capacity: ``target_ongoing_requests`` (requests in service + queued one replica should
      hold; default 2, Ray's) and the time a request spends in service: ``service_time_s``,
      or ``replica_rps`` (requests/s one replica serves at ``target_ongoing_requests``);
      one of the two is needed, as Ray reports requests in flight and no rate;
    * ``sla_p99_ttft`` (seconds, or ``"2s"``/``"500ms"``): keep the planner's warm floor;
    * the advisor's other parameters under its names (``scale_down_delay_s``,
      ``keep_alive_s``, ``alpha``, ...; ``ScaleAdvisor``); ``log_decisions`` (default true).

    An unknown or bad keyword is a one-line ``ColdscopeError`` naming it, raised here (so the
    deploy fails with it), never at a tick.
    """

    def __init__(self, **policy_kwargs: Any) -> None:
        self.policy_kwargs = dict(policy_kwargs)
        self.log_decisions = _flag(policy_kwargs.get("log_decisions", True), "log_decisions")
        self.advisor = advisor_from_kwargs(policy_kwargs)
        self._last_time = -math.inf
        self._config_key: tuple[Any, ...] | None = None
        self._config_warnings: tuple[str, ...] = ()
        self._logged: tuple[Any, ...] | None = None

    def __call__(self, ctx: AutoscalingContextLike) -> tuple[int, dict[str, Any]]:
        """``(desired_replicas, policy_state)`` for Ray's ``AutoscalingContext``."""
        try:
            return self._decide(ctx)
        except Exception as exc:  # Ray lets a policy's exception stop its control loop
            return self._hold(ctx, exc)

    def _decide(self, ctx: AutoscalingContextLike) -> tuple[int, dict[str, Any]]:
        running = ctx.current_num_replicas
        target = ctx.target_num_replicas
        starting = target - running if target > running else 0
        total = float(ctx.total_num_requests)
        queued_seen = ctx.total_queued_requests
        queued = 0.0 if queued_seen is None else float(queued_seen)
        queued = min(max(queued, 0.0), max(total, 0.0))  # two windows: queued may exceed total
        now = ctx.current_time
        now = time.time() if now is None else float(now)
        if now < self._last_time:  # time.time() may step back; the advisor needs it not to
            now = self._last_time
        self._last_time = now
        decision = self.advisor.tick(now, in_flight=total - queued, queued=queued,
                                     running=running, starting=starting)
        low, high = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas
        desired, bounded_by = decision.desired_replicas, None
        if desired < low:
            desired, bounded_by = low, "min_replicas"
        elif desired > high:
            desired, bounded_by = high, "max_replicas"
        body = decision.to_dict()
        extra = self._ray_warnings(ctx.config)
        if extra:
            body["warnings"] = [*body["warnings"], *extra]
        body["returned_replicas"] = desired
        body["bounded_by"] = bounded_by
        body["total_num_requests"] = total
        body["total_queued_requests"] = queued
        body["error"] = None
        state = {STATE_KEY: body}
        if self.log_decisions:
            key = (desired, decision.driver, running, starting, decision.capacity_replicas)
            if key != self._logged:
                self._logged = key
                logger.info("coldscope %s: %d replicas (%s); running %d, starting %d, in "
                            "flight %.1f, queued %.1f; scales ahead %.1f s (p%g cold path, %s) "
                            "%s%s", _name(ctx), desired, decision.driver, running, starting,
                            total, queued, decision.scale_ahead_s,
                            decision.scale_ahead_quantile * 100, decision.source, LOG_MARK,
                            json.dumps(state, allow_nan=False))
        return desired, state

    def _hold(self, ctx: AutoscalingContextLike, exc: Exception) -> tuple[int, dict[str, Any]]:
        """Keep Ray's current target; the error goes to the state and, once, to the log."""
        message = _one_line(f"{type(exc).__name__}: {exc}" if not isinstance(
            exc, ColdscopeError) else str(exc))
        try:
            held = int(ctx.target_num_replicas)
        except Exception:
            held = 1
        if self._logged != ("error", message):
            self._logged = ("error", message)
            logger.warning("coldscope %s: the policy's tick failed (%s); holding %d replicas",
                           _name(ctx), message, held)
        return held, {STATE_KEY: {"schema_version": 1, "returned_replicas": held,
                                  "error": message}}

    def _ray_warnings(self, config: object) -> tuple[str, ...]:
        """What in the deployment's autoscaling config works against the advisor, worded
        again only when the config changes."""
        key = tuple(getattr(config, name, None) for name in (
            "upscale_delay_s", "downscale_delay_s", "look_back_period_s", "upscaling_factor",
            "downscaling_factor"))
        if key != self._config_key:
            self._config_key = key
            self._config_warnings = config_warnings(config, self.advisor)
        return self._config_warnings

    def describe(self) -> dict[str, Any]:
        """The fixed facts the policy plans with (JSON data)."""
        return {**self.advisor.describe(), "service_time_s": self.advisor.service_time_s}


def advisor_from_kwargs(kwargs: Mapping[str, Any]) -> ScaleAdvisor:
    """The ``ScaleAdvisor`` that ``ColdscopePolicy(**kwargs)`` asks (see its doc)."""
    unknown = sorted(set(kwargs) - KWARGS)
    if unknown:
        near = get_close_matches(unknown[0], sorted(KWARGS), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ColdscopeError(f"ColdscopePolicy has no keyword {unknown[0]!r}{hint}; it takes "
                             f"{', '.join(sorted(KWARGS))}")
    given = {k: v for k, v in kwargs.items() if v is not None}
    source = given.get("source", "auto")
    if source not in ("auto", "observed", "predicted"):
        raise ColdscopeError(f"ColdscopePolicy source must be auto, observed or predicted, "
                             f"not {source!r}")
    with _about("target_ongoing_requests"):
        target = _positive(given.get("target_ongoing_requests",
                                     RAY_DEFAULT_TARGET_ONGOING_REQUESTS),
                           "target_ongoing_requests")
    if "replica_rps" in given and "service_time_s" in given:
        raise ColdscopeError("ColdscopePolicy takes replica_rps or service_time_s, not both")
    if "replica_rps" in given:
        with _about("replica_rps"):
            service_time = target / _positive(given["replica_rps"], "replica_rps", most=1e6)
    elif "service_time_s" in given:
        with _about("service_time_s"):
            service_time = _positive(given["service_time_s"], "service_time_s",
                                     most=86_400.0)
    else:
        raise ColdscopeError(
            "ColdscopePolicy needs replica_rps (requests/s one replica serves) or "
            "service_time_s (seconds a request spends in a replica): Ray reports requests in "
            "flight, not a rate")
    sla = None
    if "sla_p99_ttft" in given:
        with _about("sla_p99_ttft"):
            value = given["sla_p99_ttft"]
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ColdscopeError(f"sla_p99_ttft must be seconds or a duration such as "
                                     f"'2s', not {value!r}")
            from coldscope.planning.hint import sla_seconds
            sla = sla_seconds(value)
    observed, prediction = _startup(given, source)
    passed = {name: given[name] for name in ADVISOR_KWARGS if name in given}
    with _about("ColdscopePolicy"):
        return ScaleAdvisor(target_in_flight=target, service_time_s=service_time,
                            observed_s=observed, prediction=prediction, source=source,
                            sla_ttft_s=sla, **passed)


def _startup(given: Mapping[str, Any], source: Any) -> tuple[list[float], Any]:
    """The measured start-ups and the prediction the advisor chooses from, each fetched
    only when the source rule uses it (``scaling.build.startup_inputs``)."""
    if "observed_s" in given and "store" in given:
        raise ColdscopeError("ColdscopePolicy takes observed_s or store, not both")
    model = given.get("model")
    if not {"observed_s", "store", "startup_model"} & set(given):
        raise ColdscopeError(
            "ColdscopePolicy needs a start-up to plan with: observed_s, store and model, or "
            "startup_model and model")
    if source == "observed" and not {"observed_s", "store"} & set(given):
        raise ColdscopeError("ColdscopePolicy source 'observed' needs observed_s, or store "
                             "and model")
    if source == "predicted" and "startup_model" not in given:
        raise ColdscopeError("ColdscopePolicy source 'predicted' needs startup_model and model")
    for name in ("store", "startup_model", "model_root"):
        if name in given and model is None:
            raise ColdscopeError(f"ColdscopePolicy {name} needs model (the model directory "
                                 f"or name)")
    for name in ("store", "startup_model", "model", "model_root", "cache"):
        if name in given:
            _path_text(given[name], name)
    if "cache" in given and given["cache"] not in ("cold", "warm"):
        raise ColdscopeError(f"ColdscopePolicy cache must be cold or warm, not "
                             f"{given['cache']!r}")
    if "cache" in given and "store" not in given:
        raise ColdscopeError("ColdscopePolicy cache filters the store's runs: give store too")
    model_path = None if model is None else _model_path(model, given.get("model_root"))
    listed: list[float] | None = None
    if "observed_s" in given:
        with _about("observed_s"):
            listed = _seconds_list(given["observed_s"])

    def read_observed() -> list[float]:
        if listed is not None:
            return listed
        with _about("store"):
            from coldscope.planning.planner import stored_runs
            runs = times_to_ready(stored_runs(given["store"], str(model_path),
                                              given.get("cache")))
            if not runs and ("startup_model" not in given or source == "observed"):
                raise ColdscopeError(f"store {given['store']!r} has no finished start-up of "
                                     f"model {model!r}")
            return runs

    def predict() -> PredictionLike:
        with _about("startup_model"):
            import coldscope
            return coldscope.predict(given["startup_model"], str(model_path))

    min_runs = given.get("min_runs", MIN_OBSERVED_RUNS)
    with _about("ColdscopePolicy"):
        return startup_inputs(
            source, observed=read_observed if {"observed_s", "store"} & set(given) else None,
            predict=predict if "startup_model" in given else None,
            min_runs=min_runs if type(min_runs) is int else MIN_OBSERVED_RUNS)


def config_warnings(config: object, advisor: ScaleAdvisor) -> tuple[str, ...]:
    """What in Ray's ``AutoscalingConfig`` works against the advisor, one line each."""
    out = []
    ahead = advisor.scale_ahead_s
    up = getattr(config, "upscale_delay_s", 0.0) or 0.0
    down = getattr(config, "downscale_delay_s", 0.0) or 0.0
    look = getattr(config, "look_back_period_s", 0.0) or 0.0
    if up > 0:
        out.append(f"Ray's upscale_delay_s ({up:g} s) holds each scale-up this policy asks "
                   f"for that long after it asks, {ahead:.1f} s ahead: set upscale_delay_s: 0")
    if down > 0:
        out.append(f"Ray's downscale_delay_s ({down:g} s) holds each scale-down on top of the "
                   f"policy's scale_down_delay_s ({advisor.scale_down_delay_s:g} s): set "
                   f"downscale_delay_s: 0")
    if look > ahead:
        out.append(f"Ray averages requests in flight over look_back_period_s ({look:g} s), "
                   f"longer than the {ahead:.1f} s this policy scales ahead by: the demand it "
                   f"sees lags; set look_back_period_s below that")
    for name in ("upscaling_factor", "downscaling_factor"):
        factor = getattr(config, name, None)
        if factor is not None and factor != 1:
            out.append(f"Ray's {name} ({factor:g}) scales each step the policy asks for: "
                       f"leave it unset")
    return tuple(out)


@contextmanager
def _about(name: str) -> Iterator[None]:
    """Errors inside name the keyword they are about, on one line."""
    try:
        yield
    except ColdscopeError as exc:
        message = _one_line(str(exc))
        if name == "ColdscopePolicy" or name in message:
            raise ColdscopeError(f"ColdscopePolicy: {message}") from None
        raise ColdscopeError(f"ColdscopePolicy {name}: {message}") from None
    except (TypeError, ValueError, OSError) as exc:
        raise ColdscopeError(f"ColdscopePolicy {name}: {_one_line(str(exc))}") from None


def _positive(value: object, name: str, *, most: float = 1e9) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not 0 < value <= most:
        raise ColdscopeError(f"{name} must be a number > 0 and <= {most:g}, not {value!r}")
    return float(value)


def _seconds_list(value: object) -> list[float]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, list | tuple):
        raise ColdscopeError(f"observed_s must be a list of seconds, not {value!r:.60}")
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | float) or \
                not math.isfinite(item) or not 0 <= item <= 86_400:
            raise ColdscopeError(f"observed_s must be a list of seconds (0-86,400); "
                                 f"{item!r:.40} is not")
        out.append(float(item))
    if not out:
        raise ColdscopeError("observed_s is empty")
    return out


def _path_text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value or len(value) > 4096:
        raise ColdscopeError(f"ColdscopePolicy {name} must be a path or name (a non-empty "
                             f"string), not {value!r:.60}")
    return value


def _model_path(model: str, root: str | None) -> str:
    """``model`` as given, or resolved inside ``root`` (which it must not leave)."""
    if root is None:
        return model
    base = Path(root).expanduser().resolve()
    if not base.is_dir():
        raise ColdscopeError(f"ColdscopePolicy model_root {root!r} is not a directory")
    given = Path(model).expanduser()
    path = (given if given.is_absolute() else base / given).resolve()
    if not path.is_relative_to(base) or not path.exists():
        raise ColdscopeError(f"ColdscopePolicy model {model!r} is missing or outside "
                             f"model_root {root!r}")
    return str(path)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ColdscopeError(f"ColdscopePolicy {name} must be true or false, not {value!r}")
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "error"


def _name(ctx: object) -> str:
    app, dep = getattr(ctx, "app_name", None), getattr(ctx, "deployment_name", "?")
    return f"{app}#{dep}" if app else str(dep)

