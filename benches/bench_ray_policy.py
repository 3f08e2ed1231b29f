"""Cost of one ``ColdscopePolicy`` call as Ray Serve's controller makes it (every 0.1 s).

Run: ``.venv/bin/python benches/bench_ray_policy.py [--calls 20000]``

The policy (observed start-ups, a P99 TTFT SLA so that the planner's warm-floor rule runs every
call) is wrapped by Ray's own ``_apply_autoscaling_config`` (scaling factors, delays, state
merge), as ``DeploymentAutoscalingState.register`` does, and called ``--calls`` times 0.1 s
apart with real ``ray.serve.config.AutoscalingContext`` objects (each built outside the timing,
carrying the previous answer as target and the previous state, as the controller does) whose
requests in flight follow a slow wave plus noise. Each call is timed on its own
(``perf_counter_ns``); the figures are its p50 and p99 (target p99 <= 1 ms, Ray's controller
loop being 100 ms), and the construction cost. Needs ``ray[serve]`` (the ``ray`` extra).
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20_000)
    args = ap.parse_args()
    from ray.serve._private.common import DeploymentID
    from ray.serve.autoscaling_policy import _apply_autoscaling_config
    from ray.serve.config import AutoscalingConfig, AutoscalingContext

    from coldscope.integrations.ray_serve import ColdscopePolicy

    t0 = time.perf_counter()
    policy = ColdscopePolicy(observed_s=[61.2, 55.8, 70.1, 58.4, 66.0, 90.3],
                             target_ongoing_requests=4, replica_rps=1.0, sla_p99_ttft="2s",
                             log_decisions=False)
    built_ms = (time.perf_counter() - t0) * 1e3
    wrapped = _apply_autoscaling_config(policy)
    config = AutoscalingConfig(min_replicas=1, max_replicas=50, upscale_delay_s=0,
                               downscale_delay_s=0, look_back_period_s=20)
    state: dict = {}
    rng = random.Random(0)
    dep = DeploymentID(name="d", app_name="a")
    cost = []
    clock = time.perf_counter_ns
    target = 1
    for k in range(args.calls):
        total = 8.0 * (1.0 + math.sin(k / 600.0)) + rng.expovariate(0.5)
        ctx = AutoscalingContext(  # built as the controller builds one, outside the timing
            deployment_id=dep, deployment_name="d", app_name="a", current_num_replicas=target,
            target_num_replicas=target, running_replicas=[], total_num_requests=total,
            total_queued_requests=0.0, aggregated_metrics={}, raw_metrics={},
            capacity_adjusted_min_replicas=1, capacity_adjusted_max_replicas=50,
            policy_state=state, last_scale_up_time=None, last_scale_down_time=None,
            current_time=1.7e9 + 0.1 * k, config=config)
        start = clock()
        target, state = wrapped(ctx)
        cost.append(clock() - start)
    cost.sort()
    p50 = cost[len(cost) // 2] / 1e3
    p99 = cost[int(len(cost) * 0.99)] / 1e3
    print(f"{args.calls:,} calls through Ray's wrapper: p50 {p50:.1f} us, p99 {p99:.1f} us, "
          f"max {cost[-1] / 1e3:.0f} us; construction {built_ms:.1f} ms")
    figure(f"ColdscopePolicy call in Ray's wrapper, p50 over {args.calls:,}", f"{p50:.1f} us")
    figure(f"ColdscopePolicy call in Ray's wrapper, p99 over {args.calls:,}", f"{p99:.1f} us",
           target="p99 <= 1 ms", met=p99 <= 1000.0)
    figure("ColdscopePolicy construction (observed start-ups, SLA floor)", f"{built_ms:.1f} ms")


if __name__ == "__main__":
    main()
