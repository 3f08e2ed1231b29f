"""The hour-by-hour SLA model, the cheapest-stack search and tiered warm pools."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coldscope.planning import budget as bud
from coldscope.planning.economics import ScaleToZero
from coldscope.planning.infra import Traffic, load_profile
from coldscope.planning.mitigations import apply_layers
from coldscope.planning.sla import evaluate as judge
from coldscope.planning.sla import load_tiers, plan_tiers, search, simulate_day
from coldscope.planning.traces import read_trace
from coldscope.planning.traces import shape as trace_shape

SHARED = Path(__file__).resolve().parents[3].parent / "shared"


def _traffic(rates, replica_rps=2.0, scv=1.0):
    return Traffic(rates_rps=rates, mean_rps=0, diurnal_amplitude=0, burstiness=scv,
                   replica_rps=replica_rps)


def test_a_warm_replica_that_covers_the_load_delays_nobody():
    day = simulate_day(_traffic([0.5] * 24), min_workers=1, cold_s=300, keep_alive_s=60)
    assert day.delayed_share == 0.0
    assert day.replica_hours == 24.0
    assert day.requests == pytest.approx(0.5 * 3600 * 24)


def test_scale_to_zero_share_is_the_renewal_formula():
    r, d, t = 0.01, 200.0, 60.0
    day = simulate_day(_traffic([r] * 24), min_workers=0, cold_s=d, keep_alive_s=t)
    q = math.exp(-r * t)
    assert day.delayed_share == pytest.approx((1 + r * d) * q / (1 + r * q * d))
    assert day.replica_hours == pytest.approx(24 * ScaleToZero(r, d, t).up_share)


def test_scale_out_waits_for_the_cold_path():
    # 12 h at 1 req/s then 12 h at 3 req/s, one replica serves 1 req/s, one warm replica:
    # at the step, 2 req/s wait for the cold path D.
    d = 100.0
    day = simulate_day(_traffic([1.0] * 12 + [3.0] * 12, replica_rps=1.0), 1, d, 60)
    assert day.delayed_scale_out == pytest.approx(2 * d)
    assert day.delayed_share == pytest.approx(2 * d / (12 * 3600 * 4))
    assert day.peak_replicas == 3


@pytest.fixture(scope="module")
def profile():
    return load_profile()


def _base(profile):
    return bud.baseline_conditions(profile, bud.engine_from_default(profile))


def test_verdicts(profile):
    size = bud.size_from_params(70e9, "bf16")
    stack = apply_layers(size, profile, _base(profile), ())
    slow_ok = judge(size, profile, stack, 0, 600.0)
    assert slow_ok.meets and "even a cold request" in slow_ok.reason
    assert judge(size, profile, stack, 0, 0.3).meets is False  # warm TTFT is up to 0.5 s
    assert judge(size, profile, stack, 0, None).meets is None
    fails = judge(size, profile, stack, 0, 2.0)
    assert fails.meets is False and "P99 allows 1 %" in fails.reason
    warm = judge(size, profile, stack, 1, 2.0)
    assert warm.meets and warm.p99_ttft_s == 0.5
    # one warm replica of 2 H100s: 2 x 720 h x 4 USD
    assert warm.warm_pool.monthly_cost == 5760.0


def test_13b_under_3s_needs_a_warm_pool_and_cheaper_stacks_say_why(profile):
    size = bud.size_from_params(13e9, "bf16")
    found = search(size, profile, _base(profile), 3.0)
    assert found.chosen is not None
    assert (found.chosen.layers, found.chosen.min_workers) == ((), 1)
    assert found.chosen.total_cost == pytest.approx(1 * 720 * 4.0)
    assert found.cheaper_failures
    for f in found.cheaper_failures:
        assert f.meets is False and f.total_cost < found.chosen.total_cost
        assert f.min_workers == 0 and "after scale-to-zero" in f.reason


def test_a_loose_sla_is_met_without_a_warm_pool(profile):
    size = bud.size_from_params(70e9, "bf16")
    found = search(size, profile, _base(profile), 120.0)
    assert found.chosen.min_workers == 0
    assert found.chosen.cold_high + 0.5 <= 120.0
    assert "preseeded_image" in found.chosen.layers


def test_tiers_cost_each_policy_with_its_arithmetic(profile):
    tiers = load_tiers({"tiers": [
        {"name": "paid", "sla_p99_ttft": "2s", "products": 3},
        {"name": "trial", "sla_p99_ttft": "120s", "products": 2},
        {"name": "batch", "products": 4},
    ]}, "test")
    size = bud.size_from_params(70e9, "bf16")
    plans = {p.tier.name: p for p in plan_tiers(size, profile, _base(profile), tiers)}
    paid = plans["paid"]
    assert paid.evaluation.min_workers == 1
    assert paid.warm_pool.gpu_hours == 3 * 1 * 2 * 720
    assert "3 product(s) x 1 warm replica(s) x 2 GPU(s) x 720 h = 4,320 GPU-h" in (
        paid.as_dict()["warm_pool_arithmetic"])
    assert plans["trial"].evaluation.min_workers == 0
    assert plans["batch"].evaluation.meets is None and plans["batch"].evaluation.layers == ()
    assert plans["batch"].monthly_cost == pytest.approx(4 * plans["batch"].evaluation.total_cost)


def test_trace_shape_by_hand():
    shape = trace_shape([0.0, 1.0, 3.0])  # gaps 1 and 2: mean 1.5, variance 0.25
    assert shape["mean_rps"] == pytest.approx(1 / 1.5)
    assert shape["scv_measured"] == pytest.approx(0.25 / 2.25)
    assert shape["burstiness"] == 1.0


def test_azure_conv_trace_is_near_poisson():
    path = SHARED / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
    if not path.exists():
        pytest.skip("shared traces not present")
    shape = trace_shape(read_trace(path).arrival)
    assert shape["requests"] == 19366  # the trace's README
    assert shape["scv_measured"] == pytest.approx(1.197, abs=0.01)
