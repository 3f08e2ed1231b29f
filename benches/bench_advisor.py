"""Cost of one ``ScaleAdvisor.tick``: an autoscaler calls it every tick, for every model.

Run: ``.venv/bin/python benches/bench_advisor.py [--ticks 100000]``

One advisor (observed start-ups, a P99 TTFT SLA so that the planner's warm-floor rule runs
every tick, the default daily seasonal term) is fed ``--ticks`` ticks 2 s apart: 100,000 ticks
are 2.3 simulated days, so the seasonal lookup is live for most of them. The rate follows a
diurnal curve with Poisson noise and the requests in flight follow the rate (4 s each). Each
tick is timed on its own (``perf_counter_ns``); the figures are its p50 and p99, with the
construction cost beside them. Target: p99 <= 1 ms.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import figure  # noqa: E402

from coldscope.scaling import ScaleAdvisor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=100_000)
    args = ap.parse_args()
    rng = random.Random(0)
    t0 = time.perf_counter()
    advisor = ScaleAdvisor(target_in_flight=5.6, observed_s=[61.2, 55.8, 70.1, 58.4, 66.0, 90.3],
                           sla_ttft_s=2.0)
    built_ms = (time.perf_counter() - t0) * 1e3
    inputs = []
    for k in range(args.ticks):
        t = 2.0 * (k + 1)
        mean = 3.0 * (1.0 + 0.8 * math.sin(2 * math.pi * t / 86_400.0))
        arrivals = sum(1 for _ in range(20) if rng.random() < mean * 2.0 / 20)
        inputs.append((t, arrivals / 2.0, int(mean * 4.0)))
    cost = []
    clock = time.perf_counter_ns
    tick = advisor.tick
    for t, rate, in_flight in inputs:
        start = clock()
        tick(t, rate_rps=rate, in_flight=in_flight, running=3, starting=0)
        cost.append(clock() - start)
    cost.sort()
    p50 = cost[len(cost) // 2] / 1e3
    p99 = cost[int(len(cost) * 0.99)] / 1e3
    print(f"{args.ticks:,} ticks: p50 {p50:.1f} us, p99 {p99:.1f} us, max "
          f"{cost[-1] / 1e3:.0f} us; construction {built_ms:.1f} ms (the planner's floor rule "
          f"imported once)")
    figure(f"ScaleAdvisor.tick cost, p50 over {args.ticks:,} ticks", f"{p50:.1f} us")
    figure(f"ScaleAdvisor.tick cost, p99 over {args.ticks:,} ticks", f"{p99:.1f} us",
           target="p99 <= 1 ms", met=p99 <= 1000.0)
    figure("ScaleAdvisor construction (observed start-ups, SLA floor)", f"{built_ms:.1f} ms")


if __name__ == "__main__":
    main()
