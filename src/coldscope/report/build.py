"""From a store (or the paper's data) to the page: choose the runs, read their models'
features and their tune sessions' files, build each section in turn, render. The only part of
the report that reads files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from coldscope.core.records import Run
from coldscope.report.configurations import dimensions, group_runs, varying_dimensions
from coldscope.report.contents import Report
from coldscope.report.html import render_report
from coldscope.report.paper import paper_records
from coldscope.report.sections import (
    breakdown,
    compare,
    cpu,
    findings,
    prediction,
    releases,
    run_table,
    scaling,
    timeline,
    tune,
)
from coldscope.store.selection import describe, select_runs
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.prediction.features import ModelFeatures
    from coldscope.prediction.startup_model import StartupModel

#: ``progress(what, fraction)``: what the report is doing now and how far along it is (0-1).
Progress = Callable[[str, float], None]


def build_report(records: Sequence[Run], *,
                 features: Mapping[str, ModelFeatures] | None = None,
                 startup_model: StartupModel | None = None,
                 title: str = "coldscope start-up report", source: str = "",
                 notes: Sequence[str] = (),
                 tune_sessions: Mapping[str, tune.KeptSteps] | None = None) -> Report:
    """Every section of the page, built from the successful runs among ``records``.
    ``features``: model name -> its features (for scaling and predictions); ``startup_model``:
    a fitted one, to draw its predictions against the runs; ``tune_sessions``: what each tune
    session's file says it kept (``tune_decisions``)."""
    records = [r for r in records if r.status == "ok"]
    if not records:
        raise ColdscopeError("no successful runs to report on (see `coldscope runs`)")
    features = features or {}
    groups = group_runs(records)
    rows, cmps = breakdown.build(groups), compare.build(groups)
    pred = prediction.build(groups, features, startup_model) if startup_model else None
    tuned = tune.build(records, tune_sessions)
    measured = releases.build(records)
    varying = varying_dimensions([g.dims for g in groups])
    return Report(
        title=title, source=source,
        notes=(*notes, *compare.mixed_setting_notes(groups), *(pred.notes if pred else ()),
               *tuned.notes, *measured.notes),
        runs=len(records), configurations=len(groups),
        datasets=tuple(sorted({str(g.dataset) for g in groups if g.dataset})),
        findings=findings.build(rows, cmps, records),
        breakdown=rows,
        timelines=timeline.build(groups),
        scaling=scaling.build(groups, features),
        comparisons=cmps,
        releases=measured,
        tune=tuned,
        cpu=cpu.build(groups),
        predictions=pred,
        run_table=run_table.build(records, varying),
    )


def store_features(runs: Sequence[Run], progress: Progress | None = None,
                   ) -> tuple[dict[str, ModelFeatures], list[str]]:
    """Model name -> ``ModelFeatures`` of every run's model directory that can still be read,
    and a note for each that cannot."""
    from coldscope.prediction.features import model_features
    features: dict[str, ModelFeatures] = {}
    notes: list[str] = []
    paths: dict[str, str] = {}
    for r in runs:
        name = dimensions(r)["model"]
        if r.model.path and name is not None:
            paths.setdefault(r.model.path, name)
    for i, (path, name) in enumerate(paths.items()):
        if progress:
            progress(f"reading features of {name}", 0.3 + 0.2 * i / max(len(paths), 1))
        try:
            features[name] = model_features(path)
        except (ColdscopeError, OSError, ValueError) as exc:
            notes.append(f"features of {name} unavailable ({exc}); it is left out of the "
                         "scaling and prediction charts")
    return features, notes


def tune_decisions(store_path: Path, runs: Sequence[Run]) -> dict[str, tune.KeptSteps]:
    """What each tune session among ``runs`` kept, from its session file
    (``<store dir>/tune/<id>/session.json``), through tune's own ``waterfall``: session id ->
    the kept configurations (the rows before ``best``), what each knob does, the warm
    default's start-ups the winner was judged against, and the state its cold start-ups had. A
    session whose file is missing, unreadable or unfinished is left out (the report then reads
    its kept changes from the runs and says so)."""
    from coldscope.tuning.report import cold_state, warm_reference, waterfall
    from coldscope.tuning.search import Outcome
    from coldscope.tuning.session import load, sessions_dir
    out: dict[str, tune.KeptSteps] = {}
    root = sessions_dir(store_path)
    for sid in tune.tune_runs(runs):
        try:
            spec = load(root / sid)
        except ColdscopeError:
            continue
        if not spec.outcome:
            continue
        try:
            outcome = Outcome.model_validate(spec.outcome)
        except ValueError:  # a session file of an older tune: its runs still tell the steps
            continue
        rows = waterfall(spec, outcome)
        out[sid] = tune.KeptSteps(
            steps=tuple(tuple(r.knobs) for r in rows if r.step != "best"),
            descriptions={k.name: k.description for k in spec.knobs},
            warm_runs=tuple(warm_reference(outcome)),
            cold_state=cold_state(spec, outcome.cold.runs))
    return out


def make_report(*, store_path: str | Path | None = None, runs: Sequence[str] = (),
                model: str | None = None, paper: str | Path | None = None,
                startup_model: str | Path | None = None, title: str | None = None,
                progress: Progress | None = None) -> tuple[str, Report]:
    """The page (HTML text) and the report it draws. ``progress`` hears of each phase (reading
    runs, model features, charts, rendering); the CLI shows it on a terminal for big stores."""
    step = progress or (lambda what, fraction: None)
    notes: list[str] = []
    sessions: dict[str, tune.KeptSteps] = {}
    features: Mapping[str, ModelFeatures]
    if paper is not None:
        from coldscope.prediction.paper import paper_features
        step("reading the paper's data", 0.0)
        records: Sequence[Run] = paper_records(paper)
        features = paper_features(paper)
        source = f"the paper's published measurements ({paper})"
        notes.append("The main table's weights were read partly from SSD (model loading "
                     "47.9 s for llama2-13b against 3.3 s in Figures 7, 10, 13 and 15, which "
                     "read from the page cache): ratios against the main table include storage.")
        notes.append("The paper's logs give durations only; its timelines are stage durations "
                     "laid end to end, and it has no CPU samples.")
        chosen = select_runs(records, runs, model)
    else:
        from coldscope.store.db import Store
        with Store(store_path, create=False) as store:
            step(f"reading {store.count()} runs", 0.0)
            records = store.runs(status="ok")
            where = str(store.path)
        chosen = select_runs(records, runs, model)
        features, notes = store_features(chosen, progress)
        sessions = tune_decisions(Path(where), chosen)
        source = f"runs in {where}"
    if not chosen:
        raise ColdscopeError(f"no successful runs match {describe(runs, model)}")
    sm = None
    if startup_model is not None:
        from coldscope.prediction.startup_model import StartupModel
        sm = StartupModel.load(startup_model)
    step(f"building charts of {len(chosen)} runs", 0.5)
    report = build_report(chosen, features=features, startup_model=sm,
                          title=title or "Start-up report", source=source, notes=notes,
                          tune_sessions=sessions)
    step("rendering the page", 0.8)
    page = render_report(report)
    step("done", 1.0)
    return page, report
