"""``make bench``: run every bench, whatever the others did, and print one summary table.

Each ``benches/bench_*.py`` runs as its own process with its default arguments (its output is
shown as it comes) and reports its figures as ``BENCH-FIGURE`` JSON lines (``benchlib``). The
table lists every figure: bench, figure, target, measured, and met / not met / could not run.
Exit status: 0 when every bench ran to its end, met or not; 1 when a bench crashed (a non-zero
exit, or no figure at all), named in the table. ``--only a,b`` / ``--skip a,b`` choose benches
by name (``tune`` for ``bench_tune.py``); ``--json FILE`` also writes the figures.

    .venv/bin/python benches/run_all.py [--only NAMES] [--skip NAMES] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def run_bench(path: Path) -> tuple[int, list[dict], float]:
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as fh:
        out = fh.name
    env = dict(os.environ, COLDSCOPE_BENCH_OUT=out)
    src = str(REPO / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    t0 = time.monotonic()
    code = subprocess.call([sys.executable, str(path)], cwd=REPO, env=env)
    took = time.monotonic() - t0
    with open(out, encoding="utf-8") as fh:
        figures = [json.loads(line) for line in fh if line.strip()]
    os.unlink(out)
    return code, figures, took


def table(rows: list[dict]) -> str:
    cols = ("bench", "figure", "target", "measured", "status")
    cells = [[str(r.get(c) if r.get(c) is not None else "-") for c in cols] for r in rows]
    width = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    for i, most in ((1, 72), (2, 36), (3, 48)):  # long cells are cut with "…"
        width[i] = min(width[i], most)

    def line(values: list[str]) -> str:
        return "  ".join((v if len(v) <= w else v[:w - 1] + "…").ljust(w) if i < 4 else v
                         for i, (v, w) in enumerate(zip(values, width, strict=True)))

    return "\n".join([line(list(cols)), line(["-" * w for w in width])] +
                     [line(row) for row in cells])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated bench names")
    ap.add_argument("--skip", default="", help="comma-separated bench names")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s}
    rows: list[dict] = []
    crashed: list[str] = []
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if (only and name not in only) or name in skip:
            continue
        print(f"== {path.relative_to(REPO)}", flush=True)
        code, figures, took = run_bench(path)
        rows += figures
        if code != 0 or not figures:
            why = f"exit {code}" if code != 0 else "no figure reported"
            crashed.append(name)
            rows.append({"bench": name, "figure": "(the bench itself)", "target": None,
                         "measured": why, "status": "CRASHED"})
        print(f"== {name}: {len(figures)} figure(s), {took:.0f} s, exit {code}", flush=True)
    print("\nsummary")
    print(table(rows))
    counts = {s: sum(r["status"] == s for r in rows)
              for s in ("met", "not met", "measured", "could not run", "CRASHED")}
    print("\n" + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    if crashed:
        print(f"crashed: {', '.join(crashed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
