"""What ``coldscope fit`` reports (a ``FitSummary``) and what ``predict`` predicts (a
``Prediction``), as the fixed-width lines a person reads: columns of figures, kept whole
at any console width (``verbatim``)."""

from __future__ import annotations

from rich.console import Group

from coldscope.prediction.core import Prediction
from coldscope.prediction.modelfile import FitSummary, LomoModel
from coldscope.render import render, verbatim


@render.register
def render_fit(s: FitSummary) -> Group:
    """The formula per stage, the candidates, the correlations with each feature, the
    leave-one-model-out and extrapolation-fold checks, the loading rate, then the file
    written."""
    t = s.trained_on
    lines = [f"trained on {t.n_models} {'/'.join(t.kinds)} models from {t.source}"]
    if t.excluded:
        lines.append(f"excluded (other kinds): {', '.join(t.excluded)}")
    lines += ["", f"{'stage':<20} {'resid sd':>8} {'LOMO rmse':>9}  formula (seconds)"]
    for b, v in s.buckets.items():
        lines.append(f"{b:<20} {v.residual_sd:>8.3f} {v.lomo_rmse:>9.3f}  {v.formula}")
    lines += ["", "candidates (LOMO rmse / extrapolation-fold rmse, s; * comparable to the "
                  "choice: the range rule may serve it where the choice extrapolates):"]
    for b, v in s.buckets.items():
        if len(v.candidates) > 1:
            cands = ", ".join(
                f"{'+'.join(c.terms)}{'*' if c.comparable else ''}: {c.lomo_rmse:.3f}"
                + (f" / {c.extrap_rmse:.3f}" if c.extrap_rmse is not None else "")
                for c in v.candidates)
            lines.append(f"  {b:<20} {cands}")
    feats = list(next(iter(s.buckets.values())).pcc)
    lines += ["", "Pearson correlation of each stage with each feature:",
              f"  {'stage':<20} " + " ".join(f"{f[:11]:>11}" for f in feats)]
    for b, v in s.buckets.items():
        cells = " ".join(f"{'-' if (r := v.pcc[f]) is None else format(r, '.2f'):>11}"
                         for f in feats)
        lines.append(f"  {b:<20} {cells}")
    if s.lomo is not None:
        tot = s.lomo.total
        cover = f", {tot.coverage} inside their {s.interval.level:.0%} interval" \
            if tot.coverage is not None else ""
        lines += ["", f"leave-one-model-out total: MSE {tot.mse:.3f} s^2, RMSE "
                      f"{tot.rmse:.3f} s, max |error| {tot.max_abs:.3f} s{cover}"]
        lines += [_held_out_line(f"{m:<32}", v) for m, v in s.lomo.per_model.items()]
    if s.extrapolation is not None:
        tot = s.extrapolation.total
        cover = f", {tot.coverage} inside their interval" if tot.coverage is not None else ""
        lines += ["", f"extrapolation folds (deepest, largest, smallest held out, fit redone): "
                      f"MSE {tot.mse:.3f} s^2, max |error| {tot.max_abs:.3f} s{cover}"]
        lines += [_held_out_line(f"{'/'.join(v.extremes):<17} {m:<28}", v)
                  for m, v in s.extrapolation.per_model.items()]
    rate = s.loading_rate
    if rate is not None:
        verdict = ("constant: beyond the weight range, loading follows it and its interval "
                   "widens by the rate's uncertainty" if rate.constant else
                   "not constant: beyond the weight range, loading's interval widens by its "
                   "whole contribution there")
        lines += ["", f"loading rate: {rate.lower_rate:.4g} s/GB (smaller half, "
                      f"se {rate.lower_se:.2g}) vs {rate.upper_rate:.4g} s/GB (larger "
                      f"half, se {rate.upper_se:.2g}): {verdict}"]
    lines += ["", f"intervals: {s.interval.description}"]
    lines += [f"note: {n}" for n in s.notes]
    lines.append(f"wrote {s.out}")
    return verbatim("\n".join(lines))


def _held_out_line(label: str, v: LomoModel) -> str:
    """One held-out model of a validation (leave-one-model-out or an extrapolation fold):
    actual, predicted, error and the 90 % interval when there is one."""
    interval = v.interval
    span = f"  [{interval.low:.2f}, {interval.high:.2f}]" if interval is not None else ""
    return (f"  {label} actual {v.actual_s:7.2f}  predicted {v.predicted_s:7.2f}  "
            f"error {v.error_s:+6.2f}{span}")


@render.register
def render_prediction(p: Prediction) -> Group:
    """Seconds and interval per stage and in total, then the calibration, the formulas the
    range rule switched to, and the warnings."""
    lines = [f"{'stage':<20} {'seconds':>8}  {p.level:.0%} interval"]
    lines += [f"{b:<20} {sp.s:>8.2f}  [{sp.interval.low:.2f}, {sp.interval.high:.2f}]"
              for b, sp in p.stages.items()]
    lines.append(f"{'total':<20} {p.total_s:>8.2f}  [{p.interval.low:.2f}, "
                 f"{p.interval.high:.2f}]")
    if p.calibrated_on:
        lines.append(f"calibrated on: {', '.join(p.calibrated_on)}")
    lines += [f"served: {f.formula}" for f in (p.formulas or {}).values()
              if f.candidate is not None]
    lines += [f"warning: {w}" for w in p.warnings]
    return verbatim("\n".join(lines))
