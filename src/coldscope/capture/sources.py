"""Evidence sources behind one protocol, in one registry.

A source turns the raw evidence of one kind (as the runner collected it and the store keeps
it) into timeline ``Span`` objects, plus facts it learnt on the way. What a source needs to
know about the engine (log formats, span names) it asks the run's engine adapter
(``ctx.engine``), so sources know no engine by name.

Adding a source: a class with ``kind`` and ``spans(raw, ctx)``, registered in ``SOURCES``, and
the runner (or any other collector) storing raw evidence under that kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from coldscope.core.stages import MODEL_LOADING
from coldscope.core.timeline import Span

if TYPE_CHECKING:
    from coldscope.capture.otlp import OtelSpan
    from coldscope.capture.probe import ProbeEvent, ProcessRole
    from coldscope.core.records import LogInfo
class EngineReader(Protocol):
    """What the sources ask of a run's engine (``coldscope.engines.RunReader`` puts it together
    from the command's adapter and the adapter of its log)."""

    def log_spans(self, lines: Sequence[tuple[float, str]]) -> tuple[list[Span],
                                                                      LogInfo | None]: ...

    def otel_spans(self, spans: Sequence[OtelSpan], *, origin_unix: float,
                   compile_enabled: bool) -> list[Span]: ...

    @property
    def process_roles(self) -> Sequence[ProcessRole]: ...

    def not_applicable(self, *, compile_enabled: bool | None, on_cpu: bool,
                       eager: bool | None = None) -> frozenset[str]:
        """The stages that do not apply to the run: the engine adapter's answer."""
        ...


@dataclass(frozen=True)
class Context:
    """What reconciliation knows of a run besides its evidence: the engine adapter, the
    launch clocks (monotonic and Unix seconds), the root pid, when it became ready (seconds
    since launch), whether torch.compile was on and whether the machine has a GPU."""

    engine: EngineReader
    launch_mono: float = 0.0
    launch_wall: float = 0.0
    root_pid: int | None = None
    ready_at: float | None = None
    compile_enabled: bool = True
    has_gpu: bool = False


@dataclass
class SourceResult:
    spans: list[Span]
    facts: dict[str, Any] = field(default_factory=dict)


class EvidenceSource(Protocol):
    """One kind of raw evidence -> spans."""

    kind: str
    """The key the raw evidence is stored under (``log``, ``probe``, ``otel``)."""

    def spans(self, raw: Any, ctx: Context) -> SourceResult: ...


class LogSource:
    """Engine output lines with their arrival times, through the engine's log adapters.
    Facts: ``log_info`` (``records.LogInfo``)."""

    kind = "log"

    def spans(self, raw: Sequence[Sequence[Any]], ctx: Context) -> SourceResult:
        lines = [(float(t), str(text)) for t, text in raw]
        spans, info = ctx.engine.log_spans(lines)
        return SourceResult(spans, {"log_info": info})


class ProbeSource:
    """The in-process probe's events (``coldscope/probe/sitecustomize.py``). Facts:
    ``processes`` (``records.ProcessRecord`` per probed process) and ``weights_reads``
    (``capture.probe.StorageRead`` of each ``model_loading/weights`` call)."""

    kind = "probe"

    def spans(self, raw: Sequence[ProbeEvent], ctx: Context) -> SourceResult:
        from coldscope.capture.probe import (
            probe_spans,
            process_table,
            processes_from_events,
            storage_reads,
        )
        if ctx.root_pid is None:
            return SourceResult([])
        roles = ctx.engine.process_roles
        processes = processes_from_events(raw, roles)
        spans = probe_spans(processes, launch_mono=ctx.launch_mono, root_pid=ctx.root_pid,
                            ready_at=ctx.ready_at, compile_enabled=ctx.compile_enabled,
                            roles=roles)
        table = process_table(processes, ctx.launch_mono)
        reads = storage_reads(processes, f"{MODEL_LOADING}/weights")
        return SourceResult(spans, {"processes": table, "weights_reads": reads})


class OtelSource:
    """The engine's own OpenTelemetry spans, as received, mapped by the engine's span map."""

    kind = "otel"

    def spans(self, raw: list[dict[str, Any]], ctx: Context) -> SourceResult:
        from coldscope.capture.otlp import OtelSpan
        received = [OtelSpan.from_dict(d) for d in raw]
        return SourceResult(ctx.engine.otel_spans(
            received, origin_unix=ctx.launch_wall, compile_enabled=ctx.compile_enabled))


#: Every evidence source, by kind, in the order their spans are listed in a timeline.
SOURCES: dict[str, EvidenceSource] = {LogSource.kind: LogSource(), ProbeSource.kind: ProbeSource(),
                                      OtelSource.kind: OtelSource()}
