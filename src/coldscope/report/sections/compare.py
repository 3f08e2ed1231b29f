"""Comparisons, stage by stage: per-stage ratios between configurations that differ in exactly
one dimension (cache, eager or compiled, load format, storage, engine version, machine,
label), one dot per pair and their geometric mean."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coldscope.core.stages import BUCKETS
from coldscope.report.configurations import (
    DIMENSION_TITLES,
    DIMENSIONS,
    Configuration,
    mixed_dimensions,
    natural_key,
)
from coldscope.report.markup import CsvValue, csv_link, empty, figure, key, legend, table
from coldscope.report.stats import RATIO_FLOOR_S, TOTAL, bucket_value, geomean, summary
from coldscope.report.svg import COLORS, Log, Svg
from coldscope.report.text import esc, fmt_s, fmt_x, label, text_width

#: Baselines people expect when two values are equally common (cold before warm, ...).
BASELINE_PREFERENCE: dict[str, tuple[str, ...]] = {
    "cache": ("cold", "warm"), "mode": ("compiled", "eager"),
    "load_format": ("auto", "safetensors"),
}


@dataclass(frozen=True)
class Pair:
    """Two configurations equal in all but the compared dimension (usually one model): per
    bucket (and ``TOTAL``), their mean seconds (baseline, other) and ``other / baseline``
    (None where either is below ``RATIO_FLOOR_S`` or unknown). ``n``: runs on each side."""

    model: str | None
    baseline_group: str
    other_group: str
    n: tuple[int, int]
    means: dict[str, tuple[float | None, float | None]]
    ratios: dict[str, float | None]
    totals: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    """Each side's runs' times to ready (baseline, other): what an interval rests on."""


@dataclass(frozen=True)
class DimensionComparison:
    """One value of a dimension against its baseline value, over every pair; ``geomean``: per
    bucket, the geometric mean of the pairs' ratios."""

    dimension: str
    title: str
    baseline: str
    other: str
    pairs: tuple[Pair, ...]
    geomean: dict[str, float | None]


@dataclass(frozen=True)
class Comparisons:
    items: tuple[DimensionComparison, ...]


def _preference(dim: str, value: str) -> int:
    prefs = BASELINE_PREFERENCE.get(dim, ())
    return prefs.index(value) if value in prefs else len(prefs)


def build(groups: Sequence[Configuration]) -> Comparisons:
    """Per-stage ratios between configurations that differ in exactly one dimension.

    For each dimension (cache, eager/compiled, load format, storage, capture sizes, engine
    version, machine, label), configurations equal in every other dimension form a cluster; in
    each cluster the baseline is the value seen in most configurations overall (ties:
    ``BASELINE_PREFERENCE``, then natural order, so older versions first); each other value is
    compared with it: ``ratio = other / baseline`` of the bucket means. A dimension with None
    (not controlled) on either side is not compared. One comparison per (dimension, baseline,
    other), with one pair per cluster (usually one per model). A configuration whose setting is
    mixed (a table whose rows differ in a setting, e.g. where the weights came from) is
    compared with nothing: it would differ in more than the one dimension compared, and it is
    never a reference (``mixed_setting_notes`` says so in the report).
    """
    pairs: dict[tuple[str, str, str], list[Pair]] = {}
    for dim in DIMENSIONS:
        if dim in ("model", "capture_sizes"):  # capture sizes are a feature: see ``scaling``
            continue
        counts: dict[str, int] = {}
        clusters: dict[tuple[str | None, ...], dict[str, list[Configuration]]] = {}
        for g in groups:
            value = g.dims.get(dim)
            if value is None or mixed_dimensions(g):
                continue
            counts[value] = counts.get(value, 0) + 1
            other = tuple(g.dims.get(d) for d in DIMENSIONS if d != dim)
            clusters.setdefault(other, {}).setdefault(value, []).append(g)
        for members in clusters.values():
            if len(members) < 2:
                continue
            base = min(members, key=lambda v: (-counts[v], _preference(dim, v), natural_key(v)))
            for value in sorted(members, key=natural_key):
                if value == base:
                    continue
                for a, b in zip(members[base], members[value], strict=False):
                    pairs.setdefault((dim, base, value), []).append(_pair(a, b))
    return Comparisons(items=tuple(
        DimensionComparison(dimension=dim, title=DIMENSION_TITLES[dim], baseline=base,
                            other=value, pairs=tuple(ps),
                            geomean={b: geomean(p.ratios.get(b) for p in ps)
                                     for b in (*BUCKETS, TOTAL)})
        for (dim, base, value), ps in pairs.items()))


def _pair(a: Configuration, b: Configuration) -> Pair:
    ratios: dict[str, float | None] = {}
    means: dict[str, tuple[float | None, float | None]] = {}
    for bucket in (*BUCKETS, TOTAL):
        sa = summary(bucket_value(r, bucket) for r in a.runs)
        sb = summary(bucket_value(r, bucket) for r in b.runs)
        ma, mb = sa.mean if sa else None, sb.mean if sb else None
        means[bucket] = (ma, mb)
        ratios[bucket] = mb / ma if ma is not None and mb is not None and ma >= RATIO_FLOOR_S \
            and mb >= RATIO_FLOOR_S else None
    totals = tuple(tuple(v for r in g.runs if (v := bucket_value(r, TOTAL)) is not None)
                   for g in (a, b))
    return Pair(model=a.dims.get("model"), baseline_group=a.name, other_group=b.name,
                n=(len(a.runs), len(b.runs)), means=means, ratios=ratios,
                totals=(totals[0], totals[1]))


