"""Findings: what is wrong or improvable in one start-up, from its evidence, with the seconds at
stake.

Every rule is a pure function of ``RunFacts`` (what the log says, the reconciled timeline, the
probe's process table, the CPU samples and the cache state the run was started with), so the
same rules serve a profiled run, a stored run and a log parsed on its own. A rule fires only on
evidence (a log line, a span, a probe event, CPU samples) and quotes it; it never guesses. The
ids are stable and documented in ``docs/findings.md``: tools and people key on them.

The rules know no engine: the engine's adapter reads its log into ``engines.LogFacts`` (which
line says the compile cache failed to load, the engine's warnings, ...) and may give its own
advice for a finding (its flags and variables); the rules' own advice is engine-neutral.

A log read on its own shows the compile cache's state only in its own words: a compile whose
artefacts the log says were saved (and nothing loaded) is ``compile_cache_cold``; a compile the
log says nothing more about is ``compile_cache_unknown``. A run given a warm cache that still
compiled is ``compile_cache_miss``: its compile key (``Run.compile_key``) is compared with the
keys the cache held (``Run.cache_held``, which the runner keeps in the cache directory), and
what differs is named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coldscope import engines
from coldscope.capture.logtext import without_colours
from coldscope.core.records import (
    CompileKey,
    CpuSamples,
    Finding,
    ImportRecord,
    ProcessRecord,
    Run,
    Segment,
    Storage,
    timeline_fields,
)
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    TORCH_COMPILE,
)
from coldscope.engines import Engine, FindingsAdvice, LogFacts, LogReading, process_roles_of

#: The stable ids, in the order ``docs/findings.md`` explains them.
FINDING_IDS: tuple[str, ...] = (
    "compile_cache_load_failed",
    "compile_cache_cold",
    "compile_cache_unknown",
    "compile_cache_miss",
    "weights_downloaded",
    "model_inspect_uncached",
    "repeated_imports",
    "single_core_bound",
    "weights_from_disk",
    "cuda_graph_capture_heavy",
    "kv_profiling_every_start",
    "engine_warning",
    "engine_error",
)


#: Sizes beyond which CUDA-graph capture counts as heavy: vLLM 0.10's default list has 35
#: sizes, 0.8/0.9's had 67; a short list of the batch sizes actually served is usually enough.
HEAVY_CAPTURE_SIZES = 16
#: Shortest stage (seconds) that a GPU start-up rule reports.
MIN_GPU_STAGE_S = 1.5
#: A CPU sample is single-core-bound when one core is at least this busy (percent) ...
BUSY_CORE = 85.0
#: ... while the mean of the other cores stays at or under this.
IDLE_OTHERS = 30.0
#: Report single-core-bound stretches only when they add up to this many seconds.
MIN_SINGLE_CORE_S = 5.0
#: At most this many distinct engine warnings are reported (the rest are counted).
MAX_WARNINGS = 12


@dataclass(frozen=True)
class RunFacts:
    """The evidence of one start-up that the rules read. Everything is optional: a rule that
    lacks its evidence stays silent.

    ``lines`` are the engine's output lines in order; ``line_times`` their arrival in seconds
    since launch (empty for a log read from a file). ``log`` is what the engine's adapter read
    from those lines, ``engine`` that adapter (its advice replaces the rules' neutral advice;
    None: neutral advice). ``cache`` is ``"cold"`` (coldscope gave
    the run empty caches), ``"warm"`` (it gave it the caches of an earlier run of the same
    configuration) or None (unknown: a log on its own). ``page_cache`` is ``"cold"`` when the
    weights were evicted from the page cache before the run, ``"hot"`` when known resident,
    None when unknown. ``segments`` are the timeline's pieces, ``processes`` the probe's
    process table, ``cpu`` the CPU samples, ``imports`` the import time by package
    (``profile --imports``), all as the ``Run`` records them.
    """

    lines: Sequence[str] = ()
    line_times: Sequence[float] = ()
    log: LogFacts | None = None
    engine: Engine | None = None
    stages: Mapping[str, float | None] = field(default_factory=dict)
    substeps: Mapping[str, float] = field(default_factory=dict)
    segments: Sequence[Segment] = ()
    processes: Sequence[ProcessRecord] = ()
    cpu: CpuSamples | None = None
    cache: str | None = None
    page_cache: str | None = None
    ready_at: float | None = None
    compile_enabled: bool | None = None
    imports: Sequence[ImportRecord] = ()
    storage: Storage = field(default_factory=Storage)
    """Where the weights were read from (residency at launch, bytes read during
    ``model_loading/weights``); every field None when unknown."""
    compile_key: CompileKey | None = None
    """What the run's compile cache was keyed by."""
    cache_held: Sequence[CompileKey] = ()
    """The compile keys of the earlier runs whose caches the run was given."""


