"""Diagnostic, not a bench (``make bench`` runs only ``bench_*.py``): how many of coldscope's
source files one ``coldscope parse`` of a log passes through, and how often it goes back to a
file it had already left (issue 36's "traced call by call" target).

Imports first (``coldscope.cli.main`` and whatever ``parse`` imports on a warm-up run of the
same log), so that only the work of reading the log is traced; then ``parse LOG --json`` again
under ``sys.setprofile``. Every Python call and return inside a coldscope source file is an
event; the events' files, consecutive repeats merged, are the path. Printed: the files entered
(distinct files on the path), the returns (distinct moves from one file back into a file the
path had already left; ``revisits`` counts every such move, once per log line where a loop
calls back), and the modules of coldscope loaded by the end. At d50c9fa, the commit the issue
measured (11 files, 20 returns), this gives 11 files and 19 returns.

    .venv/bin/python benches/diag_parse_trace.py [LOG] [--src DIR]

``--src`` traces another tree's ``src`` (a worktree of an older commit: ``git worktree add
/tmp/old d50c9fa`` then ``--src /tmp/old/src``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOG = ROOT.parent / "shared" / "fixtures" / "vllm-logs" / \
    "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log"


def _parse(main: Any, log: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["parse", log, "--json"])


def trace(log: str, src: Path) -> dict[str, Any]:
    sys.path.insert(0, str(src))
    from coldscope.cli.main import main  # the tree under --src: imported after the path

    package = str(src / "coldscope")
    _parse(main, log)  # warm-up: every import parse needs is done before the trace
    path: list[str] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        name = frame.f_code.co_filename
        if event in ("call", "return") and name.startswith(package):
            rel = name[len(package) + 1:]
            if not path or path[-1] != rel:
                path.append(rel)

    sys.setprofile(profile)
    try:
        _parse(main, log)
    finally:
        sys.setprofile(None)
    seen: set[str] = set()
    revisits = 0
    edges: set[tuple[str, str]] = set()  # (from, to) moves back into a file already left
    for prev, f in zip(["", *path], path, strict=False):
        if f in seen:
            revisits += 1
            edges.add((prev, f))
        seen.add(f)
    return {"log": Path(log).name, "src": str(src), "files_entered": len(seen),
            "returns": len(edges), "revisits": revisits, "files": sorted(seen),
            "coldscope_modules_loaded": sum(1 for m in sys.modules if m.startswith("coldscope"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", default=str(DEFAULT_LOG))
    ap.add_argument("--src", type=Path, default=ROOT / "src")
    args = ap.parse_args()
    print(json.dumps(trace(args.log, args.src.resolve()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
