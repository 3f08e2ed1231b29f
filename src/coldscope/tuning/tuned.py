"""``plan --tuned TUNE.json``: the engine start-up figure and its measured savings from a tune
session's JSON (what ``coldscope tune --json`` prints), instead of the lesson's assumptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

from coldscope.tuning.report import COLD_NEW_NODE, COLD_WARM_MACHINE, TUNE_SCHEMA_VERSION
from coldscope.util.errors import ColdscopeError


def tuned_startup(path: str | Path) -> dict[str, Any]:
    """``{"startup_s", "baseline_s", "savings_s", "speedup", "basis", "stage_savings_s",
    "throughput_ratio", "knobs", "argv", "env", "standby_launcher", "session"}`` from a tune JSON
    file (``schema_version`` 2).

    A plan is about scaling up, so it takes the **new-node** figures: ``baseline_s`` is the
    default command started cold (a fresh node has no caches) and ``startup_s`` the winner's
    mean time to ready over its confirmation start-ups, which ran on seeded caches when the
    winner needs them, i.e. with its caches shipped in the image (``coldscope bundle``);
    ``basis`` says which, and whether the cold start-ups were a new node's (the page cache
    evicted, ``baselines.cold_state``) or only empty engine caches on a warm machine (a file
    without ``cold_state`` is from a tune that evicted nothing). ``stage_savings_s`` is the
    cold baseline's minus the winner's seconds per stage (from the tune waterfall).
    ``standby_launcher``: the winner starts through a standby launcher, so its figure holds on
    a node whose launcher is already up (a new node pays the launcher's imports first)."""
    from coldscope.util.safeio import loads_json, read_text
    p = Path(path)
    if not p.exists():
        raise ColdscopeError(f"no tune file at {p}")
    doc = loads_json(read_text(p, what="tune file"), str(p))
    if not isinstance(doc, dict) or doc.get("schema_version") != TUNE_SCHEMA_VERSION:
        raise ColdscopeError(f"{p} is not a tune file of schema {TUNE_SCHEMA_VERSION} (what "
                             "`coldscope tune --json` prints now); re-run the tune")
    best = doc.get("best")
    if not isinstance(best, dict) or not _seconds(best.get("time_to_ready_s")) \
            or best["time_to_ready_s"] <= 0:
        raise ColdscopeError(f"{p} is not what `coldscope tune --json` prints (no best."
                             "time_to_ready_s)")
    cold = (doc.get("baselines") or {}).get("cold") if isinstance(doc.get("baselines"),
                                                                   dict) else None
    base = cold.get("time_to_ready_s") if isinstance(cold, dict) else None
    if not _seconds(base) or base <= 0:
        raise ColdscopeError(f"{p} has no cold baseline time to ready")
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
    tp = best.get("throughput_ratio")
    tp_value = tp.get("value") if isinstance(tp, dict) else None
    knobs, argv, env = best.get("knobs"), best.get("argv"), best.get("env")
    seeded = best.get("seeded_caches") is True
    launcher = best.get("standby_launcher") is True
    said = doc["baselines"].get("cold_state")  # a dict: the cold baseline was read from it
    state = said if isinstance(said, str) and said else COLD_WARM_MACHINE
    started = "a new node: the default started cold" if state == COLD_NEW_NODE else \
        f"the default started on empty engine caches ({state})"
    return {
        "startup_s": startup, "baseline_s": float(base), "savings_s": float(base) - startup,
        "speedup": float(base) / startup if startup > 0 else None,
        "basis": f"{started} vs the winner"
                 + (" with its caches shipped in the image (coldscope bundle)" if seeded else "")
                 + (" through a standby launcher already running on the node" if launcher
                    else ""),
        "stage_savings_s": stages,
        "throughput_ratio": _number(tp_value),
        "knobs": [str(k) for k in knobs] if isinstance(knobs, list) else [],
        "argv": [str(a) for a in argv] if isinstance(argv, list) else [],
        "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
        "standby_launcher": launcher,
        "session": session if isinstance(session := doc.get("session"), str) else None,
    }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and 0 <= value <= 1e6 else None


#: Longest time to ready a tune file may report, in seconds (a day): beyond it, not a start-up.
MAX_SECONDS = 86_400.0


def _seconds(value: Any) -> TypeGuard[float]:
    """True for a number of seconds in [0, MAX_SECONDS] (JSON numbers are already finite)."""
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and 0 <= value <= MAX_SECONDS
