"""The report page: chart data (``coldscope.report.data``) drawn as inline SVG, with tables.

Why server-side SVG and no charting library: every chart is drawn here, in Python, as plain SVG
markup, so the browser only parses and lays out elements - no library to download or inline
(Plotly's bundle alone is 3.5 MB of the 5 MB budget), no script has to run before a chart
shows, and charts aggregate runs per configuration, so 1,000 runs cost a few hundred elements
per chart, not a thousand. The page works with scripts disabled; the one small inlined script
only turns SVG ``<title>`` hover text into a styled tooltip. Each chart's data goes with it as
a CSV ``data:`` URL, and as a table that reads without a mouse.
"""

from __future__ import annotations

import html
import math
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from coldscope import __version__
from coldscope.core.stages import BUCKETS, STAGES, UNATTRIBUTED
from coldscope.report.data import (
    DIMENSION_TITLES,
    MAX_SCALING_SERIES,
    SATURATED_PERCENT,
    TOTAL,
    to_csv,
)

#: One colour per bucket, the same in every chart (Tableau 10: distinct, colour-blind aware).
COLORS: dict[str, str] = {
    "bootstrap": "#4e79a7", "tokenizer": "#f28e2b", "model_loading": "#59a14f",
    "torch_compile": "#e15759", "kv_cache_profiling": "#b07aa1",
    "cuda_graph_capture": "#76b7b2", "server_ready": "#edc948", "unattributed": "#bab0ac",
}
SERIES_COLORS = ("#4e79a7", "#e15759", "#59a14f", "#b07aa1", "#f28e2b")

_FONT = 12  # px, chart text


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt_s(v: float | None, unit: str = " s") -> str:
    """Seconds with three significant digits (``78.4 s``, ``0.0397 s``); ``–`` when unknown."""
    if v is None:
        return "–"
    a = abs(v)
    if a >= 100:
        text = f"{v:.0f}"
    elif a >= 10:
        text = f"{v:.1f}"
    elif a >= 1:
        text = f"{v:.2f}"
    elif a == 0:
        text = "0"
    else:
        text = f"{v:.3g}"
    return text + unit


def fmt_x(v: float | None) -> str:
    return "–" if v is None else (f"{v:.2f}×" if v < 10 else f"{v:.1f}×")


def label(bucket: str) -> str:
    return "time to ready" if bucket == TOTAL else bucket.replace("_", " ")


# -- scales and axes ---------------------------------------------------------------------------

def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 × 10^k steps) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [round(start, 12)], start
    while t < hi - step * 1e-9:
        t += step
        ticks.append(round(t, 12))
    return ticks


def tick_text(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


class Linear:
    """Map data values in [lo, hi] to pixels in [a, b]."""

    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.lo, self.hi, self.a, self.b = lo, (hi if hi > lo else lo + 1.0), a, b

    def __call__(self, v: float) -> float:
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)


class Log:
    """Map positive values in [lo, hi] to pixels on a log scale."""

    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.lo, self.hi, self.a, self.b = math.log(lo), math.log(hi), a, b

    def __call__(self, v: float) -> float:
        v = min(max(math.log(v), self.lo), self.hi)
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)


class Svg:
    """A tiny SVG writer: elements are appended as strings, ``str()`` gives the markup."""

    def __init__(self, width: float, height: float, title: str, cls: str = "chart") -> None:
        self.width, self.height, self.title, self.cls = width, height, title, cls
        self.parts: list[str] = []

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def rect(self, x, y, w, h, fill, tip: str | None = None, cls: str = "",
             extra: str = "") -> None:
        body = f"<title>{esc(tip)}</title>" if tip else ""
        c = f' class="{cls}"' if cls else ""
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.2f}" height="{max(h, 0):.1f}"'
                 f' fill="{fill}"{c}{extra}>{body}</rect>' if body else
                 f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.2f}" height="{max(h, 0):.1f}"'
                 f' fill="{fill}"{c}{extra}/>')

    def line(self, x1, y1, x2, y2, cls: str = "", extra: str = "") -> None:
        c = f' class="{cls}"' if cls else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"{c}{extra}/>')

    def text(self, x, y, content: str, anchor: str = "start", cls: str = "",
             extra: str = "") -> None:
        c = f' class="{cls}"' if cls else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}{extra}>'
                 f'{esc(content)}</text>')

    def circle(self, x, y, r, fill, tip: str | None = None, cls: str = "mark",
               extra: str = "") -> None:
        body = f"<title>{esc(tip)}</title>" if tip else ""
        self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{fill}" class="{cls}"{extra}>'
                 f'{body}</circle>')

    def x_axis(self, scale, ticks: Iterable[float], y: float, top: float, caption: str,
               fmt=tick_text) -> None:
        for t in ticks:
            x = scale(t)
            self.line(x, top, x, y, cls="grid")
            self.text(x, y + 15, fmt(t), anchor="middle", cls="tick")
        self.line(scale.a, y, scale.b, y, cls="axis")
        self.text((scale.a + scale.b) / 2, y + 33, caption, anchor="middle", cls="caption")

    def y_axis(self, scale, ticks: Iterable[float], x: float, right: float, caption: str) -> None:
        for t in ticks:
            y = scale(t)
            self.line(x, y, right, y, cls="grid")
            self.text(x - 6, y + 4, tick_text(t), anchor="end", cls="tick")
        self.line(x, scale.a, x, scale.b, cls="axis")
        mid = (scale.a + scale.b) / 2
        self.text(14, mid, caption, anchor="middle", cls="caption",
                  extra=f' transform="rotate(-90 14 {mid:.1f})"')

    def gantt(self, left: float, right: float, end: float) -> str:
        """The markup of a zoomable Gantt: the plot's pixel range and time span ride along."""
        return str(self).replace(
            "<svg ", f'<svg data-left="{left:.1f}" data-right="{right:.1f}" '
                     f'data-end="{end:.6g}" ', 1)

    def __str__(self) -> str:
        return (f'<svg class="{self.cls}" role="img" viewBox="0 0 {self.width:.0f} '
                f'{self.height:.0f}" width="{self.width:.0f}" height="{self.height:.0f}" '
                f'xmlns="http://www.w3.org/2000/svg"><title>{esc(self.title)}</title>'
                f'<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
                f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eee"/>'
                f'<line x1="0" y1="0" x2="0" y2="6" stroke="#b5aca6" stroke-width="3"/>'
                f'</pattern></defs>' + "".join(self.parts) + "</svg>")


# -- page pieces -------------------------------------------------------------------------------

