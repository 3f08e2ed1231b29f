"""A ``PlanReport`` (``coldscope plan``) as rich tables: the record's fields in, tables out."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coldscope.planning.result import PlanReport
from coldscope.render import render


def _s(low: float, high: float) -> str:
    if abs(high - low) < 0.05:
        return f"{high:.1f} s"
    return f"{low:.1f}-{high:.1f} s"


def _money(value: float, currency: str) -> str:
    return f"{value:,.0f} {currency}"


@render.register
def render_plan(plan: PlanReport) -> Group:
    """The budget (baseline vs stack), the layers, cost, SLA verdict, search and tiers."""
    cur = plan.monthly_cost.currency
    model, gpu = plan.model, plan.gpu
    label = model.name or f"{model.params / 1e9:g}B"
    title = (f"Cold start of {label} "
             f"({model.weight_bytes / 1e9:.0f} GB {model.dtype}) on "
             f"{gpu.gpus_per_replica} x {gpu.type}: {plan.stack}")
    budget = Table(title=title, title_justify="left")
    budget.add_column("part")
    budget.add_column("no mitigation", justify="right")
    budget.add_column("this stack", justify="right")
    budget.add_column("source")
    base = {p.name: p for p in plan.baseline.parts}
    for part in plan.parts:
        b = base.get(part.name)
        budget.add_row(part.name, "-" if b is None else _s(b.low, b.high),
                       _s(part.low, part.high), Text(part.source, style="dim"))
    bt, t = plan.baseline.total_s, plan.total_s
    budget.add_row(Text("total", style="bold"), _s(bt.low, bt.high),
                   Text(_s(t.low, t.high), style="bold"),
                   f"dominant: {plan.dominant} (no mitigation: {plan.baseline.dominant})")
    items: list[RenderableType] = [budget]

    if plan.mitigations:
        layers = Table(title="What each layer removes", title_justify="left")
        layers.add_column("layer")
        layers.add_column("removes", justify="right")
        layers.add_column(f"{cur}/month", justify="right")
        layers.add_column("assumptions")
        for m in plan.mitigations:
            r = m.removes_s
            layers.add_row(m.name, _s(r.low, r.high), f"{m.monthly_cost:,.0f}",
                           Text("; ".join(m.assumptions), style="dim"))
        items.append(layers)

    c = plan.monthly_cost
    lines = [
        f"Monthly cost: {_money(c.total, cur)} = warm pool {_money(c.warm_pool, cur)} "
        f"({c.warm_pool_gpu_hours:,.0f} GPU-h) + on demand {_money(c.on_demand, cur)} "
        f"({c.on_demand_gpu_hours:,.0f} GPU-h) + layers {_money(c.mitigations, cur)}",
        f"  warm pool: {c.warm_pool_arithmetic}",
    ]
    be = plan.break_even
    if be.rate_rps is not None:
        lines.append(
            f"Break-even: one warm replica ({be.replica_price_per_hour:.2f} {cur}/h) beats "
            f"scale-to-zero above {be.rate_rps:.4f} req/s ({be.requests_per_hour:.1f} "
            f"req/h), with {be.cold_start_s:.0f} s cold starts, {be.slo_miss_cost:g} "
            f"{cur} per missed request, {be.keep_alive_s:g} s keep-alive")
    sla = plan.sla
    if sla is not None:
        verdict = {True: "meets", False: "misses", None: "-"}[plan.meets_sla]
        lines.append(f"SLA P99 TTFT {sla.sla_s:g} s: {verdict} ({sla.reason})")
    ec = plan.engine_check
    if ec is not None:
        lines.append(
            f"Engine start-up check: store median {ec.store_median_s:.1f} s of "
            f"{ec.runs} run(s) vs startup model {ec.predicted_s:.1f} s "
            f"[{ec.interval.low:.1f}, {ec.interval.high:.1f}]: "
            f"{'within' if ec.within else 'OUTSIDE'} the interval")
    lines += [f"note: {note}" for note in plan.notes]
    used = [label for label in plan.sources
            if any(p.source.startswith(label + ":") for p in plan.baseline.parts)]
    lines += [f'source "{label}" = {plan.sources[label]}' for label in used]
    items.append(Text("\n".join(lines)))

    found = plan.search
    if found is not None:
        if found.chosen is None:
            items.append(Text(f"No stack of {found.candidates} meets the SLA.", style="bold"))
        if found.cheaper_failures:
            fails = Table(title=f"Cheaper stacks that fail (of {found.candidates} tried)",
                          title_justify="left")
            fails.add_column("stack")
            fails.add_column("cold path", justify="right")
            fails.add_column(f"{cur}/month", justify="right")
            fails.add_column("why it fails")
            for f in found.cheaper_failures:
                cp = f.cold_path_s
                fails.add_row(f.stack, _s(cp.low, cp.high), f"{f.monthly_cost:,.0f}",
                              Text(f.reason, style="dim"))
            items.append(fails)

    if plan.tiers:
        tiers = Table(title="Tiered warm-pool policy", title_justify="left")
        tiers.add_column("tier")
        tiers.add_column("P99 TTFT SLA", justify="right")
        tiers.add_column("stack")
        tiers.add_column("warm pool arithmetic")
        tiers.add_column("on-demand GPU-h", justify="right")
        tiers.add_column(f"{cur}/month", justify="right")
        for tier in plan.tiers:
            sla_text = "none" if tier.sla_p99_ttft_s is None else f"{tier.sla_p99_ttft_s:g} s"
            tiers.add_row(tier.name, sla_text, tier.stack, tier.warm_pool_arithmetic,
                          f"{tier.on_demand_gpu_hours:,.0f}", f"{tier.monthly_cost:,.0f}")
        tiers.add_row(Text("total", style="bold"), "", "", "", "",
                      f"{plan.tiers_total_monthly_cost:,.0f}")
        items.append(tiers)
    return Group(*items)
