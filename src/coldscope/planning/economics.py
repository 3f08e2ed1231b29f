"""What keeping replicas warm costs, and when it pays for itself.

Money is per month of ``month_hours`` (the lesson's 24 x 30 = 720 h). Gaps between requests
follow a two-phase hyperexponential with balanced means (Whitt's standard fit to a mean and a
squared coefficient of variation ``scv``; scv = 1 is Poisson), so that bursty traffic, whose
long idle gaps let a replica scale to zero more often, is priced honestly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def gpu_hours_per_month(replicas: float, gpus_per_replica: int, month_hours: float) -> float:
    """GPU-hours a month of ``replicas`` kept up all the time (5 x 1 x 720 = 3,600)."""
    return replicas * gpus_per_replica * month_hours


@dataclass(frozen=True)
class WarmPoolCost:
    """``min_workers`` replicas per product kept up 24 x 7, with the arithmetic shown."""

    products: int
    min_workers: int
    gpus_per_replica: int
    month_hours: float
    price_per_gpu_hour: float

    @property
    def gpu_hours(self) -> float:
        return gpu_hours_per_month(self.products * self.min_workers, self.gpus_per_replica,
                                   self.month_hours)

    @property
    def monthly_cost(self) -> float:
        return self.gpu_hours * self.price_per_gpu_hour

    def arithmetic(self, currency: str = "USD") -> str:
        return (f"{self.products} product(s) x {self.min_workers} warm replica(s) x "
                f"{self.gpus_per_replica} GPU(s) x {self.month_hours:g} h = "
                f"{self.gpu_hours:,.0f} GPU-h x {self.price_per_gpu_hour:.2f} {currency}/h = "
                f"{self.monthly_cost:,.0f} {currency}/month")

    def as_dict(self) -> dict[str, Any]:
        return {"products": self.products, "min_workers": self.min_workers,
                "gpus_per_replica": self.gpus_per_replica, "month_hours": self.month_hours,
                "price_per_gpu_hour": self.price_per_gpu_hour, "gpu_hours": self.gpu_hours,
                "monthly_cost": self.monthly_cost}


# --- gaps between requests ---


def _phases(rate: float, scv: float) -> list[tuple[float, float]]:
    """(probability, rate) of each exponential phase of the gap distribution."""
    if scv <= 1.0 + 1e-12:
        return [(1.0, rate)]
    p = 0.5 * (1.0 + math.sqrt((scv - 1.0) / (scv + 1.0)))
    return [(p, 2.0 * p * rate), (1.0 - p, 2.0 * (1.0 - p) * rate)]


def gap_exceeds(rate: float, scv: float, t: float) -> float:
    """Probability that a gap between requests is longer than ``t`` seconds."""
    if rate <= 0:
        return 1.0
    return sum(p * math.exp(-r * t) for p, r in _phases(rate, scv))


def idle_fraction(rate: float, scv: float, t: float) -> float:
    """Share of time a single replica spends scaled to zero after ``t`` s of keep-alive.

    rate x E[(gap - t)+]: each gap longer than the keep-alive leaves the replica down for the
    rest of it.
    """
    if rate <= 0:
        return 1.0
    return rate * sum(p * math.exp(-r * t) / r for p, r in _phases(rate, scv))


# --- break-even ---


@dataclass(frozen=True)
class BreakEven:
    """Request rate above which one warm replica costs less than the SLO misses it prevents."""

    rate_rps: float | None
    replica_price_per_hour: float
    cold_start_s: float
    slo_miss_cost: float
    keep_alive_s: float
    scv: float

    def as_dict(self) -> dict[str, Any]:
        return {"rate_rps": self.rate_rps,
                "requests_per_hour": None if self.rate_rps is None else self.rate_rps * 3600,
                "replica_price_per_hour": self.replica_price_per_hour,
                "cold_start_s": self.cold_start_s, "slo_miss_cost": self.slo_miss_cost,
                "keep_alive_s": self.keep_alive_s, "burstiness": self.scv}


@dataclass(frozen=True)
class ScaleToZero:
    """One replica that scales to zero after ``keep_alive_s`` idle and cold-starts in D s.

    A renewal cycle: a request finds no replica and triggers a cold start (D s, GPU paid, the
    requests arriving meanwhile wait too); the replica then serves until a gap longer than the
    keep-alive, idles through the keep-alive and goes down until the next request. With q the
    chance a gap exceeds the keep-alive, a cycle lasts D + 1/(rate q) s on average and holds
    rate D + 1/q requests, 1 + rate D of them delayed.
    """

    rate: float
    cold_s: float
    keep_alive_s: float
    scv: float = 1.0

    @property
    def _q(self) -> float:
        return gap_exceeds(self.rate, self.scv, self.keep_alive_s)

    @property
    def cold_starts_per_s(self) -> float:
        q = self._q
        return self.rate * q / (1.0 + self.rate * q * self.cold_s)

    @property
    def delayed_share(self) -> float:
        """Share of requests that wait for a cold start."""
        if self.rate <= 0:
            return 0.0
        q = self._q
        return min(1.0, (1.0 + self.rate * self.cold_s) * q / (1.0 + self.rate * q * self.cold_s))

    @property
    def up_share(self) -> float:
        """Share of time the replica is up (paid), cold starts included."""
        if self.rate <= 0:
            return 0.0
        q = self._q
        idle = idle_fraction(self.rate, self.scv, self.keep_alive_s)
        return max(0.0, 1.0 - idle / (1.0 + self.rate * q * self.cold_s))


def scale_to_zero_balance(rate: float, price_per_s: float, cold_s: float, miss_cost: float,
                          keep_alive_s: float, scv: float) -> float:
    """Money per second a warm replica saves over scaling to zero (negative: it costs more).

    Scaling to zero saves the GPU while it is down and loses ``miss_cost`` for each delayed
    request (the cold start is assumed longer than the SLA).
    """
    stz = ScaleToZero(rate, cold_s, keep_alive_s, scv)
    missed = stz.cold_starts_per_s * (1.0 + rate * cold_s) * miss_cost
    saved = price_per_s * (1.0 - stz.up_share)
    return missed - saved


def break_even_rate(replica_price_per_hour: float, cold_start_s: float, slo_miss_cost: float,
                    keep_alive_s: float, scv: float = 1.0) -> BreakEven:
    """The lowest request rate (req/s) at which a warm replica beats scale-to-zero.

    For Poisson traffic (scv 1) the keep-alive cancels and the answer solves
    c D r^2 + c r - p = 0 (p: price per second, D: cold start, c: cost of a miss);
    otherwise it is found on a log grid and refined by bisection. None when no miss costs
    anything or no rate up to 1,000 req/s makes the warm replica pay.
    """
    p = replica_price_per_hour / 3600.0
    c, d = slo_miss_cost, cold_start_s
    result = None
    if c > 0:
        def f(r: float) -> float:
            return scale_to_zero_balance(r, p, d, c, keep_alive_s, scv)

        grid = [10 ** (k / 20.0) for k in range(-180, 61)]  # 1e-9 .. 1e3 req/s
        prev = grid[0]
        for r in grid[1:]:
            if f(prev) < 0 < f(r):
                lo, hi = prev, r
                for _ in range(100):
                    mid = math.sqrt(lo * hi)
                    lo, hi = (lo, mid) if f(mid) > 0 else (mid, hi)
                result = math.sqrt(lo * hi)
                break
            prev = r
    return BreakEven(result, replica_price_per_hour, cold_start_s, slo_miss_cost, keep_alive_s,
                     scv)
