"""The simulator's ``ray-default`` policy against Ray Serve's own code (ray 2.60.0).

The expected decisions come from Ray itself: ``ray.serve.autoscaling_policy``'s default policy
(``replica_queue_length_autoscaling_policy``) wrapped by ``_apply_autoscaling_config`` as
``DeploymentAutoscalingState.register`` wraps every policy, called with an
``AutoscalingContext`` built per tick, its clock (``time.time`` in that module) set to the tick,
then rounded and bounded as ``get_decision_num_replicas``/``apply_bounds`` do. The context's
``total_num_requests`` is the mean of the tick's concurrency samples over the look-back
period, computed here on its own; both sides see the same running replicas.

Ray Serve's package ``__init__`` needs the ``serve`` extra (grpc reflection, ...); when it is
not installed, the two modules read here (pure Python, pydantic) are loaded without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from coldscope.sim.core import PolicyContext, Simulator, TickObservation, Workload
from coldscope.sim.policies import RayServeDefault, make_policy
from coldscope.sim.startup import Fixed
from coldscope.util.errors import ColdscopeError

pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_policy() -> Iterator[types.SimpleNamespace]:
    """Ray's policy module and config classes, with or without Ray Serve's extra installed."""
    added: list[str] = []
    try:
        module = importlib.import_module("ray.serve.autoscaling_policy")
    except ImportError:
        before = set(sys.modules)
        serve_dir = Path(importlib.util.find_spec("ray").origin).parent / "serve"
        sys.modules.pop("ray.serve", None)
        stub = types.ModuleType("ray.serve")
        stub.__path__ = [str(serve_dir)]
        sys.modules["ray.serve"] = stub
        module = importlib.import_module("ray.serve.autoscaling_policy")
        added = sorted(set(sys.modules) - before)
    config = importlib.import_module("ray.serve.config")
    common = importlib.import_module("ray.serve._private.common")
    assert importlib.import_module("ray").__version__ == "2.60.0"
    yield types.SimpleNamespace(module=module, Config=config.AutoscalingConfig,
                                Context=config.AutoscalingContext,
                                DeploymentID=common.DeploymentID)
    for name in added:  # leave no stub behind for other tests
        if name == "ray.serve" or name.startswith("ray.serve."):
            sys.modules.pop(name, None)


class _Clock:
    """Stands in for the ``time`` module inside Ray's policy module."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now


def _ray_decisions(ray: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch,
                   params: dict, ticks: list[tuple[float, int, int]]) -> list[int]:
    """Ray's decision at each (time, concurrency, running replicas) tick."""
    clock = _Clock()
    monkeypatch.setattr(ray.module, "time", clock)
    config = ray.Config(**{k: v for k, v in params.items() if k != "tick_s"})
    wrapped = ray.module._apply_autoscaling_config(ray.module.default_autoscaling_policy)
    lower = config.min_replicas  # get_num_replicas_lower_bound with no target capacity
    target = config.initial_replicas if config.initial_replicas is not None \
        else config.min_replicas
    state: dict = {}
    samples: list[tuple[float, int]] = []
    out = []
    for t, concurrency, running in ticks:
        clock.now = t
        samples.append((t, concurrency))
        window = [c for s, c in samples if s > t - config.look_back_period_s]
        total = sum(window) / len(window)
        ctx = ray.Context(
            deployment_id=ray.DeploymentID(name="model", app_name="app"),
            deployment_name="model", app_name="app", current_num_replicas=running,
            target_num_replicas=target, running_replicas=[], total_num_requests=total,
            total_queued_requests=None, aggregated_metrics=None, raw_metrics=None,
            capacity_adjusted_min_replicas=lower,
            capacity_adjusted_max_replicas=config.max_replicas, policy_state=state,
            last_scale_up_time=None, last_scale_down_time=None, current_time=t,
            config=config)
        decision, state = wrapped(ctx)
        if isinstance(decision, float):
            decision = math.ceil(decision)
        target = max(lower, min(config.max_replicas, decision))
        out.append(target)
    return out


def _run_both(ray, monkeypatch, params: dict, concurrency: list[int], lag: int,
              tick: float) -> tuple[list[int], list[int]]:
    """Feed the sim policy ticks whose running replicas follow its answers ``lag`` ticks late;
    replay the same ticks through Ray's code."""
    policy = RayServeDefault(**params)
    first = policy.start(PolicyContext(concurrency=8, tick_s=tick, startup=Fixed(lag * tick)))
    asked: list[int] = [first] * (lag + 1)  # answers, oldest first; running = answer lag ago
    obs = TickObservation()
    ticks, mine = [], []
    for k, conc in enumerate(concurrency, start=1):
        t = k * tick
        running = min(asked[-1], asked[-1 - lag])  # scale-down at once, scale-up after lag
        obs.time, obs.concurrency, obs.in_flight, obs.queued = t, conc, conc, 0
        obs.ready, obs.starting = running, asked[-1] - running
        answer = policy.desired(obs)
        ticks.append((t, conc, running))
        mine.append(answer)
        asked.append(answer)
    return mine, _ray_decisions(ray, monkeypatch, {**params, "max_replicas":
                                                   params.get("max_replicas") or 10_000}, ticks)


