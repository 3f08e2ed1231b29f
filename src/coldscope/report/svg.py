"""The SVG every chart is drawn with: colours, scales, ticks and axes, a small writer, the
whiskers of a spread, and the per-core CPU heatmap with its colour scale.

Why server-side SVG and no charting library: every chart is drawn in Python as plain SVG
markup, so the browser only parses and lays out elements - no library to download or inline
(Plotly's bundle alone is 3.5 MB of the 5 MB budget), no script has to run before a chart
shows, and charts aggregate runs per configuration, so 1,000 runs cost a few hundred elements
per chart, not a thousand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from coldscope.core.stages import UNATTRIBUTED
from coldscope.report.stats import Summary
from coldscope.report.text import esc, fmt_s

#: One colour per bucket, the same in every chart (Tableau 10: distinct, colour-blind aware).
COLORS: dict[str, str] = {
    "bootstrap": "#4e79a7", "tokenizer": "#f28e2b", "model_loading": "#59a14f",
    "torch_compile": "#e15759", "kv_cache_profiling": "#b07aa1",
    "cuda_graph_capture": "#76b7b2", "server_ready": "#edc948", "unattributed": "#bab0ac",
}

#: Colours of series that are not buckets (the scaling panels' configurations), in order.
SERIES_COLORS = ("#4e79a7", "#e15759", "#59a14f", "#b07aa1", "#f28e2b")


def fill(bucket: str) -> str:
    """A bucket's fill: its colour; hatched for time no evidence explains."""
    return "url(#hatch)" if bucket == UNATTRIBUTED else COLORS.get(bucket, "#999")


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
    """A tick's label: ``0``, four significant digits, thousands separated."""
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


class Scale(Protocol):
    """Data values to pixels; ``a`` and ``b`` are the pixel ends of the axis."""

    a: float
    b: float

    def __call__(self, v: float) -> float: ...


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


def times(*ts: float) -> str:
    """``data-t0``/``data-t1`` (or ``data-t``) attributes: the seconds an element stands for,
    so the page's script can re-place it when a Gantt is zoomed."""
    if len(ts) == 1:
        return f' data-t="{ts[0]:.6g}"'
    return f' data-t0="{ts[0]:.6g}" data-t1="{ts[1]:.6g}"'


class Svg:
    """A tiny SVG writer: elements are appended as strings, ``str()`` gives the markup."""

    def __init__(self, width: float, height: float, title: str, cls: str = "chart") -> None:
        self.width, self.height, self.title, self.cls = width, height, title, cls
        self.parts: list[str] = []

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, tip: str | None = None,
             cls: str = "", extra: str = "") -> None:
        body = f"<title>{esc(tip)}</title>" if tip else ""
        c = f' class="{cls}"' if cls else ""
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.2f}" height="{max(h, 0):.1f}"'
                 f' fill="{fill}"{c}{extra}>{body}</rect>' if body else
                 f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.2f}" height="{max(h, 0):.1f}"'
                 f' fill="{fill}"{c}{extra}/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, cls: str = "",
             extra: str = "") -> None:
        c = f' class="{cls}"' if cls else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"{c}{extra}/>')

    def text(self, x: float, y: float, content: str, anchor: str = "start", cls: str = "",
             extra: str = "") -> None:
        c = f' class="{cls}"' if cls else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}{extra}>'
                 f'{esc(content)}</text>')

    def circle(self, x: float, y: float, r: float, fill: str, tip: str | None = None,
               cls: str = "mark", extra: str = "") -> None:
        body = f"<title>{esc(tip)}</title>" if tip else ""
        self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{fill}" class="{cls}"{extra}>'
                 f'{body}</circle>')

    def x_axis(self, scale: Scale, ticks: Iterable[float], y: float, top: float, caption: str,
               fmt: Callable[[float], str] = tick_text) -> None:
        for t in ticks:
            x = scale(t)
            self.line(x, top, x, y, cls="grid")
            self.text(x, y + 15, fmt(t), anchor="middle", cls="tick")
        self.line(scale.a, y, scale.b, y, cls="axis")
        self.text((scale.a + scale.b) / 2, y + 33, caption, anchor="middle", cls="caption")

    def y_axis(self, scale: Scale, ticks: Iterable[float], x: float, right: float,
               caption: str) -> None:
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


def whiskers(svg: Svg, spread: Summary, scale: Scale, at: float,
             vertical: bool = False) -> None:
    """The spread of repetitions across a bar at ``at`` (pixels across the value axis): thin
    from min to max with end caps, thick over ±1 sd (never below 0)."""

    def seg(along0: float, across0: float, along1: float, across1: float, cls: str) -> None:
        if vertical:
            svg.line(across0, along0, across1, along1, cls=cls)
        else:
            svg.line(along0, across0, along1, across1, cls=cls)

    seg(scale(spread.min), at, scale(spread.max), at, "whisker thin")
    seg(scale(max(0.0, spread.mean - spread.sd)), at, scale(spread.mean + spread.sd), at,
        "whisker")
    for v in (spread.min, spread.max):
        seg(scale(v), at - 5, scale(v), at + 5, "whisker thin")


# -- CPU ---------------------------------------------------------------------------------------

def heat(percent: float) -> str:
    """White (idle) to deep red (saturated)."""
    p = min(max(percent, 0.0), 100.0) / 100.0
    r = int(255 - p * (255 - 178))
    g = int(255 - p * (255 - 24))
    b = int(255 - p * (255 - 43))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(svg: Svg, t: Sequence[float], per_core: Sequence[Sequence[float]],
            interval: float, cores: int, x: Scale, y: float, core_h: float,
            max_columns: int = 400) -> None:
    """One row per core, one cell per sample (averaged down to ``max_columns``), darker =
    busier. A sample at ``t`` covers the ``interval`` seconds before it."""
    group = max(1, math.ceil(len(t) / max_columns))
    for i in range(0, len(t), group):
        chunk = per_core[i:i + group]
        t0 = t[i] - interval
        t1 = t[min(i + group, len(t)) - 1]
        for c in range(cores):
            vals = [r[c] for r in chunk if c < len(r)]
            v = sum(vals) / len(vals) if vals else 0.0
            svg.rect(x(max(t0, 0.0)), y + c * core_h, max(x(t1) - x(max(t0, 0.0)), 0.5),
                     core_h - 1, heat(v),
                     f"core {c}: {v:.0f} % busy at {fmt_s(t1)}", cls="mark cell",
                     extra=times(max(t0, 0.0), t1))


def color_scale(svg: Svg, x0: float, y: float, steps: int = 10) -> None:
    """The CPU heatmap's colour scale: ``steps`` swatches from idle to saturated, labelled."""
    w = 18
    svg.text(x0 + steps * w + 16, y + 9, "CPU busy (%)", cls="tick")
    for i in range(steps):
        lo, hi = 100 * i / steps, 100 * (i + 1) / steps
        svg.rect(x0 + i * w, y, w, 10, heat((lo + hi) / 2), f"{lo:.0f}–{hi:.0f} % busy",
                 cls="scale")
    for v in (0, 50, 100):
        svg.text(x0 + steps * w * v / 100, y + 21, f"{v}", anchor="middle", cls="tick")
