"""The end-to-end cold-start budget: what a request to a scaled-to-zero endpoint waits for.

Five parts, in order: node provisioning, image pull, weight transfer (download to the node),
weight load (into GPU memory) and engine start-up (the engine's own init, without weight
loading, which the load part counts). Transfers and loads are bytes / bandwidth of the tier the
bytes come from (ServerlessLLM's estimate); provisioning and engine start-up are durations.
Each part has a low and a high estimate in seconds and says where its figure comes from.

A budget is computed from ``Conditions`` (where the weights are, what is skipped, how fast the
engine starts), so that mitigations (``coldscope.planning.mitigations``) compose as changes to the
conditions and their order does not matter.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from coldscope.core.stages import MODEL_LOADING, STAGES
from coldscope.planning.infra import Profile, dtype_bytes
from coldscope.util.errors import ColdscopeError

PROVISIONING = "provisioning"
IMAGE_PULL = "image_pull"
WEIGHT_TRANSFER = "weight_transfer"
WEIGHT_LOAD = "weight_load"
ENGINE_STARTUP = "engine_startup"
MIGRATION = "migration"

#: The budget's parts, in the order a cold start goes through them.
PARTS: tuple[str, ...] = (PROVISIONING, IMAGE_PULL, WEIGHT_TRANSFER, WEIGHT_LOAD, ENGINE_STARTUP)

#: Where the weights are read from for the load part, by where they sit before start-up.
_LOAD_TIER = {"image": "node_disk", "object_store": "node_disk", "node_disk": "node_disk",
              "nvme": "nvme", "dram": "dram", "hbm": "hbm"}


@dataclass(frozen=True)
class Part:
    """One part of the budget: seconds, low and high, and the source of the figure."""

    name: str
    low: float
    high: float
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "low": self.low, "high": self.high, "source": self.source}


@dataclass(frozen=True)
class Budget:
    """The parts of one cold start; ``total`` is their sum (parts run one after another)."""

    parts: tuple[Part, ...]

    @property
    def low(self) -> float:
        return sum(p.low for p in self.parts)

    @property
    def high(self) -> float:
        return sum(p.high for p in self.parts)

    def part(self, name: str) -> Part:
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(name)

    def dominant(self) -> str:
        """The part with the largest high estimate."""
        return max(self.parts, key=lambda p: (p.high, p.low)).name


@dataclass(frozen=True)
class ModelSize:
    """How big the checkpoint is: parameters and bytes; ``kv_bytes_per_token`` 0 = unknown."""

    params: float
    weight_bytes: float
    dtype: str
    name: str | None = None
    kv_bytes_per_token: float = 0.0
    source: str = "--params"


@dataclass(frozen=True)
class EngineEstimate:
    """Engine start-up without weight loading, in seconds, with per-stage ranges when known."""

    low: float
    high: float
    source: str
    stages: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    compile_cold: bool = False
    median: float | None = None


@dataclass(frozen=True)
class Conditions:
    """What a cold start goes through; mitigations change these, the budget follows."""

    engine: EngineEstimate
    weights_from: str
    provision: bool = True
    pull_image: bool = True
    load_speedup: float = 1.0
    overlap_transfer: bool = False
    extra_parts: tuple[Part, ...] = ()
    #: Mitigations that touched each part, shown in the part's source.
    touched: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The engine figure before a standby launcher removed part of its bootstrap (None: no
    #: launcher): a GPU snapshot restores the whole process from this one.
    before_launcher: EngineEstimate | None = None

    def touch(self, part: str, why: str, **changes: Any) -> Conditions:
        touched = dict(self.touched)
        touched[part] = touched.get(part, ()) + (why,)
        return replace(self, touched=touched, **changes)


def size_from_params(params: float, dtype: str, name: str | None = None) -> ModelSize:
    """Model size from a parameter count and a storage dtype (``70e9``, ``bf16`` -> 140 GB)."""
    per = dtype_bytes(dtype)
    return ModelSize(params=params, weight_bytes=params * per, dtype=dtype, name=name,
                     source=f"--params {params:.3g} x {per:g} bytes ({dtype})")


def load_features(path: str | Path) -> Any:
    """``coldscope.prediction.features.model_features(path)``, imported only when a model is
    given."""
    try:
        from coldscope.prediction.features import model_features
    except ImportError:
        raise ColdscopeError(
            "reading --model needs coldscope.prediction.features, which is not installed here; "
            "use --params N --dtype bf16"
        ) from None
    return model_features(path)


def size_from_features(feats: Any, name: str | None, source: str) -> ModelSize:
    """Model size from a ``ModelFeatures``: its weight bytes, else params x bytes per param."""
    weight_bytes = float(getattr(feats, "weight_bytes", 0) or 0)
    params = float(getattr(feats, "params", 0) or 0)
    per = float(getattr(feats, "bytes_per_param", 0) or 0)
    if weight_bytes <= 0 and params > 0 and per > 0:
        weight_bytes = params * per
    if weight_bytes <= 0:
        raise ColdscopeError(f"cannot tell the weight size of {name}; use --params N --dtype bf16")
    return ModelSize(
        params=params or weight_bytes / (per or 2.0),
        weight_bytes=weight_bytes,
        dtype=str(getattr(feats, "dtype", "") or "?"),
        name=name,
        kv_bytes_per_token=_kv_bytes_per_token(feats, per or 2.0),
        source=source,
    )


def _kv_bytes_per_token(feats: Any, per: float) -> float:
    """K and V of one token over all layers (bytes); 0 when the features lack the shape.

    2 x layers x kv heads x head dim x bytes per value (the checkpoint's dtype).
    """
    layers = getattr(feats, "num_layers", None)
    hidden = getattr(feats, "hidden_size", None)
    heads = getattr(feats, "num_heads", None)
    kv_heads = getattr(feats, "num_kv_heads", None) or heads
    head_dim = getattr(feats, "head_dim", None) or (hidden // heads if hidden and heads else None)
    if not layers or not kv_heads or not head_dim:
        return 0.0
    return float(2.0 * layers * kv_heads * head_dim * per)


def gpus_per_replica(size: ModelSize, profile: Profile) -> int:
    """GPUs one replica needs: the profile's figure, else the smallest power of two that fits."""
    if profile.gpus_per_replica:
        return profile.gpus_per_replica
    usable = profile.gpu_spec().memory_bytes * profile.max_weight_fraction
    n = 1
    while n * usable < size.weight_bytes:
        n *= 2
    return n


# --- engine start-up: from a startup model, from measured runs, or the documented default ---


def engine_from_default(profile: Profile) -> EngineEstimate:
    """The profile's engine start-up (the lesson's 10-30 s), plus a cold compile if set."""
    base = profile.engine.startup_s
    if profile.engine.compile_cache == "warm":
        return EngineEstimate(base.low, base.high, f"default: {base.source}")
    pen = profile.engine.cold_compile_penalty_s
    return EngineEstimate(
        base.low + pen.low, base.high + pen.high,
        f"default: {base.source}; + cold compile {pen.low:g}-{pen.high:g} s ({pen.source})",
        compile_cold=True,
    )


def engine_from_prediction(prediction: Any, path: str | None = None) -> EngineEstimate:
    """Engine start-up from a startup model's prediction: total minus the model-loading stage.

    The prediction's 90 % interval on the total gives low and high, shifted by the predicted
    model-loading seconds, because the budget's load part counts weight loading from bytes.
    """
    stages = getattr(prediction, "stages", {}) or {}
    loading = stages.get(MODEL_LOADING)
    loading_s = float(loading.s) if loading is not None else 0.0
    lo, hi = float(prediction.interval.low), float(prediction.interval.high)
    total = float(prediction.total_s)
    per_stage = {
        name: (float(sp.interval.low), float(sp.interval.high))
        for name, sp in stages.items()
        if name != MODEL_LOADING
    }
    where = f" {path}" if path else ""
    return EngineEstimate(
        low=max(0.0, lo - loading_s),
        high=max(0.0, hi - loading_s),
        source=(f"startup model{where}: {total - loading_s:.1f} s predicted "
                f"(90 % interval {lo:.1f}-{hi:.1f} s on the total, minus model_loading "
                f"{loading_s:.1f} s)"),
        stages=per_stage,
        median=total - loading_s,
    )


def _field(run: Any, name: str, default: Any = None) -> Any:
    """A stored run's field, whether it is a ``records.Run`` or (tests, old callers) a dict."""
    if isinstance(run, Mapping):
        return run.get(name, default)
    return getattr(run, name, default)


def engine_seconds_of_run(run: Any) -> float | None:
    """A stored run's start-up without its model-loading stage (seconds), or None."""
    ready = _field(run, "time_to_ready_s")
    if ready is None:
        return None
    loading = (_field(run, "stages") or {}).get(MODEL_LOADING) or 0.0
    return float(ready) - float(loading)


def engine_from_runs(runs: Iterable[Any]) -> EngineEstimate | None:
    """Engine start-up measured in stored runs: median, and min-max as low-high.

    Uses the runs that finished (``status`` ok) with a time to ready; each counts its time to
    ready minus its ``model_loading`` stage. None when there is no such run.
    """
    usable = [r for r in runs if _field(r, "status", "ok") == "ok"]
    values = [v for v in (engine_seconds_of_run(r) for r in usable) if v is not None]
    if not values:
        return None
    per_stage: dict[str, tuple[float, float]] = {}
    for stage in STAGES:
        if stage == MODEL_LOADING:
            continue
        seen = [float(s) for r in usable
                if (s := (_field(r, "stages") or {}).get(stage)) is not None]
        if seen:
            per_stage[stage] = (min(seen), max(seen))
    caches = {_field(r, "cache") for r in usable}
    median = statistics.median(values)
    return EngineEstimate(
        low=min(values),
        high=max(values),
        source=(f"store: median {median:.1f} s of {len(values)} measured run(s) "
                f"({'/'.join(sorted(str(c) for c in caches))} cache; time to ready minus "
                "model_loading), low-high = min-max"),
        stages=per_stage,
        compile_cold=caches == {"cold"},
        median=median,
    )


@dataclass(frozen=True)
class EngineCheck:
    """Does the startup model's engine figure agree with the store's median?"""

    store_median_s: float
    predicted_s: float
    interval: tuple[float, float]
    runs: int
    within: bool

    def as_dict(self) -> dict[str, Any]:
        return {"store_median_s": self.store_median_s, "predicted_s": self.predicted_s,
                "interval": {"low": self.interval[0], "high": self.interval[1]},
                "runs": self.runs, "within": self.within}


def check_engine_init(runs: Iterable[Any], prediction: Any) -> EngineCheck:
    """Compare the store's median engine start-up with the startup model's interval.

    Both sides exclude weight loading the same way (see ``engine_from_runs`` and
    ``engine_from_prediction``); ``within`` is true when the median lies in the interval.
    """
    runs = list(runs)
    measured = engine_from_runs(runs)
    if measured is None or measured.median is None:
        raise ColdscopeError("no finished run with a time to ready to compare with")
    predicted = engine_from_prediction(prediction)
    assert predicted.median is not None
    within = predicted.low <= measured.median <= predicted.high
    return EngineCheck(
        store_median_s=measured.median,
        predicted_s=predicted.median,
        interval=(predicted.low, predicted.high),
        runs=sum(1 for r in runs
                 if _field(r, "status", "ok") == "ok" and engine_seconds_of_run(r) is not None),
        within=within,
    )


# --- the budget ---


def baseline_conditions(profile: Profile, engine: EngineEstimate) -> Conditions:
    """No mitigation: a fresh node, the image pulled, weights where the profile says."""
    return Conditions(engine=engine, weights_from=profile.image.weights_from)


def _transfer(nbytes: float, tier: str, profile: Profile) -> tuple[float, float, str]:
    """Seconds to move ``nbytes`` from ``tier``: (low, high, source)."""
    bw = getattr(profile.bandwidth_bytes_per_s, tier)
    return (nbytes / bw.high, nbytes / bw.low,
            f"{nbytes / 1e9:.1f} GB / {tier} {bw.low / 1e9:.3g}-{bw.high / 1e9:.3g} GB/s "
            f"({bw.source})")


def compute_budget(size: ModelSize, profile: Profile, cond: Conditions) -> Budget:
    """The five parts (plus any a mitigation adds) under ``cond``."""
    parts: list[Part] = []

    def add(name: str, low: float, high: float, source: str) -> None:
        notes = cond.touched.get(name, ())
        if notes:
            source = f"{source} [{'; '.join(notes)}]"
        parts.append(Part(name, low, high, source))

    prov = profile.provisioning_s
    if cond.provision:
        add(PROVISIONING, prov.low, prov.high, prov.source)
    else:
        add(PROVISIONING, 0.0, 0.0, "node already up")

    weights_in_image = cond.weights_from == "image"
    if cond.pull_image:
        nbytes = profile.image.software_bytes + (size.weight_bytes if weights_in_image else 0.0)
        lo, hi, src = _transfer(nbytes, "registry", profile)
        what = "image with weights" if weights_in_image else "image without weights"
        add(IMAGE_PULL, lo, hi, f"{what}: {src}")
    else:
        add(IMAGE_PULL, 0.0, 0.0, "image already on the node")

    load_tier = _LOAD_TIER[cond.weights_from]
    lo, hi, src = _transfer(size.weight_bytes, load_tier, profile)
    load = (lo / cond.load_speedup, hi / cond.load_speedup)
    if cond.weights_from == "object_store":
        t_lo, t_hi, t_src = _transfer(size.weight_bytes, "object_store", profile)
        if cond.overlap_transfer:
            # Streaming overlaps download and load: the slower of the two sets the pace.
            load = (max(load[0], t_lo), max(load[1], t_hi))
            add(WEIGHT_TRANSFER, 0.0, 0.0, f"overlapped with the load: {t_src}")
        else:
            add(WEIGHT_TRANSFER, t_lo, t_hi, t_src)
    elif weights_in_image:
        add(WEIGHT_TRANSFER, 0.0, 0.0, "weights come inside the image (counted in image_pull)")
    else:
        add(WEIGHT_TRANSFER, 0.0, 0.0, f"weights already on the node ({cond.weights_from})")
    add(WEIGHT_LOAD, load[0], load[1], src)

    eng = cond.engine
    add(ENGINE_STARTUP, eng.low, eng.high, eng.source)
    for extra in cond.extra_parts:
        add(extra.name, extra.low, extra.high, extra.source)
    return Budget(tuple(parts))
