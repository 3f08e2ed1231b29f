"""``ScaleAdvisor``: how many replicas to have now, asked for one cold path ahead of demand.

One advisor per model (per deployment), stateful, fed once a tick. At each :meth:`ScaleAdvisor.tick`
it takes what an autoscaler can see (the arrival rate or the requests in flight, the replicas
running and starting) and answers a :class:`ScaleDecision`. The method, in order:

1. **Cold path.** ``H`` = the ``scale_ahead_quantile`` (0.9) of the cold path: the engine
   start-up (:class:`~coldscope.scaling.startup.StartupDistribution`: measured runs, a prediction
   or a given distribution) plus the platform's seconds before the engine starts
   (``provisioning_s + image_pull_s + weight_transfer_s``, e.g. from ``coldscope.plan``:
   :meth:`ScaleAdvisor.from_plan`). Fixed at construction. With a standby launcher on the
   nodes new replicas start on (``startup_saving_s``, off by default; ``from_plan(...,
   standby=True)`` takes it from the plan's ``standby_launcher`` layer), every engine start-up
   is that many seconds shorter (never below 0); a launcher saves nothing on a new node, so a
   saving with ``provisioning_s`` above 0 is refused.
2. **Rate now.** ``rate_rps`` as given; else ``in_flight / T`` (Little's law), ``T`` the time a
   request spends in service.
3. **Time in service ``T``**: ``service_time_s`` (this tick's, else the constructor's), else
   learned online by Little's law over the last ``rate_window_s``: mean in flight / mean rate,
   over the ticks that gave both (queued requests left out, so that a cold start's queue does not
   inflate it); kept when traffic stops.
4. **Forecast** the rate at ``now + H``
   (:class:`~coldscope.scaling.forecast.RateForecaster`): the larger of Holt's level + trend and
   the mean rate one season (a day) before, around that time.
5. **Capacity.** A rate ``x`` needs ``ceil(x * T / target_in_flight)`` replicas
   (``target_in_flight``: requests one replica should hold). *Now*:
   ``ceil((in_flight + queued) / target_in_flight)`` (or the rate now's need when no in-flight
   count is given); *ahead*: the forecast's need, when the forecast expects at least one
   request per cold path (below that, keep-alive and the warm floor decide).
   ``capacity_replicas`` = the larger. While ``T`` is unknown the forecast cannot be turned into
   replicas (a warning says so) and the demand now decides.
6. **Keep-alive.** One replica stays while a request was in the system (capacity now > 0, or
   a rate above 0) within the last ``keep_alive_s``: scale to zero only after that long idle.
   Default: ``hold_s`` (step 8).
7. **Warm floor.** With ``sla_ttft_s``, the planner's rule ``coldscope.planning.hint.warm_floor``
   (the one behind ``serve``'s scale hint): 1 replica when scaling to zero at the mean rate of the
   last ``rate_window_s`` would make more than 1 % of requests wait a cold path (``H``) plus
   ``warm_ttft_s`` beyond the SLA, judged with this advisor's ``keep_alive_s``.
8. **Scale-down delay** (hysteresis): the answer is the largest of steps 5-7 over the last
   ``scale_down_delay_s`` (now included): scale-up at once, scale-down only after the demand has
   stayed lower that long. Default: ``hold_s`` = ``HOLD_COLD_PATHS`` (2) x ``H``. Why derived
   from the cold path: a replica let go costs a cold path to get back, in replica-seconds and
   in requests that wait it; holding an idle replica for a multiple of that is the
   ski-rental rule (hold for one cold path and the idle seconds never exceed twice what
   restarting would have cost; the second cold path is for the requests that would wait
   past the SLA). A fixed 60 s hold churned on bursty traffic: on the Azure code trace
   (``benches/bench_autoscale.py``'s replay, twelve 10-minute segments simulated from zero)
   it started 105 replicas where Ray's 600 s hold started 48, and 1,452 requests missed
   the SLA against Ray's 1,097; two cold paths gave 52 starts, 623 requests over the SLA,
   at 1.26x Ray's replica-seconds (docs/autoscale.md).
9. **Bounds**: ``min_replicas`` <= answer <= ``max_replicas``.

``desired_replicas`` counts running + starting replicas, like Ray's ``target_num_replicas`` and
a Deployment's ``replicas``. A tick costs microseconds (``benches/bench_advisor.py``): no file,
model or YAML is read after construction. The simulator's ``--policy predictive`` is this
advisor (``coldscope.sim.policies.Predictive``). docs/autoscale.md has the method and its
measured forecast error.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, Literal

from coldscope.scaling.forecast import RateForecaster
from coldscope.scaling.startup import (
    MIN_OBSERVED_RUNS,
    Percentiles,
    PredictionLike,
    SourceChoice,
    StartupDistribution,
    choose,
)
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.planning.result import PlanReport

#: Version of :meth:`ScaleDecision.to_dict`'s JSON.
SCHEMA_VERSION = 1
#: The largest rate (requests/s) and request count a tick takes: beyond is a unit mix-up.
MAX_RATE_RPS = 1e6
MAX_REQUESTS = 1e9
#: Default scale-down delay and keep-alive, in cold paths (``scale_ahead_s``): module doc, step 8.
HOLD_COLD_PATHS = 2.0
#: The plan's parts that come before the engine starts (the engine's own start-up, weight
#: loading included, is what the start-up distribution covers).
PLAN_PARTS = ("provisioning", "image_pull", "weight_transfer")

#: What set the answer (``ScaleDecision.driver``).
Driver = Literal["idle", "demand now", "forecast", "keep-alive", "warm floor",
                 "scale-down delay", "min_replicas", "max_replicas"]

_NO_SERVICE_TIME = ("the time in service is not known yet (give service_time_s, or rate_rps "
                    "with in_flight to learn it): the forecast is not turned into replicas")


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """One tick's answer and everything it rests on (seconds, requests/s, replicas).

    ``desired_replicas``: running + starting replicas to have now. ``capacity_replicas``: what
    the demand needs (now or one cold path ahead, the larger), before keep-alive, warm floor,
    scale-down delay and bounds; ``now_replicas``/``ahead_replicas`` are its two parts.
    ``driver`` names the step that set the answer. ``scale_ahead_s``: the cold-path quantile
    ``scale_ahead_quantile`` the forecast looks ahead by; ``startup_s``: the engine start-up's
    percentiles; ``cold_path_s``: those plus the platform seconds. ``forecast_rps``: the rate
    forecast for ``time_s + scale_ahead_s``; ``rate_rps``: the rate seen now;
    ``service_time_s``: the time in service used (None: not known yet). ``warm_floor`` (0 or
    1) and ``floor_reason``. ``source``: ``observed``, ``predicted`` or ``given``.
    ``warnings``: the start-up's (too few runs, the prediction's own) and this tick's.
    """

    time_s: float
    desired_replicas: int
    capacity_replicas: int
    now_replicas: int
    ahead_replicas: int
    driver: Driver
    running: int
    starting: int
    rate_rps: float
    forecast_rps: float
    service_time_s: float | None
    scale_ahead_s: float
    scale_ahead_quantile: float
    startup_s: Percentiles
    cold_path_s: Percentiles
    warm_floor: int
    floor_reason: str
    source: str
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (numbers, strings, lists), ``schema_version`` first."""
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, Percentiles):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    def to_json(self) -> str:
        """``to_dict()`` as one line of JSON (never NaN or infinity)."""
        return json.dumps(self.to_dict(), allow_nan=False)


