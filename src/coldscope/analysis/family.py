"""Many comparisons read together: Holm's step-down, so that a summary's verdicts hold as a set.

Each of ``coldscope.analysis.comparison``'s rows is right 95 % of the time on its own. A summary
that draws verdicts from K rows at once (``releases``: six pairs of releases, each with its
stages) calls some difference resolved by chance far more often than 5 %: among 20 rows where
nothing differs, about one. Holm's step-down (Holm 1979) keeps the chance of *any* false verdict
in the family at ``alpha`` whatever the rows' dependence, and is never less powerful than
Bonferroni:

    with m hypotheses left, test at level alpha / m; reject every one that passes; repeat
    with the rest; stop when none passes.

In p-value terms: sort p ascending, reject H(1) .. H(j-1) where j is the first with
``p(j) > alpha / (m - j + 1)``. Rejecting every remaining one that passes at once is the same
rule (thresholds only loosen as m shrinks, so each one passing now would pass in its turn).

A comparison here is "passes at level a" when its interval at confidence ``1 - a`` lies on one
side of 0 (for Welch's interval, exactly when its p-value is below ``a``), so the rule runs on
intervals, and whatever else a row's verdict requires (the clock floor, the practical size)
holds at every level too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Final, TypeVar

#: The family-wise error rate Holm's step-down keeps: the chance that any verdict of a family
#: is wrong (the complement of the rows' 95 %).
FAMILY_ALPHA: Final = 0.05

K = TypeVar("K", bound=Hashable)


def holm(keys: Sequence[K], passes_at: Callable[[float], Collection[K]],
         alpha: float = FAMILY_ALPHA) -> set[K]:
    """The comparisons (of ``keys``, the whole family) that Holm's step-down rejects at
    family-wise level ``alpha``.

    ``passes_at(level)``: the keys whose test rejects at ``level`` on its own (for an interval:
    its ``1 - level`` interval excludes 0); it must be monotone (what passes at a level passes
    at any larger one), as a p-value threshold is. Called once per step, with the level for the
    comparisons still left (``alpha / m``)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    left = set(keys)
    rejected: set[K] = set()
    while left:
        passing = left & set(passes_at(alpha / len(left)))
        if not passing:
            break
        rejected |= passing
        left -= passing
    return rejected