def mixed_setting_notes(groups: Sequence[Configuration]) -> list[str]:
    """One line per dataset (or configuration) that mixes settings: shown, never compared."""
    seen: dict[str, list[str]] = {}
    for g in groups:
        dims = mixed_dimensions(g)
        if dims:
            name = str(g.dataset or g.name)
            seen.setdefault(name, [f"{DIMENSION_TITLES.get(d, d)}: {g.dims[d]}" for d in dims])
    return [f"{name} mixes settings ({'; '.join(what)}): its runs are shown but never compared "
            "with other configurations or used as a reference" for name, what in seen.items()]


def chart(cmp: DimensionComparison) -> str:
    """Per bucket, a row on a log axis of ratios: a grey dot per pair, the geometric mean as a
    diamond in the bucket's colour, 1× marked."""
    buckets = [b for b in (*BUCKETS, TOTAL) if cmp.geomean.get(b) is not None]
    width, left, right, top, row_h = 560, 140, 70, 10, 24
    height = top + row_h * len(buckets) + 48
    vals = [r for p in cmp.pairs for b in buckets if (r := p.ratios.get(b))]
    lo = min([*vals, 0.5]) / 1.3
    hi = max([*vals, 2.0]) * 1.3
    x = Log(lo, hi, left, width - right)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
             if lo <= t <= hi]
    svg = Svg(width, height, f"{cmp.title}: {cmp.other} / {cmp.baseline}")
    base = top + row_h * len(buckets)
    caption = f"ratio {cmp.other} / {cmp.baseline} (log scale)"
    if text_width(caption, 12) > width - 20:  # long names (labels): the title names them
        caption = "ratio of seconds, second over first as titled (log scale)"
    svg.x_axis(x, ticks, base, top, caption, fmt=lambda t: f"{t:g}×")
    svg.line(x(1.0), top, x(1.0), base, cls="one")
    for i, b in enumerate(buckets):
        yc = top + i * row_h + row_h / 2
        svg.text(left - 8, yc + 4, label(b), anchor="end",
                 cls="label strong" if b == TOTAL else "label")
        for p in cmp.pairs:
            r = p.ratios.get(b)
            if r:
                a, bb = p.means[b]
                svg.circle(x(r), yc, 3, "#888", f"{p.model}: {label(b)} {fmt_s(bb)} vs "
                                                 f"{fmt_s(a)} = {fmt_x(r)}", cls="mark pair")
        g = cmp.geomean[b]
        assert g is not None  # buckets with a geometric mean only
        color = COLORS.get(b, "#333")
        svg.add(f'<path d="M{x(g):.1f} {yc - 7:.1f} l7 7 l-7 7 l-7 -7 z" fill="{color}" '
                f'class="mark geo"><title>{esc(label(b))}: geometric mean {fmt_x(g)} over '
                f'{len(cmp.pairs)} pair(s)</title></path>')
        svg.text(width - right + 6, yc + 4, fmt_x(g), cls="value")
    return str(svg)


def draw(section: Comparisons) -> str:
    if not section.items:
        return empty("No two configurations differ in exactly one dimension (cache, eager vs "
                     "compiled, load format, storage, engine version, machine or label); profile "
                     "one more to compare, e.g. `coldscope profile --cache warm ...`.")
    parts = []
    for i, c in enumerate(section.items):
        buckets = [b for b in (*BUCKETS, TOTAL) if c.geomean.get(b) is not None]
        trows = []
        csv_rows: list[dict[str, CsvValue]] = []
        for b in buckets:
            means_a = [m for p in c.pairs if (m := p.means[b][0]) is not None]
            means_b = [m for p in c.pairs if (m := p.means[b][1]) is not None]
            trows.append([esc(label(b)),
                          fmt_s(sum(means_a) / len(means_a), "") if means_a else "–",
                          fmt_s(sum(means_b) / len(means_b), "") if means_b else "–",
                          f"<b>{fmt_x(c.geomean[b])}</b>"])
        for p in c.pairs:
            for b in (*BUCKETS, TOTAL):
                a, bb = p.means[b]
                csv_rows.append({"dimension": c.dimension, "baseline": c.baseline,
                                 "other": c.other, "model": p.model, "bucket": b,
                                 "baseline_mean_s": a, "other_mean_s": bb,
                                 "ratio": p.ratios[b]})
        tbl = table(["stage", f"{c.baseline} s", f"{c.other} s", "ratio"], trows,
                    caption=f"mean over {len(c.pairs)} pair(s); ratio: geometric mean")
        models = ", ".join(sorted({str(p.model) for p in c.pairs}))
        title = f"{c.title}: {c.other} vs {c.baseline}"
        parts.append(figure(
            f"compare-{i + 1}", title, chart(c), tbl,
            csv_link(f"compare-{i + 1}.csv", csv_rows), side=True,
            keys=legend((), [key("one pair of configurations", "background:#888", "dot"),
                             key("geometric mean (stage colour)", "background:#59a14f",
                                 "diamond"),
                             key("1× (no change)", "border-color:#1f2430", "dash")]),
            note=f"Ratio of mean seconds, {esc(c.other)} over {esc(c.baseline)}, for "
                 f"configurations equal in everything else ({esc(models)}). Grey dots: each "
                 f"pair; diamond: geometric mean. Left of 1× is faster."))
    return "".join(parts)
