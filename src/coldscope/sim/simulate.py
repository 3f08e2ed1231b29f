"""One simulation: a trace, a worker profile, a policy and a cold-start distribution in; one
versioned result out (summary numbers plus a timeline for the report).

TTFT of a request = (service start - arrival) + prefill time, where the wait includes any
cold start it waited for. Requests still unserved ``drain_limit_s`` after the last arrival are
counted as ``unserved``: they miss the SLA and are left out of the TTFT percentiles. Replicas
are paid from the moment they are asked for (the cold start is paid) until they are removed and
have finished their last request; replicas still up are paid until the end of the trace (the
later of the last arrival and the last departure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from coldscope.sim import startup as startup_mod
from coldscope.sim.engine import Engine, RawRun, Workload
from coldscope.sim.policies import POLICIES
from coldscope.sim.traces import Trace

RESULT_VERSION = 1


class Profile(BaseModel):
    """How one replica serves. The defaults are placeholders for a 7-8 B model on one H100
    with 8 concurrent requests (~8k prefill tokens/s and ~50 decode tokens/s per request):
    set them from your own measurements."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(8, ge=1, description="requests one replica serves at once")
    prefill_tokens_per_s: float = Field(8000.0, gt=0, description="per request")
    decode_tokens_per_s: float = Field(50.0, gt=0, description="per request")
    gpus_per_replica: int = Field(1, ge=1)
    gpu_hour_price: float = Field(2.5, ge=0, description="currency units per GPU-hour")


class SimConfig(BaseModel):
    """Everything one simulation needs besides the trace and the start-up distribution."""

    model_config = ConfigDict(extra="forbid")

    policy: str = "reactive"
    policy_params: dict[str, Any] = Field(default_factory=dict)
    profile: Profile = Field(default_factory=Profile)
    sla_ttft_s: float = Field(2.0, gt=0, description="a request meets the SLA if TTFT <= this")
    startup_scale: float = Field(1.0, ge=0, description="mitigation: start-up x this")
    startup_extra_s: float = Field(0.0, ge=0, description="added to every start-up")
    seed: int = 0
    drain_limit_s: float = Field(3600.0, gt=0)
    timeline_points: int = Field(500, ge=1)


def make_policy(name: str, params: dict[str, Any]) -> Any:
    """A built-in policy by its CLI name, with keyword parameters."""
    from coldscope.errors import ColdscopeError

    cls = POLICIES.get(name)
    if cls is None:
        raise ColdscopeError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    try:
        return cls(**params)
    except TypeError as exc:
        raise ColdscopeError(f"bad parameters for policy {name!r}: {exc}") from exc


def workload(trace: Trace, profile: Profile) -> Workload:
    """Service and first-token times of each request from the profile's token rates."""
    prefill = trace.context_tokens / profile.prefill_tokens_per_s
    return Workload(trace.arrival, prefill + trace.generated_tokens / profile.decode_tokens_per_s,
                    prefill)


@dataclass
class SimResult:
    """The summary (the JSON contract plus more) and the timeline; see :meth:`to_dict`."""

    summary: dict[str, Any]
    timeline: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        out = dict(self.summary)
        if timeline:
            out["timeline"] = self.timeline
        return out


def simulate(trace: Trace, config: SimConfig | None = None, startup: Any = None,
             policy: Any = None) -> SimResult:
    """Simulate ``trace`` under ``config``; ``startup`` defaults to the paper's H100 spread.

    ``policy`` overrides ``config.policy`` with any object following ``engine.Controller``.
    """
    config = config or SimConfig()
    default = startup is None
    base = startup_mod.paper_default() if default else startup
    cold = startup_mod.mitigate(base, config.startup_scale, config.startup_extra_s)
    name = config.policy if policy is None else type(policy).__name__
    if policy is None:
        policy = make_policy(config.policy, config.policy_params)
    engine = Engine(config.profile.concurrency, cold, np.random.default_rng(config.seed),
                    drain_limit_s=config.drain_limit_s)
    work = workload(trace, config.profile)
    raw = engine.run(work, policy)
    summary = summarise(raw, work, config)
    summary["startup"] = {**cold.describe(), "default": default}
    summary["trace"] = trace.describe()
    summary["policy"] = {"name": name, "params": _params(policy)}
    summary["profile"] = config.profile.model_dump()
    summary["sla_ttft_s"] = config.sla_ttft_s
    return SimResult(summary, timeline_of(raw, work, config.timeline_points))


def _params(policy: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(policy).items() if not k.endswith("_")}


def _num(x: float) -> float | None:
    """JSON has no NaN or infinity: a missing number is null."""
    return float(x) if math.isfinite(x) else None


