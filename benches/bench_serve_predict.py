"""``coldscope serve``'s POST /v1/predict under a steady load: p99 latency at 500 requests/s.

Run: ``.venv/bin/python benches/bench_serve_predict.py [--rate 500] [--seconds 30]``.
Target: p99 <= 5 ms at 500 req/s for 30 s, on loopback.

It starts ``coldscope serve`` (the paper-fitted startup model) as its own process, then sends
an open-loop load from this process (``httpload.open_loop``: request i is due at start + i/rate
whatever happened to the ones before it, over a bounded pool of keep-alive connections; each
request's latency counted from when it was *due*, queueing included, and from when it was
sent). The body is a features document (`coldscope features --json` of
Llama-2-7B). A 3 s warm-up at the same rate comes first and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import figure
from httpload import open_loop, pct, post_request, server_buckets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"

from tests.serve_replay import free_port, stop, wait_for  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--warmup", type=float, default=3.0)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "startup-model.json"
        subprocess.run([sys.executable, "-m", "coldscope.cli.main", "fit", "--paper",
                        str(PAPER), "--out", str(model), "--json"], check=True,
                       stdout=subprocess.DEVNULL)
        features = subprocess.run(
            [sys.executable, "-m", "coldscope.cli.main", "features",
             str(CONFIGS / "llama-2-7b-hf"), "--json"], check=True, capture_output=True,
            text=True).stdout
        body = json.dumps(json.loads(features)).encode()
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "coldscope.cli.main", "serve", "--port", str(port),
             "--store", str(Path(tmp) / "store.db"), "--startup-model", str(model),
             "--log-level", "warning"], stdout=subprocess.DEVNULL)
        try:
            import httpx

            wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200,
                     60, "coldscope serve")
            cpu0 = _cpu_seconds(server.pid)
            before = server_buckets(port, "/v1/predict")
            request = post_request(port, "/v1/predict", body)
            result = asyncio.run(open_loop(port, lambda i: request, args.rate, args.seconds,
                                           args.connections, args.warmup))
            after = server_buckets(port, "/v1/predict")
            cpu = _cpu_seconds(server.pid) - cpu0
        finally:
            stop(server)
    due, svc = result["due"], result["service"]
    achieved = result["sent"] / result["elapsed_s"]
    print(f"POST /v1/predict, {args.rate:g} req/s offered for {args.seconds:g} s "
          f"(+{args.warmup:g} s warm-up), {args.connections} keep-alive connections, "
          f"{os.cpu_count()} CPUs")
    print(f"  load average (1 min) before {load0:.2f}, after {os.getloadavg()[0]:.2f} "
          "(other jobs share these CPUs)")
    print(f"  requests counted {len(due)}, errors {result['errors']}, achieved "
          f"{achieved:.1f} req/s, server CPU {cpu / result['elapsed_s'] * 100:.0f} % of a core")
    print(f"  latency from due time: p50 {pct(due, 0.5):.2f} ms  p99 {pct(due, 0.99):.2f} ms  "
          f"max {max(due) * 1000:.2f} ms")
    print(f"  latency from send    : p50 {pct(svc, 0.5):.2f} ms  p99 {pct(svc, 0.99):.2f} ms  "
          f"max {max(svc) * 1000:.2f} ms")
    server = {le: after[le] - before.get(le, 0.0) for le in after}
    n = server[float("inf")]
    p99_bound = next(le for le in sorted(server) if server[le] >= 0.99 * n)
    print(f"  inside serve (coldscope_http_request_seconds, warm-up included): p99 <= "
          f"{p99_bound * 1000:g} ms; {server.get(0.001, 0) / n:.1%} under 1 ms, "
          f"{server.get(0.005, 0) / n:.1%} under 5 ms")
    figure(f"serve POST /v1/predict at {args.rate:g} req/s: p50 / max from due time, serve CPU",
           f"{pct(due, 0.5):.2f} / {max(due) * 1000:.1f} ms, "
           f"{cpu / result['elapsed_s'] * 100:.0f} % of a core")
    figure(f"serve POST /v1/predict at {args.rate:g} req/s: inside serve, under 1 ms / 5 ms",
           f"{server.get(0.001, 0) / n:.1%} / {server.get(0.005, 0) / n:.1%}")
    ok = pct(due, 0.99) <= 5.0 and result["errors"] == 0
    print(f"  target p99 <= 5 ms (from due time): {'met' if ok else 'NOT met'}")
    figure(f"serve POST /v1/predict at {args.rate:g} req/s: p99 from due time (errors)",
           f"{pct(due, 0.99):.2f} ms ({result['errors']} errors; load {load0:.1f})",
           target="<= 5 ms, 0 errors", met=ok)
    return 0


def _cpu_seconds(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


if __name__ == "__main__":
    sys.exit(main())
