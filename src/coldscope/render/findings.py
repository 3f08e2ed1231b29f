"""The findings of a run as a rich table (``analysis.findings`` finds them; this draws them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from coldscope.core.records import Finding
from coldscope.util.safeio import clean_text


def findings_table(findings: Sequence[Finding | Mapping[str, Any]]) -> Table:
    """A rich table of findings, printed after a timeline (profile, show, parse); findings as
    records or as their JSON (``findings_json``)."""
    items = [f if isinstance(f, Finding) else Finding.model_validate(f) for f in findings]
    table = Table(title="findings", title_justify="left", box=box.SIMPLE_HEAVY)
    table.add_column("finding")
    table.add_column("stage")
    table.add_column("s at stake", justify="right")
    table.add_column("evidence / advice", overflow="fold")
    if not items:
        table.add_row("none", "", "", "no rule fired on this run's evidence")
    for f in items:
        # an engine's warnings show a fault they cannot time: not a missing number
        secs = f"{f.seconds_at_stake:.1f}" if f.seconds_at_stake is not None else "not timed"
        # evidence quotes the log: Text, never markup, whatever console prints the table
        table.add_row(Text(clean_text(f.id)), Text(clean_text(f.stage or "")), secs,
                      Text.assemble(clean_text(f.evidence), "\n",
                                    ("→ " + clean_text(f.advice), "dim")))
    return table
