"""What a clock can resolve: the grid measured durations lie on, read from the values themselves.

A start-up timed on a log's clock carries that clock's resolution in every number: vLLM's
default log format stamps whole seconds, so a stage measured between two of its lines is a
whole number of seconds, wrong by up to a second either way. Two consumers need to know it:
calibration (a ratio of two such durations is only as good as the clock, ``prediction.calibrate``)
and comparison (an interval cannot be narrower than what the clock resolves, however alike the
runs, ``analysis.comparison``). Both read it here, from the values, because a duration does not
say which clock it came from and a stored run may mix sources.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

#: Clock grids a measured duration can lie on (seconds), coarsest first; a stage whose values
#: all lie on one of them was timed on that clock (vLLM's default log format has 1 s
#: timestamps; a mean of k such runs lies on a 1/k s grid). Finer than 10 ms is "exact".
CLOCK_GRIDS: Final = (1.0, 0.5, 0.25, 0.2, 0.1, 0.05, 0.02, 0.01)
#: The chance allowed of taking finely timed values for a coarse clock.
CLOCK_FALSE_ALARM: Final = 1e-3


def clock_resolution(values: Iterable[float]) -> float | None:
    """The coarsest of ``CLOCK_GRIDS`` every value lies on (seconds); None when finer, or when
    the values are too few to tell a clock from chance.

    Values timed to 10 ms land on a grid ``g`` by chance with probability ``0.01 / g`` each, so
    ``d`` distinct values all on it by chance: ``(0.01 / g) ** d``. A grid counts only where
    that is at most ``CLOCK_FALSE_ALARM`` (e.g. two distinct values for 1 s, three for 0.1 s);
    repeated values are one piece of evidence (four models whose tokenizer takes 0.25 s each
    say nothing about a 0.25 s clock)."""
    vals = {round(abs(v), 9) for v in values if v}
    for grid in CLOCK_GRIDS:
        if all(abs(v / grid - round(v / grid)) < 1e-6 * max(1.0, v / grid) for v in vals):
            if vals and (CLOCK_GRIDS[-1] / grid) ** len(vals) <= CLOCK_FALSE_ALARM:
                return grid
            return None  # on this grid, but it could be chance; finer grids say less
    return None
