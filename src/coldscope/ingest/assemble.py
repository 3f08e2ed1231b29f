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
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coldscope.capture.reconcile import apply, build_timeline
from coldscope.capture.sources import Context
from coldscope.core.records import Gpu, Origin, Run, Tool
from coldscope.core.version import __version__

if TYPE_CHECKING:
    from coldscope.engines import LogEngine, LogFacts


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
                 started_at: str | None = None, mtime: float | None = None) -> Run:
    """A saved engine log read alone, as a ``Run`` (``parse``, ``parse --save``, the serve
    watcher). The engine is whichever registered adapter recognises the log; stages the log
    cannot show are unknown, and so is the cache state. A log that never shows the engine
    ready is a failed run saying so. Raises ``ColdscopeError`` if no adapter knows the log."""
    return read_run(lines, name=name, origin=origin, started_at=started_at, mtime=mtime)[0]


def read_run(lines: Sequence[str], *, name: str, origin: Origin = "log",
             started_at: str | None = None, mtime: float | None = None,
             engine: LogEngine | None = None) -> tuple[Run, LogFacts | None]:
    """``run_from_log``, and the findings' facts of the same reading (the engine's own; None
    when it gives none), so that a caller needs no second reading for them.

    ``lines`` may be a ``logtext.NumberedLines`` (a saved log read with long runs of blank
    lines left out): the engines quote its own line numbers, and the findings rules look
    lines up by them. ``engine``: the adapter the caller identified the log's engine as
    (``ingest.logfiles.startups`` does, once per file), read with it rather than identified
    again; when it reads nothing there, the lines' own engine is looked for.

    ``started_at`` (default): the log's own time, its first dated line (``log_started_at``,
    the year from ``mtime``, the file's modification time, when the stamps have none). The
    timeline of an engine that gives durations alone is laid end to end
    (``store.logruns.laid_end_to_end``), so that the trace and the report draw its stages;
    the GPU the log names is the run's (``log_gpus``)."""
    from dataclasses import replace

    from coldscope.analysis.findings import findings_from_log
    from coldscope.capture.logtext import NumberedLines
    from coldscope.core.records import EngineInfo, Environment
    from coldscope.engines import ComparedWithPaper, LogFacts, read_log
    from coldscope.store.logruns import laid_end_to_end
    from coldscope.util.errors import ColdscopeError
    reading = read_log(lines, engine)  # identified once: the reading carries its engine
    if reading is None and engine is not None:
        reading = read_log(lines)
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
    notes = list(reading.notes)
    if started_at is None:
        started_at, unknown_year = log_started_at(lines, mtime)
        if unknown_year:
            notes.append(f"{NO_YEAR}: started_at shows it as {UNKNOWN_YEAR}" if started_at
                         else f"{NO_YEAR}: no line is dated, started_at is unknown")
    run = Run(
        id=name, status="ok" if ready else "failed",
        reason=None if ready else reason,
        cache="unknown", origin=origin,
        started_at=started_at,
        tool=Tool(version=__version__),
        engine=EngineInfo(name=engine.name, version=info.version, family=info.family,
                          device=info.device, enforce_eager=info.enforce_eager,
                          model=reading.model),
        model=_model_ref(reading.model),
        environment=Environment(gpus=log_gpus(lines, info.device)),
        log_info=info, log_tail="\n".join(lines[-TAIL_LINES:]),
        paper_metrics=paper.paper_metrics if paper is not None else None,
        missed_by_paper_parser=paper.missed if paper is not None else [],
        findings=findings,
        notes=notes,
    )
    return run.with_timeline(laid_end_to_end(reading.timeline)), facts


