"""One simulation: a trace, a replica spec, a policy and a cold-start distribution in; one
versioned :class:`SimResult` out (summary numbers, and a timeline for the report when asked).

TTFT of a request = (service start - arrival) + prefill time, where the wait includes any
cold start it waited for. Requests still unserved ``drain_limit_s`` after the last arrival are
counted as ``unserved``: they miss the SLA and are left out of the TTFT percentiles. Replicas
are paid from the moment they are asked for (the cold start is paid) until they are removed and
have finished their last request; replicas still up are paid until the end of the trace (the
later of the last arrival and the last departure).

A warm-up (``SimConfig.score_from_s``): the whole trace is replayed through the same replicas
and policy, but only requests arriving at or after ``score_from_s`` are scored, and replicas
are paid from it, so a segment can be measured in steady operation rather than from zero
replicas. The timeline, when asked for, covers the whole run, warm-up included.

Memory: per request the run holds arrival, service time and start (float64), the cold flag and
the two token counts (int32): 33 bytes, so a 27-million-request week fits in about 0.9 GB.
Prefill times and TTFTs are computed in chunks after the run, never all at once beside the
service times.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coldscope.core.interval import Interval
from coldscope.planning.traces import Trace
from coldscope.sim import startup as startup_mod
from coldscope.sim.core import REPLICA_LIMIT, Controller, RawRun, Simulator, Workload
from coldscope.sim.policies import make_policy
from coldscope.sim.startup import ColdStart
from coldscope.util.errors import ColdscopeError

#: Version of the :class:`SimResult` JSON (1: the untyped dict before records).
SCHEMA_VERSION: Final = 2
#: The longest trace a simulation replays unless told otherwise: 31 days is 1.3 M ticks of 2 s.
MAX_SPAN_S = 31 * 86400.0
_CHUNK = 1 << 20


def _default_gpu_price() -> tuple[str, float, str]:
    """(GPU, price per GPU-hour, currency) of the planner's default profile: one default price."""
    from coldscope.planning.infra import default_profile_data
    data = default_profile_data()
    gpu = data["gpu"]
    return gpu, float(data["gpus"][gpu]["price_per_hour"]), str(data["currency"])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplicaSpec(_Strict):
    """How one replica serves and what it costs. The token rates are placeholders for a 7-8 B
    model on one H100 with 8 concurrent requests (~8k prefill tokens/s and ~50 decode tokens/s
    per request): set them from your own measurements. The GPU price defaults to the planner's
    default GPU (H100, 4.00 USD per GPU-hour, the lesson's figure), so that ``plan`` and
    ``simulate`` price a GPU-hour the same way."""

    concurrency: int = Field(8, ge=1, le=10_000, description="requests one replica serves at once")
    prefill_tokens_per_s: float = Field(8000.0, gt=0, allow_inf_nan=False,
                                        description="per request")
    decode_tokens_per_s: float = Field(50.0, gt=0, allow_inf_nan=False,
                                       description="per request")
    gpus_per_replica: int = Field(1, ge=1, le=1024)
    gpu: str | None = Field(None, description="GPU type; default: the planner's default GPU")
    gpu_hour_price: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False,
                                         description="per GPU-hour; default: the GPU's price")
    currency: str | None = Field(None, description="default: the planner profile's currency")

    @model_validator(mode="after")
    def _priced(self) -> ReplicaSpec:
        gpu, price, currency = _default_gpu_price()
        if self.gpu is None:
            self.gpu = gpu
        if self.gpu_hour_price is None:
            if self.gpu != gpu:
                from coldscope.planning.infra import default_profile_data
                gpus = default_profile_data()["gpus"]
                if self.gpu not in gpus:
                    raise ValueError(f"no price known for GPU {self.gpu!r} (known: "
                                     f"{', '.join(sorted(gpus))}); give gpu_hour_price")
                price = float(gpus[self.gpu]["price_per_hour"])
            self.gpu_hour_price = price
        if self.currency is None:
            self.currency = currency
        return self


