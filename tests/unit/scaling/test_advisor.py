"""ScaleAdvisor: decisions worked out by hand from its documented method.

Expected values come from outside the code under test: numpy's quantiles, a log-normal's
closed form, textbook Holt written out here, the scale-to-zero renewal formula, hand-worked
tick sequences, and a replay of a real simulation through a bare advisor.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import coldscope
from coldscope.core.interval import Interval
from coldscope.prediction.core import Prediction
from coldscope.scaling import (
    MIN_OBSERVED_RUNS,
    RateForecaster,
    ScaleAdvisor,
    ScaleDecision,
    StartupDistribution,
    choose,
    times_to_ready,
)
from coldscope.sim.core import Simulator, TickObservation, Workload
from coldscope.sim.policies import Predictive
from coldscope.sim.startup import LogNormal
from coldscope.util.errors import ColdscopeError

ROOT = Path(__file__).resolve().parents[3]


def _fixed(seconds: float) -> StartupDistribution:
    return StartupDistribution.given(lambda q: seconds, f"fixed {seconds:g} s")


def _prediction(total: float, low: float, high: float, warnings=()) -> Prediction:
    return Prediction(total_s=total, interval=Interval(low=low, high=high), stages={},
                      warnings=list(warnings), level=0.9)


# -- importing it is light -----------------------------------------------------------------------


def test_importing_the_advisor_loads_nothing_heavy() -> None:
    heavy = ["numba", "numpy", "pydantic", "fastapi", "uvicorn", "torch", "vllm", "ray",
             "pyarrow", "yaml", "coldscope.planning", "coldscope.prediction", "coldscope.sim"]
    code = (
        "import json, sys\n"
        "import coldscope.scaling\n"
        "import coldscope\n"
        "advisor = coldscope.ScaleAdvisor(target_in_flight=4, observed_s=[30, 31, 33, 35, 40])\n"
        "d = advisor.tick(2.0, rate_rps=1.0, in_flight=3, running=1, starting=0)\n"
        f"heavy = {json.dumps(heavy)}\n"
        "print(json.dumps(sorted(m for m in sys.modules if any(\n"
        "    m == h or m.startswith(h + '.') for h in heavy))))\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_front_door_names_it() -> None:
    assert coldscope.ScaleAdvisor is ScaleAdvisor and coldscope.ScaleDecision is ScaleDecision
    assert {"ScaleAdvisor", "ScaleDecision"} <= set(coldscope.__all__)
    from coldscope import api
    assert api.ScaleAdvisor is ScaleAdvisor


# -- the start-up it plans with ------------------------------------------------------------------


def test_observed_percentiles_are_numpys_linear_quantiles() -> None:
    runs = [61.0, 40.0, 45.0, 52.5, 43.0, 47.0, 90.0]
    d = StartupDistribution.observed(runs)
    for q in (0.5, 0.9, 0.99, 0.25):
        assert d.quantile(q) == pytest.approx(float(np.quantile(runs, q)), abs=1e-12)
    assert d.source == "observed" and d.warnings == ()


def test_predicted_is_a_log_normal_through_the_intervals_wider_side() -> None:
    """Median 40 s, 90 % interval 36-50 s: the upper side is wider in log space, so the 95th
    percentile is 50 s and the 5th is 40^2 / 50 = 32 s (symmetric in log space)."""
    d = StartupDistribution.predicted(_prediction(40.0, 36.0, 50.0, ["beyond range"]))
    assert d.quantile(0.5) == pytest.approx(40.0)
    assert d.quantile(0.95) == pytest.approx(50.0)
    assert d.quantile(0.05) == pytest.approx(32.0)
    assert d.source == "predicted" and d.warnings == ("beyond range",)


def test_auto_takes_the_runs_from_five_on_else_the_prediction() -> None:
    p = _prediction(40.0, 36.0, 50.0, ["model is out of the training domain"])
    five = [30.0, 31.0, 32.0, 33.0, 34.0]
    assert MIN_OBSERVED_RUNS == 5
    assert choose(five, p).source == "observed"
    four = choose(five[:4], p)
    assert four.source == "predicted"
    assert four.warnings[0] == "model is out of the training domain"
    assert "4 observed start-ups (fewer than 5)" in four.warnings[1]
    alone = choose(five[:2])
    assert alone.source == "observed" and "only 2 observed start-ups" in alone.warnings[0]
    assert choose(five, p, "predicted").source == "predicted"
    assert choose(five[:1], p, "observed").source == "observed"


@pytest.mark.parametrize("kwargs, message", [
    ({}, "no start-up to plan with"),
    ({"source": "observed", "prediction": _prediction(40, 36, 50)}, "needs observed"),
    ({"source": "predicted", "observed_s": [30.0] * 5}, "needs a prediction"),
    ({"source": "guess", "observed_s": [30.0]}, "auto, observed or predicted"),
    ({"observed_s": [30.0, float("nan")]}, "finite"),
    ({"observed_s": [30.0, -1.0]}, "finite"),
])
def test_a_bad_start_up_is_a_one_line_error(kwargs, message) -> None:
    with pytest.raises(ColdscopeError) as err:
        ScaleAdvisor(target_in_flight=4, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_times_to_ready_keeps_successful_runs() -> None:
    class R:
        def __init__(self, status, t):
            self.status, self.time_to_ready_s = status, t

    assert times_to_ready([R("ok", 40.0), R("failed", 3.0), R("ok", None), R("ok", 41.5)]) \
        == [40.0, 41.5]


# -- the forecast --------------------------------------------------------------------------------


def _textbook_holt(rates, alpha, beta, ahead_steps):
    """Holt on per-step values: level_0 = x_0, trend_0 = 0; forecast = level + h x trend."""
    level, trend, out = rates[0], 0.0, [rates[0]]
    for x in rates[1:]:
        previous = level
        level = alpha * x + (1 - alpha) * (level + trend)
        trend = beta * (level - previous) + (1 - beta) * trend
        out.append(max(0.0, level + ahead_steps * trend))
    return out


def test_holt_at_step_spaced_ticks_is_textbook_holt() -> None:
    rates = [3.0, 5.0, 4.0, 8.0, 13.0, 12.0, 20.0, 15.0, 9.0, 0.0, 0.0, 1.0]
    f = RateForecaster(30.0, alpha=0.3, beta=0.2, step_s=2.0, trend_damping=1.0,
                       season_s=None)
    got = [f.update(2.0 * (k + 1), r) for k, r in enumerate(rates)]
    assert got == pytest.approx(_textbook_holt(rates, 0.3, 0.2, 15))


def test_holt_follows_a_linear_ramp_at_any_tick_spacing() -> None:
    """A ramp is Holt's fixed point: whatever the spacing, the forecast converges to the rate
    at now + H."""
    rng = np.random.default_rng(3)
    f = RateForecaster(60.0, alpha=0.2, beta=0.1, trend_damping=1.0, season_s=None)
    t = 0.0
    for _ in range(3000):
        t += float(rng.uniform(0.3, 6.0))
        forecast = f.update(t, 0.5 + 0.01 * t)
    assert forecast == pytest.approx(0.5 + 0.01 * (t + 60.0), rel=1e-6)


def test_a_damped_trend_adds_the_damped_sum_of_steps() -> None:
    f = RateForecaster(4.0, step_s=2.0, trend_damping=0.5, season_s=None)
    assert f.trend_horizon_s == pytest.approx(2.0 * (0.5 + 0.25))


def test_the_seasonal_term_brings_yesterdays_ramp_one_cold_path_early() -> None:
    """Season 1000 s, window 20 s, H = 50 s, ticks every 2 s. On the first 'day' the rate is
    6/s during [300, 400); on the second it is 0, so Holt forecasts 0 and only the seasonal
    term (the mean over the 20 s window centred on now + H - 1000) can see the ramp: it first
    covers arrivals (the tick at 302 s, counting (300, 302]) at now + 50 - 1000 + 10 > 300,
    i.e. now = 1242 s, where it holds one tick of 6/s in its 20 s: 0.6/s. Fully inside, 6/s."""
    f = RateForecaster(50.0, alpha=0.5, beta=0.05, step_s=2.0, trend_damping=1.0,
                       season_s=1000.0, season_window_s=20.0)
    seasonal = {}
    for k in range(1, 1000):
        t = 2.0 * k
        f.update(t, 6.0 if 300 < t <= 400 else 0.0)
        if t > 1000:
            seasonal[t] = f.seasonal_
    first = min(t for t, s in seasonal.items() if s)
    assert first == 1242.0 and seasonal[first] == pytest.approx(0.6)
    assert seasonal[1300.0] == pytest.approx(6.0)
    assert seasonal[1500.0] == 0.0


# -- decisions -----------------------------------------------------------------------------------


def test_steady_demand_needs_rate_times_service_over_target() -> None:
    """10/s, 40 in service (Little: 4 s each), 5 per replica: 10 x 4 / 5 = 8 replicas now and
    ahead; the time in service is learned."""
    a = ScaleAdvisor(target_in_flight=5, startup=_fixed(30.0))
    for k in range(1, 60):
        d = a.tick(2.0 * k, rate_rps=10.0, in_flight=40, running=8, starting=0)
    assert (d.desired_replicas, d.now_replicas, d.ahead_replicas) == (8, 8, 8)
    assert d.service_time_s == pytest.approx(4.0) and d.forecast_rps == pytest.approx(10.0)
    assert d.scale_ahead_s == 30.0 and d.source == "given" and d.driver == "demand now"


def test_it_scales_ahead_of_a_ramp_by_one_cold_path() -> None:
    """alpha = beta = 1: the level is the rate seen and the trend the last slope, so the
    forecast is rate + H x slope. Rates 1, 2, 3/s at 10 s spacing (slope 0.1/s per s), H =
    50 s: forecast 3 + 5 = 8/s; 2 s in service, 1 per replica: 16 replicas ahead, while the
    demand now (3 in flight + 1 queued) needs 4."""
    a = ScaleAdvisor(target_in_flight=1, startup=_fixed(50.0), alpha=1.0, beta=1.0,
                     step_s=10.0, trend_damping=1.0, service_time_s=2.0)
    for t, r in ((10.0, 1.0), (20.0, 2.0)):
        a.tick(t, rate_rps=r, in_flight=2 * r, running=4, starting=0)
    d = a.tick(30.0, rate_rps=3.0, in_flight=3, queued=1, running=4, starting=0)
    assert d.forecast_rps == pytest.approx(8.0)
    assert (d.now_replicas, d.ahead_replicas, d.desired_replicas) == (4, 16, 16)
    assert d.driver == "forecast"


def test_in_flight_alone_with_a_service_time_gives_the_rate() -> None:
    a = ScaleAdvisor(target_in_flight=2, startup=_fixed(20.0), service_time_s=4.0)
    d = a.tick(1.0, in_flight=12, running=3, starting=1)
    assert d.rate_rps == pytest.approx(3.0) and d.desired_replicas == 6
    assert (d.running, d.starting) == (3, 1)


def test_without_a_service_time_the_demand_now_decides_and_it_says_so() -> None:
    a = ScaleAdvisor(target_in_flight=2, startup=_fixed(20.0))
    d = a.tick(1.0, rate_rps=5.0, queued=3, running=0, starting=0)
    assert d.service_time_s is None and d.ahead_replicas == 0 and d.desired_replicas == 2
    assert any("time in service is not known" in w for w in d.warnings)


def test_scale_down_waits_for_the_delay_and_zero_for_the_keep_alive() -> None:
    """Demand (in flight, 1 per replica; rate 0 so no forecast): 5 at 0 s, 3 at 20 s, 1 at
    40 s, 0 from 50 s. Keep-alive 45 s after the last busy tick (40 s): the step before the
    delay wants 1 until 85 s, then 0. Scale-down delay 30 s: the answer is the largest of
    (now - 30, now]: 5, 5 (5 at 0 s), 3 at 40 s (3 at 20 s), 1 at 50-80 s, still 1 at 90 s
    (the keep-alive's 1 at 80 s), 0 at 110 s."""
    a = ScaleAdvisor(target_in_flight=1, startup=_fixed(20.0), service_time_s=1.0,
                     scale_down_delay_s=30.0, keep_alive_s=45.0)
    demand = {0.0: 5, 20.0: 3, 40.0: 1, 50.0: 0, 70.0: 0, 80.0: 0, 90.0: 0, 110.0: 0}
    got = {t: a.tick(t, rate_rps=0.0, in_flight=n, running=1, starting=0)
           for t, n in demand.items()}
    assert {t: d.desired_replicas for t, d in got.items()} == \
        {0.0: 5, 20.0: 5, 40.0: 3, 50.0: 1, 70.0: 1, 80.0: 1, 90.0: 1, 110.0: 0}
    assert [got[t].driver for t in (20.0, 40.0, 80.0, 90.0, 110.0)] == \
        ["scale-down delay", "scale-down delay", "keep-alive", "scale-down delay", "idle"]


def test_min_and_max_replicas_bound_the_answer() -> None:
    a = ScaleAdvisor(target_in_flight=1, startup=_fixed(20.0), service_time_s=1.0,
                     min_replicas=2, max_replicas=4)
    assert a.tick(0.0, rate_rps=0.0, in_flight=0, running=2, starting=0).desired_replicas == 2
    d = a.tick(2.0, rate_rps=0.0, in_flight=9, running=2, starting=0)
    assert (d.desired_replicas, d.capacity_replicas, d.driver) == (4, 9, "max_replicas")


def _delayed_share(rate: float, cold: float, keep: float) -> float:
    """Scale-to-zero renewal cycle, Poisson gaps: each cycle holds rate x cold + 1/q requests,
    1 + rate x cold of them delayed, q = P(gap > keep-alive) = exp(-rate x keep)."""
    q = math.exp(-rate * keep)
    return (1 + rate * cold) / (rate * cold + 1 / q)


def test_the_warm_floor_keeps_one_replica_when_scaling_to_zero_breaks_the_sla() -> None:
    """One request per 20 s (0.05/s), none in flight at any tick, cold path 30 s, SLA 2 s.
    With no keep-alive or hold, scaling to zero would make every request wait a cold start:
    floor 1. With a 60 s SLA the cold path fits: no floor. With the default hold (two cold
    paths, 60 s) the arrivals themselves keep one replica; scaling to zero after 60 s idle
    would still delay 2.5 / (1.5 + e^3) = 11.6 % of requests (> 1 %), so with the 2 s SLA the
    floor is 1 too."""
    assert _delayed_share(0.05, 30.0, 0.0) > 0.01
    assert _delayed_share(0.05, 30.0, 60.0) == pytest.approx(2.5 / (1.5 + math.exp(3.0)))
    assert _delayed_share(0.05, 30.0, 60.0) > 0.01

    def last(sla: float, **kwargs: float) -> ScaleDecision:
        a = ScaleAdvisor(target_in_flight=5, startup=_fixed(30.0), sla_ttft_s=sla, **kwargs)
        for k in range(600):
            d = a.tick(2.0 * k, rate_rps=0.5 if k % 10 == 0 else 0.0, in_flight=0,
                       running=1, starting=0)
        return d

    no_hold = {"keep_alive_s": 0.0, "scale_down_delay_s": 0.0}
    held = last(2.0, **no_hold)
    assert (held.warm_floor, held.desired_replicas, held.driver) == (1, 1, "warm floor")
    assert "more than 1 %" in held.floor_reason
    free = last(60.0, **no_hold)
    assert (free.warm_floor, free.desired_replicas) == (0, 0)
    assert "fits in the 60 s SLA" in free.floor_reason
    kept = last(60.0)  # the default hold: arrivals every 20 s keep one replica
    assert (kept.warm_floor, kept.desired_replicas) == (0, 1)
    assert kept.driver in ("keep-alive", "scale-down delay")
    both = last(2.0)
    assert (both.warm_floor, both.desired_replicas) == (1, 1)


def test_from_plan_adds_the_plans_seconds_before_the_engine() -> None:
    report = coldscope.plan(coldscope.PlanRequest(params="7B", no_store=True))
    parts = {p.name: p for p in report.parts}
    before = sum(parts[n].high for n in ("provisioning", "image_pull", "weight_transfer"))
    a = ScaleAdvisor.from_plan(report, target_in_flight=4, startup=_fixed(30.0))
    assert a.cold_path_extra_s == pytest.approx(before)
    assert a.scale_ahead_s == pytest.approx(30.0 + before)
    d = a.tick(0.0, rate_rps=1.0, running=0, starting=0)
    assert d.cold_path_s.p90 == pytest.approx(30.0 + before) and d.startup_s.p90 == 30.0
    low = ScaleAdvisor.from_plan(report, estimate="low", target_in_flight=4,
                                 startup=_fixed(30.0))
    assert low.cold_path_extra_s == pytest.approx(
        sum(parts[n].low for n in ("provisioning", "image_pull", "weight_transfer")))


def test_a_decision_is_frozen_json_with_the_prediction_warnings() -> None:
    a = ScaleAdvisor(target_in_flight=4, observed_s=[50.0, 52.0],
                     prediction=_prediction(40.0, 36.0, 50.0, ["vocab beyond range"]))
    d = a.tick(0.0, rate_rps=2.0, in_flight=6, running=1, starting=0)
    data = json.loads(d.to_json())
    assert data["source"] == "predicted" and data["scale_ahead_quantile"] == 0.9
    assert data["startup_s"]["p50"] == pytest.approx(40.0)
    assert data["warnings"][0] == "vocab beyond range"
    assert "2 observed start-ups (fewer than 5)" in data["warnings"][1]
    assert set(data) >= {"desired_replicas", "scale_ahead_s", "forecast_rps", "rate_rps",
                         "warm_floor", "floor_reason", "capacity_replicas", "source"}
    with pytest.raises(AttributeError):
        d.desired_replicas = 3  # type: ignore[misc]


@pytest.mark.parametrize("tick, message", [
    ({"rate_rps": -1.0}, "rate_rps"),
    ({"rate_rps": float("nan")}, "rate_rps"),
    ({"rate_rps": 2e6}, "rate_rps"),
    ({}, "rate_rps or in_flight"),
    ({"in_flight": 3}, "needs the time in service"),
    ({"rate_rps": 1.0, "running": -1}, "running"),
    ({"rate_rps": 1.0, "running": 1.5}, "running"),
])
def test_bad_ticks_are_one_line_errors(tick, message) -> None:
    a = ScaleAdvisor(target_in_flight=4, startup=_fixed(30.0))
    args = {"running": 0, "starting": 0, **tick}
    with pytest.raises(ColdscopeError) as err:
        a.tick(1.0, **args)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_time_never_goes_back_and_bad_parameters_are_refused() -> None:
    a = ScaleAdvisor(target_in_flight=4, startup=_fixed(30.0))
    a.tick(10.0, rate_rps=1.0, running=0, starting=0)
    with pytest.raises(ColdscopeError, match="went back"):
        a.tick(9.0, rate_rps=1.0, running=0, starting=0)
    for kwargs, message in (({"target_in_flight": 0}, "target_in_flight"),
                            ({"min_replicas": 3, "max_replicas": 2}, "below min_replicas"),
                            ({"scale_ahead_quantile": 1.0}, "scale_ahead_quantile"),
                            ({"alpha": 0.0}, "alpha"), ({"sla_ttft_s": -2.0}, "sla_ttft_s"),
                            ({"rate_window_s": 0.0}, "rate_window_s"),
                            ({"observed_s": [30.0] * 5}, "not both")):
        with pytest.raises(ColdscopeError, match=message):
            ScaleAdvisor(**{"target_in_flight": 4, "startup": _fixed(30.0), **kwargs})


# -- the simulator's predictive policy is this advisor -------------------------------------------


class _Recorder:
    """Runs the simulator's Predictive policy and keeps each tick's observation and answer."""

    def __init__(self, policy: Predictive) -> None:
        self.policy, self.tick_s = policy, policy.tick_s
        self.seen: list[tuple[dict, int]] = []

    def start(self, context):
        return self.policy.start(context)

    def desired(self, obs: TickObservation) -> int:
        answer = self.policy.desired(obs)
        self.seen.append(({k: getattr(obs, k) for k in TickObservation.__slots__}, answer))
        return answer


@pytest.mark.parametrize("params", [{}, {"sla_ttft_s": 2.0, "scale_down_delay_s": 30.0}])
def test_the_simulators_predictive_policy_decides_as_a_bare_advisor(params) -> None:
    """A simulated hour of bursty traffic under ``--policy predictive``; the observations it
    saw, fed to a ScaleAdvisor built by hand with the documented mapping (target = 70 % of the
    replica's 8 slots, the run's start-up distribution, rate = arrivals / 2 s tick), give the
    same answer at every tick."""
    rng = np.random.default_rng(11)
    rate = np.repeat(rng.choice([0.0, 0.3, 4.0], 60), 60)  # a new rate each minute, per s
    arrival = np.sort(np.concatenate(
        [k + rng.random(rng.poisson(r)) for k, r in enumerate(rate)]))
    work = Workload(arrival, rng.exponential(3.0, arrival.size))
    startup = LogNormal(40.0, 25.0, 70.0, source="test")
    recorder = _Recorder(Predictive(**params))
    Simulator(8, startup, np.random.default_rng(2)).run(work, recorder)
    assert len(recorder.seen) > 1000
    bare = ScaleAdvisor(target_in_flight=0.7 * 8,
                        startup=StartupDistribution.given(startup.quantile, "test"),
                        step_s=2.0, **params)
    answers = []
    for obs, _ in recorder.seen:
        answers.append(bare.tick(obs["time"], rate_rps=obs["arrivals"] / 2.0,
                                 in_flight=obs["in_flight"], queued=obs["queued"],
                                 running=obs["ready"], starting=obs["starting"])
                       .desired_replicas)
    assert answers == [answer for _, answer in recorder.seen]
    assert max(answers) > 3 and len(set(answers)) > 3  # it scaled up and down


def test_the_predictive_policy_observing_as_ray_does_decides_as_the_adapter_is_fed() -> None:
    """``observe="ray"``: what ``ColdscopePolicy`` sees behind Ray Serve. The same recorded
    observations, turned here into Ray's view by hand (the mean over the last 30 s of ticks of
    the requests in service and of those queued, no rate; with nothing running and requests
    seen, Ray's fast path answers max(1, last target) without asking the policy) and fed to a
    bare ScaleAdvisor given the service time, give the same answer at every tick."""
    rng = np.random.default_rng(5)
    rate = np.repeat(rng.choice([0.0, 0.5, 3.0], 40), 60)
    arrival = np.sort(np.concatenate(
        [k + rng.random(rng.poisson(r)) for k, r in enumerate(rate)]))
    work = Workload(arrival, rng.exponential(3.0, arrival.size))
    startup = LogNormal(40.0, 25.0, 70.0, source="test")
    recorder = _Recorder(Predictive(observe="ray", service_time_s=3.0))
    Simulator(8, startup, np.random.default_rng(3)).run(work, recorder)
    bare = ScaleAdvisor(target_in_flight=0.7 * 8, service_time_s=3.0,
                        startup=StartupDistribution.given(startup.quantile, "test"), step_s=2.0)
    times = np.array([obs["time"] for obs, _ in recorder.seen])
    answers, target, fast_paths = [], 0, 0
    for k, (obs, _) in enumerate(recorder.seen):
        window = [o for o, _ in recorder.seen[: k + 1]][int(np.searchsorted(
            times, obs["time"] - 30.0, side="right")):]
        in_service = sum(o["in_flight"] for o in window) / len(window)
        queued = sum(o["queued"] for o in window) / len(window)
        if obs["ready"] == 0 and in_service + queued > 0:
            target, fast_paths = max(1, target), fast_paths + 1
        else:
            target = bare.tick(obs["time"], in_flight=in_service, queued=queued,
                               running=obs["ready"], starting=obs["starting"]).desired_replicas
        answers.append(target)
    assert answers == [answer for _, answer in recorder.seen]
    assert fast_paths > 0 and max(answers) > 2 and len(set(answers)) > 2


def test_observing_as_ray_needs_the_service_time() -> None:
    from coldscope.sim.policies import make_policy
    policy = make_policy("predictive", {"observe": "ray"})
    startup = LogNormal(40.0, 25.0, 70.0, source="test")
    work = Workload(np.array([1.0]), np.array([1.0]))
    with pytest.raises(ColdscopeError, match="observe=ray needs service_time_s"):
        Simulator(8, startup, np.random.default_rng(0)).run(work, policy)
    with pytest.raises(ColdscopeError, match="observe"):
        make_policy("predictive", {"observe": "arrival"})
