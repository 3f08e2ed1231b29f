"""SGLang's adapter: the one package that knows it. It plays the roles it has
(``engines.roles``): command line and environment, its logs (``LogReader``: the log facts, the
lines that open, finish or fail a start-up in a followed log) and the findings' advice.

Supported through its logs: ``coldscope parse``, ``parse --save``, ``report``, ``fit`` and
``serve --watch`` read SGLang 0.5.x start-ups. Profiling a live SGLang server is not tested
here (SGLang has no CPU build that installs on these machines), so the adapter does not play
``ProcessEvidence`` (probe hooks, OTLP export) or ``TuneCatalogue`` yet.

The log rules themselves are in ``coldscope.engines.sglang.log``, reached only from this
package.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from coldscope.core.records import LogInfo
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
)
from coldscope.core.timeline import Span, from_durations
from coldscope.engines.command import EngineDefaults, flag, starts
from coldscope.engines.roles import (
    FAILED,
    OWN_LINE,
    READY,
    CommandSettings,
    EngineWarning,
    LogFacts,
    LogReading,
)
from coldscope.engines.sglang.markers import BOUNDARY_MARKER, FATAL_RX, LOG_MARKER, STAMP

if TYPE_CHECKING:
    from coldscope.engines.sglang.log import SGLangEvidence

#: Output lines that show SGLang entering a stage, for live progress only.
LIVE_STAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"server_args=ServerArgs\(|Init torch distributed begin", re.I), BOOTSTRAP),
    (re.compile(r"Load weight begin", re.I), MODEL_LOADING),
    (re.compile(r"Load weight end|KV Cache is allocated", re.I), KV_CACHE_PROFILING),
    (re.compile(r"Capture (?:[\w-]+ ){0,2}cuda graph begin", re.I), CUDA_GRAPH_CAPTURE),
    (re.compile(r"Started server process|Application startup complete", re.I), SERVER_READY),
)
_FATAL = re.compile(FATAL_RX)
#: Words every ``FATAL_RX`` alternative holds: a substring test rejects most lines first.
_FATAL_HINTS = ("xception", "failed", "dead", "sigquit", "crashed", "Error in")

#: SGLang's own flags in the findings' advice.
FINDING_ADVICE: dict[str, str] = {
    "cuda_graph_capture_heavy":
        "capture only the batch sizes you serve (SGLang: --cuda-graph-max-bs or "
        "--cuda-graph-bs; the piecewise pass: --piecewise-cuda-graph-max-tokens, or "
        "--disable-piecewise-cuda-graph); seconds at stake is the whole capture, an upper "
        "bound.",
    "kv_profiling_every_start":
        "SGLang sizes its KV cache from the free memory after loading and then allocates it; "
        "fixing the size (--max-total-tokens) skips the sizing, not the allocation, so expect "
        "little from it.",
    "weights_from_disk":
        "keep the weights in memory between start-ups (page cache, tmpfs, a local NVMe copy), "
        "or load them from a running instance or a faster format (SGLang: --load-format).",
    "compile_cache_cold":
        "keep the torch.compile caches between start-ups (TORCHINDUCTOR_CACHE_DIR), or "
        "start without --enable-torch-compile.",
}


class SGLang(EngineDefaults):
    """SGLang's server (``python -m sglang.launch_server --model-path M`` or
    ``sglang serve --model-path M``), read through its logs."""

    name = "sglang"
    title = "SGLang"
    packages: Mapping[str, tuple[str, ...]] = {"sglang": ("sglang",), **EngineDefaults.packages}
    env_prefixes: tuple[str, ...] = ("SGLANG_", "SGL_")
    server_module: str | None = "sglang.launch_server"
    #: What the registry tests before asking this adapter (``engines.roles.LogReader``): a
    #: line it may claim as its own, a line that may be a start-up's boundary.
    log_marker = LOG_MARKER
    boundary_marker = BOUNDARY_MARKER

    def matches(self, argv: Sequence[str]) -> bool:
        """The command starts SGLang's server: ``-m sglang.launch_server`` (any ``sglang.``
        module), the ``sglang`` console script, or a script in an ``sglang`` directory
        (``.../sglang/launch_server.py``); never a substring of another argument."""
        return starts(argv, "sglang", ("sglang",))

    def model(self, argv: Sequence[str]) -> str | None:
        return flag(argv, "--model-path") or flag(argv, "--model")

    def health_url(self, argv: Sequence[str]) -> str:
        host = self.host(argv) or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{flag(argv, '--port') or '30000'}/health"

    def compile_enabled(self, argv: Sequence[str]) -> bool:
        return "--enable-torch-compile" in argv

    def setting_args(self, *, eager: bool = False, capture_sizes: Sequence[int] | None = None,
                     load_format: str | None = None) -> list[str]:
        """SGLang compiles only when asked (``--enable-torch-compile``), so eager means no CUDA
        graphs either (``--disable-cuda-graph``); the batch sizes are ``--cuda-graph-bs``."""
        out = ["--disable-cuda-graph"] if eager else []
        if capture_sizes:
            out += ["--cuda-graph-bs", *map(str, capture_sizes)]
        if load_format:
            out += ["--load-format", load_format]
        return out

    def capture_sizes(self, argv: Sequence[str]) -> int | None:
        """Number of sizes given to ``--cuda-graph-bs`` (space-separated)."""
        for i, arg in enumerate(argv):
            if arg == "--cuda-graph-bs":
                values = []
                for nxt in argv[i + 1:]:
                    if nxt.startswith("-"):
                        break
                    values.append(nxt)
                return len(values) or None
        return None

    def describe(self, argv: Sequence[str]) -> CommandSettings:
        return {**super().describe(argv), "load_format": flag(argv, "--load-format")}

    def version(self, packages: Mapping[str, str | None], log: LogInfo | None) -> str | None:
        return packages.get("sglang") or super().version(packages, log)

    def log_spans(self, lines: Sequence[tuple[float, str]]) -> tuple[list[Span], LogInfo | None]:
        """Spans from output lines with their arrival times: the saved log's rules, on the
        arrival clock instead of the stamps."""
        from coldscope.engines.sglang.log import parse_sglang_log, sglang_spans
        ev = parse_sglang_log([text for _, text in lines])
        if not ev.recognised:
            return [], None
        arrival = [t for t, _ in lines]
        ready = ev.first("ready")
        spans = sglang_spans(ev, lambda e: arrival[e.line_no], ready=ready)
        return spans, _info(ev)

    def first_own_line(self, lines: Sequence[str]) -> int | None:
        """Own lines carry SGLang's ``[YYYY-MM-DD HH:MM:SS]`` stamp, its banner its name: a
        head with neither (a vLLM log) is declined without running the rules."""
        if not any(LOG_MARKER.search(t) for t in lines):
            return None
        from coldscope.engines.sglang.log import first_own_line
        return first_own_line(lines)

    def read_log(self, lines: Sequence[str]) -> LogReading | None:
        """A saved SGLang log read alone; None unless a line only SGLang prints is there."""
        from coldscope.engines.sglang.log import parse_sglang_log, sglang_reading
        ev = parse_sglang_log(lines)
        if not ev.recognised:
            return None
        read = sglang_reading(ev)
        timeline = read.timeline if read.timeline is not None else \
            from_durations({}, source="log")
        return LogReading(engine=self, timeline=timeline, info=_info(ev),
                          time_to_ready_from="timestamps" if read.failure is None else None,
                          failure=read.failure, notes=read.notes)

    def live_stage(self, line: str) -> str | None:
        if "[" not in line or not STAMP.search(line):
            return None
        for pattern, stage in LIVE_STAGES:
            if pattern.search(line):
                return stage
        return None

    def log_facts(self, lines: Sequence[str]) -> LogFacts | None:
        """The findings' facts of an SGLang log; None when it is not one."""
        from coldscope.engines.sglang.log import describe, parse_sglang_log, sglang_reading
        ev = parse_sglang_log(lines)
        if not ev.recognised:
            return None
        read = sglang_reading(ev)
        facts = describe(ev)
        sizing = None  # load end -> KV pool allocated, without a hierarchical cache's host part
        if read.timeline is not None and read.timeline.stages.get(KV_CACHE_PROFILING) is not None:
            sizing = (read.timeline.stages[KV_CACHE_PROFILING] or 0.0) - \
                read.timeline.substeps.get(f"{KV_CACHE_PROFILING}/host_cache", 0.0)
        pool = ev.first("kv_allocated")
        return LogFacts(
            memory_profiling_line=pool.line_no if pool is not None else None,
            memory_profiling_s=sizing,
            compile_enabled=facts["compile_enabled"],
            capture_sizes=facts["capture_sizes"],
            device=facts["device"],
            model=facts["model"],
            ready_line=read.ready.line_no if read.ready is not None else None,
            warnings=tuple(EngineWarning(i, level, where, msg)
                           for i, level, where, msg in ev.warnings),
        )

    def startup_boundary(self, line: str) -> str | None:
        """``ready`` (``The server is fired up and ready to roll!``), ``failed`` (the
        scheduler or the launcher says so), ``start:server`` (``server_args=ServerArgs(``),
        and ``OWN_LINE`` for SGLang's own ``Application startup complete.``, which is not its
        ready line (the warm-up request follows). Substring tests first."""
        if "ready to roll" in line:
            return READY
        if "server_args=ServerArgs(" in line and STAMP.search(line):
            return "start:server"
        if "startup complete" in line and STAMP.search(line):
            return OWN_LINE
        if any(h in line for h in _FATAL_HINTS) and _FATAL.search(line) and STAMP.search(line):
            return FAILED
        return None

    def advice(self, finding_id: str) -> str | None:
        return FINDING_ADVICE.get(finding_id)


def _info(ev: SGLangEvidence) -> LogInfo:
    from coldscope.engines.sglang.log import describe
    version = ev.version
    family = "sglang" if version is None else "sglang-" + ".".join(version.split(".")[:2])
    return LogInfo(version=version, family=family, device=describe(ev)["device"])
