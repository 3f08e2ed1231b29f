"""The standby launcher layer: a share of the engine's bootstrap stage, only on a node that is
up, priced as host memory; its share read from a measured ``coldscope compare --json``.

Expected values are worked out here from the profile's own numbers (the closed forms in the
layer's documentation) and, for the compare, from a Welch interval computed with scipy's t
quantile, not with the comparison's code.
"""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from coldscope.analysis.comparison import compare
from coldscope.core.stages import BOOTSTRAP
from coldscope.planning import budget as bud
from coldscope.planning.infra import load_profile
from coldscope.planning.mitigations import (
    LAYER_NAMES,
    apply_layers,
    standby_seconds_from_compare,
    standby_share_from_compare,
)
from coldscope.planning.planner import PlanRequest, plan
from coldscope.planning.sla import SEARCHED_LAYERS
from coldscope.util.errors import ColdscopeError

KEPT = "tiered_loading"  # the layer that keeps the node up (keeps_node: true by default)


def _profile(share=None, **launcher):
    over = dict(launcher)
    if share is not None:
        over["bootstrap_saved"] = {"low": share[0], "high": share[1]}
    return load_profile(None, {"mitigations": {"standby_launcher": over}} if over else None)


def _stack(profile, layers, engine=None, params=7e9):
    size = bud.size_from_params(params, "bf16")
    base = bud.baseline_conditions(profile, engine or bud.engine_from_default(profile))
    return apply_layers(size, profile, base, layers)


def _removes(stack, name):
    a = next(x for x in stack.applied if x.name == name)
    return a.removes_low, a.removes_high


def test_it_sits_before_the_gpu_snapshot_and_out_of_the_default_search():
    assert LAYER_NAMES.index("standby_launcher") == LAYER_NAMES.index("gpu_snapshot") - 1
    assert "standby_launcher" not in SEARCHED_LAYERS


def test_on_a_new_node_it_removes_nothing_and_says_why():
    p = _profile()
    s = _stack(p, ["standby_launcher"])
    assert _removes(s, "standby_launcher") == (0.0, 0.0)
    assert [(x.low, x.high) for x in s.budget.parts] == \
        [(x.low, x.high) for x in s.baseline.parts]
    first = s.applied[0].assumptions[0]
    assert first.startswith("not applied here") and "new node" in first
    assert "standby_launcher: not applied" in s.budget.part("engine_startup").source


def test_a_measured_bootstrap_stage_loses_the_share():
    # engine 40 s of which bootstrap 20 s, half of it saved: 10 s off both ends
    p = _profile(share=(0.5, 0.5))
    eng = bud.EngineEstimate(40.0, 40.0, "test", stages={BOOTSTRAP: (20.0, 20.0)})
    kept = _stack(p, [KEPT], eng)
    s = _stack(p, [KEPT, "standby_launcher"], eng)
    assert _removes(s, "standby_launcher") == (pytest.approx(10.0), pytest.approx(10.0))
    e = s.budget.part("engine_startup")
    assert (e.low, e.high) == (pytest.approx(30.0), pytest.approx(30.0))
    assert s.budget.high == pytest.approx(kept.budget.high - 10.0)
    assert s.conditions.engine.stages[BOOTSTRAP] == (pytest.approx(10.0), pytest.approx(10.0))


def test_default_engine_uses_the_profiles_bootstrap_and_the_conservative_pairing():
    p = _profile()
    m = p.mitigations.standby_launcher
    f_lo, f_hi = m.bootstrap_saved.low, m.bootstrap_saved.high
    b_lo, b_hi = m.bootstrap_s.low, m.bootstrap_s.high
    s = _stack(p, [KEPT, "standby_launcher"])
    # the low end loses the larger share of the smaller bootstrap, the high end the smaller
    # share of the larger one
    lo, hi = _removes(s, "standby_launcher")
    assert lo == pytest.approx(f_hi * b_lo) and hi == pytest.approx(f_lo * b_hi)
    e = s.budget.part("engine_startup")
    assert (e.low, e.high) == (pytest.approx(p.engine.startup_s.low - f_hi * b_lo),
                               pytest.approx(p.engine.startup_s.high - f_lo * b_hi))


def test_bootstrap_never_exceeds_the_engine_figure():
    p = _profile(share=(0.6, 0.9))
    eng = bud.EngineEstimate(5.0, 5.0, "a 5 s engine")  # below the profile's 7.27-10.26 s
    s = _stack(p, [KEPT, "standby_launcher"], eng)
    assert _removes(s, "standby_launcher") == (pytest.approx(0.9 * 5.0), pytest.approx(0.6 * 5.0))


def test_memory_cost_is_gb_times_dram_price_times_hours_times_nodes():
    p = _profile(resident_bytes=2.0e9, nodes=3)
    s = _stack(p, ["standby_launcher"])
    price = p.mitigations.tiered_loading.dram_price_per_gb_hour
    assert s.applied[0].monthly_cost == pytest.approx(2.0 * price * p.month_hours * 3)


