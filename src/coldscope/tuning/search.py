"""The tune search: pure, deterministic given the measurements.

What a user has without coldscope is the baseline, twice over: the command as given started
**cold** (empty engine caches and, unless the session runs with ``cold_evict`` off, the model's
and the engine's Python files evicted from the page cache: a new node in a scale-from-zero
fleet; with it off, only the engine caches are empty on a warm machine) and started again on
the caches that start-up left, **warm** (a restarted replica on the same node: "run it
twice"). The search measures both (cold, warm, and cold again from a budget of 10), then tries
one knob at a time on top of the best configuration so far (the incumbent, first the warm
default): first what targets the incumbent's biggest stage and what its findings point at. A
knob is kept only when it saves more than the noise: a gain within twice the measured spread
is measured again and kept only if the mean still beats the spread, or, for a knob free at
serving time, if its own stage's mean gain beats twice that stage's share of the spread while
the total is not worse. Kept knobs accumulate, so the incumbent is always the combination of
every kept change.

Every knob is held to the same two rules (no exemption for cache knobs):

- **Output**: a trial whose greedy output differs from the cold baseline's (other token ids
  where the engine returns them, else other text; or none) is rejected, unless the user passed
  ``allow_output_change`` (then it is kept and says so). A baseline with an empty or missing
  text stops the search: equal empty texts prove nothing.
- **Throughput** (``max_throughput_loss``): the trial's serving rounds against every round of the
  default configuration so far, as a ratio with a 95 % interval (``compare.ratio_interval``); the
  change is kept only when the interval's *low* end is at or above ``1 - loss``. The low end,
  because the limit is a promise to the user: a change is let through when the measurements
  show its loss within the limit, not merely when they fail to show it beyond.

The winner is then proved on start-ups that did not select it: the budget kept back
(``reserve_for``) and whatever the search left run the warm default and the winner interleaved
(W B W B ...; one more cold default among them on a budget of 14 or more; an odd start-up left
goes to the winner, last). The speed-ups ``vs_warm`` (against those warm start-ups) and
``vs_cold`` (against every cold default) and the winner's throughput ratio (its start-ups'
median serving rounds against the interleaved warm defaults') are ratios with Fieller
intervals; the throughput limit holds for the winner when that interval's low end is at or
above ``1 - loss``.

Knobs that need seeded caches (the pre-seeded image) get the caches of an earlier start-up of
exactly the same configuration: the engine keys its compile cache by its flags and environment,
so caches from another configuration would miss. When none exists yet, the search first starts
that configuration cold ("prime"), which is also its cold measurement. A launcher knob (the
engine started through the session's standby launcher, ``Knob.launcher``) changes neither the
command line nor the environment, so it shares the caches of the same configuration without it.

``measure(request) -> Measurement`` does the start-ups; the session replays stored measurements
through it on ``--resume``, which is why everything here must depend only on them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from coldscope.analysis.comparison import Ratio, ratio_interval
from coldscope.engines.knobs import ALL_CACHES, Knob
from coldscope.tuning.verify import GreedyOutput, greedy_difference
from coldscope.util.errors import ColdscopeError

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

Role = Literal["baseline", "warm", "trial", "repeat", "prime", "confirm"]
Phase = Literal["search", "confirm"]


def reserve_for(budget: int) -> int:
    """Start-ups kept back from the search to prove the winner: from a budget of 14, two
    warm/winner pairs and one more cold default (W B C W B); 2 pairs from 10, 1 pair from 6,
    none below. What the search leaves unspent is added to the confirmation."""
    if budget >= 14:
        return 5
    if budget >= 10:
        return 4
    if budget >= 6:
        return 2
    return 0


def check_budget(budget: int) -> None:
    """Refuse a budget that cannot measure both baselines (the default cold and warm)."""
    if budget < 2:
        raise ColdscopeError("--budget must be at least 2 start-ups (the default cold and "
                             "warm)")


class TuneRecord(BaseModel):
    """A record of the tuner (a request, a measurement, a trial row, the outcome, the stored
    session, the result): unknown keys refused, and frozen, so the search, the session file
    and the printed result never see a record change behind their back. A changed record is a
    new one: ``evolve``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def evolve(self, **changes: Any) -> Self:
        """A new record: this one with ``changes``, validated as any record is (pydantic's
        ``model_copy(update=...)`` would skip that)."""
        return self.model_validate({**self.model_dump(), **changes})


