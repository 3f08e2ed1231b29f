"""Start-up across engine releases: the same server arguments started from each release's
environment, interleaved, and every change between consecutive releases with its interval.

``measure`` starts every release ``repeat`` times, round-robin (release 1 2 3, then 2 3 1,
then 3 1 2 ...: each release takes each place in a round equally often, so a drift of the
machine lands on all of them), after one prime each when caches are warm; every start-up is a
stored run labelled ``NAME:SPEC`` and carrying its membership (``Membership`` kind
``releases``: the measurement's name, the release's spec and place, measure or prime, the
round), by which ``stored`` finds a measurement's runs again. ``summarise`` turns the runs into
per-release means and, between consecutive releases (in the order given),
``coldscope.analysis.comparison``'s rows: per stage and sub-step b - a with its 95 % interval and a
verdict, so a change the noise cannot resolve is ``unresolved``. Each run's buckets sum exactly
to its time to ready, so the stage deltas of two releases add up to their time-to-ready delta.

Many changes are read at once (six pairs of seven releases, each with its stages), so each
change also carries its verdict after Holm's step-down (``coldscope.analysis.family``) over the
family it is read in, and the result says per family how many of its K changes were resolved on
their own and how many after Holm (``Family``). The families are the sets of changes a summary
draws its verdicts from together:

- ``time to ready``: one change per pair, the headline of every summary (the line per pair of
  the terminal, the report's pair table, the bench's figures);
- ``stages and sub-steps``: every stage and sub-step change of every pair, the breakdown (the
  terminal lists every stage and every resolved sub-step of each pair; the report, the
  largest of them).

A change in no family has no interval (fewer than 2 runs a side), or is 0 s in every run on
both sides (a stage that happened on neither: no comparison). The two families are two claims,
each holding at family-wise 5 %; the intervals shown stay the per-change 95 % ones.

Import attribution (``Run.imports``, from the probe) gives per release the mean self time of
each top-level package in each engine process during ``bootstrap``, and between releases the
packages whose time changed most.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from coldscope.analysis.comparison import Comparison, Row, compare
from coldscope.analysis.family import FAMILY_ALPHA, holm
from coldscope.core.records import Membership, Run
from coldscope.core.stages import BOOTSTRAP, BUCKETS
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:  # the records below are read by `show`-weight commands: no runner import
    from coldscope.launch.envs import Env
    from coldscope.launch.runner import RunConfig
    from coldscope.store.db import Store
RELEASES_SCHEMA_VERSION: Final = 1
#: Per release, the imports listed (largest first); per pair, the import changes listed.
TOP_IMPORTS = 12


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ImportShare(_Frozen):
    """One top-level package's import self time in one engine process during bootstrap, the
    mean over a release's runs (a run without it counts 0)."""

    process: str
    module: str
    seconds: float


class ImportDelta(_Frozen):
    """The change of one package's mean import time in one process, to - from (seconds)."""

    process: str
    module: str
    delta: float


class Change(_Frozen):
    """One quantity between two releases: to - from in seconds, its 95 % interval (None with
    fewer than two runs on a side), ``coldscope.analysis.comparison``'s verdict on its own, and
    the verdict after Holm's step-down over its family (``holm``; None in no family)."""

    delta: float | None
    low: float | None
    high: float | None
    verdict: str
    holm: str | None = Field(None, description="the verdict after Holm's step-down over its "
                                               "family (families); None: in no family")

    @classmethod
    def of(cls, row: Row, holm: str | None = None) -> Change:
        return cls(delta=row.delta, low=row.low, high=row.high, verdict=row.verdict, holm=holm)


FamilyName = Literal["time to ready", "stages and sub-steps"]


class Family(_Frozen):
    """One family of changes read together (the module's docstring says which), and what
    Holm's step-down at family-wise ``alpha`` left of its verdicts."""

    name: FamilyName
    comparisons: int = Field(description="K: the changes in the family")
    resolved: int = Field(description="resolved at 95 % each, on their own")
    after_holm: int = Field(description="resolved after Holm's step-down over the K")
    alpha: float = FAMILY_ALPHA

    def statement(self) -> str:
        """One line: e.g. ``time to ready: 1 of 6 changes resolved at 95 % each; 0 after
        Holm's step-down over the 6 (family-wise 5 %)``."""
        if not self.comparisons:
            return f"{self.name}: no change with an interval"
        return (f"{self.name}: {self.resolved} of {self.comparisons} change(s) resolved at "
                f"{100 - self.alpha * 100:g} % each; {self.after_holm} after Holm's step-down "
                f"over the {self.comparisons} (family-wise {self.alpha * 100:g} %)")


