"""The start-up taxonomy, defined once.

Every timeline, table, predictor, plan and report uses these names. Importers map other
vocabularies (the paper's metric keys, vLLM span names, log phrases) onto them at the edge.
"""

from __future__ import annotations

BOOTSTRAP = "bootstrap"
TOKENIZER = "tokenizer"
MODEL_LOADING = "model_loading"
TORCH_COMPILE = "torch_compile"
KV_CACHE_PROFILING = "kv_cache_profiling"
CUDA_GRAPH_CAPTURE = "cuda_graph_capture"

#: The six engine start-up stages, in the order they normally happen.
STAGES: tuple[str, ...] = (
    BOOTSTRAP,
    TOKENIZER,
    MODEL_LOADING,
    TORCH_COMPILE,
    KV_CACHE_PROFILING,
    CUDA_GRAPH_CAPTURE,
)

SERVER_READY = "server_ready"
UNATTRIBUTED = "unattributed"

#: Every bucket of a timeline; their durations sum exactly to time to ready.
BUCKETS: tuple[str, ...] = STAGES + (SERVER_READY, UNATTRIBUTED)


def substep(stage: str, name: str) -> str:
    """Full name of a sub-step nested under ``stage`` (e.g. ``model_loading/weights``)."""
    if stage not in BUCKETS:
        raise ValueError(f"unknown stage {stage!r}")
    return f"{stage}/{name}"


def stage_of(name: str) -> str:
    """The stage a sub-step name (or a stage name) belongs to."""
    stage = name.split("/", 1)[0]
    if stage not in BUCKETS:
        raise ValueError(f"unknown stage {stage!r} in {name!r}")
    return stage


def stages_not_applicable(*, compile_enabled: bool | None, on_cpu: bool,
                          eager: bool | None = None) -> frozenset[str]:
    """The stages that do not apply to a start-up (``Engine.not_applicable``'s default, and
    vLLM's own, on its command or its log): torch.compile does not apply when
    compilation is off; CUDA-graph capture not on a CPU, in eager mode, nor (``eager`` unknown:
    a live run's command says only whether it compiles) without compilation."""
    out = set()
    if compile_enabled is False:
        out.add(TORCH_COMPILE)
    if on_cpu or eager or (eager is None and compile_enabled is False):
        out.add(CUDA_GRAPH_CAPTURE)
    return frozenset(out)