def test_with_a_gpu_snapshot_the_launcher_is_moot():
    p = _profile(share=(0.5, 0.5))
    eng = bud.EngineEstimate(40.0, 40.0, "test", stages={BOOTSTRAP: (20.0, 20.0)})
    snap = _stack(p, [KEPT, "gpu_snapshot"], eng)
    both = _stack(p, [KEPT, "standby_launcher", "gpu_snapshot"], eng)
    k = p.mitigations.gpu_snapshot.startup_speedup
    assert both.budget.part("engine_startup").high == pytest.approx(40.0 / k)
    assert (both.budget.low, both.budget.high) == (pytest.approx(snap.budget.low),
                                                   pytest.approx(snap.budget.high))
    assert _removes(both, "standby_launcher")[1] == pytest.approx(10.0)
    assert _removes(both, "gpu_snapshot")[1] == pytest.approx(30.0 - 40.0 / k)


def test_a_share_above_one_is_refused():
    with pytest.raises(ColdscopeError, match="bootstrap_saved"):
        _profile(share=(0.5, 1.5))


# --- the share from a measured compare ---


A_BOOT, B_BOOT = (20.0, 22.0, 24.0), (4.0, 5.0, 6.0)


def _compare_file(tmp_path, a=A_BOOT, b=B_BOOT, name="cmp.json"):
    runs_a = [{"bootstrap": x, "model_loading": 2.0} for x in a]
    runs_b = [{"bootstrap": x, "model_loading": 2.0} for x in b]
    path = tmp_path / name
    doc = compare(runs_a, runs_b, cache="warm", b_info={"standby": "sb"})
    path.write_text(json.dumps(doc.to_json()))
    return path


def _welch(a, b):
    """b - a with its 95 % Welch interval, written out."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1)
    se2 = va / len(a) + vb / len(b)
    df = se2 ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.975, df) * math.sqrt(se2)
    return ma, mb - ma, mb - ma - half, mb - ma + half


def test_the_share_is_the_bootstrap_saving_over_as_bootstrap(tmp_path):
    a_mean, delta, low, high = _welch(A_BOOT, B_BOOT)  # 22 s, -17 s
    share = standby_share_from_compare(_compare_file(tmp_path))
    assert share.low == pytest.approx(-high / a_mean)
    assert share.high == pytest.approx(-low / a_mean)
    assert "measured" in share.source and f"{-delta / a_mean:.2f} of bootstrap" in share.source
    saved, why = standby_seconds_from_compare(_compare_file(tmp_path))
    assert saved == pytest.approx(17.0) and "warm cache" in why


def test_one_run_a_side_gives_the_point_and_a_slower_b_saves_nothing(tmp_path):
    one = standby_share_from_compare(_compare_file(tmp_path, (20.0,), (5.0,)))
    assert (one.low, one.high) == (pytest.approx(0.75), pytest.approx(0.75))
    slower = standby_share_from_compare(_compare_file(tmp_path, (5.0, 6.0), (9.0, 10.0)))
    assert (slower.low, slower.high) == (0.0, 0.0)


def test_a_file_that_is_not_such_a_compare_is_one_line(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"schema_version": 2, "total_s": {"low": 1, "high": 2}}))
    with pytest.raises(ColdscopeError, match="is not a `coldscope compare --json` output"):
        standby_share_from_compare(bad)
    path = tmp_path / "nob.json"
    runs = [{"tokenizer": 1.0, "model_loading": 2.0}] * 2
    path.write_text(json.dumps(compare(runs, runs, b_info={"standby": "sb"}).to_json()))
    with pytest.raises(ColdscopeError, match="no bootstrap measured on both sides"):
        standby_share_from_compare(path)
    # a compare whose b was not started through a launcher, or whose a was
    runs_a = [{"bootstrap": x} for x in A_BOOT]
    runs_b = [{"bootstrap": x} for x in B_BOOT]
    for info in ({}, {"a_info": {"standby": "sb"}, "b_info": {"standby": "sb"}}):
        path.write_text(json.dumps(compare(runs_a, runs_b, **info).to_json()))
        with pytest.raises(ColdscopeError, match="through a standby launcher"):
            standby_share_from_compare(path)


def test_plan_takes_the_measured_share_and_searches_the_layer(tmp_path):
    path = str(_compare_file(tmp_path))
    share = standby_share_from_compare(path)
    p = load_profile()
    eng, boot = p.engine.startup_s, p.mitigations.standby_launcher.bootstrap_s
    r = plan(PlanRequest(params="7e9", no_store=True, mitigate=[KEPT, "standby_launcher"],
                         standby_from=path))
    m = next(x for x in r.mitigations if x.name == "standby_launcher")
    assert m.removes_s.low == pytest.approx(share.high * boot.low)
    assert m.removes_s.high == pytest.approx(share.low * boot.high)
    e = next(x for x in r.parts if x.name == "engine_startup")
    assert (e.low, e.high) == (pytest.approx(eng.low - share.high * boot.low),
                               pytest.approx(eng.high - share.low * boot.high))
    only = plan(PlanRequest(params="7e9", no_store=True, standby_from=path))
    assert only.mitigations == [] and "--mitigate" in only.notes[-1]
    # an SLA search tries the layer when its measurement is given, and only then
    plain = plan(PlanRequest(params="7e9", no_store=True, sla_p99_ttft="30s"))
    searched = plan(PlanRequest(params="7e9", no_store=True, sla_p99_ttft="30s",
                                standby_from=path))
    assert plain.search is not None and searched.search is not None
    assert searched.search.candidates > plain.search.candidates
