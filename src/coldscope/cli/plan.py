"""``coldscope plan``: the end-to-end cold-start budget, mitigations, cost and SLA search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from coldscope.cli.common import json_option, print_json, store_option
from coldscope.errors import ColdscopeError


@click.command("plan")
@click.option("--model", "model_path", type=click.Path(exists=True), default=None,
              help="Model directory (or config / index / features JSON) to size.")
@click.option("--params", default=None, help="Parameter count instead of --model (70e9, 13B).")
@click.option("--dtype", default="bf16", show_default=True, help="Storage dtype with --params.")
@click.option("--gpu", default=None, help="GPU type from the profile (H100, L40S, A10G, L4).")
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="YAML with the profile keys to override.")
@click.option("--startup-model", "startup_model", type=click.Path(exists=True, dir_okay=False),
              default=None, help="Startup model JSON (coldscope fit) for engine start-up.")
@store_option
@click.option("--no-store", is_flag=True, help="Do not use measured runs from the store.")
@click.option("--cache", type=click.Choice(["cold", "warm"]), default=None,
              help="Use only stored runs with this cache state.")
@click.option("--mitigate", "mitigate", multiple=True,
              help="Mitigation layer(s), comma-separated or repeated: preseeded_image, "
                   "weight_streaming, tiered_loading, live_migration, compile_cache, "
                   "fewer_capture_sizes, eager, gpu_snapshot.")
@click.option("--min-workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Warm pool: replicas kept up 24x7 per product.")
@click.option("--products", type=click.IntRange(min=1), default=1, show_default=True,
              help="Endpoints (products) the cost covers.")
@click.option("--sla-p99-ttft", "sla", default=None, help="P99 time-to-first-token SLA (2s).")
@click.option("--traffic", "traffic_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="YAML traffic shape (rates_rps, mean_rps, burstiness, ...).")
@click.option("--trace", "trace_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="CSV request trace (TIMESTAMP column): sets mean rate and "
                                 "burstiness.")
@click.option("--cheapest", is_flag=True,
              help="Search the cheapest stack that meets --sla-p99-ttft (default when an SLA "
                   "is given without --mitigate / --min-workers); with --mitigate, search "
                   "only combinations of those layers.")
@click.option("--tiers", "tiers_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="YAML of tiers (name, sla_p99_ttft, products, traffic, ...).")
@json_option
def plan_cmd(model_path: str | None, params: str | None, dtype: str, gpu: str | None,
             profile_path: str | None, startup_model: str | None, store_path: str | None,
             no_store: bool, cache: str | None, mitigate: tuple[str, ...], min_workers: int,
             products: int, sla: str | None, traffic_path: str | None,
             trace_path: str | None, cheapest: bool, tiers_path: str | None,
             as_json: bool) -> None:
    """Plan a cold start from zero: where the time goes, what each mitigation removes and
    costs, and the cheapest stack that meets a P99 TTFT SLA."""
    from coldscope.plan import budget as bud
    from coldscope.plan.planner import PlanRequest, make_plan
    from coldscope.plan.profile import (
        Traffic,
        deep_merge,
        load_profile,
        parse_count,
        parse_duration,
        read_yaml,
        validate,
    )
    from coldscope.plan.sla import load_tiers, read_trace, trace_shape

    tiers = None
    if tiers_path:
        tiers = load_tiers(read_yaml(tiers_path, "tiers file"), f"tiers file {tiers_path}")
        model_path = model_path or tiers.model
        if params is None and tiers.params is not None:
            params = str(tiers.params)
        dtype = tiers.dtype or dtype
    if (model_path is None) == (params is None):
        raise ColdscopeError("give one of --model DIR or --params N")

    overrides: dict[str, Any] = {"gpu": gpu} if gpu else {}
    profile = load_profile(profile_path, overrides)
    notes: list[str] = []
    traffic_data = profile.traffic.model_dump()
    if traffic_path:
        traffic_data = deep_merge(traffic_data, read_yaml(traffic_path, "traffic file"))
    if trace_path:
        shape = trace_shape(read_trace(trace_path))
        traffic_data = deep_merge(traffic_data, {"mean_rps": shape["mean_rps"],
                                                 "burstiness": shape["burstiness"],
                                                 "rates_rps": []})
        notes.append(f"traffic from {trace_path}: {shape['requests']:.0f} requests over "
                     f"{shape['span_s']:.0f} s, mean {shape['mean_rps']:.3f} req/s, gap SCV "
                     f"{shape['scv_measured']:.2f}")
    traffic = validate(Traffic, traffic_data, f"traffic {traffic_path or ''}".strip())

    features = None
    if model_path is not None:
        features = bud.load_features(model_path)
        name = getattr(features, "name", None) or Path(model_path).name
        size = bud.size_from_features(features, name, f"--model {model_path}")
    else:
        size = bud.size_from_params(parse_count(params), dtype)

    prediction = None
    engine = None
    if startup_model:
        if features is None:
            raise ColdscopeError("--startup-model needs --model (the predictor reads features)")
        from coldscope.predictor import StartupModel

        prediction = StartupModel.load(startup_model).predict(features)
        engine = bud.engine_from_prediction(prediction, startup_model)
        notes.extend(prediction.warnings)
    runs = [] if no_store or model_path is None else _stored_runs(store_path, model_path, cache)
    check = None
    if runs and prediction is not None:
        check = bud.check_engine_init(runs, prediction)
    if engine is None and runs:
        engine = bud.engine_from_runs(runs)
    if engine is None:
        engine = bud.engine_from_default(profile)

    layers = tuple(name.strip() for item in mitigate for name in item.split(",") if name.strip())
    from coldscope.plan.mitigations import canonical

    layers = canonical(layers)
    sla_s = parse_duration(sla) if sla is not None else None
    search = cheapest or (sla_s is not None and not layers and not min_workers)
    if cheapest and sla_s is None:
        raise ColdscopeError("--cheapest needs --sla-p99-ttft")

    report = make_plan(PlanRequest(
        size=size, profile=profile, engine=engine, layers=layers, min_workers=min_workers,
        products=products, sla_s=sla_s, cheapest=search, traffic=traffic, tiers=tiers,
        engine_check=check, notes=tuple(notes),
    ))
    if as_json:
        print_json(report)
    else:
        from coldscope.cli.common import console
        from coldscope.plan.render import render_plan

        console().print(render_plan(report))


def _stored_runs(store_path: str | None, model_path: str, cache: str | None) -> list[dict]:
    """Finished runs of this model in the store (matched by path, else by directory name)."""
    from coldscope.store import Store, default_store_path

    path = Path(store_path) if store_path else default_store_path()
    if not path.exists():
        if store_path:
            raise ColdscopeError(f"no store at {path}")
        return []
    with Store(path, create=False) as store:
        runs = store.runs("ok", cache=cache)
    want = Path(model_path).resolve()
    name = want.name

    def matches(run: dict) -> bool:
        stored = (run.get("model") or {}).get("path") or (run.get("engine") or {}).get("model")
        if stored and Path(stored).resolve() == want:
            return True
        return (run.get("model") or {}).get("name") == name or (
            stored is not None and Path(stored).name == name)

    return [r for r in runs if matches(r)]
