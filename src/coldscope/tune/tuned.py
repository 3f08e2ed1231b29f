"""``plan --tuned TUNE.json``: the engine start-up figure and its measured savings from a tune
session's JSON (what ``coldscope tune --json`` prints), instead of the lesson's assumptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coldscope.errors import ColdscopeError


def tuned_startup(path: str | Path) -> dict[str, Any]:
    """``{"startup_s", "baseline_s", "savings_s", "speedup", "stage_savings_s",
    "throughput_ratio", "knobs", "argv", "env", "session"}`` from a tune JSON file.
    ``startup_s`` is the winner's measured mean time to ready; ``stage_savings_s`` the
    baseline's minus the winner's seconds per stage (from the tune waterfall)."""
    from coldscope.safeio import loads_json, read_text

    p = Path(path)
    if not p.exists():
        raise ColdscopeError(f"no tune file at {p}")
    doc = loads_json(read_text(p, what="tune file"), str(p))
    best = doc.get("best") if isinstance(doc, dict) else None
    if not isinstance(best, dict) or not _seconds(best.get("time_to_ready_s")) \
            or best["time_to_ready_s"] <= 0:
        raise ColdscopeError(f"{p} is not what `coldscope tune --json` prints (no best."
                             "time_to_ready_s)")
    base = doc.get("baseline_time_to_ready_s")
    if not _seconds(base):
        baseline = doc.get("baseline")
        base = baseline.get("time_to_ready_s") if isinstance(baseline, dict) else None
    if not _seconds(base) or base <= 0:
        raise ColdscopeError(f"{p} has no baseline time to ready")
    startup = float(best["time_to_ready_s"])
    stages: dict[str, float] = {}
    fall = doc.get("waterfall")
    if isinstance(fall, list) and len(fall) >= 2 and all(isinstance(f, dict) for f in fall):
        first, last = fall[0].get("stages"), fall[-1].get("stages")
        if isinstance(first, dict) and isinstance(last, dict):
            for k, v in first.items():
                w = last.get(k)
                if _seconds(v) and _seconds(w):
                    stages[k] = round(v - w, 3)
    knobs, argv, env = best.get("knobs"), best.get("argv"), best.get("env")
    return {
        "startup_s": startup, "baseline_s": float(base), "savings_s": float(base) - startup,
        "speedup": float(base) / startup if startup > 0 else None,
        "stage_savings_s": stages,
        "throughput_ratio": ratio if isinstance(ratio := best.get("throughput_ratio"), int | float)
        and not isinstance(ratio, bool) and 0 <= ratio <= 1e6 else None,
        "knobs": [str(k) for k in knobs] if isinstance(knobs, list) else [],
        "argv": [str(a) for a in argv] if isinstance(argv, list) else [],
        "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
        "session": session if isinstance(session := doc.get("session"), str) else None,
    }


#: Longest time to ready a tune file may report, in seconds (a day): beyond it, not a start-up.
MAX_SECONDS = 86_400.0


def _seconds(value: Any) -> bool:
    """True for a number of seconds in [0, MAX_SECONDS] (JSON numbers are already finite)."""
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and 0 <= value <= MAX_SECONDS