class Release(_Frozen):
    """One release: what it was, its measured runs and their means."""

    spec: str
    engine: str
    engine_version: str | None
    python: str
    runs: list[str] = Field(default_factory=list, description="measured runs that reached ready")
    failed: list[str] = Field(default_factory=list, description="measured runs that did not")
    time_to_ready_s: float | None = Field(None, description="mean over runs")
    time_to_ready_runs_s: list[float] = Field(default_factory=list)
    stages: dict[str, float | None] = Field(default_factory=dict, description="means over runs")
    substeps: dict[str, float] = Field(default_factory=dict, description="means over runs")
    imports: list[ImportShare] = Field(
        default_factory=list, description="bootstrap import self time per process and "
                                          "top-level package, mean over runs, largest first")


class Delta(_Frozen):
    """From one release to the next (in the order given)."""

    from_: str = Field(alias="from")
    to: str
    time_to_ready: Change
    stages: dict[str, Change]
    substeps: dict[str, Change]
    imports: list[ImportDelta] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class ReleasesResult(_Frozen):
    """``coldscope releases --json``."""

    schema_version: Literal[1] = RELEASES_SCHEMA_VERSION
    name: str
    cache: Literal["cold", "warm"]
    repeat: int
    args: list[str] = Field(description="the server arguments every release got")
    order: list[str] = Field(default_factory=list, description="specs in the order they ran")
    releases: list[Release]
    deltas: list[Delta]
    families: list[Family] = Field(
        default_factory=list, description="per family of changes read together, how many "
                                          "were resolved on their own and after Holm")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# -- measuring ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """One start-up of ``measure``: which release, whether it only primed a warm cache."""

    env: Env
    prime: bool
    run: Run


def rounds(n: int, repeat: int) -> list[int]:
    """The order of ``repeat`` rounds over ``n`` releases: round r starts at release r mod n
    (0 1 2, 1 2 0, 2 0 1 ...)."""
    return [(r + i) % n for r in range(repeat) for i in range(n)]


def configs(envs: Sequence[Env], args: Sequence[str], *, name: str,
            cache: Literal["cold", "warm"], cache_root: Path,
            **config: Any) -> list[RunConfig]:
    """One run config per release: its engine's server started from its interpreter with
    ``args``, caches under ``cache_root/<release>``, labelled ``NAME:SPEC``, the probe timing
    imports. ``config`` goes on to ``RunConfig`` (timeout, env ...)."""
    from coldscope.engines import by_name
    from coldscope.launch.envs import slug
    from coldscope.launch.runner import RunConfig
    out = []
    for i, env in enumerate(envs):
        command = by_name(env.engine).server_command(env.python, args)
        out.append(RunConfig(command=command, cache=cache,
                             cache_root=cache_root / f"{i:02d}-{slug(env.spec)[:60]}",
                             label=f"{name}:{env.spec}", imports=True, **config))
    return out


