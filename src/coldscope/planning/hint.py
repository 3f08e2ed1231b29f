"""How many replicas to keep up now: the planner's SLA rule applied to the rate seen now.

``scale_hint(ScaleHintRequest) -> ScaleHint`` answers an autoscaler's question ("given this
request rate, this P99 TTFT SLA and this cold start, how many warm replicas?") with the same
first-order model the planner's SLA search uses (``sla.evaluate``), on a day whose every hour
has the rate seen now:

* ``capacity_replicas`` = ceil(rate / replica_rps): the replicas the rate needs to be served;
* ``warm_floor``: 1 when scaling to zero would make more than 1 % of requests wait for a cold
  start longer than the SLA allows (``economics.ScaleToZero`` with the profile's keep-alive and
  burstiness), else 0. With a flat rate, scale-out never waits (the replicas the rate needs
  are already up), so no floor above 1 ever helps;
* ``warm_replicas`` = max(capacity, floor): what to have up now. At rate 0 the floor is judged
  as for a vanishing rate: the next request is a cold start.

The cold start is either given (``startup_s``: e.g. a startup model's predicted interval for
the engine, used as the whole cold path) or the planner's end-to-end budget for ``params``
with ``mitigate`` applied. ``coldscope serve``'s GET /v1/scale-hint calls this.

A standby launcher (new replicas forked from a process that has the engine's modules imported,
on nodes that are up): with ``params``, name the ``standby_launcher`` layer in ``mitigate`` (it
removes nothing when the budget provisions a new node); with a given ``startup_s``,
``standby_saving_s`` is the seconds it removes from each start-up (e.g. the bootstrap
``b - a`` of ``coldscope compare --b-standby``, negated): the cold path's low end loses the
saving's high end and its high end the saving's low end. Off (None) by default.
"""

from __future__ import annotations

import math
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from coldscope.core.interval import Interval
from coldscope.util.errors import ColdscopeError

#: Version of the :class:`ScaleHint` JSON.
SCHEMA_VERSION: Final = 1
#: Bounds that keep every answer finite and small: a replica serves at least one request in
#: 1000 s, the SLA is 1 ms to a day, and no answer asks for more than a million replicas.
MIN_REPLICA_RPS = 1e-3
MAX_RATE_RPS = 1e6
MIN_SLA_S, MAX_SLA_S = 1e-3, 86_400.0
MAX_REPLICAS = 1_000_000


class ScaleHintRequest(BaseModel):
    """The rate seen now, the SLA, and either the model's size or its predicted start-up."""

    model_config = ConfigDict(extra="forbid")

    rate_rps: float = Field(ge=0, le=MAX_RATE_RPS, allow_inf_nan=False,
                            description="requests per second now")
    sla_p99_ttft: str | float = Field(description="P99 TTFT SLA, a duration: 2s, 500ms")
    params: str | float | None = Field(None, description="parameter count: 70B, 7e10")
    dtype: str = "bf16"
    startup_s: Interval | None = Field(
        None, description="the cold path (s), e.g. a startup model's interval; else from params")
    mitigate: list[str] = Field(default_factory=list, description="layers, with params only")
    standby_saving_s: Interval | None = Field(
        None, description="seconds a standby launcher removes from each start-up, with "
                          "startup_s only (with params: mitigate standby_launcher)")
    gpu: str | None = None
    replica_rps: float | None = Field(None, ge=MIN_REPLICA_RPS, le=MAX_RATE_RPS,
                                      allow_inf_nan=False,
                                      description="requests/s one replica serves in SLA")


