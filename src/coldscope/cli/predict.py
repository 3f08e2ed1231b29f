"""``coldscope features``, ``fit``, ``calibrate`` and ``predict``."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import click

from coldscope.cli.common import echo, json_option, print_json, show
from coldscope.prediction.formulas import MAX_CAPTURE_SIZES
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_output_target

_compile_cache_option = click.option(
    "--compile-cache", type=click.Path(exists=True, file_okay=False), default=None,
    help="Compile cache directory of this model: its bytes become the compiled graph size.")


#: ``--store`` with an optional value: ``--store`` alone is the default store (the README's
#: ``calibrate BASE --store --models a,b``), ``--store FILE`` a given one.
_store_flag_option = click.option(
    "--store", "store_path", type=click.Path(dir_okay=False), is_flag=False, flag_value="",
    default=None, metavar="[FILE]",
    help="Run store (SQLite file); alone: $COLDSCOPE_STORE or ./.coldscope/store.db.")

_selection_options = [
    click.option("--label", default=None,
                 help="Use only stored runs saved under this label (parse --save --label)."),
    click.option("--engine", "engine_name", default=None,
                 help="Use only stored runs of this engine (vllm, sglang, ...)."),
    click.option("--model-root", type=click.Path(exists=True, file_okay=False), default=None,
                 help="Directory holding the runs' models: a logged name Org/Name is found "
                      "as DIR/Org/Name, DIR/Name or DIR/models--Org--Name (any case), a "
                      "logged path by its last part."),
    click.option("--model-map", multiple=True, metavar="NAME=DIR",
                 help="Where the model logged as NAME is (repeatable); before --model-root."),
]


def _with_selection(f: Any) -> Any:
    for option in reversed(_selection_options):
        f = option(f)
    return f


def _places(model_root: str | None, model_map: tuple[str, ...]) -> Any:
    """The ``ModelPlaces`` of ``--model-root`` and ``--model-map`` (None when neither)."""
    from pathlib import Path

    from coldscope.prediction.training import ModelPlaces, parse_model_map
    if model_root is None and not model_map:
        return None
    return ModelPlaces(root=Path(model_root) if model_root else None,
                       mapping=parse_model_map(model_map))


@click.command("features")
@click.argument("path", type=click.Path())
@_compile_cache_option
@json_option
def features_cmd(path: str, compile_cache: str | None, as_json: bool) -> None:
    """Features of a model (directory, config.json, safetensors index or features JSON),
    read without loading weights."""
    from coldscope.prediction.features import describe, model_features
    features = model_features(path, compile_cache=compile_cache)
    if as_json:
        print_json(features.model_dump())
        return
    width = max(len(k) for k, _ in describe(features))
    for label, value in describe(features):
        echo(f"{label:<{width}}  {value}")


@click.command("fit")
@click.option("--paper", "paper_dir", type=click.Path(exists=True, file_okay=False),
              default=None, help="Fit on the paper's artifact directory instead of the store.")
@click.option("--timings", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --paper: the comparison_results.json to use "
                   "(default figures/figure-rest/avg_comparison_results.json).")
@_store_flag_option
@click.option("--cache", type=click.Choice(["cold", "warm"]), default=None,
              help="Use only stored runs with this cache state.")
@_with_selection
@click.option("--formulas", type=click.Choice(["auto", "paper"]), default="auto",
              show_default=True,
              help="auto: per stage, the candidate with the lowest leave-one-model-out error; "
                   "paper: the paper's choices.")
@click.option("--kinds", default="dense", show_default=True,
              help="Model kinds to train on, comma-separated (dense, moe, hybrid).")
@click.option("--level", type=click.FloatRange(0.5, 0.99), default=0.9, show_default=True,
              help="Coverage of the prediction intervals.")
@click.option("--capture-sizes", type=click.IntRange(min=0, max=MAX_CAPTURE_SIZES),
              default=None, help="CUDA-graph capture sizes of the measured runs (paper: 67).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="startup-model.json",
              show_default=True, help="Startup model JSON to write.")
@json_option
def fit_cmd(paper_dir: str | None, timings: str | None, store_path: str | None,
            cache: str | None, label: str | None, engine_name: str | None,
            model_root: str | None, model_map: tuple[str, ...], formulas: str, kinds: str,
            level: float, capture_sizes: int | None, out_path: str, as_json: bool) -> None:
    """Fit the white-box startup model (one linear formula per stage) and write it as JSON:
    from the paper's artifacts, or from stored runs (profiled, or saved logs: --label and
    --engine select them, --model-root / --model-map say where their models are)."""
    from coldscope.api import fit
    from coldscope.prediction.modelfile import fit_summary
    from coldscope.prediction.training import training_set
    kind_list = tuple(k.strip() for k in kinds.split(",") if k.strip())
    check_output_target(out_path)  # before the work: never a device node, FIFO or directory
    places = _places(model_root, model_map)
    from coldscope.cli.progress import bar, wanted
    # on a terminal only: a bar while the runs are read (most of the time on a large store:
    # benches/bench_fit_store.py), then while the model is fitted
    with bar("reading the training runs", wanted(as_json)) as update:
        training = training_set(paper_dir=paper_dir, timings=timings,
                                store_path=store_path or None, cache=cache,
                                capture_sizes=capture_sizes, progress=_progress(update),
                                label=label, engine=engine_name, places=places)
        update(description=f"fitting the startup model on {len(training.observations)} "
                           "observations", pulse=True)
        try:
            model = fit(training, formulas=formulas, kinds=kind_list, level=level)
        except ColdscopeError as exc:
            # too few models because some were not found here: say how to find them
            missing = next((n for n in training.notes if "--model-root" in n), None)
            if missing is None:
                raise
            raise ColdscopeError(f"{exc}; {missing}") from None
    model.save(out_path)
    summary = fit_summary(model.file_, out_path, training.notes)
    if as_json:
        print_json(summary.to_json())
    else:
        show(summary)


def _progress(update: Callable[..., None]) -> Callable[[str, float | None], None]:
    """A training source's progress (description, fraction or None) on a bar's ``update``."""
    def progress(description: str, fraction: float | None) -> None:
        if fraction is None:
            update(description=description, pulse=True)
        else:
            update(fraction, description)
    return progress


_BANDWIDTH = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?b)?(?:/s)?\s*$",
                        re.IGNORECASE)
_UNITS = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bandwidth(text: str) -> float:
    """``2GB/s``, ``500MiB/s`` or a plain number of bytes per second -> bytes per second."""
    m = _BANDWIDTH.match(text)
    if not m:
        raise ColdscopeError(f"--storage-bandwidth {text!r} is not a bandwidth "
                             "(e.g. 2GB/s, 800MiB/s, or bytes per second)")
    value = float(m.group(1)) * _UNITS.get((m.group(2) or "").lower(), 1.0)
    if not math.isfinite(value) or value < 1e6 or value > 1e13:
        raise ColdscopeError(f"--storage-bandwidth {text!r} is outside 1 MB/s-10 TB/s")
    return value


_storage_options = [
    click.option("--storage-bandwidth", "storage_bandwidth", default=None, metavar="RATE",
                 help="Predict model loading as weight bytes / RATE (e.g. 2GB/s) for storage "
                      "other than the model was measured on."),
    click.option("--page-cache", type=click.Choice(["hot", "cold"]), default=None,
                 help="Weights in the OS page cache (hot) or read from storage (cold); "
                      "cold needs --storage-bandwidth when the model was measured hot."),
]


def _with_storage(f: Any) -> Any:
    for option in reversed(_storage_options):
        f = option(f)
    return f


@click.command("predict")
@click.argument("path", type=click.Path())
@click.option("--startup-model", "startup_model", required=True,
              type=click.Path(dir_okay=False), help="Startup model JSON (fit or calibrate).")
@click.option("--capture-sizes", type=click.IntRange(min=0, max=MAX_CAPTURE_SIZES),
              default=None,
              help="CUDA-graph capture sizes (default: those of the training runs).")
@_compile_cache_option
@_with_storage
@json_option
def predict_cmd(path: str, startup_model: str, capture_sizes: int | None,
                compile_cache: str | None, storage_bandwidth: str | None,
                page_cache: str | None, as_json: bool) -> None:
    """Predict the start-up of a model per stage, with intervals and domain warnings."""
    from coldscope.api import predict
    bandwidth = parse_bandwidth(storage_bandwidth) if storage_bandwidth else None
    p = predict(startup_model, path, capture_sizes=capture_sizes, compile_cache=compile_cache,
                storage_bandwidth=bandwidth, page_cache=page_cache)  # type: ignore[arg-type]
    if as_json:
        print_json(p.to_dict())
        return
    show(p)


@click.command("calibrate")
@click.argument("base_model", type=click.Path(dir_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Calibrated startup model JSON to write (required unless --suggest).")
@click.option("--paper", "paper_dir", type=click.Path(exists=True, file_okay=False),
              default=None, help="Calibration runs from the paper's artifact directory.")
@click.option("--timings", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --paper: the comparison_results.json of the new machine.")
@_store_flag_option
@click.option("--cache", type=click.Choice(["cold", "warm"]), default=None,
              help="Use only stored runs with this cache state.")
@_with_selection
@click.option("--models", default=None,
              help="Calibration models, comma-separated (default: every model in the runs).")
@click.option("--suggest", is_flag=True,
              help="Say which models to run for the calibration instead of calibrating: "
                   "from --candidates, or from the models of the runs.")
@click.option("--candidates", multiple=True, type=click.Path(),
              help="With --suggest: model directories / config / features JSON to choose from "
                   "(repeatable).")
@json_option
def calibrate_cmd(base_model: str, out_path: str | None, paper_dir: str | None,
                  timings: str | None, store_path: str | None, cache: str | None,
                  label: str | None, engine_name: str | None, model_root: str | None,
                  model_map: tuple[str, ...], models: str | None, suggest: bool,
                  candidates: tuple[str, ...], as_json: bool) -> None:
    """Move a startup model to a new machine from start-ups of two models measured there."""
    from coldscope.api import calibrate
    from coldscope.prediction.calibrate import out_of_domain
    from coldscope.prediction.calibrate import suggest as suggest_pairs
    from coldscope.prediction.startup_model import StartupModel
    from coldscope.prediction.training import training_set
    base = StartupModel.load(base_model)
    given_store = store_path is not None
    store_path = store_path or None  # --store alone: the default store
    places = _places(model_root, model_map)
    select = {"label": label, "engine": engine_name, "places": places}
    if suggest and not candidates and paper_dir is None and not given_store:
        from coldscope.prediction.calibrate import size_guidance
        guide = size_guidance(base.file_)
        if as_json:
            print_json(guide)
            return
        echo("run two dense models on the new machine, each at least:")
        for name, g in guide["minimums"].items():
            echo(f"  {name:<20} >= {g['at_least']:.4g} {g['unit']}  "
                 f"(training median {g['median']:.4g}; for {', '.join(g['buckets'])})")
        echo(f"not near-duplicates (weights and layers within "
             f"{guide['duplicate_tolerance']:.0%} of each other), and as large as you "
             "serve: each ratio is then measured over more seconds. Give --candidates "
             "DIR ... to rank real models.")
        return
    if suggest:
        runs = None
        if candidates:
            from coldscope.prediction.startup_model import features_of
            feats = [features_of(c) for c in candidates]
        else:
            runs = list(training_set(paper_dir=paper_dir, timings=timings,
                                     store_path=store_path, cache=cache,
                                     **select).observations)
            seen: dict[str, Any] = {}
            for o in runs:  # named as the runs are (the logged name --models takes)
                seen.setdefault(o.model, o.features.model_copy(update={"name": o.model}))
            feats = list(seen.values())
        left_out = out_of_domain(base.file_, feats)
        ranked = suggest_pairs(base.file_, feats, runs)
        if as_json:
            print_json({"suggestions": [r.to_dict() for r in ranked],
                        "left_out": [{"model": m, "why": why} for m, why in left_out]})
            return
        for name, why in left_out:
            echo(f"left out {name}: {why}")
        best = ranked[0]
        if best.accepted:
            echo(f"run: {' and '.join(best.models)}  ({best.reason})")
        else:
            echo(f"no pair identifies every stage; least bad: {' and '.join(best.models)}"
                 f" ({best.reason})")
        echo("")
        echo(f"{'pair':<48} {'score':>6}  verdict")
        for r in ranked:
            verdict = "accept" if r.accepted else f"reject: {r.reason}"
            echo(f"{' + '.join(r.models):<48} {r.score:6.2f}  {verdict}")
        return
    if out_path is None:
        raise ColdscopeError("calibrate needs --out NEW_MODEL (or --suggest)")
    if candidates:
        raise ColdscopeError("--candidates needs --suggest")
    check_output_target(out_path)  # before the work: never a device node, FIFO or directory
    training = training_set(paper_dir=paper_dir, timings=timings, store_path=store_path,
                            cache=cache, **select)
    notes = list(training.notes)
    chosen = [m.strip() for m in models.split(",") if m.strip()] if models else None
    out = calibrate(base_model, training, models=chosen)
    out.save(out_path)
    new = out.file_
    cal = new.calibration
    assert cal is not None
    summary = {"out": out_path, "base": str(base_model), "calibrated_on": cal.models,
               "replicates": cal.replicates, "source": cal.source,
               "storage": new.storage.model_dump(exclude_none=True) if new.storage else None,
               "stages": {b: t.model_dump() for b, t in cal.stages.items()},
               "warnings": cal.warnings, "notes": notes}
    if as_json:
        print_json(summary)
        return
    echo(f"calibrated {base_model} on {', '.join(cal.models)} from {cal.source}")
    echo(f"{'stage':<20} {'transfer':<8} {'value':>8} {'spread':>7}  per model")
    for b, t in cal.stages.items():
        per = ", ".join(f"{m} {v:.3g}" for m, v in t.per_model.items())
        echo(f"{b:<20} {t.kind:<8} {t.value:>8.3g} {t.spread:>7.3g}  {per}")
    for w in cal.warnings:
        echo(f"warning: {w}")
    for n in notes:
        echo(f"note: {n}")
    echo(f"wrote {out_path}")
