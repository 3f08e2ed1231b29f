"""The paper's artifact format, mapped onto our buckets at this one edge.

"Breaking the Ice: Analyzing Cold Start Latency in vLLM" (MLSys 2026) publishes
``*comparison_results.json`` (``{"labels": [log names], "data": {metric: [seconds|null]}}``),
``models_config.json`` (features per model) and ``params.json`` (published parameter counts).

Metric -> bucket (checked on every row: the six stages plus ``unattributed`` add up to
``actual_total_time``, because ``total_time`` is the sum of the metrics mapped here):

| bucket | paper metrics |
|---|---|
| bootstrap | framework_bootstrap (detect_platform + llm_imports + get_model_info + worker_init) |
| tokenizer | tokenizer_init |
| model_loading | model_loading (load_weights + model_init) |
| torch_compile | dynamo_transform_time + graph_compile_cached + graph_compile_general_shape |
| kv_cache_profiling | kv_cache_profiling (memory profiling minus compile) |
| cuda_graph_capture | graph_capturing |
| unattributed | actual_total_time - total_time (time no log line accounts for) |

Note the paper's ``torch.compile`` metric is the Dynamo transform only; ``init_engine`` is the
sum of compile, profiling and capture, so neither is used.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    TOKENIZER,
    TORCH_COMPILE,
    UNATTRIBUTED,
)
from coldscope.prediction.core import Observation
from coldscope.prediction.features import features_from_paper
from coldscope.util.errors import ColdscopeError

#: bucket -> (paper metrics summed; a null metric counts as 0 when others are present)
BUCKET_METRICS: dict[str, tuple[str, ...]] = {
    BOOTSTRAP: ("framework_bootstrap",),
    TOKENIZER: ("tokenizer_init",),
    MODEL_LOADING: ("model_loading",),
    TORCH_COMPILE: ("dynamo_transform_time", "graph_compile_cached",
                    "graph_compile_general_shape"),
    KV_CACHE_PROFILING: ("kv_cache_profiling",),
    CUDA_GRAPH_CAPTURE: ("graph_capturing",),
}
TOTAL_METRIC = "actual_total_time"
STAGE_SUM_METRIC = "total_time"

#: Mamba-hybrid models of the paper (its README: "granite4.0-h-*"); their features cannot tell.
HYBRID_PREFIXES = ("granite4.0-h-",)

#: vLLM 0.10.1.1's default number of CUDA-graph capture sizes (the paper's predictor uses 67).
PAPER_CAPTURE_SIZES = 67

#: The main table's setting (the paper's README for this data).
PAPER_ENVIRONMENT = {
    "gpu": "NVIDIA H100 NVL", "cpu": "AMD EPYC 9354", "engine": "vllm 0.10.1.1 (V1 engine)",
    "torch": "2.7.1", "compile_cache": "warm", "weights": "page cache or PCIe 5.0 SSD",
    "statistic": "mean of 5 runs per model (a warm-up run excluded)",
}

DEFAULT_TIMINGS = Path("figures") / "figure-rest" / "avg_comparison_results.json"

#: Where the weights came from in each table (the data's README, "Where the weights came from":
#: ``load_weights`` / bytes, median per table). Keyed by the table's directory under figures/.
PAPER_STORAGE: dict[str, dict[str, Any]] = {
    "figure-rest": {"page_cache": "cold", "kind": "PCIe 5.0 SSD", "seconds_per_gb": 1.835,
                    "source": "paper data README: weights read from the SSD for nearly every "
                              "model (1.835 s/GB median, 0.126-1.858)"},
    "figure-13/case1": {"page_cache": "cold", "kind": "PCIe 5.0 SSD", "seconds_per_gb": 1.835,
                        "source": "paper data README: SSD, page cache dropped"},
    "figure-13/case0": {"page_cache": "hot", "kind": "dram", "seconds_per_gb": 0.122,
                        "source": "paper data README: DRAM page cache"},
    "figure-7": {"page_cache": "hot", "kind": "dram", "seconds_per_gb": 0.125,
                 "source": "paper data README: page cache (0.12-0.13 s/GB)"},
    "figure-9": {"page_cache": "hot", "kind": "dram", "seconds_per_gb": 0.125,
                 "source": "paper data README: page cache (0.12-0.13 s/GB)"},
    "figure-10/gpu1": {"page_cache": "hot", "kind": "dram", "seconds_per_gb": 0.125,
                       "source": "paper data README: page cache (0.12-0.13 s/GB)"},
    "figure-15": {"page_cache": "hot", "kind": "dram", "seconds_per_gb": 0.125,
                  "source": "paper data README: page cache (0.12-0.13 s/GB)"},
    "figure-11/cpu1": {"page_cache": "hot", "kind": "dram", "seconds_per_gb": 0.180,
                       "source": "paper data README: page cache, slower host memory path"},
    "figure-14": {"page_cache": "hot", "kind": "dram", "seconds_per_gb": 0.101,
                  "source": "paper data README: page cache"},
}

#: The machine of each table where it is not the main table's (the data's README).
PAPER_MACHINES: dict[str, dict[str, str]] = {
    "figure-10/gpu1": {"gpu": "NVIDIA L40S", "node": "L40S node (figure 10)"},
    "figure-11/cpu1": {"cpu": "Intel Xeon", "node": "Xeon node (figure 11; timestamps at "
                                                    "one-second resolution)"},
}

_LABEL = re.compile(r"output_model_(.+?)(?:_|\.txt|$)")


def model_name(label: str) -> str:
    """The model of a paper log label: after ``output_model_`` up to the next ``_`` or ``.txt``."""
    m = _LABEL.search(label)
    if not m:
        raise ColdscopeError(f"paper label {label!r} names no model (expected output_model_...)")
    return m.group(1)


def paper_features(paper_dir: str | Path) -> dict[str, Any]:
    """name -> ModelFeatures of every model in ``models_config.json`` (+ ``params.json``)."""
    root = Path(paper_dir)
    configs = _read(root / "models_config.json")
    params_path = root / "params.json"
    params = _read(params_path) if params_path.is_file() else {}
    for name, entry in configs.items():
        if not isinstance(entry, dict):
            raise ColdscopeError(f"{root / 'models_config.json'}: the entry of {name!r} is not "
                                 "a mapping")
    return {str(name): features_from_paper(entry, name=str(name), params=params.get(name),
                                           hybrid=str(name).startswith(HYBRID_PREFIXES))
            for name, entry in configs.items()}


def observations_from_paper(paper_dir: str | Path,
                            timings: str | Path | None = None) -> list[Observation]:
    """One observation per model row of a paper ``*comparison_results.json``."""
    root = Path(paper_dir)
    if not root.is_dir():
        raise ColdscopeError(f"paper data directory {root} does not exist")
    path = Path(timings) if timings else root / DEFAULT_TIMINGS
    labels, data = read_comparison(path)
    features = paper_features(root)
    observations = []
    for i, label in enumerate(labels):
        name = model_name(label)
        if name not in features:
            raise ColdscopeError(f"{path}: model {name!r} has no entry in models_config.json")
        total = metric(data, TOTAL_METRIC, i, path)
        if total is None:
            continue
        buckets: dict[str, float | None] = {}
        for bucket, metrics in BUCKET_METRICS.items():
            values = [metric(data, m, i, path) for m in metrics]
            known = [v for v in values if v is not None]
            buckets[bucket] = sum(known) if known else None
        stage_sum = metric(data, STAGE_SUM_METRIC, i, path)
        if stage_sum is not None:
            buckets[UNATTRIBUTED] = total - stage_sum
        observations.append(Observation(name, features[name], buckets, float(total)))
    if not observations:
        raise ColdscopeError(f"empty training set: no row of {path} has {TOTAL_METRIC}")
    return observations


def read_comparison(path: Path) -> tuple[list[str], dict[str, list[Any]]]:
    """``(labels, data)`` of a ``*comparison_results.json``, its shape checked (a list of log
    names; metric -> list); read each value with ``metric``, which checks it."""
    results = _read(path)
    labels, data = results.get("labels"), results.get("data")
    if not isinstance(labels, list) or not isinstance(data, dict) \
            or not all(isinstance(v, list) or v is None for v in data.values()):
        raise ColdscopeError(f"{path} is not a paper comparison_results.json "
                             "(expected labels: [names] and data: {metric: [seconds]})")
    for i, label in enumerate(labels):
        if not isinstance(label, str):
            raise ColdscopeError(f"{path}: labels[{i}] is not a log name")
    return labels, data


def paper_environment(paper_dir: str | Path, timings: str | Path | None = None) -> dict[str, Any]:
    """The measurement setting: the README's facts plus the figure's ``env.json``."""
    root = Path(paper_dir)
    path = Path(timings) if timings else root / DEFAULT_TIMINGS
    env: dict[str, Any] = dict(PAPER_ENVIRONMENT)
    env_file = path.parent / "env.json"
    if env_file.is_file():
        config = _read(env_file)
        env["env"] = config.get("env", {}) if isinstance(config.get("env", {}), dict) else {}
        flags = config.get("default_params", {})
        env["flags"] = flags if isinstance(flags, dict) else {}
    env["source"] = str(path)
    table = paper_table(root, path)
    env.update(PAPER_MACHINES.get(table or "", {}))
    storage = paper_storage(root, path)
    if storage is not None:
        env["storage"] = storage
        env["weights"] = storage["source"]
    env["table"] = table
    return env


def paper_table(paper_dir: str | Path, timings: str | Path) -> str | None:
    """The table of a timings file: its directory under ``figures/`` (``figure-10/gpu1``)."""
    parent = Path(timings).resolve().parent
    figures = (Path(paper_dir) / "figures").resolve()
    try:
        rel = parent.relative_to(figures)
    except ValueError:
        return None
    parts = rel.parts
    if parts and parts[-1] in ("uncached",) or (len(parts) >= 2 and parts[-2] == "iterations"):
        parts = parts[:1]  # figure-rest's single runs share its setting
    return "/".join(parts) or None


def paper_storage(paper_dir: str | Path,
                  timings: str | Path | None = None) -> dict[str, Any] | None:
    """The storage setting of a paper table (None for a file outside the known tables)."""
    path = Path(timings) if timings else Path(paper_dir) / DEFAULT_TIMINGS
    table = paper_table(paper_dir, path)
    setting = PAPER_STORAGE.get(table or "")
    return dict(setting) if setting else None


#: Longest start-up (or stage) a timings file may report, in seconds: a day. Beyond it (or below
#: zero) the number is not a measured start-up.
MAX_SECONDS = 86_400.0


def metric(data: dict[str, list[Any]], key: str, i: int, where: Path) -> float | None:
    """Row ``i`` of metric ``key`` in seconds, None when absent; a value that is not a number
    of seconds in [0, MAX_SECONDS] is refused (``unattributed``, a difference, may be below 0
    and is not read here)."""
    values = data.get(key)
    if values is None or i >= len(values) or values[i] is None:
        return None
    value = values[i]
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 <= value <= MAX_SECONDS:
        raise ColdscopeError(f"{where}: {key}[{i}] = {str(value)[:40]!r} is not a number of "
                             f"seconds in 0-{MAX_SECONDS:g}")
    return float(value)


def _read(path: Path) -> Any:
    """A paper JSON file through the one reader of user files (one-line errors)."""
    from coldscope.util.config_file import read_mapping
    return read_mapping(path, "paper data file")
