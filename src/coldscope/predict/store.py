"""Training data from stored runs (the records of ``coldscope.store.Store.runs()``).

Each successful run with a time to ready becomes one observation; its model's features are read
from ``run["model"]["path"]`` (once per path). The startup model is only meaningful for one
setting, so runs must share the cache state (``cold``/``warm``) and the engine flags that change
start-up (enforce-eager, compile, load format); a mix is refused with a one-line error naming
the option that selects one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from coldscope.errors import ColdscopeError
from coldscope.features import ModelFeatures, model_features
from coldscope.predict.fit import Observation
from coldscope.stages import BUCKETS

#: Engine settings that change start-up; runs with different values are not pooled.
SETTING_KEYS = ("enforce_eager", "compile", "load_format")
ENVIRONMENT_KEYS = ("cpu_model", "cpu_cores", "memory_bytes", "gpus", "python", "torch", "vllm",
                    "weights_fs")


def observations_from_runs(
    runs: Iterable[dict[str, Any]],
    cache: str | None = None,
    features_of: Callable[[str], ModelFeatures] = model_features,
) -> tuple[list[Observation], dict[str, Any], list[str]]:
    """(observations, environment, notes) from run records.

    ``cache``: keep only runs of this cache state. ``features_of``: model path -> features
    (injectable for tests). Notes say which runs were skipped and why.
    """
    notes: list[str] = []
    kept: list[dict[str, Any]] = []
    for run in runs:
        rid = run.get("id", "?")
        if run.get("status", "ok") != "ok" or run.get("time_to_ready_s") is None:
            notes.append(f"run {rid}: skipped (not a successful run with a time to ready)")
            continue
        if cache is not None and run.get("cache") != cache:
            continue
        kept.append(run)
    if not kept:
        raise ColdscopeError("empty training set: no successful runs"
                             + (f" with a {cache} cache" if cache else "") + " in the store")
    caches = Counter(str(r.get("cache")) for r in kept)
    if len(caches) > 1:
        raise ColdscopeError(
            f"runs mix cache states ({', '.join(f'{k}: {v}' for k, v in sorted(caches.items()))});"
            " pass --cache cold or --cache warm"
        )
    for key in SETTING_KEYS:
        values = Counter(str((r.get("engine") or {}).get(key)) for r in kept)
        if len(values) > 1:
            raise ColdscopeError(
                f"runs mix engine setting {key} ({', '.join(sorted(values))}); fit each setting "
                "from its own store or label"
            )
    features: dict[str, ModelFeatures] = {}
    observations = []
    for run in kept:
        path = _model_path(run)
        if path is None:
            notes.append(f"run {run.get('id', '?')}: skipped (no model path in the record)")
            continue
        if path not in features:
            try:
                features[path] = features_of(path)
            except ColdscopeError as exc:
                notes.append(f"run {run.get('id', '?')}: skipped ({exc})")
                continue
        stages = run.get("stages") or {}
        buckets = {b: (None if stages.get(b) is None else float(stages[b])) for b in BUCKETS}
        name = (run.get("model") or {}).get("name") or Path(path).name
        observations.append(Observation(f"{name} ({path})" if _dup(name, path, features)
                                        else name, features[path], buckets,
                                        float(run["time_to_ready_s"])))
    if not observations:
        raise ColdscopeError("empty training set: no stored run has a readable model directory")
    return observations, _environment(kept), notes


def _dup(name: str, path: str, features: dict[str, ModelFeatures]) -> bool:
    """Two different model paths with the same name must stay two models."""
    return sum(1 for p in features if Path(p).name == Path(path).name) > 1


def _model_path(run: dict[str, Any]) -> str | None:
    model = run.get("model") or {}
    path = model.get("path") or (run.get("engine") or {}).get("model")
    return str(path) if path else None


def _environment(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The setting the runs share: environment keys and engine flags with one value in all."""
    env: dict[str, Any] = {"cache": runs[0].get("cache"), "runs": len(runs)}
    for key in ENVIRONMENT_KEYS:
        values = {repr((r.get("environment") or {}).get(key)) for r in runs}
        if len(values) == 1:
            env[key] = (runs[0].get("environment") or {}).get(key)
    engine = runs[0].get("engine") or {}
    env["engine"] = f"{engine.get('name', 'vllm')} {engine.get('version', '?')}"
    for key in SETTING_KEYS:
        env[key] = engine.get(key)
    return env
