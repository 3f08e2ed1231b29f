"""CPU during start-up: per-core utilisation of each configuration's representative run under
its stages, and per stage the mean of all cores, the busiest core and the saturated cores."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from coldscope.core.records import Run, Segment
from coldscope.core.stages import BUCKETS
from coldscope.report.configurations import Configuration, representatives
from coldscope.report.markup import CsvValue, csv_link, empty, figure, key, legend, table
from coldscope.report.stats import drawn_segments
from coldscope.report.svg import (
    Linear,
    Svg,
    color_scale,
    fill,
    heat,
    heatmap,
    nice_ticks,
)
from coldscope.report.text import esc, fmt_s, label

#: A core above this utilisation (percent) counts as saturated.
SATURATED_PERCENT = 90.0


@dataclass(frozen=True)
class StageCpu:
    """CPU use over the samples that fall in one bucket's segments: mean of all cores, mean of
    the busiest core (percent), mean number of cores at ``SATURATED_PERCENT`` or more."""

    samples: int
    mean_percent: float
    busiest_core_percent: float
    saturated_cores: float


@dataclass(frozen=True)
class CpuUsage:
    """A run's per-core samples (``t``: seconds since launch at the end of each sample
    interval; ``per_core``: percent busy per core) and its per-bucket ``StageCpu``."""

    run: str
    interval_s: float
    cores: int
    t: tuple[float, ...]
    per_core: tuple[tuple[float, ...], ...]
    per_bucket: dict[str, StageCpu]


def cpu_usage(run: Run) -> CpuUsage | None:
    """Per-core utilisation samples of a run, and per bucket: mean utilisation of all cores,
    mean of the busiest core, and mean number of saturated cores, over the samples that fall in
    that bucket's segments. None when the run has no CPU samples."""
    if run.cpu is None or not run.cpu.t or not run.cpu.per_core:
        return None
    t, per_core = run.cpu.t, run.cpu.per_core
    cores = max(len(row) for row in per_core)
    interval = float(run.cpu.interval_s or (t[1] - t[0] if len(t) > 1 else 1.0))
    segments = run.segments
    by_bucket: dict[str, list[list[float]]] = {}
    for ts, row in zip(t, per_core, strict=False):
        # A sample at ts covers (ts - interval, ts]: attribute it to the bucket at its midpoint.
        mid = ts - interval / 2
        for seg in segments:
            if seg.start <= mid < seg.end:
                by_bucket.setdefault(seg.bucket, []).append([float(x) for x in row])
                break
    per_bucket = {}
    for bucket in BUCKETS:
        rows = by_bucket.get(bucket)
        if not rows:
            continue
        per_bucket[bucket] = StageCpu(
            samples=len(rows),
            mean_percent=statistics.fmean(statistics.fmean(r) for r in rows),
            busiest_core_percent=statistics.fmean(max(r) for r in rows),
            saturated_cores=statistics.fmean(
                sum(1 for x in r if x >= SATURATED_PERCENT) for r in rows),
        )
    return CpuUsage(run=run.id, interval_s=interval, cores=cores,
                    t=tuple(float(x) for x in t),
                    per_core=tuple(tuple(float(x) for x in row) for row in per_core),
                    per_bucket=per_bucket)


@dataclass(frozen=True)
class CpuChart:
    """One representative run's CPU use, with the stages it is drawn under."""

    group: str
    usage: CpuUsage
    segments: tuple[Segment, ...]
    time_to_ready: float | None


@dataclass(frozen=True)
class Cpu:
    """The representative runs (those the timelines draw) that have CPU samples."""

    charts: tuple[CpuChart, ...]


def build(groups: Sequence[Configuration]) -> Cpu:
    charts = []
    for g, run in representatives(groups):
        usage = cpu_usage(run)
        if usage is not None:
            charts.append(CpuChart(group=g.name, usage=usage, segments=drawn_segments(run),
                                   time_to_ready=run.time_to_ready_s))
    return Cpu(charts=tuple(charts))


