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


def test_floor_follows_the_scale_to_zero_share():
    profile = load_profile()
    econ, traffic = profile.economics, profile.traffic
    # 0.05 req/s, 60 s cold path: share of requests delayed after scale-to-zero (hand formula).
    share = ScaleToZero(0.05, 60.0, econ.keep_alive_s, traffic.burstiness).delayed_share
    assert share > 0.01
    h = _hint(rate_rps=0.05, sla_p99_ttft="2s", startup_s={"low": 60, "high": 60})
    assert (h.warm_floor, h.warm_replicas) == (1, 1)
    # A cold path that fits in the SLA needs no floor.
    h = _hint(rate_rps=0.05, sla_p99_ttft="2s", startup_s={"low": 1, "high": 1.2})
    assert (h.warm_floor, h.warm_replicas) == (0, 0) or h.capacity_replicas == 1
    assert h.warm_floor == 0 and h.startup_source == "given startup_s"


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
