"""Autoscaling policies: small objects the engine consults once a tick.

A policy is anything with ``tick_s``, ``start(context) -> warm replicas at time 0`` and
``desired(observation) -> replicas wanted`` (see ``engine.Controller``). Like scikit-learn
estimators, ``__init__`` only stores parameters; ``start`` resets every learned value (names
ending in ``_``), so one policy object can drive many runs. To add a policy, write such a class
and pass it to ``simulate``; register it in :data:`POLICIES` to reach it from the CLI.

Built in: ``reactive`` (Knative's KPA), ``warm-pool``, ``predictive`` (coldscope's
``ScaleAdvisor``, the same object an autoscaler runs), ``ray-default`` (Ray Serve 2.60's default
policy, checked against Ray's own code) and ``fixed``.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections import deque
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, create_model

from coldscope.scaling.advisor import ScaleAdvisor
from coldscope.scaling.startup import StartupDistribution
from coldscope.sim.core import PolicyContext, TickObservation
from coldscope.util.errors import ColdscopeError

# Parameter types with their bounds: ``make_policy`` checks them before a run starts.
Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
TickSeconds = Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Share = Annotated[float, Field(gt=0, le=1)]


class FixedPool:
    """``workers`` replicas, warm from the start, never scaled: the M/M/c baseline."""

    tick_s = None

    def __init__(self, workers: Count = 1) -> None:
        self.workers = workers

    def start(self, context: PolicyContext) -> int:
        return self.workers

    def desired(self, obs: TickObservation) -> int:
        return self.workers


class _Window:
    """Mean of the last ``size`` samples, kept as a running sum (ticks are hot)."""

    __slots__ = ("size", "values", "total")

    def __init__(self, size: int) -> None:
        self.size, self.total = size, 0.0
        self.values: deque[float] = deque()

    def add(self, x: float) -> float:
        self.values.append(x)
        self.total += x
        if len(self.values) > self.size:
            self.total -= self.values.popleft()
        return self.total / len(self.values)


class Reactive:
    """Knative's concurrency autoscaler (KPA), after ``pkg/autoscaler/scaling/autoscaler.go``.

    Every ``tick_s`` (2 s in Knative) it samples the observed concurrency (in flight + queued)
    and averages it over a stable window (60 s) and a panic window (``panic_window_pct`` of it,
    6 s). Wanted replicas = ceil(average / ``target``), with ``target`` the concurrency per
    replica (default 70 % of the replica's slots, Knative's target utilisation). If the panic
    window wants at least ``panic_threshold`` x the ready replicas, it panics: it follows the
    panic window and never scales down until it has been calm for a stable window. Scale-up is
    capped at ``max_scale_up_rate`` x ready replicas and scale-down at 1/``max_scale_down_rate``
    per tick. It scales to zero only when there has been no request for the stable window plus
    ``scale_to_zero_grace_s`` (Knative: 30 s), and never below ``min_workers`` (min-scale) nor
    above ``max_workers``. With ``scale_down_delay_s`` (Knative's scale-down-delay, default 0)
    it keeps the largest answer of that last stretch of time, which stops start/cancel churn.
    A request arriving at zero replicas starts one at the next tick.
    """

    tick_s: float | None

    def __init__(self, target: Positive | None = None, target_utilization: Share = 0.7,
                 stable_window_s: Positive = 60.0,
                 panic_window_pct: Annotated[float, Field(gt=0, le=100)] = 10.0,
                 panic_threshold: Positive = 2.0, scale_to_zero_grace_s: Seconds = 30.0,
                 min_workers: Count = 0, max_workers: Count | None = None,
                 max_scale_up_rate: Positive = 1000.0, max_scale_down_rate: Positive = 2.0,
                 scale_down_delay_s: Seconds = 0.0, tick_s: TickSeconds = 2.0) -> None:
        self.target = target
        self.target_utilization = target_utilization
        self.stable_window_s = stable_window_s
        self.panic_window_pct = panic_window_pct
        self.panic_threshold = panic_threshold
        self.scale_to_zero_grace_s = scale_to_zero_grace_s
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.max_scale_up_rate = max_scale_up_rate
        self.max_scale_down_rate = max_scale_down_rate
        self.scale_down_delay_s = scale_down_delay_s
        self.tick_s = tick_s

    def start(self, context: PolicyContext) -> int:
        tick = self.tick_s
        if not tick or tick <= 0:
            raise ValueError("a reactive policy needs tick_s > 0")
        target = self.target or self.target_utilization * context.concurrency
        if target <= 0:
            raise ValueError("target concurrency per replica must be > 0")
        self.tick_ = tick
        self.target_ = target
        stable = max(1, round(self.stable_window_s / tick))
        self.stable_ = _Window(stable)
        self.panic_ = _Window(max(1, round(stable * self.panic_window_pct / 100)))
        self.panic_until_ = -math.inf  # in panic while time < this
        self.max_panic_pods_ = 0
        self.last_busy_ = -math.inf  # last tick with a request in the system
        self.idle_after_ = self.stable_window_s + self.scale_to_zero_grace_s
        self.max_ = self.max_workers if self.max_workers is not None else 1 << 30
        # (time, answer) of the last scale_down_delay_s, answers decreasing: a running max
        self.recent_: deque[tuple[float, int]] = deque()
        return self.min_workers

    def _delay(self, now: float, want: int) -> int:
        """The largest answer of the last ``scale_down_delay_s`` seconds (now included)."""
        if self.scale_down_delay_s <= 0:
            return want
        recent = self.recent_
        while recent and recent[-1][1] <= want:
            recent.pop()
        recent.append((now, want))
        while recent[0][0] <= now - self.scale_down_delay_s:
            recent.popleft()
        return recent[0][1]

    def desired(self, obs: TickObservation) -> int:
        conc = obs.concurrency
        stable = self.stable_.add(conc)
        panic = self.panic_.add(conc)
        now = obs.time
        if conc > 0:
            self.last_busy_ = now
        target = self.target_
        want_stable = math.ceil(stable / target - 1e-9)
        want_panic = math.ceil(panic / target - 1e-9)
        ready = max(1, obs.ready)
        up = math.ceil(self.max_scale_up_rate * ready)
        down = math.floor(ready / self.max_scale_down_rate)
        if want_panic / ready >= self.panic_threshold:
            self.panic_until_ = now + self.stable_window_s  # start or extend the panic
        want = min(max(want_stable, down), up)
        if now < self.panic_until_:
            want = max(want, min(max(want_panic, down), up), self.max_panic_pods_)
            self.max_panic_pods_ = want  # never scale down while panicking
        else:
            self.max_panic_pods_ = 0
        if conc > 0 or now - self.last_busy_ < self.idle_after_:
            want = max(want, 1)  # scale from zero at once; to zero only after the grace
        else:
            want = 0
        return min(max(self._delay(now, want), self.min_workers), self.max_)


class WarmPool(Reactive):
    """Reactive scaling above a floor of ``min_workers`` replicas kept warm 24x7 (paid).

    The pool is warm at time 0; only traffic above it pays cold starts.
    """

    def __init__(self, min_workers: Count = 1, **reactive: Any) -> None:
        super().__init__(min_workers=min_workers, **reactive)


class Predictive:
    """Start-up-aware scaling: one :class:`coldscope.ScaleAdvisor` per run, consulted each tick.

    ``start`` builds the advisor on the run's own cold-start distribution (the simulator's
    ``ColdStart``, as a ``given`` start-up) and ``desired`` is the advisor's
    ``desired_replicas`` for the tick's observation: the rate (arrivals since the previous tick
    / ``tick_s``), the requests in service and queued, the replicas ready and starting. So
    ``simulate --policy predictive`` is exactly what an autoscaler running the advisor would
    ask for. The method (docs/autoscale.md, ``coldscope.scaling.advisor``): it forecasts the
    rate one cold path ahead (``startup_quantile`` of the start-up, 90 %) as the larger of
    Holt's level + trend and the rate one ``season_s`` before; turns rates into replicas with the
    time in service learned by Little's law over ``rate_window_s`` and the target of ``target``
    requests per replica (default ``target_utilization`` x the replica's slots); asks for
    max(demand now, forecast); keeps one replica for ``keep_alive_s`` after the last request in
    the system; holds each answer for ``scale_down_delay_s`` (both by default two cold paths:
    ``ScaleAdvisor``'s ``hold_s``); and with ``sla_ttft_s`` keeps the
    planner's warm floor (``coldscope.planning.hint.warm_floor``).

    ``observe`` says what the advisor is shown. ``"arrivals"`` (default): the rate of arrivals,
    as ``serve``'s gauges and ``/v1/scale-hint`` give it. ``"ray"``: what
    ``ColdscopePolicy`` is shown behind a real Ray Serve, which reports no arrivals: the mean
    over ``look_back_period_s`` of the requests in service and of those queued (Ray's
    ``total_num_requests`` minus ``total_queued_requests``, and the latter), the rate then
    being Little's law on the requests in service with ``service_time_s`` (required); and
    Ray's 0-replica fast path, which answers ``max(1, last target)`` without asking the policy
    while nothing runs and requests wait. Ray's metrics push lag is not modelled (as in
    :class:`RayServeDefault`). ``benches/bench_autoscale.py`` simulates both beside the real
    loop, to tell how much of the gap between the simulated and the real advisor comes from
    what Ray lets the policy see.

    Before the advisor, this policy was Knative's KPA (panic and stable windows) plus the
    forecast; the advisor's "now" is the concurrency seen at the tick instead, held by the
    scale-down delay (docs/autoscale.md, "The simulator's predictive policy").
    """

    tick_s: float | None

    def __init__(self, target: Positive | None = None, target_utilization: Share = 0.7,
                 startup_quantile: Annotated[float, Field(gt=0, lt=1)] = 0.9,
                 alpha: Share = 0.033, beta: Share = 0.002,
                 trend_damping: Annotated[float, Field(ge=0, le=1)] = 0.98,
                 season_s: Positive = 86400.0, season_window_s: Seconds = 600.0,
                 rate_window_s: Positive = 60.0, keep_alive_s: Seconds | None = None,
                 scale_down_delay_s: Seconds | None = None,
                 sla_ttft_s: Positive | None = None,
                 warm_ttft_s: Seconds = 0.5, min_workers: Count = 0,
                 max_workers: Count | None = None, tick_s: TickSeconds = 2.0,
                 observe: Literal["arrivals", "ray"] = "arrivals",
                 service_time_s: Positive | None = None,
                 look_back_period_s: Positive = 30.0) -> None:
        self.target = target
        self.target_utilization = target_utilization
        self.startup_quantile = startup_quantile
        self.alpha = alpha
        self.beta = beta
        self.trend_damping = trend_damping
        self.season_s = season_s
        self.season_window_s = season_window_s
        self.rate_window_s = rate_window_s
        self.keep_alive_s = keep_alive_s
        self.scale_down_delay_s = scale_down_delay_s
        self.sla_ttft_s = sla_ttft_s
        self.warm_ttft_s = warm_ttft_s
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.tick_s = tick_s
        self.observe = observe
        self.service_time_s = service_time_s
        self.look_back_period_s = look_back_period_s

    def advisor(self, context: PolicyContext) -> ScaleAdvisor:
        """The advisor this policy runs for a simulation of ``context``."""
        tick = self.tick_s
        if not tick or tick <= 0:
            raise ColdscopeError("the predictive policy needs tick_s > 0")
        if self.observe == "ray" and self.service_time_s is None:
            raise ColdscopeError("the predictive policy with observe=ray needs service_time_s "
                                 "(Ray reports requests in flight, not a rate)")
        target = self.target or self.target_utilization * context.concurrency
        startup = StartupDistribution.given(context.startup.quantile, context.startup.source)
        return ScaleAdvisor(
            target_in_flight=target, startup=startup, service_time_s=self.service_time_s,
            scale_ahead_quantile=self.startup_quantile, alpha=self.alpha, beta=self.beta,
            step_s=tick, trend_damping=self.trend_damping, season_s=self.season_s,
            season_window_s=self.season_window_s, rate_window_s=self.rate_window_s,
            keep_alive_s=self.keep_alive_s, scale_down_delay_s=self.scale_down_delay_s,
            sla_ttft_s=self.sla_ttft_s, warm_ttft_s=self.warm_ttft_s,
            min_replicas=self.min_workers, max_replicas=self.max_workers)

    def start(self, context: PolicyContext) -> int:
        self.advisor_ = self.advisor(context)
        self.tick_ = float(self.tick_s or 0.0)
        self.seen_ = _LookBack(self.look_back_period_s)
        self.target_ = self.min_workers
        return self.min_workers

    def desired(self, obs: TickObservation) -> int:
        if self.observe == "arrivals":
            return self.advisor_.tick(
                obs.time, rate_rps=obs.arrivals / self.tick_, in_flight=obs.in_flight,
                queued=obs.queued, running=obs.ready, starting=obs.starting).desired_replicas
        in_service, queued = self.seen_.add(obs.time, obs.in_flight, obs.queued)
        if obs.ready == 0 and in_service + queued > 0:  # Ray's _get_cold_start_scale_up_replicas
            self.target_ = max(1, self.target_)
            return self.target_
        self.target_ = self.advisor_.tick(
            obs.time, in_flight=in_service, queued=queued, running=obs.ready,
            starting=obs.starting).desired_replicas
        return self.target_


class _LookBack:
    """The means of two counts over the last ``period_s`` of ticks, as Ray's controller
    aggregates ``total_num_requests`` and ``total_queued_requests`` (mean over the look-back)."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.samples: deque[tuple[float, int, int]] = deque()
        self.sum_a = self.sum_b = 0

    def add(self, now: float, a: int, b: int) -> tuple[float, float]:
        self.samples.append((now, a, b))
        self.sum_a += a
        self.sum_b += b
        while self.samples[0][0] <= now - self.period_s:
            _, old_a, old_b = self.samples.popleft()
            self.sum_a -= old_a
            self.sum_b -= old_b
        n = len(self.samples)
        return self.sum_a / n, self.sum_b / n


class RayServeDefault:
    """Ray Serve's default autoscaling policy (ray 2.60.0), replayed tick by tick.

    Modelled on ``python/ray/serve/autoscaling_policy.py``: ``replica_queue_length_autoscaling_
    policy`` (``_core_replica_queue_length_policy``) wrapped as the controller wraps every policy
    (``_apply_autoscaling_config``: ``_get_cold_start_scale_up_replicas``,
    ``_apply_scaling_factors``, ``_apply_delay_logic``), then bounded as
    ``python/ray/serve/_private/autoscaling_state.py``'s ``DeploymentAutoscalingState.
    get_decision_num_replicas`` and ``apply_bounds`` do. Each tick, with ``running`` the ready
    replicas, ``target`` the last decision and ``total`` the mean of the observed concurrency
    (in service + queued: Ray's ``total_num_requests``) over the last ``look_back_period_s``:

    * **0-replica fast path**: no replica running and requests waiting: ``max(ceil(
      upscaling_factor), target)`` at once, no delay, the delay state untouched;
    * else ``desired = running x total / (target_ongoing_requests x running)`` (``target`` when
      nothing runs), moved from ``running`` by ``upscaling_factor``/``downscaling_factor``
      (``ceil(running + factor x (desired - running))``, and one less when a scale-down would
      otherwise stall);
    * **delays**: a scale-up happens once every tick for ``upscale_delay_s`` (30 s) has wanted
      more than ``target``, a scale-down once ``downscale_delay_s`` (600 s; from 1 to 0:
      ``downscale_to_zero_delay_s`` if set) has wanted less (a change of direction restarts the
      clock; below 1 only from 1); with nothing running and ``desired > 0``, at once;
    * **bounds**: ``min_replicas <= answer <= max_replicas``; at time 0, ``initial_replicas``
      (else ``min_replicas``) replicas are up, warm.

    Defaults are Ray's, except ``max_replicas`` (Ray: 1, which would not scale at all; here
    unbounded up to the simulation's replica limit) and ``tick_s`` (Ray's controller loop runs
    every 0.1 s; here 1 s: the delays are measured in time, so a tick only rounds them up to
    the next tick). Not modelled: the metrics pipeline's sampling and push lag (replicas and
    handles record every 0.2 x ``look_back_period_s`` and push every 10 s; here the concurrency
    is sampled at each tick and seen at once), ``target_capacity``, ``aggregation_function``
    other than its default ``mean``. ``tests/unit/sim/test_ray_policy.py`` checks the decisions
    against Ray's own functions.
    """

    tick_s: float | None

    def __init__(self, target_ongoing_requests: Positive = 2.0, min_replicas: Count = 1,
                 max_replicas: Count | None = None, initial_replicas: Count | None = None,
                 upscale_delay_s: Seconds = 30.0, downscale_delay_s: Seconds = 600.0,
                 downscale_to_zero_delay_s: Seconds | None = None,
                 look_back_period_s: Positive = 30.0, upscaling_factor: Positive = 1.0,
                 downscaling_factor: Positive = 1.0, tick_s: TickSeconds = 1.0) -> None:
        self.target_ongoing_requests = target_ongoing_requests
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.initial_replicas = initial_replicas
        self.upscale_delay_s = upscale_delay_s
        self.downscale_delay_s = downscale_delay_s
        self.downscale_to_zero_delay_s = downscale_to_zero_delay_s
        self.look_back_period_s = look_back_period_s
        self.upscaling_factor = upscaling_factor
        self.downscaling_factor = downscaling_factor
        self.tick_s = tick_s

    def start(self, context: PolicyContext) -> int:
        if not self.tick_s or self.tick_s <= 0:
            raise ColdscopeError("the ray-default policy needs tick_s > 0")
        top = self.max_replicas
        if top is not None and top < self.min_replicas:
            raise ColdscopeError(f"max_replicas ({top}) must be >= min_replicas "
                                 f"({self.min_replicas}), as Ray requires")
        first = self.min_replicas if self.initial_replicas is None else self.initial_replicas
        if first < self.min_replicas or (top is not None and first > top):
            raise ColdscopeError(f"initial_replicas ({first}) must lie between min_replicas "
                                 f"and max_replicas, as Ray requires")
        self.max_ = (1 << 62) if top is None else top
        self.target_ = first  # Ray's target_num_replicas: the last decision
        self.seen_ = _LookBack(self.look_back_period_s)  # concurrency over the look-back
        self.counter_ = 0  # Ray's __decision_counters: > 0 wanting up, < 0 wanting down
        self.since_: float | None = None  # Ray's __decision_timestamp
        return first

    def total_requests(self, obs: TickObservation) -> float:
        """Ray's ``total_num_requests``: mean concurrency of the last look-back period."""
        return self.seen_.add(obs.time, obs.concurrency, 0)[0]

    def desired(self, obs: TickObservation) -> int:
        total = self.total_requests(obs)
        running, target = obs.ready, self.target_
        if running == 0 and total > 0:  # _get_cold_start_scale_up_replicas
            decision = max(math.ceil(1 * self.upscaling_factor), target)
        else:
            if running == 0:  # _core_replica_queue_length_policy
                wanted: float = target
            else:
                wanted = running * (total / (self.target_ongoing_requests * running))
            scaled = self._scaling_factors(wanted, running)
            if running == 0 and scaled > 0:  # _apply_default_params: no delay from zero
                decision = scaled
            else:
                decision = self._delay(max(0, scaled), target, obs.time)
        decision = max(self.min_replicas, min(self.max_, decision))  # apply_bounds
        self.target_ = decision
        return decision

    def _scaling_factors(self, wanted: float, running: int) -> int:
        """``_apply_scaling_factors``."""
        if running == 0:
            return math.ceil(wanted)
        delta = wanted - running
        factor = self.upscaling_factor if delta > 0 else self.downscaling_factor
        scaled = math.ceil(running + factor * delta)
        if math.ceil(float(wanted)) < running and scaled == running:
            scaled -= 1
        return scaled

    def _delay(self, wanted: int, target: int, now: float) -> int:
        """``_apply_delay_logic``: act once the same direction has been wanted long enough."""
        decision = target
        if wanted > target:
            if self.counter_ < 0:
                self.counter_, self.since_ = 0, None
            self.counter_ += 1
            if self.since_ is None:
                self.since_ = now
            if now - self.since_ + _RAY_DELAY_EPS_S >= self.upscale_delay_s:
                self.counter_, self.since_ = 0, None
                decision = wanted
        elif wanted < target:
            if self.counter_ > 0:
                self.counter_, self.since_ = 0, None
            self.counter_ -= 1
            if target == 1:
                delay = self.downscale_delay_s if self.downscale_to_zero_delay_s is None \
                    else self.downscale_to_zero_delay_s
            else:
                delay = self.downscale_delay_s
                wanted = max(1, wanted)
            if self.since_ is None:
                self.since_ = now
            if now - self.since_ + _RAY_DELAY_EPS_S >= delay:
                self.counter_, self.since_ = 0, None
                decision = wanted
        else:
            self.counter_, self.since_ = 0, None
        return decision


#: Ray's ``_DELAY_ELAPSED_EPS_S``: a delay of D s has elapsed at D - 1e-6 s (float drift).
_RAY_DELAY_EPS_S = 1e-6


#: CLI names of the built-in policies (the CLI's --policy choices come from here).
POLICIES: dict[str, type] = {
    "reactive": Reactive,
    "warm-pool": WarmPool,
    "predictive": Predictive,
    "ray-default": RayServeDefault,
    "fixed": FixedPool,
}


def parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword parameters of a policy class, its parents' ``**reactive`` ones included."""
    out: dict[str, inspect.Parameter] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        hints = typing.get_type_hints(init, include_extras=True)
        for name, param in inspect.signature(init).parameters.items():
            if name == "self" or param.kind is param.VAR_KEYWORD:
                continue
            out[name] = param.replace(annotation=hints.get(name, Any))
    return out


def make_policy(name: str, params: dict[str, Any]) -> Any:
    """A built-in policy by its CLI name; unknown parameters and out-of-range values are
    one-line errors here, before any simulation runs."""
    cls = POLICIES.get(name)
    if cls is None:
        raise ColdscopeError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    fields: dict[str, Any] = {k: (p.annotation, p.default) for k, p in parameters(cls).items()}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ColdscopeError(f"policy {name!r} has no parameter {unknown[0]!r} (it has: "
                             f"{', '.join(sorted(fields))})")
    model = create_model(f"{cls.__name__}Params", __config__=ConfigDict(extra="forbid"),
                         **fields)
    try:
        checked = model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(x) for x in first["loc"])
        raise ColdscopeError(f"policy {name!r}: {key}={params.get(key)!r}: {first['msg']}"
                             ) from None
    return cls(**{k: getattr(checked, k) for k in params})
