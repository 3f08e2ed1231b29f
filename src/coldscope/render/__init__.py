"""Terminal rendering: records in, rich renderables out.

One contract: ``render(record)`` returns what a rich console prints for ``record`` (a ``Group``,
``Table`` or ``Text``), never a string to print or a list of lines; the CLI prints it through its
console (``coldscope.cli.common.show``). It is a ``functools.singledispatch`` function whose
implementations live in this package's modules, one per kind of record, each registered with
``@render.register`` when its module is imported:

- ``tables``: a ``Run`` (its timeline, or why it failed), a ``Comparison`` (``compare``) and a
  ``ReleasesResult`` (``releases``), with the other run tables (``runs``, ``show --env``);
- ``findings``: the findings table printed after a timeline;
- ``plan``: a ``PlanReport``; ``predict``: a ``FitSummary`` and a ``Prediction``;
  ``simulate``: a ``SimResult`` and a ``SweepResult``; ``campaign``: the campaign summary;
  ``tune``: what ``coldscope tune`` found.

Importing this package is cheap (no rich, no record module): ``render`` imports the module that
draws a record the first time such a record comes (``_DRAWN_BY``), so drawing a comparison never
loads the simulator. The renderers that take more than the record (``timeline_table`` without
sub-steps, ``runs_table`` at a width, the summary rows of a campaign) are plain functions of
their modules, with the same kind of result.
"""

from __future__ import annotations

import importlib
from functools import singledispatch
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Group, RenderableType

#: The module of this package that draws the records of each coldscope package: ``render``
#: imports it when such a record first comes, and its renderers register themselves.
#: ``tests/unit/render/test_dispatch.py`` checks this against what each module registers.
_DRAWN_BY = {
    "coldscope.core": "tables",
    "coldscope.analysis": "tables",
    "coldscope.launch": "tables",
    "coldscope.planning": "plan",
    "coldscope.prediction": "predict",
    "coldscope.sim": "simulate",
    "coldscope.tuning": "tune",
}


@singledispatch
def render(record: object) -> RenderableType:
    """``record`` as a rich renderable for the terminal.

    Raises ``TypeError`` for a record no module of this package draws.
    """
    package = ".".join(type(record).__module__.split(".")[:2])
    module = _DRAWN_BY.get(package)
    if module is not None:
        importlib.import_module(f"{__name__}.{module}")  # registers its renderers
        if render.dispatch(type(record)) is not _undrawn:
            return render(record)
    raise TypeError(f"no terminal rendering for a {type(record).__name__}")


_undrawn = render.dispatch(object)


def verbatim(text: str) -> Group:
    """``text`` printed line for line as it is, never wrapped or cut at the console's width
    (a line of figures that wrapped would no longer line up), cleaned of control sequences.

    In a ``Group``: ``Console.print`` joins a bare ``Text`` into a new one, dropping its
    ``no_wrap``. Printed with ``crop=False`` (``cli.common.show``) so a long line is not cut.
    """
    from rich.console import Group
    from rich.text import Text

    from coldscope.util.safeio import clean_text
    return Group(Text(clean_text(text), no_wrap=True, overflow="ignore"))


__all__ = ["render", "verbatim"]
