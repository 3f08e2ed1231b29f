"""``coldscope simulate`` and ``coldscope traces synth``: thin shells over ``coldscope.sim``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from coldscope.cli.common import json_option, print_json, store_option
from coldscope.errors import ColdscopeError


def _load_profile(path: str | None, overrides: dict[str, Any]):
    from pydantic import ValidationError

    from coldscope.sim.simulate import Profile

    data: dict[str, Any] = {}
    if path:
        from coldscope.config_file import read_mapping

        data = read_mapping(path, "profile")
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ColdscopeError(f"bad profile field {'.'.join(map(str, first['loc']))}: "
                             f"{first['msg']}") from exc


def _startup(startup_model, model, plan, from_store, store_path, label, startup_s):
    """The cold-start distribution the options ask for; None means the documented default."""
    from coldscope.sim import startup as st

    chosen = [x for x in (startup_model, plan, from_store or None, startup_s) if x is not None]
    if len(chosen) > 1:
        raise ColdscopeError("give one of --startup-model, --startup-plan, --startup-from-store, "
                             "--startup-s")
    if startup_model:
        if not model:
            raise ColdscopeError("--startup-model needs --model (the model to predict for)")
        return st.from_startup_model(startup_model, model)
    if model:
        raise ColdscopeError("--model is used with --startup-model")
    if plan:
        try:
            data = json.loads(Path(plan).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ColdscopeError(f"cannot read plan {plan}: {exc}") from exc
        return st.from_plan(data, plan)
    if from_store:
        from coldscope.store import Store

        store = Store(store_path, create=False)
        filters = {"label": label} if label else {}
        return st.from_store_runs(store.runs("ok", **filters), f"store {store.path}"
                                  + (f" (label {label})" if label else ""))
    if startup_s is not None:
        return st.Fixed(startup_s, source="--startup-s")
    return None


def _print_summary(d: dict[str, Any]) -> None:
    t, w = d["ttft_s"], d["wait_s"]
    start = d["startup"]

    def s(x):
        return "-" if x is None else f"{x:.3g} s"

    click.echo(f"trace      {d['trace']['source']}: {d['requests']:,} requests over "
               f"{d['trace']['duration_s'] / 3600:.2f} h")
    if d["trace"]["repairs"]:
        click.echo(f"repairs    {d['trace']['repairs']}")
    click.echo(f"policy     {d['policy']['name']} {d['policy']['params']}")
    click.echo(f"start-up   {start['source']}" + (f" (x{start['scale']:g} + {start['extra_s']:g} s)"
                                                  if "scale" in start else ""))
    click.echo(f"TTFT       p50 {s(t['p50'])}  p90 {s(t['p90'])}  p99 {s(t['p99'])}  "
               f"max {s(t['max'])}")
    att = d["sla_attainment"]
    click.echo(f"SLA        {'-' if att is None else f'{att:.2%}'} of requests with TTFT <= "
               f"{d['sla_ttft_s']:g} s; waited: {w['p_wait'] or 0:.2%}")
    click.echo(f"cold       {d['cold_starts']:,} cold starts ({d['cold_starts_cancelled']:,} "
               f"cancelled), {d['cold_start_requests']:,} requests hit one")
    click.echo(f"replicas   max {d['max_replicas']}, {d['replica_seconds'] / 3600:,.1f} "
               f"replica-hours, {d['gpu_hours']:,.1f} GPU-hours, cost {d['cost']:,.2f}")
    if d["unserved"]:
        click.echo(f"unserved   {d['unserved']:,} requests never started (counted as SLA misses)")


@click.command("simulate")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Request trace: Azure (TIMESTAMP, ContextTokens, GeneratedTokens) or "
                   "generic (arrival_s, context_tokens, generated_tokens), CSV or Parquet.")
@click.option("--repair", is_flag=True,
              help="Drop malformed rows / sort an unsorted trace, and report the counts.")
@click.option("--policy", default="reactive", show_default=True,
              type=click.Choice(["reactive", "warm-pool", "predictive", "fixed"]))
@click.option("--min-workers", type=int, default=None,
              help="Replicas kept warm (warm-pool, reactive); the pool size for 'fixed'.")
@click.option("--max-workers", type=int, default=None)
@click.option("--target", type=float, default=None,
              help="Concurrency per replica the policy aims at (default 70% of --concurrency).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Any other policy parameter, e.g. --set stable_window_s=120.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="Worker profile (YAML/JSON): concurrency, token rates, GPUs, price.")
@click.option("--concurrency", type=int, default=None, help="Requests per replica at once.")
@click.option("--prefill-rate", type=float, default=None, help="Prefill tokens/s per request.")
@click.option("--decode-rate", type=float, default=None, help="Decode tokens/s per request.")
@click.option("--gpu-hour-price", type=float, default=None)
@click.option("--sla", "sla_ttft_s", type=float, default=2.0, show_default=True,
              help="TTFT SLA in seconds.")
@click.option("--startup-model", type=click.Path(dir_okay=False), default=None,
              help="Startup model file (coldscope fit); needs --model.")
@click.option("--model", type=click.Path(), default=None, help="Model to predict start-up for.")
@click.option("--startup-plan", type=click.Path(dir_okay=False), default=None,
              help="A `coldscope plan --json` output: its end-to-end cold start.")
@click.option("--startup-from-store", is_flag=True,
              help="Resample measured time to ready of the store's runs.")
@store_option
@click.option("--label", default=None, help="Only store runs with this label.")
@click.option("--startup-s", type=float, default=None, help="A fixed start-up time (s).")
@click.option("--startup-scale", type=float, default=1.0, show_default=True,
              help="Mitigation: multiply every start-up by this.")
@click.option("--startup-extra", "startup_extra_s", type=float, default=0.0, show_default=True,
              help="Seconds added to every start-up (provisioning, image pull...).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--sweep", "sweep_path", type=click.Path(dir_okay=False), default=None,
              help="Sweep file (YAML): a grid of policy/profile/mitigation parameters.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local",
              show_default=True, help="Where sweep cases run.")
@click.option("--jobs", type=int, default=None, help="Local sweep processes (default: CPUs).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the full result (with the timeline) as JSON here.")
@json_option
def simulate(trace_path, repair, policy, min_workers, max_workers, target, sets, profile_path,
             concurrency, prefill_rate, decode_rate, gpu_hour_price, sla_ttft_s, startup_model,
             model, startup_plan, startup_from_store, store_path, label, startup_s,
             startup_scale, startup_extra_s, seed, sweep_path, executor, jobs, out_path,
             as_json):
    """Simulate autoscaling with cold starts over a request trace: TTFT, SLA, GPU-hours."""
    from pydantic import ValidationError

    from coldscope.sim.simulate import SimConfig
    from coldscope.sim.simulate import simulate as run
    from coldscope.sim.traces import read_trace

    params: dict[str, Any] = {}
    if min_workers is not None:
        params["workers" if policy == "fixed" else "min_workers"] = min_workers
    if max_workers is not None:
        params["max_workers"] = max_workers
    if target is not None:
        params["target"] = target
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ColdscopeError(f"--set takes KEY=VALUE, got {item!r}")
        import yaml

        params[key.strip()] = yaml.safe_load(value)
    profile = _load_profile(profile_path, {
        "concurrency": concurrency, "prefill_tokens_per_s": prefill_rate,
        "decode_tokens_per_s": decode_rate, "gpu_hour_price": gpu_hour_price})
    try:
        config = SimConfig(policy=policy, policy_params=params, profile=profile,
                           sla_ttft_s=sla_ttft_s, startup_scale=startup_scale,
                           startup_extra_s=startup_extra_s, seed=seed)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ColdscopeError(f"bad option {'.'.join(map(str, first['loc']))}: "
                             f"{first['msg']}") from exc
    startup = _startup(startup_model, model, startup_plan, startup_from_store, store_path,
                       label, startup_s)
    trace = read_trace(trace_path, repair=repair)
    if sweep_path:
        from coldscope.sim.sweep import expand, load_sweep, run_sweep

        cases = expand(config, load_sweep(sweep_path))
        rows = run_sweep(trace, cases, startup, executor=executor, jobs=jobs)
        out = {"trace": trace.describe(), "cases": rows}
        if out_path:
            Path(out_path).write_text(json.dumps(out, indent=2))
        if as_json:
            print_json(out)
            return
        _print_sweep(rows)
        return
    try:
        result = run(trace, config, startup)
    except (TypeError, ValueError) as exc:  # a policy parameter the policy refuses
        raise ColdscopeError(f"cannot simulate: {exc}") from exc
    full = result.to_dict()
    if out_path:
        Path(out_path).write_text(json.dumps(full, indent=2))
    if as_json:
        print_json(full)
        return
    _print_summary(full)
    if full["startup"]["default"]:
        click.echo("note       no startup model given: start-up drawn from the paper's measured "
                   "H100 spread (engine only)")


def _print_sweep(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from coldscope.cli.common import console

    keys = sorted({k for r in rows for k in r["params"]})
    table = Table(title=f"{len(rows)} cases")
    for k in keys:
        table.add_column(k)
    for col in ("TTFT p99", "SLA", "cold starts", "cold reqs", "GPU-h", "cost"):
        table.add_column(col, justify="right")
    for r in rows:
        d = r["result"]
        p99 = d["ttft_s"]["p99"]
        att = d["sla_attainment"]
        table.add_row(*[str(r["params"].get(k, "")) for k in keys],
                      "-" if p99 is None else f"{p99:.3g}",
                      "-" if att is None else f"{att:.2%}", f"{d['cold_starts']:,}",
                      f"{d['cold_start_requests']:,}", f"{d['gpu_hours']:,.1f}",
                      f"{d['cost']:,.2f}")
    console().print(table)


@click.group("traces")
def traces() -> None:
    """Request traces for the simulator."""


@traces.command("synth")
@click.option("--days", type=float, default=7.0, show_default=True)
@click.option("--rate", default="45/s", show_default=True,
              help="Mean request rate over the whole trace, e.g. 45/s, 2700/min.")
@click.option("--diurnal", is_flag=True, help="Daily cycle: peak 14:00, trough 02:00 (3:1).")
@click.option("--bursts", is_flag=True, help="~8 bursts a day, 1-10 min, 2-5x the rate.")
@click.option("--idle-nights", is_flag=True, help="No requests 01:00-06:00.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="Output file: .csv or .parquet (generic format).")
@json_option
def synth(days, rate, diurnal, bursts, idle_nights, seed, out_path, as_json):
    """Write a synthetic trace (Poisson arrivals, Azure-like token counts)."""
    from coldscope.sim.traces import parse_rate, synthesize, write_trace

    trace = synthesize(days, parse_rate(rate), diurnal=diurnal, bursts=bursts,
                       idle_nights=idle_nights, seed=seed)
    write_trace(trace, out_path)
    info = {**trace.describe(), "path": out_path}
    if as_json:
        print_json(info)
    else:
        click.echo(f"wrote {len(trace):,} requests over {trace.duration / 86400:.2f} days to "
                   f"{out_path}")