class ScaleAdvisor:
    """A start-up-aware scaling policy for one model: see the module doc for the method.

    The start-up it plans with: ``observed_s`` (measured times to ready, e.g.
    ``scaling.times_to_ready(store.runs(model_path=...))``) and/or ``prediction`` (a
    ``coldscope.predict`` result), picked by ``source``: ``"observed"``, ``"predicted"`` or
    ``"auto"`` (the runs when there are at least ``min_runs``, else the prediction); or a
    ready ``startup`` distribution instead of both. Each decision reports which.

    ``target_in_flight``: requests (in service + queued) one replica should hold, e.g. 70 % of
    the engine's concurrent sequences (Knative's target, Ray's ``target_ongoing_requests``). A
    caller that knows requests/s per replica instead gives ``target_in_flight=1`` and
    ``service_time_s=1/replica_rps``.

    Every other parameter is the method's, in seconds unless named: ``scale_ahead_quantile``
    (of the cold path), the forecast's ``alpha``, ``beta``, ``step_s``, ``trend_damping``,
    ``season_s`` (None: no seasonal term) and ``season_window_s``; ``rate_window_s`` (Little's
    law and the floor's rate), ``keep_alive_s`` and ``scale_down_delay_s`` (None: two cold
    paths, ``hold_s``), ``sla_ttft_s`` (None:
    no warm floor), ``warm_ttft_s`` and ``burstiness`` (the squared coefficient of variation of
    gaps between requests, 1 for Poisson) for the floor; ``min_replicas``, ``max_replicas``.
    Bad values are a one-line ``ColdscopeError`` here, not at the first tick. An advisor is
    not thread-safe: one caller ticks it (an autoscaler's control loop).
    """

    def __init__(self, *, target_in_flight: float,
                 observed_s: Iterable[float] = (), prediction: PredictionLike | None = None,
                 source: SourceChoice = "auto", startup: StartupDistribution | None = None,
                 min_runs: int = MIN_OBSERVED_RUNS,
                 provisioning_s: float = 0.0, image_pull_s: float = 0.0,
                 weight_transfer_s: float = 0.0, startup_saving_s: float = 0.0,
                 service_time_s: float | None = None, scale_ahead_quantile: float = 0.9,
                 alpha: float = 0.033, beta: float = 0.002, step_s: float = 2.0,
                 trend_damping: float = 0.98, season_s: float | None = 86_400.0,
                 season_window_s: float = 600.0, rate_window_s: float = 60.0,
                 keep_alive_s: float | None = None, scale_down_delay_s: float | None = None,
                 sla_ttft_s: float | None = None, warm_ttft_s: float = 0.5,
                 burstiness: float = 1.0, min_replicas: int = 0,
                 max_replicas: int | None = None) -> None:
        _number(target_in_flight, "target_in_flight", positive=True)
        _number(rate_window_s, "rate_window_s", positive=True, most=86_400.0)
        for name, value in (("provisioning_s", provisioning_s), ("image_pull_s", image_pull_s),
                            ("weight_transfer_s", weight_transfer_s),
                            ("startup_saving_s", startup_saving_s),
                            ("keep_alive_s", keep_alive_s),
                            ("scale_down_delay_s", scale_down_delay_s),
                            ("warm_ttft_s", warm_ttft_s)):
            if value is not None:
                _number(value, name, most=86_400.0 * 366)
        if service_time_s is not None:
            _number(service_time_s, "service_time_s", positive=True, most=86_400.0)
        if not 0 < scale_ahead_quantile < 1:
            raise ColdscopeError(f"scale_ahead_quantile must be between 0 and 1, not "
                                 f"{scale_ahead_quantile!r}")
        if sla_ttft_s is not None:
            _number(sla_ttft_s, "sla_ttft_s", positive=True, most=86_400.0)
        _number(burstiness, "burstiness", positive=True, most=1e6)
        if isinstance(min_runs, bool) or not isinstance(min_runs, int) or min_runs < 1:
            raise ColdscopeError(f"min_runs must be a whole number >= 1, not {min_runs!r}")
        for name, count in (("min_replicas", min_replicas), ("max_replicas", max_replicas)):
            if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                      or count < 0):
                raise ColdscopeError(f"{name} must be a whole number >= 0, not {count!r}")
        if max_replicas is not None and max_replicas < min_replicas:
            raise ColdscopeError(f"max_replicas ({max_replicas}) is below min_replicas "
                                 f"({min_replicas})")
        if startup_saving_s and provisioning_s:
            raise ColdscopeError("startup_saving_s (a standby launcher's) needs provisioning_s "
                                 "0: a new node pays the imports once, in its own launcher")
        runs = list(observed_s)
        if startup is not None:
            if prediction is not None or runs or source != "auto":
                raise ColdscopeError("give a startup distribution, or observed_s/prediction "
                                     "(and source), not both")
            self.startup = startup
        else:
            self.startup = choose(runs, prediction, source, min_runs=min_runs)
        if startup_saving_s:
            self.startup = self.startup.less(float(startup_saving_s), "a standby launcher")
        self.startup_saving_s = float(startup_saving_s)
        self.target_in_flight = float(target_in_flight)
        self.service_time_s = None if service_time_s is None else float(service_time_s)
        self.scale_ahead_quantile = float(scale_ahead_quantile)
        self.cold_path_extra_s = float(provisioning_s) + float(image_pull_s) + \
            float(weight_transfer_s)
        self.startup_s = self.startup.percentiles()
        extra = self.cold_path_extra_s
        self.cold_path_s = Percentiles(self.startup_s.p50 + extra, self.startup_s.p90 + extra,
                                       self.startup_s.p99 + extra)
        self.scale_ahead_s = self.startup.quantile(self.scale_ahead_quantile) + extra
        # a forecast of less than one request per cold path asks for no replica ahead
        self._least_rate = 1.0 / self.scale_ahead_s if self.scale_ahead_s > 0 else 0.0
        self.forecaster = RateForecaster(self.scale_ahead_s, alpha=alpha, beta=beta,
                                         step_s=step_s, trend_damping=trend_damping,
                                         season_s=season_s, season_window_s=season_window_s)
        self.rate_window_s = float(rate_window_s)
        #: the default keep-alive and scale-down delay: HOLD_COLD_PATHS cold paths
        self.hold_s = HOLD_COLD_PATHS * self.scale_ahead_s
        self.keep_alive_s = self.hold_s if keep_alive_s is None else float(keep_alive_s)
        self.scale_down_delay_s = self.hold_s if scale_down_delay_s is None \
            else float(scale_down_delay_s)
        self.sla_ttft_s = None if sla_ttft_s is None else float(sla_ttft_s)
        self.warm_ttft_s = float(warm_ttft_s)
        self.burstiness = float(burstiness)
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self._floor: Callable[[float], int] | None = None
        self._floor_reasons = ("no SLA given (sla_ttft_s): no warm floor", "")
        if self.sla_ttft_s is not None:
            self._floor, self._floor_reasons = self._warm_floor_rule(self.sla_ttft_s)
        self._warnings = self.startup.warnings
        self._warnings_no_t = (*self._warnings, _NO_SERVICE_TIME)
        # learned state
        self.last_time_: float | None = None
        self.learned_service_time_s_: float | None = None
        self._rates: deque[tuple[float, float]] = deque()  # (time, rate) of rate_window_s
        self._rate_sum = 0.0
        self._pairs: deque[tuple[float, float, float]] = deque()  # (time, rate, in flight)
        self._pair_rate = self._pair_flight = 0.0
        self._last_busy = -math.inf
        self._recent: deque[tuple[float, int]] = deque()  # (time, answer), answers decreasing

    @classmethod
    def from_plan(cls, report: PlanReport, *, estimate: Literal["low", "high"] = "high",
                  standby: bool = False, **kwargs: Any) -> ScaleAdvisor:
        """An advisor whose cold path adds the plan's seconds before the engine starts:
        provisioning, image pull and weight transfer of ``coldscope.plan``'s report (its
        ``parts``, with the report's mitigations applied), at their ``high`` (default) or
        ``low`` estimate. ``standby``: also take the seconds the plan's ``standby_launcher``
        layer removes (at the same estimate) off every engine start-up (``startup_saving_s``;
        0 when the plan provisions a new node). ``kwargs`` are the constructor's (the
        start-up, the target, ...)."""
        if estimate not in ("low", "high"):
            raise ColdscopeError(f"estimate must be low or high, not {estimate!r}")
        seconds = {p.name: float(getattr(p, estimate)) for p in report.parts}
        clash = sorted(set(kwargs) & ({f"{name}_s" for name in PLAN_PARTS}
                                      | ({"startup_saving_s"} if standby else set())))
        if clash:
            raise ColdscopeError(f"{clash[0]} comes from the plan; do not give it too")
        if standby:
            layer = next((m for m in report.mitigations if m.name == "standby_launcher"), None)
            if layer is None:
                raise ColdscopeError("standby=True needs a plan with the standby_launcher layer "
                                     "(coldscope plan --mitigate standby_launcher)")
            kwargs["startup_saving_s"] = max(0.0, float(getattr(layer.removes_s, estimate)))
        return cls(provisioning_s=seconds.get("provisioning", 0.0),
                   image_pull_s=seconds.get("image_pull", 0.0),
                   weight_transfer_s=seconds.get("weight_transfer", 0.0), **kwargs)

    def _warm_floor_rule(self, sla: float) -> tuple[Callable[[float], int], tuple[str, str]]:
        """The floor as a function of the rate, and the reason for a floor of 0 and of 1,
        worded once here so that a tick formats nothing."""
        from coldscope.planning.hint import warm_floor
        cold, warm, keep, scv = self.scale_ahead_s, self.warm_ttft_s, self.keep_alive_s, \
            self.burstiness
        warm_floor(0.0, cold, sla, warm, keep, scv)  # imports the planner's parts now, once
        q = f"p{self.scale_ahead_quantile * 100:g}"
        fits = (f"the cold path ({q} {cold:.1f} s) plus warm TTFT {warm:g} s fits in the "
                f"{sla:g} s SLA: scaling to zero delays no one past it")
        low = (f"at the mean rate of the last {self.rate_window_s:g} s, scaling to zero after "
               f"{keep:g} s idle makes at most 1 % of requests wait a cold path ({q} "
               f"{cold:.1f} s) past the {sla:g} s SLA")
        high = (f"at the mean rate of the last {self.rate_window_s:g} s, scaling to zero after "
                f"{keep:g} s idle would make more than 1 % of requests wait a cold path ({q} "
                f"{cold:.1f} s) past the {sla:g} s SLA: one replica stays warm")

        def floor(rate: float) -> int:
            return warm_floor(rate, cold, sla, warm, keep, scv)

        return floor, (fits if cold + warm <= sla else low, high)

    def tick(self, now: float, *, rate_rps: float | None = None, in_flight: float | None = None,
             queued: float | None = None, service_time_s: float | None = None,
             running: int, starting: int) -> ScaleDecision:
        """One decision at time ``now`` (seconds on a clock that never goes back).

        ``rate_rps``: arrivals per second over the interval just ended; ``in_flight``:
        requests in service now; ``queued``: requests waiting for a replica (0 if not given);
        ``service_time_s``: the time in service, if the caller knows it (else the
        constructor's, else learned). Give ``rate_rps`` or ``in_flight`` (or both, which lets
        the advisor learn the time in service). ``running``/``starting``: replicas serving /
        still cold-starting, reported back in the decision.
        """
        now = float(now)
        if not math.isfinite(now):
            raise ColdscopeError(f"tick time must be a finite number of seconds, not {now!r}")
        last = self.last_time_
        if last is not None and now < last:
            raise ColdscopeError(f"tick time went back: {now:g} s after {last:g} s")
        _count(running, "running")
        _count(starting, "starting")
        if rate_rps is not None:
            _number(rate_rps, "rate_rps", most=MAX_RATE_RPS)
        if in_flight is not None:
            _number(in_flight, "in_flight", most=MAX_REQUESTS)
        if queued is not None:
            _number(queued, "queued", most=MAX_REQUESTS)
        if service_time_s is not None:
            _number(service_time_s, "service_time_s", positive=True, most=86_400.0)
        self.last_time_ = now
        known = service_time_s if service_time_s is not None else self.service_time_s
        if rate_rps is not None:
            rate = float(rate_rps)
            if known is None and in_flight is not None:
                self._learn(now, rate, float(in_flight))
            t_in = known if known is not None else self.learned_service_time_s_
        else:
            if in_flight is None:
                raise ColdscopeError("a tick needs rate_rps or in_flight (requests in service)")
            t_in = known if known is not None else self.learned_service_time_s_
            if t_in is None:
                raise ColdscopeError(
                    "in_flight alone needs the time in service to give a rate: pass "
                    "service_time_s (here or to ScaleAdvisor), or rate_rps with in_flight")
            rate = float(in_flight) / t_in
        mean_rate = self._mean_rate(now, rate)
        forecast = self.forecaster.update(now, rate)
        target = self.target_in_flight
        waiting = 0.0 if queued is None else float(queued)
        per_request = None if t_in is None else t_in / target  # replicas per request/s
        if in_flight is not None:
            need_now = _ceil((float(in_flight) + waiting) / target)
        else:
            need_now = max(0 if per_request is None else _ceil(rate * per_request),
                           _ceil(waiting / target))
        need_ahead = 0 if per_request is None or forecast < self._least_rate \
            else _ceil(forecast * per_request)
        capacity = need_now if need_now >= need_ahead else need_ahead
        if need_now > 0 or rate > 0.0:  # arrivals were in the system, however briefly
            self._last_busy = now
        keep = 1 if now - self._last_busy < self.keep_alive_s else 0
        if self._floor is None:
            floor, reason = 0, self._floor_reasons[0]
        else:
            floor = self._floor(mean_rate)
            reason = self._floor_reasons[floor]
        want = max(capacity, keep, floor)
        held = self._delay(now, want)
        desired = held if held > self.min_replicas else self.min_replicas
        if self.max_replicas is not None and desired > self.max_replicas:
            desired = self.max_replicas
        driver: Driver
        if self.max_replicas is not None and desired < held:
            driver = "max_replicas"
        elif desired > held:
            driver = "min_replicas"
        elif held > want:
            driver = "scale-down delay"
        elif want == 0:
            driver = "idle"
        elif want > capacity and want == floor:
            driver = "warm floor"
        elif want > capacity:
            driver = "keep-alive"
        elif need_ahead > need_now:
            driver = "forecast"
        else:
            driver = "demand now"
        return ScaleDecision(
            time_s=now, desired_replicas=desired, capacity_replicas=capacity,
            now_replicas=need_now, ahead_replicas=need_ahead, driver=driver,
            running=int(running), starting=int(starting), rate_rps=rate, forecast_rps=forecast,
            service_time_s=t_in, scale_ahead_s=self.scale_ahead_s,
            scale_ahead_quantile=self.scale_ahead_quantile, startup_s=self.startup_s,
            cold_path_s=self.cold_path_s, warm_floor=floor, floor_reason=reason,
            source=self.startup.source,
            warnings=self._warnings if t_in is not None or forecast <= 0
            else self._warnings_no_t)

    def _learn(self, now: float, rate: float, in_flight: float) -> None:
        """Little's law over the last ``rate_window_s``: mean in flight / mean rate."""
        pairs = self._pairs
        pairs.append((now, rate, in_flight))
        self._pair_rate += rate
        self._pair_flight += in_flight
        horizon = now - self.rate_window_s
        while pairs[0][0] <= horizon:
            _, r, f = pairs.popleft()
            self._pair_rate -= r
            self._pair_flight -= f
        if not pairs:
            self._pair_rate = self._pair_flight = 0.0  # no drift from the running sums
        elif self._pair_rate > 1e-12 and self._pair_flight > 1e-12:
            self.learned_service_time_s_ = self._pair_flight / self._pair_rate

    def _mean_rate(self, now: float, rate: float) -> float:
        rates = self._rates
        rates.append((now, rate))
        self._rate_sum += rate
        horizon = now - self.rate_window_s
        while rates[0][0] <= horizon:
            self._rate_sum -= rates.popleft()[1]
        if not rates:
            self._rate_sum = 0.0
            return rate
        mean = self._rate_sum / len(rates)
        return mean if mean > 0.0 else 0.0

    def _delay(self, now: float, want: int) -> int:
        """The largest answer of the last ``scale_down_delay_s`` seconds (now included)."""
        if self.scale_down_delay_s <= 0:
            return want
        recent = self._recent
        while recent and recent[-1][1] <= want:
            recent.pop()
        recent.append((now, want))
        horizon = now - self.scale_down_delay_s
        while recent[0][0] <= horizon:
            recent.popleft()
        return recent[0][1]

    def describe(self) -> dict[str, Any]:
        """The fixed facts the advisor plans with (JSON data)."""
        return {"startup": self.startup.describe(), "startup_s": self.startup_s.to_dict(),
                "cold_path_s": self.cold_path_s.to_dict(),
                "cold_path_extra_s": self.cold_path_extra_s,
                "scale_ahead_s": self.scale_ahead_s,
                "scale_ahead_quantile": self.scale_ahead_quantile,
                "target_in_flight": self.target_in_flight}


def _ceil(x: float) -> int:
    """Replicas for ``x`` replicas' worth of load: a hair over a whole number is that number."""
    return math.ceil(x - 1e-9) if x > 1e-9 else 0


def _number(value: object, name: str, *, positive: bool = False,
            most: float | None = None) -> None:
    ok = type(value) is float or type(value) is int or (
        isinstance(value, Real) and not isinstance(value, bool))
    if ok:
        x = float(value)  # type: ignore[arg-type]  # a Real, checked above
        ok = math.isfinite(x) and (x > 0 if positive else x >= 0) and (most is None or x <= most)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        if most is not None:
            bound += f" and <= {most:g}"
        raise ColdscopeError(f"{name} must be a finite number {bound}, not {value!r}")


def _count(value: object, name: str) -> None:
    if type(value) is int and value >= 0:
        return
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ColdscopeError(f"{name} must be a whole number >= 0, not {value!r}")