def measure(envs: Sequence[Env], args: Sequence[str], *, name: str, repeat: int,
            cache: Literal["cold", "warm"], cache_root: Path, store: Store | None,
            on_run: Callable[[Started], None] | None = None,
            on_line: Callable[[str], None] | None = None,
            on_stage: Callable[[str, float], None] | None = None,
            on_launch: Callable[[Run], None] | None = None,
            **config: Any) -> list[Started]:
    """Start every release ``repeat`` times, round-robin (``rounds``), after one prime each
    when ``cache`` is warm; store every start-up, carrying its membership (``membership``,
    which the runner puts on the run from its first record on); ``on_run`` after each."""
    from coldscope.launch.runner import run_sequence
    if len(envs) < 1:
        raise ColdscopeError("give at least one release")
    if repeat < 1:
        raise ColdscopeError("--repeat must be at least 1")
    base = configs(envs, args, name=name, cache=cache, cache_root=cache_root, **config)
    # (release, prime, round): one prime each first when warm, then the rounds
    plan: list[tuple[int, bool, int | None]] = \
        [(i, True, None) for i in range(len(envs))] if cache == "warm" else []
    plan += [(i, False, k // len(envs)) for k, i in enumerate(rounds(len(envs), repeat))]
    todo = [base[i].model_copy(update={
        "label": f"{name}:{envs[i].spec}:prime" if prime else base[i].label,
        "membership": membership(name, envs[i].spec, i, cache, prime=prime, repetition=r)})
        for i, prime, r in plan]
    started: list[Started] = []

    def ran(run: Run) -> None:
        i, prime, _ = plan[len(started)]
        started.append(Started(envs[i], prime, run))
        if on_run is not None:
            on_run(started[-1])

    run_sequence(todo, store, on_run=ran, on_line=on_line, on_stage=on_stage,
                 on_launch=on_launch)
    return started


def membership(name: str, spec: str, place: int, cache: str, *, prime: bool,
               repetition: int | None) -> Membership:
    """What a start-up of measurement ``name`` carries (``run.campaign``): the release's spec
    and its place in the order given, measure or prime, the round (None for a prime)."""
    return Membership(kind="releases", name=name, engine=spec, slot=place, cache=cache,
                      role="prime" if prime else "measure", repetition=repetition)


# -- summarising ----------------------------------------------------------------------------------


def bootstrap_imports(run: Run) -> dict[tuple[str, str], float]:
    """(process, package) -> import self seconds of the imports that began in ``bootstrap``,
    summed over the run's processes of one role."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for rec in run.imports:
        if rec.stage == BOOTSTRAP:
            out[(rec.process, rec.package)] += rec.seconds
    return dict(out)


def mean_imports(runs: Sequence[Run]) -> dict[tuple[str, str], float]:
    """``bootstrap_imports`` averaged over ``runs`` (a run without a package counts 0)."""
    if not runs:
        return {}
    total: dict[tuple[str, str], float] = defaultdict(float)
    for run in runs:
        for key, secs in bootstrap_imports(run).items():
            total[key] += secs
    return {k: v / len(runs) for k, v in total.items()}


def _release(env: Env, runs: Sequence[Run]) -> Release:
    ok = [r for r in runs if r.status == "ok" and r.time_to_ready_s is not None]
    stages: dict[str, float | None] = {}
    for bucket in BUCKETS:
        vals = [r.stages.get(bucket) for r in ok]
        known = [v if v is not None else (0.0 if bucket in r.not_applicable else None)
                 for v, r in zip(vals, ok, strict=True)]
        stages[bucket] = statistics.fmean([v for v in known if v is not None]) \
            if ok and all(v is not None for v in known) else None
    names = sorted({n for r in ok for n in r.substeps})
    substeps = {n: statistics.fmean([r.substeps.get(n, 0.0) for r in ok]) for n in names} \
        if ok else {}
    imports = sorted(mean_imports(ok).items(), key=lambda kv: -kv[1])
    ttr = [float(r.time_to_ready_s) for r in ok if r.time_to_ready_s is not None]
    return Release(
        spec=env.spec, engine=env.engine, engine_version=_version(env, ok), python=env.python,
        runs=[r.id for r in ok], failed=[r.id for r in runs if r not in ok],
        time_to_ready_s=statistics.fmean(ttr) if ttr else None, time_to_ready_runs_s=ttr,
        stages=stages, substeps=substeps,
        imports=[ImportShare(process=p, module=m, seconds=round(s, 6))
                 for (p, m), s in imports if s > 0],
    )


def _version(env: Env, runs: Sequence[Run]) -> str | None:
    """The version the runs recorded (asked of the engine's interpreter), else the env's."""
    seen = {r.engine.version for r in runs if r.engine.version}
    return next(iter(seen)) if len(seen) == 1 else env.engine_version


#: A change in a family: (pair, "time_to_ready" | "stages" | "substeps", its name).
_Key = tuple[int, str, str]


def _rows(c: Comparison) -> dict[tuple[str, str], Row]:
    return {("time_to_ready", ""): c.time_to_ready,
            **{("stages", k): r for k, r in c.stages.items()},
            **{("substeps", k): r for k, r in c.substeps.items()}}


def _in_family(r: Row) -> bool:
    """A change with an interval that is not 0 s in every run of both sides (durations are
    never negative, so a mean of 0 is all zeros)."""
    return r.low is not None and r.high is not None and not (r.a_mean == 0 and r.b_mean == 0)


def families(pairs: Sequence[Callable[[float], Comparison]],
             alpha: float = FAMILY_ALPHA) -> tuple[dict[_Key, str], list[Family]]:
    """Holm's step-down over each family (the module's docstring) of the pairs' changes.

    ``pairs[i](confidence)``: pair i compared at that confidence (``compare``). A change passes
    at level ``x`` when its verdict at confidence ``1 - x`` is resolved. Returns each family
    member's verdict after Holm (its own verdict, or ``unresolved``) and the families."""
    own = [_rows(p(1 - alpha)) for p in pairs]
    members: dict[FamilyName, list[_Key]] = {
        "time to ready": [(i, "time_to_ready", "") for i in range(len(pairs))
                          if _in_family(own[i][("time_to_ready", "")])],
        "stages and sub-steps": [(i, kind, name) for i, rows in enumerate(own)
                                 for (kind, name), r in rows.items()
                                 if kind != "time_to_ready" and _in_family(r)]}

    def passes_at(level: float) -> list[_Key]:
        rows = [_rows(p(1 - level)) for p in pairs]
        return [(i, kind, name) for i, r in enumerate(rows) for (kind, name), row in r.items()
                if row.verdict != "unresolved"]

    verdicts: dict[_Key, str] = {}
    out = []
    for name, keys in members.items():
        kept = holm(keys, passes_at, alpha)
        for key in keys:
            i, kind, what = key
            verdicts[key] = own[i][(kind, what)].verdict if key in kept else "unresolved"
        out.append(Family(name=name, comparisons=len(keys), alpha=alpha, after_holm=len(kept),
                          resolved=sum(own[i][(k, w)].verdict != "unresolved"
                                       for i, k, w in keys)))
    return verdicts, out


def _delta(i: int, a: Release, b: Release, runs_a: Sequence[Run], runs_b: Sequence[Run],
           c: Comparison, after_holm: dict[_Key, str]) -> Delta:
    ia, ib = mean_imports([r for r in runs_a if r.id in a.runs]), \
        mean_imports([r for r in runs_b if r.id in b.runs])
    changes = [((p, m), ib.get((p, m), 0.0) - ia.get((p, m), 0.0)) for p, m in set(ia) | set(ib)]
    changes.sort(key=lambda kv: (-abs(kv[1]), kv[0]))
    return Delta.model_validate({
        "from": a.spec, "to": b.spec,
        "time_to_ready": Change.of(c.time_to_ready, after_holm.get((i, "time_to_ready", ""))),
        "stages": {k: Change.of(v, after_holm.get((i, "stages", k)))
                   for k, v in c.stages.items()},
        "substeps": {k: Change.of(v, after_holm.get((i, "substeps", k)))
                     for k, v in c.substeps.items()},
        "imports": [ImportDelta(process=p, module=m, delta=round(d, 6))
                    for (p, m), d in changes[:TOP_IMPORTS] if d != 0],
        "notes": list(c.notes),
    })


def summarise(started: Sequence[Started], envs: Sequence[Env], *, name: str,
              cache: Literal["cold", "warm"], repeat: int,
              args: Sequence[str]) -> ReleasesResult:
    """Per-release means and consecutive-release deltas of ``measure``'s start-ups, with each
    family's verdicts after Holm (``families``)."""
    by_spec: dict[str, list[Run]] = {e.spec: [] for e in envs}
    for s in started:
        if not s.prime:
            by_spec[s.env.spec].append(s.run)
    releases = [_release(e, by_spec[e.spec]) for e in envs]
    sides = [(by_spec[envs[i].spec], by_spec[envs[i + 1].spec]) for i in range(len(envs) - 1)]
    pairs = [_at_confidence(ra, rb, cache) for ra, rb in sides]
    after_holm, fams = families(pairs)
    deltas = [_delta(i, releases[i], releases[i + 1], ra, rb, pairs[i](1 - FAMILY_ALPHA),
                     after_holm) for i, (ra, rb) in enumerate(sides)]
    return ReleasesResult(name=name, cache=cache, repeat=repeat, args=list(args),
                          order=[s.env.spec for s in started if not s.prime],
                          releases=releases, deltas=deltas, families=fams)


def _at_confidence(runs_a: Sequence[Run], runs_b: Sequence[Run],
                   cache: str) -> Callable[[float], Comparison]:
    """``compare(runs_a, runs_b)`` as a function of the confidence, each level computed once
    (Holm asks again for the levels it has seen)."""
    seen: dict[float, Comparison] = {}

    def at(confidence: float) -> Comparison:
        if confidence not in seen:
            seen[confidence] = compare(runs_a, runs_b, cache=cache, confidence=confidence)
        return seen[confidence]
    return at


# -- from the store -------------------------------------------------------------------------------


def stored(runs: Iterable[Run]) -> list[ReleasesResult]:
    """The ``releases`` measurements among stored runs (membership kind ``releases``, as
    ``measure`` stores them), each summarised by ``summarise`` as the command summarised it,
    newest first (by its latest start-up). Releases keep the order they were given in (their
    ``slot``); the start-ups, the order they ran in (``started_at``). Runs that are not among
    ``runs`` (e.g. failed ones a caller left out) are not counted: a release none of whose
    start-ups is there is left out."""
    by_name: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        m = r.campaign
        if m is not None and m.kind == "releases" and m.name and m.engine:
            by_name[m.name].append(r)
    out: list[tuple[str, ReleasesResult]] = []
    for name, rs in by_name.items():
        rs.sort(key=lambda r: (r.started_at or "", r.id))
        envs = _stored_envs(rs)
        by_spec = {e.spec: e for e in envs}
        started = [Started(by_spec[_member(r).engine or ""], _member(r).role == "prime", r)
                   for r in rs]
        first = _member(rs[0])
        cache: Literal["cold", "warm"] = "warm" if (first.cache or rs[0].cache_requested) \
            == "warm" else "cold"
        rounds_seen = [m.repetition for m in map(_member, rs) if m.repetition is not None]
        measured = next((s.run for s in started if not s.prime), rs[0])
        out.append((rs[-1].started_at or "", summarise(
            started, envs, name=name, cache=cache, repeat=max(rounds_seen, default=0) + 1,
            args=_server_args(measured, by_spec[_member(measured).engine or ""]))))
    out.sort(key=lambda item: item[0], reverse=True)
    return [result for _, result in out]


def _member(run: Run) -> Membership:
    """A stored start-up's membership (``stored`` keeps only runs that have one)."""
    return run.campaign or Membership(kind="releases")


def _stored_envs(runs: Sequence[Run]) -> list[Env]:
    """One ``Env`` per release among a measurement's runs, in the order the releases were given
    (their ``slot``; runs without one, by first start-up), as far as the runs tell it: the
    interpreter that started it, its engine adapter, the version its runs recorded."""
    from coldscope.launch.envs import Env
    first: dict[str, Run] = {}
    for r in runs:
        first.setdefault(_member(r).engine or "", r)
    places: dict[str, int] = {}
    for r in runs:
        m = _member(r)
        if m.slot is not None:
            places[m.engine or ""] = min(m.slot, places.get(m.engine or "", m.slot))
    seen = list(first)
    order = sorted(seen, key=lambda s: (s not in places, places.get(s, 0), seen.index(s)))
    return [Env(spec=s, python=(first[s].engine.argv or [""])[0],
                engine=first[s].engine.name or "", engine_version=None) for s in order]


def _server_args(run: Run, env: Env) -> list[str]:
    """The server arguments ``run`` was started with: its command line after its engine's
    server command (as ``configs`` built it), or none when that cannot be told."""
    from coldscope.engines import by_name
    try:
        prefix = by_name(env.engine).server_command(env.python, [])
    except ColdscopeError:
        return []
    argv = run.engine.argv
    return list(argv[len(prefix):]) if argv[:len(prefix)] == prefix else []