# -- building the facts ------------------------------------------------------------------------


def facts_from_log(lines: Iterable[str], read: LogReading | None = None) -> RunFacts:
    """Facts of a log read on its own: the timeline the log shows, cache state unknown.
    ``read`` is ``engines.read_log(lines)`` when the caller has it already (it carries the
    engine that read the log)."""
    # a sequence is looked up, not copied (a saved log's lines by their own numbers)
    lines = lines if isinstance(lines, Sequence) and not isinstance(lines, str) else list(lines)
    read = read or engines.read_log(lines)
    engine: Engine | None = None
    facts: LogFacts | None = None
    tl: dict[str, Any] = {"stages": {}, "substeps": {}, "segments": []}
    if read is not None:  # the engine whose adapter reads the log: its timeline and facts
        engine, tl = read.engine, timeline_fields(read.timeline)
        facts = read.facts if read.facts is not None else read.engine.log_facts(lines)
    if facts is None:
        facts = LogFacts()
    return RunFacts(lines=lines, log=facts, engine=engine, stages=tl["stages"],
                    substeps=tl["substeps"], segments=tl["segments"], cache=None,
                    compile_enabled=facts.compile_enabled)


def _page_cache_state(run: Run) -> str | None:
    """``hot``/``cold`` when the run's storage record says so, ``cold`` when the runner
    evicted the weights first, else None."""
    if run.storage.page_cache is not None:
        return run.storage.page_cache
    if run.page_cache is not None and run.page_cache.startswith("done"):
        return "cold"
    return None


def facts_from_run(run: Run, log: Sequence[str | Sequence[Any]] | None = None) -> RunFacts:
    """Facts of a profiled run: its record and its log, given as ``[seconds, text]`` pairs
    (the store's evidence) or plain lines. The cache state is the one coldscope set up
    (``Run.cache``); the engine's adapter, by the run's engine name, reads the log."""
    lines: list[str] = []
    times: list[float] = []
    for item in log or ():
        if isinstance(item, str):
            lines.append(item)
        else:
            times.append(float(item[0]))
            lines.append(str(item[1]))
    if len(times) != len(lines):
        times = []
    name = run.engine.name
    known = engines.log_facts(lines, engine=name) if lines else None
    engine, ev = known if known is not None else (_registered(name), None)
    compiled = run.engine.compile
    if compiled is None and ev is not None:
        compiled = ev.compile_enabled
    return RunFacts(
        lines=lines, line_times=times, log=ev, engine=engine, stages=run.stages,
        substeps=run.substeps, segments=run.segments, processes=run.processes, cpu=run.cpu,
        cache=run.cache if run.cache in ("cold", "warm") else None,
        page_cache=_page_cache_state(run), ready_at=run.time_to_ready_s,
        compile_enabled=compiled, imports=run.imports, storage=run.storage,
        compile_key=run.compile_key, cache_held=run.cache_held,
    )


def _registered(name: str | None) -> Engine | None:
    return engines.named(name)


# -- the rules ---------------------------------------------------------------------------------


def _advice(f: RunFacts, finding_id: str, neutral: str) -> str:
    """The run's engine's advice for a finding, else the rule's engine-neutral advice."""
    own = f.engine.advice(finding_id) if isinstance(f.engine, FindingsAdvice) else None
    return own if own is not None else neutral


