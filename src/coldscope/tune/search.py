"""The tune search: pure, deterministic given the measurements.

It measures the baseline (the command as given, cold caches), then tries one knob at a time on
top of the best configuration so far (the incumbent): first what targets the incumbent's biggest
stage and what its findings point at. A knob is kept only when it saves more than the noise:
a gain within twice the measured spread is measured again and kept only if the mean still beats
the spread, or, for a knob free at serving time, if its own stage's mean gain beats twice that
stage's share of the spread while the total is not worse. Kept knobs accumulate, so the
incumbent is always the combination of every kept change. A trial of a knob that changes what
runs at serving time (eager mode, compile mode, multiprocessing) whose serving throughput falls
below ``1 - max_throughput_loss`` of the baseline's is rejected; knobs that only change where
caches come from are not held to it. The search stops when the start-up budget is spent or
nothing is left to try; leftover budget re-measures the winner.

Knobs that need seeded caches (the pre-seeded image) get the caches of an earlier start-up of
exactly the same configuration: the engine keys its compile cache by its flags and environment,
so caches from another configuration would miss. When none exists yet, the search first starts
that configuration cold ("prime"), which is also its cold measurement.

``measure(request) -> Measurement`` does the start-ups; the session replays stored measurements
through it on ``--resume``, which is why everything here must depend only on them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coldscope.errors import ColdscopeError
from coldscope.tune.knob import Knob
from coldscope.tune.verify import first_difference

#: Relative run-to-run spread assumed until two start-ups of one configuration measure it.
PRIOR_SPREAD = 0.10
#: How many measured pairs the prior counts for.
PRIOR_WEIGHT = 1.0
#: The measured spread is never taken below this (two lucky runs are not a noiseless machine).
MIN_SPREAD = 0.02
#: Smallest gain in a knob's own stage (seconds) that can keep it when the total is noisy.
MIN_STAGE_GAIN_S = 1.0
#: Discount on the score of knobs that cost serving speed, so that free ones are tried first.
TRADEOFF_DISCOUNT = 0.8

Role = Literal["baseline", "trial", "repeat", "prime", "confirm"]


class TrialRequest(BaseModel):
    """One start-up the search asks for. ``knobs`` are applied in order to the user's command;
    ``seeded`` means start from the caches the last start-up of the same configuration
    (``cache_key``) left; ``change`` is the knob under test."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    role: Role
    knobs: tuple[str, ...] = ()
    change: str | None = None
    seeded: bool = False
    cache_key: str


