"""What ``tune`` prints: the trial table, the skipped knobs, the winner as a ready command line
and environment, and the ``--json`` document (the shape the report's tune waterfall and
``plan --tuned`` read)."""

from __future__ import annotations

import shlex
import statistics
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from coldscope.analysis.comparison import Comparison, Ratio, compare
from coldscope.engines.knob import apply_all
from coldscope.tuning.search import Baseline, Outcome, Skipped, ThroughputLimit, TrialRow
from coldscope.tuning.verify import ROUNDS
from coldscope.util.errors import ColdscopeError


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


#: Version of the ``tune --json`` document: 2 adds the warm baseline, the speed-ups against
#: both baselines with intervals from confirmation start-ups, and the winner's throughput interval.
TUNE_SCHEMA_VERSION: Final = 2


def waterfall(spec, outcome: Outcome) -> list[dict]:
    """Cold default, warm default, each kept change, best: time to ready and stages (each
    row's start-up that measured it), for the report."""
    rows = []
    by_run = {d["measurement"].get("run_id"): d["measurement"] for d in spec.done}

    def row(step: str, knobs: list[str], run_id: str | None, seconds: float | None) -> dict:
        m = by_run.get(run_id) or {}
        return {"step": step, "knobs": knobs, "time_to_ready_s": seconds,
                "stages": m.get("stages") or {}, "run_id": run_id}

    cold = next((r for r in outcome.rows if r.role == "baseline" and r.ok), None)
    if cold is not None:
        rows.append(row("baseline", [], cold.run_id, outcome.cold.time_to_ready_s))
    warm = next((r for r in outcome.rows if r.role == "warm" and r.ok), None)
    if warm is not None:
        rows.append(row("warm", warm.knobs, warm.run_id, outcome.warm.time_to_ready_s))
    for r in outcome.rows:
        if r.kept:
            rows.append(row(r.change or "+".join(r.knobs), r.knobs, r.run_id, r.time_to_ready_s))
    last = outcome.best_runs[-1] if outcome.best_runs else (
        outcome.best_selected_by[-1] if outcome.best_selected_by else None)
    best = row("best", outcome.best_knobs, last, outcome.best_s)
    if not best["stages"] and rows:
        best["stages"] = rows[-1]["stages"]
    rows.append(best)
    return rows


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VsBaseline(_Doc):
    """A ratio of means with its 95 % Fieller interval (``compare.ratio_interval``) and the
    values it rests on: a speed-up is ``mean(baseline) / mean(best)`` over times to ready, a
    throughput ratio ``mean(best) / mean(baseline)`` over tokens per second."""

    value: float | None
    low: float | None
    high: float | None
    baseline: list[float]
    best: list[float]
    method: str
    note: str | None = None


class Best(_Doc):
    """The winner: its ready command line and environment, its figures from the confirmation
    start-ups (``runs``; ``selected_by`` the trials that chose it) and the checks it passed."""

    argv: list[str]
    env: dict[str, str]
    knobs: list[str]
    seeded_caches: bool
    time_to_ready_s: float
    runs: list[str]
    confirmed: bool
    selected_by: list[str]
    cold_time_to_ready_s: float | None
    throughput_ratio: VsBaseline | None
    throughput_limit: ThroughputLimit | None
    greedy_match: bool | None
    output_change_allowed: bool


class Speedup(_Doc):
    vs_cold: VsBaseline = Field(description="vs a new node: every cold start-up of the default")
    vs_warm: VsBaseline | None = Field(description="vs running the default again: the warm "
                                                   "start-ups interleaved with the winner's")


class Baselines(_Doc):
    cold: Baseline
    warm: Baseline


