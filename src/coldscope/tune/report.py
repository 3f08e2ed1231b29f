"""What ``tune`` prints: the trial table, the skipped knobs, the winner as a ready command line
and environment, and the ``--json`` document (the shape the report's tune waterfall and
``plan --tuned`` read)."""

from __future__ import annotations

import shlex
from typing import Any

from coldscope.errors import ColdscopeError
from coldscope.tune.knob import apply_all
from coldscope.tune.search import Outcome


def best_command(spec, knobs: list[str]) -> tuple[list[str], dict[str, str]]:
    """The winner's command line and the environment it adds to the user's."""
    by = {k.name: k for k in spec.knobs}
    return apply_all([by[n] for n in knobs], list(spec.command), dict(spec.env))


def _run_json(store, run_id: str | None) -> dict | None:
    if store is None or run_id is None:
        return None
    try:
        run = store.run(run_id)
    except ColdscopeError:  # a run that is not in this store: the document still stands
        return {"id": run_id}
    return run.to_json()


def waterfall(spec, outcome: Outcome) -> list[dict]:
    """Baseline, each kept change, best: time to ready and stages, for the report."""
    rows = []
    base = next((r for r in outcome.rows if r.role == "baseline" and r.ok), None)
    by_run = {d["measurement"].get("run_id"): d["measurement"] for d in spec.done}
    if base is not None:
        m = by_run.get(base.run_id) or {}
        rows.append({"step": "baseline", "knobs": [], "time_to_ready_s": outcome.baseline_s,
                     "stages": m.get("stages") or {}, "run_id": base.run_id})
    for r in outcome.rows:
        if r.kept:
            m = by_run.get(r.run_id) or {}
            rows.append({"step": r.change, "knobs": r.knobs, "time_to_ready_s": r.time_to_ready_s,
                         "stages": m.get("stages") or {}, "run_id": r.run_id})
    rows.append({"step": "best", "knobs": outcome.best_knobs, "time_to_ready_s": outcome.best_s,
                 "stages": rows[-1]["stages"] if rows else {},
                 "run_id": outcome.best_runs[-1] if outcome.best_runs else None})
    return rows


def tune_json(spec, outcome: Outcome, store=None) -> dict[str, Any]:
    """``{"baseline", "best": {"argv", "env", "time_to_ready_s", "throughput_ratio", ...},
    "speedup", "trials", ...}``."""
    argv, env = best_command(spec, outcome.best_knobs)
    return {
        "session": spec.id,
        "baseline": _run_json(store, outcome.baseline_run) or {"id": outcome.baseline_run},
        "baseline_time_to_ready_s": outcome.baseline_s,
        "best": {
            "argv": argv, "env": env, "time_to_ready_s": outcome.best_s,
            "throughput_ratio": outcome.best_throughput_ratio, "knobs": outcome.best_knobs,
            "seeded_caches": outcome.best_seeded, "runs": outcome.best_runs,
        },
        "speedup": outcome.speedup,
        "spread": outcome.spread,
        "budget": outcome.budget,
        "used": outcome.used,
        "stopped": outcome.stopped,
        "trials": [r.model_dump(mode="json") for r in outcome.rows],
        "skipped": [s.model_dump(mode="json") for s in outcome.skipped],
        "waterfall": waterfall(spec, outcome),
    }


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{100 * (ratio - 1):+.0f} %"


def tune_tables(spec, outcome: Outcome, doc: dict) -> list:
    """Rich renderables, in printing order."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"tune {spec.id}: {outcome.used} of {outcome.budget} start-ups "
                    f"({outcome.stopped}); noise ±{100 * outcome.spread:.0f} %",
              title_justify="left", box=box.SIMPLE_HEAVY)
    for c in ("#", "role", "change", "caches", "ready s", "stage Δ s", "throughput Δ",
              "greedy", "kept", "why"):
        t.add_column(c, overflow="fold")
    for r in outcome.rows:
        deltas = sorted(r.stage_delta.items(), key=lambda kv: abs(kv[1]), reverse=True)[:3]
        t.add_row(
            str(r.trial + 1), r.role, r.change or "+".join(r.knobs) or "default", r.cache,
            f"{r.time_to_ready_s:.1f}" if r.time_to_ready_s is not None else "failed",
            ", ".join(f"{k} {v:+.1f}" for k, v in deltas),
            _pct(r.throughput_ratio),
            "" if r.greedy_match is None else ("same" if r.greedy_match
                                               else f"differs: {r.greedy_diff}"),
            {True: "yes", False: "no", None: ""}[r.kept],
            r.reason or "",
        )
    out: list = [t]
    if outcome.skipped:
        s = Table(title="not tried", title_justify="left", box=box.SIMPLE)
        s.add_column("knob")
        s.add_column("why")
        for k in outcome.skipped:
            s.add_row(k.knob, k.reason)
        out.append(s)
    best = doc["best"]
    lines = [f"best: {outcome.best_s:.1f} s to ready vs {outcome.baseline_s:.1f} s default cold "
             f"= {outcome.speedup:.2f}x faster"]
    if best["throughput_ratio"] is not None:
        lines.append(f"serving throughput {_pct(best['throughput_ratio'])} vs the baseline "
                     "(32 requests, 4 at a time)")
    lines.append("command: " + shlex.join(best["argv"]))
    env = {k: v for k, v in best["env"].items()}
    if env:
        lines.append("environment: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    if outcome.best_seeded:
        lines.append(f"needs its caches pre-seeded: coldscope bundle --tune {spec.id} -o "
                     "caches.tar.gz, then profile/tune --bundle caches.tar.gz")
    out.append(Text("\n".join(lines), style="bold"))
    return out