class TrialRequest(TuneRecord):
    """One start-up the search asks for. ``knobs`` are applied in order to the user's command;
    ``seeded`` means start from the caches the last start-up of the same configuration
    (``cache_key``) left; ``change`` is the knob under test."""

    index: int
    role: Role
    knobs: tuple[str, ...] = ()
    change: str | None = None
    seeded: bool = False
    cache_key: str


class FindingCost(TuneRecord):
    """A finding of a start-up as the search weighs it: its id (``docs/findings.md``) and the
    seconds it puts at stake (None: the evidence shows the fault but cannot time it)."""

    id: str
    seconds_at_stake: float | None = None


class Measurement(TuneRecord):
    """What one start-up gave. ``rounds`` are the serving check's rounds in output tokens per
    second; ``throughput`` their median; ``greedy`` the text of the fixed greedy prompt and
    ``greedy_token_ids`` its generated token ids (None: the engine returned none);
    ``findings`` the run's findings with the seconds at stake (what points the search at a
    knob); ``evicted`` what was evicted from the page cache just before it (``model``,
    ``engine python``: a cold start-up on a new node's state), empty when nothing was."""

    ok: bool
    run_id: str | None = None
    reason: str | None = None
    time_to_ready_s: float | None = None
    stages: dict[str, float | None] = Field(default_factory=dict)
    findings: list[FindingCost] = Field(default_factory=list)
    throughput: float | None = None
    rounds: list[float] = Field(default_factory=list)
    greedy: str | None = None
    greedy_token_ids: list[int] | None = None
    evicted: list[str] = Field(default_factory=list)

    @property
    def greedy_output(self) -> GreedyOutput:
        return GreedyOutput(self.greedy, tuple(self.greedy_token_ids)
                            if self.greedy_token_ids is not None else None)


class TrialRow(TuneRecord):
    """One line of the tune table (and of ``--json``'s ``trials``). ``throughput_ratio`` is
    this start-up's serving rounds against the default configuration's so far, ``throughput_low``
    and ``throughput_high`` its 95 % interval."""

    trial: int
    role: Role
    phase: Phase = "search"
    change: str | None
    knobs: list[str]
    cache: Literal["cold", "seeded"]
    run_id: str | None
    ok: bool
    time_to_ready_s: float | None
    stage_delta: dict[str, float] = Field(default_factory=dict)
    throughput_ratio: float | None = None
    throughput_low: float | None = None
    throughput_high: float | None = None
    greedy_match: bool | None = None
    greedy_diff: str | None = None
    kept: bool | None = None
    reason: str | None = None


class Skipped(TuneRecord):
    """A knob the search did not try, and why (not available here, not applicable, no budget)."""

    knob: str
    reason: str


class Baseline(TuneRecord):
    """The default command's start-ups in one cache state: their mean, ids and times."""

    time_to_ready_s: float | None
    runs: list[str] = Field(default_factory=list)
    times: list[float] = Field(default_factory=list)


class ThroughputLimit(TuneRecord):
    """``--max-throughput-loss`` judged for the winner: ``holds`` when the low end of its
    throughput ratio's interval is at or above ``1 - max_loss``; None when it was not measured
    (the winner is a default, whose serving nothing was compared with, or too few start-ups
    served for an interval), with ``note`` saying which. "Holds" is a measurement, never a
    default."""

    max_loss: float
    judged_on: Literal["low end of the 95 % interval"] = "low end of the 95 % interval"
    holds: bool | None
    note: str | None = None


