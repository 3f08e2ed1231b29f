"""One call from a plan request to a plan report (plain data, versioned).

The CLI builds a ``PlanRequest``, calls ``make_plan`` and renders the returned dict; the JSON
output is that dict. The report's keys ``total_s``, ``parts``, ``mitigations``,
``monthly_cost`` and ``meets_sla`` are the contract other tools read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coldscope.plan.budget import (
    EngineCheck,
    EngineEstimate,
    ModelSize,
    baseline_conditions,
    gpus_per_replica,
)
from coldscope.plan.economics import break_even_rate
from coldscope.plan.mitigations import apply_layers
from coldscope.plan.profile import Profile, Traffic
from coldscope.plan.sla import Tiers, evaluate, plan_tiers, search

REPORT_VERSION = 1


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the model, where the engine figure comes from, and the stack or SLA."""

    size: ModelSize
    profile: Profile
    engine: EngineEstimate
    layers: tuple[str, ...] = ()
    min_workers: int = 0
    products: int = 1
    sla_s: float | None = None
    cheapest: bool = False
    traffic: Traffic | None = None
    tiers: Tiers | None = None
    engine_check: EngineCheck | None = None
    notes: tuple[str, ...] = field(default=())


def make_plan(req: PlanRequest) -> dict[str, Any]:
    """Budget, mitigation layers, cost, SLA verdict (and search, tiers) as one report."""
    profile = req.profile
    traffic = req.traffic or profile.traffic
    base = baseline_conditions(profile, req.engine)
    found = None
    layers, min_workers = req.layers, req.min_workers
    if req.sla_s is not None and req.cheapest:
        # With layers given, the search is limited to combinations of them.
        found = search(req.size, profile, base, req.sla_s, traffic, req.layers or None)
        if found.chosen is not None:
            layers, min_workers = found.chosen.layers, found.chosen.min_workers
    stack = apply_layers(req.size, profile, base, layers)
    ev = evaluate(req.size, profile, stack, min_workers, req.sla_s, traffic)

    mitigations = [a.as_dict() for a in stack.applied]
    if min_workers:
        mitigations.append({
            "name": "warm_pool", "min_workers": min_workers,
            "summary": f"keep {min_workers} replica(s) up 24x7 (min_workers)",
            "removes_s": {"low": stack.budget.low, "high": stack.budget.high},
            "monthly_cost": ev.warm_pool.monthly_cost * req.products,
            "assumptions": [
                f"requests served by the first {min_workers} replica(s) see no cold start; "
                "scale-out beyond them still takes the cold path",
                ev.warm_pool.arithmetic(profile.currency),
            ],
        })

    gpus = gpus_per_replica(req.size, profile)
    spec = profile.gpu_spec()
    cost = ev.monthly_cost(profile.currency)
    cost["products"] = req.products
    if req.products != 1:
        for key in ("warm_pool_gpu_hours", "warm_pool", "on_demand_gpu_hours", "on_demand",
                    "mitigations", "total"):
            cost[key] *= req.products
        wp = ev.warm_pool
        cost["warm_pool_arithmetic"] = type(wp)(
            req.products, wp.min_workers, wp.gpus_per_replica, wp.month_hours,
            wp.price_per_gpu_hour).arithmetic(profile.currency)

    be = break_even_rate(spec.price_per_hour * gpus, stack.budget.high,
                         profile.economics.slo_miss_cost, profile.economics.keep_alive_s,
                         traffic.burstiness)
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "model": {"name": req.size.name, "params": req.size.params,
                  "weight_bytes": req.size.weight_bytes, "dtype": req.size.dtype,
                  "source": req.size.source},
        "gpu": {"type": profile.gpu, "gpus_per_replica": gpus,
                "price_per_gpu_hour": spec.price_per_hour, "source": spec.source},
        "total_s": {"low": stack.budget.low, "high": stack.budget.high},
        "parts": [p.as_dict() for p in stack.budget.parts],
        "dominant": stack.budget.dominant(),
        "baseline": {"total_s": {"low": stack.baseline.low, "high": stack.baseline.high},
                     "parts": [p.as_dict() for p in stack.baseline.parts],
                     "dominant": stack.baseline.dominant()},
        "stack": ev.name(),
        "mitigations": mitigations,
        "monthly_cost": cost,
        "meets_sla": ev.meets,
        "sla": None if req.sla_s is None else ev.as_dict(),
        "search": None if found is None else found.as_dict(),
        "break_even": be.as_dict(),
        "traffic": {**traffic.model_dump(), "hourly_rates_rps": traffic.hourly_rates(),
                    "keep_alive_s": profile.economics.keep_alive_s},
        "engine_check": None if req.engine_check is None else req.engine_check.as_dict(),
        "tiers": None,
        "notes": list(req.notes),
    }
    if req.tiers is not None:
        plans = plan_tiers(req.size, profile, base, req.tiers)
        report["tiers"] = [t.as_dict() for t in plans]
        report["tiers_total_monthly_cost"] = sum(t.monthly_cost for t in plans)
    return report
