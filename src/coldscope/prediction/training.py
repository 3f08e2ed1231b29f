"""Training data from stored runs (``coldscope.store.db.Store.runs()``, typed ``Run``).

Each successful run with a time to ready becomes one observation; its model's features are read
from ``run.model.path`` (once per path). The startup model is only meaningful for one setting,
so runs must share the engine (vLLM, SGLang), the cache state (``cold``/``warm``), the engine
flags that change start-up (enforce-eager, compile, load format) and the storage the weights
came from (page cache hot or cold, storage kind, where runs record them); a mix is refused with
a one-line error naming the option that selects one.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.engines import engine_name
from coldscope.prediction.features import ModelFeatures, model_features
from coldscope.prediction.fit import Observation
from coldscope.util.errors import ColdscopeError

#: Engine settings that change start-up; runs with different values are not pooled.
SETTING_KEYS = ("enforce_eager", "compile", "load_format")
#: Machine facts kept in the fitted model's environment when all runs share them.
ENVIRONMENT_KEYS = ("cpu_model", "cpu_cores", "memory_bytes", "gpus", "weights_fs")
#: Package versions kept likewise, with the engine's own package (recorded under its name).
PACKAGE_KEYS = ("python", "torch")
#: Storage facts that change model loading; runs that know different values are not pooled.
STORAGE_KEYS = ("page_cache", "kind")


def observations_from_runs(
    runs: Iterable[Run],
    cache: str | None = None,
    features_of: Callable[[str], ModelFeatures] = model_features,
    page_cache: str | None = None,
) -> tuple[list[Observation], dict[str, Any], list[str]]:
    """(observations, environment, notes) from stored runs.

    ``cache``: keep only runs of this cache state; ``page_cache`` ("hot" or "cold"): only runs
    that recorded the weights' page cache so. ``features_of``: model path -> features
    (injectable for tests). Notes say which runs were skipped and why.
    """
    notes: list[str] = []
    kept: list[Run] = []
    for run in runs:
        if run.status != "ok" or run.time_to_ready_s is None:
            notes.append(f"run {run.id}: skipped (not a successful run with a time to ready)")
            continue
        if cache is not None and run.cache != cache:
            continue
        if page_cache is not None and run.storage.page_cache != page_cache:
            continue
        kept.append(run)
    if not kept:
        raise ColdscopeError("empty training set: no successful runs"
                             + (f" with a {cache} cache" if cache else "")
                             + (f" with the page cache {page_cache}" if page_cache else "")
                             + " in the store")
    caches = Counter(str(r.cache) for r in kept)
    if len(caches) > 1:
        raise ColdscopeError(
            f"runs mix cache states ({', '.join(f'{k}: {v}' for k, v in sorted(caches.items()))});"
            " pass --cache cold or --cache warm"
        )
    engines = Counter(engine_name(r.engine.name) for r in kept)
    if len(engines) > 1:
        raise ColdscopeError(
            f"runs mix engines ({', '.join(f'{k}: {v}' for k, v in sorted(engines.items()))}); "
            "each engine starts up differently, so fit each from its own store or label"
        )
    for key in SETTING_KEYS:
        values = Counter(str(getattr(r.engine, key)) for r in kept)
        if len(values) > 1:
            raise ColdscopeError(
                f"runs mix engine setting {key} ({', '.join(sorted(values))}); fit each setting "
                "from its own store or label"
            )
    for key in STORAGE_KEYS:  # None is "not recorded": it pools with anything
        values = Counter(str(getattr(r.storage, key)) for r in kept
                         if getattr(r.storage, key) is not None)
        if len(values) > 1:
            counts = ", ".join(f"{k}: {v}" for k, v in sorted(values.items()))
            raise ColdscopeError(
                f"runs mix storage {key.replace('_', ' ')} ({counts}); model loading differs "
                "between them, so fit each from its own store or label"
            )
    features: dict[str, ModelFeatures] = {}
    observations = []
    for run in kept:
        path = _model_path(run)
        if path is None:
            notes.append(f"run {run.id}: skipped (no model path in the record)")
            continue
        if path not in features:
            try:
                features[path] = features_of(path)
            except ColdscopeError as exc:
                notes.append(f"run {run.id}: skipped ({exc})")
                continue
        buckets = {b: (None if (v := run.stages.get(b)) is None else float(v)) for b in BUCKETS}
        name = run.model.name or Path(path).name
        observations.append(Observation(f"{name} ({path})" if _dup(name, path, features)
                                        else name, features[path], buckets,
                                        float(run.time_to_ready_s or 0.0)))
    if not observations:
        raise ColdscopeError("empty training set: no stored run has a readable model directory")
    return observations, _environment(kept), notes


def _dup(name: str, path: str, features: dict[str, ModelFeatures]) -> bool:
    """Two different model paths with the same name must stay two models."""
    return sum(1 for p in features if Path(p).name == Path(path).name) > 1


def _model_path(run: Run) -> str | None:
    path = run.model.path or run.engine.model
    return str(path) if path else None


def _environment(runs: list[Run]) -> dict[str, Any]:
    """The setting the runs share: machine facts, package versions, engine flags and storage
    with one value in all (storage: the value the runs that record it agree on)."""
    env: dict[str, Any] = {"cache": runs[0].cache, "runs": len(runs)}
    first = runs[0].environment
    for key in ENVIRONMENT_KEYS:
        values = {repr(getattr(r.environment, key)) for r in runs}
        if len(values) == 1:
            value = getattr(first, key)
            env[key] = value.model_dump() if hasattr(value, "model_dump") else (
                [g.model_dump() for g in value] if isinstance(value, list) else value)
    for key in (*PACKAGE_KEYS, engine_name(runs[0].engine.name)):
        if len({r.environment.package(key) for r in runs}) == 1:
            env[key] = first.package(key)
    engine = runs[0].engine
    env["engine"] = f"{engine_name(engine.name)} {engine.version or '?'}"
    for key in SETTING_KEYS:
        env[key] = getattr(engine, key)
    storage = _storage(runs)
    if storage is not None:
        env["storage"] = storage
    return env


def _storage(runs: list[Run]) -> dict[str, Any] | None:
    """The storage setting the runs were measured under (``StorageSetting`` fields), from the
    runs that record it; None when none does."""
    known = [r.storage for r in runs if r.storage.page_cache or r.storage.kind
             or r.storage.read_bandwidth_bps]
    if not known:
        return None
    setting: dict[str, Any] = {}
    for key in STORAGE_KEYS:
        values = {getattr(s, key) for s in known} - {None}
        if values:
            setting[key] = values.pop()
    bandwidths = [s.read_bandwidth_bps for s in known if s.read_bandwidth_bps]
    if bandwidths:
        setting["read_bandwidth_bps"] = statistics.median(bandwidths)
    sources = sorted({s.source for s in known if s.source})
    setting["source"] = (f"{len(known)} of {len(runs)} stored runs"
                         + (f" ({', '.join(sources)})" if sources else ""))
    return setting
