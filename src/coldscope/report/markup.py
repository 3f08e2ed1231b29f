"""The HTML pieces every section draws with: a figure (chart, legend, note, table, CSV link),
tables that keep their first column in view, legends, and CSV ``data:`` links.

Each chart's data goes with it as a CSV ``data:`` URL (no script needed to download it) and as
a table that reads without a mouse.
"""

from __future__ import annotations

import csv
import io
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence

from coldscope.core.stages import BUCKETS, UNATTRIBUTED
from coldscope.report.svg import COLORS
from coldscope.report.text import esc, label
from coldscope.util.safeio import csv_text

#: One value of a CSV row: text, a count, seconds, a yes/no, or unknown (an empty cell).
CsvValue = str | int | float | bool | None

#: One row of a chart's CSV: column -> value.
CsvRow = Mapping[str, CsvValue]

#: Legend swatch style of time no evidence explains (the charts' hatch).
HATCH = "background: repeating-linear-gradient(45deg,#eee 0 3px,#b5aca6 3px 5px)"


def to_csv(rows: Sequence[CsvRow], columns: Sequence[str] | None = None) -> str:
    """CSV text of flat rows (unknown values empty; floats with 6 significant digits at most;
    text a spreadsheet would run as a formula quoted, ``safeio.csv_text``). Without
    ``columns``: every key of the rows, in order of first appearance."""
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_csv_cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _csv_cell(value: CsvValue) -> CsvValue:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return csv_text(value) if isinstance(value, str) else value


def csv_link(name: str, rows: Sequence[CsvRow], columns: Sequence[str] | None = None) -> str:
    """A download link carrying the chart's data as a CSV ``data:`` URL (no script needed)."""
    text = to_csv(rows, columns)
    href = "data:text/csv;charset=utf-8," + urllib.parse.quote(text, safe=" ,.:;/_-()")
    return (f'<a class="csv" download="{esc(name)}" href="{href}" '
            f'title="download the data behind this chart">⬇ {esc(name)}</a>')


def table(columns: Sequence[str], rows: Iterable[Sequence[str]], caption: str = "",
          numeric_from: int = 1, sticky_last: bool = False,
          numeric_to: int | None = None) -> str:
    """A table of cells given as HTML, whose first column (the row's name) stays in view when
    it scrolls sideways; with ``sticky_last`` the last column (time to ready) stays in view
    too. Columns from ``numeric_from`` up to (not including) ``numeric_to`` are numbers,
    right-aligned."""
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
    """What a section says instead of a chart it has no data for."""
    return f'<p class="empty">{esc(text)}</p>'


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
