"""Human renderings of stored runs (rich tables): one run, runs in a list or side by side,
``compare``'s ``Comparison`` and ``releases``' ``ReleasesResult``. ``render`` draws a ``Run``
(``render_run``), a ``Comparison`` and a ``ReleasesResult``; the rest take options too.

Text from a run (ids, model names, sub-step names, sources, reasons, notes, the log's tail) is
data from a log or a store: it enters a table as ``terminal.plain`` (a ``Text``, never read as
markup, cleaned of control sequences), so the tables are safe on any console.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coldscope.analysis.comparison import Comparison
from coldscope.analysis.comparison import Row as CompareRow
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS, STAGES
from coldscope.launch.releases import Change, ReleasesResult
from coldscope.render import render
from coldscope.render.findings import findings_table
from coldscope.util.safeio import clean_text
from coldscope.util.terminal import plain


def _fmt(v: float | None, na: bool = False) -> str:
    if v is None:
        return "n/a" if na else "unknown"
    return f"{v:8.2f}"


def _short(run: Run) -> str:
    return f"{run.id} ({run.cache or '?'})"


def substep_order(run: Run) -> list[tuple[str, float, float | None, list[str]]]:
    """The run's sub-steps as (name, seconds, first start, names of the sub-steps it overlaps),
    in time order (by the first moment any process was in it; sub-steps no interval places in
    time come last, by name).

    Two sub-steps overlap when some interval of one and some interval of the other share a
    stretch of time (touching ends do not count): they ran at once, in two processes or nested,
    so their seconds must not be added up.
    """
    spans: dict[str, list[tuple[float, float]]] = {}
    for iv in run.intervals:
        if iv.name in run.substeps:
            spans.setdefault(iv.name, []).append((iv.start, iv.end))
    names = sorted(run.substeps, key=lambda n: (n not in spans,
                                                min(s for s, _ in spans.get(n, [(0.0, 0.0)])),
                                                n))
    out = []
    for name in names:
        mine = spans.get(name, [])
        others = [o for o in names if o != name and any(
            a0 < b1 - 1e-9 and b0 < a1 - 1e-9
            for a0, a1 in mine for b0, b1 in spans.get(o, []))]
        start = min((s for s, _ in mine), default=None)
        out.append((name, run.substeps[name], start, others))
    return out


def timeline_table(run: Run, *, substeps: bool = True, findings: bool = True) -> Group:
    """The six stages, server_ready and unattributed of one run, with sub-steps (in time order,
    overlapping ones flagged) and sources, then the run's findings."""
    ttr = run.time_to_ready_s
    na = set(run.not_applicable)
    title = f"run {_short(run)}"
    if ttr is not None:
        title += f" — ready in {ttr:.2f} s"
        if run.first_token_s is not None:
            title += f", first token at {run.first_token_s:.2f} s"
    table = Table(box=box.SIMPLE_HEAVY)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    table.add_column("source")
    ordered = substep_order(run) if substeps else []
    for bucket in BUCKETS:
        v = run.stages.get(bucket)
        share = f"{100 * v / ttr:5.1f} %" if v is not None and ttr else ""
        table.add_row(bucket, _fmt(v, bucket in na), share, plain(run.sources.get(bucket, "")))
        for name, sv, start, overlaps in ordered:
            if name.split("/", 1)[0] != bucket:
                continue
            when = f"from {start:.2f} s" if start is not None else ""
            flag = ("overlaps " + ", ".join(o.split("/", 1)[1] if o.split("/", 1)[0] == bucket
                                            else o for o in overlaps)) if overlaps else ""
            table.add_row(plain("  └ " + name.split("/", 1)[1], style="dim"),
                          Text(f"{sv:8.2f}", style="dim"), Text(when, style="dim"),
                          plain(flag, style="yellow") if flag else "")
    if ttr is not None:
        table.add_row(Text("time to ready", style="bold"), Text(f"{ttr:8.2f}", style="bold"),
                      "100.0 %", "")
    parts: list[RenderableType] = [plain(title, style="bold"), table]
    if any(o for *_, o in ordered):
        parts.append(Text("Sub-steps flagged 'overlaps' ran at the same time as another "
                          "(in another process, or nested): their seconds do not add up.",
                          style="dim"))
    if findings and (run.findings or run.status == "ok"):
        parts.append(findings_table(run.findings))
    return Group(*parts)


