"""Choosing stored runs the same way everywhere (``report``, ``export``): by cache state, label
or id prefix, and by model. Pure functions of ``coldscope.core.records.Run``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coldscope.core.records import Run
from coldscope.util.errors import ColdscopeError


def parse_selectors(text: str | None) -> list[str]:
    """``--runs cold,warm`` -> ``["cold", "warm"]`` (blanks dropped)."""
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def select_runs(runs: Iterable[Run], selectors: Sequence[str] = (),
                model: str | None = None) -> list[Run]:
    """Runs matching any of ``selectors`` (a cache state, a label, or a run id or id prefix)
    and ``model`` (a model name, or a path the run's model path ends with)."""
    out = []
    for r in runs:
        if selectors and not any(sel in (r.cache, r.label) or r.id.startswith(sel)
                                 for sel in selectors):
            continue
        if model:
            path = (r.model.path or "").rstrip("/")
            if model != r.model.name and not (path and path.endswith(model.rstrip("/"))):
                continue
        out.append(r)
    return out


def two_sides(runs: Iterable[Run], a: str, b: str) -> tuple[list[Run], list[Run]]:
    """The stored runs ``compare --runs-a A --runs-b B`` compares: each side's selectors (as
    ``select_runs`` reads them), runs still running left out. A side that names or matches
    nothing, or a run that falls on both sides, is an error: a comparison of a set with itself
    would report a difference of zero with a confidence it does not have."""
    every = list(runs)
    sides = []
    for side, text in (("a", a), ("b", b)):
        selectors = parse_selectors(text)
        if not selectors:
            raise ColdscopeError(f"--runs-{side} names no runs")
        chosen = [r for r in select_runs(every, selectors) if r.status != "running"]
        if not chosen:
            raise ColdscopeError(f"no stored runs match --runs-{side} {text}")
        sides.append(chosen)
    overlap = {r.id for r in sides[0]} & {r.id for r in sides[1]}
    if overlap:
        raise ColdscopeError(f"{len(overlap)} run(s) match both sides (first: "
                             f"{sorted(overlap)[0]}); choose disjoint runs")
    return sides[0], sides[1]


def describe(selectors: Sequence[str] = (), model: str | None = None) -> str:
    """The filters as the user typed them, for "no runs match ..." messages."""
    parts = ([f"--runs {','.join(selectors)}"] if selectors else []) + (
        [f"--model {model}"] if model else [])
    return ", ".join(parts) or "the store"
