"""Several start-ups in one file, each on its own clock (issue 33, part 1).

The fixtures under ``tests/data/fleet-logs/`` are written by hand in the shapes of real vLLM 0.11
output (a crash's traceback, a restart, journald, argparse); every expected value below is read
from the fixture's own lines: a time to ready is the ready line's stamp less the start-up's first
stamped line's, a line number is the file's (1-based)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coldscope.capture.logtext import line_numbers
from coldscope.ingest.logfiles import ParsedLog, parse_logs, startups

FLEET = Path(__file__).resolve().parents[2] / "data" / "fleet-logs"


def _parsed(name: str) -> list[ParsedLog]:
    return list(parse_logs([str(FLEET / name)]))


def _file_lines(parsed: ParsedLog) -> tuple[int, int]:
    """The first and last line of the file (1-based) that a start-up holds."""
    numbers = line_numbers(parsed.lines)
    return numbers[0] + 1, numbers[-1] + 1


def test_a_restart_after_a_crash_is_clocked_from_its_own_first_line() -> None:
    first, second = _parsed("vllm-0.11-oom-then-restart.log")
    # the crash: its root cause is the traceback's exception, quoted with the file's line 24
    assert (first.part, first.status) == ("#1", "failed")
    assert first.reason is not None and "torch.OutOfMemoryError: CUDA out of memory" in first.reason
    assert first.reason.endswith("(line 24)")
    # lines 1-38: the first launch, its traceback and the leaked-memory warning of its exit
    assert _file_lines(first) == (1, 38)
    # the restart opens at its platform line (line 39, 23:11:02); its server starts at line
    # 61 (23:11:32), ready three lines later
    assert (second.part, second.status) == ("#2", "ok")
    assert _file_lines(second) == (39, 66)
    run = second.run
    assert run is not None
    assert run.time_to_ready_s == pytest.approx(30.0)
    assert run.stages["model_loading"] == pytest.approx(2.884103)  # line 52
    assert run.stages["torch_compile"] == pytest.approx(3.542)  # 2.63 + 0.912 (lines 54-55)
    assert run.stages["cuda_graph_capture"] == pytest.approx(3.0)  # line 59: 3 secs
    assert (run.stages["unattributed"] or 0.0) < 2.0
    assert not any("lower bound" in n for n in run.notes)
    # the notes quote the file's line numbers, not the start-up's
    assert any("(line 60)" in n and "init engine" in n for n in run.notes)


def test_a_restart_under_journald_opens_at_the_service_managers_started_line() -> None:
    first, second = _parsed("vllm-0.11-oom-then-restart.journal")
    assert first.status == "failed" and first.reason is not None
    assert "torch.OutOfMemoryError" in first.reason and first.reason.endswith("(line 25)")
    # systemd's report of the exit (lines 40-44) is the crashed launch's; "Started" (45) opens
    # the next one
    assert _file_lines(first) == (1, 44)
    assert _file_lines(second) == (45, 73)
    assert "systemd[1]: Started vllm.service" in second.lines[0]
    assert second.status == "ok" and second.run is not None
    assert second.run.time_to_ready_s == pytest.approx(30.0)  # 23:11:02 -> 23:11:32


def test_a_launch_that_died_at_argument_parsing_is_its_own_failed_start_up() -> None:
    first, second = _parsed("vllm-0.11-bad-flag-then-start.log")
    assert (first.part, first.status) == ("#1", "failed")
    assert first.run is not None and first.run.engine.name == "vllm"
    assert first.reason == ("died at argument parsing: vllm serve: error: unrecognized "
                            "arguments: --max-model-length 32768 (line 3)")
    assert _file_lines(first) == (1, 3)
    assert second.status == "ok" and second.run is not None
    assert _file_lines(second) == (4, 24)
    assert second.run.time_to_ready_s == pytest.approx(30.0)  # 08:15:40 -> 08:16:10


def test_a_start_up_with_no_restart_is_one_part_as_before() -> None:
    lines = (FLEET / "vllm-0.11-oom-then-restart.log").read_text().splitlines()[38:]
    [part] = startups(lines)
    assert list(part.lines) == lines


def test_argparse_usage_inside_a_running_start_up_does_not_cut_it() -> None:
    """``usage:`` and ``error:`` words in a start-up's own lines (after its start line) are not a
    launch's bad command line."""
    lines = (FLEET / "vllm-0.11-bad-flag-then-start.log").read_text().splitlines()[3:]
    lines.insert(5, "usage: the model card says: error: none")
    assert len(startups(lines)) == 1
