"""Start-up per release: each ``coldscope releases`` measurement among the runs as one stacked
bar per release, in the order given, with the changes between consecutive releases as
``coldscope releases --json`` gives them (``coldscope.launch.releases``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coldscope.core.records import Run, Segment
from coldscope.core.stages import BUCKETS
from coldscope.report.markup import CsvValue, csv_link, figure, key, legend, table
from coldscope.report.stats import TOTAL, Summary, stacked, summary
from coldscope.report.svg import Linear, Svg, fill, nice_ticks, whiskers
from coldscope.report.text import esc, fmt_s, label, signed

if TYPE_CHECKING:
    from coldscope.launch.releases import Change, Delta, Family, ReleasesResult

#: At most this many ``coldscope releases`` measurements (the newest) get a block of their own.
MAX_RELEASES_MEASUREMENTS = 3

#: Per measurement, this many of the largest stage changes between consecutive releases.
RELEASE_CHANGES = 5


@dataclass(frozen=True)
class ReleaseMeans:
    """One release of a measurement: per bucket, the mean seconds over its measured start-ups
    (primes left out; ``runs``, ``n`` of them), stacked from 0 in ``segments`` (they end at
    its mean time to ready, since every run's buckets sum to its own), and its time to ready
    with its spread. ``unknown``: buckets not known in every run, left out of the bar."""

    spec: str
    name: str
    version: str | None
    n: int
    runs: tuple[str, ...]
    time_to_ready_s: float | None
    time_to_ready: Summary | None
    stages: dict[str, float | None]
    segments: tuple[Segment, ...]
    unknown: tuple[str, ...]


@dataclass(frozen=True)
class StageChange:
    """One stage's change from one release to the next (``to - from``, with its 95 %
    interval and verdict), as ``coldscope.analysis.comparison`` gives it."""

    from_: str
    to: str
    stage: str
    change: Change


@dataclass(frozen=True)
class ReleasesBlock:
    """One measurement: its releases in the order given (``names``: spec -> the name shown,
    its version when every release has a distinct one), the changes between consecutive
    releases (``deltas``, as ``releases --json``), and the ``RELEASE_CHANGES`` largest stage
    changes of all pairs (by size, whatever their verdict); per family of changes read
    together, how many survived Holm's step-down (``families``)."""

    name: str
    cache: str
    repeat: int
    args: tuple[str, ...]
    runs: int
    names: dict[str, str]
    releases: tuple[ReleaseMeans, ...]
    deltas: tuple[Delta, ...]
    largest: tuple[StageChange, ...]
    families: tuple[Family, ...] = ()


@dataclass(frozen=True)
class Releases:
    """The newest ``MAX_RELEASES_MEASUREMENTS`` measurements, newest first, and a note naming
    the ones left out."""

    blocks: tuple[ReleasesBlock, ...]
    notes: tuple[str, ...]


def build(runs: Iterable[Run]) -> Releases:
    """One block (``block``) per ``coldscope releases`` measurement among ``runs`` (membership
    kind ``releases``), newest first, at most ``MAX_RELEASES_MEASUREMENTS``."""
    from coldscope.launch.releases import stored
    results = stored(runs)
    notes = []
    if len(results) > MAX_RELEASES_MEASUREMENTS:
        left = [r.name for r in results[MAX_RELEASES_MEASUREMENTS:]]
        notes.append(f"start-up per release: the {MAX_RELEASES_MEASUREMENTS} newest releases "
                     f"measurements are shown; {len(left)} older left out ("
                     + ", ".join(left[:5]) + (", ..." if len(left) > 5 else "") + ")")
    return Releases(blocks=tuple(block(r) for r in results[:MAX_RELEASES_MEASUREMENTS]),
                    notes=tuple(notes))


