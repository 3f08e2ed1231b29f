"""The report page: the page shell around the sections' drawings (``coldscope.report.sections``),
with the package's CSS and JS inlined.

Every chart is inline SVG drawn in Python (``coldscope.report.svg`` says why), so the page
works with scripts disabled; the one small inlined script only turns SVG ``<title>`` hover text
into a styled tooltip and lets the Gantt charts zoom.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources

from coldscope.core.stages import STAGES
from coldscope.core.version import __version__
from coldscope.report.contents import Report
from coldscope.report.markup import legend
from coldscope.report.sections import (
    breakdown,
    compare,
    cpu,
    findings,
    prediction,
    releases,
    run_table,
    scaling,
    timeline,
    tune,
)
from coldscope.report.text import esc, fmt_s


def _asset(name: str) -> str:
    return resources.files("coldscope.report").joinpath("assets", name).read_text("utf-8")


def render_report(report: Report, generated_at: datetime | None = None) -> str:
    """The whole page as one string: no external resource, scripts and styles inlined. The
    sections in page order, each under its heading; start-up per release and tune sessions
    only where the runs hold such a measurement."""
    when = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    totals = [r.total.mean for r in report.breakdown.rows if r.total]
    summary_items = [
        ("runs", str(report.runs)), ("configurations", str(report.configurations)),
        ("time to ready", f"{fmt_s(min(totals))} – {fmt_s(max(totals))}" if totals else "–"),
    ]
    if report.datasets:
        summary_items.append(("datasets", str(len(report.datasets))))
    pills = "".join(f'<div class="pill"><b>{esc(v)}</b><span>{esc(k)}</span></div>'
                    for k, v in summary_items)
    sections = [
        ("findings", "Key findings", findings.draw(report.findings)),
        ("breakdown", "Where the start-up time goes", breakdown.draw(report.breakdown)),
        ("timeline", "One start-up, process by process", timeline.draw(report.timelines)),
        ("scaling", "What each stage scales with", scaling.draw(report.scaling)),
        ("compare", "Comparisons, stage by stage", compare.draw(report.comparisons)),
    ]
    if report.releases.blocks:
        sections.append(("releases", "Start-up per release", releases.draw(report.releases)))
    if report.tune.waterfalls:
        sections.append(("tune", "Tune sessions: baseline, each kept change, best",
                         tune.draw(report.tune)))
    sections += [
        ("cpu", "CPU during start-up", cpu.draw(report.cpu)),
        ("predict", "Predictions against measurements", prediction.draw(report.predictions)),
        ("runs", "Runs", run_table.draw(report.run_table)),
    ]
    nav = "".join(f'<a href="#s-{sid}">{esc(title)}</a>' for sid, title, _ in sections)
    body = "".join(f'<section id="s-{sid}"><h2>{esc(title)}</h2>{content}</section>'
                   for sid, title, content in sections)
    notes = "".join(f"<li>{esc(n)}</li>" for n in report.notes)
    stage_list = ", ".join(STAGES)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="coldscope {esc(__version__)}">
<title>{esc(report.title)}</title>
<style>{_asset("report.css")}</style>
</head><body>
<header><div class="wrap">
<h1>{esc(report.title)}</h1>
<p class="sub">{esc(report.source or "")} · generated {esc(when)} by coldscope
{esc(__version__)}</p>
<div class="pills">{pills}</div>
{legend()}
<nav>{nav}</nav>
</div></header>
<main class="wrap">
{f'<ul class="notes">{notes}</ul>' if notes else ""}
{body}
<footer>Stages: {esc(stage_list)}, plus server_ready (engine initialised → HTTP ready) and
unattributed (time no evidence explains). Buckets of a run sum to its time to ready.</footer>
</main>
<div id="tip" role="tooltip" hidden></div>
<script>{_asset("report.js")}</script>
</body></html>
"""
