"""Chart data of the report, checked against answers computed independently (by hand, numpy,
or the paper's own averaged tables)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from coldscope.core.interval import Interval
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS, MODEL_LOADING, TORCH_COMPILE, UNATTRIBUTED
from coldscope.report import configurations as cf
from coldscope.report.markup import to_csv
from coldscope.report.paper import PAPER_MAIN, PAPER_MIXED_WEIGHTS, capture_count, paper_records
from coldscope.report.sections import breakdown, compare, cpu, prediction, scaling, timeline, tune
from coldscope.report.stats import TOTAL, linear_fit, summary

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
PAPER = SHARED / "data" / "paper"


def record(rid: str, cache: str = "cold", model: str = "tiny", scale: float = 1.0,
           **over) -> Run:
    """A small run: bootstrap 10, loading 2, compile 5, ready 1,
    unattributed 0.5 seconds (times ``scale``), with intervals, segments and CPU samples."""
    s = {b: None for b in BUCKETS}
    s.update(bootstrap=10 * scale, tokenizer=0.0, model_loading=2 * scale,
             torch_compile=5 * scale, kv_cache_profiling=None, server_ready=1 * scale,
             unattributed=0.5 * scale)
    ttr = sum(v for v in s.values() if v)
    segs, t = [], 0.0
    for b in ("bootstrap", "unattributed", "model_loading", "torch_compile", "server_ready"):
        segs.append({"bucket": b, "start": t, "end": t + s[b]})
        t += s[b]
    rec = {
        "id": rid, "status": "ok", "cache": cache, "label": None, "time_to_ready_s": ttr,
        "started_at": "2026-01-01T00:00:00+00:00",
        "first_token_s": ttr + 0.1, "stages": s, "substeps": {"model_loading/weights": 1.0},
        "sources": {"bootstrap": "probe", "model_loading": "span"},
        "intervals": [
            {"name": "bootstrap", "process": "api_server", "pid": 1, "start": 0.0,
             "end": 10 * scale, "source": "probe"},
            {"name": "model_loading", "process": "worker", "pid": 3, "start": 10.5 * scale,
             "end": 12.5 * scale, "source": "span"},
            {"name": "model_loading", "process": "worker", "pid": 3, "start": 10.6 * scale,
             "end": 12.4 * scale, "source": "span"},
            {"name": "model_loading/weights", "process": "worker", "pid": 3,
             "start": 11 * scale, "end": 12 * scale, "source": "span"},
            {"name": "bootstrap/engine_core_start", "process": "engine_core", "pid": 2,
             "start": 2.0, "end": 6.0, "source": "probe"},
        ],
        "segments": segs, "not_applicable": ["cuda_graph_capture"],
        "cpu": {"interval_s": 1.0, "t": [1.0, 2.0, 12.0],
                "per_core": [[100.0, 10.0], [95.0, 0.0], [20.0, 100.0]]},
        "engine": {"name": "vllm", "version": "0.32.0", "enforce_eager": False,
                   "compile": True, "load_format": None, "argv": []},
        "environment": {"cpu_model": "AMD EPYC", "cpu_cores": 2, "gpus": []},
        "model": {"path": f"/models/{model}", "name": model},
    }
    rec.update(over)
    return Run.model_validate(rec)


def test_summary_matches_statistics_module():
    s = summary([1.0, None, 2.0, 4.0])
    assert s.n == 3 and s.min == 1.0 and s.max == 4.0
    assert s.mean == pytest.approx(7 / 3)
    assert s.sd == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert summary([None]) is None
    assert summary([3.0]).sd == 0.0


def test_linear_fit_matches_numpy():
    rng = np.random.default_rng(1)
    xs = rng.uniform(0, 10, 30)
    ys = 2.0 + 3.0 * xs + rng.normal(0, 1, 30)
    fit = linear_fit(list(xs), list(ys))
    slope, intercept = np.polyfit(xs, ys, 1)
    assert fit.slope == pytest.approx(slope)
    assert fit.intercept == pytest.approx(intercept)
    assert fit.r == pytest.approx(np.corrcoef(xs, ys)[0, 1])
    assert linear_fit([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # one distinct x
    assert linear_fit([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]).r is None  # constant y


def test_groups_are_named_by_what_varies():
    recs = [record("a"), record("b", scale=1.2), record("c", cache="warm", scale=0.5)]
    groups = cf.group_runs(recs)
    assert [g.name for g in groups] == ["cold", "warm"]
    assert [len(g.runs) for g in groups] == [2, 1]
    assert cf.dimensions(recs[0])["mode"] == "compiled"
    assert cf.dimensions(record("e", engine={"enforce_eager": True}))["mode"] == "eager"
    assert cf.dimensions(recs[0])["machine"] == "AMD EPYC ×2"


def test_breakdown_means_stack_to_mean_time_to_ready():
    recs = [record("a"), record("b", scale=1.5)]
    (row,) = breakdown.build(cf.group_runs(recs)).rows
    stacked = sum(s.mean for s in row.buckets.values() if s)
    assert stacked == pytest.approx(row.total.mean)
    assert row.total.mean == pytest.approx((18.5 + 18.5 * 1.5) / 2)
    assert row.buckets[TORCH_COMPILE].sd == pytest.approx(statistics.stdev([5, 7.5]))
    assert row.buckets["kv_cache_profiling"] is None
    assert row.not_applicable == ("cuda_graph_capture",)


def test_comparison_ratio_is_warm_over_cold_per_stage():
    recs = [record("a"), record("b", scale=2.0), record("w", cache="warm", scale=0.6)]
    (cmp,) = compare.build(cf.group_runs(recs)).items
    assert (cmp.dimension, cmp.baseline, cmp.other) == ("cache", "cold", "warm")
    (pair,) = cmp.pairs
    # cold mean compile = (5 + 10) / 2 = 7.5; warm = 3.0
    assert pair.ratios[TORCH_COMPILE] == pytest.approx(3.0 / 7.5)
    assert pair.ratios["tokenizer"] is None  # 0 s: below the ratio floor
    assert cmp.geomean[TOTAL] == pytest.approx((18.5 * 0.6) / (18.5 * 1.5))


def test_engine_environment_separates_configurations():
    """A tune trial's environment setting makes another configuration, never a repetition."""
    recs = [record("a"), record("b", env_overrides={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
                                scale=0.5)]
    groups = cf.group_runs(recs)
    assert [g.name for g in groups] == ["default", "VLLM_ENABLE_V1_MULTIPROCESSING=0"]
    (cmp,) = compare.build(groups).items
    assert cmp.dimension == "env"
    # the same setting and a cache change: two dimensions at once, no like-for-like pair
    mixed = [record("a"), record("w", cache="warm", env_overrides={"X": "1"})]
    assert compare.build(cf.group_runs(mixed)).items == ()


def test_no_comparison_across_two_changed_dimensions():
    recs = [record("a"), record("w", cache="warm", model="other")]
    assert compare.build(cf.group_runs(recs)).items == ()


def test_timeline_packs_overlaps_and_finds_gaps():
    tl = timeline.timeline(record("a"))
    assert [ln.process for ln in tl.lanes] == ["api_server", "engine_core", "worker"]
    worker = tl.lanes[2]
    # two overlapping model_loading spans are one bar (their union), the sub-step below it
    assert [[(b.name, b.start, b.end) for b in row] for row in worker.rows] == [
        [("model_loading", 10.5, 12.5)], [("model_loading/weights", 11.0, 12.0)]]
    assert [(g.start, g.end) for g in tl.gaps] == [(10.0, 10.5)]
    assert sum(s.end - s.start for s in tl.segments) == pytest.approx(tl.time_to_ready)


def test_cpu_usage_per_stage():
    usage = cpu.cpu_usage(record("a"))
    assert usage.cores == 2
    # samples at 1 s and 2 s (midpoints 0.5, 1.5) fall in bootstrap, 12 s (11.5) in loading
    boot = usage.per_bucket["bootstrap"]
    assert boot.samples == 2
    assert boot.mean_percent == pytest.approx((55 + 47.5) / 2)
    assert boot.busiest_core_percent == pytest.approx(97.5)
    assert boot.saturated_cores == pytest.approx(1.0)
    assert usage.per_bucket[MODEL_LOADING].busiest_core_percent == 100.0
    assert cpu.cpu_usage(record("b", cpu=None)) is None


def test_scaling_fits_loading_against_weight_bytes():
    recs, feats = [], {}
    for i, gb in enumerate((1.0, 2.0, 4.0, 8.0)):
        name = f"m{i}"
        r = record(f"r{i}", model=name)
        r.stages[MODEL_LOADING] = 0.5 + 1.5 * gb  # exactly linear
        recs.append(r)
        feats[name] = SimpleNamespace(weight_bytes=int(gb * 1e9), tokenizer_bytes=None,
                                      graph_size=None, kind="dense")
    feats["m3"].kind = "moe"  # drawn, not fitted
    recs[3].stages[MODEL_LOADING] = 100.0
    panel = next(p for p in scaling.build(cf.group_runs(recs), feats).panels
                 if p.stage == MODEL_LOADING)
    (series,) = panel.series
    assert len(series.points) == 4
    assert series.fit.slope == pytest.approx(1.5)
    assert series.fit.intercept == pytest.approx(0.5)
    assert series.fit.r == pytest.approx(1.0)
    assert series.fit.n == 3


def test_predictions_mark_measured_inside_interval():
    class Model:
        level = 0.9

        def predict(self, features, capture_sizes=None):
            sp = SimpleNamespace(s=6.0, interval=Interval(low=4.0, high=8.0))
            return SimpleNamespace(stages={TORCH_COMPILE: sp}, total_s=20.0,
                                   interval=Interval(low=10.0, high=15.0), warnings=[])

    groups = cf.group_runs([record("a")])
    out = prediction.build(groups, {"tiny": object()}, Model())
    cells = out.rows[0].cells
    assert cells[TORCH_COMPILE].inside is True  # 5 in [4, 8]
    assert cells[TOTAL].inside is False  # 18.5 not in [10, 15]
    assert out.coverage == {TORCH_COMPILE: 1.0, TOTAL: 0.0}


def test_capture_sizes_from_argv_and_vllm_default():
    vllm = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert cf.capture_sizes([*vllm, "--cuda-graph-sizes", "1", "2", "4", "--port", "1"]) == "3"
    assert cf.capture_sizes([*vllm, "--cuda-graph-sizes=8"]) == "1"
    assert cf.capture_sizes(vllm) is None and cf.capture_sizes([]) is None
    assert capture_count(512) == 67  # the paper's default number of capture sizes


def test_to_csv_round_trips():
    import csv
    import io

    text = to_csv([{"a": 1.5, "b": None}, {"a": 2, "b": "x,y"}])
    assert list(csv.reader(io.StringIO(text))) == [["a", "b"], ["1.5", ""], ["2", "x,y"]]


@pytest.mark.skipif(not PAPER.is_dir(), reason="../shared/data/paper not present")
def test_paper_records_reproduce_the_published_means():
    recs = paper_records(PAPER)
    main = [r for r in recs if r.dataset == PAPER_MAIN]
    assert len(main) == 5 * 17
    avg = json.loads((PAPER / "figures/figure-rest/avg_comparison_results.json").read_text())
    i = next(k for k, lab in enumerate(avg["labels"]) if "llama2-13b-hf" in lab)
    runs = [r for r in main if r.model.name == "llama2-13b-hf"]
    mean = statistics.fmean(r.stages[MODEL_LOADING] for r in runs)
    assert mean == pytest.approx(avg["data"]["model_loading"][i], abs=0.01)  # avg is rounded
    for r in recs:  # buckets add up to the paper's actual_total_time
        assert sum(v for v in r.stages.values() if v) == pytest.approx(r.time_to_ready_s)
        assert r.stages[UNATTRIBUTED] is None or r.stages[UNATTRIBUTED] >= 0
    fig14 = {r.dims["load_format"] for r in recs if r.dataset.startswith("Fig. 14")}
    assert fig14 == {"safetensors", "runai_streamer", "tensorizer"}
    cmps = compare.build(cf.group_runs(recs)).items
    eager = next(c for c in cmps if c.dimension == "mode")
    assert (eager.baseline, eager.other) == ("compiled", "eager")
    # Fig. 7 (eager, page cache) pairs with Fig. 13 case 0 (compiled, page cache, same H100),
    # not with the main table (weights mostly from the SSD): the five models both ran
    assert len(eager.pairs) == 5
    assert eager.geomean[TOTAL] == pytest.approx(0.54, abs=0.01)


@pytest.mark.skipif(not PAPER.is_dir(), reason="../shared/data/paper not present")
def test_paper_comparisons_pair_only_equal_settings():
    """Issue 13: comparisons must not pair runs across storage settings."""
    groups = cf.group_runs(paper_records(PAPER))
    cmps = {(c.dimension, c.other): c for c in compare.build(groups).items}
    l40s = cmps[("machine", "L40S node")]
    assert l40s.geomean[MODEL_LOADING] == pytest.approx(1.0, abs=0.02)  # same storage
    disabled = cmps[("cache", "compile cache disabled")]
    assert disabled.baseline == "warm" and disabled.geomean[TOTAL] > 1.2
    # the main table mixes storage settings: never a reference, and the report says so
    assert not any(PAPER_MIXED_WEIGHTS in (c.baseline, c.other) for c in cmps.values())
    assert not any(p.baseline_group.find("mixed") >= 0 for c in cmps.values()
                   for p in c.pairs)
    notes = compare.mixed_setting_notes(groups)
    assert any(n.startswith(PAPER_MAIN + " mixes settings") for n in notes)


@pytest.mark.skipif(not PAPER.is_dir(), reason="../shared/data/paper not present")
def test_predictions_score_only_the_models_setting_and_label_training_rows():
    from coldscope.prediction.paper import (
        observations_from_paper,
        paper_environment,
        paper_features,
    )
    from coldscope.prediction.startup_model import StartupModel
    l40s = PAPER / "figures/figure-10/gpu1/avg_comparison_results.json"
    obs = observations_from_paper(PAPER, l40s)
    model = StartupModel().fit(obs, paper_environment(PAPER, l40s), {"capture_sizes": 67})
    groups = cf.group_runs(paper_records(PAPER))
    out = prediction.build(groups, paper_features(PAPER), model)
    assert out.rows and all(r.group.endswith("(training row)") for r in out.rows)
    assert {r.model for r in out.rows} == {o.model for o in obs}  # Fig. 10 only
    assert out.coverage[TOTAL] is None  # nothing held out to score
    assert any("not scored" in n for n in out.notes)
    assert any("own training or calibration data" in n for n in out.notes)


def test_versions_sort_as_versions():
    """0.9 before 0.10, a release candidate before its release, a post-release after it —
    in comparisons' order and in the breakdown's rows, whatever order the runs came in."""
    order = ["vllm 0.9.2", "vllm 0.10.0rc1", "vllm 0.10.0", "vllm 0.10.0.post1", "vllm 0.11.0"]
    assert sorted(reversed(order), key=cf.natural_key) == order
    assert sorted(["56", "8", "16"], key=cf.natural_key) == ["8", "16", "56"]
    shuffled = [order[i] for i in (4, 1, 3, 0, 2)]
    runs = [record(f"r{i}", engine={"name": "vllm", "version": v.split()[1]})
            for i, v in enumerate(shuffled)]
    rows = breakdown.build(cf.group_runs(runs)).rows
    assert [r.dims["engine"] for r in rows] == order
    cmp = next(c for c in compare.build(cf.group_runs(runs)).items if c.dimension == "engine")
    assert cmp.baseline == "vllm 0.9.2"  # ties go to the oldest version


# -- tune sessions -------------------------------------------------------------------------------

def tune_run(rid: str, role: str, knobs: tuple[str, ...], trial: int, stages: dict,
             throughput: float | None = 100.0, session: str = "tune-1", **over) -> Run:
    """A start-up of a tune session: ``stages`` (seconds) tile its time to ready."""
    s = {b: None for b in BUCKETS}
    s.update(stages)
    change = knobs[-1] if knobs and role != "confirm" else None
    return record(rid, stages=s, time_to_ready_s=sum(v for v in s.values() if v),
                  origin="tune", label=f"tune:{session}",
                  campaign={"kind": "tune", "name": session, "role": role, "trial": trial,
                            "change": change, "flags": "+".join(knobs) or "default"},
                  verification={"throughput": throughput} if throughput else None, **over)


def _session() -> list[Run]:
    """Baseline twice, the default warm, eager primed then kept (with a repeat), mp-off not
    kept, then the confirm of warm+eager."""
    w, e, m = ("warm",), ("warm", "eager"), ("warm", "eager", "mp")
    return [
        tune_run("b1", "baseline", (), 0, {"bootstrap": 30.0, "torch_compile": 40.0,
                                           "server_ready": 2.0}, 100.0),
        tune_run("b2", "baseline", (), 1, {"bootstrap": 34.0, "torch_compile": 44.0,
                                           "server_ready": 2.0}, 110.0),
        tune_run("t2", "warm", w, 2, {"bootstrap": 28.0, "torch_compile": 20.0,
                                       "server_ready": 2.0}, 104.0),
        tune_run("p3", "prime", e, 3, {"bootstrap": 40.0, "torch_compile": 0.0,
                                       "server_ready": 2.0}, 90.0),
        tune_run("t4", "trial", e, 4, {"bootstrap": 29.0, "torch_compile": None,
                                       "server_ready": 3.0}, 84.0),
        tune_run("r5", "repeat", e, 5, {"bootstrap": 31.0, "torch_compile": None,
                                        "server_ready": 3.0}, 86.0),
        tune_run("t6", "trial", m, 6, {"bootstrap": 10.0, "server_ready": 3.0}, 50.0),
        tune_run("c7", "confirm", e, 7, {"bootstrap": 30.0, "server_ready": 3.0}, 85.0),
    ]


def test_tune_waterfall_steps_sum_from_baseline_to_best_per_stage():
    runs = [record("other"), *_session()]  # a plain profile run is no part of the session
    kept = tune.KeptSteps(steps=((), ("warm",), ("warm", "eager")),
                          descriptions={"eager": "no compile"})
    section = tune.build(runs, {"tune-1": kept})
    [w] = section.waterfalls
    assert section.notes == ()
    assert [s.name for s in w.steps] == ["baseline", "warm caches (the default run again)",
                                         "eager"]
    base, warm, eager = w.steps
    # means over the measuring start-ups: the prime (p3) and the rejected mp trial are left out,
    # and the best is measured by its confirmation alone, not by the trials that selected it
    assert base.runs == ("b1", "b2") and eager.runs == ("c7",)
    assert w.baseline_s == pytest.approx(76.0) and w.best_s == pytest.approx(33.0)
    assert base.stages["torch_compile"] == pytest.approx(42.0)
    assert warm.saved["torch_compile"] == pytest.approx(22.0)
    assert eager.saved["torch_compile"] == pytest.approx(20.0)
    assert eager.saved["server_ready"] == pytest.approx(-1.0)  # slower: a negative saving
    # per stage, the steps' savings sum from the baseline's to the best's stages
    for b in BUCKETS:
        total = sum(s.saved[b] for s in w.steps[1:])
        assert total == pytest.approx(base.stages[b] - eager.stages[b]), b
    assert sum(s.saved_s for s in w.steps[1:]) == pytest.approx(76.0 - 33.0)
    # every ratio is against the warm default (t2: 50 s, 104 tokens/s), not the cold baseline
    assert warm.reference and warm.throughput_vs_warm is None
    assert base.throughput_vs_warm.value == pytest.approx(105.0 / 104.0)
    assert eager.throughput_vs_warm.value == pytest.approx(85.0 / 104.0)
    assert w.vs_warm.value == pytest.approx(50.0 / 33.0) and w.warm_runs == 1
    assert w.vs_cold.value == pytest.approx(76.0 / 33.0)
    assert eager.description == "no compile" and not w.inferred


def test_tune_waterfall_without_the_session_file_reads_kept_changes_from_the_runs():
    runs = _session()
    section = tune.build(runs)
    [w] = section.waterfalls
    assert [s.knobs for s in w.steps] == [(), ("warm",), ("warm", "eager")]
    assert w.inferred and "read from the runs" in section.notes[0]
    # without the confirm, whether the last trial (mp) was kept is unknown: it is left out
    assert tune.inferred_tune_steps(runs[:-1]) == [(), ("warm",), ("warm", "eager")]
    # a kept configuration with no run among the chosen ones: no waterfall, and a note
    kept = tune.KeptSteps(steps=((), ("warm",), ("warm", "eager")), descriptions={})
    section = tune.build([r for r in runs if r.id != "t2"], {"tune-1": kept})
    assert section.waterfalls == () and "no successful run of warm" in section.notes[0]


def test_tune_waterfall_agrees_with_the_search_it_draws():
    """The search on the fake engine, its runs as the store keeps them, and tune's own
    ``waterfall`` for the kept steps: the chart starts at the session's baseline and ends at
    its best, with its serving over the warm default's, from the measurements themselves."""
    from coldscope.tuning.report import waterfall
    from coldscope.tuning.search import Search
    from coldscope.tuning.session import SessionSpec, Trial
    from tests.fake_tunable_engine import FakeTunable
    from tests.unit.tuning.test_search import cpu_knobs

    fake, measured = FakeTunable(noise=0.04, seed=3), []

    def measure(req):
        m = fake(req)
        measured.append((req, m))
        return m

    knobs = cpu_knobs()
    outcome = Search(knobs, measure, budget=12).run()
    runs = [tune_run(m.run_id, req.role, req.knobs, req.index,
                     {k: v for k, v in m.stages.items()}, m.throughput)
            for req, m in measured if m.ok]
    spec = SessionSpec(id="tune-1", created_at="2026-01-01T00:00:00+00:00", command=["x"],
                       budget=12, knobs=knobs,
                       done=[Trial(request=r, measurement=m) for r, m in measured])
    steps = tuple(tuple(row.knobs) for row in waterfall(spec, outcome) if row.step != "best")
    w = tune.waterfall("tune-1", runs, tune.KeptSteps(steps=steps, descriptions={}))
    assert len(w.steps) >= 3
    assert w.baseline_s == pytest.approx(outcome.cold.time_to_ready_s)
    assert w.best_s == pytest.approx(outcome.best_s)  # both from the confirmation runs
    assert list(w.best_knobs) == outcome.best_knobs
    # the best's serving over the warm default's (every warm start-up: these steps name none)
    confirm = [m.throughput for r, m in measured if r.role == "confirm"]
    warm = [m.throughput for r, m in measured if r.role == "warm" and m.ok]
    assert w.steps[-1].throughput_vs_warm.value == pytest.approx(
        (sum(confirm) / len(confirm)) / (sum(warm) / len(warm)))
    assert tuple(s.knobs for s in tune.waterfall("tune-1", runs).steps) == steps
