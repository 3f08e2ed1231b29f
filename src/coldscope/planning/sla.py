"""Does a stack meet a P99 time-to-first-token SLA under a day of traffic, and at what cost?

A first-order, hour-by-hour model (no simulation), stated so it can be checked by hand:

* Each hour has a mean rate ``r`` (req/s); one replica serves ``replica_rps`` (times the stack's
  throughput factor), so the hour needs ``n = ceil(r / replica_rps)`` replicas.
* With no warm pool (``min_workers`` 0) the last replica scales to zero after ``keep_alive_s``
  of idleness: a request whose preceding gap was longer meets a cold start, and so does every
  request arriving while it runs (``1 + r D`` requests per cold start of D seconds; see
  ``economics.ScaleToZero`` for the renewal cycle).
* When an hour needs more replicas than the previous hour had (or the pool holds), the load
  above the warm capacity waits for new replicas: ``(r - warm capacity) x D`` requests.
* A delayed request waits the whole cold path D (conservative) plus the warm TTFT. P99 meets
  the SLA when the cold path itself does, or when at most 1 % of the day's requests are delayed
  and the warm TTFT does.

The cold path D is judged at the budget's high estimate (``meets``) and reported at the low.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from coldscope.planning.budget import Conditions, ModelSize, gpus_per_replica
from coldscope.planning.economics import ScaleToZero, WarmPoolCost
from coldscope.planning.infra import Profile, Traffic, _Strict, deep_merge, parse_duration, validate
from coldscope.planning.mitigations import LAYER_NAMES, Stack, apply_layers
from coldscope.util.errors import ColdscopeError

#: The share of requests P99 lets through slow.
P99_SHARE = 0.01
#: Warm-pool sizes the SLA search tries at most (each is evaluated with every layer combination).
MAX_SEARCH_REPLICAS = 10_000


@dataclass(frozen=True)
class Day:
    """Requests delayed by cold starts over one day, and the replica-hours it takes."""

    requests: float
    delayed_from_zero: float
    delayed_scale_out: float
    replica_hours: float
    peak_replicas: int

    @property
    def delayed_share(self) -> float:
        if self.requests <= 0:
            return 0.0
        return min(1.0, (self.delayed_from_zero + self.delayed_scale_out) / self.requests)


def simulate_day(traffic: Traffic, min_workers: int, cold_s: float, keep_alive_s: float,
                 throughput_factor: float = 1.0) -> Day:
    """Apply the hour-by-hour model above to one day of ``traffic``."""
    rates = traffic.hourly_rates()
    mu = traffic.replica_rps * throughput_factor
    needed = [math.ceil(r / mu - 1e-9) if r > 0 else 0 for r in rates]
    n_min = min_workers
    requests = zero = scale_out = replica_hours = 0.0
    for h, r in enumerate(rates):
        hour_requests = r * 3600.0
        requests += hour_requests
        up = float(max(n_min, needed[h]))
        from_zero = 0.0
        if n_min == 0 and r > 0:
            stz = ScaleToZero(r, cold_s, keep_alive_s, traffic.burstiness)
            from_zero = stz.delayed_share * hour_requests
            # The last replica is down for part of the hour (and paid while it starts).
            up += stz.up_share - 1.0
        base = max(n_min, needed[h - 1], 1 if n_min == 0 else 0)
        out = max(0.0, r - base * mu) * cold_s
        zero += min(hour_requests, from_zero)
        scale_out += min(hour_requests - min(hour_requests, from_zero), out)
        replica_hours += max(up, 0.0)
    return Day(requests, zero, scale_out, replica_hours, max(needed) if needed else 0)


@dataclass(frozen=True)
class Evaluation:
    """One stack (layers + warm pool) judged against an SLA, with its monthly cost."""

    layers: tuple[str, ...]
    min_workers: int
    cold_low: float
    cold_high: float
    warm_ttft_high: float
    delayed_share: float
    delayed_share_low: float
    from_zero_share: float
    scale_out_share: float
    p99_ttft_s: float
    sla_s: float | None
    meets: bool | None
    reason: str
    warm_pool: WarmPoolCost
    on_demand_gpu_hours: float
    layers_cost: float
    throughput_factor: float = 1.0
    applied: tuple[Any, ...] = field(default=(), repr=False)

    @property
    def on_demand_cost(self) -> float:
        return self.on_demand_gpu_hours * self.warm_pool.price_per_gpu_hour

    @property
    def total_cost(self) -> float:
        return self.warm_pool.monthly_cost + self.on_demand_cost + self.layers_cost

    def name(self) -> str:
        parts = list(self.layers) + ([f"warm_pool({self.min_workers})"] if self.min_workers
                                     else [])
        return " + ".join(parts) or "no mitigation"

    def monthly_cost(self, currency: str) -> dict[str, Any]:
        wp = self.warm_pool
        return {
            "currency": currency,
            "gpus_per_replica": wp.gpus_per_replica,
            "price_per_gpu_hour": wp.price_per_gpu_hour,
            "warm_pool_gpu_hours": wp.gpu_hours,
            "warm_pool": wp.monthly_cost,
            "warm_pool_arithmetic": wp.arithmetic(currency),
            "on_demand_gpu_hours": self.on_demand_gpu_hours,
            "on_demand": self.on_demand_cost,
            "mitigations": self.layers_cost,
            "total": self.total_cost,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.name(), "layers": list(self.layers), "min_workers": self.min_workers,
            "cold_path_s": {"low": self.cold_low, "high": self.cold_high},
            "delayed_share": self.delayed_share, "delayed_share_at_low": self.delayed_share_low,
            "from_zero_share": self.from_zero_share, "scale_out_share": self.scale_out_share,
            "p99_ttft_s": self.p99_ttft_s, "sla_s": self.sla_s, "meets": self.meets,
            "reason": self.reason, "monthly_cost": self.total_cost,
        }


def evaluate(size: ModelSize, profile: Profile, stack: Stack, min_workers: int,
             sla_s: float | None, traffic: Traffic | None = None) -> Evaluation:
    """Judge ``stack`` with ``min_workers`` warm replicas against ``sla_s`` (None: no SLA)."""
    traffic = traffic or profile.traffic
    keep_alive = profile.economics.keep_alive_s
    cold_low, cold_high = stack.budget.low, stack.budget.high
    warm = profile.warm_ttft_s.high
    day = simulate_day(traffic, min_workers, cold_high, keep_alive, stack.throughput_factor)
    day_low = simulate_day(traffic, min_workers, cold_low, keep_alive, stack.throughput_factor)
    share = day.delayed_share
    cold_ttft = cold_high + warm
    p99 = cold_ttft if share > P99_SHARE else warm
    gpus = gpus_per_replica(size, profile)
    spec = profile.gpu_spec()
    days = profile.month_hours / 24.0
    pool = WarmPoolCost(1, min_workers, gpus, profile.month_hours, spec.price_per_hour)
    on_demand = max(0.0, day.replica_hours - 24.0 * min_workers) * days * gpus
    requests = max(day.requests, 1e-12)
    meets: bool | None
    if sla_s is None:
        meets, reason = None, "no SLA given"
    elif warm > sla_s:
        meets, reason = False, f"warm TTFT alone is up to {warm:g} s > SLA {sla_s:g} s"
    elif cold_ttft <= sla_s:
        meets, reason = True, (f"even a cold request is served in {cold_ttft:.2f} s "
                               f"<= {sla_s:g} s")
    elif share <= P99_SHARE:
        meets, reason = True, (f"{100 * share:.2f} % of requests meet a cold start "
                               f"(<= 1 %), so P99 is the warm TTFT {warm:g} s")
    else:
        meets, reason = False, (
            f"cold path {cold_low:.1f}-{cold_high:.1f} s + TTFT {warm:g} s > {sla_s:g} s and "
            f"{100 * share:.2f} % of requests take it (P99 allows 1 %): "
            f"{100 * day.delayed_from_zero / requests:.2f} % after scale-to-zero "
            f"(keep-alive {keep_alive:g} s), {100 * day.delayed_scale_out / requests:.2f} % "
            "waiting for scale-out")
    return Evaluation(
        layers=tuple(a.name for a in stack.applied), min_workers=min_workers,
        cold_low=cold_low, cold_high=cold_high, warm_ttft_high=warm,
        delayed_share=share, delayed_share_low=day_low.delayed_share,
        from_zero_share=day.delayed_from_zero / requests,
        scale_out_share=day.delayed_scale_out / requests,
        p99_ttft_s=p99, sla_s=sla_s, meets=meets, reason=reason, warm_pool=pool,
        on_demand_gpu_hours=on_demand, layers_cost=stack.monthly_cost,
        throughput_factor=stack.throughput_factor, applied=stack.applied,
    )


#: Layers the search combines. Live migration only adds time in this model (its benefit, a
#: local GPU for tiered loading, is already assumed there), so the search leaves it out. The
#: standby launcher is left out of the default pool so that the answers planned before it
#: existed stay the same: name it (``--mitigate``, or ``plan --standby-from``) to search it.
SEARCHED_LAYERS: tuple[str, ...] = tuple(
    n for n in LAYER_NAMES if n not in ("live_migration", "standby_launcher"))


@dataclass(frozen=True)
class SlaSearch:
    """The cheapest stack that meets the SLA, and the cheaper ones that do not (and why)."""

    sla_s: float
    chosen: Evaluation | None
    cheaper_failures: tuple[Evaluation, ...]
    candidates: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "sla_p99_ttft_s": self.sla_s,
            "chosen": None if self.chosen is None else self.chosen.as_dict(),
            "cheaper_failures": [e.as_dict() for e in self.cheaper_failures],
            "candidates": self.candidates,
        }


def search(size: ModelSize, profile: Profile, baseline: Conditions, sla_s: float,
           traffic: Traffic | None = None, layers: Sequence[str] | None = None,
           max_min_workers: int | None = None) -> SlaSearch:
    """Try every combination of ``layers`` (default: all searched ones) with warm pools from 0
    to the day's peak replicas; return the cheapest that meets ``sla_s``.

    A combination where some layer removes nothing is skipped (a cheaper twin exists). Ties on
    cost go to fewer layers, then the shorter cold path.
    """
    traffic = traffic or profile.traffic
    pool = tuple(SEARCHED_LAYERS if layers is None else layers)
    evaluations: list[Evaluation] = []
    for k in range(len(pool) + 1):
        for combo in itertools.combinations(pool, k):
            stack = apply_layers(size, profile, baseline, combo)
            if any(a.removes_high <= 1e-9 and a.removes_low <= 1e-9 for a in stack.applied):
                continue
            peak = simulate_day(traffic, 0, 0.0, 0.0, stack.throughput_factor).peak_replicas
            top = max(1, peak) if max_min_workers is None else max_min_workers
            if top > MAX_SEARCH_REPLICAS:
                raise ColdscopeError(
                    f"the traffic needs {top:,} replicas at its peak, above the search limit "
                    f"of {MAX_SEARCH_REPLICAS:,} warm-pool sizes; check mean_rps and replica_rps")
            for n in range(top + 1):
                evaluations.append(evaluate(size, profile, stack, n, sla_s, traffic))
    evaluations.sort(key=lambda e: (round(e.total_cost, 6), len(e.layers), e.cold_high))
    chosen = next((e for e in evaluations if e.meets), None)
    limit = chosen.total_cost if chosen is not None else math.inf
    failures = [e for e in evaluations if not e.meets and e.total_cost < limit - 1e-9]
    return SlaSearch(sla_s, chosen, tuple(_frontier(failures)), len(evaluations))


def _frontier(failures: list[Evaluation]) -> list[Evaluation]:
    """Failing stacks not beaten by a cheaper (or equal) one on cold path and delayed share."""
    kept: list[Evaluation] = []
    for e in sorted(failures, key=lambda e: (e.total_cost, len(e.layers), e.cold_high)):
        if any(k.cold_high <= e.cold_high and k.delayed_share <= e.delayed_share for k in kept):
            continue
        kept.append(e)
    return kept


# --- tiered policies ---


class Tier(_Strict):
    """One class of users: its SLA, how many products, their traffic, and any fixed choices."""

    name: str
    sla_p99_ttft: float | None = None
    products: int = Field(default=1, ge=1)
    traffic: dict[str, Any] = Field(default_factory=dict)
    min_workers: int | None = Field(default=None, ge=0)
    mitigations: list[str] | None = None

    @field_validator("sla_p99_ttft", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if value is None or isinstance(value, int | float):
            return value
        return parse_duration(value)


class Tiers(_Strict):
    """A tiers file: the tiers, and optionally the model they serve (else from the CLI)."""

    tiers: list[Tier] = Field(min_length=1)
    model: str | None = None
    params: float | str | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class TierPlan:
    tier: Tier
    evaluation: Evaluation
    search: SlaSearch | None
    currency: str

    @property
    def warm_pool(self) -> WarmPoolCost:
        wp = self.evaluation.warm_pool
        return WarmPoolCost(self.tier.products, wp.min_workers, wp.gpus_per_replica, wp.month_hours,
                        wp.price_per_gpu_hour)

    @property
    def monthly_cost(self) -> float:
        return self.evaluation.total_cost * self.tier.products

    def as_dict(self) -> dict[str, Any]:
        e = self.evaluation
        return {
            "name": self.tier.name, "sla_p99_ttft_s": self.tier.sla_p99_ttft,
            "products": self.tier.products, "min_workers": e.min_workers,
            "stack": e.name(), "meets_sla": e.meets, "reason": e.reason,
            "warm_pool_arithmetic": self.warm_pool.arithmetic(self.currency),
            "warm_pool_gpu_hours": self.warm_pool.gpu_hours,
            "on_demand_gpu_hours": e.on_demand_gpu_hours * self.tier.products,
            "monthly_cost_per_product": e.total_cost,
            "monthly_cost": self.monthly_cost,
            "cheaper_failures": [] if self.search is None else
            [f.as_dict() for f in self.search.cheaper_failures],
        }


def load_tiers(data: dict[str, Any], where: str) -> Tiers:
    return validate(Tiers, data, where)


def plan_tiers(size: ModelSize, profile: Profile, baseline: Conditions,
               tiers: Tiers) -> list[TierPlan]:
    """A warm-pool policy per tier: fixed choices are costed, the rest are searched."""
    plans = []
    for tier in tiers.tiers:
        traffic = validate(Traffic, deep_merge(profile.traffic.model_dump(), tier.traffic),
                           f"tier {tier.name}: traffic")
        fixed_layers = tier.mitigations
        if fixed_layers is not None:
            unknown = [m for m in fixed_layers if m not in LAYER_NAMES]
            if unknown:
                raise ColdscopeError(f"tier {tier.name}: unknown mitigation {unknown[0]!r}")
        found = None
        if tier.sla_p99_ttft is None or tier.min_workers is not None:
            stack = apply_layers(size, profile, baseline, fixed_layers or ())
            ev = evaluate(size, profile, stack, tier.min_workers or 0, tier.sla_p99_ttft,
                          traffic)
        else:
            found = search(size, profile, baseline, tier.sla_p99_ttft, traffic, fixed_layers)
            if found.chosen is None:
                raise ColdscopeError(
                    f"tier {tier.name}: no stack meets P99 TTFT {tier.sla_p99_ttft:g} s")
            ev = found.chosen
        plans.append(TierPlan(tier, ev, found, profile.currency))
    return plans
