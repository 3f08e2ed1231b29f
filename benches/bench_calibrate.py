"""Calibration on a new machine, on the paper's data (issue 13's targets).

Run: ``.venv/bin/python benches/bench_calibrate.py [--paper DIR]``. Fits the startup model on
the main table (H100 node, weights from the SSD), then for the L40S node (figure 10) and the
Xeon node (figure 11) calibrates it with every pair of that figure's models and predicts the
other seven. Prints, per figure: MSE and max |error| of the total over the held-out models for
every pair, whether ``calibrate --suggest`` accepts the pair, whether the pair meets the
targets (MSE <= 0.3 s^2, max error <= 1.0 s), and the coverage of the 90 % intervals. Also
the uncalibrated base model on each figure (the issue's 763 / 631 s^2), and leave-one-model-out
on the main table (target: no worse than 0.253 s^2 / 1.16 s).

``--suggest`` is given the figure's runs (as ``--paper DIR --timings FILE`` gives them), so its
clock check sees the clock each stage was timed on. Why the Xeon node misses, per figure: that
clock, how much its fixed costs vary by model, the floor the transfer fitted on all nine models
(truth included) leaves, how many accepted pairs meet the targets with the all-nine offsets or
ratios swapped in, and how well a post-run check from the two runs' disagreement would do.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

from benchlib import could_not_run, figure

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT.parent / "shared" / "data" / "paper"
FIGURES = {"L40S (figure 10)": "figure-10/gpu1", "Xeon (figure 11)": "figure-11/cpu1"}
MSE_TARGET, MAX_TARGET = 0.3, 1.0


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from coldscope.core.clock import clock_resolution
    from coldscope.prediction import core
    from coldscope.prediction.calibrate import calibrate, suggest
    from coldscope.prediction.paper import (
        PAPER_CAPTURE_SIZES,
        observations_from_paper,
        paper_environment,
    )
    from coldscope.prediction.startup_model import StartupModel
    ap = argparse.ArgumentParser()
    ap.add_argument("--paper", type=Path, default=PAPER)
    args = ap.parse_args()
    paper = args.paper
    if not paper.is_dir():
        could_not_run("calibrated pairs meeting MSE <= 0.3 s^2 and max <= 1.0 s",
                      f"no paper data in {paper}")
        return 0
    base = StartupModel().fit(observations_from_paper(paper), paper_environment(paper),
                              {"capture_sizes": PAPER_CAPTURE_SIZES}, source=str(paper))
    lomo = base.file_.lomo
    assert lomo is not None
    print(f"LOMO on the main table: MSE {lomo.total.mse:.3f} s^2, max |error| "
          f"{lomo.total.max_abs:.3f} s, {lomo.total.coverage} inside their 90 % interval "
          "(target: <= 0.253 s^2 / 1.16 s)")
    figure("LOMO of the total on the paper's main table (MSE / max |error|)",
           f"{lomo.total.mse:.3f} s^2 / {lomo.total.max_abs:.3f} s",
           target="<= 0.253 s^2 / 1.16 s (no worse than before, at the 2 decimals it was "
                  "given to)",
           met=lomo.total.mse <= 0.253 and round(lomo.total.max_abs, 2) <= 1.16)
    all_ok = True
    for label, table in FIGURES.items():
        timings = paper / "figures" / table / "avg_comparison_results.json"
        obs = observations_from_paper(paper, timings)
        env = paper_environment(paper, timings)
        raw = [base.predict(o.features).total_s - o.total_s for o in obs]
        print(f"\n{label}: uncalibrated base model MSE {statistics.fmean(e * e for e in raw):.1f}"
              f" s^2, max |error| {max(map(abs, raw)):.1f} s")
        figure(f"{label}: uncalibrated base model (MSE / max |error|)",
               f"{statistics.fmean(e * e for e in raw):.0f} s^2 / {max(map(abs, raw)):.0f} s")
        # a full refit on all of the figure's models, scored leave-one-model-out: what this
        # machine's own data give without a transfer from the H100 fit
        refit = StartupModel().fit(obs, env, {"capture_sizes": PAPER_CAPTURE_SIZES},
                                   source=str(timings)).file_.lomo
        assert refit is not None
        figure(f"{label}: full refit on all {len(obs)} models, LOMO of the total "
               "(MSE / max |error|)", f"{refit.total.mse:.2f} s^2 / {refit.total.max_abs:.2f} s")
        # the runs go to suggest as `calibrate --suggest --paper DIR --timings FILE` does: it
        # checks the clock they were timed on
        accepted = {s.models: s.accepted
                    for s in suggest(base.file_, [o.features for o in obs], obs)}
        clocks = {b: clock_resolution([float(v) for o in obs
                                       for v in [o.buckets.get(b)] if v is not None])
                  for b in base.file_.buckets if b != "unattributed"}
        print("  clock of each stage in these runs (per-model means of 5): "
              + ", ".join(f"{b} {q:g} s" if q else f"{b} fine" for b, q in clocks.items()))
        full = calibrate(base.file_, obs, environment=env, source="all", base_source="bench")
        assert full.calibration is not None
        offsets = [b for b, t in full.calibration.stages.items() if t.kind == "offset"]

        fixed = []  # seconds of the offset stages per model (unattributed: total - stages)
        for o in obs:
            known = sum(float(v) for k, v in o.buckets.items()
                        if v is not None and k != "unattributed")
            fixed.append(sum(o.total_s - known if b == "unattributed"
                             else float(o.buckets.get(b) or 0.0) for b in offsets))
        sd = statistics.stdev(fixed)
        print(f"  fixed costs (offset stages together) vary by model with sd {sd:.3f} s: a "
              f"two-model offset is off by that / sqrt(2), adding {sd * sd / 2:.3f} s^2 to "
              "every pair's expected MSE")
        figure(f"{label}: fixed costs vary by model (sd; the MSE a two-model offset adds)",
               f"{sd:.2f} s; {sd * sd / 2:.3f} s^2")
        rows, inside, checked, floors, swaps, post = [], 0, 0, [], [], []
        widths: list[float] = []  # the accepted pairs' held-out 90 % intervals, seconds
        inside_acc = checked_acc = 0
        for a, b in itertools.combinations(obs, 2):
            cal = calibrate(base.file_, [a, b], environment=env, source=str(timings),
                            base_source="bench")
            errors, floor = [], []
            for o in obs:
                if o in (a, b):
                    continue
                p = core.predict(cal, o.features)
                errors.append(p.total_s - o.total_s)
                floor.append(core.predict(full, o.features).total_s - o.total_s)
                ok = p.interval.low <= o.total_s <= p.interval.high
                inside += ok
                checked += 1
                key = (a.model, b.model) if (a.model, b.model) in accepted else (b.model, a.model)
                if accepted[key]:
                    inside_acc += ok
                    checked_acc += 1
                    widths.append(p.interval.high - p.interval.low)
            key = (a.model, b.model) if (a.model, b.model) in accepted else (b.model, a.model)
            mse = statistics.fmean(e * e for e in errors)
            worst = max(map(abs, errors))
            rows.append((accepted[key], mse, worst, a.model, b.model, cal.calibration.warnings))
            if accepted[key]:
                floors.append((statistics.fmean(e * e for e in floor), max(map(abs, floor))))
                # which transfer misses: the pair's with the all-nine offsets, or ratios, in
                swaps.append(tuple(_meets(_swapped_errors(core, base.file_, cal, full, kind,
                                                          [o for o in obs if o not in (a, b)]))
                                   for kind in ("offset", "ratio")))
            # a post-run check: the pair's expected held-out MSE from its two runs' totals
            # (each run's own transfer; spread^2 x (1 + 1/2), a two-model offset's propagation)
            held = [o for o in obs if o not in (a, b)]
            own = [statistics.fmean(_own_total(core, base.file_, cal, m, o.features) - o.total_s
                                    for o in held) for m in (a.model, b.model)]
            post.append((1.5 * statistics.variance(own) <= MSE_TARGET, mse <= MSE_TARGET,
                         1.5 * statistics.variance(own), mse))
        rows.sort(key=lambda r: (not r[0], r[1]))
        print(f"  {'pair':<34} {'suggest':>8} {'MSE s^2':>8} {'max s':>6}  target")
        for acc, mse, worst, ma, mb, _ in rows:
            meets = mse <= MSE_TARGET and worst <= MAX_TARGET
            print(f"  {ma + ' + ' + mb:<34} {'accept' if acc else 'reject':>8} {mse:8.3f} "
                  f"{worst:6.2f}  {'met' if meets else 'MISSED'}")
        acc_rows = [r for r in rows if r[0]]
        met = sum(r[1] <= MSE_TARGET and r[2] <= MAX_TARGET for r in acc_rows)
        all_ok &= met == len(acc_rows)
        figure(f"{label}: accepted pairs meeting the targets", f"{met} of {len(acc_rows)} "
               f"(median MSE {statistics.median(r[1] for r in acc_rows):.3f} s^2, worst "
               f"{max(r[1] for r in acc_rows):.3f} s^2 / {max(r[2] for r in acc_rows):.2f} s; "
               f"all pairs' median {statistics.median(r[1] for r in rows):.3f} s^2)",
               target=f"all (MSE <= {MSE_TARGET} s^2, max <= {MAX_TARGET} s)",
               met=met == len(acc_rows))
        med = statistics.median
        print(f"  all pairs: median MSE {med(r[1] for r in rows):.3f} s^2, median max "
              f"{med(r[2] for r in rows):.2f} s; accepted pairs: {len(acc_rows)}, meeting the "
              f"targets: {met}; median MSE {med(r[1] for r in acc_rows):.3f} s^2, worst MSE "
              f"{max(r[1] for r in acc_rows):.3f}, worst max {max(r[2] for r in acc_rows):.2f} s")
        print(f"  90 % interval coverage of held-out truths: all pairs {inside}/{checked} "
              f"({inside / checked:.1%}), accepted pairs {inside_acc}/{checked_acc} "
              f"({inside_acc / max(checked_acc, 1):.1%})")
        figure(f"{label}: held-out truths inside their 90 % interval, accepted pairs",
               f"{inside_acc / max(checked_acc, 1):.1%} ({inside_acc} of {checked_acc}; all "
               f"pairs {inside / checked:.1%}); median width {statistics.median(widths):.1f} s")
        print(f"  floor: the transfer fitted on all nine (truth included) scores the accepted "
              f"pairs' held-out models median MSE "
              f"{statistics.median(f[0] for f in floors):.3f} s^2, worst "
              f"{max(f[0] for f in floors):.3f} s^2 / {max(f[1] for f in floors):.2f} s")
        figure(f"{label}: floor, the all-nine transfer on the accepted pairs' held-out models",
               f"median {statistics.median(f[0] for f in floors):.3f} s^2, worst "
               f"{max(f[0] for f in floors):.3f} s^2")
        figure(f"{label}: all-nine transfer swapped in, accepted pairs meeting the targets",
               f"offsets {sum(x for x, _ in swaps)} of {len(swaps)}, ratios "
               f"{sum(y for _, y in swaps)} of {len(swaps)}")
        print(f"  accepted pairs meeting the targets with the all-nine offsets swapped in: "
              f"{sum(x for x, _ in swaps)} of {len(swaps)}; with the all-nine ratios: "
              f"{sum(y for _, y in swaps)} of {len(swaps)}")
        passed = [p for p in post if p[0]]
        r = statistics.correlation([p[2] for p in post], [p[3] for p in post])
        print(f"  post-run check (expected MSE from the two runs' disagreement <= target): "
              f"correlation with the actual MSE {r:.2f}"
              f"; of the {len(passed)} pairs it passes, {sum(not p[1] for p in passed)} miss the "
              "MSE target")
        figure(f"{label}: post-run check, correlation with the actual MSE; pairs passed, missing",
               f"{r:.2f}; {len(passed)} passed, {sum(not p[1] for p in passed)} miss")
    print("\nout of the training range (issue 13 item 4): each extreme model held out, refit, "
          "predicted")
    dense = [o for o in observations_from_paper(paper) if o.features.kind == "dense"]
    extremes = {
        "deepest": max(dense, key=lambda o: o.features.num_layers),
        "largest": max(dense, key=lambda o: o.features.weight_bytes),
        "smallest": min(dense, key=lambda o: o.features.weight_bytes),
    }
    everything = observations_from_paper(paper)
    for what, held in extremes.items():
        m = StartupModel().fit([o for o in everything if o.model != held.model], {},
                               {"capture_sizes": PAPER_CAPTURE_SIZES})
        p = m.predict(held.features)
        inside = p.interval.low <= held.total_s <= p.interval.high
        outside = [w.split(" is outside")[0] for w in p.warnings if "outside the training" in w]
        print(f"  {what:<8} {held.model:<24} measured {held.total_s:6.2f} s, predicted "
              f"{p.total_s:6.2f} s [{p.interval.low:.2f}, {p.interval.high:.2f}] "
              f"{'inside' if inside else 'OUTSIDE'}; out of range: {', '.join(outside) or '-'}")
    from coldscope.prediction.paper import paper_features
    falcon = paper_features(paper)["falcon-11b"]  # 60 layers; its timings are withheld
    fp = base.predict(falcon)
    c = fp.stages["torch_compile"]
    served = (fp.formulas or {}).get("torch_compile")
    print(f"  falcon-11b (60 layers, training 24-48): torch_compile {c.s:.2f} s "
          f"[{c.interval.low:.2f}, {c.interval.high:.2f}] served by "
          f"{served.formula if served else 'the LOMO choice'} (issue 13: the layer formula, "
          "19.37 s, over-predicts by 2.5 s; issue 24's range rule serves what stays in range)")
    return 0  # met or not, the figures say (benchlib's protocol)


def _transfer(t: object, mean: float) -> float:
    return t.value * mean if t.kind == "ratio" else mean + t.value  # type: ignore[attr-defined]


def _swapped_errors(core: object, base: object, cal: object, full: object, kind: str,
                    held: list) -> list[float]:
    """Held-out total errors of ``cal`` with ``full``'s transfer in the buckets of ``kind``."""
    out = []
    for o in held:
        total = 0.0
        for b, terms in core.explain(base, o.features).items():  # type: ignore[attr-defined]
            mine = cal.calibration.stages[b]  # type: ignore[attr-defined]
            t = full.calibration.stages[b] if mine.kind == kind else mine  # type: ignore
            total += _transfer(t, sum(terms.values()))
        out.append(total - o.total_s)
    return out


def _own_total(core: object, base: object, cal: object, model: str, features: object) -> float:
    """The total one calibration model's own transfer predicts (its per-model values)."""
    total = 0.0
    for b, terms in core.explain(base, features).items():  # type: ignore[attr-defined]
        t = cal.calibration.stages[b]  # type: ignore[attr-defined]
        mean = sum(terms.values())
        v = t.per_model.get(model, t.value)
        total += v * mean if t.kind == "ratio" else mean + v
    return total


def _meets(errors: list[float]) -> bool:
    return (statistics.fmean(e * e for e in errors) <= MSE_TARGET
            and max(map(abs, errors)) <= MAX_TARGET)


if __name__ == "__main__":
    sys.exit(main())
