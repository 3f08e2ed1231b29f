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
CONFIGS = ROOT.parent / "shared" / "fixtures" / "model-configs"


def build(base: Path, n: int, template: dict) -> Path:
    from coldscope.stages import BUCKETS
    from coldscope.store import Store

    db = base / "big.db"
    if db.exists():
        return db
    shapes = []
    for i, layers in enumerate((2, 4, 6, 8, 10, 12, 14, 16)):
        d = base / f"shape{i}"
        d.mkdir(parents=True, exist_ok=True)
        config = json.loads((CONFIGS / "llama-3.2-1b" / "config.json").read_text())
        config.update(num_hidden_layers=layers, hidden_size=256, intermediate_size=512,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                      vocab_size=1000)
        (d / "config.json").write_text(json.dumps(config))
        (d / "tokenizer.json").write_text("t" * (1000 * (i + 1)))
        shapes.append((d, layers))
    Store(db).close()  # the schema
    conn = sqlite3.connect(db)
    rows = []
    for k in range(n):
        d, layers = shapes[k % len(shapes)]
        stages = {b: None for b in BUCKETS}
        stages.update(bootstrap=30.0 + k % 7 * 0.1, tokenizer=0.2, model_loading=1.0,
                      torch_compile=20.0 + 5.0 * layers, kv_cache_profiling=2.0,
                      server_ready=1.0, unattributed=0.5)
        rec = dict(template, id=f"run{k:06d}", status="ok", cache="cold", origin="profile",
                   started_at=f"2026-11-{1 + k // 86400 % 28:02d}T00:00:00Z", stages=stages,
                   time_to_ready_s=sum(v for v in stages.values() if v),
                   model={"path": str(d), "name": d.name}, campaign=None, storage={})
        rec["engine"] = dict(rec.get("engine") or {}, model=str(d))
        rows.append((rec["id"], 2, "profile", rec["started_at"], "ok", None, "cold", None, None,
                     str(d), None, rec["time_to_ready_s"], None, json.dumps(rec)))
    conn.executemany("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.commit()
    conn.close()
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

    from coldscope.predict.store import observations_from_runs
    from coldscope.predictor import StartupModel
    from coldscope.store import Store

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