def environment_table(run: Run) -> Group:
    """Where and how the run was made (``show --env``): engine and package versions, machine,
    command line, caches and storage, and the run's notes (e.g. that it primed the warm
    cache)."""
    env = run.environment
    t = Table(box=box.SIMPLE, show_header=False, title="environment and notes",
              title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value", overflow="fold")

    def row(what: str, value: object) -> None:
        if value not in (None, "", [], {}):
            t.add_row(what, plain(value))

    row("engine", " ".join(x for x in (run.engine.name, run.engine.version) if x))
    extra = env.__pydantic_extra__ or {}
    row("packages", ", ".join(f"{k} {v}" for k, v in sorted(extra.items()) if v))
    row("command", shlex.join(run.engine.argv) if run.engine.argv else None)
    row("model", run.model.path or run.model.name)
    cpu = env.cpu_model
    if cpu and env.cpu_cores:
        cpu += f" ({env.cpu_cores} cores"
        cpu += (f", {env.cpu_affinity} usable)" if env.cpu_affinity and
                env.cpu_affinity != env.cpu_cores else ")")
    row("CPU", cpu)
    row("memory", f"{env.memory_bytes / 2**30:.1f} GiB" if env.memory_bytes else None)
    row("GPUs", ", ".join(g.name or "gpu" for g in env.gpus) or "none")
    row("host", " · ".join(x for x in (env.hostname, env.os) if x))
    cache: str = run.cache or "?"
    if run.cache_requested and run.cache_requested != run.cache:
        cache += f" (asked for {run.cache_requested})"
    row("cache", cache)
    row("page cache", run.page_cache)
    st = run.storage
    row("storage", ", ".join(x for x in (
        st.kind, f"page cache {st.page_cache}" if st.page_cache else None,
        f"{st.read_bandwidth_bps / 1e9:.2f} GB/s" if st.read_bandwidth_bps else None) if x))
    if st.weights_bytes is not None:
        held = f"{st.resident_at_launch:.0%}" if st.resident_at_launch is not None else "?"
        read = f"{st.weights_read_bytes / 1e6:.1f} MB read from storage in " \
               f"{st.weights_read_s or 0:.2f} s" if st.weights_read_bytes is not None \
            else "reads not measured"
        row("weights", f"{st.weights_bytes / 1e6:.1f} MB, {held} in the page cache at launch; "
                       f"model_loading/weights: {read}")
    if env.weights_fs:
        row("weights on", " ".join(x for x in (env.weights_fs.fstype, env.weights_fs.device,
                                               env.weights_fs.mountpoint) if x))
    if run.compile_key is not None:
        row("compile key", ", ".join(run.compile_key.dirs))
    if run.cache_held:
        row("cache held", f"the compile keys of {len(run.cache_held)} earlier run(s), newest "
                          f"{run.cache_held[-1].run or '?'}")
    row("variables", " ".join(f"{k}={v}" for k, v in sorted(env.env.items())))
    row("overrides", " ".join(f"{k}={v}" for k, v in sorted(run.env_overrides.items())))
    m = run.campaign
    if m is not None:
        row(m.kind, " · ".join(str(x) for x in (m.name, m.cell, m.role) if x))
    row("tool", " ".join(x for x in (run.tool.name, run.tool.version) if x))
    parts: list[RenderableType] = [t]
    if run.notes:
        parts.append(Text("notes:", style="bold"))
        parts.extend(plain(f"  • {n}") for n in run.notes)
    return Group(*parts)


def processes_table(run: Run) -> Table:
    """The engine's Python processes as the probe saw them (helpers left out)."""
    t = Table(title="processes (probe)", title_justify="left")
    for c in ("pid", "ppid", "role", "probe loaded at s"):
        t.add_column(c)
    for p in run.processes:
        if p.role != "helper":
            t.add_row(str(p.pid), str(p.ppid), plain(p.role), f"{p.probe_loaded_s:.2f}")
    return t


def imports_table(run: Run, top: int = 8, min_total: float = 0.1) -> Table:
    """Each engine process's costliest imports (``profile --imports``): the ``top`` packages
    by self time, with the process's total import time (all packages, ``<other>`` included).
    Processes that imported less than ``min_total`` seconds in all are left out."""
    from coldscope.capture.imports import OTHER
    t = Table(title="top imports (probe, self time by package)", title_justify="left")
    for c in ("process", "package", "s", "modules", "via", "first in"):
        t.add_column(c, justify="right" if c in ("s", "modules") else "left")
    order: list[tuple[str, int]] = []
    for r in run.imports:
        if (r.process, r.pid) not in order:
            order.append((r.process, r.pid))
    for role, pid in order:
        mine = [r for r in run.imports if (r.process, r.pid) == (role, pid)]
        total = sum(r.seconds for r in mine)
        if total < min_total:
            continue
        shown = sorted((r for r in mine if r.package != OTHER), key=lambda r: -r.seconds)[:top]
        t.add_row(plain(f"{role} {pid}"), Text("all imports", style="bold"),
                  f"{total:.2f}", str(sum(r.modules for r in mine)), "", "")
        for r in shown:
            t.add_row("", plain(r.package), f"{r.seconds:.2f}", str(r.modules),
                      plain(r.via or ""), plain(r.stage or ""))
    return t


def compare_table(runs: Sequence[Run]) -> Table:
    """Runs side by side, one column per run, with the ratio of the last to the first."""
    table = Table(title="start-up, side by side (seconds)", box=box.SIMPLE_HEAVY,
                  title_justify="left", min_width=60)
    table.add_column("stage")
    for r in runs:
        table.add_column(plain(f"{r.cache or '?'}\n{r.id}"), justify="right")
    if len(runs) == 2:
        table.add_column("ratio", justify="right")
    for bucket in (*BUCKETS, "time_to_ready", "first_token"):
        if bucket == "time_to_ready":
            vals = [r.time_to_ready_s for r in runs]
        elif bucket == "first_token":
            vals = [r.first_token_s for r in runs]
        else:
            vals = [r.stages.get(bucket) for r in runs]
        cells = [_fmt(v, bucket in set(r.not_applicable)) for v, r in zip(vals, runs,
                                                                           strict=True)]
        if len(runs) == 2:
            a, b = vals
            cells.append(f"{b / a:5.2f}x" if a and b is not None and a > 0.005 else "")
        style = "bold" if bucket in ("time_to_ready", "first_token") else None
        table.add_row(bucket.replace("_", " ") if bucket not in STAGES else bucket, *cells,
                      style=style)
    return table


#: The narrowest a wrapping column of ``fitted_table`` becomes on a terminal too narrow for
#: its other columns and the wrapping ones at their own minimum.
_NARROWEST = 6


def fitted_table(rows: Sequence[dict[str, str]], cols: Sequence[str], width: int | None, *,
                 whole: str, wrapping: dict[str, int], droppable: Sequence[str],
                 right: Sequence[str] = (), optional: Sequence[str] = ()) -> Table:
    """One line per row (``rows``: the cells by column, plain text from data), fitted into
    ``width`` columns (None: as wide as it takes) so that it reads when piped into a narrow
    terminal or a file: the column ``whole`` (an id) is never cut or wrapped (folded only when
    it alone is wider than the terminal); the ``wrapping`` columns may wrap, down to the width
    given for each; every other column keeps its widest cell. When that cannot fit, whole
    columns give way (``droppable``, least useful first) rather than squeezing the others to a
    character a line; an ``optional`` column empty in every row is left out. The space the
    wrapping columns share goes to them in the order ``wrapping`` names them (rich would
    narrow the widest first, an id-like log name before a short model name). ``--json`` has
    every column."""
    rows = [{k: clean_text(v) for k, v in row.items()} for row in rows]  # measured as shown
    cols = [c for c in cols if c not in optional or any(row[c] for row in rows)]
    natural = {c: max([len(c), *(len(row[c]) for row in rows)]) for c in cols}

    def needed(cs: list[str]) -> int:  # columns at their narrowest, two spaces between them
        return sum(min(natural[c], wrapping.get(c, natural[c])) for c in cs) + 2 * (len(cs) - 1)

    if width is not None:
        for col in droppable:
            if needed(cols) <= width:
                break
            if col in cols:
                cols.remove(col)
    shares = {c: natural[c] for c in cols if c in wrapping}
    if width is not None and width < sum(natural[c] for c in cols) + 2 * (len(cols) - 1):
        shares = {c: min(natural[c], wrapping[c]) for c in wrapping if c in cols}
        spare = width - needed(cols)
        for c in shares:  # in the order of ``wrapping``: the first grows first
            grow = min(spare, natural[c] - shares[c])
            shares[c] += grow
            spare -= grow
        for c in reversed(shares):  # narrower still than every column gone: they wrap more
            cut = min(-spare, shares[c] - _NARROWEST) if spare < 0 else 0
            shares[c] -= max(cut, 0)
            spare += max(cut, 0)
    # SIMPLE_HEAD's column divider is a space: with one space of right padding, two between
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for col in cols:
        if col in wrapping:
            table.add_column(col, overflow="fold", width=shares[col])
        elif col == whole and width is not None and natural[col] > width:
            table.add_column(col, overflow="fold")  # longer than the terminal: wrapped, whole
        else:
            table.add_column(col, no_wrap=True, min_width=natural[col],
                             justify="right" if col in right else "left")
    for row in rows:
        table.add_row(*(plain(row[c]) for c in cols))
    return table


#: Columns of ``runs`` that give way, least useful first, when the terminal is too narrow for
#: the ids and everything else; and the narrowest the wrapping ones may become.
_DROPPABLE = ("1st token s", "started", "version", "engine", "label / reason", "model")
_WRAPPING = {"model": 10, "version": 7, "label / reason": 8}


def runs_table(runs: Sequence[Run], width: int | None = None) -> Table:
    """One line per run (``fitted_table``). The id is never cut: its column is as wide as the
    longest id and never wraps. The model, the engine's version and the label/reason may
    wrap (a version can carry a git hash); when the terminal (``width`` columns) cannot hold
    that, whole columns give way (``_DROPPABLE``, in that order) rather than squeeze the id.
    Cache, first token and label/reason are left out when no run has one (runs read from
    logs: their cache state is unknown, shown blank).
    ``started`` is the month, day and time (``started_at``; a log whose stamps give no year
    shows the same, its year unknown)."""
    rows = []
    for r in runs:
        ttr, ft = r.time_to_ready_s, r.first_token_s
        rows.append({
            "id": r.id, "started": (r.started_at or "")[5:16].replace("T", " "),
            "status": r.status, "cache": "" if r.cache == "unknown" else r.cache or "",
            "model": r.model.name or "",
            "engine": r.engine.name or "", "version": r.engine.version or "",
            "ready s": f"{ttr:.2f}" if ttr is not None else "",
            "1st token s": f"{ft:.2f}" if ft is not None else "",
            "label / reason": r.reason or r.label or "",
        })
    cols = ["id", "started", "status", "cache", "model", "engine", "version", "ready s",
            "1st token s", "label / reason"]
    return fitted_table(rows, cols, width, whole="id", wrapping=_WRAPPING,
                        droppable=_DROPPABLE, right=("ready s", "1st token s"),
                        optional=("cache", "1st token s", "label / reason"))


def failed_detail(run: Run) -> Group:
    """Why a run failed, and the last lines of its log."""
    tail = (run.log_tail or "").splitlines()[-15:]
    return Group(plain(f"run {run.id} failed: {run.reason}", style="bold red"),
                 plain("\n".join(tail), style="dim"))


@render.register
def render_run(run: Run) -> Group:
    """A run as ``profile``, ``show`` and ``parse`` print it: its timeline and findings, or why
    it failed."""
    return timeline_table(run) if run.status == "ok" else failed_detail(run)


_VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "unresolved": "dim"}


