"""Prefixes by shape, a collector's clock where the engine has none, and platform plugins'
wordings (issue 33, part 2).

Fixtures under ``tests/data/fleet-logs/`` (written by hand in real output's shapes); every
expected value is read from their own lines. The plugin wordings are those of the plugins'
source: vllm-metal's ``vllm_metal/v1/model_lifecycle.py`` ("Loading model: %s (VLM: %s)",
"Model loaded in %.2fs: %s", "Model loaded from cache in %.3fs: %s"), the NPU/HPU model runners'
"Loading model weights took %.4f GB", vLLM's TPU model runner's "Compilation finished in %.2f
[secs]."."""

from __future__ import annotations

from pathlib import Path

import pytest

import coldscope
from coldscope.capture.logtext import normalise, repeated_prefix
from coldscope.ingest.logfiles import parse_logs

FLEET = Path(__file__).resolve().parents[2] / "data" / "fleet-logs"
WILD = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "wild-logs"


def _run(name: str) -> coldscope.Run:
    [parsed] = parse_logs([str(FLEET / name)])
    assert parsed.run is not None, parsed.reason
    return parsed.run


def test_docker_compose_service_prefix_is_found_and_removed() -> None:
    run = _run("vllm-0.11-compose.log")
    assert run.status == "ok"
    assert run.time_to_ready_s == pytest.approx(30.0)  # 08:15:40 -> 08:16:10, vLLM's own stamps
    assert run.stages["model_loading"] == pytest.approx(3.120518)
    assert any("a service name and '|'" in n and "'vllm-1  |'" in n for n in run.notes)


def test_a_date_time_prefix_without_zone_uncovers_the_engines_own_stamp() -> None:
    run = _run("vllm-0.11-collector-stamp.log")
    assert run.status == "ok"
    # vLLM's own stamps (08:15:40 -> 08:16:10), not the collector's (.100 ... .)
    assert run.time_to_ready_s == pytest.approx(30.0)
    assert any("a date-time" in n and "'2026-05-02 08:15:40.100 |'" in n for n in run.notes)
    assert not any("time of their own" in n for n in run.notes)


def test_where_the_engine_prints_no_time_the_collectors_clock_serves_and_is_named() -> None:
    run = _run("vllm-0.11-pod-no-own-stamp.log")
    assert run.status == "ok"
    # 09:40:11.208 (line 1) -> 09:40:43.805 (line 13, "Application startup complete.")
    assert run.time_to_ready_s == pytest.approx(32.597)
    assert run.stages["model_loading"] == pytest.approx(7.402311)
    assert any("a pod and container name" in n for n in run.notes)
    assert any("time of their own" in n and "2026-05-03T09:40:11.208Z" in n for n in run.notes)


@pytest.mark.parametrize("name", ["vllm-0.19.1-a100-40gb-qwen3-8b.log",
                                  "vllm-0.13.0-rtxa5000-qwen2.5-14b-awq.log",
                                  "sglang-0.5.11nv-gb10-qwen2.5-1.5b.log"])
@pytest.mark.parametrize("prefix", ["vllm-1  | ", "2026-06-25 17:21:29.004 | ",
                                    "[pod/vllm-0/vllm] "])
def test_a_real_log_behind_a_repeated_prefix_reads_as_without_it(
        tmp_path: Path, name: str, prefix: str) -> None:
    plain = WILD / name
    if not plain.exists():
        pytest.skip("shared fixtures not present")
    wrapped = tmp_path / name
    text = plain.read_bytes().decode("utf-8", "replace")
    wrapped.write_text("".join(prefix + line for line in text.splitlines(True)))
    [alone] = coldscope.parse_log(plain)
    [run] = coldscope.parse_log(wrapped)
    assert run.status == alone.status == "ok"
    assert (run.time_to_ready_s, run.stages) == (alone.time_to_ready_s, alone.stages)


def test_a_prefix_is_the_files_only_when_most_lines_carry_it() -> None:
    engine = [f"(APIServer pid=1) INFO 05-02 08:15:{s:02d} [x.py:1] line {s}" for s in range(10)]
    # two lines of a table in "name | value" form are not a prefix of the file
    assert repeated_prefix([*engine, "model | Qwen", "dtype | bf16"]) is None
    # Python logging's own "date - name - LEVEL" and SGLang's bracketed stamp are text, kept
    assert repeated_prefix([f"2026-08-02 10:30:1{s},584 - INFO - x" for s in range(5)]) is None
    assert repeated_prefix([f"[2026-06-08 01:57:5{s}] Load weight begin" for s in range(5)]) \
        is None
    found = repeated_prefix([f"api  | {t}" for t in engine])
    assert found is not None and found.example == "api  | "
    assert normalise([f"api  | {t}" for t in engine]).lines == tuple(engine)