def _stage(f: RunFacts, name: str) -> float | None:
    v = f.stages.get(name)
    return float(v) if v is not None else None


def _quote(text: str, limit: int = 220) -> str:
    text = without_colours(text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


_HEX = re.compile(r"[0-9a-f]{24,}")


def _message(text: str) -> str:
    """A log message with long hashes shortened."""
    return _HEX.sub(lambda m: m.group(0)[:8] + "…", text)


def _startup_end(f: RunFacts) -> int:
    """How many lines the start-up itself has: up to readiness (by arrival time when known,
    else up to the line the engine's adapter says shows the server ready), never the shutdown
    that follows."""
    if f.line_times and f.ready_at is not None:
        return sum(1 for t in f.line_times if t <= f.ready_at + 0.5)
    if f.log is not None and f.log.ready_line is not None:
        return f.log.ready_line + 1
    return len(f.lines)


def rule_compile_cache(f: RunFacts) -> list[Finding]:
    """``compile_cache_load_failed`` / ``compile_cache_cold`` / ``compile_cache_unknown``."""
    ev = f.log
    failed = ev.compile_cache_load_failed if ev is not None else None
    if ev is not None and failed is not None:
        # Seconds spent compiling: the timeline's torch_compile, else, on the log's own clock,
        # from the load-failure line to the line that says the new compile was done.
        secs = _stage(f, TORCH_COMPILE) or ev.recompile_s
        return [Finding(
            id="compile_cache_load_failed", stage=TORCH_COMPILE, seconds_at_stake=secs,
            evidence=f"line {failed.line_no + 1}: {_quote(_message(failed.message), 400)}",
            advice=_advice(f, "compile_cache_load_failed",
                           "the compile cache was there but not used: the graphs were compiled "
                           "again. Try the engine's other cache format or turn compilation off; "
                           "`coldscope tune` measures both."),
        )]
    compiled = _stage(f, TORCH_COMPILE)
    if ev is not None and ev.compile_cache == "hit":
        return []  # the graphs were loaded from the cache: what is left is tracing, not compiling
    missed = ev is not None and ev.compile_cache == "miss"
    if not (compiled or missed) or f.compile_enabled is False:
        return []
    what = f"torch.compile ran for {compiled:.1f} s" if compiled else "graphs were compiled"
    if f.cache == "cold":
        return [Finding(
            id="compile_cache_cold", stage=TORCH_COMPILE, seconds_at_stake=compiled,
            evidence=f"{what} with an empty compile cache (coldscope started the run cold)",
            advice=_advice(f, "compile_cache_cold",
                           "ship a pre-seeded compile cache (`coldscope bundle`), or trade "
                           "serving speed for start-up by turning compilation off; "
                           "`coldscope tune` measures both."),
        )]
    if f.cache == "warm" and missed:
        return [_compile_cache_miss(f, what, compiled)]
    saved = ev.compile_saved if ev is not None else None
    if f.cache is None and saved is not None and missed:
        return [Finding(
            id="compile_cache_cold", stage=TORCH_COMPILE, seconds_at_stake=compiled,
            evidence=f"{what}, and the log says the result was saved to the compile cache "
                     f"(line {saved.line_no + 1}: {_quote(_message(saved.message))}): nothing "
                     "was loaded from it, so it was cold",
            advice=_advice(f, "compile_cache_cold",
                           "ship a pre-seeded compile cache (`coldscope bundle`), or trade "
                           "serving speed for start-up by turning compilation off; "
                           "`coldscope tune` measures both."),
        )]
    if f.cache is None:
        return [Finding(
            id="compile_cache_unknown", stage=TORCH_COMPILE, seconds_at_stake=compiled,
            evidence=f"{what}; a log alone does not show whether a compile cache existed "
                     "(cache state: unknown)",
            advice=_advice(f, "compile_cache_unknown",
                           "profile the command with `coldscope profile --cache warm` to see "
                           "whether a warm cache removes this time."),
        )]
    return []


def compile_key_changes(before: CompileKey, after: CompileKey) -> list[str]:
    """What differs between two compile keys' inputs, one ``name: before → after`` per
    difference: command settings, engine variables, versions, and the engine's own factors
    when both runs have them ("not set" for one a run lacks, "on" for a bare switch)."""
    def show(value: str | None) -> str:
        if value is None:
            return "not set"
        return "on" if value == "" else _message(value)

    pairs = [(before.flags, after.flags), (before.env, after.env),
             (before.versions, after.versions)]
    if before.factors and after.factors:
        pairs.append((before.factors, after.factors))
    out = []
    for a, b in pairs:
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                out.append(f"{name or 'arguments'}: {show(a.get(name))} → {show(b.get(name))}")
    return out


def _short_key(key: CompileKey) -> str:
    return ", ".join(_message(d) for d in key.dirs[:2]) or "none named"


def _compile_cache_miss(f: RunFacts, what: str, compiled: float | None) -> Finding:
    """``compile_cache_miss``: a run given a warm cache compiled anyway. Against the earlier
    key whose inputs differ least from this run's (the newest of equals), name what differs."""
    advice = _advice(f, "compile_cache_miss",
                     "start-ups that share a compile cache reuse it only with the same key: keep "
                     "the settings named here the same, or pre-seed a cache for each "
                     "configuration you serve (`coldscope bundle`).")
    held = list(f.cache_held)
    mine = f.compile_key
    if mine is not None:
        held = [k for k in held if k.run != mine.run]
    if not held or mine is None:
        why = ("coldscope has no record of the key the cache was filled with" if not held else
               "the log names no compile-cache directory, so the keys cannot be compared")
        return Finding(id="compile_cache_miss", stage=TORCH_COMPILE, seconds_at_stake=compiled,
                       evidence=f"{what} although the run was given a warm cache; {why}",
                       advice=advice)
    # min keeps the first of equals, and newest first is the order to prefer
    near = min(reversed(held), key=lambda k: len(compile_key_changes(k, mine)))
    changes = compile_key_changes(near, mine)
    earlier = f"run {near.run}" if near.run else "an earlier run"
    if set(near.dirs) & set(mine.dirs) and not changes:
        detail = (f"this run used the same compile-cache entry as {earlier} "
                  f"({_short_key(mine)}) and still compiled: the engine did not accept what "
                  "was there (its log says why)")
    elif not changes:
        detail = (f"{earlier} left key {_short_key(near)}; this run's is {_short_key(mine)}; "
                  "no difference coldscope can see in the settings, the engine's variables "
                  "or the versions (the key also hashes the engine's traced source files and "
                  "compiler settings)")
    else:
        shown = "; ".join(changes[:8]) + (f"; {len(changes) - 8} more" if len(changes) > 8
                                          else "")
        detail = (f"the cache held {earlier}'s graphs under key {_short_key(near)}; this run's "
                  f"key is {_short_key(mine)}; what differs: {shown}")
    return Finding(id="compile_cache_miss", stage=TORCH_COMPILE, seconds_at_stake=compiled,
                   evidence=f"{what} although the run was given a warm cache: {detail}",
                   advice=advice)


def rule_model_inspect(f: RunFacts) -> list[Finding]:
    """``model_inspect_uncached``: the model-inspection subprocess ran (probe span)."""
    secs = f.substeps.get(f"{BOOTSTRAP}/model_inspect")
    if not secs or secs < 0.5:
        return []
    return [Finding(
        id="model_inspect_uncached", stage=BOOTSTRAP, seconds_at_stake=float(secs),
        evidence=f"bootstrap/model_inspect took {secs:.1f} s (probe span: the model-class "
                 "inspection ran instead of reading the model-info cache)",
        advice=_advice(f, "model_inspect_uncached",
                       "keep the engine's cache directory between start-ups or bake it into "
                       "the image (`coldscope bundle`)."),
    )]


def start_substeps(engine: Engine | None) -> dict[str, str]:
    """Per process role, the bootstrap sub-step that times its start and imports: the
    launched process's imports, then each of the engine's own processes as its adapter names
    them (``Engine.process_roles``; every registered engine's when the engine is unknown)."""
    from coldscope.capture.probe import ROOT_ROLE
    roles = process_roles_of(engine)
    out = {ROOT_ROLE: f"{BOOTSTRAP}/api_server_imports"}
    out.update((r.name, r.start_substep) for r in roles if r.start_substep)
    return out


def rule_repeated_imports(f: RunFacts) -> list[Finding]:
    """``repeated_imports``: several engine processes each start Python and import torch and
    the engine; every process but one is time a single-process engine would not spend."""
    substeps = start_substeps(f.engine)
    roles = [p.role for p in f.processes if p.role in substeps]
    per: dict[str, float] = {}
    source = "probe spans"
    if len(roles) >= 2:
        for role in set(roles):
            v = f.substeps.get(substeps[role])
            if v:
                per[role] = float(v)
    if len(per) < 2:
        gaps = dict(f.log.child_process_gaps) if f.log is not None else {}
        if gaps:
            # A child's gap (its spawn and imports, plus whatever its parent waited for) bounds
            # its imports from above; the shortest gap, once per process but one, is the
            # estimate the log supports (the API server's own imports precede its first line).
            per = gaps
            n = len(per) + 1
            secs = min(per.values()) * (n - 1)
            source = (f"log-clock gaps before each process's first line; estimate: shortest "
                      f"gap x {n - 1}")
        else:
            return []
    else:
        secs = sum(per.values()) - max(per.values())
        n = len(per)
    if secs < 1.0:
        return []
    detail = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(per.items()))
    return [Finding(
        id="repeated_imports", stage=BOOTSTRAP, seconds_at_stake=round(secs, 3),
        evidence=f"{n} engine processes each start Python and import torch/the engine "
                 f"({detail}; {source})" + _top_imports(f.imports),
        advice=_advice(f, "repeated_imports",
                       "run the engine core in the API-server process where the engine allows "
                       "it; `coldscope tune` measures it."),
    )]


