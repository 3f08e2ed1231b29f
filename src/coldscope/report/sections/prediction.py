"""Predictions against measurements: a fitted startup model's per-stage and total seconds, with
its intervals, against each configuration's measured mean (``coldscope report
--startup-model``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coldscope.core.interval import Interval
from coldscope.core.stages import BUCKETS
from coldscope.report.configurations import DIMENSION_TITLES, Configuration, mixed_dimensions
from coldscope.report.markup import CsvValue, csv_link, empty, figure, key, legend, table
from coldscope.report.paper import paper_table_of
from coldscope.report.stats import TOTAL, Summary, bucket_value, summary
from coldscope.report.svg import Linear, Svg, nice_ticks
from coldscope.report.text import esc, fmt_s, label

if TYPE_CHECKING:
    from coldscope.prediction.features import ModelFeatures
    from coldscope.prediction.modelfile import StartupModelFile
    from coldscope.prediction.startup_model import StartupModel


@dataclass(frozen=True)
class Cell:
    """One bucket (or ``TOTAL``) of one configuration: the predicted seconds and their
    interval, the measured mean, min and max (None: not measured), and whether the measured
    mean is inside the interval."""

    predicted: float
    interval: Interval
    measured: float | None
    measured_min: float | None
    measured_max: float | None
    inside: bool | None


@dataclass(frozen=True)
class PredictionRow:
    """One configuration predicted; ``role``: ``held out``, or ``training`` / ``calibration``
    when the startup model was fitted on its model's runs (then left out of the coverage)."""

    group: str
    model: str | None
    role: str
    cells: dict[str, Cell]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Predictions:
    """The rows, the buckets any row predicts, and per bucket the share of held-out rows whose
    measured mean is inside the ``level`` interval. ``notes``: what was not scored and why."""

    level: float
    buckets: tuple[str, ...]
    rows: tuple[PredictionRow, ...]
    coverage: dict[str, float | None]
    notes: tuple[str, ...]


def build(groups: Sequence[Configuration], features: Mapping[str, ModelFeatures],
          startup_model: StartupModel) -> Predictions:
    """Predicted against measured seconds per bucket and in total, per configuration whose model
    has features and whose setting matches the startup model's (machine, cache, mode, engine,
    load format, storage; a paper table: the table the model was fitted or calibrated on); with
    the intervals and whether the measured mean is inside. Rows of the models the startup model
    was fitted (or calibrated) on, in its own setting, are labelled as such and kept out of the
    coverage: they test nothing. Configurations of another setting are not scored; ``notes``
    says which.
    """
    # a predictor that is not a fitted StartupModel (a test's stand-in) records no setting
    file: StartupModelFile | None = getattr(startup_model, "file_", None)
    rows, other_setting = [], []
    for g in groups:
        dims = g.dims
        f = features.get(dims.get("model") or "")
        if f is None:
            continue
        mismatch = _setting_mismatch(g, file)
        if mismatch:
            other_setting.append(f"{g.name} ({mismatch})")
            continue
        role = _role(dims.get("model"), file)
        sizes = dims.get("capture_sizes")
        pred = startup_model.predict(f, capture_sizes=int(sizes) if sizes else None)
        cells = {}
        for bucket, sp in pred.stages.items():
            measured = summary(bucket_value(r, bucket) for r in g.runs)
            cells[bucket] = _cell(sp.s, sp.interval, measured)
        cells[TOTAL] = _cell(pred.total_s, pred.interval,
                             summary(bucket_value(r, TOTAL) for r in g.runs))
        rows.append(PredictionRow(group=g.name + (f" ({role} row)" if role else ""),
                                  model=dims.get("model"), role=role or "held out",
                                  cells=cells, warnings=tuple(pred.warnings)))
    buckets = tuple(b for b in (*BUCKETS, TOTAL) if any(b in r.cells for r in rows))
    coverage = {}
    for b in buckets:
        inside = [c.inside for r in rows if r.role == "held out"
                  and (c := r.cells.get(b)) is not None and c.inside is not None]
        coverage[b] = (sum(inside) / len(inside)) if inside else None
    notes = []
    if other_setting:
        notes.append(f"predicted vs measured: {len(other_setting)} configuration(s) not scored, "
                     "their setting differs from the startup model's: "
                     + "; ".join(other_setting[:8]) + ("; ..." if len(other_setting) > 8 else ""))
    trained = [r.group for r in rows if r.role != "held out"]
    if trained:
        notes.append(f"predicted vs measured: {len(trained)} row(s) are the startup model's own "
                     "training or calibration data (labelled, left out of the coverage)")
    return Predictions(level=startup_model.level, buckets=buckets,
                       rows=tuple(rows), coverage=coverage, notes=tuple(notes))


def _role(model: str | None, file: StartupModelFile | None) -> str | None:
    """``training`` / ``calibration`` when the startup model was fitted on this model's runs."""
    if file is None or model is None:
        return None
    if file.calibration is not None:
        return "calibration" if model in file.calibration.models else None
    return "training" if model in file.trained_on.models else None


