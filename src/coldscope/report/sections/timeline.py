"""One start-up, process by process: per configuration (at most ``MAX_TIMELINES``), its
representative run as a zoomable Gantt of the evidence each process reported, under the
reconciled stages, with the gaps no evidence explains and the run's CPU heatmap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coldscope.core.records import Run, Segment
from coldscope.core.stages import BUCKETS, UNATTRIBUTED, stage_of
from coldscope.engines import role_order
from coldscope.report.configurations import Configuration, representatives
from coldscope.report.markup import HATCH, CsvValue, csv_link, empty, figure, key, legend, table
from coldscope.report.sections.cpu import CpuUsage, cpu_usage
from coldscope.report.stats import drawn_segments
from coldscope.report.svg import (
    Linear,
    Svg,
    color_scale,
    fill,
    heat,
    heatmap,
    nice_ticks,
    times,
)
from coldscope.report.text import esc, fmt_s, label, text_width
from coldscope.store.logruns import LAID_OUT


@dataclass(frozen=True)
class Bar:
    """One interval a process reported: a stage (``depth`` 0) or a sub-step (``depth`` 1,
    ``stage/step``), in seconds since launch, with its evidence source."""

    name: str
    stage: str
    depth: int
    start: float
    end: float
    seconds: float
    source: str


@dataclass(frozen=True)
class Lane:
    """One process's bars, packed into rows of bars that do not overlap."""

    process: str
    pid: int | None
    rows: tuple[tuple[Bar, ...], ...]


@dataclass(frozen=True)
class Gantt:
    """One run drawn as a Gantt: its lanes, reconciled stage ``segments`` (``sequential``: laid
    end to end from durations, not measured), the ``gaps`` no evidence explains, the ready and
    first-token marks, and its CPU use when sampled. ``group``: its configuration, of ``n``
    runs."""

    run: str
    group: str
    n: int
    time_to_ready: float | None
    first_token: float | None
    lanes: tuple[Lane, ...]
    segments: tuple[Segment, ...]
    gaps: tuple[Segment, ...]
    sources: dict[str, str]
    sequential: bool
    cpu: CpuUsage | None
    from_log: bool = False
    """A run read from a saved log (``origin: log``), not measured or the paper's data."""


@dataclass(frozen=True)
class Timelines:
    items: tuple[Gantt, ...]


def timeline(run: Run, group: str = "", n: int = 1) -> Gantt:
    """One run as a per-process Gantt: lanes of evidence intervals (stages on the first row,
    sub-steps below; overlapping bars of one row are packed onto extra rows), the reconciled
    stage segments, the gaps no evidence explains, and the ready / first-token marks. A stage
    or sub-step seen several times in one process (two sources, or nested in itself) is drawn
    once, as the trace export does (``export.trace.merge_evidence``)."""
    from coldscope.export.trace import merge_evidence
    by_name: dict[tuple[str, int | None, str], list[tuple[float, float, str]]] = {}
    for iv in run.intervals:  # per process and name: one source, overlaps merged (no stage twice)
        by_name.setdefault((iv.process or "engine", iv.pid, iv.name), []).append(
            (iv.start, iv.end, iv.source or ""))
    bars: dict[tuple[str, int | None], list[Bar]] = {}
    for (process, pid, name), items in by_name.items():
        lane = bars.setdefault((process, pid), [])
        for start, end, source, _ in merge_evidence(items):
            lane.append(Bar(name=name, stage=stage_of(name), depth=1 if "/" in name else 0,
                            start=start, end=end, seconds=end - start, source=source))
    roles = role_order()
    ordered = sorted(bars.items(), key=lambda item: (
        roles.index(item[0][0]) if item[0][0] in roles else len(roles),
        min(b.start for b in item[1])))
    segments = drawn_segments(run)
    return Gantt(
        run=run.id, group=group, n=n, time_to_ready=run.time_to_ready_s,
        first_token=run.first_token_s,
        lanes=tuple(Lane(process=process, pid=pid, rows=_pack(lane))
                    for (process, pid), lane in ordered),
        segments=segments, gaps=tuple(s for s in segments if s.bucket == UNATTRIBUTED),
        sources=dict(run.sources), cpu=cpu_usage(run), from_log=run.origin == "log",
        sequential=all(iv.process == LAID_OUT for iv in run.intervals))


def _pack(bars: Sequence[Bar]) -> tuple[tuple[Bar, ...], ...]:
    """Rows of non-overlapping bars: depth-0 bars first, then sub-steps, greedily."""
    rows: list[list[Bar]] = []
    for depth in (0, 1):
        mine: list[list[Bar]] = []
        for bar in sorted((b for b in bars if b.depth == depth), key=lambda b: b.start):
            for row in mine:
                if row[-1].end <= bar.start + 1e-9:
                    row.append(bar)
                    break
            else:
                mine.append([bar])
        rows.extend(mine)
    return tuple(tuple(row) for row in rows)


