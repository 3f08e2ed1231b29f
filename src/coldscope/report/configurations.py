"""Runs grouped into configurations, what every section of the report is drawn per.

Runs whose ``dimensions`` (model, cache, eager or compiled, load format, weights' storage,
capture sizes, engine environment, engine version, machine, label) are all equal are
repetitions of one configuration, and the report shows their mean and spread. A run from the
paper's tables (``coldscope.report.paper.PaperRun``) also names the figure it comes from, its
``dataset``: configurations of different datasets are never merged.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from coldscope.capture.environment import machine_name
from coldscope.core.records import Run
from coldscope.report.paper import PaperRun

#: What a run's configuration is made of, in the order group names show them.
DIMENSIONS: tuple[str, ...] = ("model", "cache", "mode", "load_format", "weights",
                               "capture_sizes", "env", "engine", "machine", "label")

DIMENSION_TITLES: dict[str, str] = {
    "model": "model", "cache": "cache", "mode": "eager vs compiled", "load_format": "load format",
    "weights": "weights' storage", "capture_sizes": "CUDA-graph capture sizes",
    "env": "engine environment", "engine": "engine version", "machine": "machine", "label": "label",
}

#: A configuration: dimension -> its value (None: not known, or not controlled).
Dims = dict[str, str | None]

#: At most this many timelines (one representative run per configuration) go into a report.
MAX_TIMELINES = 8


def dataset_of(run: Run) -> str | None:
    """The paper's figure a run comes from; None for a stored run."""
    return run.dataset if isinstance(run, PaperRun) else None


def dimensions(run: Run) -> Dims:
    """The configuration of a run, one string (or None: not known / not controlled) per
    dimension. A ``PaperRun``'s own ``dims`` override."""
    name = run.model.name or (Path(run.model.path).name if run.model.path else None)
    engine = run.engine
    mode = engine.mode
    version = engine.version
    dims: Dims = {
        "model": name,
        "cache": run.cache,
        "mode": mode,
        "load_format": engine.load_format,
        "weights": "page cache dropped" if str(run.page_cache or "").startswith("done")
        else None,
        "capture_sizes": capture_sizes(engine.argv),
        # Environment settings the run was given (e.g. a tune trial's
        # VLLM_ENABLE_V1_MULTIPROCESSING=0): runs that differ here are different configurations,
        # never repetitions of one, and never a like-for-like pair for another dimension.
        "env": ", ".join(f"{k}={v}" for k, v in sorted(run.env_overrides.items())) or "default",
        "engine": f"{engine.name or 'engine'} {version}" if version else None,
        "machine": machine_name(run.environment),
        "label": run.label,
    }
    if isinstance(run, PaperRun):
        dims.update(run.dims)
    return dims


def capture_sizes(argv: Sequence[str]) -> str | None:
    """Number of CUDA-graph capture sizes on the engine's command line, as its adapter reads
    it (``coldscope.engines``), if any."""
    if not argv:
        return None
    from coldscope.engines import resolve
    n = resolve(argv).capture_sizes(argv)
    return str(n) if n else None


@dataclass(frozen=True)
class Configuration:
    """Runs that repeat one configuration. ``key``: a stable id (``g1``, ``g2``...);
    ``dataset``: the paper's figure (None for stored runs); ``name``: the values of the
    dimensions that vary among all runs reported on."""

    key: str
    dataset: str | None
    dims: Dims
    name: str
    runs: tuple[Run, ...]


def group_runs(runs: Iterable[Run]) -> list[Configuration]:
    """Configurations with their runs, in order of first appearance."""
    runs = list(runs)
    all_dims = [dimensions(r) for r in runs]
    varying = varying_dimensions(all_dims)
    firsts: dict[tuple[str | None, ...], tuple[Run, Dims]] = {}
    members: dict[tuple[str | None, ...], list[Run]] = {}
    for run, dims in zip(runs, all_dims, strict=True):
        key = (dataset_of(run), *(dims[d] for d in DIMENSIONS))
        firsts.setdefault(key, (run, dims))
        members.setdefault(key, []).append(run)
    out = []
    for i, (key, (first, dims)) in enumerate(firsts.items()):
        shown = [dims[d] for d in varying if dims[d] is not None] or [dims["model"] or "runs"]
        out.append(Configuration(key=f"g{i + 1}", dataset=dataset_of(first), dims=dims,
                                 name=" · ".join(str(v) for v in shown),
                                 runs=tuple(members[key])))
    return out


def varying_dimensions(all_dims: Sequence[Mapping[str, str | None]]) -> list[str]:
    """The dimensions that take more than one value (None counts as a value)."""
    return [d for d in DIMENSIONS if len({dims.get(d) for dims in all_dims}) > 1]


def mixed_dimensions(group: Configuration) -> list[str]:
    """The dimensions in which a configuration's runs mix settings (a paper table whose rows
    differ in where the weights came from): such a configuration is shown, never compared."""
    return [d for d, v in group.dims.items() if str(v or "").startswith("mixed")]


_VERSION_IN_TEXT = re.compile(r"(?<![\w.])v?\d+(?:\.\d+)+(?:[.-]?(?:a|b|rc|post|dev)\d*)*"
                              r"(?:\+[\w.]+)?(?![\w.])")

#: A ``natural_key``: (0, text before, version, text after) for a value holding a version,
#: else (1, its text and numbers in turn).
NaturalKey = tuple[int, str, Version, str] | tuple[int, tuple[tuple[int, int | str], ...]]


def natural_key(value: str | None) -> NaturalKey:
    """Sort key that orders ``v0.3.1`` before ``v0.10.0`` and ``8`` before ``56``; values that
    hold a version (``vllm 0.10.0rc1``) are ordered as versions (PEP 440: a release candidate
    before its release, a post-release after it), text around it first."""
    text = str(value or "")
    m = _VERSION_IN_TEXT.search(text)
    if m:
        try:
            v = Version(m.group(0))
        except InvalidVersion:
            pass
        else:
            return (0, text[:m.start()], v, text[m.end():])
    return (1, tuple((0, int(p)) if p.isdigit() else (1, p)
                     for p in re.split(r"(\d+)", text) if p))


def representative(runs: Sequence[Run]) -> Run:
    """The run whose time to ready is closest to the median of its configuration."""
    known = [r for r in runs if r.time_to_ready_s is not None] or list(runs)
    ttrs = [r.time_to_ready_s or 0.0 for r in known]
    med = statistics.median(ttrs)
    return min(known, key=lambda r: abs((r.time_to_ready_s or 0.0) - med))


def representatives(groups: Sequence[Configuration]) -> list[tuple[Configuration, Run]]:
    """The run each of the first ``MAX_TIMELINES`` configurations is drawn by, run by run (its
    timeline, its CPU use)."""
    return [(g, representative(g.runs)) for g in groups[:MAX_TIMELINES]]
