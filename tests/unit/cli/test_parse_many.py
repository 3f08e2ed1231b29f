"""`coldscope parse LOG|DIR|- ...`: many logs at once (files, directories, standard input,
gzip, rotated files, a FIFO skipped), one line each, the fleet summary, exit codes, JSON."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coldscope.ingest.logfiles import fleet_summary, parse_logs, percentile
from coldscope.util.errors import ColdscopeError
from tests.unit.engines.test_sglang import ARGS, V0511, sg

SRC = str(Path(__file__).resolve().parents[3] / "src")


def run_cli(*args, stdin: bytes | None = None, cwd: Path | None = None):
    """The CLI of this checkout (not whichever coldscope the interpreter has installed)."""
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", "parse", *args],
                          input=stdin, capture_output=True, timeout=120, cwd=cwd,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                               "PYTHONPATH": SRC, "COLUMNS": "200"})


def sglang_log(ready: float, load: float, model: str = "org/m-7b") -> str:
    """A complete SGLang start-up: ready ``ready`` s after its first line, loading ``load`` s."""
    return "\n".join([
        "SGLang Version 0.5.9",
        sg(0, ARGS.replace("org/m-7b", model)),
        sg(5, "Load weight begin. avail mem=70.00 GB"),
        sg(5 + load, f"Load weight end. elapsed={load:.2f} s, type=LlamaForCausalLM"),
        sg(6 + load, "Memory pool end. avail mem=40.00 GB"),
        sg(ready - 3, "INFO:     Application startup complete."),
        sg(ready, "The server is fired up and ready to roll!"),
    ]) + "\n"


CRASH = "\n".join([
    sg(0, ARGS),
    sg(5, "Load weight begin. avail mem=70.00 GB"),
    sg(20, "Load weight end. elapsed=15.00 s, type=LlamaForCausalLM"),
    sg(21, "Scheduler hit an exception: Traceback (most recent call last):"),
    '  File "scheduler.py", line 2700, in run_scheduler_process',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.",
]) + "\n"


@pytest.fixture
def fleet(tmp_path) -> Path:
    """ok (100 s, loading 10 s), failed, gzipped (60 s, 20 s), rotated (80 s, 30 s), a FIFO,
    a text file that is no engine's log, a hidden file."""
    d = tmp_path / "logs"
    (d / "sub").mkdir(parents=True)
    (d / "a.log").write_text(sglang_log(100, 10))
    (d / "b-crash.log").write_text(CRASH)
    (d / "sub" / "c.log.gz").write_bytes(gzip.compress(sglang_log(60, 20).encode()))
    (d / "sub" / "d.log.1").write_text(sglang_log(80, 30))
    (d / "notes.txt").write_text("nothing to see\n")
    (d / ".hidden.log").write_text(sglang_log(1, 0.5))
    os.mkfifo(d / "sub" / "pipe")
    return d


def test_a_directory_gives_one_line_per_log_and_a_fleet_summary(fleet):
    proc = run_cli("logs", cwd=fleet.parent)  # relative names keep the table's rows short
    assert proc.returncode == 0, proc.stderr  # failed, refused and skipped are not read errors
    out = proc.stdout.decode()
    # the folder they share is named once, in the title; rows name each log relative to it
    assert out.splitlines()[0].strip() == "6 logs in logs"
    names = {"a.log", "b-crash.log", "notes.txt", "sub/c.log.gz", "sub/d.log.1", "sub/pipe"}
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()
            if line.split() and line.split()[0] in names}
    assert rows == {"a.log": "ok", "b-crash.log": "failed", "notes.txt": "refused",
                    "sub/c.log.gz": "ok", "sub/d.log.1": "ok", "sub/pipe": "skipped"}
    # each reason is one line under the table, after the log's name and status
    assert any(line.startswith("sub/pipe: skipped: ") and "FIFO" in line
               for line in out.splitlines())
    assert any(line.startswith("b-crash.log: failed: ") and "out of" in line
               for line in out.splitlines())
    assert "fleet: sglang 0.5.9 · m-7b · 3 ok run(s)" in out
    # time to ready 100, 60, 80 -> p50 80, p90 80 + 0.8 * (100 - 80) = 96
    [ttr] = [line for line in out.splitlines() if line.strip().startswith("time to ready")]
    assert ttr.split()[3:5] == ["80.00", "96.00"]
    [load] = [line for line in out.splitlines() if line.strip().startswith("model_loading")]
    assert load.split()[1:3] == ["20.00", "28.00"]  # loading 10, 20, 30


