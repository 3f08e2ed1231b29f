"""The planner's editable profile: every bandwidth, duration and price, with its source.

The defaults ship in ``default_profile.yaml`` beside this module; a user's profile file holds
only the keys it changes and is deep-merged over them, so a profile never has to repeat the
published figures it does not dispute.
"""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coldscope.util.config_file import read_mapping
from coldscope.util.errors import ColdscopeError, validation_error

TIERS: tuple[str, ...] = ("registry", "object_store", "node_disk", "nvme", "dram", "hbm")

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Range(_Strict):
    """A low and a high estimate of one quantity, and where the figure comes from."""

    low: float
    high: float
    source: str = "assumption"

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low < 0:
            raise ValueError("low and high must be finite and not negative")
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        return self


class Image(_Strict):
    software_bytes: float = Field(ge=0)
    weights_from: Literal["image", "object_store", "node_disk", "nvme", "dram", "hbm"]


class Bandwidths(_Strict):
    registry: Range
    object_store: Range
    node_disk: Range
    nvme: Range
    dram: Range
    hbm: Range

    @model_validator(mode="after")
    def _positive(self) -> Bandwidths:
        for name in TIERS:
            if getattr(self, name).low <= 0:
                raise ValueError(f"bandwidth of {name} must be above 0")
        return self


class EngineSettings(_Strict):
    """The engine's start-up figures in the profile (the adapters are coldscope.engines)."""

    startup_s: Range
    compile_cache: Literal["warm", "cold"]
    cold_compile_penalty_s: Range
    capture_sizes: int = Field(ge=0)


class GpuType(_Strict):
    memory_bytes: float = Field(gt=0)
    price_per_hour: float = Field(ge=0)
    source: str = "assumption"


class PreseededImage(_Strict):
    weights_tier: Literal["nvme", "node_disk", "dram"]
    storage_price_per_gb_month: float = Field(ge=0)
    storage_source: str = "assumption"


class WeightStreaming(_Strict):
    load_speedup: float = Field(ge=1)
    source: str = "assumption"
    overlap_transfer: bool


class GpuSnapshot(_Strict):
    startup_speedup: float = Field(ge=1)
    source: str = "assumption"
    extra_bytes: float = Field(ge=0)
    storage_price_per_gb_month: float = Field(ge=0)
    gpu_types: int = Field(ge=1)


class TieredLoading(_Strict):
    weights_tier: Literal["dram", "nvme", "hbm"]
    keeps_node: bool
    dram_price_per_gb_hour: float = Field(ge=0)
    dram_source: str = "assumption"


class LiveMigration(_Strict):
    tokens: int = Field(ge=0)
    tokens_source: str = "assumption"
    prefill_tokens_per_s: Range
    network_bytes_per_s: float = Field(gt=0)
    kv_bytes_per_token: float = Field(ge=0)


class CompileCache(_Strict):
    source: str = "assumption"


class FewerCaptureSizes(_Strict):
    capture_sizes: int = Field(ge=0)
    saving_per_7b_s: Range


class Eager(_Strict):
    saving_s: Range
    throughput_factor: float = Field(gt=0, le=1)
    throughput_source: str = "assumption"


