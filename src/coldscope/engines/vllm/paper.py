"""The parser of "Breaking the Ice" (MLSys 2026) emulated, for comparison (section 5 of vLLM's
log grammar): the metrics it reads from a log and what it misses. Research only: ``parse
--vs-paper`` shows it; nothing else reads it."""


from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from coldscope.core.records import MissedItem
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    TOKENIZER,
    TORCH_COMPILE,
)
from coldscope.engines.roles import LogReading
from coldscope.engines.vllm.grammar import (
    DYNAMO,
    GRAPH_LOAD,
    INDUCTOR,
    INIT_MODEL,
    KV_CACHE_END,
    MEMORY_PROFILING_END,
    WARMUP_START,
    WEIGHTS,
    LogEvidence,
    last_seconds,
    to_microsecond,
    total_seconds,
)

#: What ``timeline.stage_durations`` gives for a log: (stages, substeps, not applicable).
Durations = tuple[dict[str, float], dict[str, float], frozenset[str]]

# --------------------------------------------------------------------------------------------
# The paper's parser, for comparison


#: The metrics of the paper's ``profile_log.py`` that its ``comparison_results.json`` reports.
PAPER_METRICS: tuple[str, ...] = (
    "load_weights",
    "dynamo_transform_time",
    "graph_compile_cached",
    "kv_cache_profiling",
    "graph_capturing",
    "init_engine",
    "tokenizer_init",
    "actual_total_time",
)


def paper_metrics(ev: LogEvidence) -> dict[str, float | None]:
    """The paper parser's metrics, by its definitions, from this evidence.

    Its rules: the last matching line wins; ``load_weights`` falls back to model loading minus
    model init when no "Loading weights took" line exists (tensorizer, Run:ai streamer);
    ``kv_cache_profiling`` is "Memory profiling takes" minus "torch.compile … in total" minus
    the cached graph load; ``actual_total_time`` is the last timestamp minus the first.
    Where its regexes misread a newer wording (``missed`` lists them), this reports the value
    the line actually holds.
    """
    weights = last_seconds(ev, WEIGHTS)
    loading, init_model = last_seconds(ev, MODEL_LOADING), last_seconds(ev, INIT_MODEL)
    if weights is None and loading is not None and init_model is not None:
        weights = loading - init_model
    graph_load = last_seconds(ev, GRAPH_LOAD)
    memory = last_seconds(ev, MEMORY_PROFILING_END)
    kv = None
    if memory is not None:
        kv = memory - (last_seconds(ev, TORCH_COMPILE) or 0.0) - (graph_load or 0.0)
    total = ev.line_clock[-1] if ev.line_clock else None
    return {
        "load_weights": weights,
        "dynamo_transform_time": last_seconds(ev, DYNAMO),
        "graph_compile_cached": graph_load,
        "kv_cache_profiling": kv,
        "graph_capturing": last_seconds(ev, CUDA_GRAPH_CAPTURE),
        "init_engine": last_seconds(ev, KV_CACHE_END),
        "tokenizer_init": last_seconds(ev, TOKENIZER),
        "actual_total_time": total,
    }


class Missed(TypedDict):
    """One thing the paper's parser misses or misreads (``records.MissedItem``'s fields)."""

    what: str
    """A stage or metric."""
    seconds: float | None
    detail: str
    """One line."""


def compared(ev: LogEvidence, durations: Durations) -> tuple[dict[str, float | None],
                                                             list[MissedItem]]:
    """The paper parser's metrics (``paper_metrics``) and what it misses (``missed``) in one
    call: what a reading carries, from the stage durations the reading already has."""
    return paper_metrics(ev), [MissedItem(**m) for m in missed(ev, durations)]


