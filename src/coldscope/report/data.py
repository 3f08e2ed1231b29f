"""Chart data for the report: pure functions of runs, model features and a startup model.

Every function here takes typed runs (``coldscope.core.records.Run``; the paper's published tables
become ``PaperRun``, a run that also names its dataset and dimensions) and ``ModelFeatures``,
and returns plain JSON-able dicts; ``coldscope.report.html`` draws them. Seconds are floats
throughout; times inside one run are seconds since the engine's launch.

Runs are grouped into *configurations*: runs whose ``dimensions`` (model, cache, eager or
compiled, load format, weights' storage, capture sizes, engine version, machine, label) are all
equal are repetitions of one configuration, and the report shows their mean and spread.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from coldscope.capture.environment import machine_name
from coldscope.core.records import ModelRef, Run
from coldscope.core.stages import (
    BOOTSTRAP,
    BUCKETS,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    STAGES,
    TOKENIZER,
    TORCH_COMPILE,
    UNATTRIBUTED,
    stage_of,
)
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.launch.releases import Change, ReleasesResult
#: What a run's configuration is made of, in the order group names show them.
DIMENSIONS: tuple[str, ...] = ("model", "cache", "mode", "load_format", "weights",
                               "capture_sizes", "env", "engine", "machine", "label")

DIMENSION_TITLES: dict[str, str] = {
    "model": "model", "cache": "cache", "mode": "eager vs compiled", "load_format": "load format",
    "weights": "weights' storage", "capture_sizes": "CUDA-graph capture sizes",
    "env": "engine environment", "engine": "engine version", "machine": "machine", "label": "label",
}

#: The total of a run (launch to ready) as a pseudo-bucket in tables and ratios.
TOTAL = "time_to_ready"

#: Durations below this (seconds) are too small for a meaningful ratio.
RATIO_FLOOR_S = 0.005

#: At most this many timelines (one representative run per configuration) go into a report.
MAX_TIMELINES = 8

#: At most this many series (configurations other than the model) per scaling panel.
MAX_SCALING_SERIES = 3


# -- configurations ----------------------------------------------------------------------------

class PaperRun(Run):
    """A run from the paper's published tables: a ``Run`` that also names the ``dataset`` (the
    paper's figure) it comes from and the ``dims`` that figure set (they override what
    ``dimensions`` reads from the run)."""

    dataset: str | None = None
    dims: dict[str, str | None] = {}


def dataset_of(run: Run) -> str | None:
    return run.dataset if isinstance(run, PaperRun) else None


def dimensions(run: Run) -> dict[str, str | None]:
    """The configuration of a run, one string (or None: not known / not controlled) per
    dimension. A ``PaperRun``'s own ``dims`` override."""
    name = run.model.name or (Path(run.model.path).name if run.model.path else None)
    engine = run.engine
    if engine.enforce_eager or engine.compile is False:
        mode = "eager"
    elif engine.name or engine.argv or engine.compile is not None:
        mode = "compiled"
    else:
        mode = None
    version = engine.version
    dims: dict[str, str | None] = {
        "model": name,
        "cache": run.cache,
        "mode": mode,
        "load_format": engine.load_format,
        "weights": "page cache dropped" if str(run.page_cache or "").startswith("done")
        else None,
        "capture_sizes": _capture_sizes(engine.argv),
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


def _capture_sizes(argv: Sequence[str]) -> str | None:
    """Number of CUDA-graph capture sizes on the engine's command line, as its adapter reads
    it (``coldscope.engines``), if any."""
    if not argv:
        return None
    from coldscope.engines import resolve
    n = resolve(argv).capture_sizes(argv)
    return str(n) if n else None


def group_runs(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """Configurations with their runs, in order of first appearance.

    A group: ``key`` (stable id), ``dataset`` (the paper's figure; None for stored runs),
    ``dims``, ``name`` (the values of the dimensions that vary among all runs), ``runs``.
    """
    runs = list(runs)
    all_dims = [dimensions(r) for r in runs]
    varying = varying_dimensions(all_dims)
    groups: dict[tuple, dict[str, Any]] = {}
    for run, dims in zip(runs, all_dims, strict=True):
        key = (dataset_of(run), *(dims[d] for d in DIMENSIONS))
        group = groups.get(key)
        if group is None:
            shown = [dims[d] for d in varying if dims[d] is not None] or [dims["model"] or "runs"]
            group = groups[key] = {
                "key": f"g{len(groups) + 1}", "dataset": dataset_of(run), "dims": dims,
                "name": " · ".join(str(v) for v in shown), "runs": [],
            }
        group["runs"].append(run)
    return list(groups.values())


def varying_dimensions(all_dims: Sequence[Mapping[str, str | None]]) -> list[str]:
    """The dimensions that take more than one value (None counts as a value)."""
    return [d for d in DIMENSIONS if len({dims.get(d) for dims in all_dims}) > 1]


# -- statistics --------------------------------------------------------------------------------

def summary(values: Iterable[float | None]) -> dict[str, float | int] | None:
    """n, mean, sample standard deviation (0 for one value), min and max of the known values."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return None
    return {"n": len(known), "mean": statistics.fmean(known),
            "sd": statistics.stdev(known) if len(known) > 1 else 0.0,
            "min": min(known), "max": max(known)}


def bucket_value(run: Run, bucket: str) -> float | None:
    """Seconds of one bucket of a run, or of the whole start-up for ``TOTAL``."""
    if bucket == TOTAL:
        return run.time_to_ready_s
    return run.stages.get(bucket)


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> dict[str, Any] | None:
    """Least-squares line ``y = intercept + slope x`` and Pearson's r (the standard library's
    ``statistics``); None with fewer than two distinct x or three points (r would say nothing),
    r is None when y is constant."""
    n = len(xs)
    if n < 3 or len(set(xs)) < 2:
        return None
    slope, intercept = statistics.linear_regression(xs, ys)
    r = statistics.correlation(xs, ys) if len(set(ys)) > 1 else None
    return {"slope": slope, "intercept": intercept, "r": r, "n": n}


# -- 1. breakdown ------------------------------------------------------------------------------

def breakdown(groups: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration, per bucket (and the total): mean and spread over its repetitions.
    ``short`` names a configuration by the dimensions that vary within its dataset.

    The bucket means of a configuration stack to its mean time to ready, because each run's
    buckets sum to its own time to ready.
    """
    rows = []
    within: dict[Any, list[str]] = {}
    for g in groups:
        if g["dataset"] not in within:
            within[g["dataset"]] = varying_dimensions(
                [h["dims"] for h in groups if h["dataset"] == g["dataset"]])
    ordered = list(groups)
    # Engine versions read in version order (0.9 before 0.10, rc before its release), whatever
    # order the runs were made in; other configurations keep their order of first appearance.
    ordered.sort(key=lambda g: _natural(g["dims"].get("engine"))
                 if "engine" in within[g["dataset"]] else (2,))
    ordered.sort(key=lambda g: list(within).index(g["dataset"]))
    for g in ordered:
        runs = g["runs"]
        shown = [str(g["dims"][d]) for d in within[g["dataset"]] if g["dims"][d] is not None]
        na = set().union(*(set(r.not_applicable) for r in runs))
        rows.append({
            "key": g["key"], "name": g["name"], "dataset": g["dataset"], "n": len(runs),
            "short": " · ".join(shown) or g["name"], "dims": g["dims"],
            "buckets": {b: summary(bucket_value(r, b) for r in runs) for b in BUCKETS},
            "total": summary(bucket_value(r, TOTAL) for r in runs),
            "first_token": summary(r.first_token_s for r in runs),
            "not_applicable": sorted(na),
            "sources": _sources(runs),
        })
    return rows


def _sources(runs: Sequence[Run]) -> dict[str, str]:
    """The evidence sources that backed each stage across the runs (e.g. ``span``)."""
    seen: dict[str, set[str]] = {}
    for r in runs:
        for stage, source in r.sources.items():
            seen.setdefault(stage, set()).add(source)
    return {s: "/".join(sorted(v)) for s, v in seen.items()}


# -- 2. timeline -------------------------------------------------------------------------------

#: Process roles in the order their lanes are drawn.
ROLE_ORDER = ("api_server", "engine_core", "worker", "engine", "helper")


def representative(runs: Sequence[Run]) -> Run:
    """The run whose time to ready is closest to the median of its configuration."""
    known = [r for r in runs if r.time_to_ready_s is not None] or list(runs)
    ttrs = [r.time_to_ready_s or 0.0 for r in known]
    med = statistics.median(ttrs)
    return min(known, key=lambda r: abs((r.time_to_ready_s or 0.0) - med))


def timeline(run: Run) -> dict[str, Any]:
    """One run as a per-process Gantt: lanes of evidence intervals (stages on the first row,
    sub-steps below; overlapping bars of one row are packed onto extra rows), the reconciled
    stage segments, the gaps no evidence explains, and the ready / first-token marks. A stage
    or sub-step seen several times in one process (two sources, or nested in itself) is drawn
    once, as the trace export does (``trace_export.merge_evidence``)."""
    from coldscope.export.trace import merge_evidence
    intervals = run.intervals
    by_name: dict[tuple[str, Any, str], list[tuple[float, float, str]]] = {}
    for iv in intervals:  # per process and name: one source, overlaps merged (no stage twice)
        by_name.setdefault((iv.process or "engine", iv.pid, iv.name), []).append(
            (iv.start, iv.end, iv.source or ""))
    lanes: dict[tuple[str, Any], dict[str, Any]] = {}
    for (process, pid, name), items in by_name.items():
        lane = lanes.setdefault((process, pid), {"process": process, "pid": pid, "bars": []})
        for start, end, source, _ in merge_evidence(items):
            lane["bars"].append({
                "name": name, "stage": stage_of(name), "depth": 1 if "/" in name else 0,
                "start": start, "end": end, "seconds": end - start, "source": source})
    ordered = sorted(lanes.values(), key=lambda ln: (
        ROLE_ORDER.index(ln["process"]) if ln["process"] in ROLE_ORDER else len(ROLE_ORDER),
        min(b["start"] for b in ln["bars"])))
    for lane in ordered:
        lane["rows"] = _pack(lane.pop("bars"))
    segments = [{"bucket": s.bucket, "start": s.start, "end": s.end,
                 "seconds": s.end - s.start} for s in run.segments]
    if not segments and not intervals:
        segments = _sequential_segments(run)
    gaps = [s for s in segments if s["bucket"] == UNATTRIBUTED]
    return {
        "run": run.id, "time_to_ready": run.time_to_ready_s,
        "first_token": run.first_token_s, "lanes": ordered, "segments": segments,
        "gaps": gaps, "sources": dict(run.sources),
        "sequential": not intervals,
    }


def _pack(bars: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows of non-overlapping bars: depth-0 bars first, then sub-steps, greedily."""
    rows: list[list[dict[str, Any]]] = []
    for depth in (0, 1):
        mine: list[list[dict[str, Any]]] = []
        for bar in sorted((b for b in bars if b["depth"] == depth), key=lambda b: b["start"]):
            for row in mine:
                if row[-1]["end"] <= bar["start"] + 1e-9:
                    row.append(bar)
                    break
            else:
                mine.append([bar])
        rows.extend(mine)
    return rows


def _sequential_segments(run: Run) -> list[dict[str, Any]]:
    """Stage durations laid end to end in stage order (for data with durations only, like the
    paper's logs): not a measured timeline, and drawn as such."""
    t = 0.0
    out = []
    for bucket in BUCKETS:
        v = run.stages.get(bucket)
        if v:
            out.append({"bucket": bucket, "start": t, "end": t + v, "seconds": v})
            t += v
    return out


# -- 5. CPU ------------------------------------------------------------------------------------

#: A core above this utilisation (percent) counts as saturated.
SATURATED_PERCENT = 90.0


def cpu_usage(run: Run) -> dict[str, Any] | None:
    """Per-core utilisation samples of a run, and per bucket: mean utilisation of all cores,
    mean of the busiest core, and mean number of saturated cores, over the samples that fall in
    that bucket's segments. None when the run has no CPU samples."""
    if run.cpu is None or not run.cpu.t or not run.cpu.per_core:
        return None
    t, per_core = run.cpu.t, run.cpu.per_core
    cores = max(len(row) for row in per_core)
    interval = float(run.cpu.interval_s or (t[1] - t[0] if len(t) > 1 else 1.0))
    segments = run.segments
    by_bucket: dict[str, list[list[float]]] = {}
    for ts, row in zip(t, per_core, strict=False):
        # A sample at ts covers (ts - interval, ts]: attribute it to the bucket at its midpoint.
        mid = ts - interval / 2
        for seg in segments:
            if seg.start <= mid < seg.end:
                by_bucket.setdefault(seg.bucket, []).append([float(x) for x in row])
                break
    per_bucket = {}
    for bucket in BUCKETS:
        rows = by_bucket.get(bucket)
        if not rows:
            continue
        per_bucket[bucket] = {
            "samples": len(rows),
            "mean_percent": statistics.fmean(statistics.fmean(r) for r in rows),
            "busiest_core_percent": statistics.fmean(max(r) for r in rows),
            "saturated_cores": statistics.fmean(
                sum(1 for x in r if x >= SATURATED_PERCENT) for r in rows),
        }
    return {"run": run.id, "interval_s": interval, "cores": cores,
            "t": [float(x) for x in t], "per_core": [[float(x) for x in row] for row in per_core],
            "per_bucket": per_bucket}


# -- 3. scaling --------------------------------------------------------------------------------

def _weight_gb(f: Any, dims: Mapping[str, Any]) -> float | None:
    return f.weight_bytes / 1e9 if f.weight_bytes else None


def _tokenizer_mib(f: Any, dims: Mapping[str, Any]) -> float | None:
    return f.tokenizer_bytes / 2**20 if f.tokenizer_bytes else None


def _graph_mib(f: Any, dims: Mapping[str, Any]) -> float | None:
    return f.graph_size / 2**20 if f.graph_size else None


def _weight_x_capture(f: Any, dims: Mapping[str, Any]) -> float | None:
    sizes = dims.get("capture_sizes")
    if not sizes or not f.weight_bytes:
        return None
    return f.weight_bytes / 1e9 * float(sizes)


#: stage -> (feature label, its unit, how to read it from features and the run's dimensions,
#: the dimensions that the feature itself varies with and so do not split series).
SCALING_FEATURES: dict[str, tuple[str, str, Callable[[Any, Mapping[str, Any]], float | None],
                                  tuple[str, ...]]] = {
    BOOTSTRAP: ("weights (GB) — expected flat", "GB", _weight_gb, ()),
    TOKENIZER: ("tokenizer files (MiB)", "MiB", _tokenizer_mib, ()),
    MODEL_LOADING: ("parameter bytes (GB)", "GB", _weight_gb, ()),
    TORCH_COMPILE: ("compiled graph size (MiB)", "MiB", _graph_mib, ()),
    KV_CACHE_PROFILING: ("parameter bytes (GB)", "GB", _weight_gb, ()),
    CUDA_GRAPH_CAPTURE: ("parameter bytes × capture sizes (GB)", "GB", _weight_x_capture,
                         ("capture_sizes",)),
}


def scaling(groups: Sequence[Mapping[str, Any]],
            features: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per stage, measured seconds against the stage's feature, with a fitted line and Pearson r.

    ``features`` maps a model name to its ``ModelFeatures``. Points are configurations (mean and
    min-max of their runs); the line and r are fitted on the individual runs of dense models
    (MoE and hybrid models are drawn but not fitted: their start-up does not scale like a dense
    model's). Runs are split into series by their configuration apart from the model (e.g.
    cold and warm), largest first, at most ``MAX_SCALING_SERIES``.
    """
    panels = []
    for stage, (label, unit, get, own_dims) in SCALING_FEATURES.items():
        series: dict[tuple, dict[str, Any]] = {}
        for g in groups:
            dims = g["dims"]
            f = features.get(dims.get("model") or "")
            if f is None:
                continue
            x = get(f, dims)
            ys = [bucket_value(r, stage) for r in g["runs"]]
            ys = [y for y in ys if y is not None]
            if x is None or not ys:
                continue
            skey = (g["dataset"], *(dims[d] for d in DIMENSIONS
                                    if d != "model" and d not in own_dims))
            s = series.setdefault(skey, {"name": _series_name(g, own_dims), "points": [],
                                         "fit_x": [], "fit_y": []})
            kind = getattr(f, "kind", "dense")
            s["points"].append({"model": dims.get("model"), "x": x, "kind": kind,
                                "group": g["name"], **(summary(ys) or {})})
            if kind == "dense":
                s["fit_x"].extend([x] * len(ys))
                s["fit_y"].extend(ys)
        ranked = sorted(series.values(), key=lambda s: -len({p["model"] for p in s["points"]}))
        kept = []
        for s in ranked[:MAX_SCALING_SERIES]:
            kept.append({"name": s["name"], "points": s["points"],
                         "fit": linear_fit(s.pop("fit_x"), s.pop("fit_y"))})
        panels.append({"stage": stage, "feature": label, "unit": unit, "series": kept,
                       "omitted_series": max(0, len(ranked) - MAX_SCALING_SERIES)})
    return panels


def _series_name(group: Mapping[str, Any], own_dims: tuple[str, ...]) -> str:
    dims = group["dims"]
    parts = [str(dims[d]) for d in DIMENSIONS
             if d != "model" and d not in own_dims and dims.get(d) is not None]
    if group.get("dataset"):
        parts.insert(0, str(group["dataset"]))
    return " · ".join(parts) or "all runs"


# -- 4. comparisons ----------------------------------------------------------------------------

def _natural(value: str | None) -> tuple:
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


_VERSION_IN_TEXT = re.compile(r"(?<![\w.])v?\d+(?:\.\d+)+(?:[.-]?(?:a|b|rc|post|dev)\d*)*"
                              r"(?:\+[\w.]+)?(?![\w.])")


#: Baselines people expect when two values are equally common (cold before warm, ...).
BASELINE_PREFERENCE: dict[str, tuple[str, ...]] = {
    "cache": ("cold", "warm"), "mode": ("compiled", "eager"),
    "load_format": ("auto", "safetensors"),
}


def _preference(dim: str, value: str) -> int:
    prefs = BASELINE_PREFERENCE.get(dim, ())
    return prefs.index(value) if value in prefs else len(prefs)


def comparisons(groups: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-stage ratios between configurations that differ in exactly one dimension.

    For each dimension (cache, eager/compiled, load format, storage, capture sizes, engine
    version, machine, label), configurations equal in every other dimension form a cluster; in
    each cluster the baseline is the value seen in most configurations overall (ties:
    ``BASELINE_PREFERENCE``, then natural order, so older versions first); each other value is
    compared with it: ``ratio = other / baseline`` of the bucket means. A dimension with None
    (not controlled) on either side is not compared. One comparison per (dimension, baseline,
    other), with one pair per cluster (usually one per model). A configuration whose setting is
    mixed (a table whose rows differ in a setting, e.g. where the weights came from) is
    compared with nothing: it would differ in more than the one dimension compared, and it is
    never a reference (``mixed_setting_notes`` says so in the report).
    """
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for dim in DIMENSIONS:
        if dim in ("model", "capture_sizes"):  # capture sizes are a feature: see ``scaling``
            continue
        counts: dict[str, int] = {}
        clusters: dict[tuple, dict[str, list[Mapping[str, Any]]]] = {}
        for g in groups:
            value = g["dims"].get(dim)
            if value is None or _mixed(g):
                continue
            counts[value] = counts.get(value, 0) + 1
            other = tuple(g["dims"].get(d) for d in DIMENSIONS if d != dim)
            clusters.setdefault(other, {}).setdefault(value, []).append(g)
        for members in clusters.values():
            if len(members) < 2:
                continue
            base = min(members, key=lambda v: (-counts[v], _preference(dim, v), _natural(v)))
            for value in sorted(members, key=_natural):
                if value == base:
                    continue
                for a, b in zip(members[base], members[value], strict=False):
                    cmp = out.setdefault((dim, base, value), {
                        "dimension": dim, "title": DIMENSION_TITLES[dim], "baseline": base,
                        "other": value, "pairs": []})
                    cmp["pairs"].append(_pair(a, b))
    for cmp in out.values():
        cmp["geomean"] = {b: _geomean(p["ratios"].get(b) for p in cmp["pairs"])
                          for b in (*BUCKETS, TOTAL)}
    return list(out.values())


def _mixed(group: Mapping[str, Any]) -> list[str]:
    """The dimensions in which a configuration's runs mix settings."""
    return [d for d, v in group["dims"].items() if str(v or "").startswith("mixed")]


def mixed_setting_notes(groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per dataset (or configuration) that mixes settings: shown, never compared."""
    seen: dict[str, list[str]] = {}
    for g in groups:
        dims = _mixed(g)
        if dims:
            name = str(g["dataset"] or g["name"])
            seen.setdefault(name, [f"{DIMENSION_TITLES.get(d, d)}: {g['dims'][d]}"
                                   for d in dims])
    return [f"{name} mixes settings ({'; '.join(what)}): its runs are shown but never compared "
            "with other configurations or used as a reference" for name, what in seen.items()]


def _pair(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    ratios, means = {}, {}
    for bucket in (*BUCKETS, TOTAL):
        sa = summary(bucket_value(r, bucket) for r in a["runs"])
        sb = summary(bucket_value(r, bucket) for r in b["runs"])
        ma, mb = (sa or {}).get("mean"), (sb or {}).get("mean")
        means[bucket] = (ma, mb)
        ratios[bucket] = mb / ma if ma is not None and mb is not None and ma >= RATIO_FLOOR_S \
            and mb >= RATIO_FLOOR_S else None
    return {"model": a["dims"].get("model"), "baseline_group": a["name"],
            "other_group": b["name"], "n": (len(a["runs"]), len(b["runs"])),
            "means": means, "ratios": ratios}


def _geomean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in known)) if known else None


# -- 6. predictions ----------------------------------------------------------------------------

def predictions(groups: Sequence[Mapping[str, Any]], features: Mapping[str, Any],
                startup_model: Any) -> dict[str, Any]:
    """Predicted against measured seconds per bucket and in total, per configuration whose model
    has features and whose setting matches the startup model's (machine, cache, mode, engine,
    load format, storage; a paper table: the table the model was fitted or calibrated on); with
    the intervals and whether the measured mean is inside. Rows of the models the startup model
    was fitted (or calibrated) on, in its own setting, are labelled as such and kept out of the
    coverage: they test nothing. Configurations of another setting are not scored; ``notes``
    says which.

    ``startup_model``: a fitted ``coldscope.prediction.startup_model.StartupModel``.
    """
    file = getattr(startup_model, "file_", None)
    rows, other_setting = [], []
    for g in groups:
        dims = g["dims"]
        f = features.get(dims.get("model") or "")
        if f is None:
            continue
        mismatch = _setting_mismatch(g, file)
        if mismatch:
            other_setting.append(f"{g['name']} ({mismatch})")
            continue
        role = _role(dims.get("model"), file)
        sizes = dims.get("capture_sizes")
        pred = startup_model.predict(f, capture_sizes=int(sizes) if sizes else None)
        cells = {}
        for bucket, sp in pred.stages.items():
            measured = summary(bucket_value(r, bucket) for r in g["runs"])
            cells[bucket] = _cell(sp.s, sp.interval, measured)
        cells[TOTAL] = _cell(pred.total_s, pred.interval,
                             summary(bucket_value(r, TOTAL) for r in g["runs"]))
        rows.append({"group": g["name"] + (f" ({role} row)" if role else ""),
                     "model": dims.get("model"), "role": role or "held out", "cells": cells,
                     "warnings": list(pred.warnings)})
    buckets = [b for b in (*BUCKETS, TOTAL) if any(b in r["cells"] for r in rows)]
    coverage = {}
    for b in buckets:
        inside = [r["cells"][b]["inside"] for r in rows if r["role"] == "held out"
                  and b in r["cells"] and r["cells"][b]["inside"] is not None]
        coverage[b] = (sum(inside) / len(inside)) if inside else None
    notes = []
    if other_setting:
        notes.append(f"predicted vs measured: {len(other_setting)} configuration(s) not scored, "
                     "their setting differs from the startup model's: "
                     + "; ".join(other_setting[:8]) + ("; ..." if len(other_setting) > 8 else ""))
    trained = [r["group"] for r in rows if r["role"] != "held out"]
    if trained:
        notes.append(f"predicted vs measured: {len(trained)} row(s) are the startup model's own "
                     "training or calibration data (labelled, left out of the coverage)")
    return {"level": getattr(startup_model, "level", 0.9), "buckets": buckets, "rows": rows,
            "coverage": coverage, "notes": notes}


def _role(model: str | None, file: Any) -> str | None:
    """``training`` / ``calibration`` when the startup model was fitted on this model's runs."""
    if file is None or model is None:
        return None
    if file.calibration is not None:
        return "calibration" if model in file.calibration.models else None
    return "training" if model in file.trained_on.models else None


def _setting_mismatch(group: Mapping[str, Any], file: Any) -> str | None:
    """Why a configuration's setting is not the startup model's (None: it matches, or the
    model does not record enough to tell)."""
    if file is None:
        return None
    env = file.environment or {}
    dims = group["dims"]
    mixed = _mixed(group)
    if mixed:
        return f"mixed {', '.join(mixed)}"
    if group.get("dataset") is not None or env.get("table"):
        table = env.get("table")
        mine = _paper_table_of(group.get("dataset"))
        if table is None or mine is None:
            return "paper table vs stored runs" if (table is None) != (mine is None) else None
        return None if mine == table else f"paper table {mine}, model's {table}"
    checks = {
        "cache": env.get("cache"),
        "engine": env.get("engine"),
        "load_format": env.get("load_format"),
        "mode": None if "enforce_eager" not in env and "compile" not in env else
        ("eager" if env.get("enforce_eager") or env.get("compile") is False else "compiled"),
    }
    for dim, want in checks.items():
        have = dims.get(dim)
        if want is not None and have is not None and str(have) != str(want):
            return f"{DIMENSION_TITLES.get(dim, dim)} {have}, model's {want}"
    cpu = env.get("cpu_model")
    machine = dims.get("machine")
    if cpu and machine and not str(machine).startswith(str(cpu)):
        return f"machine {machine}, model's {cpu}"
    storage = file.storage.page_cache if file.storage is not None else None
    if storage == "hot" and str(dims.get("weights") or "").startswith("page cache dropped"):
        return "weights read cold, model's from the page cache"
    return None


def _paper_table_of(dataset: str | None) -> str | None:
    """The paper table (``figure-10/gpu1``) of a report dataset name."""
    if dataset is None:
        return None
    if dataset == PAPER_MAIN:
        return "figure-rest"
    for name, rel, _ in PAPER_DATASETS:
        if name == dataset:
            parts = Path(rel).parent.parts
            return "/".join(parts[1:] if parts and parts[0] == "figures" else parts)
    return None


def _cell(predicted: float, interval: tuple[float, float],
          measured: Mapping[str, float] | None) -> dict[str, Any]:
    mean = measured["mean"] if measured else None
    return {"predicted": predicted, "low": interval[0], "high": interval[1],
            "measured": mean, "measured_min": measured["min"] if measured else None,
            "measured_max": measured["max"] if measured else None,
            "inside": None if mean is None else interval[0] <= mean <= interval[1]}


# -- 0. key findings --------------------------------------------------------------------------

#: How many of each kind of key finding the top of the page shows.
KEY_STAGES, KEY_FINDINGS = 3, 3


def key_findings(rows: Sequence[Mapping[str, Any]], cmps: Sequence[Mapping[str, Any]],
                 runs: Sequence[Run]) -> dict[str, Any]:
    """What a reader should see first: the stages that take most of the start-up, the findings
    of the runs (``run.findings``, grouped by id, largest seconds at stake first), and the
    largest change between two compared configurations.

    ``rows``: ``breakdown`` rows (the first dataset is used: for the paper, its main table);
    ``cmps``: ``comparisons``. Stage shares are of the summed mean time to ready over the
    configurations, so each configuration weighs the same however many runs it has.
    """
    first = [r for r in rows if r["dataset"] == rows[0]["dataset"]] if rows else []
    total = sum((r["total"] or {}).get("mean") or 0.0 for r in first)
    stages = []
    for b in BUCKETS:
        if b == UNATTRIBUTED:
            continue
        means = [(r["buckets"].get(b) or {}).get("mean") for r in first]
        known = [m for m in means if m is not None]
        if known and total > 0:
            stages.append({"stage": b, "mean_s": statistics.fmean(known),
                           "share": sum(known) / total})
    stages.sort(key=lambda s: -s["share"])
    by_id: dict[str, dict[str, Any]] = {}
    for run in runs:
        for f in {f.id: f for f in run.findings}.values():  # a run counts once per finding
            entry = by_id.setdefault(f.id, {
                "id": f.id, "stage": f.stage, "runs": 0, "at_stake": [],
                "evidence": f.evidence, "advice": f.advice})
            entry["runs"] += 1
            if f.seconds_at_stake is not None:
                entry["at_stake"].append(f.seconds_at_stake)
    findings = []
    for entry in by_id.values():
        stake = entry.pop("at_stake")
        entry["seconds_at_stake"] = statistics.median(stake) if stake else None
        findings.append(entry)
    findings.sort(key=lambda f: (-(f["seconds_at_stake"] or 0.0), -f["runs"], f["id"]))
    return {"stages": stages[:KEY_STAGES], "findings": findings[:KEY_FINDINGS],
            "findings_total": len(findings), "runs": len(runs),
            "change": _largest_change(cmps)}


def _largest_change(cmps: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The comparison whose time to ready changed most (furthest from 1× on a log scale), with
    the stage that changed most within it."""
    best = None
    for c in cmps:
        g = c["geomean"].get(TOTAL)
        if not g:
            continue
        if best is None or abs(math.log(g)) > abs(math.log(best["ratio"])):
            stage = max((b for b in BUCKETS if c["geomean"].get(b)),
                        key=lambda b: abs(math.log(c["geomean"][b])), default=None)
            best = {"dimension": c["dimension"], "title": c["title"], "baseline": c["baseline"],
                    "other": c["other"], "ratio": g, "pairs": len(c["pairs"]),
                    "stage": stage,
                    "stage_ratio": c["geomean"][stage] if stage else None}
    return best


# -- 7. tune sessions --------------------------------------------------------------------------

#: Roles of a tune session's start-ups that measure their configuration as the search judged
#: it; a ``prime`` start-up is the cold run that leaves a seeded configuration its caches.
TUNE_MEASURING_ROLES = ("baseline", "warm", "trial", "repeat", "confirm")


def tune_runs(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """The runs of each tune session (``campaign.kind == "tune"``), by session id, in order of
    first appearance."""
    out: dict[str, list[Run]] = {}
    for r in runs:
        m = r.campaign
        if m is not None and m.kind == "tune" and m.name:
            out.setdefault(m.name, []).append(r)
    return out


def tune_knobs(run: Run) -> tuple[str, ...]:
    """The knobs a tune start-up applied, in order (its membership's ``flags``)."""
    flags = run.campaign.flags if run.campaign else None
    return () if not flags or flags == "default" else tuple(flags.split("+"))


def inferred_tune_steps(runs: Sequence[Run]) -> list[tuple[str, ...]]:
    """The configurations a session kept, read from its runs alone (when its session file is
    gone): every trial, repeat or prime tries one knob on top of the configuration kept so far,
    and the confirm re-measures the final one. The runs cannot tell whether the session's last
    trial was kept when no confirm followed it; then it is left out."""
    incumbents = {()}
    for r in runs:
        role, knobs = (r.campaign.role if r.campaign else None), tune_knobs(r)
        if role in ("confirm", "warm"):
            incumbents.add(knobs)
        elif role in ("trial", "repeat", "prime") and knobs:
            incumbents.add(knobs[:-1])
    chain: list[tuple[str, ...]] = []
    for knobs in sorted(incumbents, key=len):
        if not chain or (len(knobs) > len(chain[-1]) and knobs[:len(chain[-1])] == chain[-1]):
            chain.append(knobs)
    return chain


def _throughput(run: Run) -> float | None:
    v = (run.verification or {}).get("throughput")
    return float(v) if isinstance(v, int | float) and v > 0 else None


def tune_waterfall(session: str, runs: Sequence[Run],
                   steps: Sequence[Sequence[str]] | None = None,
                   descriptions: Mapping[str, str] | None = None,
                   speedup: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One tune session as a waterfall: the baseline, one step per kept change, the best.

    ``steps`` are the configurations the session kept, in order (each a knob list, the first
    the baseline's ``[]``), as ``coldscope.tuning.report.waterfall`` lists them from the session
    file; without it they are inferred from the runs (``inferred_tune_steps``). Each
    configuration's time to ready and stages are means over its measuring start-ups (not its
    ``prime``), the numbers the search judged it by, so the baseline's and the best's equal the
    session's ``baseline_s`` and ``best_s``. Because every run's stages sum to its time to
    ready, a step's per-stage seconds saved (previous mean minus this one; negative: slower)
    sum to its saving, and the steps' savings sum, stage by stage, from the baseline to the
    best. ``throughput_ratio`` is the configuration's mean serving throughput over the
    baseline's. The best configuration is measured by its confirmation start-ups when it has
    any (not by the trials that selected it); a step measured only by the default's warm
    start-ups is named ``warm caches (the default run again)``. ``speedup``: the session's own
    ``{"vs_cold", "vs_warm"}`` ratios with their intervals, shown as they are. Raises
    ``ColdscopeError`` when a kept configuration has no successful run among ``runs`` (e.g. a
    ``--runs`` selection left it out).
    """
    inferred = steps is None
    chosen = [tuple(s) for s in (inferred_tune_steps(runs) if steps is None else steps)]
    if not chosen or chosen[0] != ():
        chosen.insert(0, ())
    descriptions = descriptions or {}
    out_steps: list[dict[str, Any]] = []
    base_tp: float | None = None
    for i, knobs in enumerate(chosen):
        rs = [r for r in runs if r.status == "ok" and r.time_to_ready_s is not None
              and tune_knobs(r) == knobs and r.campaign is not None
              and r.campaign.role in TUNE_MEASURING_ROLES]
        confirmed = [r for r in rs if r.campaign is not None and r.campaign.role == "confirm"]
        if i == len(chosen) - 1 and confirmed:  # the best, by the runs that did not choose it
            rs = confirmed
        if not rs:
            what = "+".join(knobs) or "the baseline"
            raise ColdscopeError(f"tune session {session}: no successful run of {what} among "
                                 "the chosen runs")
        stages = {b: statistics.fmean([r.stages.get(b) or 0.0 for r in rs]) for b in BUCKETS}
        ttr = statistics.fmean([r.time_to_ready_s for r in rs])
        tps = [t for t in (_throughput(r) for r in rs) if t is not None]
        tp = statistics.fmean(tps) if tps else None
        if i == 0:
            base_tp = tp
        prev = out_steps[-1] if out_steps else None
        before = tuple(prev["knobs"]) if prev else ()
        change = None if i == 0 else (knobs[-1] if knobs[:-1] == before else
                                      "+".join(k for k in knobs if k not in before) or None)
        warm_only = all(r.campaign is not None and r.campaign.role == "warm" for r in rs)
        out_steps.append({
            "name": "baseline" if i == 0 else "warm caches (the default run again)" if warm_only
            else (change or "+".join(knobs)), "change": change,
            "knobs": list(knobs),
            "description": descriptions.get(change) if change else None,
            "runs": [r.id for r in rs], "n": len(rs), "time_to_ready_s": ttr,
            "stages": stages,
            "saved": None if prev is None else {b: prev["stages"][b] - stages[b]
                                                for b in BUCKETS},
            "saved_s": None if prev is None else prev["time_to_ready_s"] - ttr,
            "throughput": tp,
            "throughput_ratio": tp / base_tp if tp is not None and base_tp else None,
        })
    base, best = out_steps[0], out_steps[-1]
    return {
        "session": session, "inferred": inferred, "runs": len(runs),
        "steps": out_steps,
        "baseline_s": base["time_to_ready_s"], "best_s": best["time_to_ready_s"],
        "best_knobs": best["knobs"],
        "speedup": base["time_to_ready_s"] / best["time_to_ready_s"]
        if best["time_to_ready_s"] else None,
        "best_throughput_ratio": best["throughput_ratio"],
        "speedup_intervals": dict(speedup) if speedup else None,
    }


def tune_waterfalls(runs: Sequence[Run], sessions: Mapping[str, Mapping[str, Any]] | None = None,
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """A waterfall (``tune_waterfall``) for every tune session among ``runs``, and a note for
    each that cannot be drawn or whose kept changes were inferred from the runs. ``sessions``:
    session id -> ``{"steps": [...], "descriptions": {...}}`` from its session file."""
    sessions = sessions or {}
    out, notes = [], []
    for sid, rs in tune_runs(runs).items():
        known = sessions.get(sid) or {}
        try:
            w = tune_waterfall(sid, rs, known.get("steps"), known.get("descriptions"),
                               known.get("speedup"))
        except ColdscopeError as exc:
            notes.append(f"{exc}: its waterfall is left out")
            continue
        if w["inferred"]:
            notes.append(f"tune session {sid}: no session file, so its kept changes are read "
                         "from the runs (a last trial with no confirm after it is left out)")
        out.append(w)
    return out, notes


# -- 8. releases -------------------------------------------------------------------------------

#: At most this many ``coldscope releases`` measurements (the newest) get a block of their own.
MAX_RELEASES_MEASUREMENTS = 3

#: Per measurement, this many of the largest stage changes between consecutive releases.
RELEASE_CHANGES = 5


def releases_measurements(runs: Iterable[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """One block (``release_block``) per ``coldscope releases`` measurement among ``runs``
    (membership kind ``releases``), newest first, at most ``MAX_RELEASES_MEASUREMENTS``, and a
    note naming the ones left out."""
    from coldscope.launch.releases import stored
    results = stored(runs)
    notes = []
    if len(results) > MAX_RELEASES_MEASUREMENTS:
        left = [r.name for r in results[MAX_RELEASES_MEASUREMENTS:]]
        notes.append(f"start-up per release: the {MAX_RELEASES_MEASUREMENTS} newest releases "
                     f"measurements are shown; {len(left)} older left out ("
                     + ", ".join(left[:5]) + (", ..." if len(left) > 5 else "") + ")")
    return [release_block(r) for r in results[:MAX_RELEASES_MEASUREMENTS]], notes


def _change(c: Change) -> dict[str, Any]:
    return {"delta": c.delta, "low": c.low, "high": c.high, "verdict": c.verdict}


def release_block(result: ReleasesResult) -> dict[str, Any]:
    """One ``releases`` measurement (a ``coldscope.launch.releases.ReleasesResult``, the numbers
    ``coldscope releases --json`` gives for these runs) as chart data: per release, in the
    order given, the mean seconds of each bucket over its measured start-ups (primes left
    out) stacked from 0 (``segments``; they end at its mean time to ready, since every run's
    buckets sum to its own), its time to ready's spread; between consecutive releases, the
    time-to-ready change and every stage's, each with its 95 % interval and verdict as
    ``coldscope.analysis.comparison`` gives them; and the ``RELEASE_CHANGES`` largest stage changes
    of
    all pairs (by size, whatever their verdict). A release is named by its version when every
    release has a distinct one, else by its spec."""
    versions = [r.engine_version for r in result.releases]
    by_version = None not in versions and len(set(versions)) == len(versions)
    names = {r.spec: (r.engine_version if by_version else None) or r.spec
             for r in result.releases}
    releases = []
    for r in result.releases:
        segments, t = [], 0.0
        for b in BUCKETS:
            v = r.stages.get(b)
            if v:
                segments.append({"bucket": b, "start": t, "end": t + v, "seconds": v})
                t += v
        releases.append({
            "spec": r.spec, "name": names[r.spec], "version": r.engine_version,
            "n": len(r.runs), "runs": list(r.runs), "time_to_ready_s": r.time_to_ready_s,
            "time_to_ready": summary(r.time_to_ready_runs_s),
            "stages": {b: r.stages.get(b) for b in BUCKETS}, "segments": segments,
            "unknown": [b for b in BUCKETS if r.runs and r.stages.get(b) is None],
        })
    deltas, changes = [], []
    for i, dl in enumerate(result.deltas):
        deltas.append({"from": dl.from_, "to": dl.to, "from_name": names[dl.from_],
                       "to_name": names[dl.to], "time_to_ready": _change(dl.time_to_ready),
                       "stages": {b: _change(c) for b, c in dl.stages.items()},
                       "notes": list(dl.notes)})
        for b, c in dl.stages.items():
            if c.delta:
                changes.append({"from": dl.from_, "to": dl.to, "from_name": names[dl.from_],
                                "to_name": names[dl.to], "stage": b, **_change(c),
                                "_order": (-abs(c.delta), i, BUCKETS.index(b))})
    changes.sort(key=lambda c: c.pop("_order"))
    return {"name": result.name, "cache": result.cache, "repeat": result.repeat,
            "args": list(result.args), "runs": sum(r["n"] for r in releases),
            "releases": releases, "deltas": deltas, "largest": changes[:RELEASE_CHANGES]}


# -- the whole report --------------------------------------------------------------------------

def build_report_data(records: Sequence[Run], *,
                      features: Mapping[str, Any] | None = None,
                      startup_model: Any = None, title: str = "coldscope start-up report",
                      source: str = "", notes: Sequence[str] = (),
                      tune: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the page shows, as one JSON-able dict (``html.render_report`` draws it).
    ``tune``: what each tune session's file says it kept (see ``tune_waterfalls``).
    ``releases``: the ``coldscope releases`` measurements among the runs
    (``releases_measurements``; empty when there are none)."""
    records = [r for r in records if r.status == "ok"]
    if not records:
        raise ColdscopeError("no successful runs to report on (see `coldscope runs`)")
    features = features or {}
    groups = group_runs(records)
    timelines: list[dict[str, Any]] = []
    cpus: list[dict[str, Any]] = []
    for g in groups:
        if len(timelines) >= MAX_TIMELINES:
            break
        rep = representative(g["runs"])
        tl = timeline(rep)
        tl["group"] = g["name"]
        tl["n"] = len(g["runs"])
        timelines.append(tl)
        cpu = cpu_usage(rep)
        if cpu is not None:
            cpu["group"] = g["name"]
            cpus.append(cpu)
    rows, cmps = breakdown(groups), comparisons(groups)
    pred = predictions(groups, features, startup_model) if startup_model else None
    waterfalls, tune_notes = tune_waterfalls(records, tune)
    releases, releases_notes = releases_measurements(records)
    return {
        "title": title, "source": source,
        "notes": [*notes, *mixed_setting_notes(groups), *(pred or {}).get("notes", []),
                  *tune_notes, *releases_notes],
        "runs": len(records), "configurations": len(groups),
        "varying": varying_dimensions([g["dims"] for g in groups]),
        "datasets": sorted({str(g["dataset"]) for g in groups if g["dataset"]}),
        "key_findings": key_findings(rows, cmps, records),
        "breakdown": rows,
        "timelines": timelines,
        "cpu": cpus,
        "scaling": scaling(groups, features),
        "comparisons": cmps,
        "predictions": pred,
        "tune": waterfalls,
        "releases": releases,
        "run_table": [run_row(r) for r in records],
    }


def run_row(run: Run) -> dict[str, Any]:
    """One run as a flat row of the runs table (and its CSV)."""
    dims = dimensions(run)
    row: dict[str, Any] = {"id": run.id, "started_at": run.started_at or None}
    row.update({d: dims[d] for d in DIMENSIONS})
    row["time_to_ready_s"] = run.time_to_ready_s
    row["first_token_s"] = run.first_token_s
    for b in BUCKETS:
        row[b] = bucket_value(run, b)
    return row


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV text of flat rows (unknown values empty; floats with 6 decimals at most)."""
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow(["" if r.get(c) is None else
                         (f"{r[c]:.6g}" if isinstance(r[c], float) else r[c]) for c in columns])
    return buf.getvalue()


# -- the paper's data --------------------------------------------------------------------------

#: The paper's datasets: (name, file under the paper dir, dimension values that set it apart).
#: Dimensions a figure does not control stay None, so e.g. the storage figure's two cases are
#: compared with each other but not with the main table.
PAPER_MAIN = "H100 main table"
PAPER_DATASETS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("first run (compile cache may miss)", "figures/figure-rest/uncached/comparison_results.json",
     {"cache": "first run"}),
    ("Fig. 7: TORCH_COMPILE_DISABLE", "figures/figure-7/avg_comparison_results.json",
     {"mode": "eager", "weights": "page cache"}),
    ("Fig. 9: capture sizes", "figures/figure-9/avg_comparison_results.json",
     {"weights": "page cache"}),
    ("Fig. 10: L40S node", "figures/figure-10/gpu1/avg_comparison_results.json",
     {"machine": "L40S node", "weights": "page cache"}),
    ("Fig. 11: Intel Xeon node", "figures/figure-11/cpu1/avg_comparison_results.json",
     {"machine": "Intel Xeon node", "weights": "page cache"}),
    ("Fig. 13: weights in page cache", "figures/figure-13/case0/avg_comparison_results.json",
     {"weights": "page cache"}),
    ("Fig. 13: weights on SSD", "figures/figure-13/case1/avg_comparison_results.json",
     {"weights": "SSD, caches dropped"}),
    ("Fig. 14: load formats", "figures/figure-14/avg_comparison_results.json",
     {"weights": "page cache"}),
    ("Fig. 15: compile cache disabled", "figures/figure-15/avg_comparison_results.json",
     {"cache": "compile cache disabled", "weights": "page cache"}),
    ("vLLM versions (opt-6.7b)", "versions/avg_comparison_results.json", {}),
)

#: Where each paper table's weights came from: the data's README measures it per table
#: (``coldscope.prediction.paper.PAPER_STORAGE``). The main table (and its first runs) read most
#: models from the SSD but not all (0.126-1.858 s/GB): a mixed setting, never a reference.
PAPER_MIXED_WEIGHTS = "mixed: SSD for most models, page cache for some"

#: The main table's setting; each figure differs from it in the dimensions it names.
PAPER_BASE_DIMS = {"cache": "warm", "mode": "compiled", "engine": "vllm 0.10.1.1",
                   "machine": "H100 NVL · EPYC 9354", "weights": PAPER_MIXED_WEIGHTS}

_LOAD_FORMAT = re.compile(r"_load-format_([a-z_]+?)(?:\.txt|$)")
_CAPTURE = re.compile(r"_cuda-graph-sizes_([\d_]+?)(?:\.txt|$)")
_VERSION = re.compile(r"_v(\d+\.\d+\.\d+)(?:\.txt|$)")


def paper_records(paper_dir: str | Path) -> list[PaperRun]:
    """The paper's published measurements as runs (``PaperRun``, buckets mapped as in
    ``coldscope.prediction.paper``), one per model and repetition (the main table's five
    iterations) or per model (the figures, which publish means). Each has a ``dataset`` (the
    figure) and ``dims`` (what the figure varied). Their origin is "log": the paper's numbers
    were parsed from its engine logs."""
    from coldscope.prediction.paper import PAPER_CAPTURE_SIZES, read_comparison
    root = Path(paper_dir)
    if not (root / "models_config.json").is_file():
        raise ColdscopeError(f"{root} is not the paper's data directory (no models_config.json)")
    records: list[PaperRun] = []
    iterations = sorted((root / "figures/figure-rest/iterations").glob("*/comparison_results.json"))
    if not iterations:
        iterations = [root / "figures/figure-rest/avg_comparison_results.json"]
    for path in iterations:
        records += _paper_file(read_comparison(path), path, PAPER_MAIN, {}, path.parent.name,
                               PAPER_CAPTURE_SIZES)
    for name, rel, dims in PAPER_DATASETS:
        path = root / rel
        if path.is_file():
            base: dict[str, str | None] = {**dims}
            if rel.startswith("versions"):
                base.update({"machine": "H100 (versions study)", "cache": None,
                             "weights": None})
            records += _paper_file(read_comparison(path), path, name, base, "mean",
                                   PAPER_CAPTURE_SIZES)
    return records


def capture_count(largest: int) -> int:
    """Number of CUDA-graph capture sizes vLLM 0.10 uses for ``--cuda-graph-sizes LARGEST``."""
    return len([s for s in [1, 2, 4, *range(8, largest + 1, 8)] if s <= largest])


def _paper_file(results: tuple[list[str], dict[str, list[Any]]], path: Path, dataset: str,
                dims: Mapping[str, str | None], rep: str,
                default_capture: int) -> list[PaperRun]:
    from coldscope.prediction.paper import PAPER_METRICS, TOTAL_METRIC, model_name
    from coldscope.prediction.paper import metric as checked_metric
    labels, data = results

    def metric(key: str, i: int) -> float | None:
        return checked_metric(data, key, i, path)

    out = []
    for i, label in enumerate(labels):
        total = metric(TOTAL_METRIC, i)
        if total is None:
            continue
        model = model_name(label).removesuffix("-tensorized")
        stages: dict[str, float | None] = dict.fromkeys(BUCKETS)
        for bucket, metrics in PAPER_METRICS.items():
            known = [v for v in (metric(m, i) for m in metrics) if v is not None]
            stages[bucket] = sum(known) if known else None
        # Unattributed is what the mapped stages leave of the total. (The paper's total_time is
        # their sum in the averaged tables, but not in every single iteration's file.)
        stages[UNATTRIBUTED] = max(0.0, total - sum(v for v in stages.values() if v))
        capture = _CAPTURE.search(label)
        fmt = _LOAD_FORMAT.search(label)
        version = _VERSION.search(label)
        rec_dims: dict[str, str | None] = {**PAPER_BASE_DIMS, "model": model,
                                          "capture_sizes": str(default_capture)}
        rec_dims.update(dims)
        if capture:
            rec_dims["capture_sizes"] = str(len(capture.group(1).strip("_").split("_")))
        if fmt:
            rec_dims["load_format"] = fmt.group(1)
        if version:
            rec_dims["engine"] = f"vllm {version.group(1)}"
        if capture and "_" not in capture.group(1).strip("_"):
            # One value (Figure 9) is vLLM 0.10's largest captured batch size: it captures
            # [1, 2, 4] + every 8th size up to it (its default, 512, gives the paper's 67).
            rec_dims["capture_sizes"] = str(capture_count(int(capture.group(1).strip("_"))))
        out.append(PaperRun(
            id=f"paper:{dataset}:{model}:{rep}", status="ok", origin="log", started_at="",
            dataset=dataset, time_to_ready_s=total, stages=stages,
            sources={s: "log" for s in STAGES if stages.get(s) is not None},
            model=ModelRef(name=model), dims=rec_dims))
    return out