@render.register
def comparison_table(result: Comparison) -> Group:
    """``coldscope compare``: a headline (time to ready, b against a, with its interval and
    verdict), then one row per stage with the means, b - a, its interval and the verdict;
    resolved sub-steps under their stage; stages that are 0 s or unknown on both sides and
    unresolved sub-steps are left out (``--json`` has them all)."""
    ttr = result.time_to_ready
    pct = int(round(result.confidence * 100))
    head = Text("b vs a: ", style="bold")
    if ttr.a_mean is not None and ttr.b_mean is not None:
        head.append(f"time to ready {ttr.a_mean:.2f} s -> {ttr.b_mean:.2f} s, "
                    f"{_signed(ttr.delta)} s")
        if ttr.low is not None:
            head.append(f" ({pct} % interval {_signed(ttr.low)} to {_signed(ttr.high)} s)")
        head.append(": ")
    head.append(_verdict_text(ttr.verdict), style=_VERDICT_STYLE[ttr.verdict])
    parts: list[RenderableType] = [head]
    for side in ("a", "b"):
        s = getattr(result, side)
        what = s.command or s.label or ""
        if s.env and s.command is None:
            what = " ".join(f"{k}={v}" for k, v in s.env.items()) + " " + what
        runs = f"{s.n} {result.cache + ' ' if result.cache else ''}run(s)"
        parts.append(plain(f"  {side}: {what}  [{runs}]"))

    table = Table(box=box.SIMPLE_HEAVY, title_justify="left")
    for col, justify in (("stage", "left"), ("a (s)", "right"), ("b (s)", "right"),
                         ("b - a (s)", "right"), (f"{pct} % interval (s)", "right"),
                         ("verdict", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    left_out: list[str] = []
    hidden_substeps = 0
    for bucket in BUCKETS:
        r = result.stages[bucket]
        if not r.a_mean and not r.b_mean:
            left_out.append(bucket)
            continue
        table.add_row(bucket, *_row_cells(r))
        for name, sr in result.substeps.items():
            if name.split("/", 1)[0] != bucket:
                continue
            if sr.verdict == "unresolved":
                hidden_substeps += 1
                continue
            table.add_row(plain("  └ " + name.split("/", 1)[1], style="dim"), *_row_cells(sr))
    table.add_row(Text("time to ready", style="bold"), *_row_cells(ttr, bold=True))
    parts.append(table)
    foot = (f"Welch t-interval of b - a, {pct} %; verdict faster/slower only when the whole "
            f"interval is below/above 0 and |b - a| >= {result.practical_size_s:.2f} s "
            "(max(0.05 s, 1 % of a's time to ready)).")
    if left_out:
        foot += f" Not shown (0 s or unknown on both sides): {', '.join(left_out)}."
    if hidden_substeps:
        foot += f" {hidden_substeps} unresolved sub-step(s) not shown (--json has them)."
    parts.append(Text(foot, style="dim"))
    if result.order:
        primes = " ".join(f"{p.side}" for p in result.primes)
        parts.append(Text(f"order: {' '.join(result.order)}"
                          + (f" (after primes {primes})" if primes else ""), style="dim"))
    for side in ("a", "b"):
        for ex in getattr(result, side).excluded:
            parts.append(plain(f"left out of {side}: {ex.id or '?'} ({ex.reason})",
                               style="yellow"))
    for note in result.notes:
        parts.append(plain(f"note: {note}", style="yellow"))
    return Group(*parts)


def _signed(v: float | None) -> str:
    return "" if v is None else f"{v:+.2f}"


def _verdict_text(verdict: str) -> str:
    return {"faster": "b is faster", "slower": "b is slower",
            "unresolved": "unresolved"}[verdict]


def _row_cells(r: CompareRow, bold: bool = False) -> list[Text]:
    def num(v: float | None) -> str:
        return "" if v is None else f"{v:.2f}"

    interval = f"{_signed(r.low)} to {_signed(r.high)}" if r.low is not None else \
        "(too few runs)"
    style = "bold" if bold else ""
    return [Text(num(r.a_mean), style=style), Text(num(r.b_mean), style=style),
            Text(_signed(r.delta), style=style), Text(interval, style=style),
            Text(r.verdict, style=_VERDICT_STYLE[r.verdict])]


@render.register
def releases_tables(result: ReleasesResult) -> Group:
    """``coldscope releases``: one column per release (time to ready and each stage, means
    over its runs), each release's top bootstrap imports, then per consecutive pair the change of
    time to ready and of every stage with its interval and verdict, the resolved sub-steps,
    and the imports that changed most (``--json`` has everything); each verdict also after
    Holm's step-down over its family, and per family how many survived it."""
    parts: list[RenderableType] = []
    table = Table(box=box.SIMPLE_HEAVY, title=f"start-up per release ({result.cache}, mean of "
                  f"{result.repeat} run(s) each, seconds)", title_justify="left")
    shown = [b for b in BUCKETS if any(r.stages.get(b) for r in result.releases)]
    table.add_column("", no_wrap=True)
    versions = [r.engine_version for r in result.releases]
    by_version = None not in versions and len(set(versions)) == len(versions)
    for rel in result.releases:
        name = (rel.engine_version if by_version else None) or rel.spec
        if rel.failed:
            name += f" ({len(rel.failed)} failed)"
        table.add_column(plain(name), justify="right")
    table.add_row("runs", *[str(len(r.runs)) for r in result.releases])
    table.add_row(Text("time to ready", style="bold"), *[
        Text("" if r.time_to_ready_s is None else f"{r.time_to_ready_s:.2f}", style="bold")
        for r in result.releases])
    for bucket in shown:
        table.add_row(bucket, *[_fmt(r.stages.get(bucket)).strip() for r in result.releases])
    parts.append(table)
    for rel in result.releases:
        if not rel.imports:
            continue
        by_process: dict[str, list[str]] = {}
        for imp in rel.imports:
            row = by_process.setdefault(imp.process, [])
            if len(row) < 5:
                row.append(f"{imp.module} {imp.seconds:.2f}")
        parts.append(plain(f"{rel.spec} imports during bootstrap (s): " + "; ".join(
            f"{p}: {', '.join(mods)}" for p, mods in by_process.items())))
    fams = {f.name: f for f in result.families}
    headline = fams.get("time to ready")
    breakdown = fams.get("stages and sub-steps")
    for d in result.deltas:
        t = d.time_to_ready
        head = Text(f"{d.from_} -> {d.to}: time to ready {_signed(t.delta)} s", style="bold")
        if t.low is not None:
            head.append(f" (95 % interval {_signed(t.low)} to {_signed(t.high)} s)")
        head.append(": ")
        said = {"faster": f"{d.to} is faster", "slower": f"{d.to} is slower"}
        head.append(said.get(t.verdict, "unresolved"), style=_VERDICT_STYLE[t.verdict])
        if t.verdict in said and headline is not None and headline.comparisons > 1:
            k = headline.comparisons
            head.append(f", resolved after Holm over {k} time-to-ready changes"
                        if t.holm == t.verdict else
                        f" unadjusted; not after Holm over {k} time-to-ready changes")
        parts.append(head)
        dt = Table(box=box.SIMPLE, show_header=True)
        k = breakdown.comparisons if breakdown is not None else 0
        for col, justify in (("stage", "left"), ("change (s)", "right"),
                             ("95 % interval (s)", "right"), ("verdict", "left"),
                             (f"after Holm over {k}", "left")):
            dt.add_column(col, justify=justify)  # type: ignore[arg-type]
        for bucket in BUCKETS:
            c = d.stages.get(bucket)
            if c is None or (not c.delta and bucket not in shown):
                continue
            dt.add_row(bucket, *_change_cells(c))
            for name, sc in d.substeps.items():
                if name.split("/", 1)[0] == bucket and sc.verdict != "unresolved":
                    dt.add_row(plain("  └ " + name.split("/", 1)[1], style="dim"),
                               *_change_cells(sc))
        parts.append(dt)
        if d.imports:
            parts.append(plain("  imports that changed most (s): " + ", ".join(
                f"{i.process} {i.module} {_signed(i.delta)}" for i in d.imports[:6])))
        for note in d.notes:
            parts.append(plain(f"  note: {note}", style="dim"))
    parts.append(Text("Each change is to - from of the means, with its Welch 95 % interval; "
                      "faster/slower only when the whole interval is on one side of 0, else "
                      "unresolved. Sub-steps shown only when resolved. Read together, each "
                      "family's verdicts are kept only where they survive Holm's step-down "
                      "(family-wise 5 %):", style="dim"))
    for fam in result.families:
        parts.append(Text(f"  {fam.statement()}", style="dim"))
    return Group(*parts)


def _change_cells(c: Change) -> list[str | Text]:
    interval = f"{_signed(c.low)} to {_signed(c.high)}" if c.low is not None else \
        "(too few runs)"
    verdict = c.verdict if c.verdict in _VERDICT_STYLE else "unresolved"
    holm = c.holm if c.holm in _VERDICT_STYLE else "unresolved"
    return [_signed(c.delta), interval, Text(c.verdict, style=_VERDICT_STYLE[verdict]),
            Text(c.holm or "-", style=_VERDICT_STYLE[holm] if c.holm else "")]


def standby_table(launchers: Sequence[dict[str, object]], width: int | None = None) -> Table:
    """One line per standby launcher (``coldscope standby status``): its state, what it
    imported ahead and in how long, and the memory it holds (resident, and its own: what
    stopping it frees)."""
    def mib(value: object) -> str:
        return f"{value / 2**20:.0f}" if isinstance(value, int) else ""

    rows = []
    for s in launchers:
        import_s = s.get("import_s")
        rows.append({
            "name": str(s.get("name", "")), "status": str(s.get("status", "")),
            "pid": str(s.get("pid", "")), "engine": str(s.get("engine") or ""),
            "modules": str(s.get("modules_loaded") or ""),
            "imports s": f"{import_s:.1f}" if isinstance(import_s, (int, float)) else "",
            "RSS MiB": mib(s.get("rss_bytes")), "own MiB": mib(s.get("uss_bytes")),
            "engines": str(s.get("children", "")),
            "reason": str(s.get("reason") or ""),
        })
    cols = ["name", "status", "pid", "engine", "modules", "imports s", "RSS MiB", "own MiB",
            "engines", "reason"]
    return fitted_table(rows, cols, width, whole="name", wrapping={"reason": 20},
                        droppable=("reason", "engine"),
                        right=("pid", "modules", "imports s", "RSS MiB", "own MiB", "engines"),
                        optional=("reason",))
