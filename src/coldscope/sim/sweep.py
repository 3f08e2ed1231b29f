"""Sweeps: many simulations of one trace over a grid of policy and mitigation parameters.

A sweep file (YAML or JSON) holds a base configuration and a grid::

    policy: predictive            # any SimConfig field: the base of every case
    sla_ttft_s: 2.0
    grid:                         # every combination of these values is one case
      policy.min_workers: [0, 1, 2]     # policy.X   -> a policy parameter
      replica.concurrency: [8, 16]      # replica.X  -> a replica-spec field (profile.X: same)
      startup_scale: [1.0, 0.5]         # otherwise  -> a SimConfig field (mitigations)
    cases:                        # optional extra cases, each a mapping like one grid point
      - {policy: fixed, policy.workers: 6}

Cases run in parallel, on local processes (``local``, the default) or on a Ray cluster
(``ray``: ``ray.init()`` joins the cluster named by ``RAY_ADDRESS``, else starts a local one).
The trace is sent to each worker once, not once per case.
"""

from __future__ import annotations

import itertools
import math
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from coldscope.planning.traces import Trace
from coldscope.sim.simulate import SimConfig, SimResult, TraceInfo, simulate
from coldscope.sim.startup import ColdStart
from coldscope.util.errors import ColdscopeError, validation_error

EXECUTORS = ("local", "ray")
#: Cases one sweep may hold: each is a full simulation of the trace.
MAX_CASES = 10_000


def load_sweep(path: str | Path) -> dict[str, Any]:
    """Read a sweep file into a mapping (``grid``, ``cases`` and base fields)."""
    from coldscope.util.config_file import read_mapping
    spec = read_mapping(path, "sweep file")
    if not isinstance(spec, dict):
        raise ColdscopeError(f"{path}: a sweep file must be a mapping with a 'grid'")
    return spec


class SweepCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: dict[str, Any]
    result: SimResult


class SweepResult(BaseModel):
    """What ``coldscope simulate --sweep FILE --json`` prints: one result per case, in order."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[2] = 2
    trace: TraceInfo
    cases: list[SweepCase]


def apply(config: SimConfig, overrides: dict[str, Any]) -> SimConfig:
    """``config`` with ``policy.X``, ``replica.X`` (or ``profile.X``) and plain SimConfig fields
    overridden."""
    data = config.model_dump()
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if head == "policy" and rest:
            data["policy_params"][rest] = value
        elif head in ("replica", "profile") and rest:
            data["replica"][rest] = value
        elif not rest:
            data[key] = value
        else:
            raise ColdscopeError(f"unknown sweep parameter {key!r}")
    try:
        return SimConfig.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, "sweep") from None


def sweep_cases(base: SimConfig, spec: dict[str, Any]) -> list[tuple[dict[str, Any], SimConfig]]:
    """Every case of a sweep spec: (its parameters, its full configuration)."""
    spec = dict(spec)
    grid = spec.pop("grid", {}) or {}
    extra = spec.pop("cases", []) or []
    if not isinstance(grid, dict) or not isinstance(extra, list):
        raise ColdscopeError("a sweep's 'grid' must be a mapping and 'cases' a list")
    base = apply(base, spec)
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    count = math.prod(len(v) for v in values) + len(extra)
    if count > MAX_CASES:
        raise ColdscopeError(f"the sweep has {count:,} cases, above the limit of {MAX_CASES:,}; "
                             "split it into several sweep files")
    points = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]
    points = (points if keys else []) + [dict(c) for c in extra]
    if not points:
        raise ColdscopeError("the sweep has no cases: give a 'grid' or 'cases'")
    return [(p, apply(base, p)) for p in points]


# One worker process's copy of the trace and start-up distribution (sent once, by initializer).
_shared: dict[str, Any] = {}


def _init(trace: Trace, startup: ColdStart | None) -> None:
    _shared["trace"], _shared["startup"] = trace, startup


def _one(config_json: str) -> dict[str, Any]:
    config = SimConfig.model_validate_json(config_json)
    return simulate(_shared["trace"], config, _shared["startup"]).model_dump(mode="json")


def run_sweep(trace: Trace, cases: list[tuple[dict[str, Any], SimConfig]],
              startup: ColdStart | None = None, executor: str = "local",
              jobs: int | None = None) -> list[SweepCase]:
    """Run every case; returns one :class:`SweepCase` per case, in case order."""
    payloads = [c.model_dump_json() for _, c in cases]
    if executor == "local":
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(cases)))
        if jobs == 1:
            _init(trace, startup)
            results = [_one(p) for p in payloads]
        else:
            with ProcessPoolExecutor(jobs, initializer=_init, initargs=(trace, startup)) as pool:
                results = list(pool.map(_one, payloads))
    elif executor == "ray":
        results = _run_ray(trace, startup, payloads)
    else:
        raise ColdscopeError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
    return [SweepCase(params=p, result=SimResult.model_validate(r))
            for (p, _), r in zip(cases, results, strict=True)]


def _run_ray(trace: Trace, startup: ColdStart | None, payloads: list[str]
             ) -> list[dict[str, Any]]:
    """The one place that imports Ray (an optional extra: ``pip install 'coldscope[ray]'``)."""
    try:
        import ray
    except ImportError as exc:
        raise ColdscopeError("--executor ray needs Ray: pip install 'coldscope[ray]'") from exc
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(log_to_driver=False, include_dashboard=False)

    @ray.remote
    def case(trace_ref: Trace, startup: ColdStart | None, payload: str) -> dict[str, Any]:
        _init(trace_ref, startup)
        return _one(payload)

    trace_ref = ray.put(trace)  # stored once in the object store, shared by all tasks
    return ray.get([case.remote(trace_ref, startup, p) for p in payloads])
