"""What ``coldscope simulate`` found: a ``SimResult`` as labelled lines, a ``SweepResult`` as a
table with one row per case."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from coldscope.render import render, verbatim
from coldscope.sim.policies import POLICIES
from coldscope.sim.simulate import SimResult
from coldscope.sim.sweep import SweepResult


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g} s"


def policy_text(name: str, params: dict[str, Any]) -> str:
    """The policy by its CLI name, plus only the parameters that differ from its defaults."""
    cls = POLICIES.get(name)
    defaults = dict(vars(cls())) if cls else {}
    changed = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
               for k, v in params.items() if k not in defaults or defaults[k] != v]
    return name + (f" ({', '.join(changed)})" if changed else "")


@render.register
def render_summary(r: SimResult) -> Group:
    """The trace, policy and start-up simulated, then TTFT, SLA attainment, cold starts,
    replicas and cost, one labelled line each."""
    t, w, start = r.ttft_s, r.wait_s, r.startup
    cur = r.currency
    lines = [
        f"trace      {r.trace.source}: {r.requests:,} requests over "
        f"{r.trace.duration_s / 3600:.2f} h",
    ]
    if r.trace.repairs:
        lines.append("repairs    " + ", ".join(f"{k} {v:,}" for k, v in r.trace.repairs.items()))
    lines += [
        f"policy     {policy_text(r.policy.name, r.policy.params)}",
        f"start-up   {start.source}" + (f" (x{start.scale:g} + {start.extra_s:g} s)"
                                        if (start.scale, start.extra_s) != (1.0, 0.0) else ""),
        f"TTFT       p50 {_fmt_s(t.p50)}  p90 {_fmt_s(t.p90)}  p99 {_fmt_s(t.p99)}  "
        f"max {_fmt_s(t.max)}",
        f"SLA        {'-' if r.sla_attainment is None else f'{r.sla_attainment:.2%}'} of "
        f"requests with TTFT <= {r.sla_ttft_s:g} s; waited: {w.p_wait or 0:.2%}",
        f"cold       {r.cold_starts:,} cold starts ({r.cold_starts_cancelled:,} cancelled), "
        f"{r.cold_start_requests:,} requests hit one",
        f"replicas   max {r.max_replicas}, {r.replica_seconds / 3600:,.1f} replica-hours, "
        f"{r.gpu_hours:,.1f} GPU-hours, cost {r.cost:,.2f} {cur} "
        f"({r.replica.gpu_hour_price:.2f} {cur} per {r.replica.gpu} GPU-hour)",
    ]
    if r.unserved:
        lines.append(f"unserved   {r.unserved:,} requests never started (counted as SLA misses)")
    if start.default:
        lines.append("note       no startup model given: start-up drawn from the paper's measured "
                     "H100 spread (engine only)")
    return verbatim("\n".join(lines))


@render.register
def render_sweep(result: SweepResult) -> Table:
    """One row per case: its parameters, then TTFT p99, SLA attainment, cold starts, the
    requests that met one, GPU-hours and cost."""
    rows = result.cases
    keys = sorted({k for r in rows for k in r.params})
    table = Table(title=f"{len(rows)} cases")
    for k in keys:
        table.add_column(k)
    cur = rows[0].result.currency if rows else ""
    for col in ("TTFT p99", "SLA", "cold starts", "cold reqs", "GPU-h", f"cost ({cur})"):
        table.add_column(col, justify="right")
    for r in rows:
        d = r.result
        p99, att = d.ttft_s.p99, d.sla_attainment
        table.add_row(*[str(r.params.get(k, "")) for k in keys],
                      "-" if p99 is None else f"{p99:.3g}",
                      "-" if att is None else f"{att:.2%}", f"{d.cold_starts:,}",
                      f"{d.cold_start_requests:,}", f"{d.gpu_hours:,.1f}", f"{d.cost:,.2f}")
    return table
