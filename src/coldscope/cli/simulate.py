"""``coldscope simulate``: parse the options, build a ``SimRequest``, call ``coldscope.sim.run``,
render the ``SimResult`` (or ``SweepResult``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from coldscope.cli.common import echo, json_option, print_json, store_option
from coldscope.sim.policies import POLICIES
from coldscope.sim.sweep import EXECUTORS
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_output_target, write_atomic


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g} s"


def policy_text(name: str, params: dict[str, Any]) -> str:
    """The policy by its CLI name, plus only the parameters that differ from its defaults."""
    cls = POLICIES.get(name)
    defaults = {k: v for k, v in vars(cls()).items()} if cls else {}
    changed = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
               for k, v in params.items() if k not in defaults or defaults[k] != v]
    return name + (f" ({', '.join(changed)})" if changed else "")


def render_summary(r) -> str:
    """A ``SimResult`` as the lines a person reads."""
    t, w, start = r.ttft_s, r.wait_s, r.startup
    cur = r.currency
    lines = [
        f"trace      {r.trace.source}: {r.requests:,} requests over "
        f"{r.trace.duration_s / 3600:.2f} h",
    ]
    if r.trace.repairs:
        lines.append("repairs    " + ", ".join(f"{k} {v:,}" for k, v in r.trace.repairs.items()))
    lines += [
        f"policy     {policy_text(r.policy.name, r.policy.params)}",
        f"start-up   {start.source}" + (f" (x{start.scale:g} + {start.extra_s:g} s)"
                                        if (start.scale, start.extra_s) != (1.0, 0.0) else ""),
        f"TTFT       p50 {_fmt_s(t.p50)}  p90 {_fmt_s(t.p90)}  p99 {_fmt_s(t.p99)}  "
        f"max {_fmt_s(t.max)}",
        f"SLA        {'-' if r.sla_attainment is None else f'{r.sla_attainment:.2%}'} of "
        f"requests with TTFT <= {r.sla_ttft_s:g} s; waited: {w.p_wait or 0:.2%}",
        f"cold       {r.cold_starts:,} cold starts ({r.cold_starts_cancelled:,} cancelled), "
        f"{r.cold_start_requests:,} requests hit one",
        f"replicas   max {r.max_replicas}, {r.replica_seconds / 3600:,.1f} replica-hours, "
        f"{r.gpu_hours:,.1f} GPU-hours, cost {r.cost:,.2f} {cur} "
        f"({r.replica.gpu_hour_price:.2f} {cur} per {r.replica.gpu} GPU-hour)",
    ]
    if r.unserved:
        lines.append(f"unserved   {r.unserved:,} requests never started (counted as SLA misses)")
    if start.default:
        lines.append("note       no startup model given: start-up drawn from the paper's measured "
                     "H100 spread (engine only)")
    return "\n".join(lines)


def _render_sweep(result) -> None:
    from rich.table import Table

    from coldscope.cli.common import console
    rows = result.cases
    keys = sorted({k for r in rows for k in r.params})
    table = Table(title=f"{len(rows)} cases")
    for k in keys:
        table.add_column(k)
    cur = rows[0].result.currency if rows else ""
    for col in ("TTFT p99", "SLA", "cold starts", "cold reqs", "GPU-h", f"cost ({cur})"):
        table.add_column(col, justify="right")
    for r in rows:
        d = r.result
        p99, att = d.ttft_s.p99, d.sla_attainment
        table.add_row(*[str(r.params.get(k, "")) for k in keys],
                      "-" if p99 is None else f"{p99:.3g}",
                      "-" if att is None else f"{att:.2%}", f"{d.cold_starts:,}",
                      f"{d.cold_start_requests:,}", f"{d.gpu_hours:,.1f}", f"{d.cost:,.2f}")
    console().print(table)


def _duration(ctx, param, value):
    if value is None:
        return None
    from coldscope.planning.infra import parse_duration
    return parse_duration(value, what=f"--{param.name.replace('_', '-')}")


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
def simulate(trace_path, repair, policy, min_workers, max_workers, target, sets, replica_path,
             profile_path, concurrency, prefill_rate, decode_rate, gpu, gpu_hour_price, sla,
             startup_model, model, startup_plan, startup_from_store, store_path, label,
             startup_s, startup_scale, startup_extra_s, seed, sweep_path, executor, jobs,
             replica_limit, max_span_s, timeline, out_path, out_alias, as_json):
    """Simulate autoscaling with cold starts over a request trace: TTFT, SLA, GPU-hours."""
    from pydantic import ValidationError

    from coldscope.cli.progress import bar, wanted
    from coldscope.sim.request import SimRequest, StartupChoice, replica_spec, run
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
                                  seconds=startup_s))
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

        result = run(request, progress=progress)
    text = result.model_dump_json(indent=2, exclude_none=False)
    if out_path:
        try:
            write_atomic(out_path, (text + "\n").encode("utf-8"))
        except OSError as exc:
            raise ColdscopeError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    if request.sweep:
        _render_sweep(result)
        return
    echo(render_summary(result))
