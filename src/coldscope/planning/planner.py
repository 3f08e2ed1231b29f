"""One call from a plan request to a plan report.

``plan(PlanRequest) -> PlanReport`` is the library call behind ``coldscope plan`` (and a
service's /v1/plan): it resolves the model's size, the traffic (a traffic file, a trace), the
engine start-up (a startup model, the store's measured runs, or the profile's default), the
tiers file, and then plans. ``make_plan(PlanInputs)`` is the pure planning step once all that is
resolved. The report's keys ``total_s``, ``parts``, ``mitigations``, ``monthly_cost`` and
``meets_sla`` are the contract other tools read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coldscope.planning.budget import (
    EngineCheck,
    EngineEstimate,
    ModelSize,
    baseline_conditions,
    gpus_per_replica,
)
from coldscope.planning.economics import break_even_rate
from coldscope.planning.infra import Profile, Traffic
from coldscope.planning.mitigations import apply_layers
from coldscope.planning.result import PlanReport, check_finite
from coldscope.planning.sla import Tiers, evaluate, plan_tiers, search
from coldscope.util.errors import ColdscopeError

#: What the source labels of the default profile stand for (shown under the plan's table).
PROFILE_SOURCES = {
    "mitigation lesson": "the published lesson on serverless LLM cold-start mitigation",
    "mitigation lesson, 70B worked example": "its budget of a 70B model from zero: "
    "provisioning 45-60 s + image pull 120-300 s + weights into GPU memory 45-120 s + engine "
    "init 10-30 s = 220-510 s, against a 2 s SLA",
    "paper": '"Breaking the Ice" (MLSys 2026): vLLM start-up measured on one H100',
    "assumption": "no published figure: set your own in --profile",
}


@dataclass(frozen=True)
class PlanInputs:
    """What to plan, resolved: the model size, the engine figure, and the stack or SLA."""

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
    #: Layers the SLA search combines when ``layers`` is empty (None: ``sla.SEARCHED_LAYERS``).
    search_pool: tuple[str, ...] | None = None


def make_plan(req: PlanInputs) -> PlanReport:
    """Budget, mitigation layers, cost, SLA verdict (and search, tiers) as one report."""
    profile = req.profile
    traffic = req.traffic or profile.traffic
    base = baseline_conditions(profile, req.engine)
    found = None
    layers, min_workers = req.layers, req.min_workers
    if req.sla_s is not None and req.cheapest:
        # With layers given, the search is limited to combinations of them.
        found = search(req.size, profile, base, req.sla_s, traffic,
                       req.layers or req.search_pool)
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
        "model": {"name": req.size.name, "params": req.size.params,
                  "weight_bytes": req.size.weight_bytes, "dtype": req.size.dtype,
                  "source": req.size.source},
        "gpu": {"type": profile.gpu, "gpus_per_replica": gpus,
                "price_per_gpu_hour": spec.price_per_hour, "currency": profile.currency,
                "source": spec.source},
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
        "sources": PROFILE_SOURCES,
    }
    if req.tiers is not None:
        plans = plan_tiers(req.size, profile, base, req.tiers)
        report["tiers"] = [t.as_dict() for t in plans]
        report["tiers_total_monthly_cost"] = sum(t.monthly_cost for t in plans)
    check_finite(report, "plan")
    return PlanReport.model_validate(report)


# --- from a request (CLI options, a service's JSON body) to the inputs ---


class TunedStartup(BaseModel):
    """What a tune session found (``coldscope.tuning.tuned.tuned_startup`` reads it from the
    ``tune --json`` file; the planner sits below tune and takes the figures, not the file)."""

    model_config = ConfigDict(extra="ignore")

    startup_s: float = Field(gt=0, allow_inf_nan=False)
    baseline_s: float = Field(gt=0, allow_inf_nan=False)
    savings_s: float = Field(allow_inf_nan=False)
    basis: str = Field("a new node: the default started cold vs the winner",
                       description="which two start-ups the figures compare")
    knobs: list[str] = Field(default_factory=list)
    standby_launcher: bool = Field(False, description="the winner starts through a standby "
                                   "launcher: its figure needs one running on the node")
    source: str = "tune session"


class PlanRequest(BaseModel):
    """What ``coldscope plan`` was asked, as data: file paths, names and numbers as given."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="model directory, config, index or features JSON")
    params: str | float | None = Field(None, description="parameter count instead: 70B, 7e10")
    dtype: str = "bf16"
    gpu: str | None = None
    profile: str | None = Field(None, description="YAML with the profile keys to override")
    startup_model: str | None = None
    tuned: TunedStartup | None = Field(None, description="a tune session's winner: its "
                                                        "measured start-up is the engine figure")
    store: str | None = None
    no_store: bool = False
    cache: Literal["cold", "warm"] | None = None
    mitigate: list[str] = Field(default_factory=list)
    min_workers: int = Field(0, ge=0, le=10_000)
    products: int = Field(1, ge=1, le=1_000_000)
    sla_p99_ttft: str | float | None = Field(None, description="a duration: 2s, 500ms")
    traffic: str | None = Field(None, description="YAML traffic shape")
    trace: str | None = Field(None, description="request trace: mean rate and burstiness")
    cheapest: bool = False
    tiers: str | None = Field(None, description="YAML of tiers")
    standby_from: str | None = Field(
        None, description="a `coldscope compare --json` of the default (a) against the same "
                          "command through a standby launcher (b): the standby_launcher layer's "
                          "share of bootstrap")


