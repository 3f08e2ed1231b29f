"""Training data from stored runs (``coldscope.store.db.Store.runs()``, typed ``Run``).

Each successful run with a time to ready becomes one observation; its model's features are read
from ``run.model.path`` (once per path). The startup model is only meaningful for one setting,
so runs must share the engine (vLLM, SGLang), the cache state (``cold``/``warm``), the engine
flags that change start-up (enforce-eager, compile, load format) and the storage the weights
came from (page cache hot or cold, storage kind, where runs record them); a mix is refused with
a one-line error naming the option that selects one (``--engine``, ``--label``, ``--cache``).

A run saved from a log names its model as the engine logged it (``Qwen/Qwen2.5-7B``,
``./models/llama2-7b-hf``): a path on the machine that served it, not here. ``ModelPlaces``
says where each logged model's config is on this machine (``--model-root DIR``: matched by the
logged name; ``--model-map NAME=DIR``), so a store of saved logs fits a startup model.

``TrainingSet`` is what a fit or a calibration reads, from whichever source: stored runs
(``training_from_runs``, ``training_from_store``) or the paper's artifacts
(``training_from_paper``); ``training_set`` picks the source from what ``coldscope fit`` and
``coldscope calibrate`` are given.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.engines import engine_name
from coldscope.prediction.core import Observation
from coldscope.prediction.features import ModelFeatures, model_features
from coldscope.util.errors import ColdscopeError

#: Engine settings that change start-up; runs with different values are not pooled.
SETTING_KEYS = ("enforce_eager", "compile", "load_format")
#: Machine facts kept in the fitted model's environment when all runs share them.
ENVIRONMENT_KEYS = ("cpu_model", "cpu_cores", "memory_bytes", "gpus", "weights_fs")
#: Package versions kept likewise, with the engine's own package (recorded under its name).
PACKAGE_KEYS = ("python", "torch")
#: Storage facts that change model loading; runs that know different values are not pooled.
STORAGE_KEYS = ("page_cache", "kind")


@dataclass(frozen=True)
class TrainingSet:
    """Measured start-ups ready to fit (or calibrate) a startup model on.

    ``observations``: one per start-up, its bucket seconds and its model's features;
    ``environment``: the machine, packages, engine flags and storage the runs share (kept in
    the fitted model, so a prediction can say where it holds); ``settings``: the engine settings
    the start-ups were measured with that a prediction defaults to (``capture_sizes``);
    ``source``: where they came from (a store file, the paper's directory), as the model
    records it; ``notes``: which runs were skipped and why.
    """

    observations: tuple[Observation, ...]
    environment: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelPlaces:
    """Where the models that runs name are on this machine.

    ``mapping``: logged model name -> directory (or config file), matched case-insensitively
    against the whole logged name, its last two path parts (``org/name``) or its last part;
    ``root``: a directory holding the models, where a logged ``org/name`` is found as
    ``root/org/name``, ``root/name`` or a Hugging Face cache's ``root/models--org--name``
    (its newest snapshot), a logged path by its last part, each part matched
    case-insensitively. A run whose model neither names is read from the path it recorded."""

    root: Path | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)

    def find(self, run: Run) -> str | None:
        """The place of ``run``'s model: mapped, else under the root, else its recorded path
        (None when the run records none)."""
        names = [n for n in (run.engine.model, run.model.path, run.model.name) if n]
        wanted = {k.strip().strip("/").lower(): v for k, v in self.mapping.items()}
        for name in names:
            for key in _name_keys(name):
                if key in wanted:
                    return wanted[key]
        if self.root is not None:
            for name in names:
                found = _under(self.root, name)
                if found is not None:
                    return str(found)
        return _model_path(run)


def _name_keys(name: str) -> list[str]:
    """The forms a logged model name is matched by: whole, ``org/name``, ``name``."""
    parts = [p for p in name.strip().replace("\\", "/").split("/") if p and p != "."]
    keys = [name.strip().strip("/").lower()]
    if len(parts) >= 2:
        keys.append("/".join(parts[-2:]).lower())
    if parts:
        keys.append(parts[-1].lower())
    return list(dict.fromkeys(keys))


def _child(parent: Path, name: str) -> Path | None:
    """``parent``'s entry called ``name``, ignoring case (an exact match first)."""
    exact = parent / name
    if exact.exists():
        return exact
    try:
        return next((c for c in sorted(parent.iterdir()) if c.name.lower() == name.lower()),
                    None)
    except OSError:
        return None


def _under(root: Path, name: str) -> Path | None:
    """Where the logged model ``name`` is under ``root`` (see ``ModelPlaces``)."""
    parts = [p for p in name.strip().replace("\\", "/").split("/") if p and p not in (".", "..")]
    if not parts:
        return None
    tries: list[list[str]] = []
    if len(parts) >= 2:
        tries.append(parts[-2:])
    tries.append(parts[-1:])
    for t in tries:
        place: Path | None = root
        for part in t:
            place = _child(place, part) if place is not None else None
        if place is not None and place.is_dir():
            return place
    if len(parts) >= 2:  # a Hugging Face cache: models--org--name/snapshots/<revision>
        cached = _child(root, f"models--{parts[-2]}--{parts[-1]}")
        snapshots = sorted((cached / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime) \
            if cached is not None and (cached / "snapshots").is_dir() else []
        if snapshots:
            return snapshots[-1]
    return None


def parse_model_map(items: Iterable[str]) -> dict[str, str]:
    """``NAME=DIR`` items (``--model-map``) as a mapping; a one-line error for an item without
    ``=`` or whose place does not exist."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, place = item.partition("=")
        if not sep or not name.strip() or not place.strip():
            raise ColdscopeError(f"--model-map {item!r} is not NAME=DIR (e.g. "
                                 "Qwen/Qwen2.5-7B=/models/qwen2.5-7b)")
        if not Path(place).exists():
            raise ColdscopeError(f"--model-map {item!r}: {place} does not exist")
        out[name.strip()] = place.strip()
    return out


def training_from_runs(runs: Iterable[Run], *, cache: str | None = None,
                       capture_sizes: int | None = None, source: str = "runs",
                       features_of: Callable[[str], ModelFeatures] = model_features,
                       places: ModelPlaces | None = None,
                       ) -> TrainingSet:
    """The training set of ``runs`` (``observations_from_runs``: one setting only, each run's
    model features read from its model directory, found by ``places``). ``capture_sizes``:
    the CUDA-graph capture sizes the runs were measured with, when known (predictions default
    to it)."""
    observations, environment, notes = observations_from_runs(runs, cache=cache,
                                                              features_of=features_of,
                                                              places=places)
    return TrainingSet(tuple(observations), environment,
                       {"capture_sizes": capture_sizes} if capture_sizes else {}, source,
                       tuple(notes))


def training_from_store(store_path: str | Path | None = None, *, cache: str | None = None,
                        capture_sizes: int | None = None,
                        progress: Callable[[str, float | None], None] | None = None,
                        label: str | None = None, engine: str | None = None,
                        places: ModelPlaces | None = None,
                        ) -> TrainingSet:
    """The training set of the runs in the store at ``store_path`` (default: the usual
    store): all of them, or those saved under ``label`` and/or of ``engine`` (a registered
    engine's name). ``places``: where the runs' models are (``ModelPlaces``).
    ``progress(description, fraction)`` is told how the reading goes (reading a large store
    takes most of a fit's time: ``benches/bench_fit_store.py``); the fraction is None while
    the models are read."""
    from coldscope.store.db import Store

    def read(done: int, total: int) -> None:
        if progress is not None:
            progress(f"reading {done}/{total} stored runs", done / total if total else 1.0)

    if engine is not None:
        from coldscope.engines import by_name
        engine = by_name(engine.strip().lower()).name  # else an error naming the known ones
    with Store(store_path, create=False) as store:
        runs = store.runs(status=None, label=label, progress=read)
        source = str(store.path)
        if not runs and label is not None:
            labels = sorted({r.label for r in store.runs(status=None) if r.label})
            raise ColdscopeError(
                f"no stored run has the label {label!r}"
                + (f" (labels in the store: {', '.join(labels)})" if labels else
                   " (no run in the store has a label)"))
    if engine is not None:
        chosen = [r for r in runs if engine_name(r.engine.name) == engine]
        if not chosen:
            raise ColdscopeError(f"no stored run{' labelled ' + repr(label) if label else ''} "
                                 f"is of the engine {engine}")
        runs = chosen
    if label is not None or engine is not None:
        source += "".join(f" ({what} {v})" for what, v in (("label", label), ("engine", engine))
                          if v is not None)
    if progress is not None:
        progress(f"reading the models of {len(runs)} runs", None)
    return training_from_runs(runs, cache=cache, capture_sizes=capture_sizes, source=source,
                              places=places)


def training_from_paper(paper_dir: str | Path, timings: str | Path | None = None, *,
                        capture_sizes: int | None = None) -> TrainingSet:
    """The training set of the paper's artifact directory ("Breaking the Ice", MLSys 2026):
    ``timings`` is the ``comparison_results.json`` to read (default: its figure-rest averages);
    ``capture_sizes`` defaults to the paper's 67."""
    from coldscope.prediction.paper import (
        PAPER_CAPTURE_SIZES,
        observations_from_paper,
        paper_environment,
    )
    return TrainingSet(tuple(observations_from_paper(paper_dir, timings)),
                       paper_environment(paper_dir, timings),
                       {"capture_sizes": capture_sizes or PAPER_CAPTURE_SIZES},
                       str(timings or paper_dir))


def training_set(*, paper_dir: str | Path | None = None, timings: str | Path | None = None,
                 store_path: str | Path | None = None, cache: str | None = None,
                 capture_sizes: int | None = None,
                 progress: Callable[[str, float | None], None] | None = None,
                 label: str | None = None, engine: str | None = None,
                 places: ModelPlaces | None = None) -> TrainingSet:
    """The training set ``coldscope fit`` and ``calibrate`` are given: the paper's artifacts
    when ``paper_dir`` is given, else the store's runs (of one ``cache`` state, ``label`` and
    ``engine`` where given; models found by ``places``)."""
    if paper_dir is not None:
        given = [o for o, v in (("--label", label), ("--engine", engine)) if v is not None]
        if places is not None and (places.root is not None or places.mapping):
            given.append("--model-root/--model-map")
        if given:
            verb = "selects" if len(given) == 1 else "select"
            raise ColdscopeError(f"{', '.join(given)} {verb} stored runs: not with --paper")
        return training_from_paper(paper_dir, timings, capture_sizes=capture_sizes)
    if timings is not None:
        raise ColdscopeError("--timings needs --paper")
    return training_from_store(store_path, cache=cache, capture_sizes=capture_sizes,
                               progress=progress, label=label, engine=engine, places=places)


def observations_from_runs(
    runs: Iterable[Run],
    cache: str | None = None,
    features_of: Callable[[str], ModelFeatures] = model_features,
    page_cache: str | None = None,
    places: ModelPlaces | None = None,
) -> tuple[list[Observation], dict[str, Any], list[str]]:
    """(observations, environment, notes) from stored runs.

    ``cache``: keep only runs of this cache state; ``page_cache`` ("hot" or "cold"): only runs
    that recorded the weights' page cache so. ``features_of``: model path -> features
    (injectable for tests); ``places``: where each run's model is (default: the path it
    recorded). Notes say which runs were skipped and why.
    """
    places = places or ModelPlaces()
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
            "each engine starts up differently: select one with "
            + " or ".join(f"--engine {k}" for k in sorted(engines))
            + " (or runs saved under one label with --label NAME)"
        )
    for key in SETTING_KEYS:
        values = Counter(str(getattr(r.engine, key)) for r in kept)
        if len(values) > 1:
            raise ColdscopeError(
                f"runs mix engine setting {key} ({', '.join(sorted(values))}); fit each setting "
                "on its own: save its runs under one label and pass --label NAME, or use a "
                "store per setting"
            )
    for key in STORAGE_KEYS:  # None is "not recorded": it pools with anything
        values = Counter(str(getattr(r.storage, key)) for r in kept
                         if getattr(r.storage, key) is not None)
        if len(values) > 1:
            counts = ", ".join(f"{k}: {v}" for k, v in sorted(values.items()))
            raise ColdscopeError(
                f"runs mix storage {key.replace('_', ' ')} ({counts}); model loading differs "
                "between them: save each storage's runs under one label and pass --label "
                "NAME, or use a store per storage"
            )
    features: dict[str, ModelFeatures] = {}
    observations = []
    unread: list[str] = []
    for run in kept:
        path = places.find(run)
        if path is None:
            notes.append(f"run {run.id}: skipped (no model path in the record)")
            continue
        if path not in features:
            try:
                features[path] = features_of(path)
            except ColdscopeError as exc:
                notes.append(f"run {run.id}: skipped ({exc})")
                unread.append(run.engine.model or run.model.name or path)
                continue
        buckets = {b: (None if (v := run.stages.get(b)) is None else float(v)) for b in BUCKETS}
        name = run.model.name or Path(path).name
        observations.append(Observation(f"{name} ({path})" if _dup(name, path, features)
                                        else name, features[path], buckets,
                                        float(run.time_to_ready_s or 0.0)))
    if unread and observations:
        notes.append(f"{len(unread)} run(s) skipped for a model not found here "
                     f"({_clip(', '.join(dict.fromkeys(unread)))}): --model-root DIR or "
                     "--model-map NAME=DIR says where each logged model's config is")
    if not observations:
        named = ", ".join(dict.fromkeys(unread)) if unread else ""
        raise ColdscopeError(
            "empty training set: no stored run has a readable model directory"
            + (f" (models: {_clip(named)})" if named else "")
            + "; say where each logged model's config is with --model-root DIR (matched by "
            "the logged name) or --model-map NAME=DIR")
    return observations, _environment(kept), notes


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
