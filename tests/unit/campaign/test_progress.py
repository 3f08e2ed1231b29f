"""The campaign's live display: one row per running engine with its elapsed time and stage."""

from __future__ import annotations

import io

from rich.console import Console

from coldscope.campaign.matrix import Cell
from coldscope.campaign.progress import RichReporter, stage_text
from coldscope.core.records import Run


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
    assert "now: torch_compile › warmup (entered at 12.3 s)" in live
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
    assert stage_text("bootstrap", 1.0) == "now: bootstrap (entered at 1.0 s)"


ENGINE = """
import http.server, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
for line in ("INFO Initializing a V1 LLM engine (v0.32.0) with config: ...",
             "INFO Starting to load model /m...",
             "INFO Starting vLLM API server on http://127.0.0.1:%d" % port):
    print(line, flush=True)
    time.sleep(0.3)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_campaign_reports_the_stage_each_running_engine_is_in(tmp_path):
    """A real local campaign on an engine that prints vLLM's stage lines: the reporter hears
    each stage once, in order, for the run it launched, with growing times since launch."""
    import sys

    from coldscope.campaign import parse_spec, run_campaign
    from coldscope.campaign.progress import Reporter
    from coldscope.store.db import Store
    from tests.serve_replay import free_port

    engine = tmp_path / "engine.py"
    engine.write_text(ENGINE)

    class Heard(Reporter):
        def __init__(self):
            self.launched, self.stages = [], []

        def started(self, cell, run_id, role, port):
            self.launched.append(run_id)

        def stage(self, run_id, stage, seconds):
            self.stages.append((run_id, stage, seconds))

    spec = parse_spec({
        "name": "live", "models": [{"path": str(tmp_path), "name": "m"}],
        "command": [sys.executable, str(engine), "--model", "{model}", "--port", "{port}"],
        "cache": ["cold"], "repetitions": 1, "port": free_port(), "spans": False,
        "probe": False, "first_request": False, "shutdown_grace": 2, "timeout": 20})
    heard = Heard()
    result = run_campaign(spec, Store(tmp_path / "s.db"), base=tmp_path, reporter=heard)
    assert result.done == 1
    (run_id,) = heard.launched
    assert [(r, s) for r, s, _ in heard.stages] == [
        (run_id, "bootstrap"), (run_id, "model_loading"), (run_id, "server_ready")]
    times = [t for *_, t in heard.stages]
    assert times == sorted(times) and times[-1] - times[0] >= 0.5