def test_vllm_metal_model_loaded_in_reads_into_model_loading() -> None:
    run = _run("vllm-metal-0.12-qwen3-0.6b.log")
    assert run.status == "ok"
    assert run.stages["model_loading"] == pytest.approx(1.01)  # "Model loaded in 1.01s"
    assert run.time_to_ready_s == pytest.approx(14.0)  # 10:01:58 -> 10:02:12


def test_vllm_metal_model_loaded_from_cache_reads_into_model_loading(tmp_path: Path) -> None:
    text = (FLEET / "vllm-metal-0.12-qwen3-0.6b.log").read_text().replace(
        "Model loaded in 1.01s", "Model loaded from cache in 0.004s")
    log = tmp_path / "metal.log"
    log.write_text(text)
    [run] = coldscope.parse_log(log)
    assert run.stages["model_loading"] == pytest.approx(0.004)


def test_the_npu_runners_weights_line_ends_model_loading_on_the_clock(tmp_path: Path) -> None:
    lines = (FLEET / "vllm-ascend-0.9.1-qwen2.5-7b.log").read_text().splitlines(True)
    cut = next(i for i, t in enumerate(lines) if "Loading model weights took" in t) + 1
    log = tmp_path / "ascend-crashed.log"
    log.write_text("".join(lines[:cut]))
    [run] = coldscope.parse_log(log)
    assert run.status == "failed"
    # "Starting to load model" 14:20:24 -> "Loading model weights took 14.2474 GB" 14:20:47
    assert run.stages["model_loading"] == pytest.approx(23.0)


def test_an_ascend_start_up_reads_model_loading_up_to_engine_init() -> None:
    run = _run("vllm-ascend-0.9.1-qwen2.5-7b.log")
    assert run.status == "ok" and run.engine.device == "npu"
    # 14:20:24 -> the start of "init engine ... took 5.61 seconds" (14:20:53 - 5.61)
    assert run.stages["model_loading"] == pytest.approx(23.39)
    assert run.stages["kv_cache_profiling"] == pytest.approx(5.61)
    # its first line (vLLM's import on a platform without Triton, then plugin discovery) is
    # the start: time to ready 14:20:01 -> 14:20:55, bootstrap up to "Starting to load model"
    assert run.time_to_ready_s == pytest.approx(54.0)
    assert run.stages["bootstrap"] == pytest.approx(23.0)
    assert not any("lower bound" in n for n in run.notes)


def test_the_tpu_runners_xla_compilation_passes_add_up_to_torch_compile() -> None:
    run = _run("vllm-tpu-0.9.2-llama3.1-8b.log")
    assert run.status == "ok"
    assert run.substeps["torch_compile/xla"] == pytest.approx(80.87 + 17.06 + 3.12)
    assert run.stages["torch_compile"] == pytest.approx(101.05)
    assert run.time_to_ready_s == pytest.approx(165.0)  # 07:11:40 -> 07:14:25


@pytest.mark.parametrize("prefix", ["\x1b[36mvllm-1  | \x1b[0m", "2026-05-01 23:59:59 | "])
def test_a_restart_behind_a_repeated_prefix_is_cut_as_without_it(tmp_path: Path,
                                                                 prefix: str) -> None:
    plain = FLEET / "vllm-0.11-oom-then-restart.log"
    wrapped = tmp_path / "compose.log"
    wrapped.write_text("".join(prefix + t for t in plain.read_text().splitlines(True)))
    runs = coldscope.parse_log(wrapped)
    assert [(r.status, r.time_to_ready_s) for r in runs] == [("failed", None), ("ok", 30.0)]
    assert runs[0].reason is not None and runs[0].reason.endswith("(line 24)")


def test_another_programs_model_loaded_line_is_not_taken_for_vllms(tmp_path: Path) -> None:
    """The plugin wording is generic: it counts only in a log vLLM's own lines identify, never
    on a collector's clock alone."""
    log = tmp_path / "whisper.log"
    log.write_text("2026-05-03T09:40:11.208Z Loading model: small (VLM: False)\n"
                   "2026-05-03T09:40:14.001Z Model loaded in 2.79s: small\n"
                   "2026-05-03T09:40:14.002Z INFO:     Application startup complete.\n")
    [parsed] = parse_logs([str(log)])
    assert parsed.status == "refused"