#: Packages named per process in ``repeated_imports``' evidence.
TOP_IMPORTS = 3


def _top_imports(imports: Sequence[ImportRecord]) -> str:
    """The costliest packages of each engine process (import self time), for the evidence:
    "; imports by package (self time): api_server torch 2.1 s, vllm 1.3 s; engine_core ..."."""
    from coldscope.capture.imports import OTHER
    per: dict[tuple[str, int], list[tuple[float, str]]] = {}
    for r in imports:
        if r.package != OTHER and r.process != "helper":
            per.setdefault((r.process, r.pid), []).append((r.seconds, r.package))
    if not per:
        return ""
    parts = []
    for (role, _), pkgs in sorted(per.items()):
        top = sorted(pkgs, key=lambda x: (-x[0], x[1]))[:TOP_IMPORTS]
        parts.append(f"{role} " + ", ".join(f"{name} {secs:.1f} s" for secs, name in top))
    return "; imports by package (self time): " + "; ".join(parts)


def _bucket_at(f: RunFacts, t: float) -> str | None:
    for seg in f.segments:
        if seg.start <= t < seg.end:
            return seg.bucket
    return None


def rule_single_core(f: RunFacts) -> list[Finding]:
    """``single_core_bound``: one core saturated while the others idled (CPU samples)."""
    if f.cpu is None:
        return []
    samples, times = f.cpu.per_core, f.cpu.t
    interval = f.cpu.interval_s or 0.5
    if not samples or len(samples[0]) < 2:
        return []
    hits: list[float] = []
    for t, cores in zip(times, samples, strict=False):
        if f.ready_at is not None and t > f.ready_at:
            break
        busiest = max(cores)
        others = (sum(cores) - busiest) / (len(cores) - 1)
        if busiest >= BUSY_CORE and others <= IDLE_OTHERS:
            hits.append(t)
    secs = len(hits) * interval
    if secs < MIN_SINGLE_CORE_S:
        return []
    buckets: dict[str, int] = {}
    for t in hits:
        b = _bucket_at(f, t - interval / 2)
        if b:
            buckets[b] = buckets.get(b, 0) + 1
    stage = max(buckets, key=lambda b: buckets[b]) if buckets else None
    where = ", ".join(f"{b} {n * interval:.1f} s" for b, n in
                      sorted(buckets.items(), key=lambda kv: -kv[1])) or "stages unknown"
    ncores = len(samples[0])
    return [Finding(
        id="single_core_bound", stage=stage, seconds_at_stake=round(secs, 3),
        evidence=f"{len(hits)} of {len(samples)} CPU samples ({secs:.1f} s) had one core at "
                 f">= {BUSY_CORE:.0f} % while the other {ncores - 1} averaged <= "
                 f"{IDLE_OTHERS:.0f} % ({where})",
        advice=_advice(f, "single_core_bound",
                       "the start-up is serial here; more cores do not help this part, fewer "
                       "start-up steps do (compile off or cached, one process instead of "
                       "several)."),
    )]


