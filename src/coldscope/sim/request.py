"""From a simulation request (what the CLI or a service was asked) to one result.

Two steps, so that the simulator reads no file:

* ``load_inputs(SimRequest) -> SimInputs`` is the edge. A ``SimRequest`` names files (the
  trace, a sweep file, a startup model, a plan, the store) as given; ``load_inputs`` checks every
  option first, then reads those files into data: a ``Trace``, the sweep's cases, a cold-start
  distribution (from a ``Prediction``, a ``PlanReport`` or stored ``Run`` records). The trace,
  the largest, is read last, so a bad option is a one-line ``ColdscopeError`` before any
  waiting, and a bug stays a bug (a traceback), not a user error.
* ``run(SimInputs) -> SimResult | SweepResult`` simulates once, or every case of the sweep.
  A caller that has the data already (a ``Trace``, a ``PlanReport``) builds ``SimInputs``
  itself and skips the files.

Example::

    from coldscope.sim.request import SimRequest, load_inputs, run
    result = run(load_inputs(SimRequest(trace="trace.csv")))
    result.ttft_s.p99, result.cold_starts
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coldscope.planning.traces import Trace, read_trace
from coldscope.sim import startup as st
from coldscope.sim.policies import make_policy
from coldscope.sim.simulate import SimConfig, SimResult, TraceInfo, check_size, simulate
from coldscope.sim.sweep import EXECUTORS, SweepResult, load_sweep, run_sweep, sweep_cases
from coldscope.util.errors import ColdscopeError

#: One case of a sweep: its parameters (as the sweep file names them) and its configuration.
Case = tuple[dict[str, Any], SimConfig]


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
    standby_from: str | None = Field(
        None, description="a `coldscope compare --json` of the default (a) against the same "
                          "command through a standby launcher (b): its mean bootstrap saving "
                          "comes off every start-up (config.standby_saving_s)")


class SimRequest(BaseModel):
    """One ``simulate`` invocation as asked: file paths, names and numbers as given."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    repair: bool = False
    config: SimConfig = Field(default_factory=SimConfig)
    startup: StartupChoice = Field(default_factory=StartupChoice)
    timeline: bool = False
    sweep: str | None = None
    executor: str = "local"
    jobs: int | None = Field(None, ge=1, le=1024)


@dataclass(frozen=True)
class SimInputs:
    """Everything one simulation (or sweep) needs, as data.

    ``startup``: the cold-start distribution (None: the paper's measured H100 spread, and the
    result says so). ``cases``: a sweep's cases, each simulated on ``trace`` (None: one
    simulation under ``config``). ``executor``/``jobs``: where and how widely a sweep runs.
    ``timeline``: also bucket the run into the series a report plots (one simulation only).
    """

    trace: Trace
    config: SimConfig = field(default_factory=SimConfig)
    startup: st.ColdStart | None = None
    timeline: bool = False
    cases: Sequence[Case] | None = None
    executor: str = "local"
    jobs: int | None = None


def replica_spec(path: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The replica spec's fields from a YAML/JSON file with ``overrides`` (None: unset) on top."""
    data: dict[str, Any] = {}
    if path:
        from coldscope.util.config_file import read_mapping
        data = read_mapping(path, "replica spec")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return data


def load_startup(choice: StartupChoice) -> st.ColdStart | None:
    """The cold-start distribution the choice names, its file or store read here; None means
    the documented default."""
    chosen = [x for x in (choice.startup_model, choice.plan, choice.from_store or None,
                          choice.seconds) if x is not None]
    if len(chosen) > 1:
        raise ColdscopeError("give one of --startup-model, --startup-plan, --startup-from-store, "
                             "--startup-s")
    if choice.startup_model:
        if not choice.model:
            raise ColdscopeError("--startup-model needs --model (the model to predict for)")
        return _from_startup_model(choice.startup_model, choice.model)
    if choice.model:
        raise ColdscopeError("--model is used with --startup-model")
    if choice.plan:
        from coldscope.planning.result import read_plan
        return st.from_plan(read_plan(choice.plan), choice.plan)
    if choice.from_store:
        from coldscope.store.db import Store, default_store_path
        path = Path(choice.store) if choice.store else default_store_path()
        if not path.exists():
            raise ColdscopeError(f"no store at {path}")
        with Store(path, create=False) as store:
            runs = store.runs("ok", label=choice.label or None)
        return st.from_store_runs(runs, f"store {path}"
                                  + (f" (label {choice.label})" if choice.label else ""))
    if choice.seconds is not None:
        return st.Fixed(choice.seconds, source="--startup-s")
    return None


def _from_startup_model(model_file: str, model_path: str) -> st.LogNormal:
    """Predict the start-up of the model at ``model_path`` with the startup model file."""
    try:
        from coldscope.prediction.features import model_features
        from coldscope.prediction.startup_model import StartupModel
    except ImportError as exc:  # the predictor is an optional part of the package
        raise ColdscopeError(f"the startup model cannot be used here: {exc}") from exc
    prediction = StartupModel.load(model_file).predict(model_features(model_path))
    return st.from_prediction(prediction, source=f"startup model {model_file} for {model_path}")


def check(configs: Iterable[SimConfig], executor: str = "local") -> None:
    """Refuse an unknown policy or executor and bad policy parameters, before any trace is read
    or replica simulated."""
    for config in configs:
        make_policy(config.policy, config.policy_params)
    if executor not in EXECUTORS:
        raise ColdscopeError(f"unknown executor {executor!r}; choose from "
                             f"{', '.join(EXECUTORS)}")


def load_inputs(request: SimRequest) -> SimInputs:
    """The edge: check the options, then read the sweep file, the start-up's source and, last,
    the trace."""
    config = request.config
    if request.startup.standby_from:
        if config.standby_saving_s:
            raise ColdscopeError("give one of --standby-from and --standby-saving")
        from coldscope.planning.mitigations import standby_seconds_from_compare
        saved, why = standby_seconds_from_compare(request.startup.standby_from)
        config = config.model_copy(update={"standby_saving_s": saved, "standby_source": why})
    check([config], request.executor)
    cases = None
    if request.sweep:
        cases = sweep_cases(config, load_sweep(request.sweep))
        check((case for _, case in cases), request.executor)
    startup = load_startup(request.startup)
    trace = read_trace(request.trace, repair=request.repair)
    return SimInputs(trace=trace, config=config, startup=startup, timeline=request.timeline,
                     cases=cases, executor=request.executor, jobs=request.jobs)


def run(inputs: SimInputs, progress: Callable[[float], None] | None = None
        ) -> SimResult | SweepResult:
    """Simulate ``inputs.trace`` once, or once per case of the sweep (``progress``, a fraction
    done, is reported for a single simulation)."""
    cases = None if inputs.cases is None else list(inputs.cases)
    check([inputs.config, *(case for _, case in cases or ())], inputs.executor)
    trace = inputs.trace
    if cases is not None:
        for _, case in cases:
            check_size(trace, case)
        rows = run_sweep(trace, cases, inputs.startup, executor=inputs.executor,
                         jobs=inputs.jobs)
        return SweepResult(trace=TraceInfo(**trace.describe()), cases=rows)
    return simulate(trace, inputs.config, inputs.startup, timeline=inputs.timeline,
                    progress=progress)
