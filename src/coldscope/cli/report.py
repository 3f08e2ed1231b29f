"""``coldscope report``: one self-contained HTML page of the runs (or of the paper's data)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from coldscope.cli.common import console, echo, json_option, print_json, store_option
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_output_target, write_atomic, writes_to_stdout

if TYPE_CHECKING:
    from rich.console import Console

#: A store with at least this many runs gets a progress bar (on a terminal, without --json).
LARGE_STORE = 200


@click.command()
@click.option("-o", "--output", default="report.html", show_default=True,
              type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option("--runs", "runs", default=None, metavar="SEL[,SEL...]",
              help="Only runs whose cache (cold, warm), label or id prefix is one of these.")
@click.option("--model", default=None, help="Only runs of this model (name or path).")
@click.option("--paper", default=None, type=click.Path(file_okay=False),
              help="Report on the paper's published data in DIR instead of the store.")
@click.option("--startup-model", default=None, type=click.Path(dir_okay=False),
              help="A fitted startup model (coldscope fit --out): predicted vs measured.")
@click.option("--title", default=None, help="Page title.")
@store_option
@json_option
def report(output: str, runs: str | None, model: str | None, paper: str | None,
           startup_model: str | None, title: str | None, store_path: str | None,
           as_json: bool) -> None:
    """Write a self-contained HTML report (opens offline): stage breakdown, per-process
    timeline, scaling, comparisons, start-up per release (`coldscope releases` runs), tune
    sessions as waterfalls, CPU use and predictions, each with a table and CSV."""
    from coldscope.report.build import make_report
    from coldscope.store.selection import parse_selectors
    if paper is not None and not Path(paper).is_dir():
        raise ColdscopeError(f"paper data directory {paper} does not exist")
    check_output_target(output)  # before the work: never a device node, FIFO or directory
    with report_progress(console(), as_json=as_json, store_path=store_path,
                         paper=paper) as progress:
        page, data = make_report(store_path=store_path, runs=parse_selectors(runs),
                                 model=model, paper=paper, startup_model=startup_model,
                                 title=title, progress=progress)
    out = Path(output)
    try:
        write_atomic(out, page.encode("utf-8"))
    except OSError as exc:
        raise ColdscopeError(f"cannot write {out}: {exc.strerror or exc}") from None
    size = len(page.encode("utf-8"))
    summary = {"output": str(out), "bytes": size, **data.counts()}
    said = writes_to_stdout(out)  # the page is on stdout: what was written, on stderr
    if as_json:
        print_json(summary, err=said)
    else:
        echo(f"wrote {out} ({size / 1e6:.2f} MB): {data.runs} runs, "
             f"{data.configurations} configurations", err=said)


@contextmanager
def report_progress(out: Console, *, as_json: bool, store_path: str | None = None,
                    paper: str | None = None, large: int = LARGE_STORE
                    ) -> Iterator[Callable[[str, float], None] | None]:
    """A rich progress bar fed by ``make_report``'s phases, for a big store on a terminal;
    None (nothing shown) under ``--json``, when output is piped, and for small stores."""
    count = large
    if paper is None and not as_json and out.is_terminal:
        from coldscope.store.db import Store
        try:
            with Store(store_path, create=False) as store:
                count = store.count()
        except ColdscopeError:  # make_report says what is wrong with the store
            count = 0
    if as_json or not out.is_terminal or count < large:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("report: {task.description}"), BarColumn(),
                  TextColumn("{task.percentage:>3.0f} %"), TimeElapsedColumn(),
                  console=out, transient=True) as bar:
        task = bar.add_task("starting", total=1.0)
        yield lambda what, fraction: bar.update(task, description=what, completed=fraction)