def block(result: ReleasesResult) -> ReleasesBlock:
    """One ``releases`` measurement (the numbers ``coldscope releases --json`` gives for these
    runs) as chart data. A release is named by its version when every release has a distinct
    one, else by its spec."""
    versions = [r.engine_version for r in result.releases]
    by_version = None not in versions and len(set(versions)) == len(versions)
    names = {r.spec: (r.engine_version if by_version else None) or r.spec
             for r in result.releases}
    releases = tuple(ReleaseMeans(
        spec=r.spec, name=names[r.spec], version=r.engine_version, n=len(r.runs),
        runs=tuple(r.runs), time_to_ready_s=r.time_to_ready_s,
        time_to_ready=summary(r.time_to_ready_runs_s),
        stages={b: r.stages.get(b) for b in BUCKETS}, segments=stacked(r.stages),
        unknown=tuple(b for b in BUCKETS if r.runs and r.stages.get(b) is None),
    ) for r in result.releases)
    ranked = []
    for i, dl in enumerate(result.deltas):
        for b, c in dl.stages.items():
            if c.delta:
                ranked.append(((-abs(c.delta), i, BUCKETS.index(b)),
                               StageChange(from_=dl.from_, to=dl.to, stage=b, change=c)))
    ranked.sort(key=lambda item: item[0])
    return ReleasesBlock(name=result.name, cache=result.cache, repeat=result.repeat,
                         args=tuple(result.args), runs=sum(r.n for r in releases), names=names,
                         releases=releases, deltas=tuple(result.deltas),
                         largest=tuple(c for _, c in ranked[:RELEASE_CHANGES]),
                         families=tuple(result.families))


def _interval(c: Change) -> str:
    """A change's 95 % interval, ``[-7.57, -0.89]``; ``–`` without one (one run a side)."""
    if c.low is None or c.high is None:
        return "–"
    return f"[{signed(c.low)}, {signed(c.high)}]"


def _verdict(c: Change) -> str:
    v = c.verdict or ""
    return f"<b>{esc(v)}</b>" if v in ("faster", "slower") else esc(v)


def _holm(c: Change) -> str:
    """A change's verdict after Holm's step-down over its family; ``–`` in no family."""
    v = c.holm
    if v is None:
        return "–"
    return f"<b>{esc(v)}</b>" if v in ("faster", "slower") else esc(v)


def _families(m: ReleasesBlock) -> str:
    """Per family of changes, how many were resolved on their own and after Holm."""
    return " ".join(esc(f.statement()[0].upper() + f.statement()[1:] + ".")
                    for f in m.families)


def chart(m: ReleasesBlock, title: str) -> str:
    """One vertical bar per release, in the order given (the paper's Figure 1, by stage): the
    mean seconds of each bucket stacked from 0 to the release's mean time to ready, a whisker
    over its start-ups' time to ready (thick: ±1 sd, thin: min–max), the mean above it and the
    release's name below."""
    rels = m.releases
    n = max(len(rels), 1)
    left, right, top, bottom = 64, 16, 24, 56
    width = 980  # every chart's width: the page scales them alike, so their text matches
    height = 320
    base = height - bottom
    hi = max([0.0, *(s.end for r in rels for s in r.segments),
              *((r.time_to_ready.max if r.time_to_ready else 0.0) or 0.0 for r in rels)])
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
        for s in r.segments:
            tip = (f"{r.spec}\n{label(s.bucket)}: {fmt_s(s.end - s.start)} "
                   f"(mean of {r.n} start-up(s))")
            svg.rect(x0, y(s.end), bar_w, y(s.start) - y(s.end), fill(s.bucket),
                     tip, cls="mark seg", extra=f' data-release="{i}"')
        total = r.time_to_ready
        peak = r.segments[-1].end if r.segments else 0.0
        if total and total.n > 1:
            whiskers(svg, total, y, cx, vertical=True)
            peak = max(peak, total.max)
        if r.time_to_ready_s is not None:
            svg.text(cx, y(peak) - 6, fmt_s(r.time_to_ready_s), anchor="middle",
                     cls="value")
        name = r.name if len(r.name) <= fit else r.name[: fit - 1] + "…"
        svg.text(cx, base + 16, name, anchor="middle", cls="label")
    svg.text((left + width - right) / 2, base + 40, "release, in the order given",
             anchor="middle", cls="caption")
    return str(svg)


