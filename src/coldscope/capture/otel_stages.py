"""vLLM's OpenTelemetry start-up span names mapped onto coldscope's stages, once.

Container spans ("Overall Loading", "Executor init", "Prepare model", ...) wrap several stages
and are kept only as raw spans in the run record; the spans below name one stage or sub-step.
"""

from __future__ import annotations

from collections.abc import Iterable

from coldscope.capture.otlp import OtelSpan
from coldscope.stages import (
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TORCH_COMPILE,
)
from coldscope.timeline import Span

SPAN_STAGES: dict[str, str] = {
    "Loading (CPU)": MODEL_LOADING,
    "Loading (GPU)": MODEL_LOADING,
    "Load model": MODEL_LOADING,
    "Initialize model": f"{MODEL_LOADING}/init_model",
    "Load weights": f"{MODEL_LOADING}/weights",
    "Download weights - HF": f"{MODEL_LOADING}/download",
    "Compile graph": TORCH_COMPILE,
    "Inductor compilation": f"{TORCH_COMPILE}/inductor",
    "Allocate KV cache": f"{KV_CACHE_PROFILING}/allocate",
    "Capture model": CUDA_GRAPH_CAPTURE,
    "API server setup": SERVER_READY,
    "Init device": "bootstrap/init_device",
}

#: Warm-up compiles the model when torch.compile is on; in eager mode it is a plain dummy pass.
WARMUP_SPANS = ("Warmup (CPU)", "Warmup (GPU)")

_ROLE = {"vllm.llm_engine": "api_server", "engine_core": "engine_core", "worker": "worker"}


def otel_spans_to_stage_spans(
    spans: Iterable[OtelSpan], *, origin_unix: float, compile_enabled: bool
) -> list[Span]:
    """Stage spans (seconds since launch) from the engine's own spans; request spans and
    container spans are left out."""
    out: list[Span] = []
    for s in spans:
        name = SPAN_STAGES.get(s.name)
        if s.name in WARMUP_SPANS:
            name = f"{TORCH_COMPILE}/warmup" if compile_enabled else f"{KV_CACHE_PROFILING}/warmup"
        if name is None:
            continue
        out.append(
            Span(
                name=name,
                start=s.start - origin_unix,
                end=s.end - origin_unix,
                source="span",
                process=_ROLE.get(s.process_kind or "", s.process_kind or "engine"),
                pid=s.pid,
            )
        )
    return out
