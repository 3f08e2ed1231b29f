"""``coldscope features``, ``fit``, ``calibrate`` and ``predict``."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import click

from coldscope.cli.common import echo, json_option, print_json, store_option
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_output_target

_compile_cache_option = click.option(
    "--compile-cache", type=click.Path(exists=True, file_okay=False), default=None,
    help="Compile cache directory of this model: its bytes become the compiled graph size.")


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
@store_option
@click.option("--cache", type=click.Choice(["cold", "warm"]), default=None,
              help="Use only stored runs with this cache state.")
@click.option("--formulas", type=click.Choice(["auto", "paper"]), default="auto",
              show_default=True,
              help="auto: per stage, the candidate with the lowest leave-one-model-out error; "
                   "paper: the paper's choices.")
@click.option("--kinds", default="dense", show_default=True,
              help="Model kinds to train on, comma-separated (dense, moe, hybrid).")
@click.option("--level", type=click.FloatRange(0.5, 0.99), default=0.9, show_default=True,
              help="Coverage of the prediction intervals.")
@click.option("--capture-sizes", type=click.IntRange(min=0), default=None,
              help="CUDA-graph capture sizes of the measured runs (paper: 67).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="startup-model.json",
              show_default=True, help="Startup model JSON to write.")
@json_option
def fit_cmd(paper_dir: str | None, timings: str | None, store_path: str | None,
            cache: str | None, formulas: str, kinds: str, level: float,
            capture_sizes: int | None, out_path: str, as_json: bool) -> None:
    """Fit the white-box startup model (one linear formula per stage) and write it as JSON."""
    from coldscope.prediction.startup_model import StartupModel
    kind_list = tuple(k.strip() for k in kinds.split(",") if k.strip())
    bad = [k for k in kind_list if k not in ("dense", "moe", "hybrid")]
    if bad or not kind_list:
        raise ColdscopeError(f"--kinds takes dense, moe, hybrid; got {kinds!r}")
    check_output_target(out_path)  # before the work: never a device node, FIFO or directory
    from coldscope.cli.progress import bar, wanted
    # on a terminal only: a bar while the runs are read (most of the time on a large store:
    # benches/bench_fit_store.py), then while the model is fitted
    with bar("reading the training runs", wanted(as_json)) as update:
        observations, environment, settings, source, notes = _training_runs(
            paper_dir, timings, store_path, cache, capture_sizes, update)
        update(description=f"fitting the startup model on {len(observations)} observations",
               pulse=True)
        model = StartupModel(formulas=formulas, kinds=kind_list, level=level)
        model.fit(observations, environment, settings, source=source)
    model.save(out_path)
    summary = fit_summary(model.to_dict(), out_path, notes)
    if as_json:
        print_json(summary)
    else:
        echo(render_fit(summary))


def _training_runs(paper_dir: str | None, timings: str | None, store_path: str | None,
                   cache: str | None, capture_sizes: int | None,
                   update: Callable[..., None] = lambda *a, **k: None,
                   ) -> tuple[list[Any], dict[str, Any], dict[str, Any], str, list[str]]:
    """Observations, environment, settings, source and notes from --paper or --store;
    ``update`` is a progress bar's (``cli.progress.bar``)."""
    notes: list[str] = []
    if paper_dir is not None:
        from coldscope.prediction.paper import (
            PAPER_CAPTURE_SIZES,
            observations_from_paper,
            paper_environment,
        )

        observations = observations_from_paper(paper_dir, timings)
        environment = paper_environment(paper_dir, timings)
        settings = {"capture_sizes": capture_sizes or PAPER_CAPTURE_SIZES}
        source = str(timings or paper_dir)
    else:
        if timings is not None:
            raise ColdscopeError("--timings needs --paper")
        from coldscope.prediction.training import observations_from_runs
        from coldscope.store.db import Store
        def read(done: int, total: int) -> None:
            update(done / total if total else 1.0, f"reading {done}/{total} stored runs")

        with Store(store_path, create=False) as store:
            runs = store.runs(status=None, progress=read)
            source = str(store.path)
        update(description=f"reading the models of {len(runs)} runs", pulse=True)
        observations, environment, notes = observations_from_runs(runs, cache=cache)
        settings = {"capture_sizes": capture_sizes} if capture_sizes else {}
    return observations, environment, settings, source, notes