class SimConfig(_Strict):
    """Everything one simulation needs besides the trace and the start-up distribution."""

    policy: str = "reactive"
    policy_params: dict[str, Any] = Field(default_factory=dict)
    replica: ReplicaSpec = Field(default_factory=ReplicaSpec)
    sla_ttft_s: float = Field(2.0, gt=0, allow_inf_nan=False,
                              description="a request meets the SLA if TTFT <= this")
    startup_scale: float = Field(1.0, ge=0, allow_inf_nan=False,
                                 description="mitigation: start-up x this")
    startup_extra_s: float = Field(0.0, ge=0, allow_inf_nan=False,
                                   description="added to every start-up")
    standby_saving_s: float = Field(
        0.0, ge=0, le=86_400, allow_inf_nan=False,
        description="a standby launcher on the nodes: seconds off every engine start-up "
                    "(never below 0), before startup_scale and startup_extra_s")
    standby_source: str = Field("a standby launcher", max_length=1000,
                                description="where standby_saving_s comes from")
    score_from_s: float = Field(
        0.0, ge=0, le=MAX_SPAN_S, allow_inf_nan=False,
        description="warm-up: requests arriving before this (s) are served but left out of "
                    "every request figure; replica-seconds and cost count from it, and "
                    "cold_starts and max_replicas only from it (0: score the whole run)")
    seed: int = 0
    drain_limit_s: float = Field(3600.0, gt=0, le=MAX_SPAN_S)
    timeline_points: int = Field(500, ge=1, le=100_000)
    replica_limit: int = Field(REPLICA_LIMIT, ge=1)
    max_span_s: float = Field(MAX_SPAN_S, gt=0, allow_inf_nan=False)


# --- the result record ---


class Quantiles(_Strict):
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    mean: float | None


class WaitStats(_Strict):
    mean: float | None
    p99: float | None
    max: float | None
    p_wait: float | None = Field(description="share of served requests that waited at all")


class StartupInfo(_Strict):
    """The cold-start distribution used: its kind, where it comes from, its figures."""

    kind: Literal["fixed", "empirical", "lognormal", "uniform"]
    source: str
    default: bool = Field(description="true: no start-up given, the paper's H100 spread used")
    seconds: float | None = None
    n: int | None = None
    min: float | None = None
    median: float | None = None
    max: float | None = None
    interval: Interval | None = Field(None, description="90 % interval (lognormal) or range")
    scale: float = 1.0
    extra_s: float = 0.0
    standby_saving_s: float = Field(0.0, description="a standby launcher's seconds off each "
                                                     "start-up, before scale and extra_s")
    warnings: list[str] = Field(default_factory=list)


class TraceInfo(_Strict):
    source: str
    requests: int
    duration_s: float
    origin: str | None
    repairs: dict[str, int]


class PolicyInfo(_Strict):
    name: str
    params: dict[str, Any]


class SimSeries(_Strict):
    """Per time bucket (``bucket_s`` wide, starting at ``t``): the series a report plots."""

    bucket_s: float
    t: list[float]
    arrivals: list[int]
    ttft_mean_s: list[float | None]
    ttft_max_s: list[float | None]
    cold_start_requests: list[int]
    cold_starts: list[int]
    ready_replicas: list[float | None]
    replicas: list[float | None]


class SimResult(_Strict):
    """What ``coldscope simulate --json`` prints (seconds unless named otherwise)."""

    schema_version: Literal[2] = SCHEMA_VERSION
    requests: int
    ttft_s: Quantiles
    sla_ttft_s: float
    sla_attainment: float | None = Field(description="share of requests with TTFT <= SLA")
    cold_start_requests: int
    cold_starts: int
    cold_starts_cancelled: int
    warm_at_start: int
    replica_seconds: float
    gpu_hours: float
    cost: float
    currency: str
    wait_s: WaitStats
    unserved: int
    max_replicas: int
    horizon_s: float
    startup: StartupInfo
    trace: TraceInfo
    policy: PolicyInfo
    replica: ReplicaSpec
    timeline: SimSeries | None = Field(None, description="only with --timeline")


