"""What each stage scales with: per stage, measured seconds against the model feature it should
grow with (weights, tokenizer files, compiled graphs, capture sizes), with a least-squares line
and Pearson's r."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    TOKENIZER,
    TORCH_COMPILE,
)
from coldscope.report.configurations import DIMENSIONS, Configuration, Dims
from coldscope.report.markup import CsvValue, csv_link, empty, figure, key, legend, table
from coldscope.report.stats import Fit, Summary, bucket_value, linear_fit, summary
from coldscope.report.svg import SERIES_COLORS, Linear, Svg, nice_ticks
from coldscope.report.text import esc, fmt_s, label

if TYPE_CHECKING:
    from coldscope.prediction.features import ModelFeatures

#: At most this many series (configurations other than the model) per scaling panel.
MAX_SCALING_SERIES = 3


def _weight_gb(f: ModelFeatures, dims: Dims) -> float | None:
    return f.weight_bytes / 1e9 if f.weight_bytes else None


def _tokenizer_mib(f: ModelFeatures, dims: Dims) -> float | None:
    return f.tokenizer_bytes / 2**20 if f.tokenizer_bytes else None


def _graph_mib(f: ModelFeatures, dims: Dims) -> float | None:
    return f.graph_size / 2**20 if f.graph_size else None


def _weight_x_capture(f: ModelFeatures, dims: Dims) -> float | None:
    sizes = dims.get("capture_sizes")
    if not sizes or not f.weight_bytes:
        return None
    return f.weight_bytes / 1e9 * float(sizes)


#: stage -> (feature label, its unit, how to read it from features and the run's dimensions,
#: the dimensions that the feature itself varies with and so do not split series).
SCALING_FEATURES: dict[str, tuple[str, str, Callable[[ModelFeatures, Dims], float | None],
                                  tuple[str, ...]]] = {
    BOOTSTRAP: ("weights (GB) — expected flat", "GB", _weight_gb, ()),
    TOKENIZER: ("tokenizer files (MiB)", "MiB", _tokenizer_mib, ()),
    MODEL_LOADING: ("parameter bytes (GB)", "GB", _weight_gb, ()),
    TORCH_COMPILE: ("compiled graph size (MiB)", "MiB", _graph_mib, ()),
    KV_CACHE_PROFILING: ("parameter bytes (GB)", "GB", _weight_gb, ()),
    CUDA_GRAPH_CAPTURE: ("parameter bytes × capture sizes (GB)", "GB", _weight_x_capture,
                         ("capture_sizes",)),
}


@dataclass(frozen=True)
class Point:
    """One configuration: its model's feature value ``x`` and the stage's seconds over its
    runs. ``kind``: dense, moe or hybrid (only dense models are fitted)."""

    model: str | None
    x: float
    kind: str
    group: str
    measured: Summary


@dataclass(frozen=True)
class Series:
    """Configurations equal apart from the model, with the line fitted over their runs."""

    name: str
    points: tuple[Point, ...]
    fit: Fit | None


@dataclass(frozen=True)
class Panel:
    """One stage against its feature (``unit``: the feature's); ``omitted_series``: smaller
    series left out (``MAX_SCALING_SERIES``)."""

    stage: str
    feature: str
    unit: str
    series: tuple[Series, ...]
    omitted_series: int


@dataclass(frozen=True)
class Scaling:
    panels: tuple[Panel, ...]


def build(groups: Sequence[Configuration], features: Mapping[str, ModelFeatures]) -> Scaling:
    """Per stage, measured seconds against the stage's feature, with a fitted line and Pearson r.

    ``features`` maps a model name to its ``ModelFeatures``. Points are configurations (mean and
    min-max of their runs); the line and r are fitted on the individual runs of dense models
    (MoE and hybrid models are drawn but not fitted: their start-up does not scale like a dense
    model's). Runs are split into series by their configuration apart from the model (e.g.
    cold and warm), largest first, at most ``MAX_SCALING_SERIES``.
    """
    panels = []
    for stage, (feature, unit, get, own_dims) in SCALING_FEATURES.items():
        names: dict[tuple[str | None, ...], str] = {}
        points: dict[tuple[str | None, ...], list[Point]] = {}
        fit_x: dict[tuple[str | None, ...], list[float]] = {}
        fit_y: dict[tuple[str | None, ...], list[float]] = {}
        for g in groups:
            dims = g.dims
            f = features.get(dims.get("model") or "")
            if f is None:
                continue
            x = get(f, dims)
            ys = [y for y in (bucket_value(r, stage) for r in g.runs) if y is not None]
            measured = summary(ys)
            if x is None or measured is None:
                continue
            skey = (g.dataset, *(dims[d] for d in DIMENSIONS
                                 if d != "model" and d not in own_dims))
            names.setdefault(skey, _series_name(g, own_dims))
            points.setdefault(skey, []).append(Point(model=dims.get("model"), x=x,
                                                     kind=f.kind, group=g.name,
                                                     measured=measured))
            if f.kind == "dense":
                fit_x.setdefault(skey, []).extend([x] * len(ys))
                fit_y.setdefault(skey, []).extend(ys)
        ranked = sorted(points, key=lambda k: -len({p.model for p in points[k]}))
        kept = tuple(Series(name=names[k], points=tuple(points[k]),
                            fit=linear_fit(fit_x.get(k, []), fit_y.get(k, [])))
                     for k in ranked[:MAX_SCALING_SERIES])
        panels.append(Panel(stage=stage, feature=feature, unit=unit, series=kept,
                            omitted_series=max(0, len(ranked) - MAX_SCALING_SERIES)))
    return Scaling(panels=tuple(panels))


def _series_name(group: Configuration, own_dims: tuple[str, ...]) -> str:
    dims = group.dims
    parts = [str(dims[d]) for d in DIMENSIONS
             if d != "model" and d not in own_dims and dims.get(d) is not None]
    if group.dataset:
        parts.insert(0, str(group.dataset))
    return " · ".join(parts) or "all runs"


def chart(panel: Panel) -> str:
    """Dots (a configuration's mean, whisker min-max; hollow: not fitted) and each series'
    fitted line, clipped to the plot."""
    width, height, left, right, top, bottom = 460, 300, 58, 16, 14, 50
    pts = [p for s in panel.series for p in s.points]
    xs = [p.x for p in pts]
    ys = [v for p in pts for v in (p.measured.min, p.measured.max)]
    xt = nice_ticks(0, max(xs) * 1.02 if xs else 1)
    yt = nice_ticks(0, max(ys) * 1.05 if ys else 1)
    x = Linear(0, xt[-1], left, width - right)
    y = Linear(0, yt[-1], height - bottom, top)
    svg = Svg(width, height, f"{panel.stage} against {panel.feature}")
    svg.x_axis(x, xt, height - bottom, top, panel.feature)
    svg.y_axis(y, yt, left, width - right, f"{label(panel.stage)} (s)")
    for k, s in enumerate(panel.series):
        color = SERIES_COLORS[k % len(SERIES_COLORS)]
        seg = _clip_line(s.fit, 0.0, xt[-1], 0.0, yt[-1]) if s.fit else None
        if seg:
            (x0, y0), (x1, y1) = seg
            svg.add(f'<line x1="{x(x0):.1f}" y1="{y(y0):.1f}" x2="{x(x1):.1f}" y2="{y(y1):.1f}" '
                    f'class="fit" stroke="{color}"/>')
        for p in s.points:
            m = p.measured
            if m.n > 1:
                svg.line(x(p.x), y(m.min), x(p.x), y(m.max), cls="whisker thin")
            tip = (f"{p.model} ({s.name})\n{panel.feature}: {p.x:.4g}\n"
                   f"{label(panel.stage)}: {fmt_s(m.mean)}"
                   + (f" (n={m.n}, {fmt_s(m.min)}–{fmt_s(m.max)})" if m.n > 1 else "")
                   + ("" if p.kind == "dense" else f"\n{p.kind}: not in the fit"))
            if p.kind == "dense":
                svg.circle(x(p.x), y(m.mean), 4, color, tip)
            else:
                svg.circle(x(p.x), y(m.mean), 4, "#fff", tip,
                           extra=f' stroke="{color}" stroke-width="1.5"')
    return str(svg)


def fit_text(fit: Fit | None, unit: str) -> str:
    """Pearson r, slope (with its unit) and run count of a series' fit, for its legend entry
    (outside the plot, so it can never sit on a point or on another series' text)."""
    if not fit:
        return "no fit (< 2 models)"
    r = f"r = {fit.r:.2f}" if fit.r is not None else "r: y constant"
    return f"{r} · slope {fit.slope:.3g} s/{unit} · n = {fit.n}"


def shared_series(panels: Sequence[Panel]) -> list[str]:
    """The series names by colour of the panel with the most series: said once, above the
    panels; a panel whose series differ from them names its own."""
    widest = max(panels, key=lambda p: len(p.series), default=None)
    return [s.name for s in widest.series] if widest else []


def _same_series(panel: Panel, names: Sequence[str]) -> bool:
    return all(k < len(names) and s.name == names[k] for k, s in enumerate(panel.series))


def panel_legend(panel: Panel, named: bool = True) -> str:
    """Per series: its colour, name (unless ``named`` is False: said once for all panels) and
    fit; then what the marks mean."""
    items = [key((f"{s.name}: " if named else "") + fit_text(s.fit, panel.unit),
                 f"background:{SERIES_COLORS[k % len(SERIES_COLORS)]}", "dot")
             for k, s in enumerate(panel.series)]
    if any(p.kind != "dense" for s in panel.series for p in s.points):
        items.append(key("MoE / hybrid: not fitted", "border-color:#555", "ring"))
    items.append(key("least-squares fit", "border-color:#555", "dash"))
    return '<div class="legend small">' + "".join(items) + "</div>"


def _clip_line(fit: Fit, x0: float, x1: float, y0: float,
               y1: float) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The part of the fitted line inside the plot's box, or None if it misses it."""
    a, b = fit.intercept, fit.slope
    lo, hi = x0, x1
    if b != 0:
        xa, xb = sorted(((y0 - a) / b, (y1 - a) / b))
        lo, hi = max(lo, xa), min(hi, xb)
    elif not y0 <= a <= y1:
        return None
    if hi <= lo:
        return None
    return (lo, a + b * lo), (hi, a + b * hi)


def draw(section: Scaling) -> str:
    """One panel per stage whose series have two or more feature values, in one figure."""
    panels = [p for p in section.panels
              if any(len({pt.x for pt in s.points}) > 1 for s in p.series)]
    if not panels:
        models = sorted({str(pt.model) for p in section.panels for s in p.series
                         for pt in s.points})
        return empty("Scaling needs runs of at least two models with readable features "
                     f"(model features are read from each run's model directory); these runs "
                     f"have {len(models)}{': ' + ', '.join(models) if models else ''}.")
    charts, trows = [], []
    csv_rows: list[dict[str, CsvValue]] = []
    names = shared_series(panels)
    for p in panels:
        charts.append(f'<div class="panel" data-stage="{esc(p.stage)}">'
                      f'<h4>{esc(label(p.stage))}</h4>'
                      f'{panel_legend(p, named=not _same_series(p, names))}'
                      f'{chart(p)}</div>')
        for k, s in enumerate(p.series):
            fit = s.fit
            trows.append([esc(label(p.stage)), esc(p.feature),
                          f'<i class="dot" style="background:{SERIES_COLORS[k]}"></i>'
                          + esc(s.name),
                          f"{fit.slope:.4g} s/{esc(p.unit)}" if fit else "–",
                          f"{fit.intercept:.3g}" if fit else "–",
                          f"{fit.r:.3f}" if fit and fit.r is not None else "–",
                          str(fit.n) if fit else str(sum(pt.measured.n for pt in s.points))])
            for pt in s.points:
                csv_rows.append({"stage": p.stage, "feature": p.feature,
                                 "series": s.name, "model": pt.model, "kind": pt.kind,
                                 "x": pt.x, "mean_s": pt.measured.mean,
                                 "min_s": pt.measured.min, "max_s": pt.measured.max,
                                 "runs": pt.measured.n,
                                 "fit_slope": fit.slope if fit else None,
                                 "fit_intercept_s": fit.intercept if fit else None,
                                 "pearson_r": fit.r if fit else None})
    tbl = table(["stage", "feature", "series", "slope (s per feature unit)", "intercept s",
                 "Pearson r", "runs"], trows, caption="least-squares line over the individual "
                                                      "runs of dense models", numeric_from=3)
    omitted = sum(p.omitted_series for p in panels)
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