def fit_summary(state: dict[str, Any], out_path: str, notes: list[str]) -> dict[str, Any]:
    """What ``fit --json`` prints: the model file minus its interval matrices."""
    return {
        "out": out_path,
        "trained_on": state["trained_on"],
        "environment": state["environment"],
        "storage": state.get("storage"),
        "interval": state["interval"],
        "buckets": {b: {k: v[k] for k in ("formula", "terms", "coef", "residual_sd",
                                           "lomo_rmse", "candidates", "pcc")}
                    for b, v in state["buckets"].items()},
        "lomo": state.get("lomo"),
        "extrapolation": state.get("extrapolation"),
        "loading_rate": state.get("loading_rate"),
        "notes": notes,
    }


def render_fit(s: dict[str, Any]) -> str:
    t = s["trained_on"]
    lines = [f"trained on {t['n_models']} {'/'.join(t['kinds'])} models from {t['source']}"]
    if t["excluded"]:
        lines.append(f"excluded (other kinds): {', '.join(t['excluded'])}")
    lines += ["", f"{'stage':<20} {'resid sd':>8} {'LOMO rmse':>9}  formula (seconds)"]
    for b, v in s["buckets"].items():
        lines.append(f"{b:<20} {v['residual_sd']:>8.3f} {v['lomo_rmse']:>9.3f}  {v['formula']}")
    lines += ["", "candidates (LOMO rmse / extrapolation-fold rmse, s; * comparable to the "
                  "choice: the range rule may serve it where the choice extrapolates):"]
    for b, v in s["buckets"].items():
        if len(v["candidates"]) > 1:
            cands = ", ".join(
                f"{'+'.join(c['terms'])}{'*' if c.get('comparable') else ''}: "
                f"{c['lomo_rmse']:.3f}"
                + (f" / {c['extrap_rmse']:.3f}" if c.get("extrap_rmse") is not None else "")
                for c in v["candidates"])
            lines.append(f"  {b:<20} {cands}")
    feats = [f for f in next(iter(s["buckets"].values()))["pcc"]]
    lines += ["", "Pearson correlation of each stage with each feature:",
              f"  {'stage':<20} " + " ".join(f"{f[:11]:>11}" for f in feats)]
    for b, v in s["buckets"].items():
        cells = " ".join(f"{'-' if v['pcc'][f] is None else format(v['pcc'][f], '.2f'):>11}"
                         for f in feats)
        lines.append(f"  {b:<20} {cells}")
    lomo = s.get("lomo")
    if lomo:
        tot = lomo["total"]
        cover = f", {tot['coverage']} inside their {s['interval']['level']:.0%} interval" \
            if "coverage" in tot else ""
        lines += ["", f"leave-one-model-out total: MSE {tot['mse']:.3f} s^2, RMSE "
                      f"{tot['rmse']:.3f} s, max |error| {tot['max_abs']:.3f} s{cover}"]
        lines += [_held_out_line(f"{m:<32}", v) for m, v in lomo["per_model"].items()]
    folds = s.get("extrapolation")
    if folds:
        tot = folds["total"]
        cover = f", {tot['coverage']} inside their interval" if "coverage" in tot else ""
        lines += ["", f"extrapolation folds (deepest, largest, smallest held out, fit redone): "
                      f"MSE {tot['mse']:.3f} s^2, max |error| {tot['max_abs']:.3f} s{cover}"]
        lines += [_held_out_line(f"{'/'.join(v['extremes']):<17} {m:<28}", v)
                  for m, v in folds["per_model"].items()]
    rate = s.get("loading_rate")
    if rate:
        verdict = ("constant: beyond the weight range, loading follows it and its interval "
                   "widens by the rate's uncertainty" if rate["constant"] else
                   "not constant: beyond the weight range, loading's interval widens by its "
                   "whole contribution there")
        lines += ["", f"loading rate: {rate['lower_rate']:.4g} s/GB (smaller half, "
                      f"se {rate['lower_se']:.2g}) vs {rate['upper_rate']:.4g} s/GB (larger "
                      f"half, se {rate['upper_se']:.2g}): {verdict}"]
    lines += ["", f"intervals: {s['interval']['description']}"]
    lines += [f"note: {n}" for n in s["notes"]]
    lines.append(f"wrote {s['out']}")
    return "\n".join(lines)


