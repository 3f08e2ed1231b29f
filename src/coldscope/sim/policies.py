"""Autoscaling policies: small objects the engine consults once a tick.

A policy is anything with ``tick_s``, ``start(context) -> warm replicas at time 0`` and
``desired(observation) -> replicas wanted`` (see ``engine.Controller``). Like scikit-learn
estimators, ``__init__`` only stores parameters; ``start`` resets every learned value (names
ending in ``_``), so one policy object can drive many runs. To add a policy, write such a class
and pass it to ``simulate``; register it in :data:`POLICIES` to reach it from the CLI.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections import deque
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationError, create_model

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


class Predictive(Reactive):
    """Reactive scaling plus scale-out ahead of demand by the predicted start-up time.

    At each tick it forecasts the arrival rate ``H`` seconds ahead, with ``H`` the
    ``startup_quantile`` (90 %) of the cold-start distribution: the larger of a Holt
    (level + trend) forecast of the per-tick rate and the rate seen one ``season_s`` (a day)
    before that future time, averaged over ``season_window_s``. The forecast concurrency is
    rate x the mean service time, learned online by Little's law (stable-window requests in
    service / stable-window arrival rate; queued ones are left out so that a cold start's queue
    does not inflate it). It asks for max(reactive answer, forecast concurrency / target), so
    replicas are ready when the demand arrives; it scales to zero only if the forecast is zero.
    Its scale-down delay defaults to 60 s, since a noisy forecast otherwise starts and cancels
    replicas tick after tick.

    With ``sla_ttft_s`` set it also keeps the planner's warm floor
    (``coldscope.planning.hint.warm_floor``, the rule behind ``serve``'s scale hint): one replica
    stays up whenever scaling to zero at the stable-window arrival rate would make more than
    1 % of requests wait for a start-up (``H``) plus ``warm_ttft_s`` beyond the SLA. The
    keep-alive it judges with is this policy's own (stable window + scale-to-zero grace).
    """

    def __init__(self, startup_quantile: Annotated[float, Field(gt=0, lt=1)] = 0.9,
                 alpha: Share = 0.2, beta: Share = 0.05, season_s: Positive = 86400.0,
                 season_window_s: Seconds = 600.0, sla_ttft_s: Positive | None = None,
                 warm_ttft_s: Seconds = 0.5, **reactive: Any) -> None:
        reactive.setdefault("scale_down_delay_s", 60.0)
        super().__init__(**reactive)
        self.startup_quantile = startup_quantile
        self.alpha = alpha
        self.beta = beta
        self.season_s = season_s
        self.season_window_s = season_window_s
        self.sla_ttft_s = sla_ttft_s
        self.warm_ttft_s = warm_ttft_s

    def start(self, context: PolicyContext) -> int:
        warm = super().start(context)
        self.horizon_ = float(context.startup.quantile(self.startup_quantile))
        self.level_ = 0.0
        self.trend_ = 0.0
        self.rate_stable_ = _Window(self.stable_.size)
        self.in_flight_stable_ = _Window(self.stable_.size)
        self.time_in_system_ = 0.0
        self.cum_rate_ = [0.0]  # prefix sums of the per-tick rate since time 0
        self.season_ticks_ = max(1, round(self.season_s / self.tick_))
        self.season_half_ = max(0, round(self.season_window_s / self.tick_ / 2))
        self.ahead_ = max(1, round(self.horizon_ / self.tick_))
        return warm

    def desired(self, obs: TickObservation) -> int:
        want = super().desired(obs)
        rate = obs.arrivals / self.tick_
        cum = self.cum_rate_
        cum.append(cum[-1] + rate)
        level = self.level_
        self.level_ = self.alpha * rate + (1 - self.alpha) * (level + self.trend_)
        self.trend_ = self.beta * (self.level_ - level) + (1 - self.beta) * self.trend_
        forecast = max(0.0, self.level_ + self.ahead_ * self.trend_)
        k = len(cum) - 2 + self.ahead_ - self.season_ticks_  # tick index one season back
        if k >= 0:
            lo, hi = max(0, k - self.season_half_), min(len(cum) - 1, k + self.season_half_ + 1)
            if lo < hi:
                forecast = max(forecast, (cum[hi] - cum[lo]) / (hi - lo))
        mean_rate = self.rate_stable_.add(rate)
        in_flight = self.in_flight_stable_.add(obs.in_flight)
        if mean_rate > 0 and in_flight > 0:
            self.time_in_system_ = in_flight / mean_rate
        ahead = math.ceil(forecast * self.time_in_system_ / self.target_ - 1e-9)
        floor = 0
        if self.sla_ttft_s is not None:
            from coldscope.planning.hint import warm_floor
            floor = warm_floor(mean_rate, self.horizon_, self.sla_ttft_s, self.warm_ttft_s,
                               self.idle_after_)
        return min(max(want, self._delay(obs.time, ahead), floor, self.min_workers), self.max_)


#: CLI names of the built-in policies (the CLI's --policy choices come from here).
POLICIES: dict[str, type] = {
    "reactive": Reactive,
    "warm-pool": WarmPool,
    "predictive": Predictive,
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
