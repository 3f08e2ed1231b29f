"""The local executor: waves of cells on this machine, one start-up at a time by default.

Each run is stored the moment it ends (one SQLite transaction), so a driver killed at any point
loses at most the runs in flight; Ctrl-C stops the engines, stores the interrupted runs as
failed, and returns with ``interrupted`` set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from coldscope.campaign.execute import (
    cache_root,
    cache_root_warning,
    ensure_models,
    ensure_releases,
    reap,
    run_wave,
    state_dir,
)
from coldscope.campaign.matrix import Cell, waves
from coldscope.campaign.progress import Reporter
from coldscope.campaign.spec import CampaignSpec
from coldscope.core.records import Run
from coldscope.launch.runner import Evidence

if TYPE_CHECKING:
    from coldscope.store.db import Store


def run_local(spec: CampaignSpec, cells: list[Cell], store: Store, reporter: Reporter, *,
              base: Path, concurrency: int = 1,
              on_line: Callable[[str], None] | None = None) -> bool:
    """Run ``cells`` (already filtered to the missing ones). Returns True when Ctrl-C
    stopped it before the end."""
    warning = cache_root_warning(cache_root(spec, base))
    if warning:
        reporter.note(warning)
    reaped = reap(state_dir(spec, base), spec.shutdown_grace)
    if reaped:
        reporter.note(f"stopped {len(reaped)} engine(s) left running by a killed campaign: "
                      + ", ".join(reaped))
    try:
        ensure_models(cells, on_make=lambda name, path: reporter.note(
            f"making model {name} in {path}"))
        ensure_releases(cells, on_make=lambda spec: reporter.note(
            f"environment of {spec}: reusing it, or making it (pip, minutes)"))
    except KeyboardInterrupt:
        return True

    def on_record(cell: Cell, run: Run, evidence: Evidence) -> None:
        store.add_run(run, evidence)
        reporter.finished(cell, run)

    def on_launch(cell: Cell, run_id: str, role: str, port: int) -> None:
        reporter.started(cell, run_id, role, port)

    for wave in waves(cells, concurrency):
        try:
            run_wave(wave, spec, base, on_launch=on_launch, on_record=on_record,
                     on_line=on_line if concurrency == 1 else None, on_stage=reporter.stage)
        except KeyboardInterrupt:
            return True
    return False
