"""Sweeps: grid expansion, and every executor giving what one simulation at a time gives."""

from __future__ import annotations

import pytest

from coldscope.planning.traces import synthesize
from coldscope.sim.simulate import SimConfig, simulate
from coldscope.sim.startup import Fixed
from coldscope.sim.sweep import apply, load_sweep, run_sweep, sweep_cases
from coldscope.util.errors import ColdscopeError

SPEC = {"policy": "warm-pool", "grid": {"policy.min_workers": [0, 2], "startup_scale": [1, 0.5],
                                        "replica.concurrency": 4},
        "cases": [{"policy": "fixed", "policy.workers": 3}]}


def test_expand_is_the_grid_product_plus_cases():
    cases = sweep_cases(SimConfig(), SPEC)
    assert len(cases) == 2 * 2 + 1
    params, config = cases[1]
    assert params == {"policy.min_workers": 0, "startup_scale": 0.5, "replica.concurrency": 4}
    assert config.policy == "warm-pool" and config.policy_params == {"min_workers": 0}
    assert config.startup_scale == 0.5 and config.replica.concurrency == 4
    assert cases[-1][1].policy == "fixed" and cases[-1][1].policy_params == {"workers": 3}


def test_bad_sweeps_are_errors(tmp_path):
    with pytest.raises(ColdscopeError, match="unknown sweep parameter"):
        apply(SimConfig(), {"nope.x": 1})
    with pytest.raises(ColdscopeError, match="sweep: replica.concurrency"):
        apply(SimConfig(), {"replica.concurrency": 0})
    with pytest.raises(ColdscopeError, match="no cases"):
        sweep_cases(SimConfig(), {"policy": "reactive"})
    p = tmp_path / "s.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(ColdscopeError, match="mapping"):
        load_sweep(p)


def _direct(trace, cases, startup):
    return [simulate(trace, c, startup).model_dump(mode="json") for _, c in cases]


def test_local_parallel_sweep_equals_one_by_one():
    trace = synthesize(0.02, 2.0, bursts=True, seed=4)
    cases = sweep_cases(SimConfig(), SPEC)
    rows = run_sweep(trace, cases, Fixed(30.0), executor="local", jobs=2)
    assert [r.result.model_dump(mode="json") for r in rows] == _direct(trace, cases, Fixed(30.0))
    assert [r.params for r in rows] == [p for p, _ in cases]


def test_ray_sweep_equals_one_by_one():
    ray = pytest.importorskip("ray")
    trace = synthesize(0.01, 2.0, seed=4)
    cases = sweep_cases(SimConfig(), {"grid": {"policy.min_workers": [0, 1]}})
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        rows = run_sweep(trace, cases, Fixed(30.0), executor="ray")
    finally:
        ray.shutdown()
    assert [r.result.model_dump(mode="json") for r in rows] == _direct(trace, cases, Fixed(30.0))


def test_unknown_executor():
    with pytest.raises(ColdscopeError, match="unknown executor"):
        run_sweep(synthesize(0.001, 1.0), sweep_cases(SimConfig(), SPEC)[:1], executor="dask")