def plan(request: PlanRequest) -> PlanReport:
    """Resolve everything the request names (files, store, startup model), then plan."""
    from coldscope.planning import budget as bud
    from coldscope.planning.hint import MAX_SLA_S, MIN_SLA_S
    from coldscope.planning.infra import (
        deep_merge,
        load_profile,
        parse_count,
        parse_duration,
        read_yaml,
        validate,
    )
    from coldscope.planning.mitigations import canonical
    from coldscope.planning.sla import load_tiers
    model_path, params, dtype = request.model, request.params, request.dtype
    tiers = None
    if request.tiers:
        tiers = load_tiers(read_yaml(request.tiers, "tiers file"), f"tiers file {request.tiers}")
        model_path = model_path or tiers.model
        if params is None and tiers.params is not None:
            params = tiers.params
        dtype = tiers.dtype or dtype
    if (model_path is None) == (params is None):
        raise ColdscopeError("give one of --model DIR or --params N")
    if model_path is not None and not Path(model_path).exists():
        raise ColdscopeError(f"model not found: {model_path}")
    layers = canonical(tuple(n.strip() for item in request.mitigate for n in item.split(",")
                             if n.strip()))
    sla_s = (parse_duration(request.sla_p99_ttft, "--sla-p99-ttft")
             if request.sla_p99_ttft is not None else None)
    if sla_s is not None and sla_s <= 0:
        raise ColdscopeError("--sla-p99-ttft must be above 0")
    if sla_s is not None and not MIN_SLA_S <= sla_s <= MAX_SLA_S:  # scale-hint's bounds
        raise ColdscopeError(f"--sla-p99-ttft must be {MIN_SLA_S * 1000:g} ms to "
                             f"{MAX_SLA_S / 3600:g} h, not {request.sla_p99_ttft!r}")
    if request.cheapest and sla_s is None:
        raise ColdscopeError("--cheapest needs --sla-p99-ttft")

    overrides: dict[str, Any] = {"gpu": request.gpu} if request.gpu else {}
    notes: list[str] = []
    search_pool = None
    if request.standby_from:
        from coldscope.planning.mitigations import standby_share_from_compare
        from coldscope.planning.sla import SEARCHED_LAYERS
        share = standby_share_from_compare(request.standby_from)
        overrides["mitigations"] = {"standby_launcher": {"bootstrap_saved": share.model_dump()}}
        search_pool = (*SEARCHED_LAYERS, "standby_launcher")
        if "standby_launcher" not in layers:
            notes.append(f"--standby-from {request.standby_from}: the standby_launcher layer "
                         f"saves {share.low:.2f}-{share.high:.2f} of bootstrap; name it in "
                         "--mitigate to apply it (an SLA search tries it)")
    profile = load_profile(request.profile, overrides)
    traffic_data = profile.traffic.model_dump()
    if request.traffic:
        traffic_data = deep_merge(traffic_data, read_yaml(request.traffic, "traffic file"))
    if request.trace:
        from coldscope.planning.traces import read_trace, shape
        found = shape(read_trace(request.trace).arrival)
        traffic_data = deep_merge(traffic_data, {"mean_rps": found["mean_rps"],
                                                 "burstiness": found["burstiness"],
                                                 "rates_rps": []})
        notes.append(f"traffic from {request.trace}: {found['requests']:.0f} requests over "
                     f"{found['span_s']:.0f} s, mean {found['mean_rps']:.3f} req/s, gap SCV "
                     f"{found['scv_measured']:.2f}")
    traffic = validate(Traffic, traffic_data, f"traffic {request.traffic or ''}".strip())

    features = None
    if model_path is not None:
        features = bud.load_features(model_path)
        name = getattr(features, "name", None) or Path(model_path).name
        size = bud.size_from_features(features, name, f"--model {model_path}")
    else:
        assert params is not None  # exactly one of the two (checked above)
        size = bud.size_from_params(parse_count(params), dtype)

    prediction = engine = None
    if request.tuned:
        if request.startup_model:
            raise ColdscopeError("give one of --tuned and --startup-model")
        engine = engine_from_tune(request.tuned)
        notes.append("the --tuned figure is a measured time to ready: it includes the tuned "
                     "model's own weight loading, which the weight_load part also counts")
        notes.append(f"the --tuned figures are those of {request.tuned.basis}: a scale-up "
                     "starts on a new node")
        if request.tuned.standby_launcher:
            notes.append("the --tuned winner starts through a standby launcher: its figure "
                         "holds on a node whose launcher is already running; a scale-up onto "
                         "a new node pays the launcher's imports first (plan the default's "
                         "figure with --mitigate standby_launcher for nodes that are up)")
    if request.startup_model:
        if features is None:
            raise ColdscopeError("--startup-model needs --model (the predictor reads features)")
        from coldscope.prediction.startup_model import StartupModel
        prediction = StartupModel.load(request.startup_model).predict(features)
        engine = bud.engine_from_prediction(prediction, request.startup_model)
        notes.extend(prediction.warnings)
    runs = ([] if request.no_store or model_path is None
            else stored_runs(request.store, model_path, request.cache))
    check = bud.check_engine_init(runs, prediction) if runs and prediction is not None else None
    if engine is None and runs:
        engine = bud.engine_from_runs(runs)
    if engine is None:
        engine = bud.engine_from_default(profile)

    search_it = request.cheapest or (sla_s is not None and not layers
                                     and not request.min_workers)
    return make_plan(PlanInputs(
        size=size, profile=profile, engine=engine, layers=layers,
        min_workers=request.min_workers, products=request.products, sla_s=sla_s,
        cheapest=search_it, traffic=traffic, tiers=tiers, engine_check=check,
        notes=tuple(notes), search_pool=search_pool,
    ))


