"""The roles an engine adapter may play, one small protocol each, and the engine-neutral records
they hand back: a saved log's reading (``LogReading``, carrying the engine that read it), the
facts the findings rules read (``LogFacts``), and what one line of a followed log means to a
start-up.

Every adapter plays ``Engine`` (its command line and environment: ``EngineDefaults`` gives the
defaults). The other roles it plays only when it has them: ``LogReader`` (its saved and followed
logs), ``ProcessEvidence`` (its processes, the probe's hooks, its OpenTelemetry spans),
``TuneCatalogue`` (the start-up knobs ``tune`` may try), ``FindingsAdvice`` (its own flags in
the findings' advice) and ``StandbyLaunch`` (what a standby launcher imports for it). A caller
asks ``isinstance(engine, LogReader)`` (the protocols are runtime-checkable), never the
engine's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

from coldscope.core.records import LogInfo
from coldscope.core.timeline import Timeline

if TYPE_CHECKING:
    from coldscope.capture.otlp import OtelSpan
    from coldscope.capture.probe import ProcessRole
    from coldscope.core.records import MissedItem
    from coldscope.core.timeline import Span
    from coldscope.engines.knobs import Knob


class CommandSettings(TypedDict, total=False):
    """``records.EngineInfo`` fields a command line gives (``Engine.describe``)."""

    name: str
    argv: list[str]
    model: str | None
    compile: bool
    enforce_eager: bool
    load_format: str | None


@runtime_checkable
class Engine(Protocol):
    """Command and environment: the role every adapter plays. ``argv`` is always the full
    engine command line as the user gave it (interpreter and script included)."""

    name: str
    """Short name stored in ``Run.engine.name``."""
    title: str
    """The engine's own spelling, for people (``vLLM``)."""
    packages: Mapping[str, tuple[str, ...]]
    """Python packages whose versions the environment records (the engine's first), each
    with the distribution names to try."""
    env_prefixes: tuple[str, ...]
    """Prefixes of the engine's own environment variables (recorded with each run)."""
    server_module: str | None
    """The module ``python -m`` starts the engine's server with; ``coldscope releases`` builds
    each release's command from it and proves an environment by importing it. None: unknown."""
    import_breakers: Mapping[str, tuple[str, ...]]
    """Per distribution of the engine: packages pip installs beside it that break the engine's
    imports (removed from an environment coldscope makes when its import check fails)."""
    compile_factors_file: str | None
    """The file the engine writes beside its compiled graphs recording its cache key's
    factors (JSON), or None."""

    def matches(self, argv: Sequence[str]) -> bool:
        """True when this command line starts this engine."""
        ...

    def model(self, argv: Sequence[str]) -> str | None: ...
    def served_model(self, argv: Sequence[str]) -> str | None:
        """The model name to send in the first request."""
        ...
    def health_url(self, argv: Sequence[str]) -> str: ...
    def host(self, argv: Sequence[str]) -> str | None:
        """The address the command binds, when it sets one."""
        ...
    def with_host(self, argv: Sequence[str], host: str) -> list[str] | None:
        """``argv`` binding ``host`` (used to keep the engine off the network by default);
        None when the adapter does not know how."""
        ...
    def compile_enabled(self, argv: Sequence[str]) -> bool: ...
    def capture_sizes(self, argv: Sequence[str]) -> int | None:
        """How many CUDA-graph capture sizes the command line asks for, if it says."""
        ...
    def setting_args(self, *, eager: bool = False, capture_sizes: Sequence[int] | None = None,
                     load_format: str | None = None) -> list[str]:
        """This engine's own command-line options for coldscope's typed settings (a campaign's
        flag sets): compilation off, the CUDA-graph batch sizes to capture, the weight loader.
        Raises ``ColdscopeError`` for a setting the engine has no option for."""
        ...
    def compile_key_inputs(self, argv: Sequence[str],
                           env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """The command's settings and the environment variables (of ``env``, the engine's
        whole environment) that the engine's compile-cache key may depend on: what
        ``compile_cache_miss`` compares between two runs. Settings that only place the server
        or its caches (host, port, cache paths) are left out."""
        ...
    def describe(self, argv: Sequence[str]) -> CommandSettings:
        """``records.EngineInfo`` fields read from the command line."""
        ...
    def server_command(self, python: str, args: Sequence[str]) -> list[str]:
        """The command that starts the engine's server with ``python`` (an environment's
        interpreter) and the user's ``args``."""
        ...
    def env_defaults(self) -> dict[str, str]:
        """Variables set unless the user's environment already has them."""
        ...
    def cache_env(self, root: Path) -> dict[str, str]:
        """Cache-directory variables pointing under ``root`` (one run's or one config's)."""
        ...
    def version(self, packages: Mapping[str, str | None], log: LogInfo | None) -> str | None: ...
    def not_applicable(self, *, compile_enabled: bool | None, on_cpu: bool,
                       eager: bool | None = None) -> frozenset[str]:
        """The stages that do not apply to a start-up of this engine: the adapter's answer,
        for a live run (``eager`` None: the command says only whether it compiles) and for the
        adapter's own log reading alike."""
        ...


@runtime_checkable
class LogReader(Protocol):
    """The engine's logs: which lines are its own, a saved log read alone, a followed log's
    lines as they arrive."""

    def first_own_line(self, lines: Sequence[str]) -> int | None:
        """The index of the first of ``lines`` that only this engine prints (its own marker),
        or None: how ``engines.identify_log`` tells whose log it is from its first lines."""
        ...
    def read_log(self, lines: Sequence[str]) -> LogReading | None:
        """A saved log read alone; None when it holds nothing this adapter reads."""
        ...
    def log_facts(self, lines: Sequence[str]) -> LogFacts | None:
        """What a log says that the findings rules read; None when it says nothing to this
        adapter."""
        ...
    def log_spans(self, lines: Sequence[tuple[float, str]]) -> tuple[list[Span], LogInfo | None]:
        """Spans from output lines with their arrival times (seconds since launch)."""
        ...
    def live_stage(self, line: str) -> str | None:
        """The stage an output line shows the engine entering, as it arrives (for progress
        displays; the timeline itself comes from all evidence afterwards)."""
        ...
    def startup_boundary(self, line: str) -> str | None:
        """Where one line of a followed log stands in a start-up: ``"start:<what>"`` when it
        opens one (a second start line with the same ``<what>`` before readiness means the
        replica restarted), ``"ready"``, ``"failed"``, ``OWN_LINE`` for a line of its own that
        means none of these, else None. Called for every line, so it should reject most lines
        with a cheap test first."""
        ...


@runtime_checkable
class LogEngine(Engine, LogReader, Protocol):
    """An engine whose logs coldscope reads: what ``identify_log`` gives and a ``LogReading``
    carries."""


@runtime_checkable
class ProcessEvidence(Protocol):
    """The engine's processes as the probe and its own spans show them."""

    def otlp(self, argv: Sequence[str], endpoint: str) -> tuple[list[str], dict[str, str]] | None:
        """Arguments and environment that make the engine send its spans to ``endpoint``;
        None when it cannot, or the user already points it elsewhere."""
        ...
    def otel_spans(self, spans: Sequence[OtelSpan], *, origin_unix: float,
                   compile_enabled: bool) -> list[Span]:
        """Stage spans (seconds since launch) from the engine's own OpenTelemetry spans."""
        ...
    def probe_hooks(self) -> tuple[tuple[str, str, str], ...]:
        """(module, qualified function, event name) the in-process probe wraps."""
        ...
    @property
    def process_roles(self) -> tuple[ProcessRole, ...]:
        """The engine's processes besides the one coldscope launched, as the probe tells them
        apart (by the events of ``probe_hooks``), and the bootstrap sub-steps that time each
        one's start."""
        ...


@runtime_checkable
class TuneCatalogue(Protocol):
    """The start-up knobs ``coldscope tune`` may try on this engine."""

    def tune_catalogue(self, python: str | None) -> tuple[dict[str, Any], list[Knob]]:
        """What the engine installed for ``python`` can do (its version, options, variables:
        JSON, recorded with a tune session) and the knobs ``tune`` may try, those it cannot do
        kept with the reason. ``ColdscopeError`` when the engine cannot be inspected."""
        ...


@runtime_checkable
class FindingsAdvice(Protocol):
    """The engine's own flags and variables in the findings' advice."""

    def advice(self, finding_id: str) -> str | None:
        """This engine's advice for a finding, replacing the rule's engine-neutral advice;
        None to keep that."""
        ...


@runtime_checkable
class StandbyLaunch(Protocol):
    """What a standby launcher of this engine (``coldscope standby``) imports before any
    request, and the hook its forked child runs before the engine's server starts."""

    def standby_modules(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The modules the engine's processes import (its server, engine core and workers,
        for every platform: one that fails to import is recorded and skipped). Importing them
        must initialise no device."""
        ...
    def standby_hook(self) -> Path | None:
        """A standard-library file, run by path in the engine's interpreter, whose
        ``prepare_child()`` the launcher's child calls before the server starts (so that the
        engine's own child processes start from the prepared process); None: no hook."""
        ...


@runtime_checkable
class ComparedWithPaper(Protocol):
    """A reading that also carries what the parser of "Breaking the Ice" (MLSys 2026) reads
    from the same log (``parse --vs-paper``): vLLM's reading, where that parser's emulation
    lives (``engines.vllm.paper``)."""

    paper_metrics: dict[str, float | None] | None
    missed: list[MissedItem]


# -- what the roles hand back ------------------------------------------------------------------

#: What ``Engine.startup_boundary`` says of one line of a followed log.
START_PREFIX = "start:"
READY = "ready"
FAILED = "failed"
#: An engine's answer for a line it knows to be its own and that neither opens, finishes nor
#: fails a start-up, so that no later engine reads it as one of its own lines (SGLang's
#: ``Application startup complete.`` comes before its warm-up request; to vLLM it is the ready
#: line). ``LogReader.startup_boundary`` callers treat it as None.
OWN_LINE = "own"
#: An engine's answer for a line its process prints as it starts, before the line that opens
#: a start-up (vLLM's platform detection and plugin discovery on ``import vllm``): where a
#: start-up's launch shows first (``ingest.logfiles.startups`` begins one there, after the one
#: before it ended). Opens, finishes and fails nothing: callers that only follow start-ups
#: treat it as None.
LAUNCH = "launch"



@dataclass
class LogReading:
    """What an engine's log adapter read from a saved log (no arrival times): the timeline the
    log alone can show, the engine facts it states, and the engine that read it (identified
    once, from the log's first lines, and carried with the reading from there on)."""

    engine: LogEngine
    """The adapter that read the log: later stages ask it, never the registry."""
    timeline: Timeline
    info: LogInfo
    time_to_ready_from: str | None = None
    failure: str | None = None
    """Why the start-up did not finish, quoted from the log (a traceback's last line, an
    ``ERROR`` after engine init, "cut off after ..."); None when it reached its ready line.
    A reading with a failure is a ``failed`` run, never ``ok``, whatever its timeline shows."""
    notes: list[str] = field(default_factory=list)
    """How the adapter read the log: which line won where evidence overlapped or contradicted,
    lines it ignored (another service's, a repeated summary), the rank it reported."""
    refused: str | None = None
    """Why the log's evidence cannot be reconciled into one timeline (one line); a refused
    reading is reported as such, never as a run."""
    facts: LogFacts | None = None
    """What the same reading says for the findings rules, so that they do not read the log a
    second time (None: the adapter gives none)."""
    model: str | None = None
    """The model the log names (the engine's arguments or banner)."""


@dataclass(frozen=True)
class LogLine:
    """One line a finding quotes: its 0-based index in the lines read, and its message (the
    line without the engine's process/level/time prefix)."""

    line_no: int
    message: str


@dataclass(frozen=True)
class EngineWarning:
    """A warning or error the engine logged: its line (0-based), level (``WARNING``,
    ``ERROR``, ``CRITICAL``), where the engine says it came from, and the message."""

    line_no: int
    level: str
    where: str
    message: str


@dataclass(frozen=True)
class LogFacts:
    """What an engine's log says that ``coldscope.analysis.findings`` reads, in engine-neutral
    terms.

    Each engine's adapter reads its own format into this, so the rules never parse a log
    themselves. Line numbers are 0-based indexes into the lines given; seconds are on the
    log's own clock (its timestamps). Every field is optional: a rule whose fact is missing
    stays silent.
    """

    compile_enabled: bool | None = None
    """Whether the engine compiled its model (None: the log does not say)."""
    compile_cache: str | None = None
    """``"miss"`` when any graph was compiled, ``"hit"`` when graphs were only loaded from the
    compile cache, None when the log shows neither."""
    compile_cache_load_failed: LogLine | None = None
    """The first line saying a compile cache was there but could not be used (so the graphs
    were compiled again)."""
    recompile_s: float | None = None
    """Seconds from that line to the line saying the new compile was done."""
    capture_sizes: int | None = None
    """How many CUDA-graph batch sizes the engine was configured to capture."""
    device: str | None = None
    """The device the engine ran on (``cuda``, ``cpu``, ...)."""
    memory_profiling_line: int | None = None
    """The line reporting the memory profiling that sizes the KV cache."""
    memory_profiling_s: float | None = None
    """The seconds that line reports."""
    ready_line: int | None = None
    """The first line showing the server ready (the start-up's lines end there)."""
    warnings: tuple[EngineWarning, ...] = ()
    """The engine's warnings and errors, in order, except lines other facts already report
    (the compile-cache load failure) and those of a shutdown."""
    child_process_gaps: Mapping[str, float] = field(default_factory=dict)
    """Per child process role (``engine_core``, ``worker``: the probe's roles): seconds
    between the last timestamped line before the process's first line and that first line,
    i.e. its spawn and imports as the log sees them."""
    model: str | None = None
    """The model path the log names (an engine echoing its arguments), if any."""
    compile_saved: LogLine | None = None
    """The first line saying compiled artefacts were written to the compile cache: with a
    compile and no cache hit, the log itself shows the cache was cold."""
    weights_download: LogLine | None = None
    """The line saying the engine downloaded its weights during start-up."""
    weights_download_s: float | None = None
    """The seconds that line reports (the slowest process's)."""
    startup_plan: LogLine | None = None
    """The line saying the KV-cache size came from a persisted start-up plan or a configured
    size, so memory profiling was skipped."""
    compile_dirs: tuple[str, ...] = ()
    """The compile-cache directories the log names (the one the engine chose, saved to,
    loaded from or failed to load from), in order of first mention, each once: the cache key
    the engine used, as a path."""
