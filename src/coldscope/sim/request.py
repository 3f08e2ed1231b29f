"""From a simulation request (what the CLI or a service was asked) to one result.

``run(SimRequest)`` is the one library call behind ``coldscope simulate``: it reads the
replica spec and the trace, picks the cold-start distribution, and runs one simulation or a
sweep. Every input is checked before the trace is read or a replica simulated, so a bad
option is a one-line ``ColdscopeError`` and a bug stays a bug (a traceback), not a user error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coldscope.sim import startup as st
from coldscope.sim.policies import POLICIES, make_policy
from coldscope.sim.simulate import SimConfig, SimResult, simulate
from coldscope.sim.sweep import EXECUTORS, SweepResult
from coldscope.util.errors import ColdscopeError


class StartupChoice(BaseModel):
    """Where new replicas' start-up times come from; at most one source, else the default."""

    model_config = ConfigDict(extra="forbid")

    startup_model: str | None = Field(None, description="startup model file (coldscope fit)")
    model: str | None = Field(None, description="the model the startup model predicts for")
    plan: str | None = Field(None, description="a `coldscope plan --json` output file")
    from_store: bool = False
    store: str | None = None
    label: str | None = None
    seconds: float | None = Field(None, ge=0, le=86400, allow_inf_nan=False)


class SimRequest(BaseModel):
    """One ``simulate`` invocation: the trace, the configuration, the start-up, the outputs."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    repair: bool = False
    config: SimConfig = Field(default_factory=SimConfig)
    startup: StartupChoice = Field(default_factory=StartupChoice)
    timeline: bool = False
    sweep: str | None = None
    executor: str = "local"
    jobs: int | None = Field(None, ge=1, le=1024)


def replica_spec(path: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The replica spec's fields from a YAML/JSON file with ``overrides`` (None: unset) on top."""
    data: dict[str, Any] = {}
    if path:
        from coldscope.util.config_file import read_mapping
        data = read_mapping(path, "replica spec")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return data


def cold_start(choice: StartupChoice) -> Any:
    """The cold-start distribution the choice names; None means the documented default."""
    chosen = [x for x in (choice.startup_model, choice.plan, choice.from_store or None,
                          choice.seconds) if x is not None]
    if len(chosen) > 1:
        raise ColdscopeError("give one of --startup-model, --startup-plan, --startup-from-store, "
                             "--startup-s")
    if choice.startup_model:
        if not choice.model:
            raise ColdscopeError("--startup-model needs --model (the model to predict for)")
        return st.from_startup_model(choice.startup_model, choice.model)
    if choice.model:
        raise ColdscopeError("--model is used with --startup-model")
    if choice.plan:
        from coldscope.util.config_file import read_mapping
        return st.from_plan(read_mapping(choice.plan, "plan"), choice.plan)
    if choice.from_store:
        from coldscope.store.db import Store, default_store_path
        path = Path(choice.store) if choice.store else default_store_path()
        if not path.exists():
            raise ColdscopeError(f"no store at {path}")
        with Store(path, create=False) as store:
            filters = {"label": choice.label} if choice.label else {}
            runs = store.runs("ok", **filters)
        return st.from_store_runs(runs, f"store {path}"
                                  + (f" (label {choice.label})" if choice.label else ""))
    if choice.seconds is not None:
        return st.Fixed(choice.seconds, source="--startup-s")
    return None


def run(request: SimRequest, progress: Callable[[float], None] | None = None
        ) -> SimResult | SweepResult:
    """Check everything, read the trace, then simulate once (or every case of the sweep)."""
    from coldscope.planning.traces import read_trace
    config = request.config
    if config.policy not in POLICIES:
        raise ColdscopeError(f"unknown policy {config.policy!r}; choose from "
                             f"{', '.join(POLICIES)}")
    make_policy(config.policy, config.policy_params)  # parameters checked before the trace
    if request.executor not in EXECUTORS:
        raise ColdscopeError(f"unknown executor {request.executor!r}; choose from "
                             f"{', '.join(EXECUTORS)}")
    cases = None
    if request.sweep:
        from coldscope.sim.sweep import load_sweep, sweep_cases
        cases = sweep_cases(config, load_sweep(request.sweep))
        for _, case in cases:
            make_policy(case.policy, case.policy_params)
    startup = cold_start(request.startup)
    trace = read_trace(request.trace, repair=request.repair)
    if cases is not None:
        from coldscope.sim.simulate import TraceInfo, check_size
        from coldscope.sim.sweep import run_sweep
        for _, case in cases:
            check_size(trace, case)
        rows = run_sweep(trace, cases, startup, executor=request.executor, jobs=request.jobs)
        return SweepResult(trace=TraceInfo(**trace.describe()), cases=rows)
    return simulate(trace, config, startup, timeline=request.timeline, progress=progress)
