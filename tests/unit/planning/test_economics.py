"""Warm-pool arithmetic, the gap model, and the break-even rate against independent answers."""

from __future__ import annotations

import math
import random

import pytest

from coldscope.planning.economics import (
    ScaleToZero,
    WarmPoolCost,
    _phases,
    break_even_rate,
    gap_exceeds,
    gpu_hours_per_month,
    idle_fraction,
)


def test_five_products_one_warm_replica_is_3600_gpu_hours():
    # lesson: 5 x 24 x 30 = 3,600 GPU-hours a month
    assert gpu_hours_per_month(5, 1, 720) == 3600
    pool = WarmPoolCost(products=5, min_workers=1, gpus_per_replica=1, month_hours=720,
                    price_per_gpu_hour=4.0)
    assert pool.gpu_hours == 3600 and pool.monthly_cost == 14400
    assert "= 3,600 GPU-h x 4.00 USD/h = 14,400 USD/month" in pool.arithmetic()


@pytest.mark.parametrize("scv", [1.0, 1.2, 4.0, 173.0])
def test_gap_phases_have_the_asked_mean_and_burstiness(scv):
    rate = 0.3
    ph = _phases(rate, scv)
    m1 = sum(p / r for p, r in ph)
    m2 = sum(2 * p / r**2 for p, r in ph)
    assert m1 == pytest.approx(1 / rate)
    assert m2 / m1**2 - 1 == pytest.approx(scv)


def test_poisson_gaps_and_idle_time():
    assert gap_exceeds(0.1, 1.0, 30) == pytest.approx(math.exp(-3))
    # rate x E[(X - T)+] = e^{-rate T} for exponential gaps
    assert idle_fraction(0.1, 1.0, 30) == pytest.approx(math.exp(-3))


def test_scale_to_zero_matches_an_event_by_event_replay():
    rate, keep, cold, n = 0.02, 60.0, 100.0, 200_000
    rng = random.Random(7)
    t, ready, down_at, up_since, up, delayed = 0.0, 0.0, 0.0, 0.0, 0.0, 0
    for i in range(n):
        t += rng.expovariate(rate)
        if i == 0 or t > down_at:  # no replica: this request triggers a cold start
            if i:
                up += down_at - up_since
            up_since, ready = t, t + cold
            delayed += 1
        elif t < ready:  # arrived while the replica was still starting
            delayed += 1
        down_at = max(t, ready) + keep
    up += down_at - up_since
    stz = ScaleToZero(rate, cold, keep, 1.0)
    assert delayed / n == pytest.approx(stz.delayed_share, rel=0.03)
    assert up / down_at == pytest.approx(stz.up_share, rel=0.03)


def test_break_even_matches_the_poisson_closed_form():
    price_h, cold, miss, keep = 8.0, 510.0, 0.10, 60.0
    p = price_h / 3600
    expected = (-miss + math.sqrt(miss**2 + 4 * miss * cold * p)) / (2 * miss * cold)
    be = break_even_rate(price_h, cold, miss, keep, 1.0)
    assert be.rate_rps == pytest.approx(expected, rel=1e-6)
    # with no cold-start duration the rate is the price per second over the cost of a miss
    assert break_even_rate(3.6, 0.0, 0.01, keep).rate_rps == pytest.approx(0.001 / 0.01)
    assert break_even_rate(3.6, 30.0, 0.0, keep).rate_rps is None