def _pattern(*pieces: tuple[int, int]) -> list[int]:
    return [value for value, n in pieces for _ in range(n)]


@pytest.mark.parametrize("params, concurrency, lag, tick", [
    # Ray's defaults: min 1, target 2, up after 30 s, down after 600 s
    ({}, _pattern((0, 20), (9, 120), (30, 60), (3, 400), (0, 900)), 20, 1.0),
    # scale to zero and back through the 0-replica fast path; scaling factors; a stalled
    # scale-down decremented; the 1 -> 0 delay; a cap
    ({"min_replicas": 0, "max_replicas": 6, "upscaling_factor": 0.5,
      "downscaling_factor": 0.3, "downscale_to_zero_delay_s": 120.0,
      "downscale_delay_s": 60.0, "upscale_delay_s": 10.0},
     _pattern((0, 10), (1, 5), (0, 300), (25, 80), (7, 100), (2, 100), (0, 400), (4, 50)),
     7, 2.0),
    # initial replicas above min
    ({"min_replicas": 1, "initial_replicas": 3, "downscale_delay_s": 50.0},
     _pattern((0, 100), (5, 30), (0, 100)), 5, 1.0),
])
def test_decisions_equal_rays_own_policy_tick_by_tick(ray_policy, monkeypatch, params,
                                                      concurrency, lag, tick) -> None:
    mine, ray = _run_both(ray_policy, monkeypatch, params, concurrency, lag, tick)
    assert mine == ray
    assert len(set(mine)) > 2  # the sequence scales up and down


def test_decisions_equal_rays_on_noisy_load_with_short_delays(ray_policy, monkeypatch) -> None:
    """Many changes of direction: the delay clock restarts as Ray's does."""
    rng = np.random.default_rng(7)
    levels = rng.choice([0.0, 3.0, 12.0], 200).repeat(10)  # a new level every 10 ticks
    concurrency = [int(c) for c in rng.poisson(levels)]
    params = {"min_replicas": 0, "upscale_delay_s": 3.0, "downscale_delay_s": 7.0,
              "look_back_period_s": 5.0, "upscaling_factor": 1.5,
              "downscaling_factor": 0.5}
    mine, ray = _run_both(ray_policy, monkeypatch, params, concurrency, 3, 1.0)
    assert mine == ray
    assert sum(a != b for a, b in zip(mine, mine[1:], strict=False)) > 50


def test_a_simulation_scales_from_zero_at_once_and_up_after_the_delay() -> None:
    """Four long requests at 0.5 s, start-ups of 10 s, target 2 per replica, 1 s ticks.
    t = 1: nothing runs and requests wait: one replica at once (the fast path), ready at 11 s.
    From t = 11 one replica runs with 4 in flight: 2 wanted, which must last 30 s: the second
    replica is asked at 41 s (ready at 51 s). (A fifth request at 60 s keeps the run going: it
    ends once every request has started.)"""
    work = Workload(np.array([0.5] * 4 + [60.0]), np.full(5, 1000.0))
    raw = Simulator(8, Fixed(10.0), np.random.default_rng(0)).run(
        work, RayServeDefault(min_replicas=0))
    assert raw.replica_start[:2].tolist() == [1.0, 41.0]
    assert raw.replica_ready[:2].tolist() == [11.0, 51.0]
    assert raw.start.tolist() == [11.0] * 4 + [60.0]


def test_the_cli_name_and_bad_parameters() -> None:
    policy = make_policy("ray-default", {"min_replicas": 0, "upscale_delay_s": 5})
    assert isinstance(policy, RayServeDefault) and policy.upscale_delay_s == 5
    with pytest.raises(ColdscopeError, match="min_workers"):
        make_policy("ray-default", {"min_workers": 1})
    with pytest.raises(ColdscopeError, match="target_ongoing_requests"):
        make_policy("ray-default", {"target_ongoing_requests": 0})
    context = PolicyContext(concurrency=8, tick_s=1.0, startup=Fixed(10.0))
    with pytest.raises(ColdscopeError, match="max_replicas"):
        RayServeDefault(min_replicas=3, max_replicas=2).start(context)
    with pytest.raises(ColdscopeError, match="initial_replicas"):
        RayServeDefault(min_replicas=2, initial_replicas=1).start(context)
