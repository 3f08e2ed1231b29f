"""The request rate one cold path ahead: Holt's level and trend, and the same time a season ago.

:class:`RateForecaster` is fed the rate seen at each tick and answers the rate expected
``horizon_s`` later, the larger of two forecasts:

* **Holt** (double exponential smoothing, level + trend). At a tick ``dt`` seconds after the
  previous one, with the smoothing constants ``alpha`` and ``beta`` defined per ``step_s``
  seconds (``a = 1 - (1 - alpha) ** (dt / step_s)``, likewise ``b``)::

      level' = a * rate + (1 - a) * (level + trend * dt)
      trend' = b * (level' - level) / dt + (1 - b) * trend        # requests/s per second
      holt   = max(0, level' + trend' * H)

  With ticks exactly ``step_s`` apart this is textbook Holt on per-tick rates (the simulator's
  ``Predictive`` policy before the advisor ran it at 2 s ticks with alpha 0.2 and beta 0.05);
  with other spacing the smoothing keeps the same memory in seconds, so an autoscaler may call
  it at any cadence. The defaults (alpha 0.033: a level with a 60 s memory; beta 0.002; phi
  0.98) were chosen on measured forecast error (docs/autoscale.md, ``benches/bench_forecast.py``).
  ``trend_damping`` (phi, per ``step_s``; 1 = no damping) damps the trend over the horizon
  (Gardner and McKenzie's damped trend): ``H`` above becomes ``step_s * phi (1 - phi**h) / (1
  - phi)`` with ``h = H / step_s`` steps. The first tick sets the level to the rate seen and
  the trend to 0.
* **Seasonal**: the mean rate over ``season_window_s`` centred one ``season_s`` (a day) before
  the forecast time ``now + H`` (yesterday's ramp at this hour), read from a ring buffer of the
  rate's running integral at ``step_s`` resolution (``(season_s + season_window_s) / step_s``
  numbers: 345 KB for a day at 2 s). It counts only once the history reaches back that far.

Standard library only; one ``update`` costs a few microseconds.
"""

from __future__ import annotations

import math
from array import array

from coldscope.util.errors import ColdscopeError

#: Seasonal history points kept at most (a day at 10 ms steps would be 8.6 million).
MAX_HISTORY_POINTS = 10_000_000