def csv_link(name: str, rows: Sequence[Mapping[str, Any]],
             columns: Sequence[str] | None = None) -> str:
    """A download link carrying the chart's data as a CSV ``data:`` URL (no script needed)."""
    text = to_csv(rows, columns)
    href = "data:text/csv;charset=utf-8," + urllib.parse.quote(text, safe=" ,.:;/_-()")
    return (f'<a class="csv" download="{esc(name)}" href="{href}" '
            f'title="download the data behind this chart">⬇ {esc(name)}</a>')


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], caption: str = "",
          numeric_from: int = 1, sticky_last: bool = False,
          numeric_to: int | None = None) -> str:
    """A table whose first column (the row's name) stays in view when it scrolls sideways;
    with ``sticky_last`` the last column (time to ready) stays in view too. Columns from
    ``numeric_from`` up to (not including) ``numeric_to`` are numbers, right-aligned."""
    n = len(columns)
    upto = n if numeric_to is None else numeric_to

    def cls(i: int) -> str:
        names = (["num"] if numeric_from <= i < upto else []) + (
            ["pin"] if sticky_last and i == n - 1 else [])
        return f' class="{" ".join(names)}"' if names else ""

    head = "".join(f'<th scope="col"{cls(i)}>{esc(c)}</th>' for i, c in enumerate(columns))
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            if i == 0:
                cells.append(f'<th scope="row">{v}</th>')
            else:
                cells.append(f'<td{cls(i)}>{v}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (f'<div class="table-wrap"><table>{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def figure(chart_id: str, title: str, chart: str, tables: str, downloads: str,
           note: str = "", side: bool = False, keys: str = "", tools: str = "") -> str:
    """One chart with its title, legend (``keys``, see ``legend``), note, table (beside it
    when ``side``) and CSV link. Every chart gets its own legend: a reader who jumps to one
    chart should not have to scroll back to the page header to decode its colours."""
    cls = "figure side" if side else "figure"
    note_html = f'<p class="note">{note}</p>' if note else ""
    return (f'<figure class="{cls}" id="{esc(chart_id)}" data-chart="{esc(chart_id)}">'
            f'<figcaption><span>{esc(title)}</span><span class="downloads">{tools}{downloads}'
            f'</span></figcaption>{note_html}{keys}<div class="body"><div class="plot">{chart}'
            f'</div><div class="data">{tables}</div></div></figure>')


def empty(text: str) -> str:
    return f'<p class="empty">{esc(text)}</p>'


#: Legend swatch styles for marks that are not a bucket's colour.
HATCH = "background: repeating-linear-gradient(45deg,#eee 0 3px,#b5aca6 3px 5px)"


def key(text: str, style: str, shape: str = "") -> str:
    """One legend entry: a swatch (``shape``: "" square, "dot", "line", "dash", "diamond",
    "ring") styled by ``style``, then its text."""
    cls = f' class="{shape}"' if shape else ""
    return f'<span class="key"><i{cls} style="{style}"></i>{esc(text)}</span>'


def legend(buckets: Sequence[str] = BUCKETS, extra: Sequence[str] = ()) -> str:
    """A legend of bucket colours (in stage order), followed by ``extra`` entries (``key``)."""
    items = [key(label(b), HATCH if b == UNATTRIBUTED else f"background:{COLORS[b]}")
             for b in buckets]
    return '<div class="legend">' + "".join([*items, *extra]) + "</div>"


def fill(bucket: str) -> str:
    return "url(#hatch)" if bucket == UNATTRIBUTED else COLORS.get(bucket, "#999")


# -- 1. breakdown ------------------------------------------------------------------------------

def breakdown_chart(rows: Sequence[Mapping[str, Any]], title: str) -> str:
    """Horizontal stacked bars of bucket means per configuration, whiskers over repetitions:
    thick ±1 sd, thin min-max of the time to ready."""
    label_w = min(360, max(90, 7 * max(len(r["short"]) for r in rows)))
    width, bar_h, gap = 980, 20, 10
    values = [f"{fmt_s(r['total']['mean'])}" + (f" · n={r['total']['n']}"
                                                if r["total"]["n"] > 1 else "")
              if r["total"] else "" for r in rows]
    # the value right of the longest bar or whisker must fit in the right margin
    left, right, top = label_w + 16, max(80.0, max(_text_width(v, 11.5) for v in values) + 12), 10
    height = top + len(rows) * (bar_h + gap) + 46
    hi = max((r["total"] or {}).get("max", 0.0) or 0.0 for r in rows)
    hi = max(hi, max(sum((s or {}).get("mean", 0) for s in r["buckets"].values()) for r in rows))
    ticks = nice_ticks(0, hi)
    x = Linear(0, ticks[-1], left, width - right)
    svg = Svg(width, height, title)
    base = top + len(rows) * (bar_h + gap)
    svg.x_axis(x, ticks, base, top, "seconds from launch to ready (mean of repetitions)")
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        name = r["short"] if len(r["short"]) * 7 <= label_w else \
            r["short"][: label_w // 7 - 1] + "…"
        svg.text(left - 8, y + bar_h / 2 + 4, name, anchor="end", cls="label",
                 extra=f' data-group="{esc(r["key"])}"')
        t = 0.0
        for b in BUCKETS:
            s = r["buckets"].get(b)
            if not s or s["mean"] <= 0:
                continue
            tip = (f"{r['name']}\n{label(b)}: {fmt_s(s['mean'])} mean"
                   + (f" ± {fmt_s(s['sd'])} (n={s['n']}, {fmt_s(s['min'])}–{fmt_s(s['max'])})"
                      if s["n"] > 1 else "")
                   + (f"\nsource: {r['sources'][b]}" if b in r["sources"] else ""))
            svg.rect(x(t), y, x(t + s["mean"]) - x(t), bar_h, fill(b), tip, cls="mark seg")
            t += s["mean"]
        total = r["total"]
        if total:
            mid = y + bar_h / 2
            if total["n"] > 1:
                svg.line(x(total["min"]), mid, x(total["max"]), mid, cls="whisker thin")
                svg.line(x(max(0.0, total["mean"] - total["sd"])), mid,
                         x(total["mean"] + total["sd"]), mid, cls="whisker")
                for v in (total["min"], total["max"]):
                    svg.line(x(v), mid - 5, x(v), mid + 5, cls="whisker thin")
            svg.text(max(x(total["max"]), x(t)) + 6, mid + 4, values[i], cls="value")
    return str(svg)


def breakdown_section(data: Mapping[str, Any]) -> str:
    rows = data["breakdown"]
    datasets: dict[Any, list] = {}
    for r in rows:
        datasets.setdefault(r["dataset"], []).append(r)
    parts = []
    for i, (dataset, drows) in enumerate(datasets.items()):
        title = f"Start-up per configuration — {dataset}" if dataset else \
            "Start-up per configuration"
        csv_rows = []
        for r in drows:
            row = {"configuration": r["name"], "runs": r["n"]}
            for b in (*BUCKETS, TOTAL):
                s = r["total"] if b == TOTAL else r["buckets"].get(b)
                row[f"{b}_mean_s"] = s["mean"] if s else None
                row[f"{b}_sd_s"] = s["sd"] if s else None
            if r["first_token"]:
                row["first_token_mean_s"] = r["first_token"]["mean"]
            csv_rows.append(row)
        shown = [b for b in BUCKETS if any(r["buckets"].get(b) for r in drows)]
        trows = []
        for r in drows:
            cells = [esc(r["short"]), str(r["n"])]
            for b in shown:
                s = r["buckets"].get(b)
                na = b in r["not_applicable"]
                cells.append("n/a" if s is None and na else
                             (fmt_s(s["mean"], "") + (f' <small>±{fmt_s(s["sd"], "")}</small>'
                                                      if s and s["n"] > 1 else "")) if s else "–")
            t = r["total"]
            cells.append(f"<b>{fmt_s(t['mean'], '')}</b>" + (
                f' <small>±{fmt_s(t["sd"], "")}</small>' if t and t["n"] > 1 else "")
                if t else "–")
            trows.append(cells)
        tbl = table(["configuration", "runs", *(f"{label(b)} s" for b in shown),
                     "time to ready s"],
                    trows, caption="seconds, mean ± sd over repetitions", sticky_last=True)
        drawn = [b for b in BUCKETS if any((r["buckets"].get(b) or {}).get("mean") for r in drows)]
        keys = legend(drawn, [key("±1 sd of time to ready", "background:#1f2430", "line"),
                              key("min–max", "background:#1f2430", "thin")])
        fig = figure(
            f"breakdown-{i + 1}", title, breakdown_chart(drows, title), tbl,
            csv_link(f"breakdown-{i + 1}.csv", csv_rows), keys=keys,
            note="Each bar stacks the mean seconds of every stage; the whisker spans the "
                 "repetitions' time to ready (thick: ±1 sd, thin: min–max). Hover a segment "
                 "for its spread and evidence source.")
        if i == 0:
            parts.append(fig)
        else:  # further datasets (the paper's figures) fold away, to keep the page short
            common = ", ".join(f"{DIMENSION_TITLES[d]}: {v}" for d, v in drows[0]["dims"].items()
                               if d != "model" and v is not None and
                               all(r["dims"].get(d) == v for r in drows))
            parts.append(f'<details class="run"><summary>{esc(dataset)} <small>'
                         f'{len(drows)} configurations · {esc(common)}</small></summary>'
                         f'{fig}</details>')
    return "".join(parts)


# -- 2. timeline -------------------------------------------------------------------------------

def _t(*times: float) -> str:
    """``data-t0``/``data-t1`` (or ``data-t``) attributes: the seconds an element stands for,
    so the page's script can re-place it when the Gantt is zoomed."""
    if len(times) == 1:
        return f' data-t="{times[0]:.6g}"'
    return f' data-t0="{times[0]:.6g}" data-t1="{times[1]:.6g}"'


def timeline_chart(tl: Mapping[str, Any], cpu: Mapping[str, Any] | None = None,
                   chart_no: int = 1) -> str:
    """Per-process Gantt of one run: the reconciled stages on top, then one lane per process
    (stage bars, sub-steps below), hatched bands where no evidence explains the time, markers
    for ready and first token, and (when sampled) the per-core CPU heatmap on the same axis.

    Zoomable: every timed element carries its seconds (``_t``) and sits in a clipped group, and
    the x axis is a ``g.xaxis`` the script redraws, so dragging across the chart zooms into that
    span (double-click or the reset button zooms out). The marker labels have rows of their
    own above the plot (``ready`` on the lower, ``first token`` on the upper, each left of its
    line), so they never overlap each other or a bar however close the two moments are."""
    width, left, right, top, row_h = 980, 150, 24, 36, 16
    end = max([tl.get("first_token") or 0.0, tl.get("time_to_ready") or 0.0,
               *(s["end"] for s in tl["segments"]), 0.1])
    x = Linear(0, end * 1.01, left, width - right)
    ticks = [t for t in nice_ticks(0, end, 8) if t <= end * 1.01]
    lanes = tl["lanes"]
    cores = cpu["cores"] if cpu else 0
    core_h = 10 if cores <= 16 else max(2, 160 // cores)
    height = top + 24 + sum(6 + row_h * max(1, len(ln["rows"])) for ln in lanes) \
        + (14 + cores * core_h + 36 if cpu else 0) + 48
    svg = Svg(width, height, f"timeline of run {tl['run']}", cls="chart gantt")
    clip = f"gclip{chart_no}"
    svg.add(f'<clipPath id="{clip}"><rect x="{left}" y="0" width="{width - right - left}" '
            f'height="{height}"/></clipPath>')
    # labels outside the plot (not zoomed)
    svg.text(left - 8, top + 14, "stages (reconciled)", anchor="end", cls="label strong")
    y = top + 28
    lane_ys = []
    for ln in lanes:
        h = row_h * len(ln["rows"] or [[]])
        lane_ys.append((y, h))
        name = ln["process"] + (f" {ln['pid']}" if ln.get("pid") else "")
        svg.rect(left, y, width - right - left, h + 2, "#f6f7f9", cls="lane")
        svg.text(left - 8, y + 12, name, anchor="end", cls="label")
        y += h + 6
    lanes_top, lanes_bottom = top + 28, y
    if cpu:
        y += 8
        svg.text(left - 8, y + 10, f"CPU, {cores} cores", anchor="end", cls="label strong")
    # the zoomable plot
    svg.add(f'<g class="zoom" clip-path="url(#{clip})">')
    for s in tl["segments"]:
        tip = (f"{label(s['bucket'])}: {fmt_s(s['seconds'])} ({fmt_s(s['start'], '')}–"
               f"{fmt_s(s['end'])})" + (f"\nsource: {tl['sources'][s['bucket']]}"
                                        if s["bucket"] in tl["sources"] else "")
               + ("\nno evidence covers this time" if s["bucket"] == UNATTRIBUTED else ""))
        svg.rect(x(s["start"]), top + 2, x(s["end"]) - x(s["start"]), 18, fill(s["bucket"]), tip,
                 cls="mark seg", extra=_t(s["start"], s["end"]))
    for ln, (ly, _) in zip(lanes, lane_ys, strict=True):
        for j, row in enumerate(ln["rows"] or [[]]):
            for bar in row:
                by = ly + 1 + j * row_h
                bh = row_h - 3 if bar["depth"] == 0 else row_h - 6
                tip = (f"{bar['name']} — {fmt_s(bar['seconds'])}\n{fmt_s(bar['start'], '')}–"
                       f"{fmt_s(bar['end'])} after launch\nsource: {bar['source']} · "
                       f"{ln['process']}" + (f" pid {ln['pid']}" if ln.get("pid") else ""))
                svg.rect(x(bar["start"]), by + (0 if bar["depth"] == 0 else 2),
                         max(x(bar["end"]) - x(bar["start"]), 1.0), bh, fill(bar["stage"]), tip,
                         cls="mark bar" + (" sub" if bar["depth"] else ""),
                         extra=_t(bar["start"], bar["end"]))
                if bar["depth"]:
                    text = bar["name"].split("/", 1)[1]
                    need = _text_width(text, 9.5) + 6
                    fits = x(bar["end"]) - x(bar["start"]) > need
                    svg.text(x(bar["start"]) + 3, by + bh - 1, text, cls="inbar",
                             extra=_t(bar["start"], bar["end"]) + f' data-w="{need:.0f}"'
                             + ("" if fits else ' display="none"'))
    for g in tl["gaps"]:
        svg.rect(x(g["start"]), lanes_top - 2, x(g["end"]) - x(g["start"]),
                 lanes_bottom - lanes_top, "url(#hatch)",
                 f"gap: {fmt_s(g['seconds'])} no evidence explains "
                 f"({fmt_s(g['start'], '')}–{fmt_s(g['end'])})", cls="mark gap",
                 extra=_t(g["start"], g["end"]))
    if cpu:
        _heatmap(svg, cpu, x, y, core_h)
    plot_bottom = y + (cores * core_h + 6 if cpu else 0)
    for key_, name, row in (("time_to_ready", "ready", 0), ("first_token", "first token", 1)):
        v = tl.get(key_)
        if v is not None:
            ly = top - 4 - 13 * row
            svg.line(x(v), ly - 10, x(v), plot_bottom, cls="marker", extra=_t(v))
            svg.text(x(v) - 3, ly, name, anchor="end", cls="marker-text",
                     extra=_t(v) + ' data-dx="-3"')
    svg.add("</g>")
    y = plot_bottom
    if cpu:
        _color_scale(svg, left, y + 8)
        y += 36
    svg.add('<g class="xaxis">')
    svg.x_axis(x, ticks, y + 4, y + 4, "time since launch (s)")
    svg.add("</g>")
    return svg.gantt(left, width - right, end * 1.01)


def _text_width(text: str, size: float) -> float:
    """A generous estimate of a label's width in px (average glyph 0.62 em)."""
    return len(text) * size * 0.62


def _color_scale(svg: Svg, x0: float, y: float, steps: int = 10) -> None:
    """The CPU heatmap's colour scale: ``steps`` swatches from idle to saturated, labelled."""
    w = 18
    svg.text(x0 + steps * w + 16, y + 9, "CPU busy (%)", cls="tick")
    for i in range(steps):
        lo, hi = 100 * i / steps, 100 * (i + 1) / steps
        svg.rect(x0 + i * w, y, w, 10, _heat((lo + hi) / 2), f"{lo:.0f}–{hi:.0f} % busy",
                 cls="scale")
    for v in (0, 50, 100):
        svg.text(x0 + steps * w * v / 100, y + 21, f"{v}", anchor="middle", cls="tick")


def _heatmap(svg: Svg, cpu: Mapping[str, Any], x, y: float, core_h: float,
             max_columns: int = 400) -> None:
    """One row per core, one cell per sample (averaged down to ``max_columns``), darker = busier."""
    t, rows, step = cpu["t"], cpu["per_core"], cpu["interval_s"]
    group = max(1, math.ceil(len(t) / max_columns))
    for i in range(0, len(t), group):
        chunk = rows[i:i + group]
        t0 = t[i] - step
        t1 = t[min(i + group, len(t)) - 1]
        for c in range(cpu["cores"]):
            vals = [r[c] for r in chunk if c < len(r)]
            v = sum(vals) / len(vals) if vals else 0.0
            svg.rect(x(max(t0, 0.0)), y + c * core_h, max(x(t1) - x(max(t0, 0.0)), 0.5),
                     core_h - 1, _heat(v),
                     f"core {c}: {v:.0f} % busy at {fmt_s(t1)}", cls="mark cell",
                     extra=_t(max(t0, 0.0), t1))


def _heat(percent: float) -> str:
    """White (idle) to deep red (saturated)."""
    p = min(max(percent, 0.0), 100.0) / 100.0
    r = int(255 - p * (255 - 178))
    g = int(255 - p * (255 - 24))
    b = int(255 - p * (255 - 43))
    return f"#{r:02x}{g:02x}{b:02x}"


def timeline_section(data: Mapping[str, Any]) -> str:
    if not data["timelines"]:
        return empty("No runs.")
    cpu_by_run = {c["run"]: c for c in data["cpu"]}
    parts = []
    for i, tl in enumerate(data["timelines"]):
        cpu = cpu_by_run.get(tl["run"])
        rows, csv_rows = [], []
        for ln in tl["lanes"]:
            for row in ln["rows"]:
                for bar in row:
                    csv_rows.append({"process": ln["process"], "pid": ln.get("pid"),
                                     "name": bar["name"], "start_s": bar["start"],
                                     "end_s": bar["end"], "seconds": bar["seconds"],
                                     "source": bar["source"]})
        for s in tl["segments"]:
            csv_rows.append({"process": "stages (reconciled)", "name": s["bucket"],
                             "start_s": s["start"], "end_s": s["end"], "seconds": s["seconds"],
                             "source": tl["sources"].get(s["bucket"], "")})
        for r in sorted(csv_rows, key=lambda r: r["start_s"]):
            if r["process"] == "stages (reconciled)":
                continue
            rows.append([esc(r["name"]), esc(r["process"]), esc(r["source"]),
                         fmt_s(r["start_s"], ""), fmt_s(r["end_s"], ""),
                         fmt_s(r["seconds"], "")])
        gaps = sum(g["seconds"] for g in tl["gaps"])
        note = ("The paper publishes stage durations, not per-process intervals: the stages "
                "are laid end to end in their usual order." if tl["sequential"] else
                f"Top row: the reconciled stages, which tile launch→ready exactly. Below: what "
                f"each process reported (stage bars, sub-steps under them); hatched: "
                f"{fmt_s(gaps)} in {len(tl['gaps'])} gaps no evidence explains. Hover a bar "
                f"for its duration and evidence source.")
        tbl = table(["interval", "process", "source", "start s", "end s", "duration s"], rows,
                    caption="evidence intervals, seconds since launch", numeric_from=3) \
            if rows else ""
        title = f"Timeline — {tl['group']} (run {tl['run']}"
        title += f", median of {tl['n']})" if tl.get("n", 1) > 1 else ")"
        seen = {s["bucket"] for s in tl["segments"]} | {
            bar["stage"] for ln in tl["lanes"] for row in ln["rows"] for bar in row}
        extra = [key("no evidence (gap)", HATCH)] if tl["gaps"] else []
        extra += [key(name, "border-color:#1f2430", "dash") for k, name in
                  (("time_to_ready", "ready"), ("first_token", "first token"))
                  if tl.get(k) is not None]
        if cpu:
            extra.append(key("CPU busy 0–100 %", "background:linear-gradient(90deg,"
                             f"{_heat(0)},{_heat(50)},{_heat(100)})", "wide"))
        note += " Drag across the chart to zoom into a span; double-click to zoom out."
        body = figure(f"timeline-{i + 1}", title, timeline_chart(tl, cpu, i + 1), tbl,
                      csv_link(f"timeline-{i + 1}.csv", csv_rows), note=note,
                      keys=legend([b for b in BUCKETS if b in seen], extra),
                      tools='<button type="button" class="zoomreset" hidden>reset zoom'
                            '</button>')
        parts.append(f'<details class="run"{" open" if i == 0 else ""}><summary>'
                     f'{esc(tl["group"])} <small>ready in {fmt_s(tl["time_to_ready"])}'
                     f'</small></summary>{body}</details>')
    return "".join(parts)


# -- 3. scaling --------------------------------------------------------------------------------

def scaling_chart(panel: Mapping[str, Any]) -> str:
    width, height, left, right, top, bottom = 460, 300, 58, 16, 14, 50
    pts = [p for s in panel["series"] for p in s["points"]]
    xs = [p["x"] for p in pts]
    ys = [v for p in pts for v in (p["min"], p["max"])]
    xt = nice_ticks(0, max(xs) * 1.02 if xs else 1)
    yt = nice_ticks(0, max(ys) * 1.05 if ys else 1)
    x = Linear(0, xt[-1], left, width - right)
    y = Linear(0, yt[-1], height - bottom, top)
    svg = Svg(width, height, f"{panel['stage']} against {panel['feature']}")
    svg.x_axis(x, xt, height - bottom, top, panel["feature"])
    svg.y_axis(y, yt, left, width - right, f"{label(panel['stage'])} (s)")
    for k, s in enumerate(panel["series"]):
        color = SERIES_COLORS[k % len(SERIES_COLORS)]
        fit = s["fit"]
        seg = _clip_line(fit, 0.0, xt[-1], 0.0, yt[-1]) if fit else None
        if seg:
            (x0, y0), (x1, y1) = seg
            svg.add(f'<line x1="{x(x0):.1f}" y1="{y(y0):.1f}" x2="{x(x1):.1f}" y2="{y(y1):.1f}" '
                    f'class="fit" stroke="{color}"/>')
        for p in s["points"]:
            if p["n"] > 1:
                svg.line(x(p["x"]), y(p["min"]), x(p["x"]), y(p["max"]), cls="whisker thin")
            tip = (f"{p['model']} ({s['name']})\n{panel['feature']}: {p['x']:.4g}\n"
                   f"{label(panel['stage'])}: {fmt_s(p['mean'])}"
                   + (f" (n={p['n']}, {fmt_s(p['min'])}–{fmt_s(p['max'])})" if p["n"] > 1 else "")
                   + ("" if p["kind"] == "dense" else f"\n{p['kind']}: not in the fit"))
            if p["kind"] == "dense":
                svg.circle(x(p["x"]), y(p["mean"]), 4, color, tip)
            else:
                svg.circle(x(p["x"]), y(p["mean"]), 4, "#fff", tip,
                           extra=f' stroke="{color}" stroke-width="1.5"')
    return str(svg)


def fit_text(fit: Mapping[str, Any] | None, unit: str) -> str:
    """Pearson r, slope (with its unit) and run count of a series' fit, for its legend entry
    (outside the plot, so it can never sit on a point or on another series' text)."""
    if not fit:
        return "no fit (< 2 models)"
    r = f"r = {fit['r']:.2f}" if fit["r"] is not None else "r: y constant"
    return f"{r} · slope {fit['slope']:.3g} s/{unit} · n = {fit['n']}"


def shared_series(panels: Sequence[Mapping[str, Any]]) -> list[str]:
    """The series names by colour of the panel with the most series: said once, above the
    panels; a panel whose series differ from them names its own."""
    widest = max(panels, key=lambda p: len(p["series"]), default=None)
    return [s["name"] for s in widest["series"]] if widest else []


def _same_series(panel: Mapping[str, Any], names: Sequence[str]) -> bool:
    return all(k < len(names) and s["name"] == names[k] for k, s in enumerate(panel["series"]))


def scaling_legend(panel: Mapping[str, Any], named: bool = True) -> str:
    """Per series: its colour, name (unless ``named`` is False: said once for all panels) and
    fit; then what the marks mean."""
    items = [key((f"{s['name']}: " if named else "") + fit_text(s["fit"], panel["unit"]),
                 f"background:{SERIES_COLORS[k % len(SERIES_COLORS)]}", "dot")
             for k, s in enumerate(panel["series"])]
    if any(p["kind"] != "dense" for s in panel["series"] for p in s["points"]):
        items.append(key("MoE / hybrid: not fitted", "border-color:#555", "ring"))
    items.append(key("least-squares fit", "border-color:#555", "dash"))
    return '<div class="legend small">' + "".join(items) + "</div>"


def _clip_line(fit: Mapping[str, float], x0: float, x1: float, y0: float,
               y1: float) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The part of the fitted line inside the plot's box, or None if it misses it."""
    a, b = fit["intercept"], fit["slope"]
    lo, hi = x0, x1
    if b != 0:
        xa, xb = sorted(((y0 - a) / b, (y1 - a) / b))
        lo, hi = max(lo, xa), min(hi, xb)
    elif not y0 <= a <= y1:
        return None
    if hi <= lo:
        return None
    return (lo, a + b * lo), (hi, a + b * hi)


def scaling_section(data: Mapping[str, Any]) -> str:
    panels = [p for p in data["scaling"]
              if any(len({pt["x"] for pt in s["points"]}) > 1 for s in p["series"])]
    if not panels:
        models = sorted({str(pt["model"]) for p in data["scaling"] for s in p["series"]
                         for pt in s["points"]})
        return empty("Scaling needs runs of at least two models with readable features "
                     f"(model features are read from each run's model directory); these runs "
                     f"have {len(models)}{': ' + ', '.join(models) if models else ''}.")
    charts, csv_rows, trows = [], [], []
    names = shared_series(panels)
    for p in panels:
        charts.append(f'<div class="panel" data-stage="{esc(p["stage"])}">'
                      f'<h4>{esc(label(p["stage"]))}</h4>'
                      f'{scaling_legend(p, named=not _same_series(p, names))}'
                      f'{scaling_chart(p)}</div>')
        for k, s in enumerate(p["series"]):
            fit = s["fit"]
            trows.append([esc(label(p["stage"])), esc(p["feature"]),
                          f'<i class="dot" style="background:{SERIES_COLORS[k]}"></i>'
                          + esc(s["name"]),
                          f"{fit['slope']:.4g} s/{esc(p['unit'])}" if fit else "–",
                          f"{fit['intercept']:.3g}" if fit else "–",
                          f"{fit['r']:.3f}" if fit and fit["r"] is not None else "–",
                          str(fit["n"]) if fit else str(sum(pt["n"] for pt in s["points"]))])
            for pt in s["points"]:
                csv_rows.append({"stage": p["stage"], "feature": p["feature"],
                                 "series": s["name"], "model": pt["model"], "kind": pt["kind"],
                                 "x": pt["x"], "mean_s": pt["mean"], "min_s": pt["min"],
                                 "max_s": pt["max"], "runs": pt["n"],
                                 "fit_slope": fit["slope"] if fit else None,
                                 "fit_intercept_s": fit["intercept"] if fit else None,
                                 "pearson_r": fit["r"] if fit else None})
    tbl = table(["stage", "feature", "series", "slope (s per feature unit)", "intercept s",
                 "Pearson r", "runs"], trows, caption="least-squares line over the individual "
                                                      "runs of dense models", numeric_from=3)
    omitted = sum(p["omitted_series"] for p in panels)
    note = ("Each dot is a configuration (mean; whisker: min–max of its runs); hollow dots are "
            "MoE or hybrid models, drawn but not fitted. The dashed line is the least-squares "
            "fit over the individual runs, r is Pearson's correlation.")
    if omitted:
        note += (f" Each panel draws its {MAX_SCALING_SERIES} largest series (configurations "
                 f"apart from the model); {omitted} smaller ones are left out.")
    return figure("scaling", "Each stage against what it should scale with",
                  f'<div class="grid">{"".join(charts)}</div>', tbl,
                  csv_link("scaling.csv", csv_rows), note=note,
                  keys=legend((), [
                      *(key(n, f"background:{SERIES_COLORS[k % len(SERIES_COLORS)]}", "dot")
                        for k, n in enumerate(names)),
                      key("configuration (mean)", "background:#888", "dot"),
                      key("min–max of its runs", "background:#1f2430", "thin")]))


# -- 4. comparisons ----------------------------------------------------------------------------

def comparison_chart(cmp: Mapping[str, Any]) -> str:
    buckets = [b for b in (*BUCKETS, TOTAL) if cmp["geomean"].get(b) is not None]
    width, left, right, top, row_h = 560, 140, 70, 10, 24
    height = top + row_h * len(buckets) + 48
    vals = [p["ratios"][b] for p in cmp["pairs"] for b in buckets if p["ratios"].get(b)]
    lo = min([*vals, 0.5]) / 1.3
    hi = max([*vals, 2.0]) * 1.3
    x = Log(lo, hi, left, width - right)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
             if lo <= t <= hi]
    svg = Svg(width, height, f"{cmp['title']}: {cmp['other']} / {cmp['baseline']}")
    base = top + row_h * len(buckets)
    caption = f"ratio {cmp['other']} / {cmp['baseline']} (log scale)"
    if _text_width(caption, 12) > width - 20:  # long names (labels): the title names them
        caption = "ratio of seconds, second over first as titled (log scale)"
    svg.x_axis(x, ticks, base, top, caption, fmt=lambda t: f"{t:g}×")
    svg.line(x(1.0), top, x(1.0), base, cls="one")
    for i, b in enumerate(buckets):
        yc = top + i * row_h + row_h / 2
        svg.text(left - 8, yc + 4, label(b), anchor="end",
                 cls="label strong" if b == TOTAL else "label")
        for p in cmp["pairs"]:
            r = p["ratios"].get(b)
            if r:
                a, bb = p["means"][b]
                svg.circle(x(r), yc, 3, "#888", f"{p['model']}: {label(b)} {fmt_s(bb)} vs "
                                                 f"{fmt_s(a)} = {fmt_x(r)}", cls="mark pair")
        g = cmp["geomean"][b]
        color = COLORS.get(b, "#333")
        svg.add(f'<path d="M{x(g):.1f} {yc - 7:.1f} l7 7 l-7 7 l-7 -7 z" fill="{color}" '
                f'class="mark geo"><title>{esc(label(b))}: geometric mean {fmt_x(g)} over '
                f'{len(cmp["pairs"])} pair(s)</title></path>')
        svg.text(width - right + 6, yc + 4, fmt_x(g), cls="value")
    return str(svg)


def comparison_section(data: Mapping[str, Any]) -> str:
    cmps = data["comparisons"]
    if not cmps:
        return empty("No two configurations differ in exactly one dimension (cache, eager vs "
                     "compiled, load format, storage, engine version, machine or label); profile "
                     "one more to compare, e.g. `coldscope profile --cache warm ...`.")
    parts = []
    for i, c in enumerate(cmps):
        buckets = [b for b in (*BUCKETS, TOTAL) if c["geomean"].get(b) is not None]
        trows, csv_rows = [], []
        for b in buckets:
            means_a = [p["means"][b][0] for p in c["pairs"] if p["means"][b][0] is not None]
            means_b = [p["means"][b][1] for p in c["pairs"] if p["means"][b][1] is not None]
            trows.append([esc(label(b)),
                          fmt_s(sum(means_a) / len(means_a), "") if means_a else "–",
                          fmt_s(sum(means_b) / len(means_b), "") if means_b else "–",
                          f"<b>{fmt_x(c['geomean'][b])}</b>"])
        for p in c["pairs"]:
            for b in (*BUCKETS, TOTAL):
                a, bb = p["means"][b]
                csv_rows.append({"dimension": c["dimension"], "baseline": c["baseline"],
                                 "other": c["other"], "model": p["model"], "bucket": b,
                                 "baseline_mean_s": a, "other_mean_s": bb,
                                 "ratio": p["ratios"][b]})
        tbl = table(["stage", f"{c['baseline']} s", f"{c['other']} s", "ratio"], trows,
                    caption=f"mean over {len(c['pairs'])} pair(s); ratio: geometric mean")
        models = ", ".join(sorted({str(p["model"]) for p in c["pairs"]}))
        title = f"{c['title']}: {c['other']} vs {c['baseline']}"
        parts.append(figure(
            f"compare-{i + 1}", title, comparison_chart(c), tbl,
            csv_link(f"compare-{i + 1}.csv", csv_rows), side=True,
            keys=legend((), [key("one pair of configurations", "background:#888", "dot"),
                             key("geometric mean (stage colour)", "background:#59a14f",
                                 "diamond"),
                             key("1× (no change)", "border-color:#1f2430", "dash")]),
            note=f"Ratio of mean seconds, {esc(c['other'])} over {esc(c['baseline'])}, for "
                 f"configurations equal in everything else ({esc(models)}). Grey dots: each "
                 f"pair; diamond: geometric mean. Left of 1× is faster."))
    return "".join(parts)


# -- 5. CPU ------------------------------------------------------------------------------------

def cpu_section(data: Mapping[str, Any]) -> str:
    if not data["cpu"]:
        return empty("No CPU samples in these runs (the paper's data has none; `coldscope "
                     "profile` samples every core twice a second).")
    parts = []
    for i, cpu in enumerate(data["cpu"]):
        tl = next((t for t in data["timelines"] if t["run"] == cpu["run"]), None)
        chart = _cpu_chart(cpu, tl)
        trows = []
        for b in BUCKETS:
            s = cpu["per_bucket"].get(b)
            if s:
                trows.append([esc(label(b)), str(s["samples"]), f"{s['mean_percent']:.0f}",
                              f"{s['busiest_core_percent']:.0f}", f"{s['saturated_cores']:.2f}"])
        tbl = table(["stage", "samples", "all cores %", "busiest core %",
                     f"cores ≥ {SATURATED_PERCENT:.0f} %"], trows,
                    caption="mean over the samples taken during each stage")
        csv_rows = [{"t_s": t, **{f"core{c}_percent": row[c] if c < len(row) else None
                                  for c in range(cpu["cores"])}}
                    for t, row in zip(cpu["t"], cpu["per_core"], strict=False)]
        seen = {s["bucket"] for s in (tl or {}).get("segments", [])}
        keys = legend([b for b in BUCKETS if b in seen], [
            key("CPU busy 0–100 %", "background:linear-gradient(90deg,"
                f"{_heat(0)},{_heat(50)},{_heat(100)})", "wide"),
            key("busiest core", "background:#b2182b", "line"),
            key("mean of all cores", "background:#4e79a7", "line")])
        parts.append(figure(
            f"cpu-{i + 1}", f"CPU per core — {cpu['group']} (run {cpu['run']})", chart, tbl,
            csv_link(f"cpu-{i + 1}.csv", csv_rows), side=True, keys=keys,
            note=f"Utilisation of each core, sampled every {cpu['interval_s']:g} s, under the "
                 f"run's reconciled stages. A start-up bound by one Python thread shows one "
                 f"saturated core at a time."))
    return "".join(parts)


def _cpu_chart(cpu: Mapping[str, Any], tl: Mapping[str, Any] | None) -> str:
    width, left, right, top = 620, 70, 16, 8
    cores = cpu["cores"]
    core_h = 16 if cores <= 8 else max(3, 200 // cores)
    line_h = 90
    height = top + 22 + cores * core_h + 14 + line_h + 44 + 30
    end = max(cpu["t"][-1], (tl or {}).get("time_to_ready") or 0.0)
    x = Linear(0, end * 1.01, left, width - right)
    ticks = [t for t in nice_ticks(0, end, 6) if t <= end * 1.01]
    svg = Svg(width, height, f"CPU per core during run {cpu['run']}")
    y = top
    if tl:
        for s in tl["segments"]:
            svg.rect(x(s["start"]), y, x(s["end"]) - x(s["start"]), 14, fill(s["bucket"]),
                     f"{label(s['bucket'])}: {fmt_s(s['seconds'])}", cls="mark seg")
        svg.text(left - 6, y + 11, "stages", anchor="end", cls="label")
    y += 22
    for c in range(cores):
        if core_h >= 10:
            svg.text(left - 6, y + c * core_h + core_h / 2 + 4, f"core {c}", anchor="end",
                     cls="label")
    _heatmap(svg, cpu, x, y, core_h)
    y += cores * core_h + 14
    # busiest core and mean of all cores, as lines
    ys = Linear(0, 100, y + line_h, y)
    svg.y_axis(ys, (0, 50, 100), left, width - right, "busy (%)")
    for key, cls, fn in (("busiest", "busiest", max), ("mean", "meanline",
                                                       lambda r: sum(r) / len(r))):
        pts = " ".join(f"{x(t):.1f},{ys(fn(row) if row else 0):.1f}"
                       for t, row in zip(cpu["t"], cpu["per_core"], strict=False))
        svg.add(f'<polyline points="{pts}" class="{cls}"><title>{key} core</title></polyline>')
    svg.x_axis(x, ticks, y + line_h, y + line_h, "time since launch (s)")
    _color_scale(svg, left, y + line_h + 44)
    return str(svg)


# -- 6. predictions ----------------------------------------------------------------------------

def prediction_chart(pred: Mapping[str, Any], bucket: str) -> str:
    width, height, left, right, top, bottom = 300, 260, 52, 12, 12, 46
    rows = [r for r in pred["rows"] if bucket in r["cells"] and
            r["cells"][bucket]["measured"] is not None]
    vals = [v for r in rows for v in (r["cells"][bucket]["high"], r["cells"][bucket]["measured"],
                                      r["cells"][bucket]["measured_max"] or 0)]
    ticks = nice_ticks(0, max(vals) * 1.05 if vals else 1, 4)
    x = Linear(0, ticks[-1], left, width - right)
    y = Linear(0, ticks[-1], height - bottom, top)
    svg = Svg(width, height, f"{bucket}: predicted against measured")
    svg.x_axis(x, ticks, height - bottom, top, "measured (s)")
    svg.y_axis(y, ticks, left, width - right, "predicted (s)")
    svg.line(x(0), y(0), x(ticks[-1]), y(ticks[-1]), cls="diag")
    for r in rows:
        c = r["cells"][bucket]
        color = "#59a14f" if c["inside"] else "#e15759"
        svg.line(x(c["measured"]), y(c["low"]), x(c["measured"]), y(c["high"]), cls="whisker",
                 extra=f' style="stroke:{color}"')
        svg.circle(x(c["measured"]), y(c["predicted"]), 3.5, color,
                   f"{r['group']}\n{label(bucket)}: predicted {fmt_s(c['predicted'])} "
                   f"[{fmt_s(c['low'], '')}, {fmt_s(c['high'])}], measured "
                   f"{fmt_s(c['measured'])}" + ("" if c["inside"] else " — outside"))
    return str(svg)


def prediction_section(data: Mapping[str, Any]) -> str:
    pred = data.get("predictions")
    if pred is None:
        return empty("Give a startup model to compare its predictions with these runs: "
                     "`coldscope fit --out model.json` then `coldscope report "
                     "--startup-model model.json`.")
    if not pred["rows"]:
        return empty("No configuration's model has readable features, so nothing to predict.")
    buckets = [b for b in pred["buckets"] if any(
        r["cells"].get(b, {}).get("measured") for r in pred["rows"])]
    charts = "".join(f'<div class="panel"><h4>{esc(label(b))}</h4>{prediction_chart(pred, b)}'
                     f'</div>' for b in buckets)
    trows, csv_rows = [], []
    for r in pred["rows"]:
        t = r["cells"][TOTAL]
        trows.append([esc(r["group"]), fmt_s(t["predicted"], ""),
                      f"{fmt_s(t['low'], '')}–{fmt_s(t['high'], '')}", fmt_s(t["measured"], ""),
                      "yes" if t["inside"] else ("–" if t["inside"] is None else "<b>no</b>")])
        for b, c in r["cells"].items():
            csv_rows.append({"configuration": r["group"], "bucket": b, **{
                k: c[k] for k in ("predicted", "low", "high", "measured", "measured_min",
                                  "measured_max", "inside")}})
    cov = pred["coverage"].get(TOTAL)
    tbl = table(["configuration", "predicted s", f"{pred['level']:.0%} interval s",
                 "measured s", "inside"], trows, caption="time to ready")
    warnings = sorted({w for r in pred["rows"] for w in r["warnings"]})
    note = (f"Dot: the startup model's prediction, bar: its {pred['level']:.0%} interval, "
            f"against the measured mean; green when the measured mean is inside. "
            + (f"Measured time to ready inside the interval for {cov:.0%} of configurations."
               if cov is not None else ""))
    if warnings:
        note += "<br><small>" + "<br>".join(esc(w) for w in warnings[:6]) + "</small>"
    keys = legend((), [key("measured mean inside the interval", "background:#59a14f", "dot"),
                       key("outside", "background:#e15759", "dot"),
                       key(f"{pred['level']:.0%} interval", "background:#1f2430", "line"),
                       key("predicted = measured", "border-color:#9ca3af", "dash")])
    return figure("predictions", "Predicted against measured, per stage",
                  f'<div class="grid small">{charts}</div>', tbl,
                  csv_link("predictions.csv", csv_rows), note=note, keys=keys)


# -- 7. tune sessions ---------------------------------------------------------------------------

def _ratio_text(step: Mapping[str, Any]) -> str:
    r = step.get("throughput_ratio")
    return "throughput not measured" if r is None else f"throughput {r:.2f}× of baseline"


def _interval_x(r: Mapping[str, Any] | None) -> str:
    """A speed-up with its 95 % interval: ``2.71× [2.30×, 3.12×]``."""
    r = r or {}
    if r.get("low") is None or r.get("high") is None:
        return f"{fmt_x(r.get('value'))} (no interval)"
    return f"{fmt_x(r['value'])} [{fmt_x(r['low'])}, {fmt_x(r['high'])}]"


def tune_chart(w: Mapping[str, Any], title: str) -> str:
    """A waterfall of one tune session, one row per configuration, top to bottom: the
    baseline's stacked stages from launch to its time to ready; then, per kept change, the
    seconds it saved, stacked by stage leftwards from the previous time to ready (a thin bar
    under it adds back the stages it made slower), so each step ends at that configuration's
    time to ready, carried down by a dashed line; last, the best configuration's stacked
    stages. Names and throughput ratios sit left of the plot, seconds right of each bar."""
    steps = w["steps"]
    rows = [("baseline", steps[0]), *(("step", s) for s in steps[1:]), ("best", steps[-1])]
    names, values = [], []
    for kind, s in rows:
        if kind == "baseline":
            names.append(("baseline (default, cold)", f"n={s['n']} start-up(s)"))
            values.append(fmt_s(s["time_to_ready_s"]))
        elif kind == "best":
            names.append((f"best: {len(steps) - 1} change(s)", _ratio_text(s)))
            values.append(f"{fmt_s(s['time_to_ready_s'])} · {fmt_x(w['speedup'])} faster")
        else:
            names.append((f"+ {s['name']}", _ratio_text(s)))
            values.append(f"{'−' if s['saved_s'] >= 0 else '+'}{fmt_s(abs(s['saved_s']))} → "
                          f"{fmt_s(s['time_to_ready_s'])}")
    label_w = max(150, min(300, max(_text_width(t, 12) for pair in names for t in pair)))
    value_w = max(_text_width(v, 11.5) for v in values) + 12
    width, bar_h, cost_h, pitch = 980, 20, 6, 42
    left, right, top = label_w + 16, value_w, 10
    base = top + len(rows) * pitch
    height = base + 46
    hi = max(max(s["time_to_ready_s"] for s in steps),
             max(sum(v for v in s["stages"].values() if v > 0) for s in steps))
    ticks = nice_ticks(0, hi)
    x = Linear(0, ticks[-1], left, width - right)
    svg = Svg(width, height, title)
    svg.x_axis(x, ticks, base, top,
               "seconds from launch to ready (mean of each configuration's start-ups)")
    prev_end = None
    for i, ((kind, s), (name, sub), value) in enumerate(zip(rows, names, values, strict=True)):
        y = top + i * pitch
        svg.text(left - 8, y + 10, name, anchor="end", cls="label strong")
        svg.text(left - 8, y + 26, sub, anchor="end", cls="tick")
        if kind in ("baseline", "best"):
            t = 0.0
            for b in BUCKETS:
                v = s["stages"].get(b) or 0.0
                if v <= 0.005:
                    continue
                tip = f"{name}\n{label(b)}: {fmt_s(v)} (mean of {s['n']} start-up(s))"
                svg.rect(x(t), y, x(t + v) - x(t), bar_h, fill(b), tip, cls="mark seg")
                t += v
            right_end = max(t, s["time_to_ready_s"])
        else:
            start = prev_end
            t = start
            for b in BUCKETS:  # savings, leftwards from the previous time to ready
                v = s["saved"][b]
                if v > 0.005:
                    tip = (f"{s['name']}: {label(b)} saved {fmt_s(v)} "
                           f"({fmt_s(s['stages'][b] + v)} → {fmt_s(s['stages'][b])})")
                    svg.rect(x(t - v), y, x(t) - x(t - v), bar_h, fill(b), tip,
                             cls="mark seg")
                    t -= v
            for b in BUCKETS:  # costs, added back rightwards on a thin bar
                v = -s["saved"][b]
                if v > 0.005:
                    tip = (f"{s['name']}: {label(b)} {fmt_s(v)} slower "
                           f"({fmt_s(s['stages'][b] - v)} → {fmt_s(s['stages'][b])})")
                    svg.rect(x(t), y + bar_h + 1, x(t + v) - x(t), cost_h, fill(b), tip,
                             cls="mark seg cost")
                    t += v
            right_end = max(start, s["time_to_ready_s"])
        if prev_end is not None:
            # the previous configuration's time to ready, carried down to this row
            svg.line(x(prev_end), y - pitch + bar_h + cost_h + 2, x(prev_end), y, cls="one")
        prev_end = s["time_to_ready_s"]
        svg.text(x(right_end) + 6, y + bar_h / 2 + 4, value, cls="value")
    return str(svg)


def tune_section(data: Mapping[str, Any]) -> str:
    """One waterfall figure per tune session, with its table and CSV."""
    parts = []
    for i, w in enumerate(data.get("tune") or []):
        steps = w["steps"]
        shown = [b for b in BUCKETS if any(abs((s["saved"] or {}).get(b) or 0.0) >= 0.05
                                           for s in steps)]
        trows, csv_rows = [], []
        for j, s in enumerate(steps):
            saved = s["saved"] or {}
            trows.append([
                esc("baseline (default, cold)" if j == 0 else f"+ {s['name']}"),
                str(s["n"]),
                *(fmt_s(saved.get(b), "") if j else "" for b in shown),
                fmt_s(s["saved_s"], "") if j else "",
                fmt_x(s["throughput_ratio"]),
                f"<b>{fmt_s(s['time_to_ready_s'], '')}</b>",
                esc(s.get("description") or ("the command as given, cold caches" if j == 0
                                             else "")),
            ])
            row = {"session": w["session"], "step": s["name"], "knobs": "+".join(s["knobs"]),
                   "runs": " ".join(s["runs"]), "n": s["n"],
                   "time_to_ready_s": s["time_to_ready_s"], "saved_s": s["saved_s"],
                   "throughput_tokens_per_s": s["throughput"],
                   "throughput_ratio": s["throughput_ratio"]}
            for b in BUCKETS:
                row[f"{b}_s"] = s["stages"][b]
                row[f"{b}_saved_s"] = saved.get(b)
            csv_rows.append(row)
        columns = ["step", "runs", *(f"{label(b)} saved s" for b in shown), "saved s",
                   "throughput ratio", "time to ready s", "what it does"]
        tbl = table(columns, trows, numeric_to=len(columns) - 1,
                    caption="mean over each configuration's start-ups; saved: previous step "
                            "minus this one (negative: slower); throughput: serving tokens/s "
                            "over the baseline's")
        title = (f"Tune session {w['session']}: {fmt_s(w['baseline_s'])} → "
                 f"{fmt_s(w['best_s'])} to ready ({fmt_x(w['speedup'])} faster)")
        iv = w.get("speedup_intervals") or {}
        said = [f"{_interval_x(iv.get(k))} {what}" for k, what in
                (("vs_warm", "vs running the default again"), ("vs_cold", "vs a new node"))
                if (iv.get(k) or {}).get("value") is not None]
        if said:
            title = f"Tune session {w['session']}: " + "; ".join(said)
        drawn = [b for b in BUCKETS if any(
            abs((s["saved"] or {}).get(b) or 0.0) > 0.005 or (s["stages"].get(b) or 0.0) > 0.005
            for s in steps)]
        keys = legend(drawn, [
            key("stage made slower by the change (thin bar, adds back)",
                "background:#8c8c8c;height:5px", ""),
            key("time to ready carried to the next step", "border-color:#1f2430", "dash")])
        note = ("Top to bottom: the baseline's stages (seconds, mean of its start-ups); each "
                "change the search kept, as the seconds it saved per stage, from the previous "
                "time to ready down to its own; the best configuration's stages. Each row names "
                "the change and its serving throughput as a ratio to the baseline's. "
                + ("The kept changes come from the session file. " if not w["inferred"] else
                   "No session file: the kept changes are read from the runs. ")
                + f"{w['runs']} start-ups in the session; the ones not kept, and the cold "
                  "start-ups that primed a seeded configuration, are in the runs table.")
        parts.append(figure(f"tune-{i + 1}", title, tune_chart(w, title), tbl,
                            csv_link(f"tune-{i + 1}.csv", csv_rows), keys=keys, note=esc(note)))
    return "".join(parts)


# -- 8. releases -------------------------------------------------------------------------------

def _signed(v: float | None) -> str:
    return "–" if v is None else f"{v:+.2f}"


def _interval(c: Mapping[str, Any]) -> str:
    """A change's 95 % interval, ``[-7.57, -0.89]``; ``–`` without one (one run a side)."""
    if c.get("low") is None or c.get("high") is None:
        return "–"
    return f"[{_signed(c['low'])}, {_signed(c['high'])}]"


def _verdict(c: Mapping[str, Any]) -> str:
    v = str(c.get("verdict") or "")
    return f"<b>{esc(v)}</b>" if v in ("faster", "slower") else esc(v)


def releases_chart(block: Mapping[str, Any], title: str) -> str:
    """One vertical bar per release, in the order given (the paper's Figure 1, by stage): the
    mean seconds of each bucket stacked from 0 to the release's mean time to ready, a whisker
    over its start-ups' time to ready (thick: ±1 sd, thin: min–max), the mean above it and the
    release's name below."""
    rels = block["releases"]
    n = max(len(rels), 1)
    left, right, top, bottom = 64, 16, 24, 56
    width = 980  # every chart's width: the page scales them alike, so their text matches
    height = 320
    base = height - bottom
    hi = max([0.0, *(s["end"] for r in rels for s in r["segments"]),
              *((r["time_to_ready"] or {}).get("max") or 0.0 for r in rels)])
    ticks = nice_ticks(0, hi or 1.0)
    y = Linear(0, ticks[-1], base, top)
    svg = Svg(width, height, title)
    svg.y_axis(y, ticks, left, width - right, "seconds from launch to ready (mean)")
    svg.line(left, base, width - right, base, cls="axis")
    band = (width - left - right) / n
    bar_w = min(72.0, band * 0.6)
    fit = max(3, int(band / 7))
    for i, r in enumerate(rels):
        cx = left + band * (i + 0.5)
        x0 = cx - bar_w / 2
        for s in r["segments"]:
            tip = (f"{r['spec']}\n{label(s['bucket'])}: {fmt_s(s['seconds'])} "
                   f"(mean of {r['n']} start-up(s))")
            svg.rect(x0, y(s["end"]), bar_w, y(s["start"]) - y(s["end"]), fill(s["bucket"]),
                     tip, cls="mark seg", extra=f' data-release="{i}"')
        total = r["time_to_ready"]
        peak = r["segments"][-1]["end"] if r["segments"] else 0.0
        if total and total["n"] > 1:
            svg.line(cx, y(total["min"]), cx, y(total["max"]), cls="whisker thin")
            svg.line(cx, y(max(0.0, total["mean"] - total["sd"])), cx,
                     y(total["mean"] + total["sd"]), cls="whisker")
            for v in (total["min"], total["max"]):
                svg.line(cx - 5, y(v), cx + 5, y(v), cls="whisker thin")
            peak = max(peak, total["max"])
        if r["time_to_ready_s"] is not None:
            svg.text(cx, y(peak) - 6, fmt_s(r["time_to_ready_s"]), anchor="middle",
                     cls="value")
        name = r["name"] if len(r["name"]) <= fit else r["name"][: fit - 1] + "…"
        svg.text(cx, base + 16, name, anchor="middle", cls="label")
    svg.text((left + width - right) / 2, base + 40, "release, in the order given",
             anchor="middle", cls="caption")
    return str(svg)


def releases_section(data: Mapping[str, Any]) -> str:
    """Per ``coldscope releases`` measurement: its stacked bars with the table of stage means,
    then the time-to-ready change between consecutive releases and the largest stage changes,
    each with its 95 % interval and verdict."""
    parts = []
    for i, m in enumerate(data.get("releases") or []):
        rels = m["releases"]
        shown = [b for b in BUCKETS if any(r["stages"].get(b) for r in rels)]
        trows, csv_rows, csv_changes = [], [], []
        for r in rels:
            t = r["time_to_ready"]
            trows.append([
                esc(r["name"]), str(r["n"]), *(fmt_s(r["stages"].get(b), "") for b in shown),
                f"<b>{fmt_s(r['time_to_ready_s'], '')}</b>"
                + (f' <small>±{fmt_s(t["sd"], "")}</small>' if t and t["n"] > 1 else "")])
            csv_rows.append({"measurement": m["name"], "release": r["spec"],
                             "version": r["version"], "runs": r["n"],
                             **{f"{b}_mean_s": r["stages"].get(b) for b in BUCKETS},
                             "time_to_ready_mean_s": r["time_to_ready_s"],
                             "time_to_ready_sd_s": t["sd"] if t else None})
        tables = table(["release", "runs", *(f"{label(b)} s" for b in shown),
                        "time to ready s"], trows, sticky_last=True,
                       caption="seconds, mean over each release's measured start-ups "
                               "(primes left out); time to ready ± sd")
        pair_rows, change_rows = [], []
        for dl in m["deltas"]:
            c = dl["time_to_ready"]
            pair_rows.append([esc(f"{dl['from_name']} → {dl['to_name']}"),
                              _signed(c["delta"]), _interval(c), _verdict(c)])
            for b, s in [*dl["stages"].items(), (TOTAL, c)]:
                csv_changes.append({"measurement": m["name"], "from": dl["from"],
                                    "to": dl["to"], "stage": b, "delta_s": s["delta"],
                                    "low_s": s["low"], "high_s": s["high"],
                                    "verdict": s["verdict"]})
        for c in m["largest"]:
            change_rows.append([esc(f"{c['from_name']} → {c['to_name']}"),
                                esc(label(c["stage"])), _signed(c["delta"]), _interval(c),
                                _verdict(c)])
        if pair_rows:
            tables += table(["from → to", "time to ready change s", "95 % interval s",
                             "verdict"], pair_rows, numeric_to=3,
                            caption="time to ready, from each release to the next: to − from")
        if change_rows:
            tables += table(["from → to", "stage", "change s", "95 % interval s", "verdict"],
                            change_rows, numeric_from=2, numeric_to=4,
                            caption=f"the {len(change_rows)} largest stage changes between "
                                    "consecutive releases, to − from, whatever their verdict")
        title = f"Start-up per release — {m['name']} ({m['cache']} caches)"
        drawn = [b for b in BUCKETS if any(s["bucket"] == b for r in rels
                                           for s in r["segments"])]
        keys = legend(drawn, [key("±1 sd of time to ready", "background:#1f2430", "line"),
                              key("min–max", "background:#1f2430", "thin")])
        note = ("One bar per release, in the order the measurement gave them: each stage's "
                "mean seconds over the release's measured start-ups, stacked to its mean time "
                "to ready; the whisker spans its start-ups' time to ready (thick: ±1 sd, thin: "
                "min–max). The changes are the numbers of <code>coldscope releases</code> for "
                "these runs: to − from, with Welch's 95 % interval; faster or slower only when "
                "the whole interval is on one side of 0 and the change is at least max(0.05 s, "
                "1 % of time to ready), else unresolved.")
        unknown = sorted({b for r in rels for b in r["unknown"]})
        if unknown:
            note += esc(" Not known in every run, so left out of the bars: "
                        + ", ".join(label(b) for b in unknown) + ".")
        if m["args"]:
            note += f" Every release started with <code>{esc(' '.join(m['args']))}</code>."
        downloads = csv_link(f"releases-{i + 1}.csv", csv_rows) + (
            csv_link(f"releases-{i + 1}-changes.csv", csv_changes) if csv_changes else "")
        parts.append(figure(f"releases-{i + 1}", title, releases_chart(m, title), tables,
                            downloads, keys=keys, note=note))
    return "".join(parts)


# -- runs --------------------------------------------------------------------------------------

def runs_section(data: Mapping[str, Any]) -> str:
    rows = data["run_table"]
    varying = [d for d in data["varying"] if d != "label" or any(r.get("label") for r in rows)]
    buckets = [b for b in BUCKETS if any(r.get(b) is not None for r in rows)]
    trows = [[esc(r["id"]), *(esc(r.get(d) or "") for d in varying),
              *(fmt_s(r.get(b), "") for b in buckets),
              f'<b>{fmt_s(r.get("time_to_ready_s"), "")}</b>'] for r in rows]
    tbl = table(["id", *(DIMENSION_TITLES.get(d, d) for d in varying),
                 *(label(b) + " s" for b in buckets), "time to ready s"], trows,
                numeric_from=1 + len(varying), sticky_last=True)
    return (f'<details class="runs"><summary>All {len(rows)} runs, one row each '
            f'{csv_link("runs.csv", rows)}</summary>{tbl}</details>')


# -- 0. key findings ---------------------------------------------------------------------------

def key_findings_section(data: Mapping[str, Any]) -> str:
    """Three cards at the top of the page: where the time goes, what the runs' findings say
    (largest seconds at stake first), and the largest change between compared
    configurations. Each links to the section with the detail."""
    kf = data.get("key_findings") or {}
    stages = kf.get("stages") or []
    items = "".join(
        f'<li><i class="sw" style="background:{COLORS.get(s["stage"], "#999")}"></i>'
        f'<b>{esc(label(s["stage"]))}</b> {s["share"]:.0%} of time to ready '
        f'<small>({fmt_s(s["mean_s"])} mean per configuration)</small></li>' for s in stages)
    where = (f"<ol>{items}</ol>" if items else "<p>No stage timings in these runs.</p>")
    findings = kf.get("findings") or []
    if findings:
        lis = []
        for f in findings:
            stake = ("not timed" if f["seconds_at_stake"] is None else
                     f"{fmt_s(f['seconds_at_stake'])} at stake"
                     + (" (median)" if f["runs"] > 1 else ""))
            lis.append(f'<li data-finding="{esc(f["id"])}"><details><summary>'
                       f'<b>{esc(f["id"])}</b>'
                       + (f' <small>{esc(label(f["stage"]))}</small>' if f.get("stage") else "")
                       + f' — {stake}, {f["runs"]} of {kf["runs"]} run(s)</summary>'
                       f'<span class="ev">{esc(f["evidence"] or "")}</span>'
                       + (f' <span class="adv">→ {esc(f["advice"])}</span>'
                          if f.get("advice") else "") + "</details></li>")
        more = kf["findings_total"] - len(findings)
        found = "<ul>" + "".join(lis) + "</ul>" + (
            f"<p><small>and {more} more finding(s)</small></p>" if more > 0 else "")
    else:
        found = "<p>No findings recorded for these runs.</p>"
    ch = kf.get("change")
    if ch:
        pct = (ch["ratio"] - 1) * 100
        change = (f'<p><b>{esc(ch["title"])}: {esc(ch["other"])} vs {esc(ch["baseline"])}</b>'
                  f' — time to ready {fmt_x(ch["ratio"])} ({pct:+.0f}&nbsp;%) over '
                  f'{ch["pairs"]} pair(s)')
        if ch.get("stage"):
            change += (f'; the stage that changed most: <b>{esc(label(ch["stage"]))}</b> '
                       f'{fmt_x(ch["stage_ratio"])}')
        change += '. <a href="#s-compare">all comparisons</a></p>'
    else:
        change = "<p>No two configurations differ in exactly one dimension.</p>"
    cards = [("Where the time goes", where + '<a href="#s-breakdown">breakdown</a>'),
             ("Findings", found), ("Largest change", change)]
    return '<div class="cards">' + "".join(
        f'<div class="card"><h3>{esc(t)}</h3>{body}</div>' for t, body in cards) + "</div>"


# -- the page ----------------------------------------------------------------------------------

def _asset(name: str) -> str:
    return resources.files("coldscope.report").joinpath("assets", name).read_text("utf-8")


def render_report(data: Mapping[str, Any], generated_at: datetime | None = None) -> str:
    """The whole page as one string: no external resource, scripts and styles inlined."""
    when = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    totals = [r["total"]["mean"] for r in data["breakdown"] if r["total"]]
    summary_items = [
        ("runs", str(data["runs"])), ("configurations", str(data["configurations"])),
        ("time to ready", f"{fmt_s(min(totals))} – {fmt_s(max(totals))}" if totals else "–"),
    ]
    if data.get("datasets"):
        summary_items.append(("datasets", str(len(data["datasets"]))))
    pills = "".join(f'<div class="pill"><b>{esc(v)}</b><span>{esc(k)}</span></div>'
                    for k, v in summary_items)
    sections = [
        ("findings", "Key findings", key_findings_section(data)),
        ("breakdown", "Where the start-up time goes", breakdown_section(data)),
        ("timeline", "One start-up, process by process", timeline_section(data)),
        ("scaling", "What each stage scales with", scaling_section(data)),
        ("compare", "Comparisons, stage by stage", comparison_section(data)),
        ("cpu", "CPU during start-up", cpu_section(data)),
        ("predict", "Predictions against measurements", prediction_section(data)),
        ("runs", "Runs", runs_section(data)),
    ]
    if data.get("tune"):  # only where the runs hold a tune session
        sections.insert(5, ("tune", "Tune sessions: baseline, each kept change, best",
                            tune_section(data)))
    if data.get("releases"):  # only where the runs hold a `coldscope releases` measurement
        after = [sid for sid, _, _ in sections].index("compare") + 1
        sections.insert(after, ("releases", "Start-up per release", releases_section(data)))
    nav = "".join(f'<a href="#s-{sid}">{esc(title)}</a>' for sid, title, _ in sections)
    body = "".join(f'<section id="s-{sid}"><h2>{esc(title)}</h2>{content}</section>'
                   for sid, title, content in sections)
    notes = "".join(f"<li>{esc(n)}</li>" for n in data.get("notes") or [])
    stage_list = ", ".join(STAGES)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="coldscope {esc(__version__)}">
<title>{esc(data["title"])}</title>
<style>{_asset("report.css")}</style>
</head><body>
<header><div class="wrap">
<h1>{esc(data["title"])}</h1>
<p class="sub">{esc(data.get("source") or "")} · generated {esc(when)} by coldscope
{esc(__version__)}</p>
<div class="pills">{pills}</div>
{legend()}
<nav>{nav}</nav>
</div></header>
<main class="wrap">
{f'<ul class="notes">{notes}</ul>' if notes else ""}
{body}
<footer>Stages: {esc(stage_list)}, plus server_ready (engine initialised → HTTP ready) and
unattributed (time no evidence explains). Buckets of a run sum to its time to ready.</footer>
</main>
<div id="tip" role="tooltip" hidden></div>
<script>{_asset("report.js")}</script>
</body></html>
"""
