"""``SimConfig.score_from_s``: a warm-up replayed but not scored, checked on traces small
enough to work out by hand, and the default (0) unchanged on a real trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from coldscope.planning.traces import Trace, read_trace
from coldscope.sim.core import PolicyContext, TickObservation
from coldscope.sim.simulate import ReplicaSpec, SimConfig, simulate
from coldscope.sim.startup import Fixed

ROOT = Path(__file__).resolve().parents[3]
AZURE_CONV = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"

#: One slot per replica; prefill 1,000 tokens/s and decode 10 tokens/s, so a request's
#: prefill is context / 1000 s and its service prefill + generated / 10 s. 3.60 per GPU-hour:
#: a replica-second costs 0.001.
REPLICA = ReplicaSpec(concurrency=1, prefill_tokens_per_s=1000.0, decode_tokens_per_s=10.0,
                      gpu="H100", gpu_hour_price=3.6, currency="USD")


class Schedule:
    """Wants ``replicas`` from each ``(time, replicas)`` step on; none warm at time 0."""

    def __init__(self, steps: tuple[tuple[float, int], ...], tick_s: float = 1.0) -> None:
        self.steps, self.tick_s = steps, tick_s

    def start(self, context: PolicyContext) -> int:
        return 0

    def desired(self, obs: TickObservation) -> int:
        return max([k for t, k in self.steps if obs.time >= t], default=0)


def hand_trace() -> Trace:
    """Five requests (arrival s, context tokens, generated tokens)."""
    rows = [(0.0, 1000, 10), (5.0, 2000, 0), (20.0, 500, 20), (21.0, 1000, 0), (30.0, 3000, 0)]
    a, c, g = zip(*rows, strict=True)
    return Trace(np.array(a), np.array(c, dtype=np.int32), np.array(g, dtype=np.int32),
                 source="hand")


# Worked by hand, with a 10 s start-up: the first tick (t=1) asks for replica A, ready at 11;
# at t=24 the schedule asks for replica B, ready at 34.
#   r0 arrives 0, starts 11 on A (cold), first token 12, done 13: TTFT 12, wait 11
#   r1 arrives 5, starts 13 (cold: A was not ready at 5), first token 15: TTFT 10, wait 8
#   r2 arrives 20, starts 20, prefill 0.5, done 22.5:                      TTFT 0.5, wait 0
#   r3 arrives 21, starts 22.5, prefill 1, done 23.5:                      TTFT 2.5, wait 1.5
#   r4 arrives 30, A free since 23.5: starts 30, prefill 3, done 33:      TTFT 3, wait 0
# The run ends at 33 (last departure); A is paid from 1, B from 24, both until 33.
STEPS = ((1.0, 1), (24.0, 2))


def run(score_from_s: float, steps: tuple[tuple[float, int], ...] = STEPS, **extra: float):
    config = SimConfig(replica=REPLICA, sla_ttft_s=2.0, score_from_s=score_from_s, **extra)
    return simulate(hand_trace(), config, Fixed(10.0), policy=Schedule(steps))


def test_whole_run_by_hand():
    r = run(0.0)
    assert r.requests == 5
    assert r.ttft_s.max == pytest.approx(12.0)
    assert r.ttft_s.mean == pytest.approx((12 + 10 + 0.5 + 2.5 + 3) / 5)
    assert r.sla_attainment == pytest.approx(1 / 5)  # only r2 (0.5 s) within 2 s
    assert r.cold_start_requests == 2
    assert r.cold_starts == 2
    assert r.replica_seconds == pytest.approx((33 - 1) + (33 - 24))
    assert r.wait_s.max == pytest.approx(11.0)
    assert r.horizon_s == pytest.approx(33.0)


def test_warm_up_is_served_but_not_scored():
    r = run(20.0)
    # Scored: r2, r3, r4 only (TTFT 0.5, 2.5, 3; waits 0, 1.5, 0).
    assert r.requests == 3
    assert r.ttft_s.mean == pytest.approx(2.0)
    assert r.ttft_s.max == pytest.approx(3.0)
    # numpy's linear quantiles of [0.5, 2.5, 3]: p50 the middle, p90 at 1.8, p99 at 1.98.
    assert r.ttft_s.p50 == pytest.approx(2.5)
    assert r.ttft_s.p90 == pytest.approx(2.5 + 0.8 * 0.5)
    assert r.ttft_s.p99 == pytest.approx(2.5 + 0.98 * 0.5)
    assert r.sla_attainment == pytest.approx(1 / 3)
    assert r.cold_start_requests == 0  # r0 and r1 hit the cold start, in the warm-up
    assert r.wait_s.mean == pytest.approx(0.5)
    assert r.wait_s.max == pytest.approx(1.5)
    assert r.wait_s.p_wait == pytest.approx(1 / 3)
    assert r.unserved == 0
    # A paid from 20 (it was up before), B from its start at 24; only B's start counts.
    assert r.replica_seconds == pytest.approx((33 - 20) + (33 - 24))
    assert r.gpu_hours == pytest.approx(22 / 3600)
    assert r.cost == pytest.approx(0.022)
    assert r.cold_starts == 1
    assert r.max_replicas == 2
    assert r.horizon_s == pytest.approx(33.0)  # the run's end, warm-up or not


def test_score_from_at_an_arrival_includes_it():
    # r2 arrives at exactly 20: "at or after" keeps it; just after 20 drops it.
    assert run(20.0).requests == 3
    assert run(20.0 + 1e-9).requests == 2


def test_nothing_scored_after_the_last_arrival():
    r = run(31.0)
    assert r.requests == 0 and r.sla_attainment is None and r.ttft_s.p99 is None
    assert r.cold_starts == 0
    assert r.replica_seconds == pytest.approx(2 * (33 - 31))


def test_unserved_counts_only_scored_requests():
    # No replica ever: every request is unserved; 3 of them arrive from 20 on.
    r = run(20.0, steps=(), drain_limit_s=5.0)
    assert r.requests == 3 and r.unserved == 3
    assert r.sla_attainment == 0.0
    assert r.replica_seconds == 0.0 and r.cold_starts == 0


def test_warm_pool_paid_from_score_from():
    trace = read_trace(AZURE_CONV)
    s0 = 1200.0
    r = simulate(trace, SimConfig(policy="fixed", policy_params={"workers": 40},
                                  score_from_s=s0), Fixed(60.0))
    assert r.requests == int(np.count_nonzero(trace.arrival >= s0))
    assert r.replica_seconds == pytest.approx(40 * (r.horizon_s - s0))
    assert r.warm_at_start == 40 and r.cold_starts == 0


def test_zero_is_the_default_byte_for_byte():
    trace = read_trace(AZURE_CONV)
    base = SimConfig(policy="predictive", policy_params={"sla_ttft_s": 2.0})
    zero = base.model_copy(update={"score_from_s": 0.0})
    a = simulate(trace, base, timeline=True).model_dump_json()
    b = simulate(trace, zero, timeline=True).model_dump_json()
    assert a == b


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_score_from_is_refused(bad):
    with pytest.raises(ValidationError, match="score_from_s"):
        SimConfig(score_from_s=bad)