class Measurement(BaseModel):
    """What one start-up gave. ``throughput`` is output tokens per second under the fixed
    serving load; ``greedy`` the text of the fixed greedy prompt; ``findings`` the run's
    ``[{"id", "seconds_at_stake", ...}]``."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    run_id: str | None = None
    reason: str | None = None
    time_to_ready_s: float | None = None
    stages: dict[str, float | None] = Field(default_factory=dict)
    findings: list[dict] = Field(default_factory=list)
    throughput: float | None = None
    greedy: str | None = None


class TrialRow(BaseModel):
    """One line of the tune table (and of ``--json``'s ``trials``)."""

    model_config = ConfigDict(extra="forbid")

    trial: int
    role: Role
    change: str | None
    knobs: list[str]
    cache: Literal["cold", "seeded"]
    run_id: str | None
    ok: bool
    time_to_ready_s: float | None
    stage_delta: dict[str, float] = Field(default_factory=dict)
    throughput_ratio: float | None = None
    greedy_match: bool | None = None
    greedy_diff: str | None = None
    kept: bool | None = None
    reason: str | None = None


class Skipped(BaseModel):
    model_config = ConfigDict(extra="forbid")

    knob: str
    reason: str


class Outcome(BaseModel):
    """The search's result: the rows, the winner's knobs and its mean time to ready."""

    model_config = ConfigDict(extra="forbid")

    baseline_s: float
    baseline_run: str | None
    best_knobs: list[str]
    best_s: float
    best_runs: list[str]
    best_throughput_ratio: float | None
    best_seeded: bool
    speedup: float
    spread: float
    used: int
    budget: int
    rows: list[TrialRow]
    skipped: list[Skipped]
    stopped: str


def cache_key(knobs: Sequence[str], catalogue: dict[str, Knob]) -> str:
    """Identity of a configuration for its caches: the knobs that change the command line or
    environment (seed-only knobs do not), in a fixed order."""
    parts = sorted(k for k in knobs if catalogue[k].env or catalogue[k].add_args
                   or catalogue[k].remove_args)
    return "+".join(parts) or "default"


def _mean(xs: Sequence[float]) -> float:
    return statistics.fmean(xs)


class _Config:
    def __init__(self, knobs: tuple[str, ...]) -> None:
        self.knobs = knobs
        self.times: list[float] = []
        self.runs: list[str] = []
        self.last: Measurement | None = None
        self.throughputs: list[float] = []
        self.stage_samples: list[dict[str, float | None]] = []

    @property
    def time(self) -> float:
        return _mean(self.times)

    def stage(self, name: str) -> float:
        values = [s.get(name) or 0.0 for s in self.stage_samples]
        return _mean(values) if values else 0.0

    @property
    def throughput(self) -> float | None:
        return _mean(self.throughputs) if self.throughputs else None


class BudgetSpent(Exception):
    pass


class Search:
    """One tune search. ``run()`` returns the ``Outcome``; ``measure`` is called once per
    start-up, in a deterministic order."""

    def __init__(self, knobs: Sequence[Knob], measure: Callable[[TrialRequest], Measurement], *,
                 budget: int, max_throughput_loss: float | None = None,
                 baseline_repeats: int | None = None, prior_spread: float = PRIOR_SPREAD,
                 seeded_baseline: bool = False) -> None:
        if budget < 1:
            raise ColdscopeError("--budget must be at least 1 start-up")
        self.catalogue = {k.name: k for k in knobs}
        self.measure = measure
        self.budget = budget
        self.max_loss = max_throughput_loss
        self.baseline_repeats = baseline_repeats if baseline_repeats is not None else (
            2 if budget >= 8 else 1)
        self.prior_spread = prior_spread
        self.seeded_baseline = seeded_baseline
        self.used = 0
        self.rows: list[TrialRow] = []
        self.skipped: list[Skipped] = []
        self.pairs: list[float] = []  # relative spreads of repeated configurations
        self.primed: set[str] = set()  # cache keys with caches from an earlier start-up
        self.base_throughput: float | None = None
        self.base_greedy: str | None = None

    # -- bookkeeping ----------------------------------------------------------------------

    @property
    def spread(self) -> float:
        """Relative run-to-run spread (``|a - b| / mean`` of two start-ups of one configuration):
        the measured pairs' mean, shrunk towards the prior as if the prior were ``PRIOR_WEIGHT``
        pairs, since one lucky pair is a poor estimate and would keep noise as a gain."""
        total = sum(self.pairs) + PRIOR_WEIGHT * self.prior_spread
        return max(MIN_SPREAD, total / (len(self.pairs) + PRIOR_WEIGHT))

    def _start(self, role: Role, knobs: tuple[str, ...], change: str | None,
               seeded: bool, ref: _Config | None) -> Measurement:
        if self.used >= self.budget:
            raise BudgetSpent
        key = cache_key(knobs, self.catalogue)
        req = TrialRequest(index=self.used, role=role, knobs=knobs, change=change,
                           seeded=seeded, cache_key=key)
        self.used += 1
        m = self.measure(req)
        self.primed.add(key)  # a start-up (even a failed one) leaves its caches
        ratio = None
        if m.ok and m.throughput and self.base_throughput:
            ratio = m.throughput / self.base_throughput
        delta = {}
        if m.ok and ref is not None and ref.last is not None:
            for stage, v in m.stages.items():
                r = ref.last.stages.get(stage)
                if v is not None and r is not None and abs(v - r) >= 0.05:
                    delta[stage] = round(v - r, 2)
        self.rows.append(TrialRow(
            trial=req.index, role=role, change=change, knobs=list(knobs),
            cache="seeded" if seeded else "cold", run_id=m.run_id, ok=m.ok,
            time_to_ready_s=m.time_to_ready_s, stage_delta=delta, throughput_ratio=ratio,
            greedy_match=(m.greedy == self.base_greedy) if m.ok and m.greedy is not None
            and self.base_greedy is not None else None,
            greedy_diff=first_difference(self.base_greedy, m.greedy) if m.ok else None,
            reason=m.reason if not m.ok else None,
        ))
        return m

    def _needs_seed(self, knobs: tuple[str, ...]) -> bool:
        return any(self.catalogue[k].seed for k in knobs)

    def _measure_config(self, cfg: _Config, role: Role, change: str | None,
                        ref: _Config | None) -> Measurement:
        """Start ``cfg`` once (priming it first when it needs caches nobody left yet)."""
        seeded = self._needs_seed(cfg.knobs)
        if seeded and cache_key(cfg.knobs, self.catalogue) not in self.primed:
            prime = self._start("prime", cfg.knobs, change, False, ref)
            if not prime.ok:
                return prime
        m = self._start(role, cfg.knobs, change, seeded, ref)
        if m.ok and m.time_to_ready_s is not None:
            cfg.times.append(m.time_to_ready_s)
            cfg.runs.append(m.run_id or "")
            cfg.last = m
            cfg.stage_samples.append(dict(m.stages))
            if m.throughput:
                cfg.throughputs.append(m.throughput)
        return m

    def _note_pair(self, cfg: _Config) -> None:
        if len(cfg.times) >= 2:
            a, b = cfg.times[-2], cfg.times[-1]
            self.pairs.append(abs(a - b) / _mean((a, b)))

    # -- choosing -------------------------------------------------------------------------

    def _why_not(self, k: Knob, kept: tuple[str, ...]) -> str | None:
        if not k.available:
            return k.reason or "not available"
        for name in kept:
            other = self.catalogue[name]
            if k.requires_compile and other.turns_compile_off:
                return f"not applicable: {name} turns torch.compile off"
            if name in k.excludes or k.name in other.excludes:
                return f"cannot be combined with {name}"
            if name in k.subsumed_by:
                return f"already done by {name}"
        return None

    def _score(self, k: Knob, inc: _Config) -> float:
        stages = inc.last.stages if inc.last else {}
        score = float(stages.get(k.stage) or 0.0)
        for f in inc.last.findings if inc.last else ():
            if f.get("id") in k.addresses:
                score += float(f.get("seconds_at_stake") or 0.0)
        if k.serving_tradeoff:
            score *= TRADEOFF_DISCOUNT
        return score

    # -- the search -----------------------------------------------------------------------

    def run(self) -> Outcome:
        base = _Config(())
        stopped = "nothing left to try"
        m = self._measure_config(base, "baseline", None, None)
        if not m.ok:
            raise ColdscopeError(f"the baseline start-up failed: {m.reason}")
        self.base_throughput = m.throughput
        self.base_greedy = m.greedy
        self.rows[-1].throughput_ratio = 1.0 if m.throughput else None
        self.rows[-1].greedy_match = True if m.greedy is not None else None
        try:
            for _ in range(self.baseline_repeats - 1):
                m = self._measure_config(base, "baseline", None, base)
                self._note_pair(base)
            if base.throughput:
                self.base_throughput = base.throughput
            inc = base
            tried: set[str] = set()
            while True:
                candidates = []
                for k in self.catalogue.values():
                    if k.name in tried:
                        continue
                    why = self._why_not(k, inc.knobs)
                    if why is not None:
                        tried.add(k.name)
                        self.skipped.append(Skipped(knob=k.name, reason=why))
                        continue
                    candidates.append(k)
                if not candidates:
                    break
                k = max(candidates, key=lambda c: (self._score(c, inc), c.priority))
                tried.add(k.name)
                inc = self._try(k, inc)
            if self.used < self.budget and inc is not base:
                self._measure_config(inc, "confirm", None, inc)
                self._note_pair(inc)
        except BudgetSpent:
            stopped = f"budget of {self.budget} start-ups spent"
        return self._outcome(base, inc if "inc" in locals() else base, stopped)

    def _try(self, k: Knob, inc: _Config) -> _Config:
        cfg = _Config(inc.knobs + (k.name,))
        m = self._measure_config(cfg, "trial", k.name, inc)
        row = self.rows[-1]
        if not m.ok:
            row.kept = False
            row.reason = f"start-up failed: {m.reason}"
            return inc
        if (self.max_loss is not None and k.serving_tradeoff and self.base_throughput
                and cfg.throughput is not None):
            # Only knobs that change what runs at serving time are held to the constraint: a
            # drop measured with a cache or compile-storage knob is the machine's noise (the
            # same compiled graph serves), and rejecting it would reject the noise.
            ratio = cfg.throughput / self.base_throughput
            if ratio < 1 - self.max_loss:
                row.kept = False
                row.reason = (f"throughput {100 * (ratio - 1):+.0f} % exceeds the allowed "
                              f"-{100 * self.max_loss:.0f} %")
                return inc
        noise = self.spread * inc.time
        gain = inc.time - cfg.time
        if 0 < gain <= 2 * noise:
            row.reason = f"saves {gain:.1f} s, within 2 x noise {noise:.1f} s: measured again"
            m2 = self._measure_config(cfg, "repeat", k.name, inc)
            self._note_pair(cfg)
            row = self.rows[-1]
            if not m2.ok:
                row.kept = False
                row.reason = f"repeat failed: {m2.reason}"
                return inc
            noise = self.spread * inc.time
            gain = inc.time - cfg.time
            if gain > noise:
                row.kept = True
                row.reason = f"saves {gain:.1f} s (mean of 2) > noise {noise:.1f} s"
                return cfg
            # The total carries every stage's noise (imports vary by 10 s here); a knob free at
            # serving time whose own stage gains clearly, with the total not worse, is kept.
            stage_gain = inc.stage(k.stage) - cfg.stage(k.stage)
            stage_noise = self.spread * inc.stage(k.stage)
            if not k.serving_tradeoff and gain > 0 and \
                    stage_gain > max(2 * stage_noise, MIN_STAGE_GAIN_S):
                row.kept = True
                row.reason = (f"saves {stage_gain:.1f} s in {k.stage} (mean of 2) > 2 x its "
                              f"noise {stage_noise:.1f} s; total {gain:.1f} s, within the noise")
                return cfg
            row.kept = False
            row.reason = f"saves {gain:.1f} s (mean of 2), within the noise {noise:.1f} s"
            return inc
        if gain > 2 * noise:
            row.kept = True
            row.reason = f"saves {gain:.1f} s > 2 x noise {noise:.1f} s"
            return cfg
        row.kept = False
        row.reason = f"no gain ({-gain:+.1f} s)" if gain <= 0 else None
        return inc

    def _outcome(self, base: _Config, best: _Config, stopped: str) -> Outcome:
        ratio = None
        if best.throughput is not None and self.base_throughput:
            ratio = best.throughput / self.base_throughput
        return Outcome(
            baseline_s=base.time, baseline_run=base.runs[0] if base.runs else None,
            best_knobs=list(best.knobs), best_s=best.time, best_runs=best.runs,
            best_throughput_ratio=ratio, best_seeded=self._needs_seed(best.knobs),
            speedup=base.time / best.time if best.time else 1.0, spread=self.spread,
            used=self.used, budget=self.budget, rows=self.rows, skipped=self.skipped,
            stopped=stopped,
        )
