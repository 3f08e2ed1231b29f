"""Mitigation layers compose in any order and each removes what its documented figure says."""

from __future__ import annotations

import pytest

from coldscope.core.stages import CUDA_GRAPH_CAPTURE, KV_CACHE_PROFILING, TORCH_COMPILE
from coldscope.planning import budget as bud
from coldscope.planning.infra import load_profile
from coldscope.planning.mitigations import LAYER_NAMES, apply_layers, canonical
from coldscope.util.errors import ColdscopeError


@pytest.fixture(scope="module")
def profile():
    return load_profile()


def _stack(profile, layers, params=70e9, engine=None):
    size = bud.size_from_params(params, "bf16")
    base = bud.baseline_conditions(profile, engine or bud.engine_from_default(profile))
    return apply_layers(size, profile, base, layers)


def test_order_does_not_matter_and_removals_add_up(profile):
    a = _stack(profile, ["gpu_snapshot", "weight_streaming", "preseeded_image"])
    b = _stack(profile, ["preseeded_image", "gpu_snapshot", "weight_streaming"])
    assert a.budget == b.budget
    assert [x.name for x in a.applied] == ["preseeded_image", "weight_streaming", "gpu_snapshot"]
    assert sum(x.removes_low for x in a.applied) == pytest.approx(a.baseline.low - a.budget.low)
    assert sum(x.removes_high for x in a.applied) == pytest.approx(a.baseline.high - a.budget.high)
    # pre-seeded: 45-60 + 20 / 2 + (10-30) / 10
    assert (a.budget.low, a.budget.high) == (pytest.approx(56.0), pytest.approx(73.0))


def test_unknown_layer_is_a_user_error():
    with pytest.raises(ColdscopeError, match="unknown mitigation 'warp_drive'"):
        canonical(["warp_drive"])
    assert canonical(["eager", "eager"]) == ("eager",)


def test_tiered_loading_reads_dram_on_a_kept_node(profile):
    s = _stack(profile, ["tiered_loading"])
    assert s.budget.part("provisioning").high == 0 and s.budget.part("image_pull").high == 0
    load = s.budget.part("weight_load")
    assert (load.low, load.high) == (pytest.approx(140 / 25), pytest.approx(140 / 12))
    # 140 GB of DRAM x 0.005 per GB-hour x 720 h
    assert s.applied[0].monthly_cost == pytest.approx(140 * 0.005 * 720)


def test_snapshot_cost_and_preseeded_cost(profile):
    s = _stack(profile, ["preseeded_image", "gpu_snapshot"])
    costs = {a.name: a.monthly_cost for a in s.applied}
    assert costs["preseeded_image"] == pytest.approx((10 + 140) * 0.05)
    assert costs["gpu_snapshot"] == pytest.approx((140 + 2) * 0.05)
    assert any("tied to the GPU type (H100)" in t for t in s.applied[1].assumptions)


def test_compile_cache_removes_only_a_cold_compile(profile):
    warm = _stack(profile, ["compile_cache"])
    assert warm.budget.part("engine_startup").high == 30.0
    cold = load_profile(overrides={"engine": {"compile_cache": "cold"}})
    s = _stack(cold, ["compile_cache"])
    assert s.baseline.part("engine_startup").high == 45.0
    eng = s.budget.part("engine_startup")
    assert (eng.low, eng.high) == (10.0, 30.0)


def test_fewer_capture_sizes_scales_the_papers_7b_figure(profile):
    # paper: Llama-2-7B capture 1.8 s (60 sizes) vs 0.33 s (3 sizes) -> 1.47 s saved
    s7 = _stack(profile, ["fewer_capture_sizes"], params=7e9)
    assert s7.budget.part("engine_startup").low == pytest.approx(10 - 1.47)
    s70 = _stack(profile, ["fewer_capture_sizes"], params=70e9)
    assert s70.budget.part("engine_startup").high == pytest.approx(30 - 14.7)


def test_eager_uses_measured_stages_when_known(profile):
    engine = bud.EngineEstimate(20.0, 30.0, "test", stages={
        TORCH_COMPILE: (5.0, 8.0), CUDA_GRAPH_CAPTURE: (1.0, 2.0), KV_CACHE_PROFILING: (3.0, 4.0)})
    s = _stack(profile, ["eager"], engine=engine)
    eng = s.budget.part("engine_startup")
    assert (eng.low, eng.high) == (14.0, 20.0)
    assert s.throughput_factor == 0.7
    plain = _stack(profile, ["eager"])
    assert plain.budget.part("engine_startup").low == pytest.approx(10 - 4.5)


def test_live_migration_moves_tokens_and_recomputes(profile):
    s = _stack(profile, ["tiered_loading", "live_migration"])
    mig = s.budget.part("migration")
    send = 1412 * 4 / 1.25e9
    assert (mig.low, mig.high) == (pytest.approx(send + 1412 / 10000),
                                   pytest.approx(send + 1412 / 4000))
    assert s.applied[-1].removes_high == pytest.approx(-mig.high)


def test_every_layer_is_documented(profile):
    s = _stack(profile, LAYER_NAMES)
    for a in s.applied:
        assert a.summary and a.assumptions, a.name
