"""Building ``Run`` records: a profiled run finished from its raw evidence, or a saved log read
alone. The one place that puts evidence, timeline and findings together, so every run, however
it was made, carries the same fields.

The pieces stay where they belong: reconciliation in ``coldscope.capture.reconcile`` (pure),
engine knowledge in ``coldscope.engines``, rules in ``coldscope.analysis.findings``; this module
only
assembles them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coldscope.capture.reconcile import apply, build_timeline
from coldscope.capture.sources import Context
from coldscope.core.records import Origin, Run, Tool
from coldscope.core.version import __version__

if TYPE_CHECKING:
    from coldscope.engines import LogFacts


def finish(run: Run, evidence: Mapping[str, Any], ctx: Context) -> Run:
    """A measured run completed from its raw evidence: for a run that became ready, the
    reconciled timeline, the log's facts and the probe's processes; for every run, its
    findings. Evidence handling never loses the run: a failure becomes a note."""
    if run.status == "ok" and ctx.ready_at is not None:
        try:
            run = apply(run, build_timeline(evidence, ctx))
        except Exception as exc:  # a bug in evidence handling must not lose the run
            run = run.evolve(notes=[*run.notes, f"timeline could not be built: {exc!r}"])
    from coldscope.analysis.findings import findings_for_run
    findings = findings_for_run(run, evidence.get("log") or [])
    return run.evolve(findings=findings) if findings else run


#: Lines of a log a run keeps as its ``log_tail``.
TAIL_LINES = 40


def run_from_log(lines: Sequence[str], *, name: str, origin: Origin = "log",
                 started_at: str | None = None) -> Run:
    """A saved engine log read alone, as a ``Run`` (``parse``, ``parse --save``, the serve
    watcher). The engine is whichever registered adapter recognises the log; stages the log
    cannot show are unknown, and so is the cache state. A log that never shows the engine
    ready is a failed run saying so. Raises ``ColdscopeError`` if no adapter knows the log."""
    return read_run(lines, name=name, origin=origin, started_at=started_at)[0]


def read_run(lines: Sequence[str], *, name: str, origin: Origin = "log",
             started_at: str | None = None) -> tuple[Run, LogFacts | None]:
    """``run_from_log``, and the findings' facts of the same reading (the engine's own; None
    when it gives none), so that a caller needs no second reading for them.

    ``lines`` may be a ``logtext.NumberedLines`` (a saved log read with long runs of blank
    lines left out): the engines quote its own line numbers, and the findings rules look
    lines up by them."""
    from dataclasses import replace

    from coldscope.analysis.findings import findings_from_log
    from coldscope.capture.logtext import NumberedLines
    from coldscope.core.records import EngineInfo
    from coldscope.engines import ComparedWithPaper, LogFacts, read_log
    from coldscope.util.errors import ColdscopeError
    reading = read_log(lines)  # identified once: the reading carries its engine
    if reading is None:
        raise ColdscopeError(f"{name} does not look like a log of a known engine "
                             "(no known line found)")
    engine = reading.engine
    if reading.refused is not None:
        raise ColdscopeError(f"{name}: refused: {reading.refused}")
    facts = reading.facts if reading.facts is not None else engine.log_facts(lines)
    # the rules read these facts (none: empty ones, as findings_from_log would) and quote
    # lines by the numbers the engine gave
    by_number = lines.by_number() if isinstance(lines, NumberedLines) else list(lines)
    findings = findings_from_log(by_number, replace(reading, facts=facts or LogFacts()))
    info = reading.info
    paper = reading if isinstance(reading, ComparedWithPaper) else None
    ready = reading.timeline.time_to_ready is not None and reading.failure is None
    reason = reading.failure or ("the log never shows the engine ready (truncated, or it "
                                 "failed during start-up)")
    run = Run(
        id=name, status="ok" if ready else "failed",
        reason=None if ready else reason,
        cache="unknown", origin=origin,
        started_at=started_at or dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        tool=Tool(version=__version__),
        engine=EngineInfo(name=engine.name, version=info.version, family=info.family,
                          device=info.device, enforce_eager=info.enforce_eager,
                          model=reading.model),
        model=_model_ref(reading.model),
        log_info=info, log_tail="\n".join(lines[-TAIL_LINES:]),
        paper_metrics=paper.paper_metrics if paper is not None else None,
        missed_by_paper_parser=paper.missed if paper is not None else [],
        findings=findings,
        notes=list(reading.notes),
    )
    return run.with_timeline(reading.timeline), facts


def _model_ref(model: str | None) -> Any:
    """The model a log names: its last part is the name (as ``serve`` names models: a hub id
    ``Qwen/Qwen3-8B`` is ``Qwen3-8B``; the engine record keeps the argument as given); a local
    path is also kept as the path."""
    from pathlib import PurePosixPath

    from coldscope.core.records import ModelRef
    if not model:
        return ModelRef()
    name = PurePosixPath(model.rstrip("/")).name or model
    if model.startswith(("/", "./", "../", "~")):
        return ModelRef(path=model, name=name)
    return ModelRef(name=name)