# --- running one simulation ---


def _service(trace: Trace, spec: ReplicaSpec) -> np.ndarray:
    """Service time per request (prefill + decode), filled in chunks (one array, no temps)."""
    n = len(trace)
    out = np.empty(n)
    p, d = spec.prefill_tokens_per_s, spec.decode_tokens_per_s
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        out[lo:hi] = trace.context_tokens[lo:hi] / p + trace.generated_tokens[lo:hi] / d
    return out


def _prefill(trace: Trace, spec: ReplicaSpec, lo: int, hi: int) -> np.ndarray:
    return trace.context_tokens[lo:hi] / spec.prefill_tokens_per_s


def workload(trace: Trace, spec: ReplicaSpec, first_token: bool = True) -> Workload:
    """Service and (unless ``first_token`` is false) first-token times from the token rates."""
    first = None
    if first_token:
        first = trace.context_tokens / spec.prefill_tokens_per_s
    return Workload(trace.arrival, _service(trace, spec), first)


def check_size(trace: Trace, config: SimConfig) -> None:
    """Refuse, before any work, a trace whose span would take the run for ever."""
    span = trace.duration
    if span > config.max_span_s:
        raise ColdscopeError(
            f"{trace.source}: the trace spans {span:.4g} s ({span / 86400:.4g} days), above the "
            f"limit of {config.max_span_s / 86400:g} days (seconds vs milliseconds?); raise it "
            f"with --max-span")


def simulate(trace: Trace, config: SimConfig | None = None, startup: ColdStart | None = None,
             policy: Controller | None = None, *, timeline: bool = False,
             progress: Callable[[float], None] | None = None) -> SimResult:
    """Simulate ``trace`` under ``config``; ``startup`` defaults to the paper's H100 spread.

    ``policy`` overrides ``config.policy`` with any object following ``core.Controller``.
    ``timeline``: also bucket the run into the series a report plots.
    """
    config = config or SimConfig()
    check_size(trace, config)
    default = startup is None
    base = startup_mod.paper_default() if startup is None else startup
    cold = startup_mod.mitigate(
        startup_mod.shorten(base, config.standby_saving_s, config.standby_source),
        config.startup_scale, config.startup_extra_s)
    name = config.policy if policy is None else type(policy).__name__
    if policy is None:
        policy = make_policy(config.policy, config.policy_params)
    sim = Simulator(config.replica.concurrency, cold, np.random.default_rng(config.seed),
                    drain_limit_s=config.drain_limit_s, replica_limit=config.replica_limit)
    work = workload(trace, config.replica, first_token=False)
    raw = sim.run(work, policy, progress=progress)
    work.service_s = np.empty(0)  # free it before the TTFT buffer is made
    summary = summarise(raw, trace, config)
    line = None
    if timeline:
        work.first_token_s = trace.context_tokens / config.replica.prefill_tokens_per_s
        line = timeline_of(raw, work, config.timeline_points)
    return SimResult(
        **summary,
        startup=StartupInfo(**startup_info(cold), default=default),
        trace=TraceInfo(**trace.describe()),
        policy=PolicyInfo(name=name, params=_params(policy)),
        replica=config.replica,
        sla_ttft_s=config.sla_ttft_s,
        timeline=line,
    )


def startup_info(cold: ColdStart) -> dict[str, Any]:
    """A start-up distribution's ``describe()``: the record's ``startup`` without ``default``."""
    return dict(cold.describe())


def _params(policy: Controller) -> dict[str, Any]:
    return {k: v for k, v in vars(policy).items() if not k.endswith("_")}


