"""The budget: the lesson's worked 70B example (which the default profile is calibrated from),
the same arithmetic on a profile fitted to nothing, and where engine figures come from."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coldscope.core.interval import Interval
from coldscope.core.stages import CUDA_GRAPH_CAPTURE, MODEL_LOADING, TORCH_COMPILE
from coldscope.planning import budget as bud
from coldscope.planning.infra import load_profile, parse_count, parse_duration
from coldscope.planning.mitigations import apply_layers
from coldscope.prediction.core import Prediction, StagePrediction
from coldscope.util.errors import ColdscopeError


@pytest.fixture(scope="module")
def profile():
    return load_profile()


def _budget(profile, params=70e9, layers=(), engine=None):
    size = bud.size_from_params(params, "bf16")
    base = bud.baseline_conditions(profile, engine or bud.engine_from_default(profile))
    return apply_layers(size, profile, base, layers).budget


def test_70b_from_zero_is_the_lessons_220_to_510_s(profile):
    """What this checks: the default profile *reproduces* the lesson's example, and that is by
    construction: its registry and node-disk bandwidths are calibrated from this very example
    (``default_profile.yaml`` says so in their ``source``), and its provisioning and engine
    ranges are the example's. So this is a round trip of that calibration through the budget's
    arithmetic, not evidence that the planner predicts anything; the next test checks the
    arithmetic on a profile fitted to nothing."""
    b = _budget(profile)
    got = {p.name: (p.low, p.high) for p in b.parts}
    # lesson: provisioning 45-60 + image pull 120-300 + load 45-120 + engine init 10-30
    expected = {"provisioning": (45, 60), "image_pull": (120, 300), "weight_transfer": (0, 0),
                "weight_load": (45, 120), "engine_startup": (10, 30)}
    assert list(got) == list(bud.PARTS)
    for name, (lo, hi) in expected.items():
        assert got[name][0] == pytest.approx(lo, abs=0.01), name
        assert got[name][1] == pytest.approx(hi, abs=0.01), name
    assert (b.low, b.high) == (pytest.approx(220, abs=0.05), pytest.approx(510, abs=0.05))
    assert b.dominant() == "image_pull"


def test_70b_from_zero_on_a_profile_not_fitted_to_the_example():
    """Made-up figures (none from the lesson), expected values by hand from the documented rule:
    each part's low and high time are bytes / the tier's high and low bandwidth."""
    p = load_profile(overrides={
        "provisioning_s": {"low": 30, "high": 40},
        "bandwidth_bytes_per_s": {"registry": {"low": 1.0e9, "high": 2.5e9},
                                  "node_disk": {"low": 2.0e9, "high": 5.0e9}},
        "engine": {"startup_s": {"low": 5, "high": 15}},
    })
    b = _budget(p)
    got = {part.name: (part.low, part.high) for part in b.parts}
    # 70B bf16 = 140 GB of weights, in the image with its 10 GB of software
    assert got["provisioning"] == (pytest.approx(30), pytest.approx(40))
    assert got["image_pull"] == (pytest.approx(150e9 / 2.5e9), pytest.approx(150e9 / 1.0e9))
    assert got["weight_transfer"] == (0, 0)
    assert got["weight_load"] == (pytest.approx(140e9 / 5e9), pytest.approx(140e9 / 2e9))
    assert got["engine_startup"] == (pytest.approx(5), pytest.approx(15))
    # 30 + 60 + 0 + 28 + 5 = 123 s; 40 + 150 + 0 + 70 + 15 = 275 s
    assert (b.low, b.high) == (pytest.approx(123.0), pytest.approx(275.0))


def test_70b_bf16_from_7_gb_s_nvme_takes_20_s(profile):
    b = _budget(profile, layers=("preseeded_image",))
    assert b.part("weight_load").low == pytest.approx(140e9 / 7e9) == pytest.approx(20.0)
    assert b.part("image_pull").high == 0
    # pre-seeded 70B: 45-60 s provisioning + 20 s load + 10-30 s engine init
    assert (b.low, b.high) == (pytest.approx(75.0), pytest.approx(110.0))


def test_weights_from_object_store_are_downloaded_then_loaded(profile):
    p = load_profile(overrides={"image": {"weights_from": "object_store"}})
    b = _budget(p)
    assert b.part("image_pull").low == pytest.approx(10e9 / 1.25e9)
    assert (b.part("weight_transfer").low, b.part("weight_transfer").high) == (
        pytest.approx(140e9 / 1.25e9), pytest.approx(140e9 / 0.5e9))
    streamed = _budget(p, layers=("weight_streaming",))
    # overlapped: the download (112-280 s) is slower than the halved load (22.5-60 s)
    assert streamed.part("weight_transfer").high == 0
    assert (streamed.part("weight_load").low, streamed.part("weight_load").high) == (
        pytest.approx(112.0), pytest.approx(280.0))


def _run(ttr, loading, status="ok", cache="cold", **stages):
    return {"id": "r", "status": status, "cache": cache, "time_to_ready_s": ttr,
            "stages": {MODEL_LOADING: loading, **stages}}


RUNS = [_run(30.0, 5.0, **{TORCH_COMPILE: 4.0}), _run(40.0, 8.0, **{TORCH_COMPILE: 6.0}),
        _run(35.0, 6.0), _run(99.0, 1.0, status="failed"), _run(None, 1.0)]


def test_engine_from_runs_is_median_and_range_without_loading():
    est = bud.engine_from_runs(RUNS)
    # values 25, 32, 29 (time to ready minus model_loading); failed and unfinished runs ignored
    assert (est.low, est.median, est.high) == (25.0, 29.0, 32.0)
    assert est.stages[TORCH_COMPILE] == (4.0, 6.0)
    assert est.compile_cold and est.source.startswith("store: median 29.0 s of 3")
    assert bud.engine_from_runs([_run(None, 1.0)]) is None


def _sp(s: float, low: float, high: float) -> StagePrediction:
    return StagePrediction(s, Interval(low=low, high=high))


PRED = Prediction(40.0, Interval(low=30.0, high=50.0),
                  {MODEL_LOADING: _sp(10.0, 8.0, 12.0), TORCH_COMPILE: _sp(5.0, 4.0, 6.0),
                   CUDA_GRAPH_CAPTURE: _sp(2.0, 1.0, 3.0)})


def test_engine_from_prediction_drops_model_loading():
    est = bud.engine_from_prediction(PRED, "m.json")
    assert (est.low, est.median, est.high) == (20.0, 30.0, 40.0)
    assert MODEL_LOADING not in est.stages and est.stages[TORCH_COMPILE] == (4.0, 6.0)
    assert "startup model m.json" in est.source


def test_engine_check_against_store_median():
    check = bud.check_engine_init(RUNS, PRED)
    assert (check.store_median_s, check.predicted_s, check.interval, check.runs) == (
        29.0, 30.0, (20.0, 40.0), 3)
    assert check.within
    far = [_run(60.0, 5.0), _run(70.0, 5.0)]
    assert not bud.check_engine_init(far, PRED).within
    with pytest.raises(ColdscopeError):
        bud.check_engine_init([], PRED)


def test_engine_default_adds_cold_compile_when_asked():
    p = load_profile(overrides={"engine": {"compile_cache": "cold"}})
    est = bud.engine_from_default(p)
    assert (est.low, est.high, est.compile_cold) == (18.0, 45.0, True)


def test_gpus_per_replica_smallest_power_of_two_that_fits(profile):
    # H100 80 GB x 0.9 = 72 GB usable per GPU
    assert bud.gpus_per_replica(bud.size_from_params(13e9, "bf16"), profile) == 1
    assert bud.gpus_per_replica(bud.size_from_params(70e9, "bf16"), profile) == 2
    assert bud.gpus_per_replica(bud.size_from_params(405e9, "bf16"), profile) == 16


def test_size_from_features_reads_weight_bytes_and_kv_shape():
    feats = SimpleNamespace(params=70_553_706_496, weight_bytes=141_107_412_992, dtype="bfloat16",
                            bytes_per_param=2.0, num_layers=80, hidden_size=8192, num_heads=64,
                            num_kv_heads=8, head_dim=128)
    size = bud.size_from_features(feats, "llama-70b", "test")
    assert size.weight_bytes == 141_107_412_992
    assert size.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


def test_inputs_parse_or_fail_in_one_line():
    assert parse_duration("2s") == 2.0 and parse_duration("500ms") == 0.5
    assert parse_duration("1.5min") == 90.0 and parse_duration(3) == 3.0
    assert parse_count("70e9") == 70e9 and parse_count("13B") == 13e9
    for bad in ("fast", "2 parsecs"):
        with pytest.raises(ColdscopeError):
            parse_duration(bad)
    with pytest.raises(ColdscopeError, match="unknown dtype"):
        bud.size_from_params(1e9, "bf17")


def test_profile_file_overrides_and_rejects_unknown_keys(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("provisioning_s: {low: 30, high: 40}\n")
    p = load_profile(f)
    assert (p.provisioning_s.low, p.provisioning_s.high) == (30, 40)
    assert p.bandwidth_bytes_per_s.nvme.low == 7e9  # untouched defaults stay
    f.write_text("provisioning_s: {low: 30, hihg: 40}\n")
    with pytest.raises(ColdscopeError, match="provisioning_s"):
        load_profile(f)
    f.write_text("gpu: TPU\n")
    with pytest.raises(ColdscopeError, match="TPU"):
        load_profile(f)


def test_dtype_bytes_come_from_the_one_table():
    from coldscope.planning.infra import dtype_bytes
    from coldscope.prediction.features import DTYPE_BYTES
    for name in ("bf16", "BF16", "bfloat16", "fp8", "int8", "int4", "F32"):
        assert dtype_bytes(name) == DTYPE_BYTES.get(name, DTYPE_BYTES.get(name.lower()))
    with pytest.raises(ColdscopeError, match="unknown dtype"):
        dtype_bytes("fp7")