#: Share of the weight files' bytes read from storage during loading that makes a finding.
DISK_READ_SHARE = 0.5


def rule_weights_from_disk(f: RunFacts) -> list[Finding]:
    """``weights_from_disk``: the weights were read from storage, not the page cache. Measured
    when the probe saw the loading process's storage reads (``Storage.weights_read_bytes``:
    at least half of the weight files' bytes); otherwise known only when coldscope evicted
    them first."""
    secs = f.substeps.get(f"{MODEL_LOADING}/weights") or _stage(f, MODEL_LOADING)
    read = f.storage.weights_read_bytes
    size = f.storage.weights_bytes
    if read is not None and size:
        if read < DISK_READ_SHARE * size:
            return []
        rate = f.storage.read_bandwidth_bps
        held = f.storage.resident_at_launch
        evidence = (f"during model_loading/weights the engine read {read / 1e9:.3f} GB from "
                    f"storage, {read / size:.0%} of the {size / 1e9:.3f} GB of weight files")
        if held is not None:
            evidence += f" ({held:.0%} of them were in the page cache at launch)"
        if rate:
            evidence += f", at {rate / 1e9:.2f} GB/s"
        if secs is not None:
            evidence += f"; model_loading/weights took {secs:.2f} s"
        return [Finding(
            id="weights_from_disk", stage=MODEL_LOADING, seconds_at_stake=secs,
            evidence=evidence,
            advice=_advice(f, "weights_from_disk",
                           "keep the weights in memory between start-ups (page cache, tmpfs, "
                           "a local NVMe copy) or use the engine's streaming loader if it has "
                           "one."),
        )]
    if f.page_cache != "cold":
        return []
    return [Finding(
        id="weights_from_disk", stage=MODEL_LOADING, seconds_at_stake=secs,
        evidence="the weights were evicted from the page cache before the run, so they were "
                 f"read from storage (model_loading/weights {secs:.2f} s)" if secs is not None
                 else "the weights were evicted from the page cache before the run",
        advice=_advice(f, "weights_from_disk",
                       "keep the weights in memory between start-ups (page cache, tmpfs, a "
                       "local NVMe copy) or use the engine's streaming loader if it has one."),
    )]


