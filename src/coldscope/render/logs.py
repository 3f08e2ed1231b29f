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
from coldscope.ingest.logfiles import FleetGroup, ParsedLog
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


def parsed_logs(parsed: Sequence[ParsedLog], fleet: Sequence[FleetGroup], *,
                saved: bool = False) -> Group:
    """``parse LOG LOG ...`` / ``parse DIR``: one line per start-up (or per log that gave
    none) named relative to the folder the logs share, which the title names once (narrow
    terminals); why each that gave no run did not, under the table; then the fleet summary
    (``fleet``) per engine, version and model. ``saved``: a column of the stored ids."""
    names = [p.source.name for p in parsed]
    common = _common_folder([n for n in names if n != "-"])
    shown = {n: os.path.relpath(n, common) if common and n != "-" else n for n in names}
    n_logs = len(dict.fromkeys(names))
    title = (f"{len(parsed)} logs" if n_logs == len(parsed) else
             f"{len(parsed)} start-ups in {n_logs} log{'s' if n_logs > 1 else ''}") + \
        (f" in {common}" if common else "")
    table = Table(title=Text(title), title_justify="left", box=box.SIMPLE_HEAVY)
    widest = max(len(x) for x in shown.values())
    cols = ["log", "status", "ready (s)", "engine", "model"] + (["stored as"] if saved else [])
    for col in cols:
        table.add_column(col, justify="right" if col == "ready (s)" else "left",
                         overflow="fold", min_width=min(widest, 48) if col == "log" else None,
                         no_wrap=col in ("status", "ready (s)"))
    for p in parsed:
        run = p.run
        engine = f"{run.engine.name} {run.engine.version or '?'}" if run is not None else ""
        model = (run.model.name or run.model.path or "") if run is not None else ""
        ready = f"{run.time_to_ready_s:.2f}" if run is not None and \
            run.time_to_ready_s is not None and run.status == "ok" else ""
        cells = [shown[p.source.name] + p.part, p.status, ready, engine, model]
        if saved:
            cells.append(run.id if run is not None else "")
        # cells as plain text: a file name or a quoted log line may hold [brackets]
        table.add_row(*(Text(x) for x in cells))
    parts: list[RenderableType] = [table]
    # why, under the table: a reason is a sentence, not a cell
    parts += [Text(f"{shown[p.source.name]}{p.part}: {p.status}: {p.reason}")
              for p in parsed if p.reason]
    for g in fleet:
        t = Table(title=Text(f"fleet: {g.engine} {g.version or 'unknown version'} · "
                             f"{g.model or 'unknown model'} · {g.count} ok run(s)"),
                  title_justify="left", box=box.SIMPLE)
        for col in ("bucket", "p50 (s)", "p90 (s)", "runs that know it"):
            t.add_column(col, justify="left" if col == "bucket" else "right")
        for key, v in g.stats.items():
            t.add_row(key.replace("_", " ") if key == "time_to_ready" else key,
                      *(("–", "–", "0") if v is None else
                        (f"{v[0]:.2f}", f"{v[1]:.2f}", str(v[2]))))
        parts.append(t)
    return Group(*parts)
