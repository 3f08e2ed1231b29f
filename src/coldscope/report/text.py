"""How numbers and names read on the page, in charts and tables alike."""

from __future__ import annotations

import html

from coldscope.report.stats import TOTAL


def esc(value: object) -> str:
    """``value`` as text safe inside HTML and SVG, attribute values included."""
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
    """A ratio (``0.57×``, ``12.3×``); ``–`` when unknown."""
    return "–" if v is None else (f"{v:.2f}×" if v < 10 else f"{v:.1f}×")


def signed(v: float | None) -> str:
    """A change in seconds with its sign, two decimals (``-6.80``); ``–`` when unknown."""
    return "–" if v is None else f"{v:+.2f}"


def label(bucket: str) -> str:
    """A bucket's name as a reader sees it (``model loading``, ``time to ready``)."""
    return "time to ready" if bucket == TOTAL else bucket.replace("_", " ")


def text_width(text: str, size: float) -> float:
    """A generous estimate of a label's width in px at font ``size`` (average glyph 0.62 em),
    so a chart leaves room for it."""
    return len(text) * size * 0.62
