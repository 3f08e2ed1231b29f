"""``coldscope report``: one self-contained HTML page of the runs (or of the paper's data)."""

from __future__ import annotations

from pathlib import Path

import click

from coldscope.cli.common import json_option, print_json, store_option
from coldscope.errors import ColdscopeError


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
def report(output, runs, model, paper, startup_model, title, store_path, as_json):
    """Write a self-contained HTML report (opens offline): stage breakdown, per-process
    timeline, scaling, comparisons, CPU use and predictions, each with a table and CSV."""
    from coldscope.report.build import make_report

    if paper is not None and not Path(paper).is_dir():
        raise ColdscopeError(f"paper data directory {paper} does not exist")
    selectors = [s.strip() for s in (runs or "").split(",") if s.strip()]
    page, data = make_report(store_path=store_path, runs=selectors, model=model, paper=paper,
                             startup_model=startup_model, title=title)
    out = Path(output)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ColdscopeError(f"cannot write {out}: {exc.strerror or exc}") from None
    summary = {"output": str(out), "bytes": len(page.encode("utf-8")), "runs": data["runs"],
               "configurations": data["configurations"],
               "timelines": len(data["timelines"]), "comparisons": len(data["comparisons"]),
               "scaling_panels": sum(1 for p in data["scaling"] if p["series"]),
               "predictions": data["predictions"] is not None}
    if as_json:
        print_json(summary)
    else:
        click.echo(f"wrote {out} ({summary['bytes'] / 1e6:.2f} MB): {data['runs']} runs, "
                   f"{data['configurations']} configurations")
