"""Mitigation layers: documented changes to a cold start's conditions, each with its cost.

Each layer changes ``Conditions`` (not the parts directly), so layers compose in any order and
the budget is recomputed from the result. They apply in the canonical order of ``LAYERS``
(engine knobs before the GPU snapshot, which restores whatever the engine would have built);
what each removes is the drop in the budget's total when it is added to the ones before it.

A layer may not apply under the conditions the layers before it leave (``Layer.applies``
gives the reason): the standby launcher needs a node that is already up, so on a start-up that
provisions a new node it removes 0 s and the report says why.

The warm pool (``min_workers``) is not a change to the cold path: it keeps N replicas up so
their requests never see it. It lives in ``coldscope.planning.economics`` and ``sla``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coldscope.core.stages import BOOTSTRAP, CUDA_GRAPH_CAPTURE, TORCH_COMPILE
from coldscope.planning.budget import (
    ENGINE_STARTUP,
    IMAGE_PULL,
    MIGRATION,
    PROVISIONING,
    WEIGHT_LOAD,
    Budget,
    Conditions,
    EngineEstimate,
    ModelSize,
    Part,
    compute_budget,
)
from coldscope.planning.infra import Profile, Range
from coldscope.util.errors import ColdscopeError

GB = 1e9


@dataclass(frozen=True)
class Layer:
    """One mitigation: how it changes a cold start, what it assumes, what it costs a month."""

    name: str
    summary: str
    apply: Callable[[Conditions, ModelSize, Profile], Conditions]
    assumptions: Callable[[ModelSize, Profile], list[str]]
    monthly_cost: Callable[[ModelSize, Profile], float]
    #: Factor on a replica's throughput (eager mode decodes slower).
    throughput_factor: Callable[[Profile], float] = lambda profile: 1.0
    #: Why the layer does not apply under these conditions (None: it applies); a layer that
    #: does not apply leaves the conditions as they are and removes 0 s.
    applies: Callable[[Conditions, Profile], str | None] = lambda cond, profile: None


@dataclass(frozen=True)
class Applied:
    """A layer as applied in a stack: seconds it removed (low, high) and its monthly cost."""

    name: str
    summary: str
    removes_low: float
    removes_high: float
    monthly_cost: float
    assumptions: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary,
                "removes_s": {"low": self.removes_low, "high": self.removes_high},
                "monthly_cost": self.monthly_cost, "assumptions": list(self.assumptions)}


# --- the layers ---


def _preseeded(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    tier = profile.mitigations.preseeded_image.weights_tier
    cond = cond.touch(IMAGE_PULL, "preseeded_image: image on the node's data volume",
                      pull_image=False)
    if cond.weights_from in ("image", "object_store", "node_disk"):
        cond = cond.touch(WEIGHT_LOAD, f"preseeded_image: weights on {tier}", weights_from=tier)
    return cond


def _preseeded_cost(size: ModelSize, profile: Profile) -> float:
    m = profile.mitigations.preseeded_image
    return (profile.image.software_bytes + size.weight_bytes) / GB * m.storage_price_per_gb_month


def _streaming(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    m = profile.mitigations.weight_streaming
    return cond.touch(WEIGHT_LOAD, f"weight_streaming: load / {m.load_speedup:g}",
                      load_speedup=cond.load_speedup * m.load_speedup,
                      overlap_transfer=m.overlap_transfer or cond.overlap_transfer)


def _tiered(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    m = profile.mitigations.tiered_loading
    cond = cond.touch(WEIGHT_LOAD, f"tiered_loading: weights in {m.weights_tier}",
                      weights_from=m.weights_tier)
    if m.keeps_node:
        cond = cond.touch(PROVISIONING, "tiered_loading: shared node pool", provision=False)
        cond = cond.touch(IMAGE_PULL, "tiered_loading: shared node pool", pull_image=False)
    return cond


def _tiered_cost(size: ModelSize, profile: Profile) -> float:
    m = profile.mitigations.tiered_loading
    return size.weight_bytes / GB * m.dram_price_per_gb_hour * profile.month_hours


def migration_seconds(size: ModelSize, profile: Profile) -> tuple[float, float]:
    """Seconds to hand a running request over by its tokens: send them, recompute the KV."""
    m = profile.mitigations.live_migration
    send = m.tokens * 4 / m.network_bytes_per_s
    return (send + m.tokens / m.prefill_tokens_per_s.high,
            send + m.tokens / m.prefill_tokens_per_s.low)


def kv_move_seconds(size: ModelSize, profile: Profile) -> float | None:
    """Seconds to send the same request's KV cache instead; None when its size is unknown."""
    m = profile.mitigations.live_migration
    per_token = m.kv_bytes_per_token or size.kv_bytes_per_token
    if not per_token:
        return None
    return m.tokens * per_token / m.network_bytes_per_s


