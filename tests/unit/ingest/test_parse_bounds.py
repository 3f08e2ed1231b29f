"""`coldscope parse` on inputs made to exhaust it (issue 31, items 4, 5 and 9): what each costs
is bounded, a clock that cannot be true is never `ok`, and every refusal is one line. Expected
values come from the inputs themselves: the line a stamp was changed on, the bound set."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tracemalloc
from datetime import datetime
from pathlib import Path

import pytest

import coldscope
from coldscope.util.errors import ColdscopeError

SHARED = Path(__file__).resolve().parents[4] / "shared"
#: A real SGLang 0.5.11 log whose every line carries a full date: `[2026-06-08 01:56:56]`.
SGLANG = SHARED / "fixtures" / "wild-logs" / "sglang-0.5.11nv-gb10-qwen2.5-1.5b.log"
SRC = str(Path(__file__).resolve().parents[3] / "src")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", "parse", *args],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                               "PYTHONPATH": SRC, **(env or {})})


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-500:]
    return lines[0]


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    except ColdscopeError:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_a_megabyte_of_newlines_holds_no_memory_per_line(tmp_path):
    """Before: 17 s and 486 MB for 1 MB of newlines (about 500 B a line held). The issue's
    bound for the worst file is 500 MB; a megabyte of newlines now peaks near 130 MB traced."""
    log = tmp_path / "newlines.log"
    log.write_bytes(b"\n" * 1_000_000)
    peak = peak_bytes(lambda: coldscope.parse_log(log))
    assert peak < 200_000_000, peak
    assert "does not look like a log of a known engine" in one_line_error(cli(str(log)))


def test_a_gzip_bomb_of_short_lines_is_refused_at_the_line_bound(tmp_path):
    """200 million lines in a 400 KB gzip: counted while decompressing and refused at the
    line bound, never decompressed into memory (before: a MemoryError at 7.7 GB)."""
    bomb = tmp_path / "bomb.log.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(20):
            f.write(b"a\n" * 10_000_000)
    assert bomb.stat().st_size < 1_000_000
    line = one_line_error(cli(str(bomb)))
    assert "lines; refused" in line and "--max-lines" in line
    peak = peak_bytes(lambda: coldscope.parse_log(bomb))
    assert peak < 200_000_000, peak


@pytest.mark.parametrize("year, jump", [("9999", 251_603_539_200), ("2027", 31_536_000)])
def test_a_clock_that_leaves_its_year_makes_the_start_up_failed_naming_the_line(
        tmp_path, year, jump):
    """One stamp of a real log moved to another year (before: `ok`, with a time to ready of
    251,603,539,263 s or 31,622,524 s). The jump is the years' seconds, at the changed line."""
    lines = SGLANG.read_text(errors="replace").split("\n")
    stamped = [i for i, text in enumerate(lines) if text.startswith("[2026-")]
    at = stamped[len(stamped) // 2]
    lines[at] = lines[at].replace("[2026-", f"[{year}-", 1)
    before = max(i for i in stamped if i < at)
    stamp = [datetime.strptime(lines[i][1:20], "%Y-%m-%d %H:%M:%S") for i in (before, at)]
    assert (stamp[1] - stamp[0]).total_seconds() == pytest.approx(jump, abs=60)
    log = tmp_path / "clock.log"
    log.write_text("\n".join(lines))
    (run,) = coldscope.parse_log(log)
    assert run.status == "failed"
    shown = int((stamp[1] - stamp[0]).total_seconds())
    assert f"jumps {shown:,} s forward at line {at + 1} " in run.reason, run.reason
    assert run.time_to_ready_s is None or run.time_to_ready_s < 3600


def test_directories_too_deep_to_walk_are_skipped_not_a_recursion_error(tmp_path):
    deep = tmp_path / "deep"
    d = deep
    d.mkdir()
    for _ in range(1200):  # one level at a time: os.makedirs itself recurses per level
        d = d / "d"
        d.mkdir()
    (d / "x.log").write_text("hello\n")
    try:
        done = cli(str(deep))
    finally:
        # bottom up, one level at a time: pytest's clean-up of old temporary directories
        # (shutil.rmtree) recurses per level and would fail on this tree in a later session
        (d / "x.log").unlink()
        while d != tmp_path:
            d.rmdir()
            d = d.parent
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    said = " ".join((done.stdout + done.stderr).split())  # the table wraps long lines
    assert "directories deeper than 64 levels are not walked" in said


def test_the_input_bound_from_the_environment_applies_to_parse(tmp_path):
    log = tmp_path / "real.log"
    log.write_bytes(SGLANG.read_bytes())
    line = one_line_error(cli(str(log), env={"COLDSCOPE_MAX_INPUT_BYTES": "1000"}))
    assert "larger than 1000 bytes" in line


@pytest.mark.parametrize("path, why", [("/dev/zero", "not a regular file"),
                                       ("/proc/self/status", "under /proc")])
def test_devices_and_proc_files_are_refused_unread(path, why):
    assert why in one_line_error(cli(path))


def test_a_directory_holding_a_link_to_a_proc_file_skips_it(tmp_path):
    (tmp_path / "kmsg.log").symlink_to("/proc/kmsg")
    (tmp_path / "real.log").write_bytes(SGLANG.read_bytes())
    done = cli(str(tmp_path))
    assert "Traceback" not in done.stderr
    assert "kmsg.log" in done.stdout + done.stderr and "under /proc" in done.stdout + done.stderr
