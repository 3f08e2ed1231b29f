"""A progress bar for long commands, shown on a terminal only.

Never with ``--json`` and never when stdout or stderr is piped: a script reading the output
must see exactly what it would see without a terminal. The bar goes to stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from coldscope.core.records import Run


def wanted(as_json: bool) -> bool:
    """True when a bar may be drawn: a terminal on both streams and no JSON asked for."""
    return not as_json and sys.stdout.isatty() and sys.stderr.isatty()


@contextmanager
def bar(description: str, show: bool) -> Iterator[Callable[..., None]]:
    """Yield ``update(fraction=None, description=None, pulse=False)``; a no-op when ``show``
    is false.

    ``fraction`` in 0..1 moves the bar; None leaves it as it is; ``pulse`` sets it pulsing
    again (a next phase of unknown length). A new description is drawn at once, so a short
    phase is seen too.
    """
    if not show:
        yield lambda *args, **kwargs: None
        return
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from coldscope.cli.common import console
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                  TaskProgressColumn(), TimeElapsedColumn(), console=console(stderr=True),
                  transient=True) as prog:
        task = prog.add_task(description, total=None)

        def update(fraction: float | None = None, description: str | None = None,
                   pulse: bool = False) -> None:
            changes: dict[str, Any] = {}
            if description is not None:
                changes["description"] = description
                changes["refresh"] = True
            if pulse:
                prog.reset(task, total=None)
            elif fraction is not None:
                changes["total"] = 1.0
                changes["completed"] = fraction
            prog.update(task, **changes)

        yield update


class StartupProgress:
    """Live progress of engine start-ups for ``profile`` and ``demo``: one row per running
    engine with the time since its launch and the stage it is in now (the runner's live
    events: ``launched`` before each engine starts, ``stage`` as its output shows a stage).

    Shown only when ``show`` (see ``wanted``); the row is transient and is taken down while a
    finished run's table is printed, so tables and progress never interleave. Engine output
    echoed to stderr meanwhile is printed above the row (rich redirects both streams while the
    row is up)."""

    def __init__(self, show: bool, runs: int = 1) -> None:
        self.show = show
        self.runs = runs
        self.launches = 0
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def launched(self, run: Run) -> None:
        """An engine is about to start for ``run`` (a ``Run`` with status running)."""
        if not self.show:
            return
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from coldscope.cli.common import console
        self.done()
        self.launches += 1
        what = f"run {self.launches}/{max(self.runs, self.launches)}" if self.runs > 1 else "run"
        cache: str = run.cache or run.cache_requested or ""
        if cache == "cold" and run.cache_requested == "warm":
            cache = "cold, fills the warm cache"
        self._progress = progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
            TextColumn("{task.fields[stage]}", markup=False), console=console(stderr=True),
            transient=True)
        progress.start()
        self._task = progress.add_task(f"{what} {run.id}" + (f" ({cache})" if cache else ""),
                                       stage=_stage_text(None, None))

    def stage(self, stage: str, seconds: float) -> None:
        """The running engine entered ``stage`` ``seconds`` after its launch."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, stage=_stage_text(stage, seconds))

    def done(self) -> None:
        """Take the row down (a run ended, or the command stops)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> StartupProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


def _stage_text(stage: str | None, seconds: float | None) -> str:
    from coldscope.campaign.progress import stage_text  # one wording for every live display

    return stage_text(stage, seconds)
