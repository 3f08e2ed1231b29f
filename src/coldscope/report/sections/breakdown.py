"""Where the start-up time goes: per configuration, each bucket's mean over its repetitions,
stacked to the mean time to ready, with the spread of the time to ready."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.report.configurations import (
    DIMENSION_TITLES,
    Configuration,
    Dims,
    NaturalKey,
    natural_key,
    varying_dimensions,
)
from coldscope.report.markup import CsvValue, csv_link, figure, key, legend, table
from coldscope.report.stats import TOTAL, Summary, bucket_value, summary
from coldscope.report.svg import Linear, Svg, fill, nice_ticks, whiskers
from coldscope.report.text import esc, fmt_s, label, text_width


@dataclass(frozen=True)
class BreakdownRow:
    """One configuration: per bucket and in total, the ``Summary`` of its repetitions.
    ``short`` names it by the dimensions that vary within its dataset; ``sources``: the
    evidence sources that backed each stage across its runs (e.g. ``span``)."""

    key: str
    name: str
    dataset: str | None
    n: int
    short: str
    dims: Dims
    buckets: dict[str, Summary | None]
    total: Summary | None
    first_token: Summary | None
    not_applicable: tuple[str, ...]
    sources: dict[str, str]


@dataclass(frozen=True)
class Breakdown:
    """The rows, dataset by dataset; engine versions in version order within one."""

    rows: tuple[BreakdownRow, ...]


def build(groups: Sequence[Configuration]) -> Breakdown:
    """Per configuration, per bucket (and the total): mean and spread over its repetitions.

    The bucket means of a configuration stack to its mean time to ready, because each run's
    buckets sum to its own time to ready.
    """
    within: dict[str | None, list[str]] = {}
    for g in groups:
        if g.dataset not in within:
            within[g.dataset] = varying_dimensions(
                [h.dims for h in groups if h.dataset == g.dataset])

    def version_order(g: Configuration) -> NaturalKey | tuple[int]:
        return natural_key(g.dims.get("engine")) if "engine" in within[g.dataset] else (2,)

    ordered = list(groups)
    # Engine versions read in version order (0.9 before 0.10, rc before its release), whatever
    # order the runs were made in; other configurations keep their order of first appearance.
    ordered.sort(key=version_order)
    ordered.sort(key=lambda g: list(within).index(g.dataset))
    rows = []
    for g in ordered:
        runs = g.runs
        shown = [str(g.dims[d]) for d in within[g.dataset] if g.dims[d] is not None]
        na: set[str] = set().union(*(set(r.not_applicable) for r in runs))
        rows.append(BreakdownRow(
            key=g.key, name=g.name, dataset=g.dataset, n=len(runs),
            short=" · ".join(shown) or g.name, dims=g.dims,
            buckets={b: summary(bucket_value(r, b) for r in runs) for b in BUCKETS},
            total=summary(bucket_value(r, TOTAL) for r in runs),
            first_token=summary(r.first_token_s for r in runs),
            not_applicable=tuple(sorted(na)),
            sources=_sources(runs),
        ))
    return Breakdown(rows=tuple(rows))


def _sources(runs: Sequence[Run]) -> dict[str, str]:
    """The evidence sources that backed each stage across the runs (e.g. ``span``)."""
    seen: dict[str, set[str]] = {}
    for r in runs:
        for stage, source in r.sources.items():
            seen.setdefault(stage, set()).add(source)
    return {s: "/".join(sorted(v)) for s, v in seen.items()}


def chart(rows: Sequence[BreakdownRow], title: str) -> str:
    """Horizontal stacked bars of bucket means per configuration, whiskers over repetitions:
    thick ±1 sd, thin min-max of the time to ready."""
    label_w = min(360, max(90, 7 * max(len(r.short) for r in rows)))
    width, bar_h, gap = 980, 20, 10
    values = [f"{fmt_s(r.total.mean)}" + (f" · n={r.total.n}" if r.total.n > 1 else "")
              if r.total else "" for r in rows]
    # the value right of the longest bar or whisker must fit in the right margin
    left, right, top = label_w + 16, max(80.0, max(text_width(v, 11.5) for v in values) + 12), 10
    height = top + len(rows) * (bar_h + gap) + 46
    hi = max((r.total.max if r.total else 0.0) or 0.0 for r in rows)
    hi = max(hi, max(sum(s.mean for s in r.buckets.values() if s) for r in rows))
    ticks = nice_ticks(0, hi)
    x = Linear(0, ticks[-1], left, width - right)
    svg = Svg(width, height, title)
    base = top + len(rows) * (bar_h + gap)
    svg.x_axis(x, ticks, base, top, "seconds from launch to ready (mean of repetitions)")
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        name = r.short if len(r.short) * 7 <= label_w else r.short[: label_w // 7 - 1] + "…"
        svg.text(left - 8, y + bar_h / 2 + 4, name, anchor="end", cls="label",
                 extra=f' data-group="{esc(r.key)}"')
        t = 0.0
        for b in BUCKETS:
            s = r.buckets.get(b)
            if not s or s.mean <= 0:
                continue
            tip = (f"{r.name}\n{label(b)}: {fmt_s(s.mean)} mean"
                   + (f" ± {fmt_s(s.sd)} (n={s.n}, {fmt_s(s.min)}–{fmt_s(s.max)})"
                      if s.n > 1 else "")
                   + (f"\nsource: {r.sources[b]}" if b in r.sources else ""))
            svg.rect(x(t), y, x(t + s.mean) - x(t), bar_h, fill(b), tip, cls="mark seg")
            t += s.mean
        total = r.total
        if total:
            mid = y + bar_h / 2
            if total.n > 1:
                whiskers(svg, total, x, mid)
            svg.text(max(x(total.max), x(t)) + 6, mid + 4, values[i], cls="value")
    return str(svg)


def draw(section: Breakdown) -> str:
    """One figure per dataset; the paper's further datasets fold away, to keep the page
    short."""
    datasets: dict[str | None, list[BreakdownRow]] = {}
    for r in section.rows:
        datasets.setdefault(r.dataset, []).append(r)
    parts = []
    for i, (dataset, drows) in enumerate(datasets.items()):
        title = f"Start-up per configuration — {dataset}" if dataset else \
            "Start-up per configuration"
        csv_rows = []
        for r in drows:
            row: dict[str, CsvValue] = {"configuration": r.name, "runs": r.n}
            for b in (*BUCKETS, TOTAL):
                s = r.total if b == TOTAL else r.buckets.get(b)
                row[f"{b}_mean_s"] = s.mean if s else None
                row[f"{b}_sd_s"] = s.sd if s else None
            if r.first_token:
                row["first_token_mean_s"] = r.first_token.mean
            csv_rows.append(row)
        shown = [b for b in BUCKETS if any(r.buckets.get(b) for r in drows)]
        trows = []
        for r in drows:
            cells = [esc(r.short), str(r.n)]
            for b in shown:
                s = r.buckets.get(b)
                na = b in r.not_applicable
                cells.append("n/a" if s is None and na else
                             (fmt_s(s.mean, "") + (f' <small>±{fmt_s(s.sd, "")}</small>'
                                                   if s.n > 1 else "")) if s else "–")
            t = r.total
            cells.append(f"<b>{fmt_s(t.mean, '')}</b>" + (
                f' <small>±{fmt_s(t.sd, "")}</small>' if t.n > 1 else "") if t else "–")
            trows.append(cells)
        tbl = table(["configuration", "runs", *(f"{label(b)} s" for b in shown),
                     "time to ready s"],
                    trows, caption="seconds, mean ± sd over repetitions", sticky_last=True)
        drawn = [b for b in BUCKETS if any((s := r.buckets.get(b)) and s.mean for r in drows)]
        keys = legend(drawn, [key("±1 sd of time to ready", "background:#1f2430", "line"),
                              key("min–max", "background:#1f2430", "thin")])
        fig = figure(
            f"breakdown-{i + 1}", title, chart(drows, title), tbl,
            csv_link(f"breakdown-{i + 1}.csv", csv_rows), keys=keys,
            note="Each bar stacks the mean seconds of every stage; the whisker spans the "
                 "repetitions' time to ready (thick: ±1 sd, thin: min–max). Hover a segment "
                 "for its spread and evidence source.")
        if i == 0:
            parts.append(fig)
        else:  # further datasets (the paper's figures) fold away, to keep the page short
            common = ", ".join(f"{DIMENSION_TITLES[d]}: {v}" for d, v in drows[0].dims.items()
                               if d != "model" and v is not None and
                               all(r.dims.get(d) == v for r in drows))
            parts.append(f'<details class="run"><summary>{esc(dataset)} <small>'
                         f'{len(drows)} configurations · {esc(common)}</small></summary>'
                         f'{fig}</details>')
    return "".join(parts)
