"""Key findings, at the top of the page: where the time goes, what the runs' findings say
(largest seconds at stake first), and the largest change between compared configurations."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from coldscope.core.records import Finding, Run
from coldscope.core.stages import BUCKETS, UNATTRIBUTED
from coldscope.report.sections.breakdown import Breakdown
from coldscope.report.sections.compare import Comparisons
from coldscope.report.stats import TOTAL
from coldscope.report.svg import COLORS
from coldscope.report.text import esc, fmt_s, fmt_x, label

#: How many of each kind of key finding the top of the page shows.
KEY_STAGES, KEY_FINDINGS = 3, 3


@dataclass(frozen=True)
class StageShare:
    """A stage's mean seconds per configuration and its share of the time to ready."""

    stage: str
    mean_s: float
    share: float


@dataclass(frozen=True)
class FindingSummary:
    """One finding id over the runs: in how many it was found, the median of its seconds at
    stake (None: never timed), and the evidence and advice of the first run it was found in."""

    id: str
    stage: str | None
    runs: int
    seconds_at_stake: float | None
    evidence: str
    advice: str


@dataclass(frozen=True)
class LargestChange:
    """The comparison whose time to ready changed most, and its stage that changed most."""

    dimension: str
    title: str
    baseline: str
    other: str
    ratio: float
    pairs: int
    stage: str | None
    stage_ratio: float | None


@dataclass(frozen=True)
class KeyFindings:
    """The top ``KEY_STAGES`` stages and ``KEY_FINDINGS`` findings (of ``findings_total``, over
    ``runs`` runs), and the largest change (None: nothing compared)."""

    stages: tuple[StageShare, ...]
    findings: tuple[FindingSummary, ...]
    findings_total: int
    runs: int
    change: LargestChange | None


def build(breakdown: Breakdown, comparisons: Comparisons, runs: Sequence[Run]) -> KeyFindings:
    """What a reader should see first: the stages that take most of the start-up, the findings
    of the runs (``run.findings``, grouped by id, largest seconds at stake first), and the
    largest change between two compared configurations.

    Stage shares are of the first dataset's breakdown (for the paper, its main table): of the
    summed mean time to ready over its configurations, so each configuration weighs the same
    however many runs it has.
    """
    rows = breakdown.rows
    first = [r for r in rows if r.dataset == rows[0].dataset] if rows else []
    total = sum((r.total.mean if r.total else 0.0) or 0.0 for r in first)
    stages = []
    for b in BUCKETS:
        if b == UNATTRIBUTED:
            continue
        known = [s.mean for r in first if (s := r.buckets.get(b)) is not None]
        if known and total > 0:
            stages.append(StageShare(stage=b, mean_s=statistics.fmean(known),
                                     share=sum(known) / total))
    stages.sort(key=lambda s: -s.share)
    firsts: dict[str, Finding] = {}
    found_in: dict[str, int] = {}
    at_stake: dict[str, list[float]] = {}
    for run in runs:
        for f in {f.id: f for f in run.findings}.values():  # a run counts once per finding
            firsts.setdefault(f.id, f)
            found_in[f.id] = found_in.get(f.id, 0) + 1
            if f.seconds_at_stake is not None:
                at_stake.setdefault(f.id, []).append(f.seconds_at_stake)
    findings = []
    for fid, f in firsts.items():
        stake = at_stake.get(fid)
        findings.append(FindingSummary(
            id=fid, stage=f.stage, runs=found_in[fid],
            seconds_at_stake=statistics.median(stake) if stake else None,
            evidence=f.evidence, advice=f.advice))
    findings.sort(key=lambda f: (-(f.seconds_at_stake or 0.0), -f.runs, f.id))
    return KeyFindings(stages=tuple(stages[:KEY_STAGES]), findings=tuple(findings[:KEY_FINDINGS]),
                       findings_total=len(findings), runs=len(runs),
                       change=_largest_change(comparisons))


def _largest_change(comparisons: Comparisons) -> LargestChange | None:
    """The comparison whose time to ready changed most (furthest from 1× on a log scale), with
    the stage that changed most within it."""
    best = None
    for c in comparisons.items:
        g = c.geomean.get(TOTAL)
        if not g:
            continue
        if best is None or abs(math.log(g)) > abs(math.log(best.ratio)):
            ratios = {b: r for b in BUCKETS if (r := c.geomean.get(b))}
            stage = max(ratios, key=lambda b: abs(math.log(ratios[b])), default=None)
            best = LargestChange(dimension=c.dimension, title=c.title, baseline=c.baseline,
                                 other=c.other, ratio=g, pairs=len(c.pairs), stage=stage,
                                 stage_ratio=ratios[stage] if stage else None)
    return best


def draw(section: KeyFindings) -> str:
    """Three cards at the top of the page: where the time goes, what the runs' findings say
    (largest seconds at stake first), and the largest change between compared
    configurations. Each links to the section with the detail."""
    items = "".join(
        f'<li><i class="sw" style="background:{COLORS.get(s.stage, "#999")}"></i>'
        f'<b>{esc(label(s.stage))}</b> {s.share:.0%} of time to ready '
        f'<small>({fmt_s(s.mean_s)} mean per configuration)</small></li>'
        for s in section.stages)
    where = (f"<ol>{items}</ol>" if items else "<p>No stage timings in these runs.</p>")
    if section.findings:
        lis = []
        for f in section.findings:
            stake = ("not timed" if f.seconds_at_stake is None else
                     f"{fmt_s(f.seconds_at_stake)} at stake"
                     + (" (median)" if f.runs > 1 else ""))
            lis.append(f'<li data-finding="{esc(f.id)}"><details><summary>'
                       f'<b>{esc(f.id)}</b>'
                       + (f' <small>{esc(label(f.stage))}</small>' if f.stage else "")
                       + f' — {stake}, {f.runs} of {section.runs} run(s)</summary>'
                       f'<span class="ev">{esc(f.evidence or "")}</span>'
                       + (f' <span class="adv">→ {esc(f.advice)}</span>'
                          if f.advice else "") + "</details></li>")
        more = section.findings_total - len(section.findings)
        found = "<ul>" + "".join(lis) + "</ul>" + (
            f"<p><small>and {more} more finding(s)</small></p>" if more > 0 else "")
    else:
        found = "<p>No findings recorded for these runs.</p>"
    ch = section.change
    if ch:
        pct = (ch.ratio - 1) * 100
        change = (f'<p><b>{esc(ch.title)}: {esc(ch.other)} vs {esc(ch.baseline)}</b>'
                  f' — time to ready {fmt_x(ch.ratio)} ({pct:+.0f}&nbsp;%) over '
                  f'{ch.pairs} pair(s)')
        if ch.stage:
            change += (f'; the stage that changed most: <b>{esc(label(ch.stage))}</b> '
                       f'{fmt_x(ch.stage_ratio)}')
        change += '. <a href="#s-compare">all comparisons</a></p>'
    else:
        change = "<p>No two configurations differ in exactly one dimension.</p>"
    cards = [("Where the time goes", where + '<a href="#s-breakdown">breakdown</a>'),
             ("Findings", found), ("Largest change", change)]
    return '<div class="cards">' + "".join(
        f'<div class="card"><h3>{esc(t)}</h3>{body}</div>' for t, body in cards) + "</div>"
