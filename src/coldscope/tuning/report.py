"""The result of a tune session (``TuneResult``): the winner as a ready command line and
environment, its speed-ups against both baselines with their intervals, every trial, the
skipped knobs and the waterfall; what ``tune --json`` prints, what the report's tune waterfall
and ``plan --tuned`` read, and what ``coldscope.render.tune`` draws for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import Field

from coldscope.analysis.comparison import Comparison, Ratio, compare
from coldscope.engines.knobs import apply_all
from coldscope.tuning.search import (
    Baseline,
    Outcome,
    Skipped,
    ThroughputLimit,
    TrialRow,
    TuneRecord,
)
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.store.db import Store
    from coldscope.tuning.session import SessionSpec


def best_command(spec: SessionSpec, knobs: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The winner's command line and the environment it adds to the user's."""
    by = {k.name: k for k in spec.knobs}
    return apply_all([by[n] for n in knobs], list(spec.command), dict(spec.env))


def _run_json(store: Store | None, run_id: str | None) -> dict[str, Any] | None:
    if store is None or run_id is None:
        return None
    try:
        run = store.run(run_id)
    except ColdscopeError:  # a run that is not in this store: the document still stands
        return {"id": run_id}
    return run.to_json()


#: Version of the ``tune --json`` document: 2 adds the warm baseline, the speed-ups against
#: both baselines with intervals from confirmation start-ups, and the winner's throughput interval
#: (``baselines.cold_state`` was added within 2: readers that do not know it lose nothing).
TUNE_SCHEMA_VERSION: Final = 2


class WaterfallStep(TuneRecord):
    """One step of the tune waterfall: ``baseline`` (the cold default), ``warm``, each kept
    change (named by the knob it added), ``best``; the knobs on by then, the step's time to
    ready (seconds, the mean its search measured) and the stages (seconds) of the start-up
    ``run_id`` that measured it."""

    step: str
    knobs: list[str]
    time_to_ready_s: float | None
    stages: dict[str, float | None]
    run_id: str | None


def waterfall(spec: SessionSpec, outcome: Outcome) -> list[WaterfallStep]:
    """Cold default, warm default, each kept change, best: time to ready and stages (each
    row's start-up that measured it), for the report."""
    rows: list[WaterfallStep] = []
    stages = {t.measurement.run_id: t.measurement.stages for t in spec.done}

    def row(step: str, knobs: list[str], run_id: str | None,
            seconds: float | None) -> WaterfallStep:
        return WaterfallStep(step=step, knobs=knobs, time_to_ready_s=seconds,
                             stages=stages.get(run_id) or {}, run_id=run_id)

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
    if not best.stages and rows:  # no start-up of the best was measured: its last step's
        best = best.evolve(stages=rows[-1].stages)
    rows.append(best)
    return rows


class VsBaseline(TuneRecord):
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


class Best(TuneRecord):
    """The winner: its ready command line and environment, its figures from the confirmation
    start-ups (``runs``; ``selected_by`` the trials that chose it) and the checks it passed."""

    argv: list[str]
    env: dict[str, str]
    knobs: list[str]
    seeded_caches: bool
    standby_launcher: bool = Field(False, description="the winner starts its engine through a "
                                   "standby launcher (a launcher knob): its figures hold on a "
                                   "node whose launcher is running, not from argv alone")
    time_to_ready_s: float
    runs: list[str]
    confirmed: bool
    selected_by: list[str]
    cold_time_to_ready_s: float | None
    throughput_ratio: VsBaseline | None
    throughput_limit: ThroughputLimit | None
    greedy_match: bool | None
    output_change_allowed: bool


class Speedup(TuneRecord):
    """The winner's speed-up against the two start-ups a user has without coldscope."""

    vs_cold: VsBaseline = Field(description="vs every cold start-up of the default: a new node "
                                            "when baselines.cold_state says the page cache "
                                            "was evicted (cold_label)")
    vs_warm: VsBaseline | None = Field(description="vs running the default again: the warm "
                                                   "start-ups interleaved with the winner's")


#: ``cold_state`` of cold start-ups that had a new node's page cache: the model's and the
#: engine's Python files evicted just before each (``tune --cold-evict``, the default).
COLD_NEW_NODE: Final = "page cache evicted: model, engine python"
#: ``cold_state`` of cold start-ups that only had empty engine caches (``--no-cold-evict``, or
#: a session of a tune that evicted nothing): the machine's page cache was as warm as it was.
COLD_WARM_MACHINE: Final = "engine caches empty, machine warm"