def build(groups: Sequence[Configuration]) -> Timelines:
    """The representative run of each of the first configurations (``MAX_TIMELINES``)."""
    return Timelines(items=tuple(timeline(run, g.name, len(g.runs))
                                 for g, run in representatives(groups)))


def chart(tl: Gantt, chart_no: int = 1) -> str:
    """Per-process Gantt of one run: the reconciled stages on top, then one lane per process
    (stage bars, sub-steps below), hatched bands where no evidence explains the time, markers
    for ready and first token, and (when sampled) the per-core CPU heatmap on the same axis.

    Zoomable: every timed element carries its seconds (``svg.times``) and sits in a clipped
    group, and the x axis is a ``g.xaxis`` the script redraws, so dragging across the chart
    zooms into that span (double-click or the reset button zooms out). The marker labels have
    rows of their own above the plot (``ready`` on the lower, ``first token`` on the upper,
    each left of its line), so they never overlap each other or a bar however close the two
    moments are."""
    cpu = tl.cpu
    width, left, right, top, row_h = 980, 150, 24, 36, 16
    end = max([tl.first_token or 0.0, tl.time_to_ready or 0.0,
               *(s.end for s in tl.segments), 0.1])
    x = Linear(0, end * 1.01, left, width - right)
    ticks = [t for t in nice_ticks(0, end, 8) if t <= end * 1.01]
    lanes = tl.lanes
    cores = cpu.cores if cpu else 0
    core_h = 10 if cores <= 16 else max(2, 160 // cores)
    height = top + 24 + sum(6 + row_h * max(1, len(ln.rows)) for ln in lanes) \
        + (14 + cores * core_h + 36 if cpu else 0) + 48
    svg = Svg(width, height, f"timeline of run {tl.run}", cls="chart gantt")
    clip = f"gclip{chart_no}"
    svg.add(f'<clipPath id="{clip}"><rect x="{left}" y="0" width="{width - right - left}" '
            f'height="{height}"/></clipPath>')
    # labels outside the plot (not zoomed)
    svg.text(left - 8, top + 14, "stages (reconciled)", anchor="end", cls="label strong")
    y = top + 28
    lane_ys = []
    for ln in lanes:
        h = row_h * len(ln.rows or ((),))
        lane_ys.append((y, h))
        name = ln.process + (f" {ln.pid}" if ln.pid else "")
        svg.rect(left, y, width - right - left, h + 2, "#f6f7f9", cls="lane")
        svg.text(left - 8, y + 12, name, anchor="end", cls="label")
        y += h + 6
    lanes_top, lanes_bottom = top + 28, y
    if cpu:
        y += 8
        svg.text(left - 8, y + 10, f"CPU, {cores} cores", anchor="end", cls="label strong")
    # the zoomable plot
    svg.add(f'<g class="zoom" clip-path="url(#{clip})">')
    for s in tl.segments:
        tip = (f"{label(s.bucket)}: {fmt_s(s.end - s.start)} ({fmt_s(s.start, '')}–"
               f"{fmt_s(s.end)})" + (f"\nsource: {tl.sources[s.bucket]}"
                                     if s.bucket in tl.sources else "")
               + ("\nno evidence covers this time" if s.bucket == UNATTRIBUTED else ""))
        svg.rect(x(s.start), top + 2, x(s.end) - x(s.start), 18, fill(s.bucket), tip,
                 cls="mark seg", extra=times(s.start, s.end))
    for ln, (ly, _) in zip(lanes, lane_ys, strict=True):
        for j, row in enumerate(ln.rows or ((),)):
            for bar in row:
                by = ly + 1 + j * row_h
                bh = row_h - 3 if bar.depth == 0 else row_h - 6
                tip = (f"{bar.name} — {fmt_s(bar.seconds)}\n{fmt_s(bar.start, '')}–"
                       f"{fmt_s(bar.end)} after launch\nsource: {bar.source} · "
                       f"{ln.process}" + (f" pid {ln.pid}" if ln.pid else ""))
                svg.rect(x(bar.start), by + (0 if bar.depth == 0 else 2),
                         max(x(bar.end) - x(bar.start), 1.0), bh, fill(bar.stage), tip,
                         cls="mark bar" + (" sub" if bar.depth else ""),
                         extra=times(bar.start, bar.end))
                if bar.depth:
                    text = bar.name.split("/", 1)[1]
                    need = text_width(text, 9.5) + 6
                    fits = x(bar.end) - x(bar.start) > need
                    svg.text(x(bar.start) + 3, by + bh - 1, text, cls="inbar",
                             extra=times(bar.start, bar.end) + f' data-w="{need:.0f}"'
                             + ("" if fits else ' display="none"'))
    for g in tl.gaps:
        svg.rect(x(g.start), lanes_top - 2, x(g.end) - x(g.start),
                 lanes_bottom - lanes_top, "url(#hatch)",
                 f"gap: {fmt_s(g.end - g.start)} no evidence explains "
                 f"({fmt_s(g.start, '')}–{fmt_s(g.end)})", cls="mark gap",
                 extra=times(g.start, g.end))
    if cpu:
        heatmap(svg, cpu.t, cpu.per_core, cpu.interval_s, cpu.cores, x, y, core_h)
    plot_bottom = y + (cores * core_h + 6 if cpu else 0)
    for v, name, row_no in ((tl.time_to_ready, "ready", 0), (tl.first_token, "first token", 1)):
        if v is not None:
            ly = top - 4 - 13 * row_no
            svg.line(x(v), ly - 10, x(v), plot_bottom, cls="marker", extra=times(v))
            svg.text(x(v) - 3, ly, name, anchor="end", cls="marker-text",
                     extra=times(v) + ' data-dx="-3"')
    svg.add("</g>")
    y = plot_bottom
    if cpu:
        color_scale(svg, left, y + 8)
        y += 36
    svg.add('<g class="xaxis">')
    svg.x_axis(x, ticks, y + 4, y + 4, "time since launch (s)")
    svg.add("</g>")
    return svg.gantt(left, width - right, end * 1.01)


def draw(section: Timelines) -> str:
    """One folding figure per timeline (the first open), each with its table of intervals."""
    if not section.items:
        return empty("No runs.")
    parts = []
    for i, tl in enumerate(section.items):
        bars = [(ln, bar) for ln in tl.lanes for row in ln.rows for bar in row]
        csv_rows: list[dict[str, CsvValue]] = [
            {"process": ln.process, "pid": ln.pid, "name": bar.name, "start_s": bar.start,
             "end_s": bar.end, "seconds": bar.seconds, "source": bar.source}
            for ln, bar in bars]
        csv_rows += [{"process": "stages (reconciled)", "name": s.bucket, "start_s": s.start,
                      "end_s": s.end, "seconds": s.end - s.start,
                      "source": tl.sources.get(s.bucket, "")} for s in tl.segments]
        rows = [[esc(bar.name), esc(ln.process), esc(bar.source), fmt_s(bar.start, ""),
                 fmt_s(bar.end, ""), fmt_s(bar.seconds, "")]
                for ln, bar in sorted(bars, key=lambda lb: lb[1].start)]
        gaps = sum(g.end - g.start for g in tl.gaps)
        note = ("A saved log gives each stage's duration, not when it began: the stages "
                "are laid end to end in their usual order." if tl.sequential and tl.from_log
                else "The paper publishes stage durations, not per-process intervals: the "
                "stages are laid end to end in their usual order." if tl.sequential else
                f"Top row: the reconciled stages, which tile launch→ready exactly. Below: what "
                f"each process reported (stage bars, sub-steps under them); hatched: "
                f"{fmt_s(gaps)} in {len(tl.gaps)} gaps no evidence explains. Hover a bar "
                f"for its duration and evidence source.")
        tbl = table(["interval", "process", "source", "start s", "end s", "duration s"], rows,
                    caption="evidence intervals, seconds since launch", numeric_from=3) \
            if rows else ""
        title = f"Gantt — {tl.group} (run {tl.run}"
        title += f", median of {tl.n})" if tl.n > 1 else ")"
        seen = {s.bucket for s in tl.segments} | {
            bar.stage for ln in tl.lanes for row in ln.rows for bar in row}
        extra = [key("no evidence (gap)", HATCH)] if tl.gaps else []
        extra += [key(name, "border-color:#1f2430", "dash") for v, name in
                  ((tl.time_to_ready, "ready"), (tl.first_token, "first token"))
                  if v is not None]
        if tl.cpu:
            extra.append(key("CPU busy 0–100 %", "background:linear-gradient(90deg,"
                             f"{heat(0)},{heat(50)},{heat(100)})", "wide"))
        note += " Drag across the chart to zoom into a span; double-click to zoom out."
        body = figure(f"timeline-{i + 1}", title, chart(tl, i + 1), tbl,
                      csv_link(f"timeline-{i + 1}.csv", csv_rows), note=note,
                      keys=legend([b for b in BUCKETS if b in seen], extra),
                      tools='<button type="button" class="zoomreset" hidden>reset zoom'
                            '</button>')
        parts.append(f'<details class="run"{" open" if i == 0 else ""}><summary>'
                     f'{esc(tl.group)} <small>ready in {fmt_s(tl.time_to_ready)}'
                     f'</small></summary>{body}</details>')
    return "".join(parts)