def missed(ev: LogEvidence, durations: Durations | None = None) -> list[Missed]:
    """What the paper's parser misses or misreads in this log; ``durations`` are
    ``timeline.stage_durations(ev)`` (worked out here when not given)."""
    out: list[Missed] = []

    def add(what: str, seconds: float | None, detail: str) -> None:
        out.append({"what": what, "seconds": to_microsecond(seconds), "detail": detail})

    if durations is None:
        from coldscope.engines.vllm.timeline import stage_durations
        durations = stage_durations(ev)
    stages, substeps, _ = durations
    inductor = substeps.get(INDUCTOR)
    if inductor is not None:
        add(
            INDUCTOR,
            inductor,
            f"Inductor compile ('Compiling a graph for ... takes {inductor:g} s') is in none of "
            "the paper's metrics: it only reports dynamo_transform_time and subtracts the "
            "compile total out of kv_cache_profiling",
        )
    dynamo, graph_load = substeps.get(DYNAMO), substeps.get(GRAPH_LOAD)
    if dynamo is not None and graph_load is not None:
        add(
            TORCH_COMPILE,
            dynamo + graph_load,
            f"on a compile-cache hit torch.compile is Dynamo {dynamo:g} s + graph load "
            f"{graph_load:g} s; vLLM's 'torch.compile ... in total' "
            f"({total_seconds(ev, TORCH_COMPILE) or 0:g} s) leaves the graph load out",
        )
    init_model = substeps.get(INIT_MODEL)
    if init_model is not None:
        if "init_model_wording" in ev.paper_blind_spots:
            detail = (
                "stock 'Initializing model took' is not matched: the paper's parser only "
                "knows its patched 'NEW: Initializing Model took'"
            )
        else:
            detail = "parsed by the paper as model_init but in none of its reported metrics"
        add(INIT_MODEL, init_model, detail)
    loading = total_seconds(ev, MODEL_LOADING)
    if loading is not None and "model_loading_unit" in ev.paper_blind_spots:
        add(
            MODEL_LOADING,
            loading,
            "'Model loading took X GB and …' / 'GiB memory and …': the paper's regex wants "
            "'GiB and', so it reads model_loading as 0",
        )
    init_engine = total_seconds(ev, KV_CACHE_END)
    if init_engine is not None and "init_engine_unit" in ev.paper_blind_spots:
        add(
            "init_engine",
            init_engine,
            "'init engine … took X s': the paper's regex wants 'seconds', so it reads 0",
        )
    if "compile_total_wording" in ev.paper_blind_spots:
        add(
            TORCH_COMPILE,
            total_seconds(ev, TORCH_COMPILE),
            "'torch.compile took X s in total': the paper's parser only matches 'takes'",
        )
    memory = total_seconds(ev, MEMORY_PROFILING_END)
    kv = stages.get(KV_CACHE_PROFILING)
    if kv is not None and memory is None:
        add(
            KV_CACHE_PROFILING,
            kv,
            "no 'Memory profiling takes' line here, so the paper reports null; coldscope "
            "derives it from init engine, compile and capture (or the log's clock)",
        )
    elif kv is not None and init_engine is not None and memory is not None:
        rest = init_engine - memory - (stages.get(CUDA_GRAPH_CAPTURE) or 0.0)
        if rest > 0.05:
            add(
                KV_CACHE_PROFILING,
                rest,
                "init engine time after memory profiling and outside capture (KV-cache "
                "allocation, warm-up) is not in the paper's kv_cache_profiling",
            )
    if "capture_whole_seconds" in ev.paper_blind_spots:
        add(
            CUDA_GRAPH_CAPTURE,
            total_seconds(ev, CUDA_GRAPH_CAPTURE),
            "this release prints graph capture in whole seconds ('%.0f secs'): ±0.5 s",
        )
    if (
        ev.named(WARMUP_START)
        and stages.get(TORCH_COMPILE) is not None
        and total_seconds(ev, DYNAMO) is None
    ):
        add(
            TORCH_COMPILE,
            stages[TORCH_COMPILE],
            "compilation inside the CPU warm-up prints no duration; coldscope times it "
            "between 'Warming up model for the compilation' and 'Warming up done'",
        )
    if ev.family == "v0.6" and stages.get(MODEL_LOADING) is not None and loading is None:
        add(
            MODEL_LOADING,
            stages[MODEL_LOADING],
            "V0 prints no loading time (only 'Loading model weights took N GB'); coldscope "
            "times it on the log's clock (1 s resolution); the paper reports null",
        )
    actual = ev.line_clock[-1] if ev.line_clock else None
    if actual is not None and ev.harness_total is not None and abs(actual - ev.harness_total) > 0.5:
        add(
            "actual_total_time",
            actual,
            f"first-to-last timestamp ({actual:g} s) differs from the harness's own "
            f"initialize_engine ({ev.harness_total:g} s): coarse stamps, shutdown lines",
        )
    if "first_line_unstamped" in ev.paper_blind_spots:
        add(
            "actual_total_time",
            None,
            "the first line has no timestamp: the paper's parser raises on this log "
            "(first timestamp of line 0) and reports nothing for it",
        )
    boot = stages.get(BOOTSTRAP)
    if boot is not None:
        add(
            BOOTSTRAP,
            boot,
            f"the paper's framework_bootstrap only sums gaps between a few debug lines; "
            f"coldscope times the engine's start (the log's first line, or the harness's "
            f"start when later) to model loading on the log's clock ({boot:g} s, a lower "
            f"bound: what ran before the first line is in no log)",
        )
    else:
        add(
            BOOTSTRAP,
            None,
            "time before the first log line (interpreter start, imports) is in no log; the "
            "paper's framework_bootstrap only sums gaps between a few debug lines",
        )
    return out


@dataclass
class VLLMReading(LogReading):
    """vLLM's reading of a saved log, with what the paper's parser reads from the same log
    (``roles.ComparedWithPaper``: ``parse --vs-paper`` shows it, the stored run keeps it)."""

    paper_metrics: dict[str, float | None] | None = None
    missed: list[MissedItem] = field(default_factory=list)
