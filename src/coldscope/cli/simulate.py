"""``coldscope simulate``: parse the options, build a ``SimRequest``, call the front door's
``coldscope.api.simulate``, print the ``SimResult`` (or ``SweepResult``) as
``coldscope.render.simulate`` draws it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from coldscope.cli.common import json_option, print_json, show, store_option
from coldscope.sim.policies import POLICIES
from coldscope.sim.sweep import EXECUTORS
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_output_target, write_atomic


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    from coldscope.planning.infra import parse_duration
    return parse_duration(value, what=f"--{(param.name or '').replace('_', '-')}")


@click.command("simulate")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Request trace: Azure (TIMESTAMP, ContextTokens, GeneratedTokens) or "
                   "generic (arrival_s, context_tokens, generated_tokens), CSV or Parquet.")
@click.option("--repair", is_flag=True,
              help="Drop malformed rows / sort an unsorted trace, and report the counts.")
@click.option("--policy", default="reactive", show_default=True, type=click.Choice(list(POLICIES)))
@click.option("--min-workers", type=int, default=None,
              help="Replicas kept warm (warm-pool, reactive); the pool size for 'fixed'.")
@click.option("--max-workers", type=int, default=None)
@click.option("--target", type=float, default=None,
              help="Concurrency per replica the policy aims at (default 70% of --concurrency).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Any other policy parameter, e.g. --set stable_window_s=120.")
@click.option("--replica", "replica_path", type=click.Path(dir_okay=False), default=None,
              help="Replica spec (YAML/JSON): concurrency, token rates, GPUs, gpu, price.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              hidden=True, help="Old name of --replica.")
@click.option("--concurrency", type=int, default=None, help="Requests per replica at once.")
@click.option("--prefill-rate", type=float, default=None, help="Prefill tokens/s per request.")
@click.option("--decode-rate", type=float, default=None, help="Decode tokens/s per request.")
@click.option("--gpu", default=None, help="GPU type for the price (the planner's GPU table); "
                                          "default H100.")
@click.option("--gpu-hour-price", type=float, default=None,
              help="Price per GPU-hour (default: the GPU's price in the planner's profile, "
                   "H100 4.00 USD).")
@click.option("--sla", default="2s", show_default=True, callback=_duration,
              help="TTFT SLA, a duration: 2s, 500ms.")
@click.option("--startup-model", type=click.Path(dir_okay=False), default=None,
              help="Startup model file (coldscope fit); needs --model.")
@click.option("--model", type=click.Path(), default=None, help="Model to predict start-up for.")
@click.option("--startup-plan", type=click.Path(dir_okay=False), default=None,
              help="A `coldscope plan --json` output: its end-to-end cold start.")
@click.option("--startup-from-store", is_flag=True,
              help="Resample measured time to ready of the store's runs.")
@store_option
@click.option("--label", default=None, help="Only store runs with this label.")
@click.option("--startup-s", default=None, callback=_duration,
              help="A fixed start-up time (a duration: 45s, 2min).")
@click.option("--startup-scale", type=float, default=1.0, show_default=True,
              help="Mitigation: multiply every start-up by this.")
@click.option("--startup-extra", "startup_extra_s", default="0s", show_default=True,
              callback=_duration,
              help="Time added to every start-up (provisioning, image pull...).")
@click.option("--standby-saving", "standby_saving_s", default=None, callback=_duration,
              help="A standby launcher on the nodes: seconds off every start-up (a duration: "
                   "7s), before --startup-scale and --startup-extra.")
@click.option("--standby-from", "standby_from", type=click.Path(dir_okay=False), default=None,
              help="A `coldscope compare --json` of the default (a) against the same command "
                   "through a standby launcher (b): its mean bootstrap saving, as "
                   "--standby-saving.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--sweep", "sweep_path", type=click.Path(dir_okay=False), default=None,
              help="Sweep file (YAML): a grid of policy/replica/mitigation parameters.")
@click.option("--executor", type=click.Choice(list(EXECUTORS)), default="local",
              show_default=True, help="Where sweep cases run.")
@click.option("--jobs", type=int, default=None, help="Local sweep processes (default: CPUs).")
@click.option("--replica-limit", type=int, default=None,
              help="Most replicas a run may hold (default 100,000).")
@click.option("--max-span", "max_span_s", default=None, callback=_duration,
              help="Longest trace replayed (default 31d).")
@click.option("--timeline", is_flag=True,
              help="Include the per-bucket timeline (the report's series) in the JSON.")
@click.option("-o", "--output", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON result here.")
@click.option("--out", "out_alias", type=click.Path(dir_okay=False), default=None, hidden=True)
@json_option
def simulate(trace_path: str, repair: bool, policy: str, min_workers: int | None,
             max_workers: int | None, target: float | None, sets: tuple[str, ...],
             replica_path: str | None, profile_path: str | None, concurrency: int | None,
             prefill_rate: float | None, decode_rate: float | None, gpu: str | None,
             gpu_hour_price: float | None, sla: float, startup_model: str | None,
             model: str | None, startup_plan: str | None, startup_from_store: bool,
             store_path: str | None, label: str | None, startup_s: float | None,
             startup_scale: float, startup_extra_s: float, standby_saving_s: float | None,
             standby_from: str | None, seed: int, sweep_path: str | None,
             executor: str, jobs: int | None, replica_limit: int | None,
             max_span_s: float | None, timeline: bool, out_path: str | None,
             out_alias: str | None, as_json: bool) -> None:
    """Simulate autoscaling with cold starts over a request trace: TTFT, SLA, GPU-hours."""
    from pydantic import ValidationError

    from coldscope.api import simulate as run_simulation
    from coldscope.cli.progress import bar, wanted
    from coldscope.sim.request import SimRequest, StartupChoice, replica_spec
    from coldscope.util.errors import validation_error
    params: dict[str, Any] = {}
    if min_workers is not None:
        params["workers" if policy == "fixed" else "min_workers"] = min_workers
    if max_workers is not None:
        params["max_workers"] = max_workers
    if target is not None:
        params["target"] = target
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ColdscopeError(f"--set takes KEY=VALUE, got {item!r}")
        from coldscope.util.safeio import loads_yaml
        # alias-free, bounded nesting, finite numbers: a YAML value on the command line
        params[key.strip()] = loads_yaml(value, f"--set {key.strip()}: cannot read value")
    if replica_path and profile_path:
        raise ColdscopeError("give --replica (or its old name --profile), not both")
    replica = replica_spec(replica_path or profile_path, {
        "concurrency": concurrency, "prefill_tokens_per_s": prefill_rate,
        "decode_tokens_per_s": decode_rate, "gpu": gpu, "gpu_hour_price": gpu_hour_price})
    config: dict[str, Any] = {
        "policy": policy, "policy_params": params, "replica": replica, "sla_ttft_s": sla,
        "startup_scale": startup_scale, "startup_extra_s": startup_extra_s, "seed": seed}
    if standby_saving_s is not None:
        if standby_from:
            raise ColdscopeError("give one of --standby-from and --standby-saving")
        config["standby_saving_s"] = standby_saving_s
        config["standby_source"] = "--standby-saving"
    if replica_limit is not None:
        config["replica_limit"] = replica_limit
    if max_span_s is not None:
        config["max_span_s"] = max_span_s
    try:
        request = SimRequest(
            trace=trace_path, repair=repair, config=config, timeline=timeline,
            sweep=sweep_path, executor=executor, jobs=jobs,
            startup=StartupChoice(startup_model=startup_model, model=model, plan=startup_plan,
                                  from_store=startup_from_store, store=store_path, label=label,
                                  seconds=startup_s, standby_from=standby_from))
    except ValidationError as exc:
        raise validation_error(exc, "option") from None
    if out_path and out_alias:
        raise ColdscopeError("give -o/--output (or its old name --out), not both")
    out_path = out_path or out_alias
    if out_path and Path(out_path).parent.is_dir() is False:
        raise ColdscopeError(f"cannot write {out_path}: no such directory")
    if out_path:  # before the work: never a device node, FIFO or directory
        check_output_target(out_path)

    with bar("reading the trace", wanted(as_json)) as update:
        def progress(fraction: float) -> None:
            update(fraction, "simulating")

        result = run_simulation(request, progress=progress)
    text = result.model_dump_json(indent=2, exclude_none=False)
    if out_path:
        try:
            write_atomic(out_path, (text + "\n").encode("utf-8"))
        except OSError as exc:
            raise ColdscopeError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    show(result)
