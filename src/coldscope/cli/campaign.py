"""`coldscope campaign`: profile a matrix of models × flags × cache states, resumably."""

from __future__ import annotations

from pathlib import Path
from types import FrameType
from typing import Literal

import click

from coldscope.cli.common import console, echo, json_option, print_json, store_option
from coldscope.util.errors import ColdscopeError


@click.command("campaign")
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local",
              show_default=True, help="Run here, or as Ray tasks (one node per start-up).")
@click.option("--address", default=None,
              help="Ray cluster address (e.g. ray://head:10001); default: a local Ray instance.")
@click.option("--resume", is_flag=True,
              help="Run only the cells with no successful run in the store.")
@click.option("--concurrency", type=click.IntRange(1), default=None,
              help="Engines started at once on one node (contention study); default: the file's.")
@click.option("--dry-run", is_flag=True, help="List the cells and which are done; run nothing.")
@click.option("--verbose", is_flag=True, help="Echo the engine's output (one at a time only).")
@store_option
@json_option
def campaign(spec_file: str, executor: Literal["local", "ray"], address: str | None,
             resume: bool, concurrency: int | None, dry_run: bool, verbose: bool,
             store_path: str | None, as_json: bool) -> None:
    """Run the campaign in SPEC_FILE (YAML): every model × engine × flags × cache state,
    `repetitions` times, each run stored as soon as it ends. Exit status: 0 all cells done,
    2 some cells without a successful run (run again with --resume), 130 stopped by Ctrl-C."""
    from coldscope.campaign import campaign_runs, done_cells, expand, load_spec, run_campaign
    from coldscope.campaign.progress import Reporter, RichReporter
    from coldscope.campaign.summary import summarize
    from coldscope.store.db import Store
    spec = load_spec(spec_file)
    if address and executor != "ray":
        raise click.UsageError("--address needs --executor ray")
    store = Store(store_path)
    out = console()
    if dry_run:
        cells = expand(spec, Path.cwd(), concurrency)
        done = done_cells(store, spec.name)
        if as_json:
            print_json({"name": spec.name, "cells": [
                {**c.model_dump(mode="json"), "done": c.id in done} for c in cells]})
        else:
            for c in cells:
                out.print(f"{'done   ' if c.id in done else 'missing'} {c.id}", markup=False,
                          highlight=False)
            out.print(f"{len(cells)} cell(s), {sum(c.id in done for c in cells)} done")
        return
    reporter = Reporter() if as_json else RichReporter(out)
    _stop_on_sigterm()
    show_line = (lambda line: echo(f"  │ {line}", err=True)) if verbose and not as_json else None
    result = run_campaign(spec, store, executor=executor, address=address, resume=resume,
                          concurrency=concurrency, reporter=reporter, on_line=show_line)
    rows = summarize(campaign_runs(store, spec.name, status=None))
    if as_json:
        print_json({"result": result.model_dump(), "summary": rows})
    else:
        from coldscope.render.campaign import summary_table
        out.print(summary_table(rows))
        out.print(f"{result.done} of {result.cells} cells done; {result.runs_stored} runs stored "
                  f"this time ({result.failed_runs} failed) in {result.store}")
    if result.interrupted:
        echo(f"stopped; finish with: coldscope campaign {spec_file} --resume", err=True)
        raise KeyboardInterrupt
    if result.missing:
        raise ColdscopeError(f"{len(result.missing)} of {result.cells} cells have no successful "
                             f"run; retry them with: coldscope campaign {spec_file} --resume")


def _stop_on_sigterm() -> None:
    """SIGTERM (``kill``, ``timeout``, a scheduler) stops the campaign like Ctrl-C: the engine is
    stopped and the interrupted run stored, instead of an engine left running."""
    import signal

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
