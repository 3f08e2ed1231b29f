"""The campaign summary as a rich table (a function of ``campaign.summary.summarize`` rows)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from coldscope.core.stages import STAGES


def _s(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def summary_table(rows: list[dict[str, Any]]) -> Table:
    """Medians in seconds per condition; stages no run reported are left out."""
    stages = [s for s in STAGES if any(r["stages"].get(s) is not None for r in rows)]
    table = Table(title="campaign: medians over successful runs (seconds)", box=box.SIMPLE_HEAVY,
                  title_justify="left")
    for col in ("model", "flags", "cache", "ok", "failed", "ready", "first token", *stages):
        table.add_column(col, justify="left" if col in ("model", "flags", "cache") else "right")
    multi_engine = len({r["engine"] for r in rows}) > 1
    for r in rows:
        model = f"{r['model']} [{r['engine']}]" if multi_engine else r["model"]
        cache = r["cache"] + (f" ×{r['concurrency']}" if r["concurrency"] > 1 else "")
        table.add_row(model, r["flags"], cache, str(r["ok"]), str(r["failed"]),
                      _s(r["time_to_ready_s"]), _s(r["first_token_s"]),
                      *(_s(r["stages"].get(s)) for s in stages))
    return table
