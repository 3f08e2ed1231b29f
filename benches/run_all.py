"""``make bench``: run every bench, whatever the others did, and print one summary table.

Each ``benches/bench_*.py`` runs as its own process with its default arguments (its output is
shown as it comes) and reports its figures as ``BENCH-FIGURE`` JSON lines (``benchlib``). The
table lists every figure: bench, figure, target, measured, and met / not met / unresolved /
could not run.
Exit status: 0 when every bench ran to its end, met or not; 1 when a bench crashed (a non-zero
exit, or no figure at all), named in the table. ``--only a,b`` / ``--skip a,b`` choose benches
by name (``tune`` for ``bench_tune.py``); ``--json FILE`` also writes the figures.

Then every figure README.md and docs/*.md quote (``benches/figures.toml``), with the command
that reproduces it and a verdict: the status its bench reported in this run, ``not run now``
(a bench left out by --only/--skip), ``test`` (a named test asserts it or writes it to an
artefact), ``not in make bench`` (a command reproduces it, too long for make bench), ``cited``
or ``NOT REPRODUCED``. ``--figures`` prints only that table, running no bench.

    .venv/bin/python benches/run_all.py [--only NAMES] [--skip NAMES] [--json FILE] [--figures]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MANIFEST = HERE / "figures.toml"


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


def table(rows: list[dict],
          cols: tuple[str, ...] = ("bench", "figure", "target", "measured", "status"),
          most: tuple[int, ...] = (0, 72, 36, 48)) -> str:
    """Rows as aligned columns; the last column is never cut, the others at ``most`` (0: not
    cut) with "…"."""
    cells = [[str(r.get(c) if r.get(c) is not None else "-") for c in cols] for r in rows]
    width = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    for i, cap in enumerate(most):
        if cap:
            width[i] = min(width[i], cap)
    last = len(cols) - 1

    def line(values: list[str]) -> str:
        return "  ".join((v if len(v) <= w else v[:w - 1] + "…").ljust(w) if i < last else v
                         for i, (v, w) in enumerate(zip(values, width, strict=True)))

    return "\n".join([line(list(cols)), line(["-" * w for w in width])] +
                     [line(row) for row in cells])


def manifest() -> list[dict]:
    """The docs' figures (``benches/figures.toml``)."""
    with MANIFEST.open("rb") as fh:
        return list(tomllib.load(fh)["figure"])


def figure_verdict(entry: dict, rows: list[dict], ran: set[str]) -> str:
    """What this run says about one quoted figure (see the module's docstring)."""
    source = entry["source"]
    if source == "bench":
        if entry["bench"] not in ran:
            return "not run now"
        hits = [r for r in rows if r["bench"] == entry["bench"] and entry["figure"] in r["figure"]]
        if not hits:
            return "NOT REPRODUCED: the bench reported no such figure"
        return "; ".join(f"{r['status']}: {r['measured']}" for r in hits)
    if source == "test":
        artefact = entry.get("artefact")
        if artefact:
            there = "present" if (REPO / artefact).exists() else "absent until the test runs"
            return f"test (artefact {artefact}: {there})"
        return "test (asserted)"
    if source == "command":
        return "not in make bench" + (f": {entry['note']}" if entry.get("note") else "")
    if source == "cited":
        return "cited, not measured here"
    return "NOT REPRODUCED" + (f": {entry['note']}" if entry.get("note") else "")


def figures_table(rows: list[dict], ran: set[str]) -> str:
    lines = [{"doc": e["doc"], "figure as quoted": " ".join(e["quote"].split()),
              "command": e.get("command") or e.get("test") or "-",
              "verdict": figure_verdict(e, rows, ran)} for e in manifest()]
    return table(lines, ("doc", "figure as quoted", "command", "verdict"), (16, 56, 56))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated bench names")
    ap.add_argument("--skip", default="", help="comma-separated bench names")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    ap.add_argument("--figures", action="store_true",
                    help="only list the docs' figures with their commands; run no bench")
    args = ap.parse_args()
    if args.figures:
        print(figures_table([], set()))
        return 0
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s}
    rows: list[dict] = []
    crashed: list[str] = []
    ran: set[str] = set()
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if (only and name not in only) or name in skip:
            continue
        print(f"== {path.relative_to(REPO)}", flush=True)
        ran.add(name)
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
              for s in ("met", "not met", "unresolved", "measured", "could not run", "CRASHED")}
    print("\n" + ", ".join(f"{n} {s}" for s, n in counts.items()))
    print("\nfigures in README.md and docs/ (benches/figures.toml)")
    print(figures_table(rows, ran))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    if crashed:
        print(f"crashed: {', '.join(crashed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
