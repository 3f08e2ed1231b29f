"""scale_hint: warm replicas now, worked out by hand from the planner's documented rule."""

from __future__ import annotations

import math

import jsonschema
import pytest
from pydantic import ValidationError

from coldscope.planning import ScaleHint, ScaleHintRequest, scale_hint
from coldscope.planning.economics import ScaleToZero
from coldscope.planning.infra import load_profile
from coldscope.util.errors import ColdscopeError


def _hint(**kw) -> ScaleHint:
    return scale_hint(ScaleHintRequest(**kw))


def test_capacity_is_rate_over_replica_rps():
    h = _hint(rate_rps=9.0, sla_p99_ttft="2s", startup_s={"low": 30, "high": 60},
              replica_rps=2.0)
    assert h.capacity_replicas == math.ceil(9.0 / 2.0) == 5
    assert h.warm_replicas == 5 and h.meets_sla
    jsonschema.validate(h.model_dump(mode="json"), ScaleHint.model_json_schema())


def _delayed_share_by_hand(rate: float, cold_s: float, keep_alive_s: float, scv: float) -> float:
    """The share of requests that meet a cold start after scale-to-zero, written out here from
    the renewal argument: gaps are a balanced-means two-phase hyperexponential with mean 1/rate
    and squared coefficient of variation ``scv`` (p = (1 + sqrt((scv - 1) / (scv + 1))) / 2,
    phase rates 2 p rate and 2 (1 - p) rate); q = P(gap > keep-alive); a cycle holds
    rate D + 1/q requests, 1 + rate D of them delayed: share = (1 + rate D) q / (1 + rate q D)."""
    p = (1 + math.sqrt((scv - 1) / (scv + 1))) / 2
    q = p * math.exp(-2 * p * rate * keep_alive_s) + \
        (1 - p) * math.exp(-2 * (1 - p) * rate * keep_alive_s)
    return (1 + rate * cold_s) * q / (1 + rate * q * cold_s)


def test_floor_follows_the_scale_to_zero_share():
    profile = load_profile()
    # the shipped profile's inputs the rule uses (planning/profiles): 60 s keep-alive, gap SCV
    # 1.2, a warm TTFT of at most 0.5 s
    assert (profile.economics.keep_alive_s, profile.traffic.burstiness,
            profile.warm_ttft_s.high) == (60.0, 1.2, 0.5)
    # 0.05 req/s, 60 s cold path: p = 0.65076, q = 0.65076 e^-3.9045 + 0.34924 e^-2.0955
    # = 0.05607, share = 4 x 0.05607 / (1 + 3 x 0.05607) = 0.1920 (worked by hand)
    share = _delayed_share_by_hand(0.05, 60.0, 60.0, 1.2)
    assert share == pytest.approx(0.1920, abs=5e-4)
    assert ScaleToZero(0.05, 60.0, 60.0, 1.2).delayed_share == pytest.approx(share, rel=1e-12)
    # 60.5 s > the 2 s SLA and 19 % of requests would wait: above the 1 % a P99 allows
    h = _hint(rate_rps=0.05, sla_p99_ttft="2s", startup_s={"low": 60, "high": 60})
    assert (h.warm_floor, h.capacity_replicas, h.warm_replicas) == (1, 1, 1)
    # 0.5 req/s: a gap over a minute is rare (q = 2.8e-10, share 8.6e-9), so even a 60 s cold
    # path needs no floor: only the capacity
    assert _delayed_share_by_hand(0.5, 60.0, 60.0, 1.2) < 1e-8
    h = _hint(rate_rps=0.5, sla_p99_ttft="2s", startup_s={"low": 60, "high": 60},
              replica_rps=2.0)
    assert (h.warm_floor, h.capacity_replicas, h.warm_replicas) == (0, 1, 1)
    # A cold path that fits in the SLA (1.2 + 0.5 s <= 2 s) needs no floor at any rate.
    h = _hint(rate_rps=0.05, sla_p99_ttft="2s", startup_s={"low": 1, "high": 1.2})
    assert (h.warm_floor, h.capacity_replicas, h.warm_replicas) == (0, 1, 1)
    assert h.startup_source == "given startup_s"


def test_idle_endpoint_with_a_slow_cold_start_keeps_one():
    h = _hint(rate_rps=0, sla_p99_ttft="2s", params="70B")
    assert h.capacity_replicas == 0 and h.warm_replicas == 1
    assert (round(h.startup_s.low), round(h.startup_s.high)) == (220, 510)
    assert "planner budget" in h.startup_source


def test_mitigations_shorten_the_cold_path():
    plain = _hint(rate_rps=1, sla_p99_ttft="2s", params="13B")
    fast = _hint(rate_rps=1, sla_p99_ttft="2s", params="13B",
                 mitigate=["preseeded_image", "gpu_snapshot"])
    assert fast.startup_s.high < plain.startup_s.high


@pytest.mark.parametrize("kw, message", [
    ({"rate_rps": 1, "sla_p99_ttft": "2s"}, "give params"),
    ({"rate_rps": 1, "sla_p99_ttft": "soon", "params": "7B"}, "cannot read"),
    ({"rate_rps": 1, "sla_p99_ttft": "0s", "params": "7B"}, "above 0"),
    ({"rate_rps": 1, "sla_p99_ttft": "2s", "params": "70"}, "70B"),
    ({"rate_rps": 1, "sla_p99_ttft": "2s", "startup_s": {"low": 5, "high": 1}}, "low <= high"),
])
def test_bad_requests_are_one_line_errors(kw, message):
    with pytest.raises(ColdscopeError, match=message):
        _hint(**kw)


def test_rates_are_bounded():
    with pytest.raises(ValidationError):
        ScaleHintRequest(rate_rps=-1, sla_p99_ttft="2s", params="7B")
    with pytest.raises(ValidationError):
        ScaleHintRequest(rate_rps=float("inf"), sla_p99_ttft="2s", params="7B")


@pytest.mark.parametrize("rate", [0.001, 0.02, 0.05, 0.5, 5.0])
@pytest.mark.parametrize("cold", [1.0, 30.0, 300.0])
@pytest.mark.parametrize("sla", [2.0, 60.0])
def test_warm_floor_is_the_smallest_pool_the_planner_accepts(rate, cold, sla):
    """warm_floor (what the simulator's policy calls) agrees with sla.evaluate on a flat day."""
    from coldscope.planning import budget as bud
    from coldscope.planning.hint import warm_floor
    from coldscope.planning.infra import Traffic
    from coldscope.planning.mitigations import Stack
    from coldscope.planning.sla import evaluate
    profile = load_profile()
    budget = bud.Budget((bud.Part("startup", cold, cold, "test"),))
    base = bud.baseline_conditions(profile, bud.engine_from_default(profile))
    stack = Stack(budget, budget, (), base, 1.0)
    size = bud.ModelSize(params=0.0, weight_bytes=0.0, dtype="?")
    traffic = Traffic(**{**profile.traffic.model_dump(), "rates_rps": [rate] * 24,
                         "mean_rps": rate})
    floor = warm_floor(rate, cold, sla, profile.warm_ttft_s.high, profile.economics.keep_alive_s,
                       traffic.burstiness)
    assert evaluate(size, profile, stack, floor, sla, traffic).meets
    if floor == 1:
        assert not evaluate(size, profile, stack, 0, sla, traffic).meets
