"""ScaleAdvisor with a standby launcher's saving: off by default, every engine start-up that
many seconds shorter (never below 0), refused on a new node, or taken from a plan's layer."""

from __future__ import annotations

import numpy as np
import pytest

import coldscope
from coldscope.scaling import ScaleAdvisor, StartupDistribution
from coldscope.util.errors import ColdscopeError

RUNS = [10.0, 20.0, 30.0, 40.0, 50.0]


def test_the_saving_comes_off_every_quantile():
    plain = ScaleAdvisor(target_in_flight=4, observed_s=RUNS)
    less = ScaleAdvisor(target_in_flight=4, observed_s=RUNS, startup_saving_s=12.0)
    for q in (0.5, 0.9, 0.99):
        assert less.startup.quantile(q) == pytest.approx(float(np.quantile(RUNS, q)) - 12.0)
    assert less.scale_ahead_s == pytest.approx(float(np.quantile(RUNS, 0.9)) - 12.0)
    assert plain.scale_ahead_s == pytest.approx(float(np.quantile(RUNS, 0.9)))
    assert less.startup.source == "observed" and "standby launcher" in less.startup.detail
    floor = ScaleAdvisor(target_in_flight=4, observed_s=RUNS, startup_saving_s=25.0)
    assert floor.startup.quantile(0.01) == 0.0  # 10.4 s - 25 s: never below 0


def test_a_new_node_pays_the_imports():
    with pytest.raises(ColdscopeError, match="needs provisioning_s 0"):
        ScaleAdvisor(target_in_flight=4, observed_s=RUNS, startup_saving_s=5.0,
                     provisioning_s=45.0)
    with pytest.raises(ColdscopeError, match="startup_saving_s must be"):
        ScaleAdvisor(target_in_flight=4, observed_s=RUNS, startup_saving_s=-1.0)


def test_from_plan_takes_the_plans_launcher_saving():
    given = StartupDistribution.given(lambda q: 30.0, "30 s")
    kept = coldscope.plan(coldscope.PlanRequest(
        params="7B", no_store=True, mitigate=["tiered_loading", "standby_launcher"]))
    layer = next(m for m in kept.mitigations if m.name == "standby_launcher")
    a = ScaleAdvisor.from_plan(kept, target_in_flight=4, startup=given, standby=True)
    assert a.startup_s.p90 == pytest.approx(30.0 - layer.removes_s.high)
    low = ScaleAdvisor.from_plan(kept, estimate="low", target_in_flight=4, startup=given,
                                 standby=True)
    assert low.startup_s.p90 == pytest.approx(30.0 - layer.removes_s.low)
    off = ScaleAdvisor.from_plan(kept, target_in_flight=4, startup=given)
    assert off.startup_s.p90 == 30.0  # off by default
    # a plan that provisions a new node: the layer removes 0 and the advisor takes 0
    new = coldscope.plan(coldscope.PlanRequest(params="7B", no_store=True,
                                               mitigate=["standby_launcher"]))
    n = ScaleAdvisor.from_plan(new, target_in_flight=4, startup=given, standby=True)
    assert n.startup_s.p90 == 30.0 and n.cold_path_extra_s > 0
    none = coldscope.plan(coldscope.PlanRequest(params="7B", no_store=True))
    with pytest.raises(ColdscopeError, match="standby_launcher layer"):
        ScaleAdvisor.from_plan(none, target_in_flight=4, startup=given, standby=True)
    with pytest.raises(ColdscopeError, match="comes from the plan"):
        ScaleAdvisor.from_plan(kept, target_in_flight=4, startup=given, standby=True,
                               startup_saving_s=3.0)