def test_json_of_several_logs(fleet):
    proc = run_cli(str(fleet / "a.log"), str(fleet / "b-crash.log"), str(fleet / "notes.txt"),
                   str(fleet / "sub"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) == {"runs", "refused", "fleet"}
    assert [(r["id"], r["status"]) for r in doc["runs"]] == [
        (str(fleet / "a.log"), "ok"), (str(fleet / "b-crash.log"), "failed"),
        (str(fleet / "sub/c.log.gz"), "ok"), (str(fleet / "sub/d.log.1"), "ok")]
    assert all(r["engine"]["name"] == "sglang" for r in doc["runs"])
    assert doc["runs"][0]["model"]["path"] == "org/m-7b"
    assert doc["runs"][0]["log_path"] == str(fleet / "a.log")
    assert [(x["log"], x["status"]) for x in doc["refused"]] == [
        (str(fleet / "notes.txt"), "refused"), (str(fleet / "sub/pipe"), "skipped")]
    [group] = doc["fleet"]
    assert group["count"] == 3 and group["engine"] == "sglang" and group["version"] == "0.5.9"
    assert group["stages"]["time_to_ready"] == {"p50": 80.0, "p90": 96.0, "n": 3}
    assert group["stages"]["tokenizer"] is None


def test_exit_codes(fleet, tmp_path):
    # several: 2 only when a file could not be read
    proc = run_cli(str(fleet / "a.log"), str(tmp_path / "missing.log"))
    assert proc.returncode == 2 and b"1 of 2 logs could not be read" in proc.stderr
    proc = run_cli(str(fleet / "a.log"), str(fleet / "sub" / "pipe"))  # named: not skipped
    assert proc.returncode == 2 and b"FIFO" in proc.stderr
    # one log: today's codes
    assert run_cli(str(fleet / "a.log")).returncode == 0
    proc = run_cli(str(fleet / "b-crash.log"))
    assert proc.returncode == 2 and b"CUDA out of memory" in proc.stderr
    assert run_cli(str(fleet / "notes.txt")).returncode == 2
    proc = run_cli(str(fleet / "sub" / "c.log.gz"), "--max-bytes", "100")
    assert proc.returncode == 2 and b"larger than 100 bytes" in proc.stderr


def test_standard_input_is_one_log():
    proc = run_cli("-", "--json", stdin=sglang_log(42, 7).encode())
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["id"] == "stdin" and run["status"] == "ok" and run["time_to_ready_s"] == 42
    assert run["stages"]["model_loading"] == 7
    proc = run_cli("-", stdin=CRASH.encode())
    assert proc.returncode == 2 and b"CUDA out of memory" in proc.stderr


def test_one_real_sglang_log_from_the_command_line(shared):
    proc = run_cli(str(shared / V0511))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().startswith("SGLang 0.5.11+05fb6a52 (sglang-0.5), device cuda")


def test_save_stores_each_log(fleet, tmp_path):
    from coldscope.store.db import Store
    db = tmp_path / "s.db"
    proc = run_cli(str(fleet), "--save", "--store", str(db))
    assert proc.returncode == 0, proc.stderr
    runs = Store(db, create=False).runs(status=None, origin="log")
    assert sorted(r.status for r in runs) == ["failed", "ok", "ok", "ok"]
    assert len({r.id for r in runs}) == 4 and {r.engine.name for r in runs} == {"sglang"}
    ok = next(r for r in runs if r.time_to_ready_s == 100)
    assert Store(db).timeline(ok.id).stages == ok.timeline.stages


def test_reading_is_bounded(tmp_path):
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip.compress(b"x" * 10_000))
    [got] = parse_logs([str(bomb)], limit=5_000)
    assert got.status == "unreadable" and "once decompressed" in got.reason
    broken = tmp_path / "broken.log.gz"
    broken.write_bytes(b"\x1f\x8b" + b"junk" * 10)
    [got] = parse_logs([str(broken)])
    assert got.status == "unreadable" and "broken gzip" in got.reason


def test_percentile_interpolates_between_ranks():
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([60.0, 80.0, 100.0], 0.9) == pytest.approx(96.0)
    assert percentile([5.0], 0.9) == 5.0
    assert fleet_summary([]) == []


def test_fit_refuses_to_pool_runs_of_different_engines():
    from coldscope.prediction.training import observations_from_runs
    from tests.unit.prediction.test_startup_model import _features, _run

    feats = lambda p: _features(Path(p).name, 2, 0.1)  # noqa: E731
    vllm = _run(0, "a", {"bootstrap": 1.0})
    sgl = _run(1, "b", {"bootstrap": 1.0}).model_copy(
        update={"engine": vllm.engine.model_copy(update={"name": "sglang"})})
    with pytest.raises(ColdscopeError, match=r"runs mix engines \(sglang: 1, vllm: 1\)"):
        observations_from_runs([vllm, sgl], features_of=feats)
    obs, _, _ = observations_from_runs([sgl], features_of=feats)
    assert [o.model for o in obs] == ["b"]
