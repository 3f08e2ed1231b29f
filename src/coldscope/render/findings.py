"""The findings of a run as a rich table (``analysis.findings`` finds them; this draws them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from coldscope.core.records import Finding
from coldscope.util.safeio import clean_text

#: Columns the evidence and advice need beside the id, stage and seconds for the table to
#: read; on a narrower console (a pipe at 80 columns) each finding is a heading line with its
#: evidence and advice indented under it, at the console's full width.
EVIDENCE_WIDTH = 40


def findings_table(findings: Sequence[Finding | Mapping[str, Any]]) -> RenderableType:
    """The findings, printed after a timeline (profile, show, parse); findings as records or
    as their JSON (``findings_json``). A table where the console leaves the evidence
    ``EVIDENCE_WIDTH`` columns beside whole ids and stages, else one block per finding (ids
    are never cut, and the evidence is not folded a few words a line)."""
    return _Findings([f if isinstance(f, Finding) else Finding.model_validate(f)
                      for f in findings])


class _Findings:
    """Drawn at the width of the console that prints it (``__rich_console__``)."""

    def __init__(self, items: list[Finding]) -> None:
        self.items = items

    def __rich_console__(self, console: Console, options: ConsoleOptions
                         ) -> Iterator[RenderableType]:
        ids = max([len("finding"), *(len(clean_text(f.id)) for f in self.items)])
        stages = max([len("stage"), *(len(clean_text(f.stage or "")) for f in self.items)])
        # SIMPLE_HEAVY: an edge and a space either side of each of four columns
        if ids + stages + len("s at stake") + EVIDENCE_WIDTH + 13 <= options.max_width:
            yield self._table()
        else:
            yield self._blocks()

    def _table(self) -> Table:
        table = Table(title="findings", title_justify="left", box=box.SIMPLE_HEAVY)
        table.add_column("finding", no_wrap=True)
        table.add_column("stage", no_wrap=True)
        table.add_column("s at stake", justify="right", no_wrap=True)
        table.add_column("evidence / advice", overflow="fold")
        if not self.items:
            table.add_row("none", "", "", "no rule fired on this run's evidence")
        for f in self.items:
            # evidence quotes the log: Text, never markup, whatever console prints the table
            table.add_row(Text(clean_text(f.id)), Text(clean_text(f.stage or "")),
                          _seconds(f), Text.assemble(clean_text(f.evidence), "\n",
                                                     ("→ " + clean_text(f.advice), "dim")))
        return table

    def _blocks(self) -> Group:
        parts: list[RenderableType] = [Text("findings")]
        if not self.items:
            parts.append(Padding(Text("none: no rule fired on this run's evidence"), (0, 0, 0, 2)))
        for f in self.items:
            stage = f" ({clean_text(f.stage)})" if f.stage else ""
            secs = _seconds(f)
            head = Text.assemble((clean_text(f.id), "bold"), stage, ": ",
                                 secs if secs == "not timed" else f"{secs} s at stake")
            parts.append(Padding(head, (0, 0, 0, 2)))
            parts.append(Padding(Text(clean_text(f.evidence)), (0, 0, 0, 6)))
            parts.append(Padding(Text("→ " + clean_text(f.advice), style="dim"), (0, 0, 0, 6)))
        return Group(*parts)


def _seconds(f: Finding) -> str:
    # an engine's warnings show a fault they cannot time: not a missing number
    return f"{f.seconds_at_stake:.1f}" if f.seconds_at_stake is not None else "not timed"
