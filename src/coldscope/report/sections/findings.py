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
from coldscope.report.sections.compare import Comparisons, Pair
from coldscope.report.stats import TOTAL, geomean
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


#: Fewest runs on each side of a pair for the pair to count towards the headline change.
MIN_HEADLINE_RUNS = 2


@dataclass(frozen=True)
class LargestChange:
    """The comparison whose time to ready changed most, and its stage that changed most.

    Only pairs with at least ``MIN_HEADLINE_RUNS`` runs a side count (``pairs`` of them, of
    ``pairs_total``); ``low``/``high``: the 95 % interval of ``ratio`` (time to ready, other /
    baseline)."""

    dimension: str
    title: str
    baseline: str
    other: str
    ratio: float
    pairs: int
    stage: str | None
    stage_ratio: float | None
    low: float | None = None
    high: float | None = None
    pairs_total: int = 0


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
    """The comparison whose time to ready changed most (furthest from 1x on a log scale), with
    the stage that changed most within it.

    A headline must rest on more than one start-up a side: only pairs with at least
    ``MIN_HEADLINE_RUNS`` runs on each side count, and a comparison counts only where those
    pairs give an interval (``headline_interval``). One run a side (a 20x ratio from two saved
    logs) is shown in the comparisons section, never headlined."""
    best = None
    for c in comparisons.items:
        pairs = [p for p in c.pairs if min(p.n) >= MIN_HEADLINE_RUNS
                 and p.ratios.get(TOTAL)]
        g = geomean(p.ratios.get(TOTAL) for p in pairs)
        interval = headline_interval(pairs)
        if not g or interval is None:
            continue
        if best is None or abs(math.log(g)) > abs(math.log(best.ratio)):
            ratios = {b: r for b in BUCKETS if (r := geomean(p.ratios.get(b) for p in pairs))}
            stage = max(ratios, key=lambda b: abs(math.log(ratios[b])), default=None)
            best = LargestChange(dimension=c.dimension, title=c.title, baseline=c.baseline,
                                 other=c.other, ratio=g, pairs=len(pairs), stage=stage,
                                 stage_ratio=ratios[stage] if stage else None,
                                 low=interval[0], high=interval[1],
                                 pairs_total=len(c.pairs))
    return best


def headline_interval(pairs: Sequence[Pair]) -> tuple[float, float] | None:
    """The 95 % interval of the geometric mean of the pairs' time-to-ready ratios.

    Each pair's ratio of means has Fieller's interval (``ratio_interval`` on its runs' times
    to ready); on a log scale its half-width over the normal quantile is the pair's standard
    error, and the mean of k pairs' logs has the root of the summed squares over k. None when
    any pair has no bounded interval (fewer than 2 runs a side, a side that cannot be told
    from 0)."""
    from coldscope.analysis.comparison import CONFIDENCE, ratio_interval
    if not pairs:
        return None
    z = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
    logs, variances, bounds = [], [], []
    for p in pairs:
        r = ratio_interval(p.totals[1], p.totals[0], CONFIDENCE)
        if r.value is None or r.low is None or r.high is None or r.low <= 0 or r.value <= 0:
            return None
        logs.append(math.log(r.value))
        variances.append(((math.log(r.high) - math.log(r.low)) / (2 * z)) ** 2)
        bounds.append((r.low, r.high))
    if len(bounds) == 1:
        return bounds[0]
    centre = statistics.fmean(logs)
    half = z * math.sqrt(sum(variances)) / len(pairs)
    return math.exp(centre - half), math.exp(centre + half)


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
        interval = (f" (95&nbsp;% interval {fmt_x(ch.low)}–{fmt_x(ch.high)})"
                    if ch.low is not None and ch.high is not None else "")
        change = (f'<p><b>{esc(ch.title)}: {esc(ch.other)} vs {esc(ch.baseline)}</b>'
                  f' — time to ready {fmt_x(ch.ratio)} ({pct:+.0f}&nbsp;%){interval} over '
                  f'{ch.pairs} pair(s) of at least {MIN_HEADLINE_RUNS} runs a side')
        if ch.stage:
            change += (f'; the stage that changed most: <b>{esc(label(ch.stage))}</b> '
                       f'{fmt_x(ch.stage_ratio)}')
        change += '. <a href="#s-compare">all comparisons</a></p>'
    else:
        change = ("<p>No two configurations that differ in exactly one dimension have "
                  f"{MIN_HEADLINE_RUNS} or more runs each: no change is headlined "
                  '(<a href="#s-compare">all comparisons</a>).</p>')
    cards = [("Where the time goes", where + '<a href="#s-breakdown">breakdown</a>'),
             ("Findings", found), ("Largest change", change)]
    return '<div class="cards">' + "".join(
        f'<div class="card"><h3>{esc(t)}</h3>{body}</div>' for t, body in cards) + "</div>"