class StandbyLauncher(_Strict):
    """A process per node that has imported the engine's modules and forks a new engine on
    request: it removes a share of the engine's ``bootstrap`` stage (imports and interpreter
    start of every engine process), on a node that is already up."""

    #: Share of ``bootstrap`` removed, 0-1 (``plan --standby-from`` replaces it with a
    #: measured ``coldscope compare --b-standby`` document's).
    bootstrap_saved: Range
    #: The bootstrap stage when the engine figure has no per-stage ranges (the profile's
    #: default engine figure): seconds, assumed to lie inside the engine start-up.
    bootstrap_s: Range
    #: The launcher's resident memory on each node that keeps one (bytes), priced at the
    #: tiered_loading layer's host DRAM price.
    resident_bytes: float = Field(ge=0)
    resident_source: str = "assumption"
    #: Nodes (per product) that keep a launcher up all month.
    nodes: int = Field(1, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _share(self) -> StandbyLauncher:
        if self.bootstrap_saved.high > 1:
            raise ValueError("bootstrap_saved is a share of bootstrap: at most 1")
        return self


class MitigationSettings(_Strict):
    preseeded_image: PreseededImage
    weight_streaming: WeightStreaming
    gpu_snapshot: GpuSnapshot
    tiered_loading: TieredLoading
    live_migration: LiveMigration
    compile_cache: CompileCache
    fewer_capture_sizes: FewerCaptureSizes
    eager: Eager
    standby_launcher: StandbyLauncher


class Economics(_Strict):
    slo_miss_cost: float = Field(ge=0)
    keep_alive_s: float = Field(ge=0)


#: The highest request rate the planner takes (req/s): a million requests a second per product.
MAX_RATE_RPS = 1e6


class Traffic(_Strict):
    """Request rate over the day and how bursty it is.

    ``rates_rps``: 24 hourly mean rates (requests per second); when empty they follow a cosine
    around ``mean_rps``. ``burstiness``: squared coefficient of variation of the gaps between
    requests (1 = Poisson). ``replica_rps``: requests per second one replica serves in SLA.
    """

    rates_rps: list[float] = Field(default_factory=list)
    mean_rps: float = Field(ge=0, le=MAX_RATE_RPS)
    diurnal_amplitude: float = Field(ge=0, le=1)
    peak_hour: float = 15
    burstiness: float = Field(ge=1)
    replica_rps: float = Field(gt=0)

    @model_validator(mode="after")
    def _day(self) -> Traffic:
        if self.rates_rps and len(self.rates_rps) != 24:
            raise ValueError(f"rates_rps needs 24 hourly values, got {len(self.rates_rps)}")
        if any(not 0 <= r <= MAX_RATE_RPS for r in self.rates_rps):
            raise ValueError(f"rates_rps must be between 0 and {MAX_RATE_RPS:g} req/s")
        return self

    def hourly_rates(self) -> list[float]:
        """The 24 hourly mean rates in requests per second."""
        if self.rates_rps:
            return list(self.rates_rps)
        return [
            self.mean_rps
            * (1 + self.diurnal_amplitude * math.cos(2 * math.pi * (h - self.peak_hour) / 24))
            for h in range(24)
        ]


class Profile(_Strict):
    """Everything the planner assumes; see ``default_profile.yaml`` for sources."""

    month_hours: float = Field(gt=0)
    currency: str
    provisioning_s: Range
    image: Image
    bandwidth_bytes_per_s: Bandwidths
    engine: EngineSettings
    warm_ttft_s: Range
    gpu: str
    gpus: dict[str, GpuType]
    max_weight_fraction: float = Field(gt=0, le=1)
    gpus_per_replica: int = Field(ge=0)
    mitigations: MitigationSettings
    economics: Economics
    traffic: Traffic

    @model_validator(mode="after")
    def _known_gpu(self) -> Profile:
        if self.gpu not in self.gpus:
            raise ValueError(f"gpu {self.gpu!r} is not in gpus ({', '.join(sorted(self.gpus))})")
        return self

    def gpu_spec(self) -> GpuType:
        return self.gpus[self.gpu]


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base``: nested dicts merge, anything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def default_profile_data() -> dict[str, Any]:
    """The shipped defaults as plain data."""
    text = resources.files("coldscope.planning").joinpath("default_profile.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def read_yaml(path: str | Path, what: str) -> dict[str, Any]:
    """A YAML mapping from ``path``; a missing or malformed file is a one-line error."""
    return read_mapping(path, what)


def load_profile(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> Profile:
    """The default profile with the file at ``path`` and then ``overrides`` merged over it."""
    data = default_profile_data()
    where = "default profile"
    if path is not None:
        data = deep_merge(data, read_yaml(path, "profile"))
        where = f"profile {path}"
    if overrides:
        data = deep_merge(data, overrides)
    return validate(Profile, data, where)


_M = TypeVar("_M", bound=BaseModel)


def validate(model: type[_M], data: Any, where: str) -> _M:
    """``model`` built from ``data``; errors become one line naming the first bad key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, where) from None


_DURATION = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|sec|m|min|h|d|day|days)?\s*$")
_UNIT_S = {None: 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0,
           "d": 86400.0, "day": 86400.0, "days": 86400.0}


def parse_duration(text: str | float, what: str = "duration") -> float:
    """Seconds from ``2s``, ``500ms``, ``1.5min``, ``31d`` or ``2`` (seconds); finite, >= 0."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise ColdscopeError(f"cannot read {what} {text!r} (use e.g. 2s, 500ms, 1min)")
        value = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not (math.isfinite(value) and value >= 0):
        raise ColdscopeError(f"{what} must be a finite duration >= 0, got {text!r}")
    return value


_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMbBtT]?)\s*$")
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
#: Parameter counts the planner accepts: below a million is a typo ("--params 70" for 70B),
#: above 100 trillion is no model anyone serves (and 1e400 is infinity).
MIN_PARAMS, MAX_PARAMS = 1e6, 1e14


def parse_count(text: str | float) -> float:
    """A parameter count from ``70e9``, ``70B``, ``13b``, ``500M``, within MIN..MAX_PARAMS."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _COUNT.match(str(text))
        if not match:
            raise ColdscopeError(f"cannot read parameter count {text!r} (use e.g. 70e9 or 70B)")
        value = float(match.group(1)) * _SCALE[match.group(2).lower()]
    if not (MIN_PARAMS <= value <= MAX_PARAMS):
        hint = f"; did you mean {text}B?" if 0 < value < MIN_PARAMS else ""
        raise ColdscopeError(f"parameter count {text!r} is outside {MIN_PARAMS:.0e}.."
                             f"{MAX_PARAMS:.0e} (write 70B or 7e10 for 70 billion){hint}")
    return value


def dtype_bytes(dtype: str) -> float:
    """Bytes per parameter of ``dtype`` (bf16 -> 2), from the one dtype table (features)."""
    from coldscope.prediction.features import DTYPE_BYTES
    for key in (dtype, dtype.lower(), dtype.upper()):
        if key in DTYPE_BYTES:
            return float(DTYPE_BYTES[key])
    known = ", ".join(sorted(k for k in DTYPE_BYTES if k.islower()))
    raise ColdscopeError(f"unknown dtype {dtype!r} (known: {known})")
