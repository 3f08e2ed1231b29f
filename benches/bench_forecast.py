"""Forecast error of ``ScaleAdvisor``: the rate one cold path ahead vs "the rate now".

Run: ``.venv/bin/python benches/bench_forecast.py [--horizons 60,90,300] [--tick 2]``

On each Azure LLM inference trace in ../shared/data/traces (read by
``coldscope.planning.traces``), ticks every ``--tick`` seconds feed the advisor the rate seen
over the tick (arrivals / tick), as the simulator's predictive policy does. For a cold path of
``H`` seconds (60 s, 300 s, and 90 s: the tiny model's measured cold start on this machine,
69-111 s cold in the README) two forecasts of the rate at ``t + H`` are scored against the truth:

* **advisor**: the ``forecast_rps`` of a ``ScaleAdvisor`` with its default forecast (Holt level
  + trend, smoothing per 2 s; the seasonal term needs a day of history, which a one-hour trace
  does not have) and a cold path of exactly ``H``;
* **rate now**: the mean rate of the last 60 s (what a reactive autoscaler's stable window sees),
  taken as the rate at ``t + H``.

A third, synthetic trace shows the seasonal term at work: two days at 5 requests/s with the
diurnal curve and bursts of ``coldscope traces synth`` (seed 1); on its second day the advisor
also looks one day back (``--no-synthetic`` leaves it out).

The truth is the mean rate over the 60 s centred on ``t + H``. Scored ticks: from 60 s in to the
last tick whose truth window ends inside the trace. Figures per trace and horizon: mean
absolute error (requests/s) and the share of ticks where the forecast is below the truth by
more than 20 % (capacity asked for one cold path ahead would be short: under-provisioning). The
targets ask the advisor to do no worse than the rate now.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import could_not_run, figure  # noqa: E402

from coldscope.planning.traces import read_trace, synthesize  # noqa: E402
from coldscope.scaling import ScaleAdvisor, StartupDistribution  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
WINDOW_S = 60.0  # the truth's and the rate-now's averaging window
UNDER = 0.8  # a forecast below 80 % of the truth is an under-provisioned tick


def window_rate(arrival: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Arrivals in [lo, hi) per second, for each pair."""
    count = np.searchsorted(arrival, hi, "left") - np.searchsorted(arrival, lo, "left")
    return count / (hi - lo)


def score(forecast: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    mae = float(np.mean(np.abs(forecast - truth)))
    busy = truth > 0
    under = float(np.mean(forecast[busy] < UNDER * truth[busy])) if busy.any() else 0.0
    return mae, under


def advisor_forecasts(rates: np.ndarray, times: np.ndarray, horizon: float, tick: float,
                      **params: float) -> np.ndarray:
    advisor = ScaleAdvisor(
        target_in_flight=1.0, service_time_s=1.0, step_s=tick,
        startup=StartupDistribution.given(lambda q: horizon, f"a {horizon:g} s cold path"),
        **params)  # type: ignore[arg-type]
    out = np.empty(rates.size)
    for i, (t, r) in enumerate(zip(times.tolist(), rates.tolist(), strict=True)):
        out[i] = advisor.tick(t, rate_rps=r, running=0, starting=0).forecast_rps
    return out


def evaluate(arrival: np.ndarray, horizon: float, tick: float,
             **params: float) -> dict[str, tuple[float, float]]:
    end = float(arrival[-1])
    edges = np.arange(0.0, end + tick, tick)
    counts = np.histogram(arrival, edges)[0]
    times = edges[1:]  # tick k sees the arrivals of (t - tick, t]
    rates = counts / tick
    forecast = advisor_forecasts(rates, times, horizon, tick, **params)
    scored = (times >= WINDOW_S) & (times + horizon + WINDOW_S / 2 <= end)
    t = times[scored]
    truth = window_rate(arrival, t + horizon - WINDOW_S / 2, t + horizon + WINDOW_S / 2)
    now = window_rate(arrival, t - WINDOW_S, t)
    return {"advisor": score(forecast[scored], truth), "rate now": score(now, truth),
            "ticks": (float(scored.sum()), float(truth.mean()))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizons", default="60,90,300")
    ap.add_argument("--tick", type=float, default=2.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an advisor forecast parameter (alpha, beta, trend_damping, ...)")
    ap.add_argument("--no-synthetic", action="store_true")
    args = ap.parse_args()
    params = {k: float(v) for k, _, v in (s.partition("=") for s in args.set)}
    files = sorted(TRACES.glob("Azure*.csv"))
    if not files:
        could_not_run("forecast error", f"no Azure traces in {TRACES}")
    traces = [(p.stem.removeprefix("AzureLLMInferenceTrace_"), read_trace(p).arrival)
              for p in files]
    if not args.no_synthetic:
        traces.append(("synthetic 2-day",
                       synthesize(2.0, 5.0, diurnal=True, bursts=True, seed=1).arrival))
    for name, arrival in traces:
        for horizon in (float(h) for h in args.horizons.split(",")):
            res = evaluate(arrival, horizon, args.tick, **params)
            (a_mae, a_under), (n_mae, n_under) = res["advisor"], res["rate now"]
            ticks, mean = res["ticks"]
            print(f"{name:5} H={horizon:>5g} s  {int(ticks)} ticks, mean rate {mean:.2f}/s  "
                  f"advisor MAE {a_mae:.3f} under {a_under:.1%}  |  rate now MAE {n_mae:.3f} "
                  f"under {n_under:.1%}", flush=True)
            figure(f"{name} trace, {horizon:g} s ahead: mean absolute error (req/s), "
                   f"advisor vs rate now", f"{a_mae:.3f} vs {n_mae:.3f}",
                   target="advisor <= rate now", met=a_mae <= n_mae)
            figure(f"{name} trace, {horizon:g} s ahead: ticks under-forecast by > 20 %, "
                   f"advisor vs rate now", f"{a_under:.1%} vs {n_under:.1%}",
                   target="advisor <= rate now", met=a_under <= n_under)


if __name__ == "__main__":
    main()
