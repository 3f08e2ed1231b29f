"""Simulator speed: a synthetic week at the Azure 2024 trace's size, and the ratio to SimPy.

Run: ``.venv/bin/python benches/bench_simulate.py [--days 7] [--rate 45] [--simpy-hours 6]``

1. A week at 45 requests/s (~27 million requests; diurnal + bursts), reactive policy, pinned to
   one core: trace generation and simulation timed separately (target: simulation <= 60 s).
2. The same reactive policy on the same trace (the first ``--simpy-hours`` of that week) in
   this engine and in the SimPy model of ``simpy_model.py``, one run each (target: >= 20x).
   Both runs also have to agree request by request, which checks the SimPy model is the same
   model. Start-ups there are log-normal (median 40 s, 90 % in 20-80 s): continuous, so that
   no two events tie and the two event orders cannot differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import figure  # noqa: E402
from simpy_model import run_simpy  # noqa: E402

from coldscope.planning.traces import synthesize  # noqa: E402
from coldscope.sim.core import Simulator  # noqa: E402
from coldscope.sim.policies import Reactive  # noqa: E402
from coldscope.sim.simulate import ReplicaSpec, SimConfig, simulate, workload  # noqa: E402
from coldscope.sim.startup import LogNormal  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--rate", type=float, default=45.0)
    ap.add_argument("--simpy-hours", type=float, default=6.0)
    args = ap.parse_args()

    t = time.perf_counter()
    simulate(synthesize(0.01, 1.0, seed=9), SimConfig())  # compile or load the numba cache
    warmup = time.perf_counter() - t

    t = time.perf_counter()
    week = synthesize(args.days, args.rate, diurnal=True, bursts=True, seed=0)
    gen = time.perf_counter() - t
    t = time.perf_counter()
    result = simulate(week, SimConfig(policy="reactive")).model_dump(mode="json")
    sim = time.perf_counter() - t
    print(json.dumps({
        "bench": "week", "requests": len(week), "days": args.days, "cores": 1,
        "warmup_s": round(warmup, 2), "generate_s": round(gen, 2),
        "simulate_s": round(sim, 2), "target_s": 60, "meets_target": sim <= 60,
        "ttft_p99_s": result["ttft_s"]["p99"], "cold_starts": result["cold_starts"],
        "gpu_hours": round(result["gpu_hours"], 1)}))
    figure(f"simulate a {args.days:g}-day week at {args.rate:g} req/s ({len(week):,} requests),"
           " one core", f"{sim:.1f} s", target="<= 60 s", met=sim <= 60)
    figure("synthetic week generated (requests; seconds), and the JIT warm-up before it",
           f"{len(week):,} requests; {gen:.2f} s; warm-up {warmup:.2f} s")

    n = int(np.searchsorted(week.arrival, args.simpy_hours * 3600))
    work = workload(week.head(n), ReplicaSpec())
    startup = LogNormal(40.0, 20.0, 80.0, source="bench")
    t = time.perf_counter()
    fast = Simulator(8, startup, np.random.default_rng(1)).run(work, Reactive())
    fast_s = time.perf_counter() - t
    t = time.perf_counter()
    ref = run_simpy(work, Reactive(), 8, startup, seed=1)
    simpy_s = time.perf_counter() - t
    same = bool(np.array_equal(fast.start, ref.start) and np.array_equal(fast.cold, ref.cold))
    print(json.dumps({
        "bench": "vs_simpy", "requests": n, "hours": args.simpy_hours,
        "engine_s": round(fast_s, 3), "simpy_s": round(simpy_s, 2),
        "ratio": round(simpy_s / fast_s, 1), "target_ratio": 20,
        "meets_target": simpy_s / fast_s >= 20, "identical_results": same,
        "replicas_started": int(len(fast.replica_start))}))
    figure(f"simulator vs SimPy on {args.simpy_hours:g} h of the week (identical results)",
           f"{simpy_s / fast_s:.1f}x ({'identical' if same else 'DIFFERENT'})",
           target=">= 20x, identical", met=simpy_s / fast_s >= 20 and same)
    figure(f"simulator vs SimPy on {args.simpy_hours:g} h of the week: requests, seconds each",
           f"{n:,} requests; {fast_s:.3f} s vs {simpy_s:.2f} s")


if __name__ == "__main__":
    main()
