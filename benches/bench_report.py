"""Benchmark: a report over 1,000 runs must render in under 2 s in Chromium and stay under 5 MB.

The 1,000 records are real stored runs perturbed: every time (stages, sub-steps, intervals,
segments, CPU sample times) of a real run is scaled by one log-normal factor per run and each
stage by its own small factor, and runs are spread over 10 models x cold/warm x 2 labels, so
the report has the shape of a large campaign (40 configurations, a timeline and CPU heatmap
per configuration). Usage: ``.venv/bin/python benches/bench_report.py [--store PATH]``.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

from benchlib import could_not_run, figure

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.report.build import build_report
from coldscope.report.html import render_report
from coldscope.store.db import Store

REPO = Path(__file__).resolve().parents[1]
N_RUNS = 1000
MAX_BYTES = 5_000_000
MAX_RENDER_MS = 2000


def perturb(run: Run, i: int, rng: random.Random) -> Run:
    record = run.to_json()
    r = copy.deepcopy(record)
    scale = rng.lognormvariate(0, 0.08)
    r["id"] = f"{record['id']}-{i:04d}"
    r["model"] = {"path": None, "name": f"model-{i % 10}"}
    r["cache"] = "cold" if (i // 10) % 2 else "warm"
    r["label"] = f"campaign-{(i // 20) % 2}"
    r.pop("log_tail", None)
    stages = {}
    for b in BUCKETS:
        v = record["stages"].get(b)
        stages[b] = None if v is None else v * scale * rng.lognormvariate(0, 0.05)
    r["stages"] = stages
    r["time_to_ready_s"] = sum(v for v in stages.values() if v is not None)
    stretch = r["time_to_ready_s"] / record["time_to_ready_s"]
    for iv in r.get("intervals") or []:
        iv["start"] *= stretch
        iv["end"] *= stretch
    for seg in r.get("segments") or []:
        seg["start"] *= stretch
        seg["end"] *= stretch
    if r.get("first_token_s") is not None:
        r["first_token_s"] *= stretch
    r["substeps"] = {k: v * stretch for k, v in (r.get("substeps") or {}).items()}
    if r.get("cpu"):
        r["cpu"]["t"] = [t * stretch for t in r["cpu"]["t"]]
    return Run.from_json(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="store with real runs (default: the usual)")
    ap.add_argument("--out", default=str(REPO / "artifacts" / "bench_report.html"))
    ap.add_argument("--save-store", default=None, metavar="PATH",
                    help="also store the 1,000 perturbed runs there (the input of the "
                         "`report`/`export` timings in docs/report.md and docs/export.md)")
    args = ap.parse_args()
    store_path = Path(args.store) if args.store else None
    try:
        real = Store(store_path, create=False).runs(status="ok")
    except Exception as exc:  # noqa: BLE001 - a bench prints why it skips
        real = []
        print(f"no store: {exc}")
    real = [r for r in real if r.time_to_ready_s and r.intervals]
    if not real:
        print("skipped: no profiled runs in the store to perturb (run `make demo` first)")
        could_not_run("report of 1,000 runs: size and browser render",
                      "no profiled runs in the store to perturb (run `make demo` first)",
                      target=f"< {MAX_BYTES / 1e6:.0f} MB, < {MAX_RENDER_MS} ms")
        return 0
    rng = random.Random(6)
    records = [perturb(real[i % len(real)], i, rng) for i in range(N_RUNS)]
    if args.save_store:
        with Store(args.save_store) as big:
            big.add_runs((r, None) for r in records)
        print(f"stored the {len(records)} runs in {args.save_store}")

    t0 = time.perf_counter()
    report = build_report(records, title="bench: 1,000 runs", source="synthetic")
    page = render_report(report)
    build_s = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    size = out.stat().st_size
    print(f"runs: {report.runs}  configurations: {report.configurations}  "
          f"timelines: {len(report.timelines.items)}  "
          f"comparisons: {len(report.comparisons.items)}")
    print(f"python build + render: {build_s:.2f} s")
    print(f"size: {size / 1e6:.2f} MB (target < {MAX_BYTES / 1e6:.0f} MB)")
    figure("report of 1,000 runs: page size", f"{size / 1e6:.2f} MB",
           target=f"< {MAX_BYTES / 1e6:.0f} MB", met=size < MAX_BYTES)

    sys.path.insert(0, str(REPO))  # the Chromium driver is test tooling, in tests/
    from tests.browser import CHROMIUM, Browser

    if not Path(CHROMIUM).exists():
        print(f"browser render: skipped ({CHROMIUM} missing: apt-get install -y chromium)")
        could_not_run("report of 1,000 runs: browser render, worst of 3 loads",
                      f"{CHROMIUM} missing", target=f"< {MAX_RENDER_MS} ms")
        return 0
    times = []
    with Browser() as browser:
        for _ in range(3):
            probe = browser.open(out)
            times.append(probe["wall_ms"])
    best, worst = min(times), max(times)
    print(f"browser: {probe['charts']} charts, {probe['marks']} marks, errors: "
          f"{len(probe['errors'])}, requests: {len(probe['requests'])}")
    print(f"browser render (navigate -> load event -> laid out), 3 loads: best {best:.0f} ms, "
          f"worst {worst:.0f} ms (target < {MAX_RENDER_MS} ms)")
    ok = size < MAX_BYTES and worst < MAX_RENDER_MS and not probe["errors"]
    print("PASS" if ok else "FAIL")
    figure("report of 1,000 runs: browser render, worst of 3 loads (console errors)",
           f"{worst:.0f} ms ({len(probe['errors'])} errors)",
           target=f"< {MAX_RENDER_MS} ms, 0 errors",
           met=worst < MAX_RENDER_MS and not probe["errors"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
