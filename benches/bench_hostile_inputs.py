"""The hostile-input figures of README.md's "Reliability" section that a CLI command
reproduces in seconds, each in a fresh ``coldscope`` process: its wall time, its peak RSS (the
kernel's, from ``wait4``) and its exit status (2: refused in one line).

- ``coldscope parse`` of a gzip of 200 million two-byte lines (refused at the line bound);
- ``coldscope parse`` of a megabyte of newlines;
- ``coldscope releases ENV --install-only`` whose ``bin/python`` sleeps (killed at the version
  query's bound) and whose ``bin/python`` floods its output (stopped at the output bound).

    .venv/bin/python benches/bench_hostile_inputs.py
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import figure

COLDSCOPE = str(Path(sys.executable).parent / "coldscope")


def run(*args: str) -> tuple[int, float, float, str]:
    """exit status, wall seconds, peak RSS in MB and the last stderr line of one command."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([COLDSCOPE, *args], stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return proc.returncode, took, usage.ru_maxrss / 1024, (lines or [""])[-1][:160]


def fake_python(root: Path, name: str, body: str) -> Path:
    python = root / name / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n" + body)
    python.chmod(0o755)
    return python.parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="coldscope-bench-hostile-") as tmp:
        root = Path(tmp)
        bomb = root / "bomb.log.gz"
        with gzip.open(bomb, "wb", compresslevel=9) as f:
            for _ in range(20):
                f.write(b"a\n" * 10_000_000)
        code, took, rss, line = run("parse", str(bomb))
        print(f"gzip bomb: exit {code}, {took:.2f} s, {rss:.0f} MB: {line}")
        figure(f"parse a {bomb.stat().st_size / 1e3:.0f} KB gzip of 200 million lines: exit, "
               "wall, peak RSS", f"exit {code}, {took:.2f} s, {rss:.0f} MB",
               target="exit 2", met=code == 2)
        newlines = root / "newlines.log"
        newlines.write_bytes(b"\n" * 1_000_000)
        code, took, rss, line = run("parse", str(newlines))
        print(f"newlines: exit {code}, {took:.2f} s, {rss:.0f} MB: {line}")
        figure("parse a megabyte of newlines: exit, wall, peak RSS",
               f"exit {code}, {took:.2f} s, {rss:.0f} MB", target="exit 2", met=code == 2)
        for name, body, label in (
                ("sleepy", "sleep 1000\n", "releases with a bin/python that sleeps"),
                ("flood", "exec yes " + "x" * 200 + "\n",
                 "releases with a bin/python that floods")):
            env = fake_python(root, name, body)
            code, took, rss, line = run("releases", str(env), "--install-only",
                                        "--envs-dir", str(root / "envs"))
            print(f"{name}: exit {code}, {took:.2f} s, {rss:.0f} MB: {line}")
            figure(f"{label}: exit, wall, peak RSS", f"exit {code}, {took:.1f} s, {rss:.0f} MB",
                   target="exit 2", met=code == 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
