"""What a campaign tells its user while it runs: a no-op base, and a rich progress display.

The executors call ``started`` when an engine is launched, ``stage`` when the engine enters a
stage (the runner's live events, where it gives them) and ``finished`` when its run is stored;
the ETA is the mean wall time per finished cell in this session (model making, priming runs
and engine shutdown included) times the cells still to run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from coldscope.campaign.matrix import Cell
from coldscope.core.records import Run
from coldscope.util.safeio import clean_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, Task, TaskID
    from rich.text import Text


class Reporter:
    """Receives a campaign's events; ignores them all."""

    def begin(self, name: str, total: int, already_done: int, todo: int,
              concurrency: int) -> None: ...

    def note(self, text: str) -> None: ...

    def started(self, cell: Cell, run_id: str, role: str, port: int) -> None: ...

    def stage(self, run_id: str, stage: str, seconds: float) -> None:
        """The engine of run ``run_id`` entered ``stage`` (or a sub-step) ``seconds`` after
        its launch."""

    def finished(self, cell: Cell, run: Run) -> None: ...

    def end(self) -> None: ...


def eta(elapsed: float, finished: int, remaining: int) -> float | None:
    """Seconds left: ``elapsed`` wall seconds per ``finished`` cell, times ``remaining``; None
    before the first cell. Cells run side by side shorten ``elapsed`` per cell on their own."""
    if finished <= 0:
        return None
    return elapsed / finished * remaining


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "ETA --:--"
    s = int(round(seconds))
    return f"ETA {s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def outcome_line(cell: Cell, run: Run) -> Text:
    """One finished cell, styled without markup (its id and reason are data)."""
    from rich.text import Text

    role = run.campaign.role if run.campaign is not None else None
    what = cell.id + (" (priming the warm cache)" if role == "prime" else "")
    if run.status == "ok":
        ttft = run.first_token_s
        tail = f", first token {ttft:.1f} s" if ttft is not None else ""
        return Text.assemble(("ok", "green"), clean_text(
            f"     {what}: ready in {run.time_to_ready_s:.1f} s{tail} ({run.cache}, run {run.id})"))
    return Text.assemble(("failed", "red"),
                         clean_text(f" {what}: {run.reason} (run {run.id})"))


def stage_text(stage: str | None, seconds: float | None) -> str:
    """What a running engine is doing, for its progress row."""
    if stage is None:
        return "starting"
    return f"now: {stage.replace('/', ' › ')}" + (
        f" (entered at {seconds:.1f} s)" if seconds is not None else "")


class RichReporter(Reporter):
    """One bar over the cells (elapsed, ETA) and, under it, one row per engine running now:
    its cell, the time since its launch, and the stage it is in."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None  # from ``begin`` on
        self.task: TaskID | None = None  # the campaign's row
        self.name = ""
        self.t0 = 0.0
        self.finished_cells = 0
        self.todo = 0
        self.concurrency = 1
        self.running: dict[str, str] = {}
        self.rows: dict[str, TaskID] = {}  # run id -> its progress row
        self.counted: set[str] = set()

    def begin(self, name: str, total: int, already_done: int, todo: int,
              concurrency: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.name = name
        self.todo = todo
        self.concurrency = concurrency
        self.t0 = time.monotonic()
        from rich.text import Text

        self.console.print(Text.assemble(
            "campaign ", (clean_text(name), "bold"),
            f": {total} cell(s), {already_done} already in the store, {todo} to run"
            + (f", {concurrency} at once" if concurrency > 1 else "")))
        class Count(MofNCompleteColumn):  # "3/12" on the campaign's row, blank on a run's
            def render(self, task: Task) -> Text:
                return super().render(task) if task.total is not None else Text("")

        self.progress = progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
            Count(), TimeElapsedColumn(), TextColumn("{task.fields[eta]}", markup=False),
            console=self.console, transient=False,
        )
        progress.start()
        self.task = progress.add_task(name, total=total, completed=already_done,
                                      eta=_clock(None))

    def _live(self) -> tuple[Progress, TaskID]:
        """The display and the campaign's row (``begin`` made them)."""
        if self.progress is None or self.task is None:
            raise RuntimeError("RichReporter: begin() was not called")
        return self.progress, self.task

    def note(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text(clean_text(text)))

    def started(self, cell: Cell, run_id: str, role: str, port: int) -> None:
        progress, task = self._live()
        self.running[cell.id] = role
        label = ", ".join(self.running)
        progress.update(task, description=f"{label} ({role})" if len(
            self.running) == 1 else label)
        # a row of its own: elapsed since launch (rich's clock), and the stage it is in
        self.rows[run_id] = progress.add_task(
            f"  └ {cell.id}" + (" (priming)" if role == "prime" else ""), total=None,
            eta=stage_text(None, None))

    def stage(self, run_id: str, stage: str, seconds: float) -> None:
        row = self.rows.get(run_id)
        if row is not None:
            self._live()[0].update(row, eta=stage_text(stage, seconds))

    def finished(self, cell: Cell, run: Run) -> None:
        row = self.rows.pop(run.id, None)
        if row is not None:
            self._live()[0].remove_task(row)
        self.console.print(outcome_line(cell, run))
        role = run.campaign.role if run.campaign is not None else None
        if role == "prime" or run.reason == "interrupted":
            return
        self.running.pop(cell.id, None)
        if cell.id in self.counted:  # a retried cell advances the bar once
            return
        self.counted.add(cell.id)
        self.finished_cells += 1
        left = eta(time.monotonic() - self.t0, self.finished_cells,
                   self.todo - self.finished_cells)
        progress, task = self._live()
        progress.update(task, advance=1, eta=_clock(left))

    def end(self) -> None:
        if self.progress is not None and self.task is not None:
            for row in self.rows.values():
                self.progress.remove_task(row)
            self.rows.clear()
            self.progress.update(self.task, description=self.name)
            self.progress.stop()
