"""The planner's output record: ``PlanReport`` is what ``coldscope plan --json`` prints.

Versioned (``schema_version``), closed (``extra="forbid"``) and published as a JSON Schema by
``coldscope schema plan``. Seconds unless a name says otherwise; money in ``currency`` per month
unless named. Every interval is an ``Interval`` (``{"low", "high"}``). The keys ``total_s``,
``parts``, ``mitigations``, ``monthly_cost`` and ``meets_sla`` are the contract other tools read
(e.g. ``simulate --startup-plan`` reads ``total_s``). ``read_plan`` reads such a file back.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coldscope.core.interval import Interval
from coldscope.util.errors import ColdscopeError, validation_error

#: 1: the untyped dict of coldscope 0.x (``version: 1``); 2: this record.
SCHEMA_VERSION: Final = 2


def check_finite(data: Any, what: str, path: str = "") -> None:
    """Refuse a result holding infinity or NaN (JSON has neither): a one-line error naming the
    first such field, which comes from an input figure out of any sensible range."""
    if isinstance(data, float) and not math.isfinite(data):
        raise ColdscopeError(f"{what}: {path or 'a value'} is {data} (an input figure is out of "
                             "range: check the profile's prices, bandwidths and rates)")
    if isinstance(data, dict):
        for key, value in data.items():
            check_finite(value, what, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list | tuple):
        for k, value in enumerate(data):
            check_finite(value, what, f"{path}[{k}]")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelInfo(_Record):
    name: str | None
    params: float
    weight_bytes: float
    dtype: str
    source: str


class GpuInfo(_Record):
    type: str
    gpus_per_replica: int
    price_per_gpu_hour: float
    currency: str
    source: str


class PartRecord(_Record):
    """One part of the cold path: seconds low..high and where the figure comes from."""

    name: str
    low: float
    high: float
    source: str


class BudgetRecord(_Record):
    total_s: Interval
    parts: list[PartRecord]
    dominant: str


class MitigationRecord(_Record):
    name: str
    summary: str
    removes_s: Interval
    monthly_cost: float
    assumptions: list[str]
    min_workers: int | None = None


class MonthlyCost(_Record):
    currency: str
    gpus_per_replica: int
    price_per_gpu_hour: float
    warm_pool_gpu_hours: float
    warm_pool: float
    warm_pool_arithmetic: str
    on_demand_gpu_hours: float
    on_demand: float
    mitigations: float
    total: float
    products: int


class Verdict(_Record):
    """One stack (layers + warm pool) judged against a P99 TTFT SLA."""

    stack: str
    layers: list[str]
    min_workers: int
    cold_path_s: Interval
    delayed_share: float
    delayed_share_at_low: float
    from_zero_share: float
    scale_out_share: float
    p99_ttft_s: float
    sla_s: float | None
    meets: bool | None
    reason: str
    monthly_cost: float


class SearchRecord(_Record):
    sla_p99_ttft_s: float
    chosen: Verdict | None
    cheaper_failures: list[Verdict]
    candidates: int


class BreakEvenRecord(_Record):
    rate_rps: float | None
    requests_per_hour: float | None
    replica_price_per_hour: float
    cold_start_s: float
    slo_miss_cost: float
    keep_alive_s: float
    burstiness: float


class TrafficRecord(_Record):
    rates_rps: list[float]
    mean_rps: float
    diurnal_amplitude: float
    peak_hour: float
    burstiness: float
    replica_rps: float
    hourly_rates_rps: list[float]
    keep_alive_s: float


class EngineCheckRecord(_Record):
    """The startup model's engine figure against the store's median."""

    store_median_s: float
    predicted_s: float
    interval: Interval
    runs: int
    within: bool


class TierRecord(_Record):
    name: str
    sla_p99_ttft_s: float | None
    products: int
    min_workers: int
    stack: str
    meets_sla: bool | None
    reason: str
    warm_pool_arithmetic: str
    warm_pool_gpu_hours: float
    on_demand_gpu_hours: float
    monthly_cost_per_product: float
    monthly_cost: float
    cheaper_failures: list[Verdict]


class PlanReport(_Record):
    """Budget, mitigation layers, monthly cost and the SLA verdict of one plan."""

    schema_version: Literal[2] = SCHEMA_VERSION
    model: ModelInfo
    gpu: GpuInfo
    total_s: Interval = Field(description="the cold path with this stack")
    parts: list[PartRecord]
    dominant: str
    baseline: BudgetRecord = Field(description="the cold path with no mitigation")
    stack: str
    mitigations: list[MitigationRecord]
    monthly_cost: MonthlyCost
    meets_sla: bool | None
    sla: Verdict | None
    search: SearchRecord | None
    break_even: BreakEvenRecord
    traffic: TrafficRecord
    engine_check: EngineCheckRecord | None
    tiers: list[TierRecord] | None
    tiers_total_monthly_cost: float | None = None
    notes: list[str]
    sources: dict[str, str] = Field(
        default_factory=dict, description="what the source labels in the parts stand for")

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (what ``--json`` prints)."""
        return self.model_dump(mode="json")


def read_plan(path: str | Path) -> PlanReport:
    """The ``PlanReport`` in a file ``coldscope plan --json`` (or ``-o``) wrote; a one-line
    error naming the first bad field when the file holds something else."""
    from coldscope.util.config_file import read_mapping
    data = read_mapping(path, "plan")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ColdscopeError(f"{path} is not a plan: expected the output of `coldscope plan "
                             f"--json` (schema_version {SCHEMA_VERSION})")
    try:
        return PlanReport.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, f"{path} is not a plan") from None
