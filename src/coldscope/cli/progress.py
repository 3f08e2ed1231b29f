"""A progress bar for long commands, shown on a terminal only.

Never with ``--json`` and never when stdout or stderr is piped: a script reading the output
must see exactly what it would see without a terminal. The bar goes to stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def wanted(as_json: bool) -> bool:
    """True when a bar may be drawn: a terminal on both streams and no JSON asked for."""
    return not as_json and sys.stdout.isatty() and sys.stderr.isatty()


@contextmanager
def bar(description: str, show: bool) -> Iterator[Callable[..., None]]:
    """Yield ``update(fraction=None, description=None)``; a no-op when ``show`` is false.

    ``fraction`` in 0..1 moves the bar; None leaves it pulsing (work of unknown length).
    """
    if not show:
        yield lambda *args, **kwargs: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task(description, total=None)

        def update(fraction: float | None = None, description: str | None = None) -> None:
            changes: dict = {}
            if description is not None:
                changes["description"] = description
            if fraction is not None:
                changes["total"] = 1.0
                changes["completed"] = fraction
            prog.update(task, **changes)

        yield update
