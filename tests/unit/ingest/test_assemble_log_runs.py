"""Issue 33, "log runs are first-class runs": a saved vLLM log has a timeline (``Store.timeline``,
``trace`` with stage and sub-step slices, the report's Gantt with a caption of its own), its
``started_at`` is the log's own time, and the GPU it names is the run's. Expected values are
read from the logs' own lines (quoted beside each), the shared fixtures read where they are."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import coldscope
from coldscope.core.stages import UNATTRIBUTED
from coldscope.store.db import Store

FIXTURES = Path(os.environ.get("COLDSCOPE_FIXTURES", "/work/shared/fixtures"))
WILD = FIXTURES / "wild-logs"
VLLM_LOGS = FIXTURES / "vllm-logs"
L40S = WILD / "vllm-0.29.0-l40s-gemma4-26b-a4b-fp8.log"
SGLANG = WILD / "sglang-0.5.11nv-gb10-qwen2.5-1.5b.log"
V010 = VLLM_LOGS / "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log"
V011 = VLLM_LOGS / "v0.11.0_h100_opt-6.7b_unpatched.log"

pytestmark = pytest.mark.skipif(not WILD.is_dir(), reason="shared fixtures not present")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def _year_from_mtime(path: Path, month: int, day: int) -> int:
    """The year a month-day stamp of ``path`` is in: the file was written after it."""
    written = dt.datetime.fromtimestamp(path.stat().st_mtime)
    return written.year - ((month, day) > (written.month, written.day))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    db = str(tmp_path_factory.mktemp("store") / "s.db")
    [p] = coldscope.parse_logs([L40S], store=db)
    assert p.run is not None and p.run.status == "ok"
    return db, p.run.id


def test_store_timeline_of_a_saved_vllm_log_tiles_its_stages(saved: tuple[str, str]) -> None:
    db, rid = saved
    with Store(db, create=False) as store:
        tl = store.timeline(rid)
    assert tl.segments and tl.spans
    assert tl.segments[0][1] == 0.0 and tl.segments[-1][2] == pytest.approx(tl.time_to_ready)
    for (_, _, end), (_, start, _) in zip(tl.segments, tl.segments[1:], strict=False):
        assert start == pytest.approx(end)  # end to end, no overlap, no hole
    lengths = {b: hi - lo for b, lo, hi in tl.segments}
    # line 64: "Model loading took 24.72 GiB memory and 436.919052 seconds"
    assert lengths["model_loading"] == pytest.approx(436.919052)
    # line 72: "torch.compile took 77.77 s in total"
    assert lengths["torch_compile"] == pytest.approx(77.77)
    # lines 77 and 85: "Graph capturing finished in 16 secs", "... in 7 secs"
    assert lengths["cuda_graph_capture"] == pytest.approx(16 + 7)
    assert all(s.source == "log" for s in tl.spans)


def test_trace_of_a_saved_vllm_log_has_stage_and_sub_step_slices(
        saved: tuple[str, str], tmp_path: Path) -> None:
    db, rid = saved
    out = tmp_path / "t.json"
    done = cli("trace", rid[:9], "-o", str(out), "--store", db)
    assert done.returncode == 0, done.stderr
    slices = {(e["name"], round(e["dur"] / 1e6, 3)) for e in json.loads(out.read_text())[
        "traceEvents"] if e.get("ph") == "X"}
    names = {name for name, _ in slices}
    assert {"bootstrap", "model_loading", "torch_compile", "kv_cache_profiling",
            "cuda_graph_capture", "server_ready"} <= names
    # line 62: "Loading weights took 245.21 seconds"
    assert ("model_loading/weights", 245.21) in slices
    # line 69: "Compiling a graph for compile range (1, 2048) takes 51.14 s"
    assert ("torch_compile/inductor", 51.14) in slices
    # line 74: "Initial profiling/warmup run took 1.94 s"
    assert ("kv_cache_profiling/profile_run", 1.94) in slices


def test_every_saved_vllm_log_gets_stage_slices(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    parsed = coldscope.parse_logs([WILD, VLLM_LOGS], store=db)
    ok = [p.run for p in parsed if p.run is not None and p.run.status == "ok"
          and p.run.engine.name == "vllm"]
    assert len(ok) >= 15
    with Store(db, create=False) as store:
        for run in ok:
            tl = store.timeline(run.id)
            known = {b for b, v in tl.stages.items() if v and b != UNATTRIBUTED}
            assert known <= {b for b, _, _ in tl.segments}, run.log_path
            assert sum(hi - lo for _, lo, hi in tl.segments) == pytest.approx(
                tl.time_to_ready), run.log_path


def test_a_log_stored_before_it_was_laid_out_still_traces(tmp_path: Path) -> None:
    [run] = coldscope.parse_log(L40S)
    old = run.evolve(id="old-run", segments=[], intervals=[])  # as stored before issue 33
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.add_run(old, {"saved_log": L40S.read_text().splitlines()})
    out = tmp_path / "t.json"
    done = cli("trace", "old-run", "-o", str(out), "--store", str(db))
    assert done.returncode == 0, done.stderr
    names = {e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"}
    assert "model_loading" in names and "model_loading/weights" in names


def test_the_gantt_of_a_saved_log_says_what_it_is(saved: tuple[str, str]) -> None:
    from coldscope.report.sections.timeline import Timelines, draw, timeline
    db, rid = saved
    with Store(db, create=False) as store:
        run = store.run(rid)
    html = draw(Timelines(items=(timeline(run),)))
    assert "A saved log gives each stage" in html
    assert "The paper publishes" not in html


def test_started_at_is_the_logs_own_time(saved: tuple[str, str]) -> None:
    db, rid = saved
    with Store(db, create=False) as store:
        run = store.run(rid)
    # line 10, the first dated line: "(APIServer pid=1) INFO 10-06 07:54:20 [config.py:252]"
    assert run.started_at == f"{_year_from_mtime(L40S, 10, 6)}-10-06T07:54:20"
    # SGLang's stamps carry their year: line 30 "[2026-06-08 01:56:56] Warning: ..."
    [sg] = coldscope.parse_log(SGLANG)
    assert sg.started_at == "2026-06-08T01:56:56"


def test_a_restart_file_dates_each_start_up_before_the_next(tmp_path: Path) -> None:
    log = tmp_path / "restarted.log"
    log.write_bytes(V010.read_bytes() + V011.read_bytes())
    written = dt.datetime(2026, 12, 1, 12, 0).timestamp()
    os.utime(log, (written, written))
    first, second = coldscope.parse_log(log)
    # V011's lines: "DEBUG 02-16 16:49:39.722" (line 1) to "... 16:49:41.682 ... Initializing
    # a V1 LLM engine (v0.11.0)" (line 27); written in December: February of that year (the
    # minute only: where that start-up's first line is, is the cutting's, not the dating's)
    assert second.started_at.startswith("2026-02-16T16:49:")
    # V010's first line: "DEBUG 09-25 16:50:22": before February 2026, so September 2025
    assert first.started_at == "2025-09-25T16:50:22"


def test_a_yearless_stamp_without_a_file_is_marked_unknown() -> None:
    from coldscope.ingest.assemble import NO_YEAR, log_started_at
    lines = L40S.read_text().splitlines()
    # its first dated line (10): "(APIServer pid=1) INFO 10-06 07:54:20": no year, none made up
    assert log_started_at(lines) == ("????-10-06T07:54:20", True)
    from coldscope.ingest.assemble import run_from_log
    read = run_from_log(lines, name="stdin")  # as read from standard input: no file time
    assert read.started_at.startswith("????-10-06")
    assert any(n.startswith(NO_YEAR) for n in read.notes)


def test_a_log_from_standard_input_never_shows_a_made_up_year(tmp_path: Path) -> None:
    a100 = WILD / "vllm-0.19.1-a100-40gb-qwen3-8b.log"
    db = str(tmp_path / "s.db")
    done = subprocess.run([sys.executable, "-m", "coldscope.cli.main", "parse", "-", "--save",
                           "--store", db, "--json"], input=a100.read_text(), text=True,
                          capture_output=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    # its first dated line (10): "(APIServer pid=3380144) INFO 06-25 17:21:29 [utils.py:299]"
    run = json.loads(done.stdout)
    assert run["started_at"] == "????-06-25T17:21:29"
    assert any(n.startswith("the log's stamps give no year") and "????" in n
               for n in run["notes"])
    for shown in (cli("runs", "--store", db, "--json"), cli("show", run["id"], "--store", db,
                                                             "--json", "--env")):
        assert shown.returncode == 0, shown.stderr
        assert "0001" not in shown.stdout and "????-06-25T17:21:29" in shown.stdout
    listed = cli("runs", "--store", db)
    assert "06-25 17:21" in listed.stdout  # month, day and time, as for any run
    # a dated log of another start-up sorts before it (an unknown year is after every known)
    sglang = cli("parse", str(SGLANG), "--save", "--store", db)
    assert sglang.returncode == 0, sglang.stderr
    ids = [r["id"] for r in json.loads(cli("runs", "--store", db, "--json").stdout)["runs"]]
    assert ids[-1] == run["id"] and len(ids) == 2
    traced = cli("trace", run["id"], "-o", str(tmp_path / "t.json"), "--store", db)
    assert traced.returncode == 0, traced.stderr
    exported = cli("export", "-o", str(tmp_path / "runs.csv"), "--store", db)
    assert exported.returncode == 0, exported.stderr
    import csv
    with open(tmp_path / "runs.csv", newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    assert rows[run["id"]]["started_at"] == ""  # not a timestamp: null, not year 1


def test_the_gpu_the_log_names_is_the_runs(saved: tuple[str, str]) -> None:
    db, rid = saved
    # line 17: "...configs/E=128,N=704,device_name=NVIDIA_L40S,dtype=fp8_w8a8.json"
    shown = cli("show", rid, "--env", "--store", db)
    assert shown.returncode == 0, shown.stderr
    gpus = next(line for line in shown.stdout.splitlines() if "GPUs" in line)
    assert "NVIDIA L40S" in gpus and "none" not in gpus
    with Store(db, create=False) as store:
        assert [g.name for g in store.run(rid).environment.gpus] == ["NVIDIA L40S"]