class TuneResult(_Doc):
    """What ``coldscope tune --json`` prints (``coldscope schema tune``)."""

    schema_version: Literal[2] = TUNE_SCHEMA_VERSION
    session: str
    baselines: Baselines
    baseline: dict[str, Any] = Field(description="the first cold start-up, a stored run")
    best: Best
    speedup: Speedup
    comparison: Comparison | None = Field(
        None, description="the winner (b) against the warm default (a), per stage and sub-step, "
                          "over the confirmation start-ups: coldscope compare's core")
    spread: float = Field(description="relative run-to-run spread the search measured")
    budget: int
    used: int
    stopped: str
    notes: list[str]
    trials: list[TrialRow]
    skipped: list[Skipped]
    waterfall: list[dict[str, Any]]


def _vs(r: Ratio | None, *, best_is_num: bool) -> VsBaseline | None:
    if r is None:
        return None
    best, baseline = (r.num, r.den) if best_is_num else (r.den, r.num)
    return VsBaseline(value=r.value, low=r.low, high=r.high, baseline=baseline, best=best,
                      method=r.method, note=r.note)


def per_stage(outcome: Outcome, store) -> Comparison | None:
    """Where the winner's seconds come from: ``compare`` of the warm default's confirmation
    start-ups (a) with the winner's (b), read from the store (whole runs, so a stage the
    winner does not run, eager's torch_compile, counts as 0 s). None without a store, or
    when the winner is the warm default itself."""
    warm = [r.run_id for r in outcome.rows if r.phase == "confirm" and r.role == "warm"
            and r.ok and r.run_id]
    if store is None or not warm or not outcome.best_runs:
        return None
    try:
        a = [store.run(i) for i in warm]
        b = [store.run(i) for i in outcome.best_runs]
    except ColdscopeError:  # runs not in this store: the document stands without it
        return None
    return compare(a, b, a_info={"label": "the default, warm caches"},
                   b_info={"label": "+".join(outcome.best_knobs)})


def tune_result(spec, outcome: Outcome, store=None) -> TuneResult:
    """The typed ``tune --json`` document (``schema_version`` 2); docs/tune.md describes it."""
    argv, env = best_command(spec, outcome.best_knobs)
    first_cold = outcome.cold.runs[0] if outcome.cold.runs else None
    return TuneResult(
        session=spec.id,
        baselines=Baselines(cold=outcome.cold, warm=outcome.warm),
        baseline=_run_json(store, first_cold) or {"id": first_cold},
        best=Best(
            argv=argv, env=env, knobs=outcome.best_knobs, seeded_caches=outcome.best_seeded,
            time_to_ready_s=outcome.best_s, runs=outcome.best_runs,
            confirmed=outcome.best_confirmed, selected_by=outcome.best_selected_by,
            cold_time_to_ready_s=outcome.best_cold_s,
            throughput_ratio=_vs(outcome.throughput_ratio, best_is_num=True),
            throughput_limit=outcome.throughput_limit, greedy_match=outcome.greedy_match,
            output_change_allowed=outcome.output_change_allowed),
        speedup=Speedup(vs_cold=_vs(outcome.vs_cold, best_is_num=False),
                        vs_warm=_vs(outcome.vs_warm, best_is_num=False)),
        comparison=per_stage(outcome, store),
        spread=outcome.spread, budget=outcome.budget, used=outcome.used,
        stopped=outcome.stopped, notes=outcome.notes, trials=outcome.rows,
        skipped=outcome.skipped, waterfall=waterfall(spec, outcome),
    )


def tune_json(spec, outcome: Outcome, store=None) -> dict[str, Any]:
    """``tune_result`` as JSON-able data (what ``--json`` prints)."""
    return tune_result(spec, outcome, store).model_dump(mode="json")


def _times(r: Ratio | None) -> str:
    if r is None or r.value is None:
        return "not measured"
    iv = f" [{r.low:.2f}x, {r.high:.2f}x]" if r.low is not None and r.high is not None else \
        " (no interval: fewer than 2 start-ups a side)"
    return f"{r.value:.2f}x{iv}"