#: A date and time of day with its year (ISO 8601, a space or ``T`` between them; SGLang's
#: stamps, a collector's), and the zone when one follows.
_DATED = re.compile(r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                    r"(Z|[+-]\d{2}:?\d{2})?(?![\d:])")
#: A month-day and time of day without a year (vLLM's ``INFO 10-06 08:03:19``).
_YEARLESS = re.compile(r"(?<![\d-])(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d+)?(?![\d:])")
#: How the note on a run whose log's stamps give no year begins.
NO_YEAR = "the log's stamps give no year"
#: Year written for a log's time whose year nothing tells (``log_started_at``): never a
#: number, so that no reader takes it for a real one (``datetime.fromisoformat`` refuses it;
#: ``export`` writes null); its month, day and time stay, as the log gives them. Runs sorted by
#: ``started_at`` put these after every dated one.
UNKNOWN_YEAR = "????"
#: A leap year, to check a year-less stamp's month and day (29 February is a date).
_LEAP = "2000"
#: Lines ``log_started_at`` looks through for the first dated one.
STAMP_LINES = 2000


def log_started_at(lines: Sequence[str], mtime: float | None = None) -> tuple[str, bool]:
    """When a saved log's start-up began, by the log's own clock: the stamp of its first line
    that carries a date and a time (ISO, with its zone when it has one; else the engine's
    month-day stamp), as ISO 8601, and whether its year is unknown. A month-day stamp gets the
    year of ``mtime`` (the file's modification time: the log was written up to then), the
    year before when the date would fall after it; without ``mtime`` (standard input) the
    year is written ``UNKNOWN_YEAR`` (``????-10-06T07:54:20``), never a made-up number. A log
    with no dated line gives the file's modification time, or read from standard input ""
    (unknown, as for any run whose start is not known): never the time it was saved."""
    for line in lines[:STAMP_LINES]:
        if not line or not any(c.isdigit() for c in line[:80]):
            continue
        m = _DATED.search(line)
        if m is not None and _valid(*m.groups()[:6]):
            year, mon, day, hh, mm, ss, frac, zone = m.groups()
            text = f"{year}-{mon}-{day}T{hh}:{mm}:{ss}{frac or ''}"
            if zone:
                text += "+00:00" if zone == "Z" else zone if ":" in zone else \
                    f"{zone[:3]}:{zone[3:]}"
            return text, False
        y = _YEARLESS.search(line)
        if y is not None and _valid(_LEAP, *y.groups()[:5]):
            mon, day, hh, mm, ss, frac = y.groups()
            when = f"{mon}-{day}T{hh}:{mm}:{ss}{frac or ''}"
            if mtime is None:
                return f"{UNKNOWN_YEAR}-{when}", True
            written = dt.datetime.fromtimestamp(mtime)
            year = written.year - (f"{mon}-{day}T{hh}:{mm}:{ss}" >
                                   written.strftime("%m-%dT%H:%M:%S"))
            if not _valid(f"{year:04d}", mon, day, hh, mm, ss):  # 29 February
                return f"{UNKNOWN_YEAR}-{when}", True
            return f"{year:04d}-{when}", False
    if mtime is not None:
        return dt.datetime.fromtimestamp(mtime, dt.UTC).isoformat(timespec="seconds"), False
    return "", True


def _valid(year: str, mon: str, day: str, hh: str, mm: str, ss: str) -> bool:
    try:
        dt.datetime(int(year), int(mon), int(day), int(hh), int(mm), int(ss))
    except ValueError:
        return False
    return True


#: The device a log names: vLLM's MoE kernel configs (``device_name=NVIDIA_L40S``).
_DEVICE_NAME = re.compile(r"device_name=([A-Za-z][A-Za-z0-9_.-]*?)(?:[,.]json|,|\s|$)")


def log_gpus(lines: Sequence[str], device: str | None) -> list[Gpu]:
    """The GPUs a saved log names, for the run's environment: each distinct name it gives
    (``device_name=NVIDIA_L40S`` is ``NVIDIA L40S``), else, when the engine says it ran on an
    accelerator (``device``: ``cuda``, ``rocm``, ...; not ``cpu``), one unnamed GPU; none for
    a CPU or an unknown device. Their ``source`` is ``log``."""
    names: dict[str, None] = {}
    for line in lines:
        if "device_name=" in line and (m := _DEVICE_NAME.search(line)):
            names[m.group(1).replace("_", " ")] = None
    if names:
        return [Gpu(name=name, source="log") for name in names]
    if device and device.lower() not in ("cpu", "unknown"):
        return [Gpu(source=f"log (device {device})")]
    return []


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