def _setting_mismatch(group: Configuration, file: StartupModelFile | None) -> str | None:
    """Why a configuration's setting is not the startup model's (None: it matches, or the
    model does not record enough to tell)."""
    if file is None:
        return None
    env = file.environment or {}
    dims = group.dims
    mixed = mixed_dimensions(group)
    if mixed:
        return f"mixed {', '.join(mixed)}"
    if group.dataset is not None or env.get("table"):
        table_ = env.get("table")
        mine = paper_table_of(group.dataset)
        if table_ is None or mine is None:
            return "paper table vs stored runs" if (table_ is None) != (mine is None) else None
        return None if mine == table_ else f"paper table {mine}, model's {table_}"
    checks = {
        "cache": env.get("cache"),
        "engine": env.get("engine"),
        "load_format": env.get("load_format"),
        "mode": None if "enforce_eager" not in env and "compile" not in env else
        ("eager" if env.get("enforce_eager") or env.get("compile") is False else "compiled"),
    }
    for dim, want in checks.items():
        have = dims.get(dim)
        if want is not None and have is not None and str(have) != str(want):
            return f"{DIMENSION_TITLES.get(dim, dim)} {have}, model's {want}"
    cpu = env.get("cpu_model")
    machine = dims.get("machine")
    if cpu and machine and not str(machine).startswith(str(cpu)):
        return f"machine {machine}, model's {cpu}"
    storage = file.storage.page_cache if file.storage is not None else None
    if storage == "hot" and str(dims.get("weights") or "").startswith("page cache dropped"):
        return "weights read cold, model's from the page cache"
    return None


def _cell(predicted: float, interval: Interval, measured: Summary | None) -> Cell:
    mean = measured.mean if measured else None
    return Cell(predicted=predicted, interval=interval, measured=mean,
                measured_min=measured.min if measured else None,
                measured_max=measured.max if measured else None,
                inside=None if mean is None else interval.low <= mean <= interval.high)


def chart(pred: Predictions, bucket: str) -> str:
    """Predicted (y, with its interval) against measured (x) seconds of one bucket, one dot
    per configuration, the diagonal where they agree."""
    width, height, left, right, top, bottom = 300, 260, 52, 12, 12, 46
    cells = [(r, c) for r in pred.rows if (c := r.cells.get(bucket)) is not None
             and c.measured is not None]
    vals = [v for _, c in cells for v in (c.interval.high, c.measured or 0.0,
                                          c.measured_max or 0)]
    ticks = nice_ticks(0, max(vals) * 1.05 if vals else 1, 4)
    x = Linear(0, ticks[-1], left, width - right)
    y = Linear(0, ticks[-1], height - bottom, top)
    svg = Svg(width, height, f"{bucket}: predicted against measured")
    svg.x_axis(x, ticks, height - bottom, top, "measured (s)")
    svg.y_axis(y, ticks, left, width - right, "predicted (s)")
    svg.line(x(0), y(0), x(ticks[-1]), y(ticks[-1]), cls="diag")
    for r, c in cells:
        measured = c.measured or 0.0
        color = "#59a14f" if c.inside else "#e15759"
        svg.line(x(measured), y(c.interval.low), x(measured), y(c.interval.high), cls="whisker",
                 extra=f' style="stroke:{color}"')
        svg.circle(x(measured), y(c.predicted), 3.5, color,
                   f"{r.group}\n{label(bucket)}: predicted {fmt_s(c.predicted)} "
                   f"[{fmt_s(c.interval.low, '')}, {fmt_s(c.interval.high)}], measured "
                   f"{fmt_s(c.measured)}" + ("" if c.inside else " — outside"))
    return str(svg)


def draw(section: Predictions | None) -> str:
    pred = section
    if pred is None:
        return empty("Give a startup model to compare its predictions with these runs: "
                     "`coldscope fit --out model.json` then `coldscope report "
                     "--startup-model model.json`.")
    if not pred.rows:
        return empty("No configuration's model has readable features, so nothing to predict.")
    buckets = [b for b in pred.buckets
               if any((c := r.cells.get(b)) is not None and c.measured for r in pred.rows)]
    charts = "".join(f'<div class="panel"><h4>{esc(label(b))}</h4>{chart(pred, b)}'
                     f'</div>' for b in buckets)
    trows = []
    csv_rows: list[dict[str, CsvValue]] = []
    for r in pred.rows:
        t = r.cells[TOTAL]
        trows.append([esc(r.group), fmt_s(t.predicted, ""),
                      f"{fmt_s(t.interval.low, '')}–{fmt_s(t.interval.high, '')}",
                      fmt_s(t.measured, ""),
                      "yes" if t.inside else ("–" if t.inside is None else "<b>no</b>")])
        for b, c in r.cells.items():
            csv_rows.append({"configuration": r.group, "bucket": b, "predicted": c.predicted,
                             "low": c.interval.low, "high": c.interval.high,
                             "measured": c.measured,
                             "measured_min": c.measured_min, "measured_max": c.measured_max,
                             "inside": c.inside})
    cov = pred.coverage.get(TOTAL)
    tbl = table(["configuration", "predicted s", f"{pred.level:.0%} interval s",
                 "measured s", "inside"], trows, caption="time to ready")
    warnings = sorted({w for r in pred.rows for w in r.warnings})
    note = (f"Dot: the startup model's prediction, bar: its {pred.level:.0%} interval, "
            f"against the measured mean; green when the measured mean is inside. "
            + (f"Measured time to ready inside the interval for {cov:.0%} of configurations."
               if cov is not None else ""))
    if warnings:
        note += "<br><small>" + "<br>".join(esc(w) for w in warnings[:6]) + "</small>"
    keys = legend((), [key("measured mean inside the interval", "background:#59a14f", "dot"),
                       key("outside", "background:#e15759", "dot"),
                       key(f"{pred.level:.0%} interval", "background:#1f2430", "line"),
                       key("predicted = measured", "border-color:#9ca3af", "dash")])
    return figure("predictions", "Predicted against measured, per stage",
                  f'<div class="grid small">{charts}</div>', tbl,
                  csv_link("predictions.csv", csv_rows), note=note, keys=keys)
