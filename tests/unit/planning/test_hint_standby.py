"""The scale hint with a standby launcher's saving: off by default, taken off a given start-up
(low end by the saving's high, high end by its low), or applied as the planner's layer."""

from __future__ import annotations

import pytest

from coldscope.core.interval import Interval
from coldscope.planning.hint import ScaleHintRequest, scale_hint
from coldscope.planning.infra import load_profile
from coldscope.util.errors import ColdscopeError


def test_a_given_startup_loses_the_saving():
    base = dict(rate_rps=0.0, sla_p99_ttft="2s", startup_s=Interval(low=100.0, high=200.0))
    plain = scale_hint(ScaleHintRequest(**base))
    less = scale_hint(ScaleHintRequest(**base, standby_saving_s=Interval(low=10.0, high=30.0)))
    assert (plain.startup_s.low, plain.startup_s.high) == (100.0, 200.0)
    assert (less.startup_s.low, less.startup_s.high) == (70.0, 190.0)
    assert "standby launcher" in less.startup_source


def test_the_saving_can_make_the_cold_path_fit_the_sla():
    # 3 s of start-up, 0.5 s warm TTFT (the profile's high), 3 s SLA: a floor; 1-2 s saved: none
    base = dict(rate_rps=0.0, sla_p99_ttft="3s", startup_s=Interval(low=3.0, high=3.0))
    assert scale_hint(ScaleHintRequest(**base)).warm_floor == 1
    less = scale_hint(ScaleHintRequest(**base, standby_saving_s=Interval(low=1.0, high=2.0)))
    assert (less.startup_s.low, less.startup_s.high) == (1.0, 2.0) and less.warm_floor == 0


def test_never_below_zero_and_bad_savings_refused():
    h = scale_hint(ScaleHintRequest(rate_rps=1.0, sla_p99_ttft="2s",
                                    startup_s=Interval(low=1.0, high=2.0),
                                    standby_saving_s=Interval(low=5.0, high=9.0)))
    assert (h.startup_s.low, h.startup_s.high) == (0.0, 0.0)
    with pytest.raises(ColdscopeError, match="standby_saving_s must satisfy"):
        scale_hint(ScaleHintRequest(rate_rps=1.0, sla_p99_ttft="2s",
                                    startup_s=Interval(low=1.0, high=2.0),
                                    standby_saving_s=Interval(low=5.0, high=1.0)))
    with pytest.raises(ColdscopeError, match="with params, add standby_launcher"):
        scale_hint(ScaleHintRequest(rate_rps=1.0, sla_p99_ttft="2s", params="7B",
                                    standby_saving_s=Interval(low=1.0, high=2.0)))


def test_with_params_the_layer_needs_a_kept_node():
    def hint(layers):
        return scale_hint(ScaleHintRequest(rate_rps=0.0, sla_p99_ttft="2s", params="7B",
                                           mitigate=layers))
    new_node = hint(["standby_launcher"])
    assert new_node.startup_s == hint([]).startup_s
    kept = hint(["tiered_loading"])
    both = hint(["tiered_loading", "standby_launcher"])
    # the default engine has no stages: the profile's bootstrap_s, the low end losing the
    # high share of its low end, the high end the low share of its high end
    m = load_profile().mitigations.standby_launcher
    f, b = m.bootstrap_saved, m.bootstrap_s
    assert both.startup_s.low == pytest.approx(kept.startup_s.low - f.high * b.low)
    assert both.startup_s.high == pytest.approx(kept.startup_s.high - f.low * b.high)