#: Shortest weight download (seconds) worth a finding.
MIN_DOWNLOAD_S = 1.0


def rule_weights_downloaded(f: RunFacts) -> list[Finding]:
    """``weights_downloaded``: the engine downloaded its weights during the start-up (the log
    says so and how long it took)."""
    ev = f.log
    secs = ev.weights_download_s if ev is not None else None
    if ev is None or secs is None or secs < MIN_DOWNLOAD_S:
        return []
    line = ev.weights_download
    quote = f"line {line.line_no + 1}: {_quote(line.message)}" if line is not None else \
        f"weights downloaded for {secs:.1f} s"
    return [Finding(
        id="weights_downloaded", stage=MODEL_LOADING, seconds_at_stake=round(secs, 3),
        evidence=f"{quote} (inside model_loading)",
        advice=_advice(f, "weights_downloaded",
                       "pre-seed the weights in the image or a node-local cache (a volume "
                       "shared by the node's replicas), or stream them from storage with the "
                       "engine's streaming loader, so no start-up waits for a download."),
    )]


def rule_cuda_graph_capture(f: RunFacts) -> list[Finding]:
    """``cuda_graph_capture_heavy``: many CUDA-graph capture sizes (GPU logs)."""
    ev = f.log
    secs = _stage(f, CUDA_GRAPH_CAPTURE)
    n = ev.capture_sizes if ev is not None else None
    if not n or n <= HEAVY_CAPTURE_SIZES or secs is None or secs < MIN_GPU_STAGE_S:
        return []
    return [Finding(
        id="cuda_graph_capture_heavy", stage=CUDA_GRAPH_CAPTURE, seconds_at_stake=secs,
        evidence=f"{n} CUDA-graph capture sizes configured; capture took {secs:.1f} s",
        advice=_advice(f, "cuda_graph_capture_heavy",
                       "capture only the batch sizes you serve; seconds at stake is the whole "
                       "capture, an upper bound."),
    )]


