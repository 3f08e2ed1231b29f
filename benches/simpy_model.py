"""A SimPy model of the simulator's system, written the usual SimPy way, as a reference.

One process per request, a ``simpy.Store`` of free slots (FIFO getters: the global queue), one
process per replica start and one autoscaler process that asks the same policy object as the
fast engine every tick. Same semantics as ``coldscope.sim.core`` (see its docstring): removed
replicas take no new request and finish their own; starting replicas are cancelled first
(newest first), then ready ones that free up first. Start-up times are drawn from the same
distribution with the same seed, in the same order, so on the same trace both models should
give the same start time for every request. It returns the engine's ``RawRun``.

Used by ``bench_simulate.py`` for the speed ratio and by the unit tests as an independent
implementation of the engine.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from coldscope.sim.core import PolicyContext, RawRun, TickObservation, Workload


def run_simpy(work: Workload, policy, concurrency: int, startup, seed: int,
              drain_limit_s: float = 3600.0) -> RawRun:
    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    slots = simpy.Store(env)
    n = work.arrival.size
    start = np.full(n, np.nan)
    cold = np.zeros(n, dtype=bool)
    rep_start: list[float] = []
    rep_ready: list[float] = []
    rep_removed: list[float] = []
    rep_busy: list[float] = []
    rep_warm: list[bool] = []
    ready: list[int] = []
    starting: list[int] = []
    state = {"in_flight": 0, "arrived": 0, "started": 0}
    tick = policy.tick_s if policy.tick_s else math.inf
    context = PolicyContext(concurrency=concurrency, tick_s=tick, startup=startup)

    def become_ready(r: int, delay: float):
        yield env.timeout(delay)
        if math.isinf(rep_removed[r]):
            for _ in range(concurrency):
                slots.put(r)

    def add(now: float, warm: bool) -> None:
        r = len(rep_start)
        ready_at = now if warm else now + float(startup.sample(rng))
        rep_start.append(now)
        rep_ready.append(ready_at)
        rep_removed.append(math.inf)
        rep_busy.append(0.0)
        rep_warm.append(warm)
        if warm:
            ready.append(r)
            for _ in range(concurrency):
                slots.put(r)
        else:
            starting.append(r)
            env.process(become_ready(r, ready_at - now))

    def remove(now: float, k: int) -> None:
        while k and starting:
            r = max(starting)
            starting.remove(r)
            rep_removed[r] = now
            k -= 1
        if k:
            for r in sorted(ready, key=lambda r: (rep_busy[r], r))[:k]:
                ready.remove(r)
                rep_removed[r] = now
                slots.items[:] = [s for s in slots.items if s != r]

    def request(i: int):
        a = env.now
        while True:
            r = yield slots.get()
            if math.isinf(rep_removed[r]):
                break
        start[i] = env.now
        cold[i] = rep_ready[r] > a
        state["started"] += 1
        state["in_flight"] += 1
        d = env.now + work.service_s[i]
        rep_busy[r] = max(rep_busy[r], d)
        yield env.timeout(work.service_s[i])
        state["in_flight"] -= 1
        if math.isinf(rep_removed[r]):
            slots.put(r)

    def arrivals():
        for i in range(n):
            yield env.timeout(work.arrival[i] - env.now)
            state["arrived"] += 1
            env.process(request(i))

    ticks: dict[str, list] = {k: [] for k in ("t", "ready", "starting", "in_flight", "queued")}
    last = float(work.arrival[-1]) if n else 0.0
    stop_at = last + drain_limit_s
    end = [0.0]

    def autoscaler():
        obs = TickObservation()
        arrived_before = 0
        now = 0.0
        while True:
            now = min(now + tick, stop_at) if math.isfinite(tick) else stop_at
            yield env.timeout(now - env.now)
            for r in [r for r in starting if rep_ready[r] <= now]:
                starting.remove(r)
                ready.append(r)
            j, i = state["arrived"], state["started"]
            obs.time, obs.in_flight, obs.queued = now, state["in_flight"], j - i
            obs.concurrency = obs.in_flight + obs.queued
            obs.arrivals, arrived_before = j - arrived_before, j
            obs.ready, obs.starting = len(ready), len(starting)
            for key, v in zip(ticks, (now, obs.ready, obs.starting, obs.in_flight, obs.queued),
                              strict=True):
                ticks[key].append(v)
            if (i >= n and now >= last) or now >= stop_at:
                end[0] = now
                return
            want = max(0, int(policy.desired(obs)))
            have = obs.ready + obs.starting
            if want > have:
                for _ in range(want - have):
                    add(now, warm=False)
            elif want < have:
                remove(now, have - want)

    for _ in range(int(policy.start(context))):
        add(0.0, warm=True)
    env.process(arrivals())
    done = env.process(autoscaler())
    env.run(until=done)
    return RawRun(
        start=start, cold=cold, replica_start=np.asarray(rep_start),
        replica_ready=np.asarray(rep_ready), replica_removed=np.asarray(rep_removed),
        replica_busy_until=np.asarray(rep_busy), replica_warm=np.asarray(rep_warm, dtype=bool),
        tick_t=np.asarray(ticks["t"]), tick_ready=np.asarray(ticks["ready"]),
        tick_starting=np.asarray(ticks["starting"]),
        tick_in_flight=np.asarray(ticks["in_flight"]), tick_queued=np.asarray(ticks["queued"]),
        end=end[0], unserved=int(n - np.sum(~np.isnan(start))))