class Outcome(TuneRecord):
    """The search's result. ``best_s`` and the ratios rest on the confirmation start-ups
    (``best_runs``), not on the trials that selected the winner (``best_selected_by``), unless
    ``best_confirmed`` is false (no budget was left), which ``notes`` then says."""

    cold: Baseline
    warm: Baseline
    best_knobs: list[str]
    best_seeded: bool
    best_s: float
    best_runs: list[str]
    best_selected_by: list[str]
    best_confirmed: bool
    best_cold_s: float | None = Field(None, description="the winner's first, cold start-up")
    vs_cold: Ratio
    vs_warm: Ratio | None
    throughput_ratio: Ratio | None
    throughput_limit: ThroughputLimit | None
    greedy_match: bool | None
    output_change_allowed: bool
    spread: float
    used: int
    budget: int
    rows: list[TrialRow]
    skipped: list[Skipped]
    stopped: str
    notes: list[str] = Field(default_factory=list)


#: The cache key of the command as given (no knob that changes it).
DEFAULT_KEY: Final = "default"


def cache_key(knobs: Sequence[str], catalogue: dict[str, Knob]) -> str:
    """Identity of a configuration for its caches: the knobs that change the command line or
    environment (seed-only and launcher knobs do not), in a fixed order."""
    return "+".join(sorted(k for k in knobs if catalogue[k].changes_command)) or DEFAULT_KEY


def warm_knob(knobs: Sequence[Knob]) -> Knob | None:
    """The catalogue's "start from every cache the same configuration left" knob: the warm
    default is the command as given with it."""
    return next((k for k in knobs if k.available and k.seed == (ALL_CACHES,)
                 and not k.changes_command), None)


def _mean(xs: Sequence[float]) -> float:
    return statistics.fmean(xs)


class _Config:
    def __init__(self, knobs: tuple[str, ...]) -> None:
        self.knobs = knobs
        self.times: list[float] = []
        self.runs: list[str] = []
        self.last: Measurement | None = None
        self.stage_samples: list[dict[str, float | None]] = []
        self.prime_s: float | None = None  # its first, cold start-up

    @property
    def time(self) -> float:
        return _mean(self.times)

    def stage(self, name: str) -> float:
        values = [s.get(name) or 0.0 for s in self.stage_samples]
        return _mean(values) if values else 0.0


class BudgetSpent(Exception):
    pass


