"""``coldscope traces``: request traces for the simulator (``synth`` writes one)."""

from __future__ import annotations

from pathlib import Path

import click

from coldscope.cli.common import echo, json_option, print_json
from coldscope.util.errors import ColdscopeError


@click.group("traces")
def traces() -> None:
    """Request traces for the simulator."""


@traces.command("synth")
@click.option("--days", type=float, default=7.0, show_default=True,
              help="Length of the trace (at most 366 days).")
@click.option("--rate", default="45/s", show_default=True,
              help="Mean request rate over the whole trace, e.g. 45/s, 2700/min.")
@click.option("--diurnal", is_flag=True, help="Daily cycle: peak 14:00, trough 02:00 (3:1).")
@click.option("--bursts", is_flag=True, help="~8 bursts a day, 1-10 min, 2-5x the rate.")
@click.option("--idle-nights", is_flag=True, help="No requests 01:00-06:00.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Output file: .csv or .parquet (generic format).")
@click.option("--out", "out_alias", type=click.Path(dir_okay=False), default=None, hidden=True)
@json_option
def synth(days: float, rate: str, diurnal: bool, bursts: bool, idle_nights: bool, seed: int,
          out_path: str | None, out_alias: str | None, as_json: bool) -> None:
    """Write a synthetic trace (Poisson arrivals, Azure-like token counts)."""
    from coldscope.cli.progress import bar, wanted
    from coldscope.planning.traces import check_synth_size, parse_rate, synthesize, write_trace
    from coldscope.util.safeio import check_output_target
    if out_path and out_alias:
        raise ColdscopeError("give -o/--output (or its old name --out), not both")
    out_path = out_path or out_alias
    if not out_path:
        raise ColdscopeError("give the output file: -o/--output FILE.csv or FILE.parquet")
    if not Path(out_path).parent.is_dir():
        raise ColdscopeError(f"cannot write {out_path}: no such directory")
    check_output_target(out_path)  # before the work: never a device node, FIFO or directory
    per_s = parse_rate(rate)
    check_synth_size(days, per_s)
    with bar("generating", wanted(as_json)) as update:
        trace = synthesize(days, per_s, diurnal=diurnal, bursts=bursts,
                           idle_nights=idle_nights, seed=seed)
        write_trace(trace, out_path,
                    progress=lambda done, total: update(done / max(total, 1), "writing"))
    info = {**trace.describe(), "path": out_path}
    if as_json:
        print_json(info)
    else:
        echo(f"wrote {len(trace):,} requests over {trace.duration / 86400:.2f} days to "
             f"{out_path}")
