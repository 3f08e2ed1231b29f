"""A campaign's results per condition: pure functions of stored runs."""

from __future__ import annotations

import statistics
from typing import Any

from coldscope.core.records import Run
from coldscope.core.stages import STAGES


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per condition (model, engine, flags, cache, concurrency) over the measured runs:
    counts, and medians in seconds of time to ready, first token and each stage (None when no
    successful run reports it). Priming runs are left out: they are cold starts made only to
    fill the warm cache."""
    groups: dict[tuple[str | None, str | None, str | None, str | None, int], list[Run]] = {}
    for r in runs:
        c = r.campaign
        if c is None or c.role != "measure":
            continue
        key = (c.model, c.engine, c.flags, c.cache, c.concurrency or 1)
        groups.setdefault(key, []).append(r)
    rows: list[dict[str, Any]] = []
    for (model, engine, flags, cache, conc), group in sorted(groups.items()):
        ok = [r for r in group if r.status == "ok"]
        row: dict[str, Any] = {"model": model, "engine": engine, "flags": flags, "cache": cache,
               "concurrency": conc, "ok": len(ok), "failed": len(group) - len(ok),
               "time_to_ready_s": _median([r.time_to_ready_s for r in ok
                                           if r.time_to_ready_s is not None]),
               "first_token_s": _median([r.first_token_s for r in ok
                                         if r.first_token_s is not None])}
        row["stages"] = {s: _median([v for r in ok if (v := r.stages.get(s)) is not None])
                         for s in STAGES}
        rows.append(row)
    return rows