def summarise(raw: RawRun, trace: Trace, config: SimConfig) -> dict[str, Any]:
    """The headline numbers of a run (seconds unless named otherwise).

    One float64 buffer holds the scored requests' TTFTs, then their waits; percentiles are
    taken in place (``overwrite_input``) so no second copy is made.

    With ``config.score_from_s`` (a warm-up), only requests arriving at or after it are
    scored: arrivals are sorted, so they are the suffix from index ``first``, and the buffer
    holds that suffix only (no mask). Replicas are paid from it (a replica up before it is paid
    from it on); ``cold_starts``, ``cold_starts_cancelled`` and ``max_replicas`` count starts
    and ticks at or after it. ``warm_at_start`` and ``horizon_s`` stay those of the whole run.
    """
    n = len(trace)
    arrival, start = trace.arrival, raw.start
    score_from = config.score_from_s
    first = int(np.searchsorted(arrival, score_from, side="left")) if score_from > 0 else 0
    scored = n - first
    buf = np.empty(scored)
    for lo in range(first, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        np.subtract(start[lo:hi], arrival[lo:hi], out=buf[lo - first:hi - first])
    # Requests start in arrival order, so the unserved ones are the run's last ones.
    unserved = min(int(raw.unserved), scored)
    served = None
    if np.isnan(buf).any():
        served = ~np.isnan(buf)
        buf = buf[served]
    m = buf.size
    if m:
        wait_mean, wait_max = float(buf.mean()), float(buf.max())
        p_wait = float(np.count_nonzero(buf > 0) / m)
        wait_p99 = float(np.quantile(buf, 0.99, overwrite_input=True))
        # The same buffer, refilled with TTFT = wait + prefill, request by request.
        pos = 0
        for lo in range(first, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            wait = start[lo:hi] - arrival[lo:hi]
            ttft = wait + _prefill(trace, config.replica, lo, hi)
            if served is not None:
                ttft = ttft[served[lo - first:hi - first]]
            buf[pos:pos + ttft.size] = ttft
            pos += ttft.size
        met = int(np.count_nonzero(buf <= config.sla_ttft_s))
        mean, top = float(buf.mean()), float(buf.max())
        p50, p90, p99 = np.quantile(buf, [0.5, 0.9, 0.99], overwrite_input=True)
        ttft_s: dict[str, float | None] = {"p50": float(p50), "p90": float(p90),
                                           "p99": float(p99), "max": top, "mean": mean}
        wait_s: dict[str, float | None] = {"mean": wait_mean, "p99": wait_p99,
                                           "max": wait_max, "p_wait": p_wait}
    else:
        met = 0
        ttft_s = dict.fromkeys(("p50", "p90", "p99", "max", "mean"))
        wait_s = dict.fromkeys(("mean", "p99", "max", "p_wait"))
    del buf
    last_dep = float(raw.replica_busy_until.max()) if raw.replica_busy_until.size else 0.0
    end = max(float(arrival[-1]) if n else 0.0, last_dep)
    paid_until = np.maximum(np.minimum(raw.replica_removed, end), raw.replica_busy_until)
    paid_from = raw.replica_start
    launched = ~raw.replica_warm
    ticks = raw.tick_ready + raw.tick_starting
    if score_from > 0:
        paid_from = np.maximum(paid_from, score_from)
        launched &= raw.replica_start >= score_from
        ticks = ticks[raw.tick_t >= score_from]
    replica_seconds = float(np.sum(np.maximum(paid_until - paid_from, 0.0)))
    spec = config.replica
    price = spec.gpu_hour_price
    assert price is not None  # ReplicaSpec's validator sets it
    gpu_hours = replica_seconds * spec.gpus_per_replica / 3600.0
    cancelled = launched & (raw.replica_removed < raw.replica_ready)
    return {
        "requests": int(scored),
        "ttft_s": ttft_s,
        "sla_attainment": met / scored if scored else None,
        "cold_start_requests": int(np.count_nonzero(raw.cold[first:])),
        "cold_starts": int(launched.sum()),
        "cold_starts_cancelled": int(cancelled.sum()),
        "warm_at_start": int(raw.replica_warm.sum()),
        "replica_seconds": replica_seconds,
        "gpu_hours": gpu_hours,
        "cost": gpu_hours * price,
        "currency": spec.currency,
        "wait_s": wait_s,
        "unserved": unserved,
        "max_replicas": int(ticks.max()) if ticks.size else 0,
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
