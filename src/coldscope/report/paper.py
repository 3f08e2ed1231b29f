"""The paper's published measurements as runs, so the report draws them like the user's own.

Each table of the paper's data becomes ``PaperRun`` records (buckets mapped as in
``coldscope.prediction.paper``): one per model and repetition for the main table's five
iterations, one per model for the figures, which publish means. Each names its ``dataset``
(the figure) and the ``dims`` that figure set apart from the main table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coldscope.core.records import ModelRef, Run
from coldscope.core.stages import BUCKETS, STAGES, UNATTRIBUTED
from coldscope.util.errors import ColdscopeError


class PaperRun(Run):
    """A run from the paper's published tables: a ``Run`` that also names the ``dataset`` (the
    paper's figure) it comes from and the ``dims`` that figure set (they override what
    ``configurations.dimensions`` reads from the run)."""

    dataset: str | None = None
    dims: dict[str, str | None] = {}


#: The main table's dataset name.
PAPER_MAIN = "H100 main table"

#: The paper's datasets: (name, file under the paper dir, dimension values that set it apart).
#: Dimensions a figure does not control stay None, so e.g. the storage figure's two cases are
#: compared with each other but not with the main table.
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
    """The paper's published measurements as runs, one per model and repetition (the main
    table's five iterations) or per model (the figures). Each has a ``dataset`` (the figure)
    and ``dims`` (what the figure varied). Their origin is "log": the paper's numbers were
    parsed from its engine logs."""
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


def paper_table_of(dataset: str | None) -> str | None:
    """The paper table (``figure-10/gpu1``) of a dataset name, as a startup model fitted on
    the paper's data records it; None for stored runs or an unknown name."""
    if dataset is None:
        return None
    if dataset == PAPER_MAIN:
        return "figure-rest"
    for name, rel, _ in PAPER_DATASETS:
        if name == dataset:
            parts = Path(rel).parent.parts
            return "/".join(parts[1:] if parts and parts[0] == "figures" else parts)
    return None


def capture_count(largest: int) -> int:
    """Number of CUDA-graph capture sizes vLLM 0.10 uses for ``--cuda-graph-sizes LARGEST``."""
    return len([s for s in [1, 2, 4, *range(8, largest + 1, 8)] if s <= largest])


def _paper_file(results: tuple[list[str], dict[str, list[Any]]], path: Path, dataset: str,
                dims: Mapping[str, str | None], rep: str,
                default_capture: int) -> list[PaperRun]:
    """The runs of one timings file (``read_comparison``'s labels and metrics)."""
    from coldscope.prediction.paper import BUCKET_METRICS, TOTAL_METRIC, model_name
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
        for bucket, metrics in BUCKET_METRICS.items():
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