def summarise(raw: RawRun, work: Workload, config: SimConfig) -> dict[str, Any]:
    """The headline numbers of a run (seconds unless named otherwise)."""
    served = ~np.isnan(raw.start)
    n = work.arrival.size
    wait = raw.start[served] - work.arrival[served]
    ttft = wait + work.first_token_s[served]
    if ttft.size:
        p50, p90, p99 = np.quantile(ttft, [0.5, 0.9, 0.99])
        ttft_s = {"p50": float(p50), "p90": float(p90), "p99": float(p99),
                  "max": float(ttft.max()), "mean": float(ttft.mean())}
        wait_s = {"mean": float(wait.mean()), "p99": float(np.quantile(wait, 0.99)),
                  "max": float(wait.max()), "p_wait": float(np.mean(wait > 0))}
    else:
        ttft_s = dict.fromkeys(("p50", "p90", "p99", "max", "mean"))
        wait_s = dict.fromkeys(("mean", "p99", "max", "p_wait"))
    departures = raw.start[served] + work.service_s[served]
    last_dep = float(departures.max()) if departures.size else 0.0
    end = max(float(work.arrival[-1]) if n else 0.0, last_dep)
    paid_until = np.maximum(np.minimum(raw.replica_removed, end), raw.replica_busy_until)
    replica_seconds = float(np.sum(np.maximum(paid_until - raw.replica_start, 0.0)))
    gpu_hours = replica_seconds * config.profile.gpus_per_replica / 3600.0
    launched = ~raw.replica_warm
    cancelled = launched & (raw.replica_removed < raw.replica_ready)
    met = int(np.sum(ttft <= config.sla_ttft_s))
    return {
        "version": RESULT_VERSION,
        "requests": int(n),
        "ttft_s": ttft_s,
        "sla_attainment": met / n if n else None,
        "cold_start_requests": int(raw.cold.sum()),
        "cold_starts": int(launched.sum()),
        "cold_starts_cancelled": int(cancelled.sum()),
        "warm_at_start": int(raw.replica_warm.sum()),
        "replica_seconds": replica_seconds,
        "gpu_hours": gpu_hours,
        "cost": gpu_hours * config.profile.gpu_hour_price,
        "wait_s": wait_s,
        "unserved": int(raw.unserved),
        "max_replicas": int((raw.tick_ready + raw.tick_starting).max()) if raw.tick_t.size
        else 0,
        "horizon_s": end,
    }


def _nice_bucket(span: float, points: int, minimum: float) -> float:
    raw = max(span / points, minimum, 1e-9)
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
                 43200, 86400):
        if step >= raw:
            return float(step)
    return float(math.ceil(raw / 86400) * 86400)


def timeline_of(raw: RawRun, work: Workload, points: int = 500) -> dict[str, Any]:
    """Per time bucket: arrivals, TTFT mean and max, cold-start requests, cold starts begun,
    replicas (mean ready, mean ready + starting) — the series a report plots."""
    end = max(float(raw.end), float(work.arrival[-1]) if work.arrival.size else 0.0)
    tick = float(np.min(np.diff(raw.tick_t))) if raw.tick_t.size > 1 else 1.0
    bucket = _nice_bucket(end, points, tick)
    nb = max(1, math.ceil(end / bucket) + 1)
    served = ~np.isnan(raw.start)
    idx = np.minimum((work.arrival // bucket).astype(np.int64), nb - 1)
    arrivals = np.bincount(idx, minlength=nb)
    ttft = np.where(served, raw.start - work.arrival + work.first_token_s, 0.0)
    n_served = np.bincount(idx, weights=served, minlength=nb)
    ttft_sum = np.bincount(idx, weights=ttft, minlength=nb)
    ttft_max = np.full(nb, np.nan)
    if work.arrival.size:
        # Arrivals are sorted, so each bucket is a contiguous run: reduce it in one pass.
        starts = np.searchsorted(idx, np.arange(nb))
        nonempty = arrivals > 0
        ttft_max[nonempty] = np.maximum.reduceat(ttft, starts[nonempty])
    cold_req = np.bincount(idx, weights=raw.cold, minlength=nb)
    launched = ~raw.replica_warm
    rb = np.minimum((raw.replica_start[launched] // bucket).astype(np.int64), nb - 1)
    cold_starts = np.bincount(rb, minlength=nb)
    tb = np.minimum((raw.tick_t // bucket).astype(np.int64), nb - 1)
    ticks = np.bincount(tb, minlength=nb)
    with np.errstate(invalid="ignore", divide="ignore"):
        ready = np.bincount(tb, weights=raw.tick_ready, minlength=nb) / ticks
        replicas = np.bincount(tb, weights=raw.tick_ready + raw.tick_starting,
                               minlength=nb) / ticks
        mean_ttft = ttft_sum / n_served

    def col(a: np.ndarray) -> list[float | None]:
        return [None if not math.isfinite(x) else round(float(x), 4) for x in a]

    return {
        "bucket_s": bucket,
        "t": (np.arange(nb) * bucket).tolist(),
        "arrivals": arrivals.tolist(),
        "ttft_mean_s": col(mean_ttft),
        "ttft_max_s": col(ttft_max),
        "cold_start_requests": cold_req.astype(np.int64).tolist(),
        "cold_starts": cold_starts.tolist(),
        "ready_replicas": col(ready),
        "replicas": col(replicas),
    }
