"""Campaigns: a matrix of models × engines × flags × cache states × repetitions, profiled
unattended on this machine or spread over a Ray cluster, resumable after a crash.

``run_campaign(spec, store)`` is the one entry point; ``coldscope campaign FILE`` is its CLI.
Every run lands in the ordinary store (label = campaign name, plus a ``"campaign"`` block naming
its cell), so ``coldscope runs``, ``fit`` and ``report`` read campaign runs like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from coldscope.campaign.matrix import Cell, expand, missing
from coldscope.campaign.progress import Reporter
from coldscope.campaign.spec import CampaignSpec, load_spec, parse_spec
from coldscope.core.records import Run
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.store.db import Store

__all__ = ["CampaignResult", "CampaignSpec", "campaign_runs", "done_cells", "expand",
           "load_spec", "parse_spec", "run_campaign"]


class CampaignResult(BaseModel):
    """What a campaign invocation did. Cell counts are over the whole matrix."""

    model_config = ConfigDict(extra="forbid")

    name: str
    store: str
    executor: Literal["local", "ray"]
    concurrency: int
    cells: int
    done_before: int
    done: int
    runs_stored: int
    failed_runs: int
    interrupted: bool
    missing: list[str]


def campaign_runs(store: Store, name: str, status: str | None = None) -> list[Run]:
    """The stored runs of campaign ``name`` (priming runs included)."""
    return [r for r in store.runs(status=status, label=name)
            if r.campaign is not None and r.campaign.kind == "campaign"
            and r.campaign.name == name]


def done_cells(store: Store, name: str) -> set[str]:
    """Ids of the cells with a successful measured run in the store."""
    return {r.campaign.cell for r in campaign_runs(store, name, status="ok")
            if r.campaign is not None and r.campaign.cell and r.campaign.role == "measure"}


def run_campaign(spec: CampaignSpec, store: Store, *, base: Path | None = None,
                 executor: Literal["local", "ray"] = "local", address: str | None = None,
                 resume: bool = False, concurrency: int | None = None,
                 reporter: Reporter | None = None,
                 on_line: Callable[[str], None] | None = None,
                 cells: list[Cell] | None = None) -> CampaignResult:
    """Run the cells of ``spec`` that have no successful run in ``store`` yet.

    ``base``: the directory relative paths in the spec are resolved against (default: the
    current directory). Without ``resume``, a campaign that already has runs in the store is
    refused, so two different matrices never mix under one name by accident. While it runs it
    holds the campaign's lock on this store (``execute.campaign_lock``): a second driver of the
    same campaign on the same store is refused instead of measuring every cell twice.
    """
    base = Path.cwd() if base is None else Path(base)
    from coldscope.campaign.execute import campaign_lock
    with campaign_lock(spec, store.path):
        return _run_campaign(spec, store, base=base, executor=executor, address=address,
                             resume=resume, concurrency=concurrency, reporter=reporter,
                             on_line=on_line, cells=cells)


def _run_campaign(spec: CampaignSpec, store: Store, *, base: Path,
                  executor: Literal["local", "ray"], address: str | None, resume: bool,
                  concurrency: int | None, reporter: Reporter | None,
                  on_line: Callable[[str], None] | None,
                  cells: list[Cell] | None) -> CampaignResult:
    reporter = reporter or Reporter()
    conc = concurrency or spec.concurrency
    plan = cells if cells is not None else expand(spec, base, conc)
    before = campaign_runs(store, spec.name, status=None)
    if before and not resume:
        raise ColdscopeError(
            f"campaign {spec.name!r} already has {len(before)} run(s) in {store.path}; "
            "pass --resume to run only the missing cells, or rename the campaign")
    done = done_cells(store, spec.name)
    todo = missing(plan, done)
    ids = {c.id for c in plan}
    done_before = len(done & ids)
    reporter.begin(spec.name, len(plan), done_before, len(todo), conc)
    interrupted = False
    try:
        if todo:
            if executor == "ray":
                from coldscope.campaign.ray_exec import run_ray
                interrupted = run_ray(spec, todo, store, reporter, base=base, address=address,
                                      concurrency=conc)
            else:
                from coldscope.campaign.local import run_local
                interrupted = run_local(spec, todo, store, reporter, base=base,
                                        concurrency=conc, on_line=on_line)
    finally:
        reporter.end()
    after = campaign_runs(store, spec.name, status=None)
    seen = {r.id for r in before}
    new = [r for r in after if r.id not in seen]
    done_now = done_cells(store, spec.name) & ids
    return CampaignResult(
        name=spec.name, store=str(store.path), executor=executor, concurrency=conc,
        cells=len(plan), done_before=done_before, done=len(done_now),
        runs_stored=len(new), failed_runs=sum(r.status == "failed" for r in new),
        interrupted=interrupted, missing=[c.id for c in plan if c.id not in done_now],
    )
