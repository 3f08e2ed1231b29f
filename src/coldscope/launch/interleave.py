"""Two configurations started in turn (a b a b ...), every start-up stored as a run.

``run_ab(a, b, repeat=N, cache=...)`` is the measuring half of ``coldscope compare``; the
statistics are ``coldscope.analysis.comparison``'s. Interleaving spreads slow drifts of a shared
machine
(another job, thermal state, a filling page cache) over both sides instead of loading them onto
whichever ran second. With ``cache="warm"`` each side is first started once to fill its own
warm cache (a *prime*: stored, labelled ``NAME:a:prime``, never measured); the caches live
under this comparison's own directory, so a prime always starts empty and a measured warm run
always finds exactly what its own configuration's prime left.

Measured runs are labelled ``NAME:a`` and ``NAME:b``, so the comparison can be made again
from the store: ``coldscope compare --runs-a NAME:a --runs-b NAME:b``.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from coldscope.analysis.comparison import Comparison, Prime, Side, compare
from coldscope.core.records import Run
from coldscope.launch.runner import AfterReady, RunConfig, run_sequence
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.store.db import Store
def split_command(text: str) -> tuple[list[str], dict[str, str]]:
    """A shell command line as (argv, environment): leading ``VAR=value`` words are the
    environment (as in a shell), the rest is the command; quoting as in a POSIX shell."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ColdscopeError(f"cannot read the command {text!r}: {exc}") from None
    env: dict[str, str] = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if not words:
        raise ColdscopeError(f"no command in {text!r} (only environment assignments)")
    return words, env


@dataclass
class Arm:
    """One side of the comparison: its command line as typed and the run config made of it."""

    side: Side
    text: str
    config: RunConfig


@dataclass
class Interleaved:
    """What ``run_ab`` started: the primes, then the measured runs in ``order``."""

    name: str
    cache: Literal["cold", "warm"]
    arms: dict[Side, Arm]
    primes: list[tuple[Side, Run]] = field(default_factory=list)
    measured: list[tuple[Side, Run]] = field(default_factory=list)

    def comparison(self) -> Comparison:
        """The comparison of the measured runs (``coldscope.analysis.comparison.compare``)."""
        return compare(
            [r for s, r in self.measured if s == "a"], [r for s, r in self.measured if s == "b"],
            cache=self.cache, order=[s for s, _ in self.measured],
            primes=[Prime(side=s, run=r.id, status=r.status) for s, r in self.primes],
            a_info=self._info("a"), b_info=self._info("b"))

    def _info(self, side: Side) -> dict[str, object]:
        arm = self.arms[side]
        info: dict[str, object] = {"label": f"{self.name}:{side}", "command": arm.text,
                                   "env": arm.config.env}
        if arm.config.standby is not None:
            info["standby"] = arm.config.standby
        return info


def arms(a: str, b: str, *, name: str, cache: Literal["cold", "warm"], cache_root: Path,
         standby: Mapping[Side, str] | None = None, **config: object) -> dict[Side, Arm]:
    """The two arms from their command lines; ``standby`` names the launcher a side starts
    through (``coldscope standby``); ``config`` is passed on to ``RunConfig`` (timeout, probe,
    spans, ...)."""
    out: dict[Side, Arm] = {}
    sides: tuple[tuple[Side, str], ...] = (("a", a), ("b", b))
    for side, text in sides:
        argv, env = split_command(text)
        out[side] = Arm(side, text, RunConfig(
            command=argv, env=env, cache=cache, cache_root=cache_root,
            label=f"{name}:{side}", standby=(standby or {}).get(side), **config))
    return out


def run_ab(arms_: dict[Side, Arm], *, name: str, repeat: int, cache: Literal["cold", "warm"],
           store: Store | None, keep_caches: bool = False,
           on_run: Callable[[Side, bool, Run], None] | None = None,
           on_line: Callable[[str], None] | None = None,
           on_stage: Callable[[str, float], None] | None = None,
           on_launch: Callable[[Run], None] | None = None,
           check: AfterReady | None = None) -> Interleaved:
    """Start a and b ``repeat`` times each, interleaved (a b a b ...), after one prime each
    when ``cache`` is warm; store every start-up. ``on_run(side, is_prime, run)`` after each.
    ``check`` runs while each measured (not priming) engine is up, stored as its
    ``verification``. The comparison's warm caches are removed at the end unless
    ``keep_caches``."""
    if repeat < 1:
        raise ColdscopeError("--repeat must be at least 1")
    plan: list[tuple[Side, bool]] = []
    if cache == "warm":
        plan += [("a", True), ("b", True)]
    plan += [side for _ in range(repeat) for side in (("a", False), ("b", False))]
    configs = [arms_[side].config.model_copy(update={"label": f"{name}:{side}:prime"})
               if prime else arms_[side].config for side, prime in plan]
    result = Interleaved(name=name, cache=cache, arms=arms_)
    steps = iter(plan)

    def ran(run: Run) -> None:
        side, prime = next(steps)
        (result.primes if prime else result.measured).append((side, run))
        if on_run is not None:
            on_run(side, prime, run)

    try:
        run_sequence(configs, store, on_run=ran, on_line=on_line, on_stage=on_stage,
                     on_launch=on_launch,
                     checks=[None if prime else check for _side, prime in plan])
    finally:
        if cache == "warm" and not keep_caches:
            for arm in arms_.values():
                shutil.rmtree(Path(arm.config.cache_root) / "warm", ignore_errors=True)
    return result
