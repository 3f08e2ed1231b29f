"""What ``coldscope parse`` prints for saved engine logs: one start-up's timeline with the
engine it ran (``parsed_log``), or a line per start-up and a summary per engine, version and
model (``parsed_logs``).

Plain functions rather than ``render`` registrations: besides the parsed logs they take what
the command was asked (the paper parser's reading, whether the runs were stored)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coldscope.core.records import Run
from coldscope.ingest.logfiles import MIN_SUMMARY_RUNS, FleetGroup, ParsedLog
from coldscope.render.tables import timeline_table
from coldscope.util.errors import ColdscopeError


def engine_line(run: Run) -> str:
    """``vLLM 0.9.0 (v0.8), device cuda``: the engine the log shows, by its adapter's title."""
    from coldscope.engines import by_name
    try:
        title = by_name(run.engine.name or "").title
    except ColdscopeError:
        title = run.engine.name or "engine"
    return (f"{title} {run.engine.version or 'unknown version'} ({run.engine.family}), "
            f"device {run.engine.device or 'unknown'}")


def parsed_log(run: Run, *, vs_paper: bool = False, saved: bool = False) -> Group:
    """``parse LOG``: the engine line, the run's timeline and notes; with ``vs_paper`` what the
    paper's parser reads from the log and misses; ``saved``: the id it was stored as."""
    parts: list[RenderableType] = [engine_line(run), timeline_table(run)]
    parts += [f"note: {note}" for note in run.notes]
    if vs_paper and run.paper_metrics:
        read = ", ".join(f"{k} {'null' if v is None else f'{round(v, 3):g} s'}"
                         for k, v in run.paper_metrics.items())
        parts.append(Text.assemble(("the paper's parser reads:", "bold"), f" {read}"))
    if vs_paper and run.missed_by_paper_parser:
        parts.append(Text("what the paper's parser missed:", style="bold"))
        for item in run.missed_by_paper_parser:
            secs = f" ({item.seconds:.2f} s)" if item.seconds is not None else ""
            parts.append(f"  • {item.what}{secs}: {item.detail or ''}")
    if saved:
        parts.append(f"stored as run {run.id}")
    return Group(*parts)


def _common_folder(files: Sequence[str]) -> str:
    """The folder the shown files share ("" for one file, for a mix of absolute and relative
    paths, and when one of them is the common path itself: names are then kept whole)."""
    if len(files) < 2 or len({os.path.isabs(f) for f in files}) > 1:
        return ""
    common = os.path.commonpath(files)
    return "" if common in files else common


#: The parse table's columns that may wrap, in the order they are given room, with the
#: narrowest each may become; and those that give way, first first, on a narrow terminal.
_WRAPPING = {"log": 28, "model": 16, "engine": 11}
_DROPPABLE = ("engine", "model", "ready (s)")


def parsed_logs(parsed: Sequence[ParsedLog], fleet: Sequence[FleetGroup], *,
                saved: bool = False, width: int | None = None) -> Group:
    """``parse LOG LOG ...`` / ``parse DIR``: one line per start-up (or per log that gave
    none) named relative to the folder the logs share, which the title names once; why each
    that gave no run did not, under the table; then the fleet summary (``fleet``).
    ``saved``: a column of the stored ids, never cut. ``width``: the terminal's columns, which
    the table fits (``render.tables.fitted_table``: names and models wrap, engine and model
    give way before an id is squeezed), so that it reads when piped at 80 columns.

    The summary draws the p50 and p90 of a group of one engine, version and model only when
    it has ``FleetGroup.summarised`` runs (two or more: a percentile of one run is that run,
    already on its line); groups of one run are counted in one line."""
    from coldscope.render.tables import fitted_table
    names = [p.source.name for p in parsed]
    common = _common_folder([n for n in names if n != "-"])
    shown = {n: os.path.relpath(n, common) if common and n != "-" else n for n in names}
    n_logs = len(dict.fromkeys(names))
    title = (f"{len(parsed)} logs" if n_logs == len(parsed) else
             f"{len(parsed)} start-ups in {n_logs} log{'s' if n_logs > 1 else ''}") + \
        (f" in {common}" if common else "")
    rows = []
    for p in parsed:
        run = p.run
        rows.append({
            "log": shown[p.source.name] + p.part, "status": p.status,
            "ready (s)": f"{run.time_to_ready_s:.2f}" if run is not None and
            run.time_to_ready_s is not None and run.status == "ok" else "",
            "engine": f"{run.engine.name} {run.engine.version or '?'}" if run is not None else "",
            "model": (run.model.name or run.model.path or "") if run is not None else "",
            "stored as": run.id if run is not None and saved else "",
        })
    cols = ["log", "status", "ready (s)", "engine", "model"] + (["stored as"] if saved else [])
    table = fitted_table(rows, cols, width, whole="stored as", wrapping=_WRAPPING,
                         droppable=_DROPPABLE, right=("ready (s)",))
    parts: list[RenderableType] = [Text(title), Text(""), table]
    # why, under the table: a reason is a sentence, not a cell
    parts += [Text(f"{shown[p.source.name]}{p.part}: {p.status}: {p.reason}")
              for p in parsed if p.reason]
    parts += fleet_summary(fleet)
    return Group(*parts)


def fleet_summary(fleet: Sequence[FleetGroup]) -> list[RenderableType]:
    """Per group of ``FleetGroup.summarised`` runs, its heading and a table of each bucket's
    p50 and p90 (and how many runs know it); then one line counting the groups of one run,
    whose figures are their runs' lines above."""
    parts: list[RenderableType] = []
    for g in fleet:
        if not g.summarised:
            continue
        parts.append(Text(f"fleet: {g.engine} {g.version or 'unknown version'} · "
                          f"{g.model or 'unknown model'} · {g.count} ok run(s)"))
        t = Table(box=box.SIMPLE)
        for col in ("bucket", "p50 (s)", "p90 (s)", "runs that know it"):
            t.add_column(col, justify="left" if col == "bucket" else "right", no_wrap=True)
        for key, v in g.stats.items():
            t.add_row(key.replace("_", " ") if key == "time_to_ready" else key,
                      *(("–", "–", "0") if v is None else
                        (f"{v[0]:.2f}", f"{v[1]:.2f}", str(v[2]))))
        parts.append(t)
    single = sum(not g.summarised for g in fleet)
    if single:
        parts.append(Text(f"fleet: {single} group{'s' if single > 1 else ''} with one ok run "
                          f"(no p50/p90: they need {MIN_SUMMARY_RUNS} runs)"))
    return parts