class RateForecaster:
    """See the module doc. Times are seconds on any clock that never goes back."""

    def __init__(self, horizon_s: float, *, alpha: float = 0.033, beta: float = 0.002,
                 step_s: float = 2.0, trend_damping: float = 0.98,
                 season_s: float | None = 86_400.0, season_window_s: float = 600.0) -> None:
        _check(horizon_s, "horizon_s", low=0.0)
        _check(alpha, "alpha", low=0.0, high=1.0, open_low=True)
        _check(beta, "beta", low=0.0, high=1.0, open_low=True)
        _check(step_s, "step_s", low=0.0, high=3600.0, open_low=True)
        _check(trend_damping, "trend_damping", low=0.0, high=1.0)
        _check(season_window_s, "season_window_s", low=0.0)
        if season_s is not None:
            _check(season_s, "season_s", low=0.0, open_low=True)
        self.horizon_s = float(horizon_s)
        self.alpha, self.beta, self.step_s = float(alpha), float(beta), float(step_s)
        self.trend_damping = float(trend_damping)
        self.season_s = None if season_s is None else float(season_s)
        self.season_window_s = float(season_window_s)
        phi, steps = self.trend_damping, self.horizon_s / self.step_s
        # seconds of trend the forecast adds: H undamped, step * sum_{i=1..h} phi^i damped
        self.trend_horizon_s = (self.horizon_s if phi >= 1.0 else
                                self.step_s * phi * (1 - phi ** steps) / (1 - phi))
        self.level_ = self.trend_ = 0.0
        self.last_time_: float | None = None
        self._dt = -1.0  # the spacing whose smoothing weights are cached
        self._a = self._b = 0.0
        self._ring: array[float] | None = None
        if self.season_s is not None:
            points = math.ceil((self.season_s + self.season_window_s) / self.step_s) + 3
            if points > MAX_HISTORY_POINTS:
                raise ColdscopeError(
                    f"season_s / step_s asks for {points:,} history points, above "
                    f"{MAX_HISTORY_POINTS:,}: use a longer step_s or a shorter season_s")
            self._ring = array("d", bytes(8 * points))
        self._origin = 0.0  # time of history point 0
        self._integral = 0.0  # requests since the origin (integral of the rate)
        self._next = 0  # index of the next history point to write
        self.seasonal_: float | None = None  # the seasonal forecast at the last update
        self.holt_ = 0.0  # the Holt forecast at the last update

    def update(self, now: float, rate_rps: float) -> float:
        """Take the rate seen over the interval ending ``now`` (requests/s); return the rate
        forecast for ``now + horizon_s``."""
        last = self.last_time_
        if last is None:
            self.level_, self.trend_ = rate_rps, 0.0
            self._origin = now
            if self._ring is not None:
                self._ring[0] = 0.0
                self._next = 1
        else:
            dt = now - last
            if dt > 0:
                if dt != self._dt:
                    f = dt / self.step_s
                    self._dt = dt
                    self._a = 1.0 - (1.0 - self.alpha) ** f
                    self._b = 1.0 - (1.0 - self.beta) ** f
                a, b = self._a, self._b
                level = self.level_
                new = a * rate_rps + (1.0 - a) * (level + self.trend_ * dt)
                self.trend_ = b * (new - level) / dt + (1.0 - b) * self.trend_
                self.level_ = new
                if self._ring is not None:
                    self._record(last, now, rate_rps)
                self._integral += rate_rps * dt
        self.last_time_ = now
        holt = self.level_ + self.trend_ * self.trend_horizon_s
        self.holt_ = holt if holt > 0.0 else 0.0
        self.seasonal_ = self._seasonal(now) if self._ring is not None else None
        if self.seasonal_ is not None and self.seasonal_ > self.holt_:
            return self.seasonal_
        return self.holt_

    def _record(self, last: float, now: float, rate: float) -> None:
        """History points in (last, now], the rate constant over the interval."""
        ring = self._ring
        assert ring is not None
        size, step, origin = len(ring), self.step_s, self._origin
        k = self._next
        end = math.floor((now - origin) / step)
        if end - k >= size:  # a gap longer than the history: keep its last stretch only
            k = end - size + 1
        base = self._integral
        while k <= end:
            ring[k % size] = base + rate * (origin + k * step - last)
            k += 1
        self._next = k

    def _seasonal(self, now: float) -> float | None:
        """Mean rate over the window centred one season before ``now + horizon_s``."""
        ring = self._ring
        assert ring is not None and self.season_s is not None
        size, step = len(ring), self.step_s
        newest = self._next - 1
        oldest = max(0, self._next - size)
        centre = (now + self.horizon_s - self.season_s - self._origin) / step
        if not oldest <= round(centre) <= newest:
            return None
        width = max(1, round(self.season_window_s / step))
        lo = round(centre - width / 2)
        hi = min(newest, lo + width)
        lo = max(oldest, lo)
        if hi <= lo:
            return None
        return (ring[hi % size] - ring[lo % size]) / ((hi - lo) * step)


def _check(value: float, name: str, *, low: float, high: float | None = None,
           open_low: bool = False) -> None:
    x = float(value)
    bad = not math.isfinite(x) or x < low or (open_low and x == low) or \
        (high is not None and x > high)
    if bad:
        bounds = f"{'>' if open_low else '>='} {low:g}" + (f" and <= {high:g}" if high else "")
        raise ColdscopeError(f"{name} must be a finite number {bounds}, not {value!r}")
