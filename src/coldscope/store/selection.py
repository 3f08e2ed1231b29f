"""Choosing stored runs the same way everywhere (``report``, ``export``): by cache state, label
or id prefix, and by model. Pure functions of ``coldscope.core.records.Run``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coldscope.core.records import Run


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


def describe(selectors: Sequence[str] = (), model: str | None = None) -> str:
    """The filters as the user typed them, for "no runs match ..." messages."""
    parts = ([f"--runs {','.join(selectors)}"] if selectors else []) + (
        [f"--model {model}"] if model else [])
    return ", ".join(parts) or "the store"