def engine_from_tune(t: TunedStartup) -> Any:
    """The engine figure of a tune session: its winning configuration's measured start-up."""
    from coldscope.planning.budget import EngineEstimate
    knobs = ", ".join(t.knobs) or "defaults"
    return EngineEstimate(
        low=t.startup_s, high=t.startup_s, median=t.startup_s,
        source=(f"tuned {t.source}: winner's measured time to ready {t.startup_s:.1f} s "
                f"({knobs}; default cold {t.baseline_s:.1f} s, {t.savings_s:.1f} s saved)"))


def stored_runs(store_path: str | None, model_path: str, cache: str | None) -> list[Any]:
    """Finished runs of this model in the store (matched by path, else by directory name)."""
    from coldscope.store.db import Store, default_store_path
    path = Path(store_path) if store_path else default_store_path()
    if not path.exists():
        if store_path:
            raise ColdscopeError(f"no store at {path}")
        return []
    with Store(path, create=False) as store:
        runs = store.runs("ok", cache=cache)
    want = Path(model_path).resolve()
    name = want.name

    def matches(run: Any) -> bool:
        model = getattr(run, "model", None)
        engine = getattr(run, "engine", None)
        stored = getattr(model, "path", None) or getattr(engine, "model", None)
        if stored and Path(stored).resolve() == want:
            return True
        return getattr(model, "name", None) == name or (
            stored is not None and Path(stored).name == name)

    return [r for r in runs if matches(r)]
