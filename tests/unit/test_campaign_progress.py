"""The campaign's live display: one row per running engine with its elapsed time and stage."""

from __future__ import annotations

import io

from rich.console import Console

from coldscope.campaign import execute
from coldscope.campaign.plan import Cell
from coldscope.campaign.progress import RichReporter, stage_text
from coldscope.records import Run


def cell(cid: str = "m/default/default/cold/r1") -> Cell:
    return Cell(id=cid, campaign="c", model="m", model_path="/m", engine="default",
                flags="default", cache="cold", repetition=1, concurrency=1,
                command=["python", "x"], env={})


def test_running_engine_row_shows_elapsed_and_stage():
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=True, width=120, color_system=None)
    rep = RichReporter(out)
    rep.begin("c", total=2, already_done=0, todo=2, concurrency=1)
    rep.started(cell(), "run-1", "measure", 8000)
    rep.stage("run-1", "torch_compile/warmup", 12.34)
    rep.progress.refresh()
    live = buf.getvalue()
    assert "└ m/default/default/cold/r1" in live
    assert "now: torch_compile › warmup (since 12.3 s)" in live
    assert "0:00:0" in live  # rich's elapsed clock on the run's row
    run = Run.model_validate({"id": "run-1", "status": "ok", "started_at": "2026-01-01T00:00:00",
                              "time_to_ready_s": 20.0, "cache": "cold",
                              "campaign": {"cell": cell().id, "role": "measure"}})
    rep.finished(cell(), run)
    assert "run-1" not in rep.rows and len(rep.progress.tasks) == 1  # its row is gone
    rep.end()
    assert "ready in 20.0 s" in buf.getvalue()


def test_stage_text():
    assert stage_text(None, None) == "starting"
    assert stage_text("bootstrap", 1.0) == "now: bootstrap (since 1.0 s)"


def test_live_stage_hook_reaches_the_runner_when_it_has_one(monkeypatch):
    seen = []

    def run_once(config, *, run_id=None, on_line=None, on_stage=None):
        on_stage("model_loading", 3.5)
        return "run", {}

    monkeypatch.setattr(execute, "run_once", run_once)
    kw = execute._live_stages(lambda rid, stage, t: seen.append((rid, stage, t)), "r9")
    assert execute.run_once(None, run_id="r9", **kw) == ("run", {})
    assert seen == [("r9", "model_loading", 3.5)]

    def old_run_once(config, *, run_id=None, on_line=None):
        return "run", {}

    monkeypatch.setattr(execute, "run_once", old_run_once)
    assert execute._live_stages(lambda *a: None, "r9") == {}  # no hook: nothing passed
