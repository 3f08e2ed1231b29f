"""Diagnostic, not a bench (``make bench`` runs only ``bench_*.py``): tune's serving-check rounds
on one engine, to see why they are bimodal on this machine (issue 35's note).

Starts the tiny model's default command (tune's flags) once, runs the serving check's warm-up,
then 24 rounds of its fixed load (``coldscope.tuning.verify.serving_load``), in blocks of 3
alternating the load client unpinned and pinned to core 1 (the core vLLM CPU leaves to the
engine core; its worker is pinned to core 0). Per round: tokens per second, the CPU seconds of
each engine process (API server, engine core, worker), the host's steal time and page-reclaim
counters (``/proc/stat``, ``/proc/vmstat``). Prints one JSON line per round.

    .venv/bin/python benches/diag_serving_rounds.py [--port 8799]
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

from coldscope.tuning.verify import WARMUP_REQUESTS, serving_load

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
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[f"{p.name()}:{p.pid}"] = t.user + t.system
        except psutil.Error:
            pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8799)
    ap.add_argument("--model", default=str(ROOT / "models" / "tiny"))
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
        for p in procs:
            print(json.dumps({"pid": p.pid, "name": p.name(), "affinity": p.cpu_affinity()}))
        serving_load(base, args.model, requests=WARMUP_REQUESTS)
        for block in range(8):
            pinned = block % 2 == 1
            os.sched_setaffinity(0, {1} if pinned else set(range(os.cpu_count() or 1)))
            for _ in range(3):
                before, (st0, vm0) = cpu_seconds(procs), host()
                r = serving_load(base, args.model)
                after, (st1, vm1) = cpu_seconds(procs), host()
                print(json.dumps({
                    "pinned_client": pinned, "tokens_per_s": r["tokens_per_s"],
                    "seconds": r["seconds"],
                    "cpu_s": {k: round(after[k] - before.get(k, 0.0), 2) for k in after},
                    "steal_s": round((st1 - st0) / os.sysconf("SC_CLK_TCK"), 3),
                    "vmstat": {k: vm1[k] - vm0[k] for k in vm0 if vm1.get(k) != vm0[k]},
                }), flush=True)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