def rule_kv_profiling(f: RunFacts) -> list[Finding]:
    """``kv_profiling_every_start``: memory profiling ran on a GPU start-up where its result
    (the KV-cache size) could have been reused.

    At stake is what reusing the result saves: the kv_cache_profiling stage. The log's own
    figure ("Memory profiling takes X seconds") is used when it fits inside the stage; on vLLM
    0.10-0.11 it includes the torch.compile that the profiling run triggers (11.88 s reported
    for a 2.46 s stage), so the stage caps it."""
    ev = f.log
    if ev is None or ev.device in (None, "cpu") or ev.startup_plan is not None:
        return []  # a persisted start-up plan (or a set KV-cache size) skipped the profiling
    stage = _stage(f, KV_CACHE_PROFILING)
    said = ev.memory_profiling_s
    secs = said if said is not None else stage
    capped = said is not None and stage is not None and said > stage
    if capped:
        secs = stage
    if secs is None or secs < MIN_GPU_STAGE_S:
        return []
    at = ev.memory_profiling_line
    quote = f"line {at + 1}: {_quote(f.lines[at])}" if at is not None and \
        at < len(f.lines) else f"kv_cache_profiling took {secs:.1f} s"
    if capped:
        quote += (f" (the log's {said:.2f} s includes the torch.compile that runs inside "
                  f"the profiling; at stake is the kv_cache_profiling stage itself, "
                  f"{secs:.2f} s)")
    return [Finding(
        id="kv_profiling_every_start", stage=KV_CACHE_PROFILING, seconds_at_stake=secs,
        evidence=quote,
        advice=_advice(f, "kv_profiling_every_start",
                       "the profiling result is the same for the same model, GPU and settings: "
                       "reuse it instead of profiling at every start-up."),
    )]


#: Levels filed as ``engine_error`` rather than ``engine_warning``.
ERROR_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL"})


def _level_finding(f: RunFacts, finding_id: str, kind: str,
                   lines: Sequence[tuple[int, str, str, str]], advice: str) -> Finding:
    """One finding for all of a start-up's lines of one kind (``kind``: "WARNING" or
    "ERROR"): how many, and each distinct message once (its first line, how often), at most
    ``MAX_WARNINGS`` of them."""
    distinct: dict[str, list[tuple[int, str, str]]] = {}
    for i, level, where, msg in lines:
        distinct.setdefault(msg, []).append((i, level, where))
    if len(distinct) == 1:  # one message (maybe repeated): its first line, how often
        msg, [(i, level, where), *again] = next(iter(distinct.items()))
        times = f" (x{len(again) + 1})" if again else ""
        evidence = f"line {i + 1}{times}: {level} [{where}] {_quote(msg)}"
    else:
        parts = []
        for msg, seen in list(distinct.items())[:MAX_WARNINGS]:
            i, level, where = seen[0]
            times = f" (x{len(seen)})" if len(seen) > 1 else ""
            parts.append(f"line {i + 1}{times}: {level} [{where}] {_quote(msg, 160)}")
        more = len(distinct) - MAX_WARNINGS
        evidence = (f"{len(lines)} {kind} lines, {len(distinct)} distinct: " + "; ".join(parts)
                    + (f"; {more} more distinct not listed (see the run's log)" if more > 0
                       else ""))
    return Finding(id=finding_id, stage=None, seconds_at_stake=None, evidence=evidence,
                   advice=_advice(f, finding_id, advice))