def cold_state(spec: SessionSpec, runs: Sequence[str]) -> str:
    """The state the cold default's start-ups (``runs``) had, from what each measurement says
    was evicted before it: ``COLD_NEW_NODE``, ``COLD_WARM_MACHINE``, ``page cache evicted:
    engine python`` (a model that is not a local directory), or ``mixed: ...`` when they
    differ (a session resumed across the change)."""
    evicted = {t.measurement.run_id: tuple(t.measurement.evicted) for t in spec.done}
    states = {evicted.get(r, ()) for r in runs}
    if len(states) > 1:
        n = sum(1 for r in runs if evicted.get(r))
        return (f"mixed: the page cache was evicted before {n} of {len(runs)} cold "
                "start-ups")
    only = next(iter(states), ())
    return "page cache evicted: " + ", ".join(only) if only else COLD_WARM_MACHINE


def cold_label(state: str | None) -> str:
    """What the speed-up against the cold default is against, in words: "vs a new node" only
    when the cold start-ups had a new node's page cache (``COLD_NEW_NODE``); otherwise what
    they had (None: not known, e.g. a report without the session file)."""
    if state == COLD_NEW_NODE:
        return "vs a new node"
    if state == COLD_WARM_MACHINE:
        return "vs empty engine caches (warm machine)"
    return "vs empty engine caches" + (f" ({state})" if state else "")


class Baselines(TuneRecord):
    """The default command's start-ups, cold (empty caches; a new node when ``cold_state`` is
    ``COLD_NEW_NODE``) and warm (run it again)."""

    cold: Baseline
    warm: Baseline
    cold_state: str = Field(description=f"what the cold start-ups had: {COLD_NEW_NODE!r}, "
                                        f"{COLD_WARM_MACHINE!r}, or what else (cold_state)")


class TuneResult(TuneRecord):
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
    waterfall: list[WaterfallStep]

    def to_json(self) -> dict[str, Any]:
        """What ``tune --json`` prints (``coldscope schema tune``)."""
        return self.model_dump(mode="json")


def _vs(r: Ratio, *, best_is_num: bool) -> VsBaseline:
    best, baseline = (r.num, r.den) if best_is_num else (r.den, r.num)
    return VsBaseline(value=r.value, low=r.low, high=r.high, baseline=baseline, best=best,
                      method=r.method, note=r.note)


def warm_reference(outcome: Outcome) -> list[str]:
    """The warm default's start-ups the winner's ``vs_warm`` and throughput ratio rest on:
    those interleaved with the winner's in the confirmation, else (the winner is the warm
    default, or no confirmation ran) the search's."""
    warm = [r for r in outcome.rows if r.role == "warm" and r.ok and r.run_id]
    confirm = [r.run_id for r in warm if r.phase == "confirm" and r.run_id]
    return confirm or [r.run_id for r in warm if r.run_id]


def per_stage(outcome: Outcome, store: Store | None) -> Comparison | None:
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


def tune_result(spec: SessionSpec, outcome: Outcome, store: Store | None = None) -> TuneResult:
    """The typed ``tune --json`` document (``schema_version`` 2); docs/tune.md describes it."""
    argv, env = best_command(spec, outcome.best_knobs)
    first_cold = outcome.cold.runs[0] if outcome.cold.runs else None
    return TuneResult(
        session=spec.id,
        baselines=Baselines(cold=outcome.cold, warm=outcome.warm,
                            cold_state=cold_state(spec, outcome.cold.runs)),
        baseline=_run_json(store, first_cold) or {"id": first_cold},
        best=Best(
            argv=argv, env=env, knobs=outcome.best_knobs, seeded_caches=outcome.best_seeded,
            standby_launcher=any(k.launcher for k in spec.knobs if k.name in outcome.best_knobs),
            time_to_ready_s=outcome.best_s, runs=outcome.best_runs,
            confirmed=outcome.best_confirmed, selected_by=outcome.best_selected_by,
            cold_time_to_ready_s=outcome.best_cold_s,
            throughput_ratio=_vs(outcome.throughput_ratio, best_is_num=True)
            if outcome.throughput_ratio is not None else None,
            throughput_limit=outcome.throughput_limit, greedy_match=outcome.greedy_match,
            output_change_allowed=outcome.output_change_allowed),
        speedup=Speedup(vs_cold=_vs(outcome.vs_cold, best_is_num=False),
                        vs_warm=_vs(outcome.vs_warm, best_is_num=False)
                        if outcome.vs_warm is not None else None),
        comparison=per_stage(outcome, store),
        spread=outcome.spread, budget=outcome.budget, used=outcome.used,
        stopped=outcome.stopped, notes=outcome.notes, trials=outcome.rows,
        skipped=outcome.skipped, waterfall=waterfall(spec, outcome),
    )
