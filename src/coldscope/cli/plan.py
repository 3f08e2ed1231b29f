"""``coldscope plan``: parse the options, build a ``PlanRequest``, call ``coldscope.plan``
(``coldscope.planning.planner.plan``), render the ``PlanReport``."""

from __future__ import annotations

from pathlib import Path

import click

from coldscope.cli.common import json_option, print_json, show, store_option
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_output_target, write_atomic


def _layer_help() -> str:
    from coldscope.planning.mitigations import LAYER_NAMES
    return ("Mitigation layer(s), comma-separated or repeated: " + ", ".join(LAYER_NAMES)
            + "; the warm pool is --min-workers.")


@click.command("plan")
@click.option("--model", "model_path", type=click.Path(exists=True), default=None,
              help="Model directory (or config / index / features JSON) to size.")
@click.option("--params", default=None,
              help="Parameter count instead of --model: 70B, 7e10, 500M (at least 1e6).")
@click.option("--dtype", default="bf16", show_default=True, help="Storage dtype with --params.")
@click.option("--gpu", default=None, help="GPU type from the profile (H100, L40S, A10G, L4).")
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="YAML with the profile keys to override.")
@click.option("--startup-model", "startup_model", type=click.Path(exists=True, dir_okay=False),
              default=None, help="Startup model JSON (coldscope fit) for engine start-up.")
@click.option("--tuned", "tuned", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A `coldscope tune --json` output: its winner's measured start-up is the "
                   "engine figure.")
@store_option
@click.option("--no-store", is_flag=True, help="Do not use measured runs from the store.")
@click.option("--cache", type=click.Choice(["cold", "warm"]), default=None,
              help="Use only stored runs with this cache state.")
@click.option("--mitigate", "mitigate", multiple=True, help=_layer_help())
@click.option("--min-workers", type=int, default=0, show_default=True,
              help="Warm pool: replicas kept up 24x7 per product (0-10,000).")
@click.option("--products", type=int, default=1, show_default=True,
              help="Endpoints (products) the cost covers.")
@click.option("--sla-p99-ttft", "--sla", "sla", default=None,
              help="P99 time-to-first-token SLA, a duration: 2s, 500ms.")
@click.option("--traffic", "traffic_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="YAML traffic shape (rates_rps, mean_rps, burstiness, ...).")
@click.option("--trace", "trace_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="Request trace (CSV or Parquet, as simulate reads): sets the "
                                 "mean rate and burstiness.")
@click.option("--cheapest", is_flag=True,
              help="Search the cheapest stack that meets --sla-p99-ttft (default when an SLA "
                   "is given without --mitigate / --min-workers); with --mitigate, search "
                   "only combinations of those layers.")
@click.option("--tiers", "tiers_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="YAML of tiers (name, sla_p99_ttft, products, traffic, ...).")
@click.option("--standby-from", "standby_from", type=click.Path(exists=True, dir_okay=False),
              default=None,
              help="A `coldscope compare --json` of the default start-up (a) against the same "
                   "command through a standby launcher (b, --b-standby): the standby_launcher "
                   "layer's measured share of bootstrap (apply it with --mitigate "
                   "standby_launcher; an SLA search tries it).")
@click.option("-o", "--output", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON report here.")
@json_option
def plan_cmd(model_path: str | None, params: str | None, dtype: str, gpu: str | None,
             profile_path: str | None, startup_model: str | None, tuned: str | None,
             store_path: str | None, no_store: bool, cache: str | None,
             mitigate: tuple[str, ...], min_workers: int, products: int, sla: str | None,
             traffic_path: str | None, trace_path: str | None, cheapest: bool,
             tiers_path: str | None, standby_from: str | None, out_path: str | None,
             as_json: bool) -> None:
    """Plan a cold start from zero: where the time goes, what each mitigation removes and
    costs, and the cheapest stack that meets a P99 TTFT SLA."""
    from pydantic import ValidationError

    from coldscope.api import plan
    from coldscope.planning.planner import PlanRequest
    from coldscope.util.errors import validation_error
    tuned_figures = None
    if tuned:
        from coldscope.tuning.tuned import tuned_startup
        tuned_figures = {**tuned_startup(tuned), "source": tuned}
    try:
        request = PlanRequest(
            model=model_path, params=params, dtype=dtype, gpu=gpu, profile=profile_path,
            startup_model=startup_model, tuned=tuned_figures, store=store_path, no_store=no_store,
            cache=cache,
            mitigate=list(mitigate), min_workers=min_workers, products=products,
            sla_p99_ttft=sla, traffic=traffic_path, trace=trace_path, cheapest=cheapest,
            tiers=tiers_path, standby_from=standby_from)
    except ValidationError as exc:
        raise validation_error(exc, "option") from None
    if out_path and not Path(out_path).parent.is_dir():
        raise ColdscopeError(f"cannot write {out_path}: no such directory")
    if out_path:  # before the work: never a device node, FIFO or directory
        check_output_target(out_path)
    report = plan(request)
    if out_path:
        try:
            write_atomic(out_path, (report.model_dump_json(indent=2) + "\n").encode("utf-8"))
        except OSError as exc:
            raise ColdscopeError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    if as_json:
        print_json(report.to_json())
        return
    show(report)
