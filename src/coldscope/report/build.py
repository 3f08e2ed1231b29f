"""From a store (or the paper's data) to the page: choose the runs, read their models'
features, build the chart data, render. The only part of the report that reads files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coldscope.errors import ColdscopeError
from coldscope.report.data import build_report_data, paper_records
from coldscope.report.html import render_report


def select_runs(records: Sequence[Mapping[str, Any]], runs: Sequence[str] = (),
                model: str | None = None) -> list[Mapping[str, Any]]:
    """Runs matching any of ``runs`` (a cache kind, a label, or a run id or id prefix) and
    ``model`` (a model name, or a path the run's model path ends with)."""
    out = []
    for r in records:
        if runs and not any(sel in (r.get("cache"), r.get("label")) or
                            str(r.get("id", "")).startswith(sel) for sel in runs):
            continue
        if model:
            m = r.get("model") or {}
            path = str(m.get("path") or "")
            if model != m.get("name") and not (path and path.rstrip("/").endswith(model)):
                continue
        out.append(r)
    return out


def store_features(records: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Model name -> ``ModelFeatures`` of every run's model directory that can still be read,
    and a note for each that cannot."""
    from coldscope.features import model_features
    from coldscope.report.data import dimensions

    features: dict[str, Any] = {}
    notes: list[str] = []
    seen: set[str] = set()
    for r in records:
        path = (r.get("model") or {}).get("path")
        name = dimensions(r)["model"]
        if not path or path in seen or name is None:
            continue
        seen.add(path)
        try:
            features[name] = model_features(path)
        except (ColdscopeError, OSError, ValueError) as exc:
            notes.append(f"features of {name} unavailable ({exc}); it is left out of the "
                         "scaling and prediction charts")
    return features, notes


def make_report(*, store_path: str | Path | None = None, runs: Sequence[str] = (),
                model: str | None = None, paper: str | Path | None = None,
                startup_model: str | Path | None = None,
                title: str | None = None) -> tuple[str, dict[str, Any]]:
    """The page (HTML text) and the data it draws."""
    notes: list[str] = []
    if paper is not None:
        from coldscope.predict.paper import paper_features

        records = paper_records(paper)
        features = paper_features(paper)
        source = f"the paper's published measurements ({paper})"
        notes.append("The main table's weights were read partly from SSD (model loading "
                     "47.9 s for llama2-13b against 3.3 s in Figures 7, 10, 13 and 15, which "
                     "read from the page cache): ratios against the main table include storage.")
        notes.append("The paper's logs give durations only; its timelines are stage durations "
                     "laid end to end, and it has no CPU samples.")
    else:
        from coldscope.store import Store

        with Store(store_path, create=False) as store:
            records = store.runs(status="ok")
            where = str(store.path)
        features, notes = store_features(select_runs(records, runs, model))
        source = f"runs in {where}"
    chosen = select_runs(records, runs, model)
    if not chosen:
        what = ", ".join([*(f"--runs {','.join(runs)}" for _ in [0] if runs),
                          *(f"--model {model}" for _ in [0] if model)]) or "the store"
        raise ColdscopeError(f"no successful runs match {what}")
    sm = None
    if startup_model is not None:
        from coldscope.predictor import StartupModel

        sm = StartupModel.load(startup_model)
    data = build_report_data(chosen, features=features, startup_model=sm,
                             title=title or "Start-up report", source=source, notes=notes)
    return render_report(data), data
