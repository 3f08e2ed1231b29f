"""The simulator core against closed forms, hand-worked cases and an independent SimPy model."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from coldscope.planning.traces import Trace, read_trace, synthesize
from coldscope.sim.core import Simulator, Workload
from coldscope.sim.policies import FixedPool, Predictive, Reactive, WarmPool
from coldscope.sim.simulate import ReplicaSpec, SimConfig, simulate, workload
from coldscope.sim.startup import Fixed, LogNormal

ROOT = Path(__file__).resolve().parents[3]
AZURE_CONV = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def erlang_c(c: int, lam: float, mu: float) -> tuple[float, float]:
    """M/M/c: probability of waiting and mean wait in queue (closed form)."""
    a = lam / mu
    top = a**c / math.factorial(c) / (1 - a / c)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait, p_wait / (c * mu - lam)


@pytest.mark.parametrize("replicas,slots", [(4, 1), (1, 4), (2, 2)])
def test_fixed_pool_matches_erlang_c(replicas, slots):
    lam, mu, n = 2.4, 1.0, 2_000_000
    rng = np.random.default_rng(7)
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / mu, n)
    raw = Simulator(slots, Fixed(0.0), rng).run(Workload(arrival, service, np.zeros(n)),
                                             FixedPool(replicas))
    wait = raw.start - arrival
    p_wait, mean_wait = erlang_c(replicas * slots, lam, mu)
    assert raw.unserved == 0
    assert abs(wait.mean() / mean_wait - 1) < 0.02
    assert abs(np.mean(wait > 0) / p_wait - 1) < 0.02


def test_enough_warm_workers_means_no_cold_start():
    trace = read_trace(AZURE_CONV)
    profile = ReplicaSpec()
    result = simulate(trace, SimConfig(policy="warm-pool", policy_params={"min_workers": 40},
                                       replica=profile), startup=Fixed(60.0)).model_dump()
    assert result["cold_starts"] == 0 and result["cold_start_requests"] == 0
    # Nobody waits, so every TTFT is exactly the prefill time.
    prefill = trace.context_tokens / profile.prefill_tokens_per_s
    assert result["ttft_s"]["max"] == pytest.approx(prefill.max())
    assert result["ttft_s"]["p50"] == pytest.approx(np.quantile(prefill, 0.5))
    # 40 replicas paid over the whole trace (first arrival to last departure).
    assert result["replica_seconds"] == pytest.approx(40 * result["horizon_s"])


def test_first_request_after_idle_night_waits_for_the_start_up():
    startup = 45.0
    day = synthesize(0.05, 2.0, seed=1)  # 72 minutes of traffic from t=0
    morning = 8 * 3600.0  # one request after a night without traffic
    trace = Trace(np.append(day.arrival, morning), np.append(day.context_tokens, 100),
                  np.append(day.generated_tokens, 10), source="day+morning")
    config = SimConfig(policy="reactive")
    result = simulate(trace, config, startup=Fixed(startup), timeline=True)
    line = result.timeline  # the night must show zero replicas
    night = [r for t, r in zip(line.t, line.replicas, strict=True)
             if day.duration + 600 < t < morning - 600]
    assert night and all(r == 0 for r in night)
    engine_run = Simulator(8, Fixed(startup), np.random.default_rng(0)).run(
        workload(trace, ReplicaSpec()), Reactive())
    wait_last = engine_run.start[-1] - trace.arrival[-1]
    assert wait_last >= startup
    assert engine_run.cold[-1]


def test_hand_worked_scale_from_zero():
    # One slot per replica, target 1. A request at 0.5 s is seen at the 2 s tick: one replica,
    # ready at 12 s after a 10 s start-up, serves it until 15 s. The second request (13 s) is
    # queued; at the 14 s tick the panic window (1, 1, 2 -> 2 replicas = 2 x ready) starts a
    # second replica (ready at 24 s), but the first frees up at 15 s and takes it.
    w = Workload(np.array([0.5, 13.0]), np.array([3.0, 1.0]), np.array([0.2, 0.2]))
    raw = Simulator(1, Fixed(10.0), np.random.default_rng(0)).run(w, Reactive(target=1.0))
    assert raw.start.tolist() == [12.0, 15.0]
    assert raw.cold.tolist() == [True, False]
    assert raw.replica_start.tolist() == [2.0, 14.0]
    assert raw.replica_ready.tolist() == [12.0, 24.0]


def _simpy_reference():
    pytest.importorskip("simpy")
    spec = importlib.util.spec_from_file_location("simpy_model",
                                                  ROOT / "benches" / "simpy_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_simpy


@pytest.mark.parametrize("make_policy", [Reactive, Predictive, lambda: WarmPool(2)],
                         ids=["reactive", "predictive", "warm-pool"])
def test_engine_agrees_with_simpy_model(make_policy):
    run_simpy = _simpy_reference()
    trace = synthesize(0.04, 3.0, diurnal=True, bursts=True, seed=3)
    work = workload(trace, ReplicaSpec())
    startup = LogNormal(40.0, 20.0, 80.0, source="test")  # continuous: no ties
    fast = Simulator(8, startup, np.random.default_rng(1)).run(work, make_policy())
    ref = run_simpy(work, make_policy(), 8, startup, seed=1)
    assert np.array_equal(fast.start, ref.start)
    assert np.array_equal(fast.cold, ref.cold)
    assert np.array_equal(fast.replica_ready, ref.replica_ready)
    assert np.array_equal(fast.replica_removed, ref.replica_removed)
    assert np.array_equal(fast.tick_ready, ref.tick_ready)
    assert np.array_equal(fast.tick_queued, ref.tick_queued)
    assert fast.cold.any() and len(fast.replica_ready) > 1  # the case is not trivial
