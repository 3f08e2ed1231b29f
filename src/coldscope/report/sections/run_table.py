"""The runs table that closes the page: one row per run, its configuration's varying
dimensions, its stages and time to ready, with the whole table as CSV."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.report.configurations import DIMENSION_TITLES, DIMENSIONS, Dims, dimensions
from coldscope.report.markup import CsvValue, csv_link, table
from coldscope.report.stats import bucket_value
from coldscope.report.text import esc, fmt_s, label


@dataclass(frozen=True)
class RunRow:
    """One run: its id, start time, configuration, times and per-bucket seconds."""

    id: str
    started_at: str | None
    dims: Dims
    time_to_ready_s: float | None
    first_token_s: float | None
    stages: dict[str, float | None]

    def csv(self) -> dict[str, CsvValue]:
        """The row flat, as the runs CSV has it: id, start, dimensions, times, buckets."""
        row: dict[str, CsvValue] = {"id": self.id, "started_at": self.started_at}
        row.update({d: self.dims[d] for d in DIMENSIONS})
        row["time_to_ready_s"] = self.time_to_ready_s
        row["first_token_s"] = self.first_token_s
        row.update(self.stages)
        return row


@dataclass(frozen=True)
class RunsTable:
    """Every run reported on, and the dimensions that vary among them."""

    rows: tuple[RunRow, ...]
    varying: tuple[str, ...]


def build(runs: Sequence[Run], varying: Sequence[str]) -> RunsTable:
    return RunsTable(rows=tuple(RunRow(
        id=r.id, started_at=r.started_at or None, dims=dimensions(r),
        time_to_ready_s=r.time_to_ready_s, first_token_s=r.first_token_s,
        stages={b: bucket_value(r, b) for b in BUCKETS}) for r in runs),
        varying=tuple(varying))


def draw(section: RunsTable) -> str:
    """A folded table of every run, the label column only when some run has a label."""
    rows = section.rows
    varying = [d for d in section.varying
               if d != "label" or any(r.dims.get("label") for r in rows)]
    buckets = [b for b in BUCKETS if any(r.stages.get(b) is not None for r in rows)]
    trows = [[esc(r.id), *(esc(r.dims.get(d) or "") for d in varying),
              *(fmt_s(r.stages.get(b), "") for b in buckets),
              f'<b>{fmt_s(r.time_to_ready_s, "")}</b>'] for r in rows]
    tbl = table(["id", *(DIMENSION_TITLES.get(d, d) for d in varying),
                 *(label(b) + " s" for b in buckets), "time to ready s"], trows,
                numeric_from=1 + len(varying), sticky_last=True)
    return (f'<details class="runs"><summary>All {len(rows)} runs, one row each '
            f'{csv_link("runs.csv", [r.csv() for r in rows])}</summary>{tbl}</details>')