class Search:
    """One tune search. ``run()`` returns the ``Outcome``; ``measure`` is called once per
    start-up, in a deterministic order."""

    def __init__(self, knobs: Sequence[Knob], measure: Callable[[TrialRequest], Measurement], *,
                 budget: int, max_throughput_loss: float | None = None,
                 allow_output_change: bool = False, prior_spread: float = PRIOR_SPREAD) -> None:
        check_budget(budget)
        self.catalogue = {k.name: k for k in knobs}
        self.measure = measure
        self.budget = budget
        self.max_loss = max_throughput_loss
        self.allow_output_change = allow_output_change
        self.prior_spread = prior_spread
        self.reserve = reserve_for(budget)
        self.warm = warm_knob(knobs)
        self.used = 0
        self.rows: list[TrialRow] = []
        self.skipped: list[Skipped] = []
        self.pairs: list[float] = []  # relative spreads of repeated configurations
        self.primed: set[str] = set()  # cache keys with caches from an earlier start-up
        self.base_greedy: GreedyOutput | None = None
        self.default_rounds: list[float] = []  # serving rounds of the default configuration
        self.phase: Phase = "search"
        self.notes: list[str] = []
        self.stopped = "nothing left to try"
        self._throughput: dict[str, float] = {}  # run id -> its serving throughput
        # the confirmation's warm default and winner, apart from the runs that chose them
        self.confirm_warm: _Config | None = None
        self.confirm_best: _Config | None = None

    # -- bookkeeping ----------------------------------------------------------------------

    @property
    def spread(self) -> float:
        """Relative run-to-run spread (``|a - b| / mean`` of two start-ups of one configuration):
        the measured pairs' mean, shrunk towards the prior as if the prior were ``PRIOR_WEIGHT``
        pairs, since one lucky pair is a poor estimate and would keep noise as a gain."""
        total = sum(self.pairs) + PRIOR_WEIGHT * self.prior_spread
        return max(MIN_SPREAD, total / (len(self.pairs) + PRIOR_WEIGHT))

    @property
    def left(self) -> int:
        """Start-ups the search may still spend (the reserve is the confirmation's)."""
        return self.budget - self.reserve - self.used

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
        if m.ok and m.run_id and m.throughput:
            self._throughput[m.run_id] = m.throughput
        tp = ratio_interval(m.rounds, self.default_rounds) if m.ok and m.rounds \
            and self.default_rounds else None
        base = self.base_greedy if m.ok else None  # nothing to compare a failed start-up with
        diff = greedy_difference(base, m.greedy_output) if base is not None else None
        delta = {}
        if m.ok and ref is not None and ref.last is not None:
            for stage, v in m.stages.items():
                r = ref.last.stages.get(stage)
                if v is not None and r is not None and abs(v - r) >= 0.05:
                    delta[stage] = round(v - r, 2)
        self.rows.append(TrialRow(
            trial=req.index, role=role, phase=self.phase, change=change, knobs=list(knobs),
            cache="seeded" if seeded else "cold", run_id=m.run_id, ok=m.ok,
            time_to_ready_s=m.time_to_ready_s, stage_delta=delta,
            throughput_ratio=tp.value if tp else None, throughput_low=tp.low if tp else None,
            throughput_high=tp.high if tp else None,
            # a trial that answered nothing does not match a baseline that said something
            greedy_match=diff is None if base is not None else None, greedy_diff=diff,
            reason=m.reason if not m.ok else None,
        ))
        if m.ok and key == DEFAULT_KEY:
            self.default_rounds.extend(m.rounds)  # the default's serving, cold or warm
        return m

    def _needs_seed(self, knobs: tuple[str, ...]) -> bool:
        return any(self.catalogue[k].seed for k in knobs)

    def _cost(self, knobs: tuple[str, ...]) -> int:
        """Start-ups a first measurement of ``knobs`` takes (a prime first when needed)."""
        unprimed = self._needs_seed(knobs) and cache_key(knobs, self.catalogue) not in self.primed
        return 2 if unprimed else 1

    def _measure_config(self, cfg: _Config, role: Role, change: str | None,
                        ref: _Config | None) -> Measurement:
        """Start ``cfg`` once (priming it first when it needs caches nobody left yet)."""
        seeded = self._needs_seed(cfg.knobs)
        if seeded and cache_key(cfg.knobs, self.catalogue) not in self.primed:
            prime = self._start("prime", cfg.knobs, change, False, ref)
            if not prime.ok:
                return prime
            cfg.prime_s = prime.time_to_ready_s
        m = self._start(role, cfg.knobs, change, seeded, ref)
        if m.ok and m.time_to_ready_s is not None:
            cfg.times.append(m.time_to_ready_s)
            cfg.runs.append(m.run_id or "")
            cfg.last = m
            cfg.stage_samples.append(dict(m.stages))
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
            if f.id in k.addresses:
                score += f.seconds_at_stake or 0.0
        if k.serving_tradeoff:
            score *= TRADEOFF_DISCOUNT
        return score

    # -- the search -----------------------------------------------------------------------

    def run(self) -> Outcome:
        cold = _Config(())
        warm = _Config((self.warm.name,)) if self.warm else None
        m = self._measure_config(cold, "baseline", None, None)
        if not m.ok:
            raise ColdscopeError(f"the baseline start-up failed: {m.reason}")
        if not (m.greedy or "").strip():
            # equal empty texts would pass every trial: the output check would rest on nothing
            what = "missing" if m.greedy is None else "empty"
            if not self.allow_output_change:
                raise ColdscopeError(
                    f"the baseline start-up's greedy output is {what}: the output check "
                    "would compare nothing (--allow-output-change runs without it)")
            self.notes.append(f"the baseline's greedy output is {what}: outputs were not "
                              "compared")
        else:
            self.base_greedy = m.greedy_output
            if self.base_greedy.token_ids is None:
                self.notes.append("the engine returned no token ids for the greedy prompt: "
                                  "greedy outputs compared as text")
        self._amend(self.rows[-1], greedy_match=True if self.base_greedy is not None else None)
        inc = cold
        try:
            if warm is not None:
                w = self._measure_config(warm, "warm", None, cold)
                if w.ok:
                    inc = warm
                else:
                    self.notes.append(f"the warm default failed ({w.reason}): the search "
                                      "starts from the cold default")
            if self.budget >= 10:  # a second cold start-up: the first measure of the spread
                self._measure_config(cold, "baseline", None, cold)
                self._note_pair(cold)
            inc = self._search(inc)
            self.phase = "confirm"
            self._confirm(cold, warm if warm is not None and warm.times else None, inc)
        except BudgetSpent:
            self.stopped = f"budget of {self.budget} start-ups spent"
        return self._outcome(cold, warm, inc)

    def _search(self, inc: _Config) -> _Config:
        tried: set[str] = {inc.knobs[0]} if inc.knobs else set()
        while True:
            candidates = []
            for k in self.catalogue.values():
                if k.name in tried or (self.warm is not None and k.name == self.warm.name):
                    continue
                why = self._why_not(k, inc.knobs)
                if why is not None:
                    tried.add(k.name)
                    self.skipped.append(Skipped(knob=k.name, reason=why))
                    continue
                candidates.append(k)
            if not candidates:
                return inc
            k = max(candidates, key=lambda c: (self._score(c, inc), c.priority))
            if self._cost(inc.knobs + (k.name,)) > self.left:
                for c in candidates:
                    self.skipped.append(Skipped(
                        knob=c.name, reason=f"budget: the last {self.reserve} start-ups prove "
                                            "the winner"))
                self.stopped = (f"search stopped with {self.budget - self.used} start-ups "
                                "left to prove the winner")
                return inc
            tried.add(k.name)
            inc = self._try(k, inc)

    def _try(self, k: Knob, inc: _Config) -> _Config:
        cfg = _Config(inc.knobs + (k.name,))
        m = self._measure_config(cfg, "trial", k.name, inc)
        row = self.rows[-1]
        if not m.ok:
            return self._drop(row, inc, f"start-up failed: {m.reason}")
        refused = self._refuse(row)
        if refused:
            return self._drop(row, inc, refused)
        noise = self.spread * inc.time
        gain = inc.time - cfg.time
        if 0 < gain <= 2 * noise:
            if self.left < 1:
                return self._drop(row, inc, f"saves {gain:.1f} s, within 2 x noise {noise:.1f} "
                                            "s, and no budget is left to measure it again")
            self._amend(row, reason=f"saves {gain:.1f} s, within 2 x noise {noise:.1f} s: "
                                    "measured again")
            m2 = self._measure_config(cfg, "repeat", k.name, inc)
            self._note_pair(cfg)
            row = self.rows[-1]
            if not m2.ok:
                return self._drop(row, inc, f"repeat failed: {m2.reason}")
            refused = self._refuse(row)
            if refused:
                return self._drop(row, inc, refused)
            noise = self.spread * inc.time
            gain = inc.time - cfg.time
            if gain > noise:
                return self._keep(row, cfg, f"saves {gain:.1f} s (mean of 2) > noise "
                                            f"{noise:.1f} s")
            # The total carries every stage's noise (imports vary by 10 s here); a knob free at
            # serving time whose own stage gains clearly, with the total not worse, is kept.
            stage_gain = inc.stage(k.stage) - cfg.stage(k.stage)
            stage_noise = self.spread * inc.stage(k.stage)
            if not k.serving_tradeoff and gain > 0 and \
                    stage_gain > max(2 * stage_noise, MIN_STAGE_GAIN_S):
                return self._keep(row, cfg, (
                    f"saves {stage_gain:.1f} s in {k.stage} (mean of 2) > 2 x its noise "
                    f"{stage_noise:.1f} s; total {gain:.1f} s, within the noise"))
            return self._drop(row, inc, f"saves {gain:.1f} s (mean of 2), within the noise "
                                        f"{noise:.1f} s")
        if gain > 2 * noise:
            return self._keep(row, cfg, f"saves {gain:.1f} s > 2 x noise {noise:.1f} s")
        return self._drop(row, inc, f"no gain ({-gain:+.1f} s)" if gain <= 0 else None)

    def _amend(self, row: TrialRow, **changes: Any) -> None:
        """Replace ``row`` (one of ``rows``, the newest first) by a copy with ``changes``:
        a trial's verdict is written once the start-ups after it have been measured."""
        i = next(i for i in range(len(self.rows) - 1, -1, -1) if self.rows[i] is row)
        self.rows[i] = row.evolve(**changes)

    def _keep(self, row: TrialRow, cfg: _Config, why: str) -> _Config:
        if row.greedy_match is False:
            why += "; its greedy output differs (allowed by --allow-output-change)"
        self._amend(row, kept=True, reason=why)
        return cfg

    def _drop(self, row: TrialRow, inc: _Config, why: str | None) -> _Config:
        """The change is not kept, for ``why``; the incumbent stays."""
        self._amend(row, kept=False, reason=why)
        return inc

    def _refuse(self, row: TrialRow) -> str | None:
        """Why this start-up's output or serving rules its change out (None: it passes)."""
        if row.greedy_match is False and not self.allow_output_change:
            return (f"greedy output differs from the baseline's ({row.greedy_diff}); "
                    "--allow-output-change accepts it")
        if self.max_loss is None:
            return None
        floor = 1 - self.max_loss
        if row.throughput_ratio is None:
            return "throughput not measured, so --max-throughput-loss cannot be shown to hold"
        if row.throughput_low is None or row.throughput_low < floor:
            low = "no interval" if row.throughput_low is None else \
                f"low end {100 * (row.throughput_low - 1):+.0f} %"
            return (f"throughput {100 * (row.throughput_ratio - 1):+.0f} % ({low}) is not "
                    f"shown within the allowed -{100 * self.max_loss:.0f} %")
        return None

    # -- proving the winner --------------------------------------------------------------

    def _confirm(self, cold: _Config, warm: _Config | None, best: _Config) -> None:
        """Interleave the warm default and the winner on the budget left (W B W B ...), with
        one more cold default after the first pair when the budget is 14 or more."""
        cw = self.confirm_warm = _Config(warm.knobs) if warm is not None else None
        cb = self.confirm_best = _Config(best.knobs)
        left = self.budget - self.used
        extra_cold = 1 if self.budget >= 14 and left >= 5 else 0
        if cw is None or best is warm:  # nothing beat the warm default: measure it more
            sides: list[_Config] = [cb] * (left - extra_cold)
        else:
            pairs = (left - extra_cold) // 2
            sides = [c for _ in range(pairs) for c in (cw, cb)]
            if (left - extra_cold) % 2:  # an odd one left: one more of the winner, last
                sides.append(cb)
        if extra_cold:
            sides.insert(min(2, len(sides)), cold)
        for cfg in sides:
            if cfg is cold:
                self._measure_config(cold, "baseline", None, cold)
                self._note_pair(cold)
            elif cfg is cb:
                self._measure_config(cfg, "confirm", None, best)
                self._check_confirm(self.rows[-1])
            else:
                self._measure_config(cfg, "warm", None, best)

    def _check_confirm(self, row: TrialRow) -> None:
        if row.ok and row.greedy_match is False:
            self._amend(row, reason=f"greedy output differs from the baseline's "
                                    f"({row.greedy_diff})")

    def _outcome(self, cold: _Config, warm: _Config | None, best: _Config) -> Outcome:
        cw, cb = self.confirm_warm, self.confirm_best
        confirmed = cb is not None and len(cb.times) > 0
        proof = cb if cb is not None and confirmed else best
        best_is_warm = warm is not None and best.knobs == warm.knobs
        if not confirmed and best.knobs and not best_is_warm:
            self.notes.append("no start-up was left to confirm the winner: its figures come "
                              "from the trials that selected it (biased in its favour)")
        launchers = [k for k in best.knobs if self.catalogue[k].launcher]
        if launchers:
            self.notes.append(
                f"the winner starts its engine through a standby launcher ({', '.join(launchers)})"
                ": the command line alone does not reproduce it; on a running node, `coldscope "
                "standby start NAME -- COMMAND` once, then start through it (`profile --standby "
                "NAME`). A new node still pays the imports once")
        warm_ref = cw if cw is not None and cw.times and not best_is_warm else warm
        vs_warm: Ratio | None = None
        if best_is_warm:
            vs_warm = Ratio(value=1.0, low=1.0, high=1.0,
                            note="the winner is the default with warm caches")
        elif warm_ref is not None and warm_ref.times:
            vs_warm = ratio_interval(warm_ref.times, proof.times)
        throughput = None
        if warm_ref is not None and not best_is_warm:
            num, den = self._medians(proof.runs), self._medians(warm_ref.runs)
            if num and den:
                throughput = ratio_interval(num, den)
        limit = None
        if self.max_loss is not None:
            holds, why = None, None
            if best_is_warm or not best.knobs:
                why = ("not measured: the winner is the default itself, and its serving was "
                       "compared with nothing")
            elif throughput is not None and throughput.low is not None:
                holds = throughput.low >= 1 - self.max_loss
            else:
                why = "not measured: too few start-ups of the winner served for an interval"
            limit = ThroughputLimit(max_loss=self.max_loss, holds=holds, note=why)
        greedy = [r.greedy_match for r in self.rows
                  if r.run_id in set(proof.runs) and r.greedy_match is not None]
        warm_sides = [c for c in (warm, cw, cb if best_is_warm else None) if c is not None]
        all_warm = [t for c in warm_sides for t in c.times]
        all_warm_runs = [r for c in warm_sides for r in c.runs]
        return Outcome(
            cold=Baseline(time_to_ready_s=_mean(cold.times), runs=cold.runs, times=cold.times),
            warm=Baseline(time_to_ready_s=_mean(all_warm) if all_warm else None,
                          runs=all_warm_runs, times=all_warm),
            best_knobs=list(best.knobs), best_seeded=self._needs_seed(best.knobs),
            best_s=proof.time, best_runs=proof.runs if confirmed else [],
            best_selected_by=best.runs if best.knobs else [], best_confirmed=confirmed,
            best_cold_s=best.prime_s,
            vs_cold=ratio_interval(cold.times, proof.times), vs_warm=vs_warm,
            throughput_ratio=throughput, throughput_limit=limit,
            greedy_match=all(greedy) if greedy else None,
            output_change_allowed=self.allow_output_change, spread=self.spread,
            used=self.used, budget=self.budget, rows=self.rows, skipped=self.skipped,
            stopped=self.stopped, notes=self.notes,
        )

    def _medians(self, run_ids: Sequence[str]) -> list[float]:
        """Each listed start-up's serving throughput (the median of its rounds)."""
        return [self._throughput[r] for r in run_ids if r in self._throughput]
