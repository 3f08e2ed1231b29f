"""A vLLM log appended to another (issue 33, part 1): the second start-up begins at its own
first line, the line its process printed as it started, not at its engine line further down.

``tests/data/fleet-logs/vllm-0.10.0-then-0.11.0-appended.log`` is two real logs of
``../shared/fixtures/vllm-logs`` one after the other (``cat``, byte for byte): v0.10.0's 193
lines, then v0.11.0's 175. Expected values are read from those lines."""

from __future__ import annotations

from pathlib import Path

from coldscope.capture.logtext import NumberedLines, line_numbers
from coldscope.ingest.logfiles import parse_logs, startups

FLEET = Path(__file__).resolve().parents[2] / "data" / "fleet-logs"
PAPER = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "vllm-logs"
APPENDED = FLEET / "vllm-0.10.0-then-0.11.0-appended.log"
FIRST = PAPER / "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log"
SECOND = PAPER / "v0.11.0_h100_opt-6.7b_unpatched.log"


def _reading(path: Path) -> list[tuple[object, ...]]:
    return [(p.status, p.run.time_to_ready_s, dict(p.run.stages), p.run.reason)
            for p in parse_logs([str(path)]) if p.run is not None]


def test_the_fixture_is_the_two_logs_one_after_the_other() -> None:
    assert APPENDED.read_bytes() == FIRST.read_bytes() + SECOND.read_bytes()


def test_the_second_log_begins_at_its_own_first_line() -> None:
    first, second = parse_logs([str(APPENDED)])
    # line 194 is v0.11.0's line 1 ("No plugins for group vllm.platform_plugins found.",
    # 16:49:39.722); its engine line ("Initializing a V1 LLM engine (v0.11.0)") is line 220
    assert [line_numbers(p.lines)[0] + 1 for p in (first, second)] == [1, 194]
    assert line_numbers(first.lines)[-1] + 1 == 193
    assert "No plugins for group" in second.lines[0]
    # each reads as its log alone: the harness's 27.70 s and 13.61 s, every stage alike
    assert _reading(APPENDED) == _reading(FIRST) + _reading(SECOND)
    assert [p.run.time_to_ready_s for p in (first, second) if p.run] == [27.7, 13.61]
    assert second.run is not None and second.run.stages["bootstrap"] is not None


def test_a_later_part_of_the_file_is_cut_as_the_whole_file() -> None:
    """``serve``'s watcher holds a file from its first unfinished start-up on and gives
    ``startups`` the file's prefix and engine: the cut is the whole file's."""
    lines = NumberedLines(APPENDED.read_text().split("\n"))
    whole = startups(lines)
    later = startups(lines.part(150), prefix=None)
    assert [line_numbers(p.lines)[0] for p in later][1:] == \
        [line_numbers(p.lines)[0] for p in whole][1:]
    assert [(p.end is not None and p.end + line_numbers(p.lines)[0], p.failed)
            for p in later][1:] == \
        [(p.end is not None and p.end + line_numbers(p.lines)[0], p.failed) for p in whole][1:]
