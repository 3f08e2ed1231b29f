"""Policies fed hand-made observations; answers worked out from their documented rules."""

from __future__ import annotations

import pytest

from coldscope.sim.core import PolicyContext, TickObservation
from coldscope.sim.policies import FixedPool, Predictive, Reactive, WarmPool
from coldscope.sim.startup import Fixed


def _ctx(startup: float = 30.0, concurrency: int = 8) -> PolicyContext:
    return PolicyContext(concurrency=concurrency, tick_s=2.0, startup=Fixed(startup))


def _feed(policy, ticks, *, ready=None, arrivals=0):
    """Feed (time, concurrency) pairs; ready replicas follow the answers unless given."""
    obs = TickObservation()
    answers = []
    current = 0
    for t, conc in ticks:
        obs.time, obs.concurrency, obs.in_flight, obs.queued = t, conc, conc, 0
        obs.arrivals = arrivals
        obs.ready = current if ready is None else ready
        obs.starting = 0
        current = policy.desired(obs)
        answers.append(current)
    return answers


def test_reactive_steady_state_is_concurrency_over_target():
    p = Reactive()
    assert p.start(_ctx()) == 0
    # target = 0.7 x 8 = 5.6; a steady 56 in the system wants ceil(56 / 5.6) = 10.
    answers = _feed(p, [(2.0 * k, 56) for k in range(1, 60)], ready=10)
    assert answers[-1] == 10


def test_reactive_scale_down_is_rate_limited_and_to_zero_waits_for_grace():
    p = Reactive()
    p.start(_ctx())
    busy = [(2.0 * k, 56) for k in range(1, 40)]  # last request seen at t = 78
    _feed(p, busy, ready=10)
    idle = [(78 + 2.0 * k, 0) for k in range(1, 60)]
    answers = _feed(p, idle, ready=None)
    # max scale-down rate 2: from 10 ready at most to floor(10 / 2) = 5 in one tick.
    assert answers[0] >= 5
    times = [t for t, _ in idle]
    # Zero only once 60 s stable window + 30 s grace have passed since t = 78 (t >= 168).
    zero = [t for t, a in zip(times, answers, strict=True) if a == 0]
    assert zero and zero[0] == 168.0
    assert all(a >= 1 for t, a in zip(times, answers, strict=True) if t < 168)


def test_reactive_panics_on_a_surge_and_does_not_scale_down_in_panic():
    p = Reactive()
    p.start(_ctx())
    _feed(p, [(2.0 * k, 5) for k in range(1, 40)], ready=1)
    # Surge to 50: panic window (3 ticks) -> ceil(50 / 5.6) = 9 >= 2 x 1 ready: panic.
    answers = _feed(p, [(78 + 2.0 * k, 50) for k in range(1, 4)], ready=1)
    assert answers[-1] == 9
    # Back to 5 right away: in panic for 60 s after the last over-threshold tick, no scale-down.
    calm = _feed(p, [(84 + 2.0 * k, 5) for k in range(1, 10)], ready=9)
    assert min(calm) == 9


def test_warm_pool_never_goes_below_its_floor_and_starts_warm():
    p = WarmPool(3)
    assert p.start(_ctx()) == 3
    assert _feed(p, [(2.0 * k, 0) for k in range(1, 200)])[-1] == 3


def test_fixed_pool():
    p = FixedPool(4)
    assert p.tick_s is None and p.start(_ctx()) == 4


def test_predictive_scales_ahead_of_yesterdays_ramp():
    # A day ago the rate jumped from 0 to 10/s at t = 1000 s; with a 100 s start-up it should
    # ask for replicas ~100 s (the start-up) before 1000 s on the next day, with no traffic yet.
    tick, day = 2.0, 2000.0
    p = Predictive(season_s=day, season_window_s=20.0)
    p.start(_ctx(startup=100.0))
    obs = TickObservation()
    first = None
    before: list[int] = []
    for k in range(1, int(2 * day / tick)):
        t = k * tick
        rate = 10.0 if 1000 <= t % day < 1500 and t < day else 0.0
        obs.time, obs.arrivals = t, int(rate * tick)
        obs.in_flight = obs.concurrency = int(rate * 4.0)  # 4 s in service (Little)
        obs.queued, obs.ready, obs.starting = 0, 0, 0
        want = p.desired(obs)
        if t > day and want > 0 and first is None:
            first = t
        if day < t < 3000:
            before.append(want)
    assert first is not None
    # Ask ~start-up ahead of the ramp at 3000 s, minus half the seasonal window.
    assert 3000 - 100 - 10 - tick <= first <= 3000 - 100 + tick
    # Little's law: 10/s x 4 s = 40 in service -> ceil(40 / 5.6) = 8 replicas, before 3000 s.
    assert max(before) == 8


def test_reactive_refuses_a_bad_target():
    with pytest.raises(ValueError):
        Reactive(target=-1).start(_ctx())


def test_predictive_with_an_sla_keeps_the_planners_warm_floor():
    """Quiet traffic, 30 s start-ups, 2 s SLA, no keep-alive or hold: scaling to zero would
    delay every request, so with sla_ttft_s the policy holds one replica
    (plan.hint.warm_floor); without, it drops to 0. With a start-up that fits in the SLA, no
    floor. With the default hold the arrivals keep one replica."""
    def last_answer(policy, startup):
        policy.start(_ctx(startup=startup))
        obs = TickObservation()
        answer = None
        for k in range(600):  # 20 min of ticks, one request every 20 s, never in flight at a tick
            obs.time, obs.concurrency, obs.in_flight, obs.queued = 2.0 * k, 0, 0, 0
            obs.arrivals = 1 if k % 10 == 0 else 0
            obs.ready, obs.starting = 1, 0
            answer = policy.desired(obs)
        return answer

    from coldscope.planning.hint import warm_floor
    assert warm_floor(0.05, 30.0, 2.0, 0.5, 0.0) == 1
    no_hold = {"keep_alive_s": 0.0, "scale_down_delay_s": 0.0}
    assert last_answer(Predictive(**no_hold), 30.0) == 0
    assert last_answer(Predictive(sla_ttft_s=2.0, **no_hold), 30.0) == 1
    assert last_answer(Predictive(sla_ttft_s=2.0, **no_hold), 1.0) == 0
    # the default hold (two cold paths): a request every 20 s keeps one replica by itself
    assert last_answer(Predictive(), 30.0) == 1
