"""``coldscope simulate`` on a synthetic week, end to end: wall time and peak memory.

Run: ``.venv/bin/python benches/bench_week_end_to_end.py [--trace week.csv] [--repeat 3]``

The trace is what issue 15 names: ``coldscope traces synth --days 7 --rate 45/s --diurnal
--bursts -o week.csv`` (27,221,947 requests, 720 MB of CSV); it is made once if the file is
missing. Each repetition runs the real command in a fresh process (``coldscope simulate
--trace week.csv --json``), so the time counts interpreter start, imports, reading the CSV,
the simulation and the JSON; peak memory is the child's maximum resident set size
(``resource.getrusage(RUSAGE_CHILDREN)``, the figure ``/usr/bin/time -v`` prints).
Targets: <= 15 s and <= 1.5 GB on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import figure

ROOT = Path(__file__).resolve().parents[1]
COLDSCOPE = [sys.executable, "-m", "coldscope.cli.main"]
TARGET_S, TARGET_BYTES = 15.0, 1.5e9


def _run_child(args: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS bytes and stdout of one child (peak measured by a wrapper
    process so that earlier children do not raise the figure)."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)\n"
        "wall = time.perf_counter() - t\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "sys.stderr.write(f'{wall} {peak} {p.returncode}\\n')\n"
        "sys.stdout.buffer.write(p.stdout)\n"
    )
    done = subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True,
                          check=True)
    wall, peak, code = done.stderr.decode().strip().splitlines()[-1].split()
    if int(code) != 0:
        raise SystemExit(f"{' '.join(args)} failed with exit {code}")
    return float(wall), int(peak), done.stdout.decode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=str(Path(tempfile.gettempdir()) / "bench-week-45rps.csv"),
                    help="the week's CSV; made there first if missing (720 MB)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = Path(args.trace)
    if not trace.exists():
        trace.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        subprocess.run([*COLDSCOPE, "traces", "synth", "--days", "7", "--rate", "45/s",
                        "--diurnal", "--bursts", "-o", str(trace)], check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        print(json.dumps({"bench": "week_synth", "seconds": round(time.perf_counter() - t, 2),
                          "bytes": trace.stat().st_size}))
    walls, peaks = [], []
    result = None
    for _ in range(args.repeat):
        wall, peak, out = _run_child([*COLDSCOPE, "simulate", "--trace", str(trace), "--json"])
        walls.append(wall)
        peaks.append(peak)
        result = json.loads(out)
    assert result is not None
    print(json.dumps({
        "bench": "week_end_to_end", "requests": result["requests"], "runs": args.repeat,
        "wall_s": [round(w, 2) for w in walls], "wall_s_median": round(statistics.median(walls), 2),
        "peak_rss_gb": [round(p / 1e9, 3) for p in peaks],
        "peak_rss_gb_max": round(max(peaks) / 1e9, 3),
        "target_s": TARGET_S, "target_gb": TARGET_BYTES / 1e9,
        "meets_target": max(walls) <= TARGET_S and max(peaks) <= TARGET_BYTES,
        "ttft_p99_s": result["ttft_s"]["p99"], "cold_starts": result["cold_starts"],
    }))
    figure(f"coldscope simulate on the week's CSV, end to end, worst of {args.repeat} "
           "(wall / peak RSS)", f"{max(walls):.1f} s / {max(peaks) / 1e9:.2f} GB",
           target=f"<= {TARGET_S:g} s / {TARGET_BYTES / 1e9:g} GB",
           met=max(walls) <= TARGET_S and max(peaks) <= TARGET_BYTES)


if __name__ == "__main__":
    main()
