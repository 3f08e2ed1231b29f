"""``plan --tuned TUNE.json``: the engine start-up figure and its measured savings from a tune
session's JSON (what ``coldscope tune --json`` prints), instead of the lesson's assumptions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coldscope.errors import ColdscopeError


def tuned_startup(path: str | Path) -> dict[str, Any]:
    """``{"startup_s", "baseline_s", "savings_s", "speedup", "stage_savings_s",
    "throughput_ratio", "knobs", "argv", "env", "session"}`` from a tune JSON file.
    ``startup_s`` is the winner's measured mean time to ready; ``stage_savings_s`` the
    baseline's minus the winner's seconds per stage (from the tune waterfall)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise ColdscopeError(f"no tune file at {p}") from None
    except (OSError, ValueError) as exc:
        raise ColdscopeError(f"{p} is not JSON ({exc.__class__.__name__})") from None
    best = doc.get("best") if isinstance(doc, dict) else None
    if not isinstance(best, dict) or not isinstance(best.get("time_to_ready_s"), int | float):
        raise ColdscopeError(f"{p} is not what `coldscope tune --json` prints (no best."
                             "time_to_ready_s)")
    base = doc.get("baseline_time_to_ready_s")
    if not isinstance(base, int | float):
        base = (doc.get("baseline") or {}).get("time_to_ready_s")
    if not isinstance(base, int | float) or base <= 0:
        raise ColdscopeError(f"{p} has no baseline time to ready")
    startup = float(best["time_to_ready_s"])
    stages: dict[str, float] = {}
    fall = doc.get("waterfall") or []
    if len(fall) >= 2:
        first, last = fall[0].get("stages") or {}, fall[-1].get("stages") or {}
        for k, v in first.items():
            w = last.get(k)
            if isinstance(v, int | float) and isinstance(w, int | float):
                stages[k] = round(v - w, 3)
    return {
        "startup_s": startup, "baseline_s": float(base), "savings_s": float(base) - startup,
        "speedup": float(base) / startup if startup > 0 else None,
        "stage_savings_s": stages, "throughput_ratio": best.get("throughput_ratio"),
        "knobs": list(best.get("knobs") or []), "argv": list(best.get("argv") or []),
        "env": dict(best.get("env") or {}), "session": doc.get("session"),
    }
