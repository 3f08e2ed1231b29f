"""Which interval ``coldscope compare`` uses: coverage and width of three 95 % intervals for
the difference of mean start-up times, on simulated start-ups (docs/compare.md).

Run: ``.venv/bin/python benches/bench_compare_methods.py [--trials 400] [--runs 3]``.
Each trial draws ``--runs`` start-ups per side from normal distributions (a: mean 40 s,
b: 38 s, both sd 3 s, or b's sd ``--sd-b``), and, for the same data, makes Welch's t-interval
(``coldscope.analysis.comparison.welch_interval``, what compare uses), a paired t-interval over the
interleaved pairs and a percentile bootstrap (4,000 resamples). Prints how often each covered
the true difference (-2 s) and its mean width. Target for the method compare uses: coverage
at least 95 % (an interval that claims 95 % must not cover less).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from benchlib import figure
from scipy.stats import t as student_t

from coldscope.analysis.comparison import welch_interval


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sd-b", type=float, default=3.0)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    n, truth = args.runs, -2.0
    hits = {"welch": 0, "paired": 0, "bootstrap": 0}
    widths: dict[str, list[float]] = {k: [] for k in hits}
    for _ in range(args.trials):
        a = rng.normal(40.0, 3.0, n)
        b = rng.normal(38.0, args.sd_b, n)
        iv = welch_interval(list(a), list(b))
        d = b - a
        half = student_t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n)
        boot = b[rng.integers(0, n, (4000, n))].mean(1) - a[rng.integers(0, n, (4000, n))].mean(1)
        lo, hi = np.percentile(boot, [2.5, 97.5])
        for name, (low, high) in (("welch", (iv.low, iv.high)),
                                  ("paired", (d.mean() - half, d.mean() + half)),
                                  ("bootstrap", (lo, hi))):
            hits[name] += low <= truth <= high
            widths[name].append(high - low)
    for name in hits:
        cover = hits[name] / args.trials
        print(f"{name:<10} coverage {cover:6.1%}  mean width {np.mean(widths[name]):6.2f} s")
        figure(f"{name} 95 % interval, {n} runs a side, {args.trials} trials: coverage "
               "(mean width)", f"{cover:.1%} ({np.mean(widths[name]):.1f} s)",
               target=">= 95 %" if name == "welch" else None,
               met=cover >= 0.95 if name == "welch" else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
