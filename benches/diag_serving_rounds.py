"""Diagnostic, not a bench (``make bench`` runs only ``bench_*.py``): tune's serving-check rounds
on one engine, to see why they are bimodal on this machine (issue 35's note).

Starts the tiny model's default command (tune's flags) once, runs the serving check's warm-up,
then 24 rounds of its fixed load (``coldscope.tuning.verify.serving_load``), in blocks of 3
alternating the load client unpinned and pinned to core 1 (the core vLLM CPU leaves to the
engine core; its worker is pinned to core 0). Per round: tokens per second, the engine's own
count of scheduler steps and tokens per step (vLLM's ``vllm:iteration_tokens_total``), the user
and system CPU seconds of each engine process (API server, engine core, worker), of each of
their threads, and their involuntary context switches, the host's steal time and page-reclaim
counters (``/proc/stat``, ``/proc/vmstat``). Prints one JSON line per round.
``--concurrency 32`` sends the whole round at once (the engine's queue then holds what its batch
cannot); ``--keep-off-worker-cpus`` binds every process the engine left unbound to the cores its
worker does not use.

    .venv/bin/python benches/diag_serving_rounds.py [--port 8799] [--concurrency N]
        [--keep-off-worker-cpus]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from coldscope.tuning.verify import CONCURRENCY, WARMUP_REQUESTS, serving_load

ROOT = Path(__file__).resolve().parents[1]
VM_KEYS = ("pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "pgmajfault",
           "pgfault", "compact_stall", "pgmigrate_success")


def host() -> tuple[int, dict[str, int]]:
    """Steal ticks of all CPUs and the page-reclaim counters, now."""
    with open("/proc/stat") as f:
        steal = int(f.readline().split()[8])
    vm = {}
    with open("/proc/vmstat") as f:
        for line in f:
            key, value = line.split()
            if key in VM_KEYS:
                vm[key] = int(value)
    return steal, vm


def cpu_seconds(procs: list[psutil.Process]) -> dict[str, float]:
    """Each process's user and system CPU seconds (``name:pid:user``, ``name:pid:system``),
    its threads' (``name:pid:tTID``) and its involuntary context switches (``name:pid:invol``):
    whether the extra work of a slow round is the engine's own (user) or the kernel's (system:
    page faults, reclaim), and whether it is one thread's."""
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            key = f"{p.name()}:{p.pid}"
            out[f"{key}:user"], out[f"{key}:system"] = t.user, t.system
            out[f"{key}:invol"] = float(p.num_ctx_switches().involuntary)
            for th in p.threads():
                out[f"{key}:t{th.id}"] = th.user_time + th.system_time
        except psutil.Error:
            pass
    return out


def engine_steps(base: str) -> tuple[float, float]:
    """The engine's own count of scheduler steps and of the tokens they processed (vLLM's
    ``vllm:iteration_tokens_total`` histogram: its _count and _sum): tokens per step is the
    batch a round kept the engine at."""
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    sums = {"vllm:iteration_tokens_total_count": 0.0, "vllm:iteration_tokens_total_sum": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:  # one per engine when there are several
            if sample.name in sums:
                sums[sample.name] += sample.value
    return sums["vllm:iteration_tokens_total_count"], sums["vllm:iteration_tokens_total_sum"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8799)
    ap.add_argument("--model", default=str(ROOT / "models" / "tiny"))
    ap.add_argument("--keep-off-worker-cpus", action="store_true",
                    help="After start-up, bind every engine process the engine did not bind "
                         "(and its threads) to the CPUs its bound worker does not use: does the "
                         "slow-round mode go away when nothing shares the worker's core?")
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY,
                    help="Requests in flight (the serving check's, by default)")
    args = ap.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
           "--host", "127.0.0.1", "--port", str(args.port), "--max-model-len", "256",
           "--max-num-seqs", "4", "--dtype", "bfloat16"]
    work = Path(tempfile.mkdtemp(prefix="coldscope-diag-"))
    with open(work / "server.log", "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "VLLM_CACHE_ROOT": str(work / "cache")},
                                  start_new_session=True)
    try:
        t0 = time.monotonic()
        while True:
            try:
                urllib.request.urlopen(base + "/v1/models", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() - t0 > 900:
                    print(f"the server did not start: {work / 'server.log'}", file=sys.stderr)
                    return 1
                time.sleep(1)
        print(f"ready in {time.monotonic() - t0:.1f} s (log {work / 'server.log'})", flush=True)
        top = psutil.Process(server.pid)
        procs = [top, *top.children(recursive=True)]
        everything = set(range(os.cpu_count() or 1))
        if args.keep_off_worker_cpus:
            bound = set().union(*(set(p.cpu_affinity()) for p in procs
                                  if set(p.cpu_affinity()) != everything))
            for p in procs:
                if set(p.cpu_affinity()) == everything and everything - bound:
                    for th in p.threads():
                        os.sched_setaffinity(th.id, everything - bound)
        for p in procs:
            print(json.dumps({"pid": p.pid, "name": p.name(), "affinity": p.cpu_affinity()}))
        serving_load(base, args.model, requests=WARMUP_REQUESTS)
        for block in range(8):
            pinned = block % 2 == 1
            os.sched_setaffinity(0, {1} if pinned else set(range(os.cpu_count() or 1)))
            for _ in range(3):
                before, (st0, vm0), steps0 = cpu_seconds(procs), host(), engine_steps(base)
                r = serving_load(base, args.model, concurrency=args.concurrency)
                after, (st1, vm1), steps1 = cpu_seconds(procs), host(), engine_steps(base)
                print(json.dumps({
                    "pinned_client": pinned, "tokens_per_s": r["tokens_per_s"],
                    "seconds": r["seconds"], "engine_steps": steps1[0] - steps0[0],
                    "tokens_per_step": round((steps1[1] - steps0[1])
                                             / max(steps1[0] - steps0[0], 1.0), 2),
                    "cpu_s": {k: round(after[k] - before.get(k, 0.0), 2) for k in after
                              if after[k] - before.get(k, 0.0) >= 0.01},
                    "steal_s": round((st1 - st0) / os.sysconf("SC_CLK_TCK"), 3),
                    "vmstat": {k: vm1[k] - vm0[k] for k in vm0 if vm1.get(k) != vm0[k]},
                }), flush=True)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
