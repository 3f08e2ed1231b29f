"""Replay a saved engine log into a file as if the engine were writing it, with its timing
compressed, and run helper processes for the serve tests and benchmarks (free loopback ports,
waiting for readiness with a bounded number of tries, stopping what was started)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from coldscope.engines.vllm.grammar import parse_vllm_log


def log_lines(src: Path) -> list[str]:
    text = src.read_bytes().decode("utf-8", "replace")
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def replay(src: Path, dst: Path, speedup: float = 50.0, max_gap: float = 0.5) -> float:
    """Append ``src``'s lines to ``dst`` at the pace of the log's own timestamps divided by
    ``speedup`` (each pause at most ``max_gap`` seconds), one flushed line at a time. Returns
    the monotonic time the last line was written."""
    lines = log_lines(src)
    clock = parse_vllm_log(lines).line_clock
    start = time.monotonic()
    offset = 0.0
    previous = 0.0
    with dst.open("a", encoding="utf-8") as f:
        for line, t in zip(lines, clock, strict=True):
            if t is not None and t > previous:
                offset += min(max_gap, (t - previous) / speedup)
                previous = t
            pause = start + offset - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            f.write(line + "\n")
            f.flush()
    return time.monotonic()


def free_port(n: int = 1) -> int:
    """The first of ``n`` consecutive ports free on 127.0.0.1 now (the one free port the
    kernel picks when ``n`` is 1; a campaign's cells take consecutive ports)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first: int = s.getsockname()[1]
        if first + n > 65535:
            continue
        socks: list[socket.socket] = []
        try:
            for i in range(n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", first + i))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free ports")


def wait_for(check: Callable[[], bool], timeout: float, what: str, step: float = 0.1) -> None:
    """Poll ``check`` until it is true, at most ``timeout`` seconds (bounded tries)."""
    for _ in range(max(1, int(timeout / step))):
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(step)
    raise TimeoutError(f"{what} not within {timeout} s")


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Terminate one process we started, then kill it if it does not exit."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace)