def _migration(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    lo, hi = migration_seconds(size, profile)
    part = Part(MIGRATION, lo, hi,
                f"live_migration: {profile.mitigations.live_migration.tokens} tokens sent and "
                "recomputed on the target before the GPU is free")
    return replace(cond, extra_parts=cond.extra_parts + (part,))


def _migration_assumptions(size: ModelSize, profile: Profile) -> list[str]:
    m = profile.mitigations.live_migration
    lo, hi = migration_seconds(size, profile)
    kv = kv_move_seconds(size, profile)
    kv_text = (f"moving the KV cache instead: {kv:.2f} s at {m.network_bytes_per_s / GB:g} GB/s"
               if kv is not None else "KV bytes per token unknown (set kv_bytes_per_token)")
    return [
        "frees the GPU next to this model's DRAM-cached checkpoint by moving a running request "
        "to another replica, so tiered loading stays local (ServerlessLLM)",
        f"moves {m.tokens} tokens ({m.tokens * 4} bytes, {m.tokens_source}) and recomputes "
        f"them: {lo:.2f}-{hi:.2f} s; {kv_text}",
        "only useful together with tiered_loading",
    ]


def _engine_minus(eng: EngineEstimate, low: float, high: float, note: str,
                  drop: Sequence[str] = ()) -> EngineEstimate:
    new_low = max(0.0, eng.low - low)
    new_high = max(0.0, eng.high - high)
    stages = {k: v for k, v in eng.stages.items() if k not in drop}
    return replace(eng, low=min(new_low, new_high), high=max(new_low, new_high),
                   stages=stages, source=f"{eng.source}; {note}",
                   median=None if eng.median is None else max(0.0, eng.median - (low + high) / 2))


def _compile_cache(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    if not cond.engine.compile_cold:
        return cond.touch(ENGINE_STARTUP, "compile_cache: baseline already warm, no change")
    pen = profile.engine.cold_compile_penalty_s
    eng = _engine_minus(cond.engine, pen.low, pen.high,
                        f"compile_cache: - {pen.low:g}-{pen.high:g} s cold compile")
    return replace(cond, engine=replace(eng, compile_cold=False))


def capture_saving(cond: Conditions, size: ModelSize, profile: Profile) -> tuple[float, float]:
    """Seconds fewer capture sizes save: from the capture stage when known, else the paper's
    Llama-2-7B slope (1.47 s for 57 fewer sizes) scaled by parameters / 7e9."""
    old = profile.engine.capture_sizes
    new = profile.mitigations.fewer_capture_sizes.capture_sizes
    if old <= new:
        return (0.0, 0.0)
    stage = cond.engine.stages.get(CUDA_GRAPH_CAPTURE)
    if stage is not None:
        share = (old - new) / old
        return (stage[0] * share, stage[1] * share)
    per7b = profile.mitigations.fewer_capture_sizes.saving_per_7b_s
    scale = size.params / 7e9 * (old - new) / 57
    return (per7b.low * scale, per7b.high * scale)


def _capture(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    lo, hi = capture_saving(cond, size, profile)
    new = profile.mitigations.fewer_capture_sizes.capture_sizes
    eng = _engine_minus(cond.engine, lo, hi,
                        f"fewer_capture_sizes ({new}): - {lo:.2f}-{hi:.2f} s")
    return replace(cond, engine=eng)


def eager_saving(cond: Conditions, profile: Profile) -> tuple[float, float]:
    """Seconds eager mode saves: the compile and capture stages when known, else the paper's."""
    stages = cond.engine.stages
    if TORCH_COMPILE in stages or CUDA_GRAPH_CAPTURE in stages:
        lo = sum(stages[s][0] for s in (TORCH_COMPILE, CUDA_GRAPH_CAPTURE) if s in stages)
        hi = sum(stages[s][1] for s in (TORCH_COMPILE, CUDA_GRAPH_CAPTURE) if s in stages)
        return (lo, hi)
    sav = profile.mitigations.eager.saving_s
    return (sav.low, sav.high)


def _eager(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    lo, hi = eager_saving(cond, profile)
    eng = _engine_minus(cond.engine, lo, hi, f"eager: - {lo:.1f}-{hi:.1f} s",
                        drop=(TORCH_COMPILE, CUDA_GRAPH_CAPTURE))
    return replace(cond, engine=replace(eng, compile_cold=False))


def standby_saving(cond: Conditions, profile: Profile
                   ) -> tuple[float, float, tuple[float, float], str]:
    """Seconds a standby launcher removes from the engine figure's low and high ends, the
    bootstrap stage (low, high) it takes them from, and where that stage comes from.

    The bootstrap stage is the engine figure's own when it has one (a startup model, stored
    runs), else the profile's ``bootstrap_s``, never more than the engine figure itself. The
    share removed is ``bootstrap_saved`` (low..high): the low end of the start-up loses the
    larger share of the smaller bootstrap, the high end (what the SLA is judged on) the smaller
    share of the larger one, so the range after covers every pairing of the two.
    """
    m = profile.mitigations.standby_launcher
    eng = cond.engine
    stage = eng.stages.get(BOOTSTRAP)
    if stage is not None:
        b_lo, b_hi, where = stage[0], stage[1], "the engine figure's bootstrap stage"
    else:
        b_lo, b_hi = m.bootstrap_s.low, m.bootstrap_s.high
        where = f"profile bootstrap_s ({m.bootstrap_s.source})"
    b_lo, b_hi = min(b_lo, eng.low), min(b_hi, eng.high)
    share = m.bootstrap_saved
    return share.high * b_lo, share.low * b_hi, (b_lo, b_hi), where


def _standby_applies(cond: Conditions, profile: Profile) -> str | None:
    if cond.provision:
        return ("the start-up provisions a new node, whose launcher is not up yet: it pays the "
                "imports once (in its own launcher); nothing for image pull or weights")
    return None


def _standby(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    lo, hi, (b_lo, b_hi), _ = standby_saving(cond, profile)
    share = profile.mitigations.standby_launcher.bootstrap_saved
    eng = cond.engine
    less = _engine_minus(eng, lo, hi,
                         f"standby_launcher: - {min(lo, hi):.2f}-{max(lo, hi):.2f} s "
                         f"({share.low:.2f}-{share.high:.2f} of bootstrap {b_lo:.2f}-{b_hi:.2f} s)")
    stage = eng.stages.get(BOOTSTRAP)
    if stage is not None:
        stages = dict(less.stages)
        stages[BOOTSTRAP] = (max(0.0, stage[0] - lo), max(0.0, stage[1] - hi))
        less = replace(less, stages=stages)
    return replace(cond, engine=less, before_launcher=cond.before_launcher or eng)


def _standby_cost(size: ModelSize, profile: Profile) -> float:
    m = profile.mitigations.standby_launcher
    return (m.resident_bytes / GB * profile.mitigations.tiered_loading.dram_price_per_gb_hour
            * profile.month_hours * m.nodes)


def _standby_assumptions(size: ModelSize, profile: Profile) -> list[str]:
    m = profile.mitigations.standby_launcher
    price = profile.mitigations.tiered_loading.dram_price_per_gb_hour
    return [
        f"removes {m.bootstrap_saved.low:.2f}-{m.bootstrap_saved.high:.2f} of the engine's "
        f"bootstrap stage (imports and interpreter start of every engine process) "
        f"({m.bootstrap_saved.source})",
        "bootstrap from the engine figure's stage when it has one, else "
        f"{m.bootstrap_s.low:g}-{m.bootstrap_s.high:g} s ({m.bootstrap_s.source}); nothing "
        "off weight loading, compile, KV-cache profiling or graph capture",
        "needs a node that is up with its launcher running (a shared node pool, e.g. "
        "tiered_loading's): a new node pays the imports once",
        f"launcher memory {m.resident_bytes / GB:.2f} GB x {m.nodes} node(s) x {price:g}/GB-hour "
        f"x {profile.month_hours:g} h ({m.resident_source}; DRAM price: "
        f"{profile.mitigations.tiered_loading.dram_source})",
        "with gpu_snapshot the launcher saves nothing more: a restored process has its "
        "modules already",
    ]


def _snapshot(cond: Conditions, size: ModelSize, profile: Profile) -> Conditions:
    k = profile.mitigations.gpu_snapshot.startup_speedup
    # A snapshot restores the whole process, imported modules included: a launcher before it
    # (canonical order) does not shorten the restore, so restore from the figure without it.
    eng = cond.before_launcher or cond.engine
    moot = ("; the standby launcher's saving is moot (the restored process has its modules)"
            if cond.before_launcher is not None else "")
    restored = replace(
        eng, low=eng.low / k, high=eng.high / k,
        stages={s: (v[0] / k, v[1] / k) for s, v in eng.stages.items()},
        median=None if eng.median is None else eng.median / k,
        source=f"{eng.source}; gpu_snapshot: restore / {k:g}{moot}",
    )
    return replace(cond, engine=restored, before_launcher=None)


def _snapshot_cost(size: ModelSize, profile: Profile) -> float:
    m = profile.mitigations.gpu_snapshot
    return (size.weight_bytes + m.extra_bytes) / GB * m.storage_price_per_gb_month * m.gpu_types


def _no_cost(size: ModelSize, profile: Profile) -> float:
    return 0.0


LAYERS: tuple[Layer, ...] = (
    Layer(
        "preseeded_image",
        "node boots from a data-volume snapshot with the image pulled and weights on NVMe",
        _preseeded,
        lambda size, p: [
            "node pool boots from a data-volume snapshot holding the pulled image and the "
            f"weights on {p.mitigations.preseeded_image.weights_tier} "
            f"({p.bandwidth_bytes_per_s.nvme.source})",
            "a new image or model version needs a new snapshot",
            f"storage {(p.image.software_bytes + size.weight_bytes) / GB:.0f} GB x "
            f"{p.mitigations.preseeded_image.storage_price_per_gb_month:g}/GB-month "
            f"({p.mitigations.preseeded_image.storage_source})",
        ],
        _preseeded_cost,
    ),
    Layer(
        "weight_streaming",
        "stream weights layer by layer into GPU memory, overlapping I/O and load",
        _streaming,
        lambda size, p: [
            f"weight load / {p.mitigations.weight_streaming.load_speedup:g} "
            f"({p.mitigations.weight_streaming.source})",
            "download and load overlap when weights come from the object store",
            "needs a streaming loader (e.g. Run:ai Model Streamer, Tensorizer); no money cost",
        ],
        _no_cost,
    ),
    Layer(
        "tiered_loading",
        "checkpoint kept in host DRAM of a shared GPU node; load over PCIe (NVMe -> DRAM -> HBM)",
        _tiered,
        lambda size, p: [
            "ServerlessLLM's setting: a shared GPU node pool keeps the checkpoint pinned in DRAM "
            "and a GPU on that node is free; no node to provision, no image to pull"
            if p.mitigations.tiered_loading.keeps_node else
            "checkpoint in DRAM on a fresh node (keeps_node false)",
            f"load from {p.mitigations.tiered_loading.weights_tier} at "
            f"{getattr(p.bandwidth_bytes_per_s, p.mitigations.tiered_loading.weights_tier).source}",
            f"costs {size.weight_bytes / GB:.0f} GB of host DRAM held all month at "
            f"{p.mitigations.tiered_loading.dram_price_per_gb_hour:g}/GB-hour "
            f"({p.mitigations.tiered_loading.dram_source}); the shared GPU is not priced",
        ],
        _tiered_cost,
    ),
    Layer("live_migration", "move a running request's tokens, not its KV cache, and recompute",
          _migration, _migration_assumptions, _no_cost),
    Layer(
        "compile_cache",
        "ship the torch.compile cache with the image so the engine never compiles cold",
        _compile_cache,
        lambda size, p: [p.mitigations.compile_cache.source,
                         "removes the cold-compile penalty only when the baseline compiles cold"],
        _no_cost,
    ),
    Layer(
        "fewer_capture_sizes",
        "capture CUDA graphs for fewer batch sizes",
        _capture,
        lambda size, p: [
            f"{p.engine.capture_sizes} -> {p.mitigations.fewer_capture_sizes.capture_sizes} "
            f"sizes ({p.mitigations.fewer_capture_sizes.saving_per_7b_s.source}); graph capture "
            "scales with model size x sizes",
            "batches between captured sizes are padded up or run without graphs",
        ],
        _no_cost,
    ),
    Layer(
        "eager",
        "--enforce-eager: no torch.compile, no CUDA graphs",
        _eager,
        lambda size, p: [
            p.mitigations.eager.saving_s.source,
            f"decode throughput x {p.mitigations.eager.throughput_factor:g} "
            f"({p.mitigations.eager.throughput_source}): more replicas under load",
        ],
        _no_cost,
        lambda p: p.mitigations.eager.throughput_factor,
    ),
    Layer(
        "standby_launcher",
        "a process per node with the engine's modules imported forks the engine on request",
        _standby,
        _standby_assumptions,
        _standby_cost,
        applies=_standby_applies,
    ),
    Layer(
        "gpu_snapshot",
        "restore GPU memory (weights, CUDA graphs, KV region) instead of initialising the engine",
        _snapshot,
        lambda size, p: [
            f"engine start-up / {p.mitigations.gpu_snapshot.startup_speedup:g} "
            f"({p.mitigations.gpu_snapshot.source})",
            f"tied to the GPU type ({p.gpu}), driver and engine version: a node of another type "
            "falls back to a full start",
            "the weights still move from their tier (the load part stays)",
            "storage per GPU type: "
            f"{(size.weight_bytes + p.mitigations.gpu_snapshot.extra_bytes) / GB:.0f} GB x "
            f"{p.mitigations.gpu_snapshot.storage_price_per_gb_month:g}/GB-month x "
            f"{p.mitigations.gpu_snapshot.gpu_types} type(s)",
        ],
        _snapshot_cost,
    ),
)

LAYER_NAMES: tuple[str, ...] = tuple(layer.name for layer in LAYERS)
_BY_NAME = {layer.name: layer for layer in LAYERS}


def layer(name: str) -> Layer:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ColdscopeError(
            f"unknown mitigation {name!r} (known: {', '.join(LAYER_NAMES)}, warm_pool via "
            "--min-workers)"
        ) from None


def canonical(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` checked, de-duplicated and put in the order layers apply."""
    wanted = {layer(n).name for n in names}
    return tuple(n for n in LAYER_NAMES if n in wanted)


@dataclass(frozen=True)
class Stack:
    """A cold path after some layers: the budget before and after, and each layer's share."""

    baseline: Budget
    budget: Budget
    applied: tuple[Applied, ...]
    conditions: Conditions
    throughput_factor: float

    @property
    def monthly_cost(self) -> float:
        return sum(a.monthly_cost for a in self.applied)


def apply_layers(
    size: ModelSize, profile: Profile, baseline: Conditions, names: Sequence[str]
) -> Stack:
    """Apply the named layers in canonical order; record what each removes from the total."""
    cond = baseline
    before = compute_budget(size, profile, cond)
    first = before
    applied: list[Applied] = []
    factor = 1.0
    for name in canonical(names):
        lay = _BY_NAME[name]
        why_not = lay.applies(cond, profile)
        if why_not is None:
            cond = lay.apply(cond, size, profile)
            notes = tuple(lay.assumptions(size, profile))
        else:
            cond = cond.touch(ENGINE_STARTUP, f"{name}: not applied")
            notes = (f"not applied here: {why_not}", *lay.assumptions(size, profile))
        after = compute_budget(size, profile, cond)
        applied.append(Applied(
            name=name, summary=lay.summary,
            removes_low=before.low - after.low, removes_high=before.high - after.high,
            monthly_cost=lay.monthly_cost(size, profile),
            assumptions=notes,
        ))
        factor *= lay.throughput_factor(profile)
        before = after
    return Stack(first, before, tuple(applied), cond, factor)



def _bootstrap_row(path: str | Path) -> tuple[Any, Any]:
    """The ``Comparison`` in ``path`` and its ``bootstrap`` row, measured on both sides."""
    from pydantic import ValidationError

    from coldscope.analysis.comparison import Comparison
    from coldscope.util.config_file import read_mapping
    data = read_mapping(path, "compare document")
    try:
        doc = Comparison.model_validate(data)
    except ValidationError:
        raise ColdscopeError(f"{path} is not a `coldscope compare --json` output (a vs b, per "
                             "stage): a standby launcher's saving is read from one") from None
    if doc.a.standby is not None or doc.b.standby is None:
        raise ColdscopeError(f"{path} is not a compare of the default start-up (a) against the "
                             "same command through a standby launcher (b): run `coldscope "
                             "compare ... --b-standby NAME --json`")
    row = doc.stages.get(BOOTSTRAP)
    if row is None or row.a_mean is None or row.b_mean is None or row.delta is None:
        raise ColdscopeError(f"{path}: the compare has no bootstrap measured on both sides "
                             "(a: the default start-up, b: through the launcher)")
    if row.a_mean <= 0:
        raise ColdscopeError(f"{path}: a's bootstrap is {row.a_mean:g} s: nothing to take a "
                             "share of")
    return doc, row


def _measured(path: str | Path, doc: Any, row: Any, spread: str, what: str) -> str:
    cache = f", {doc.cache} cache" if doc.cache else ""
    return (f"measured: {Path(path).name}, bootstrap {row.a_mean:.2f} s (a, default) -> "
            f"{row.b_mean:.2f} s (b, through launcher {doc.b.standby}), b - a "
            f"{row.delta:+.2f} s, {spread}, "
            f"{row.a_n} + {row.b_n} runs{cache}: {what}")


def standby_share_from_compare(path: str | Path) -> Range:
    """The standby launcher's ``bootstrap_saved`` measured by ``coldscope compare --json``: a
    the default start-up, b the same command through the launcher (``--b-standby NAME``).

    The share is b's bootstrap saving over a's bootstrap: ``-delta / a_mean`` of the
    ``bootstrap`` row, low..high from the row's 95 % interval (``-high / a_mean`` ..
    ``-low / a_mean``; the point value on both ends when a side has fewer than 2 runs), kept
    within 0..1. Only bootstrap counts: what b saves in other stages is not credited. Anything
    but such a document is a one-line ``ColdscopeError``.
    """
    doc, row = _bootstrap_row(path)
    a = row.a_mean

    def share(saved_s: float) -> float:
        return float(min(1.0, max(0.0, saved_s / a)))

    point = share(-row.delta)
    if row.low is None or row.high is None:
        low = high = point
        spread = "no interval (fewer than 2 runs on a side)"
    else:
        low, high = share(-row.high), share(-row.low)
        spread = f"95 % interval {row.low:+.2f} to {row.high:+.2f} s"
    return Range(low=low, high=high,
                 source=_measured(path, doc, row, spread, f"{point:.2f} of bootstrap"))


def standby_seconds_from_compare(path: str | Path) -> tuple[float, str]:
    """The seconds the launcher saved on average in such a compare (``-delta`` of its
    ``bootstrap`` row, at least 0) and where that figure comes from."""
    doc, row = _bootstrap_row(path)
    saved = max(0.0, -float(row.delta))
    spread = ("no interval" if row.low is None or row.high is None
              else f"95 % interval {row.low:+.2f} to {row.high:+.2f} s")
    return saved, _measured(path, doc, row, spread, f"{saved:.2f} s saved")
