"""``coldscope fit`` on a large store: where the time goes (reading the runs, turning them into
observations, fitting), so the progress bar follows the real phases.

Run: ``.venv/bin/python benches/bench_fit_store.py [--runs 10000] [--dir /tmp/fitbench]``.
Builds a store of ``--runs`` runs over eight config-only Llama shapes; every record is a real
profiled run's record (``--template``, default: the first run of the first store found under
``.coldscope``, else a minimal record) with its id, model and stages changed, so records have
the size real ones have (~20 KB: environment, processes, CPU samples, log tail). Prints the
seconds of each phase of ``fit --store``, as its code runs them, then reads with and without
``Store.runs``'s progress callback, interleaved.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.shapes

from benchlib import figure  # noqa: E402


def build(base: Path, n: int, template: dict) -> Path:
    """A store of ``n`` runs over eight config-only shapes, written in one transaction
    (``Store.add_runs``); kept between invocations."""
    from tests.shapes import shape_run, write_shape

    from coldscope.store.db import Store
    db = base / "big.db"
    if db.exists():
        return db
    shapes = [(write_shape(base / f"shape{i}", layers, i), layers)
              for i, layers in enumerate((2, 4, 6, 8, 10, 12, 14, 16))]

    def run(k: int):
        d, layers = shapes[k % len(shapes)]
        return shape_run(f"run{k:06d}", d, layers, bootstrap=30.0 + k % 7 * 0.1,
                         started_at=f"2026-11-{1 + k // 86400 % 28:02d}T00:00:00Z",
                         template=template, origin="profile", campaign=None, storage={},
                         engine=dict(template.get("engine") or {"name": "vllm"}, model=str(d)))

    with Store(db) as store:
        store.add_runs((run(k), None) for k in range(n))
    return db


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/coldscope-fit-bench"))
    ap.add_argument("--repeat", type=int, default=1, help="interleaved reads with and without "
                    "the progress callback")
    ap.add_argument("--template", type=Path, default=None, help="a store to take a record from")
    args = ap.parse_args()
    template: dict = {}
    stores = [args.template] if args.template else sorted(ROOT.glob(".coldscope/**/store.db"))
    for path in stores:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        row = conn.execute("SELECT record FROM runs WHERE status = 'ok' LIMIT 1").fetchone()
        conn.close()
        if row:
            template = json.loads(row[0])
            break
    base = args.dir / str(args.runs)
    db = build(base, args.runs, template)
    print(f"store {db}: {args.runs} runs, {db.stat().st_size / 1e6:.0f} MB "
          f"(record template: {len(json.dumps(template)) / 1e3:.1f} kB)")

    from coldscope.prediction.startup_model import StartupModel
    from coldscope.prediction.training import observations_from_runs
    from coldscope.store.db import Store
    t0 = time.perf_counter()
    with Store(db, create=False) as store:
        runs = store.runs(status=None)
    t1 = time.perf_counter()
    observations, environment, _ = observations_from_runs(runs)
    t2 = time.perf_counter()
    StartupModel().fit(observations, environment, {}, source=str(db))
    t3 = time.perf_counter()
    print(f"read runs {t1 - t0:.2f} s, observations {t2 - t1:.2f} s, fit {t3 - t2:.2f} s "
          f"({len(observations)} observations)")
    figure(f"fit --store on {args.runs} runs: read / observations / fit",
           f"{t1 - t0:.2f} s / {t2 - t1:.2f} s / {t3 - t2:.2f} s")
    # the cost of the progress callback (a COUNT(*) and a call every 100 records), interleaved
    for _ in range(args.repeat):
        for label, cb in (("without progress", None), ("with progress", lambda d, t: None)):
            t0 = time.perf_counter()
            with Store(db, create=False) as store:
                store.runs(status=None, progress=cb)
            print(f"  read runs {label}: {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