def headline(outcome: Outcome) -> list[str]:
    """The two answers first: against running the default again, and against a new node."""
    best = f"{outcome.best_s:.1f} s"
    lines = []
    if outcome.vs_warm is not None:
        lines.append(f"vs running the default again (warm caches, {len(outcome.vs_warm.num)} "
                     f"start-ups): {_times(outcome.vs_warm)} faster, "
                     f"{statistics.fmean(outcome.vs_warm.num):.1f} s -> {best}")
    new_node = "with its caches shipped (coldscope bundle)" if outcome.best_seeded else ""
    lines.append(f"vs a new node (default, cold caches, {len(outcome.vs_cold.num)} start-ups): "
                 f"{_times(outcome.vs_cold)} faster, {outcome.cold.time_to_ready_s:.1f} s -> "
                 f"{best} {new_node}".rstrip())
    if outcome.best_seeded and outcome.best_cold_s is not None:
        lines.append(f"  (the winner without its caches started in {outcome.best_cold_s:.1f} s, "
                     "one start-up)")
    how = (f"interleaved confirmation start-ups ({len(outcome.best_runs)} of the winner), "
           "not the trials that chose it" if outcome.best_confirmed
           else "the trials that chose the winner: no budget was left to confirm it")
    lines.append(f"95 % intervals (Fieller); the winner's figures come from {how}")
    return lines


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
    lines0 = headline(outcome)
    cmp = doc.get("comparison")
    if cmp:
        said = [f"{name} {row['delta']:+.1f} s [{row['low']:+.1f}, {row['high']:+.1f}]"
                for name, row in sorted(cmp["stages"].items(), key=lambda kv: kv[1]["delta"]
                                        if kv[1]["delta"] is not None else 0.0)
                if row["verdict"] != "unresolved"]
        lines0.append("where it comes from, vs the warm default (resolved stages): "
                      + ("; ".join(said) if said else "no stage resolved"))
    out: list = [Text("\n".join(lines0), style="bold"), t]
    if outcome.skipped:
        s = Table(title="not tried", title_justify="left", box=box.SIMPLE)
        s.add_column("knob")
        s.add_column("why")
        for k in outcome.skipped:
            s.add_row(k.knob, k.reason)
        out.append(s)
    best = doc["best"]
    lines = [f"best: {'+'.join(outcome.best_knobs) or 'the default'}"]
    tp = outcome.throughput_ratio
    if tp is not None and tp.value is not None:
        iv = f" [{100 * (tp.low - 1):+.0f} %, {100 * (tp.high - 1):+.0f} %]" \
            if tp.low is not None and tp.high is not None else " (no interval)"
        lines.append(f"serving throughput {_pct(tp.value)}{iv} vs the warm default "
                     f"({len(tp.num)} vs {len(tp.den)} start-ups, median of {ROUNDS} rounds each)")
    lim = outcome.throughput_limit
    if lim is not None:
        verdict = {True: "holds", False: "NOT shown to hold", None: "cannot be judged"}[lim.holds]
        lines.append(f"--max-throughput-loss {100 * lim.max_loss:.0f} %: {verdict} (judged on "
                     "the interval's low end)")
    if outcome.greedy_match is not None:
        lines.append("greedy output: " + ("the baseline's" if outcome.greedy_match else
                                          "DIFFERS from the baseline's" +
                                          (" (allowed by --allow-output-change)"
                                           if outcome.output_change_allowed else "")))
    lines.append("command: " + shlex.join(best["argv"]))
    env = {k: v for k, v in best["env"].items()}
    if env:
        lines.append("environment: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    if outcome.best_seeded:
        lines.append(f"needs its caches pre-seeded: coldscope bundle --tune {spec.id} -o "
                     "caches.tar.gz, then profile/tune --bundle caches.tar.gz")
    lines.extend(f"note: {n}" for n in outcome.notes)
    out.append(Text("\n".join(lines), style="bold"))
    return out