class ScaleHint(BaseModel):
    """Replicas to keep up now, and the start-up figure the answer rests on."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    warm_replicas: int = Field(description="replicas to have up now: max(capacity, floor)")
    capacity_replicas: int = Field(description="ceil(rate / replica_rps)")
    warm_floor: int = Field(description="1 if scale-to-zero would break the SLA, else 0")
    startup_s: Interval = Field(description="the cold path used (s)")
    startup_source: str
    p99_ttft_s: float
    meets_sla: bool
    reason: str
    rate_rps: float
    sla_p99_ttft_s: float
    replica_rps: float


def warm_floor(rate_rps: float, cold_s: float, sla_s: float, warm_ttft_s: float,
               keep_alive_s: float, burstiness: float = 1.0) -> int:
    """1 when scaling to zero would break a P99 TTFT SLA at this rate, else 0.

    The planner's rule (``sla.evaluate`` on a flat day): a cold request takes ``cold_s`` +
    ``warm_ttft_s``; if that fits in ``sla_s`` no floor is needed; otherwise the share of
    requests that meet a cold start after scale-to-zero (``economics.ScaleToZero``, keep-alive
    ``keep_alive_s``, gap SCV ``burstiness``) must stay within 1 %. At rate 0 the next request
    is a cold start, so a rate of 0 is judged as a vanishing one. Pure and cheap: the
    simulator's predictive policy calls it every tick.
    """
    from coldscope.planning.economics import ScaleToZero
    from coldscope.planning.sla import P99_SHARE
    if cold_s + warm_ttft_s <= sla_s:
        return 0
    share = ScaleToZero(max(rate_rps, 1e-9), cold_s, keep_alive_s, burstiness).delayed_share
    return 1 if share > P99_SHARE else 0


def sla_seconds(value: str | float) -> float:
    """The P99 TTFT SLA in seconds (``2s``, ``500ms``, 2.0), within MIN_SLA_S..MAX_SLA_S."""
    from coldscope.planning.infra import parse_duration
    sla = parse_duration(value, "sla_p99_ttft")
    if sla <= 0:
        raise ColdscopeError("sla_p99_ttft must be above 0")
    if not MIN_SLA_S <= sla <= MAX_SLA_S:
        raise ColdscopeError(f"sla_p99_ttft must be {MIN_SLA_S * 1000:g} ms to "
                             f"{MAX_SLA_S / 3600:g} h, not {value!r}")
    return sla


def scale_hint(request: ScaleHintRequest) -> ScaleHint:
    """See the module doc. Bad input is a one-line ``ColdscopeError``."""
    from coldscope.planning import budget as bud
    from coldscope.planning.infra import (
        Traffic,
        load_profile,
        parse_count,
        validate,
    )
    from coldscope.planning.mitigations import Stack, apply_layers, canonical
    from coldscope.planning.sla import evaluate
    sla = sla_seconds(request.sla_p99_ttft)
    profile = load_profile(None, {"gpu": request.gpu} if request.gpu else {})
    if request.params is not None:
        size = bud.size_from_params(parse_count(request.params), request.dtype)
    else:
        size = bud.ModelSize(params=0.0, weight_bytes=0.0, dtype="?", source="not given")
    base = bud.baseline_conditions(profile, bud.engine_from_default(profile))
    if request.startup_s is not None:
        low, high = request.startup_s.low, request.startup_s.high
        if not (0 <= low <= high and math.isfinite(high)):
            raise ColdscopeError(f"startup_s must satisfy 0 <= low <= high, got {low}..{high}")
        if request.mitigate:
            raise ColdscopeError("mitigate applies to the planner's budget (params), not to a "
                                 "given startup_s")
        source = "given startup_s"
        saving = request.standby_saving_s
        if saving is not None:
            s_lo, s_hi = saving.low, saving.high
            if not (0 <= s_lo <= s_hi and math.isfinite(s_hi)):
                raise ColdscopeError(f"standby_saving_s must satisfy 0 <= low <= high, got "
                                     f"{s_lo}..{s_hi}")
            low, high = max(0.0, low - s_hi), max(0.0, high - s_lo)
            source += (f" less a standby launcher's {s_lo:g}-{s_hi:g} s (new replicas start on "
                       "nodes that are up, with the launcher running)")
        budget = bud.Budget((bud.Part("startup", low, high, source),))
        stack = Stack(budget, budget, (), base, 1.0)
    elif request.standby_saving_s is not None:
        raise ColdscopeError("standby_saving_s applies to a given startup_s; with params, add "
                             "standby_launcher to mitigate")
    elif request.params is not None:
        stack = apply_layers(size, profile, base, canonical(request.mitigate))
        source = (f"planner budget for {size.params:.3g} parameters ({request.dtype})"
                  + (f" with {', '.join(canonical(request.mitigate))}" if request.mitigate
                     else ""))
    else:
        raise ColdscopeError("give params (the model's size) or startup_s (a predicted start-up)")
    data = profile.traffic.model_dump()
    # At rate 0 the next request is a cold start whatever the keep-alive: judge the floor at a
    # vanishing rate (every request delayed), not at "no requests, nothing to delay".
    judged = max(request.rate_rps, 1e-9)
    data.update(rates_rps=[judged] * 24, mean_rps=judged)
    if request.replica_rps is not None:
        data["replica_rps"] = request.replica_rps
    traffic = validate(Traffic, data, "scale hint")
    mu = traffic.replica_rps * stack.throughput_factor
    if request.rate_rps / mu > MAX_REPLICAS:
        raise ColdscopeError(f"rate_rps / replica_rps asks for more than {MAX_REPLICAS:,} "
                             f"replicas (rate {request.rate_rps:g} req/s, one replica "
                             f"{mu:g} req/s); check both")
    capacity = math.ceil(request.rate_rps / mu - 1e-9) if request.rate_rps > 0 else 0
    floor = warm_floor(request.rate_rps, stack.budget.high, sla, profile.warm_ttft_s.high,
                       profile.economics.keep_alive_s, traffic.burstiness)
    # The verdict and its reason, from the planner's own evaluation of that floor.
    ev = evaluate(size, profile, stack, floor, sla, traffic)
    return ScaleHint(
        warm_replicas=max(capacity, floor), capacity_replicas=capacity, warm_floor=floor,
        startup_s=Interval(low=stack.budget.low, high=stack.budget.high), startup_source=source,
        p99_ttft_s=ev.p99_ttft_s, meets_sla=bool(ev.meets), reason=ev.reason,
        rate_rps=request.rate_rps, sla_p99_ttft_s=sla, replica_rps=traffic.replica_rps)
