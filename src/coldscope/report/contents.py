"""What the page shows: one typed record per section (``coldscope.report.sections``), held in
page order by ``Report``. ``coldscope.report.build`` makes it; ``coldscope.report.html`` draws
it."""

from __future__ import annotations

from dataclasses import dataclass

from coldscope.report.sections.breakdown import Breakdown
from coldscope.report.sections.compare import Comparisons
from coldscope.report.sections.cpu import Cpu
from coldscope.report.sections.findings import KeyFindings
from coldscope.report.sections.prediction import Predictions
from coldscope.report.sections.releases import Releases
from coldscope.report.sections.run_table import RunsTable
from coldscope.report.sections.scaling import Scaling
from coldscope.report.sections.timeline import Timelines
from coldscope.report.sections.tune import Tune


@dataclass(frozen=True)
class Report:
    """Everything the page shows. ``source``: where the runs came from; ``notes``: what the
    reader should know about the data (what was left out and why); ``runs`` and
    ``configurations``: how many were reported on; ``datasets``: the paper's figures among
    them. ``predictions`` is None without a startup model; ``releases`` and ``tune`` are empty
    (and their sections left out) when the runs hold no such measurement."""

    title: str
    source: str
    notes: tuple[str, ...]
    runs: int
    configurations: int
    datasets: tuple[str, ...]
    findings: KeyFindings
    breakdown: Breakdown
    timelines: Timelines
    scaling: Scaling
    comparisons: Comparisons
    releases: Releases
    tune: Tune
    cpu: Cpu
    predictions: Predictions | None
    run_table: RunsTable

    def counts(self) -> dict[str, int | bool]:
        """How much the page holds, as ``coldscope report --json`` says it."""
        return {"runs": self.runs, "configurations": self.configurations,
                "timelines": len(self.timelines.items),
                "comparisons": len(self.comparisons.items),
                "scaling_panels": sum(1 for p in self.scaling.panels if p.series),
                "predictions": self.predictions is not None,
                "tune_sessions": len(self.tune.waterfalls),
                "releases_measurements": len(self.releases.blocks)}