def chart(c: CpuChart) -> str:
    """The run's stages on top, a heatmap row per core, then the busiest core and the mean of
    all cores as lines, and the heatmap's colour scale."""
    cpu = c.usage
    width, left, right, top = 620, 70, 16, 8
    cores = cpu.cores
    core_h = 16 if cores <= 8 else max(3, 200 // cores)
    line_h = 90
    height = top + 22 + cores * core_h + 14 + line_h + 44 + 30
    end = max(cpu.t[-1], c.time_to_ready or 0.0)
    x = Linear(0, end * 1.01, left, width - right)
    ticks = [t for t in nice_ticks(0, end, 6) if t <= end * 1.01]
    svg = Svg(width, height, f"CPU per core during run {cpu.run}")
    y = top
    for s in c.segments:
        svg.rect(x(s.start), y, x(s.end) - x(s.start), 14, fill(s.bucket),
                 f"{label(s.bucket)}: {fmt_s(s.end - s.start)}", cls="mark seg")
    svg.text(left - 6, y + 11, "stages", anchor="end", cls="label")
    y += 22
    for k in range(cores):
        if core_h >= 10:
            svg.text(left - 6, y + k * core_h + core_h / 2 + 4, f"core {k}", anchor="end",
                     cls="label")
    heatmap(svg, cpu.t, cpu.per_core, cpu.interval_s, cpu.cores, x, y, core_h)
    y += cores * core_h + 14
    # busiest core and mean of all cores, as lines
    ys = Linear(0, 100, y + line_h, y)
    svg.y_axis(ys, (0, 50, 100), left, width - right, "busy (%)")
    for name, cls, values in (
            ("busiest", "busiest", [max(row) if row else 0 for row in cpu.per_core]),
            ("mean", "meanline", [sum(row) / len(row) if row else 0 for row in cpu.per_core])):
        pts = " ".join(f"{x(t):.1f},{ys(v):.1f}" for t, v in zip(cpu.t, values, strict=False))
        svg.add(f'<polyline points="{pts}" class="{cls}"><title>{name} core</title></polyline>')
    svg.x_axis(x, ticks, y + line_h, y + line_h, "time since launch (s)")
    color_scale(svg, left, y + line_h + 44)
    return str(svg)


def draw(section: Cpu) -> str:
    if not section.charts:
        return empty("No CPU samples in these runs (the paper's data has none; `coldscope "
                     "profile` samples every core twice a second).")
    parts = []
    for i, c in enumerate(section.charts):
        cpu = c.usage
        trows = []
        for b in BUCKETS:
            s = cpu.per_bucket.get(b)
            if s:
                trows.append([esc(label(b)), str(s.samples), f"{s.mean_percent:.0f}",
                              f"{s.busiest_core_percent:.0f}", f"{s.saturated_cores:.2f}"])
        tbl = table(["stage", "samples", "all cores %", "busiest core %",
                     f"cores ≥ {SATURATED_PERCENT:.0f} %"], trows,
                    caption="mean over the samples taken during each stage")
        csv_rows: list[dict[str, CsvValue]] = [
            {"t_s": t, **{f"core{k}_percent": row[k] if k < len(row) else None
                          for k in range(cpu.cores)}}
            for t, row in zip(cpu.t, cpu.per_core, strict=False)]
        seen = {s.bucket for s in c.segments}
        keys = legend([b for b in BUCKETS if b in seen], [
            key("CPU busy 0–100 %", "background:linear-gradient(90deg,"
                f"{heat(0)},{heat(50)},{heat(100)})", "wide"),
            key("busiest core", "background:#b2182b", "line"),
            key("mean of all cores", "background:#4e79a7", "line")])
        parts.append(figure(
            f"cpu-{i + 1}", f"CPU per core — {c.group} (run {cpu.run})", chart(c), tbl,
            csv_link(f"cpu-{i + 1}.csv", csv_rows), side=True, keys=keys,
            note=f"Utilisation of each core, sampled every {cpu.interval_s:g} s, under the "
                 f"run's reconciled stages. A start-up bound by one Python thread shows one "
                 f"saturated core at a time."))
    return "".join(parts)