def draw(section: Releases) -> str:
    """Per measurement: its stacked bars with the table of stage means, then the time-to-ready
    change between consecutive releases and the largest stage changes, each with its 95 %
    interval and verdict."""
    parts = []
    for i, m in enumerate(section.blocks):
        rels = m.releases
        shown = [b for b in BUCKETS if any(r.stages.get(b) for r in rels)]
        trows = []
        csv_rows: list[dict[str, CsvValue]] = []
        csv_changes: list[dict[str, CsvValue]] = []
        for r in rels:
            t = r.time_to_ready
            trows.append([
                esc(r.name), str(r.n), *(fmt_s(r.stages.get(b), "") for b in shown),
                f"<b>{fmt_s(r.time_to_ready_s, '')}</b>"
                + (f' <small>±{fmt_s(t.sd, "")}</small>' if t and t.n > 1 else "")])
            csv_rows.append({"measurement": m.name, "release": r.spec,
                             "version": r.version, "runs": r.n,
                             **{f"{b}_mean_s": r.stages.get(b) for b in BUCKETS},
                             "time_to_ready_mean_s": r.time_to_ready_s,
                             "time_to_ready_sd_s": t.sd if t else None})
        tables = table(["release", "runs", *(f"{label(b)} s" for b in shown),
                        "time to ready s"], trows, sticky_last=True,
                       caption="seconds, mean over each release's measured start-ups "
                               "(primes left out); time to ready ± sd")
        pair_rows, change_rows = [], []
        for dl in m.deltas:
            c = dl.time_to_ready
            pair_rows.append([esc(f"{m.names[dl.from_]} → {m.names[dl.to]}"),
                              signed(c.delta), _interval(c), _verdict(c), _holm(c)])
            for b, s in [*dl.stages.items(), (TOTAL, c)]:
                csv_changes.append({"measurement": m.name, "from": dl.from_,
                                    "to": dl.to, "stage": b, "delta_s": s.delta,
                                    "low_s": s.low, "high_s": s.high,
                                    "verdict": s.verdict, "verdict_after_holm": s.holm})
        for sc in m.largest:
            change_rows.append([esc(f"{m.names[sc.from_]} → {m.names[sc.to]}"),
                                esc(label(sc.stage)), signed(sc.change.delta),
                                _interval(sc.change), _verdict(sc.change), _holm(sc.change)])
        if pair_rows:
            tables += table(["from → to", "time to ready change s", "95 % interval s",
                             "verdict", "after Holm"], pair_rows, numeric_to=3,
                            caption="time to ready, from each release to the next: to − from")
        if change_rows:
            tables += table(["from → to", "stage", "change s", "95 % interval s", "verdict",
                             "after Holm"],
                            change_rows, numeric_from=2, numeric_to=4,
                            caption=f"the {len(change_rows)} largest stage changes between "
                                    "consecutive releases, to − from, whatever their verdict")
        title = f"Start-up per release — {m.name} ({m.cache} caches)"
        drawn = [b for b in BUCKETS if any(s.bucket == b for r in rels for s in r.segments)]
        keys = legend(drawn, [key("±1 sd of time to ready", "background:#1f2430", "line"),
                              key("min–max", "background:#1f2430", "thin")])
        note = ("One bar per release, in the order the measurement gave them: each stage's "
                "mean seconds over the release's measured start-ups, stacked to its mean time "
                "to ready; the whisker spans its start-ups' time to ready (thick: ±1 sd, thin: "
                "min–max). The changes are the numbers of <code>coldscope releases</code> for "
                "these runs: to − from, with Welch's 95 % interval; faster or slower only when "
                "the whole interval is on one side of 0 and the change is at least max(0.05 s, "
                "1 % of time to ready), else unresolved. Read together, a family's verdicts "
                "count only where they survive Holm's step-down (family-wise 5 %; the "
                "<i>after Holm</i> column). ") + _families(m)
        unknown = sorted({b for r in rels for b in r.unknown})
        if unknown:
            note += esc(" Not known in every run, so left out of the bars: "
                        + ", ".join(label(b) for b in unknown) + ".")
        if m.args:
            note += f" Every release started with <code>{esc(' '.join(m.args))}</code>."
        downloads = csv_link(f"releases-{i + 1}.csv", csv_rows) + (
            csv_link(f"releases-{i + 1}-changes.csv", csv_changes) if csv_changes else "")
        parts.append(figure(f"releases-{i + 1}", title, chart(m, title), tables,
                            downloads, keys=keys, note=note))
    return "".join(parts)