_BANDWIDTH = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?b)?(?:/s)?\s*$",
                        re.IGNORECASE)
_UNITS = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _held_out_line(label: str, v: dict[str, Any]) -> str:
    """One held-out model of a validation (leave-one-model-out or an extrapolation fold):
    actual, predicted, error and the 90 % interval when there is one."""
    interval = v.get("interval")
    span = f"  [{interval['low']:.2f}, {interval['high']:.2f}]" if interval else ""
    return (f"  {label} actual {v['actual_s']:7.2f}  predicted {v['predicted_s']:7.2f}  "
            f"error {v['error_s']:+6.2f}{span}")


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
@click.option("--capture-sizes", type=click.IntRange(min=0, max=100_000), default=None,
              help="CUDA-graph capture sizes (default: those of the training runs).")
@_compile_cache_option
@_with_storage
@json_option
def predict_cmd(path: str, startup_model: str, capture_sizes: int | None,
                compile_cache: str | None, storage_bandwidth: str | None,
                page_cache: str | None, as_json: bool) -> None:
    """Predict the start-up of a model per stage, with intervals and domain warnings."""
    from coldscope.prediction.startup_model import predict_json
    bandwidth = parse_bandwidth(storage_bandwidth) if storage_bandwidth else None
    p = predict_json(startup_model, path, capture_sizes=capture_sizes,
                     compile_cache=compile_cache, storage_bandwidth=bandwidth,
                     page_cache=page_cache)  # type: ignore[arg-type]
    if as_json:
        print_json(p)
        return
    pct = f"{p['level']:.0%}"
    echo(f"{'stage':<20} {'seconds':>8}  {pct} interval")
    for b, sp in p["stages"].items():
        echo(f"{b:<20} {sp['s']:>8.2f}  [{sp['interval']['low']:.2f}, "
             f"{sp['interval']['high']:.2f}]")
    echo(f"{'total':<20} {p['total_s']:>8.2f}  [{p['interval']['low']:.2f}, "
         f"{p['interval']['high']:.2f}]")
    if p["calibrated_on"]:
        echo(f"calibrated on: {', '.join(p['calibrated_on'])}")
    for f in (p.get("formulas") or {}).values():
        if f["switched"]:
            echo(f"served: {f['formula']}")
    for w in p["warnings"]:
        echo(f"warning: {w}")


@click.command("calibrate")
@click.argument("base_model", type=click.Path(dir_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Calibrated startup model JSON to write (required unless --suggest).")
@click.option("--paper", "paper_dir", type=click.Path(exists=True, file_okay=False),
              default=None, help="Calibration runs from the paper's artifact directory.")
@click.option("--timings", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --paper: the comparison_results.json of the new machine.")
@store_option
@click.option("--cache", type=click.Choice(["cold", "warm"]), default=None,
              help="Use only stored runs with this cache state.")
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
                  models: str | None, suggest: bool, candidates: tuple[str, ...],
                  as_json: bool) -> None:
    """Move a startup model to a new machine from start-ups of two models measured there."""
    from coldscope.prediction.calibrate import calibrate
    from coldscope.prediction.calibrate import suggest as suggest_pairs
    from coldscope.prediction.startup_model import StartupModel
    base = StartupModel.load(base_model)
    if suggest and not candidates and paper_dir is None and store_path is None:
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
            runs, *_ = _training_runs(paper_dir, timings, store_path, cache, None)
            seen: dict[str, Any] = {}
            for o in runs:
                seen.setdefault(o.model, o.features)
            feats = list(seen.values())
        ranked = suggest_pairs(base.file_, feats, runs)
        if as_json:
            print_json({"suggestions": [r.to_dict() for r in ranked]})
            return
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
    observations, environment, _settings, source, notes = _training_runs(
        paper_dir, timings, store_path, cache, None)
    chosen = [m.strip() for m in models.split(",") if m.strip()] if models else None
    new = calibrate(base.file_, observations, environment=environment, source=source,
                    base_source=str(base_model), models=chosen)
    out = StartupModel.from_file(new)
    out.save(out_path)
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