def rule_engine_warnings(f: RunFacts) -> list[Finding]:
    """``engine_warning`` and ``engine_error``: the WARNING lines, and apart from them the
    ERROR/CRITICAL lines, the engine logged during start-up (up to readiness), each one
    finding per start-up that counts them and quotes every distinct message once. An error
    is not a warning: a start-up that reached ready despite one deserves its own line."""
    warned: list[tuple[int, str, str, str]] = []
    errors: list[tuple[int, str, str, str]] = []
    end = _startup_end(f)
    for w in f.log.warnings if f.log is not None else ():
        if w.line_no >= end:
            break
        if w.message:
            item = (w.line_no, w.level, w.where, w.message)
            (errors if w.level.upper() in ERROR_LEVELS else warned).append(item)
    out = []
    if warned:
        out.append(_level_finding(
            f, "engine_warning", "WARNING", warned,
            "the engine's own warnings during start-up; coldscope cannot time their effect: "
            "read each once and fix or silence it."))
    if errors:
        out.append(_level_finding(
            f, "engine_error", "ERROR", errors,
            "the engine logged errors during start-up; coldscope cannot time their effect: "
            "check each, a start-up that reached ready may still run degraded."))
    return out


RULES = (rule_compile_cache, rule_weights_downloaded, rule_model_inspect, rule_repeated_imports,
         rule_single_core, rule_weights_from_disk, rule_cuda_graph_capture, rule_kv_profiling,
         rule_engine_warnings)


#: Findings that cannot be timed; they come last.
UNTIMED_IDS = frozenset({"engine_warning", "engine_error"})


def within_stage(f: RunFacts, finding: Finding) -> Finding:
    """The finding with its seconds at stake no larger than its stage's own seconds: a change
    to one stage cannot save more than the stage takes. A rule's figure from elsewhere (a
    log's own count, a gap estimate) that exceeds the stage is capped, and the evidence says
    so."""
    stage = _stage(f, finding.stage) if finding.stage else None
    secs = finding.seconds_at_stake
    if stage is None or secs is None or secs <= stage:
        return finding
    return Finding.model_validate({
        **finding.model_dump(), "seconds_at_stake": stage,
        "evidence": f"{finding.evidence} (capped at the {finding.stage} stage's own "
                    f"{stage:.2f} s; the evidence gives {secs:.2f} s)"})


def _ordered(f: RunFacts, found: Iterable[Finding]) -> list[Finding]:
    """Findings capped by their stages, most seconds at stake first, untimed ones last."""
    capped = [within_stage(f, x) for x in found]
    return sorted(capped, key=lambda x: (x.id in UNTIMED_IDS, -(x.seconds_at_stake or 0.0)))


def evaluate(facts: RunFacts) -> list[Finding]:
    """All findings of one start-up, most seconds at stake first (engine warnings and errors
    last), none claiming more seconds than its stage takes."""
    out: list[Finding] = []
    for rule in RULES:
        out.extend(rule(facts))
    return _ordered(facts, out)


def findings_from_log(lines: Iterable[str], read: LogReading | None = None) -> list[Finding]:
    """Findings of a log read on its own (cache state unknown); ``read`` as for
    ``facts_from_log``."""
    return evaluate(facts_from_log(lines, read))


def findings_for_run(run: Run, log: Sequence[str | Sequence[Any]] | None = None
                     ) -> list[Finding]:
    """Findings of a profiled run (see ``facts_from_run``). Never raises on odd evidence: a
    rule that fails is skipped, since findings must not cost the run."""
    try:
        facts = facts_from_run(run, log)
    except (TypeError, ValueError, KeyError):
        return []
    out: list[Finding] = []
    for rule in RULES:
        try:
            out.extend(rule(facts))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            continue
    return _ordered(facts, out)


def findings_json(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """The ``"findings"`` list of the JSON contract."""
    return [f.model_dump(mode="json") for f in findings]

