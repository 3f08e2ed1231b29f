"""``coldscope features``, ``coldscope fit`` and ``coldscope predict``."""

from __future__ import annotations

from typing import Any

import click

from coldscope.cli.common import json_option, print_json, store_option
from coldscope.errors import ColdscopeError

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
    from coldscope.features import describe, model_features

    features = model_features(path, compile_cache=compile_cache)
    if as_json:
        print_json(features.model_dump())
        return
    width = max(len(k) for k, _ in describe(features))
    for label, value in describe(features):
        click.echo(f"{label:<{width}}  {value}")


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
    from coldscope.predictor import StartupModel

    kind_list = tuple(k.strip() for k in kinds.split(",") if k.strip())
    bad = [k for k in kind_list if k not in ("dense", "moe", "hybrid")]
    if bad or not kind_list:
        raise ColdscopeError(f"--kinds takes dense, moe, hybrid; got {kinds!r}")
    notes: list[str] = []
    if paper_dir is not None:
        from coldscope.predict.paper import (
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
        from coldscope.predict.store import observations_from_runs
        from coldscope.store import Store

        with Store(store_path, create=False) as store:
            runs = store.runs(status=None)
            source = str(store.path)
        observations, environment, notes = observations_from_runs(runs, cache=cache)
        settings = {"capture_sizes": capture_sizes} if capture_sizes else {}
    model = StartupModel(formulas=formulas, kinds=kind_list, level=level)
    model.fit(observations, environment, settings, source=source)
    model.save(out_path)
    summary = fit_summary(model.to_dict(), out_path, notes)
    if as_json:
        print_json(summary)
    else:
        click.echo(render_fit(summary))


def fit_summary(state: dict[str, Any], out_path: str, notes: list[str]) -> dict[str, Any]:
    """What ``fit --json`` prints: the model file minus its interval matrices."""
    return {
        "out": out_path,
        "trained_on": state["trained_on"],
        "environment": state["environment"],
        "interval": state["interval"],
        "buckets": {b: {k: v[k] for k in ("formula", "terms", "coef", "residual_sd",
                                           "lomo_rmse", "candidates", "pcc")}
                    for b, v in state["buckets"].items()},
        "lomo": state.get("lomo"),
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
    lines += ["", "candidates (LOMO rmse, s):"]
    for b, v in s["buckets"].items():
        if len(v["candidates"]) > 1:
            cands = ", ".join(f"{'+'.join(c['terms'])}: {c['lomo_rmse']:.3f}"
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
        for m, v in lomo["per_model"].items():
            interval = v.get("interval")
            extra = f"  [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
            lines.append(f"  {m:<32} actual {v['actual_s']:7.2f}  predicted "
                         f"{v['predicted_s']:7.2f}  error {v['error_s']:+6.2f}{extra}")
    lines += ["", f"intervals: {s['interval']['description']}"]
    lines += [f"note: {n}" for n in s["notes"]]
    lines.append(f"wrote {s['out']}")
    return "\n".join(lines)


@click.command("predict")
@click.argument("path", type=click.Path())
@click.option("--startup-model", "startup_model", required=True,
              type=click.Path(dir_okay=False), help="Startup model JSON (coldscope fit).")
@click.option("--capture-sizes", type=click.IntRange(min=0), default=None,
              help="CUDA-graph capture sizes (default: those of the training runs).")
@_compile_cache_option
@json_option
def predict_cmd(path: str, startup_model: str, capture_sizes: int | None,
                compile_cache: str | None, as_json: bool) -> None:
    """Predict the start-up of a model per stage, with intervals and domain warnings."""
    from coldscope.features import model_features
    from coldscope.predictor import StartupModel

    model = StartupModel.load(startup_model)
    prediction = model.predict(model_features(path, compile_cache=compile_cache),
                               capture_sizes=capture_sizes)
    if as_json:
        print_json(prediction.to_dict())
        return
    pct = f"{prediction.level:.0%}"
    click.echo(f"{'stage':<20} {'seconds':>8}  {pct} interval")
    for b, sp in prediction.stages.items():
        click.echo(f"{b:<20} {sp.s:>8.2f}  [{sp.interval[0]:.2f}, {sp.interval[1]:.2f}]")
    lo, hi = prediction.interval
    click.echo(f"{'total':<20} {prediction.total_s:>8.2f}  [{lo:.2f}, {hi:.2f}]")
    for w in prediction.warnings:
        click.echo(f"warning: {w}")
