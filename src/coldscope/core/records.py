"""Typed, versioned records that travel between coldscope's parts.

Pydantic models with ``extra="forbid"``: what capture produces, the store keeps, and every
consumer (CLI JSON, report, fit, export, serve) reads. Seconds are floats.

``Run`` is one engine start-up, measured (``origin`` "profile", "campaign", "tune") or read
from a saved log ("log"). Its JSON (``Run.to_json()``) is what ``show --json`` and
``profile --json`` print and what ``coldscope schema run`` describes; the field order is the
contract's (``id, status, reason, cache, time_to_ready_s, first_token_s, stages, substeps,
sources, environment`` first). The reconciled timeline is kept flat in the record, as the
contract always had it (``stages``, ``substeps``, ``sources``, ``intervals``, ``segments``,
``origin_unix``, ``not_applicable``), and comes back typed as ``Run.timeline``.

Records written by coldscope 0.1 (schema 1, plain dicts) are read with ``Run.from_legacy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from coldscope.core.stages import BUCKETS
from coldscope.core.timeline import Span, Timeline, timeline_dict

#: Version of the ``Run`` JSON; the store's schema version follows it.
RUN_SCHEMA_VERSION: Final = 2

Origin = Literal["profile", "campaign", "tune", "log"]
Status = Literal["ok", "failed", "running", "lost"]
CacheState = Literal["cold", "warm", "unknown"]


class Finding(BaseModel):
    """Something wrong or improvable in one start-up, backed by evidence, with the seconds at
    stake. ``id`` is one of the stable ids documented in ``docs/findings.md``; ``stage`` is a
    bucket name from ``coldscope.core.stages``; ``seconds_at_stake`` is None only when the evidence
    shows the fault but cannot time it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    stage: str | None = None
    seconds_at_stake: float | None = Field(None, ge=0)
    evidence: str
    advice: str


class _Record(BaseModel):
    """A part of a run record: unknown keys refused, and frozen, so no consumer changes a
    record behind another's back (a changed record is a new one: ``Run.evolve``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def evolve(self, **changes: Any) -> Self:
        """A new record: this one with ``changes``, validated as any record is (pydantic's
        ``model_copy(update=...)`` would skip that: a wrong status would pass)."""
        return self.model_validate({**self.model_dump(), **changes})


class Tool(_Record):
    """The coldscope that wrote the record."""

    name: str = "coldscope"
    version: str | None = None


class EngineInfo(_Record):
    """The engine as launched: its adapter's name, version and command line, and the settings
    read from that command line that change the start-up (``compile``, ``enforce_eager``)."""

    name: str | None = None
    version: str | None = None
    argv: list[str] = Field(default_factory=list)
    model: str | None = Field(None, description="the model argument as given")
    enforce_eager: bool | None = None
    compile: bool | None = None
    load_format: str | None = None
    family: str | None = Field(None, description="log-format family (from the log adapter)")
    device: str | None = None

    @property
    def mode(self) -> str | None:
        """``eager`` or ``compiled``, as the report's configurations and the export's ``mode``
        column group runs; None where nothing says which (no engine named, no command line,
        no compile setting)."""
        if self.enforce_eager or self.compile is False:
            return "eager"
        if self.name or self.argv or self.compile is not None:
            return "compiled"
        return None


class ModelRef(_Record):
    """The model served: absolute path when it is a local directory, and a short name."""

    path: str | None = None
    name: str | None = None


class Gpu(_Record):
    index: int | None = None
    name: str | None = None
    memory_bytes: int | None = None
    driver: str | None = None
    source: str | None = None


class Filesystem(_Record):
    fstype: str | None = None
    device: str | None = None
    mountpoint: str | None = None


class Environment(BaseModel):
    """The machine and software a run saw. Package versions are keyed by package name
    (``python``, ``torch``, the engine's package, ...): those are the only extra keys allowed,
    and they must be strings (or null)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, str | None] = Field(init=False)

    hostname: str | None = None
    os: str | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None
    cpu_physical_cores: int | None = None
    cpu_affinity: int | None = None
    memory_bytes: int | None = None
    memory_available_bytes: int | None = None
    gpus: list[Gpu] = Field(default_factory=list)
    weights_fs: Filesystem | None = None
    env: dict[str, str] = Field(default_factory=dict,
                                description="start-up relevant environment variables")

    def package(self, name: str) -> str | None:
        """The recorded version of package ``name``, or None."""
        return (self.__pydantic_extra__ or {}).get(name)


class Storage(_Record):
    """Where the weights were read from, as far as the run knows. ``page_cache`` is "cold"
    only when the run evicted the weights first; None means not known. The measured fields
    (``coldscope.capture.storage``) are None when not measured: a model that is not a local
    directory, a run without the probe, a kernel without ``/proc/PID/io``."""

    page_cache: Literal["hot", "cold"] | None = None
    kind: str | None = Field(None, description="nvme, ssd, hdd, nfs, tmpfs, dram, ...")
    read_bandwidth_bps: float | None = Field(
        None, description="bytes per second the loading process(es) read from storage during "
                          "model_loading/weights (weights_read_bytes / weights_read_s)")
    source: str | None = None
    weights_bytes: int | None = Field(None, description="bytes of the model's weight files")
    resident_at_launch: float | None = Field(
        None, ge=0, le=1, description="share of the weight files' bytes in the page cache just "
                                      "before launch (mincore)")
    weights_read_bytes: int | None = Field(
        None, ge=0, description="bytes the engine's processes read from storage during "
                                "model_loading/weights (/proc/PID/io read_bytes, via the probe)")
    weights_read_s: float | None = Field(
        None, ge=0, description="seconds of the model_loading/weights calls those reads span")


class SpanRecord(_Record):
    """One piece of timeline evidence (``coldscope.core.timeline.Span``)."""

    name: str
    process: str = "engine"
    pid: int | None = None
    start: float
    end: float
    source: str


class Segment(_Record):
    """One elementary cut of [0, time to ready]: ``bucket`` from ``start`` to ``end``."""

    bucket: str
    start: float
    end: float


class CpuSamples(_Record):
    interval_s: float
    t: list[float] = Field(default_factory=list)
    per_core: list[list[float]] = Field(default_factory=list)


class ProcessRecord(_Record):
    """One Python process of the engine as the probe saw it."""

    pid: int
    ppid: int | None = None
    role: str
    probe_loaded_s: float
    probe_cost_s: float = 0.0
    argv: list[str] = Field(default_factory=list)


class ImportRecord(BaseModel):
    """One top-level package's imports in one engine process (``profile --imports``): the
    self time of its modules summed (``seconds``; nested imports of other packages excluded),
    how many modules, when the first began (s since launch), the package whose import first
    pulled it in (``via``), and the bucket that first import began in (``stage``). The
    package ``<other>`` sums a process's packages too small to keep."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    process: str = Field(description="the process's role (api_server for the one coldscope "
                                     "launched, one of the engine's own, or helper)")
    pid: int
    package: str
    seconds: float = Field(ge=0)
    modules: int = Field(ge=0)
    start: float | None = None
    via: str | None = None
    stage: str | None = None


class LogInfo(_Record):
    """What the log adapter learnt about the engine from its output."""

    version: str | None = None
    family: str | None = None
    device: str | None = None
    enforce_eager: bool | None = None
    compile_cache: Literal["hit", "miss"] | None = None


class CompileKey(_Record):
    """What one start-up's compile cache was keyed by, as far as the engine shows it: the
    directories the engine chose for its compiled graphs (relative to the run's cache root
    when under it, so runs sharing a root compare), and the inputs such a key depends on that
    coldscope can see: the command's settings, the engine's environment variables, the engine
    and torch versions, and the engine's own record of its key's factors when it writes one
    (vLLM's ``cache_key_factors.json``). Written by the runner into a warm cache directory,
    so a later run given that directory knows which keys it held (``Run.cache_held``)."""

    run: str | None = Field(None, description="the run this key is of")
    dirs: list[str] = Field(default_factory=list)
    flags: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    factors: dict[str, str] = Field(default_factory=dict)


class Membership(_Record):
    """The campaign cell, tune session or ``releases`` measurement a run was measured for.
    ``kind`` says which."""

    kind: Literal["campaign", "tune", "releases"] = "campaign"
    name: str | None = Field(None, description="campaign name, tune session id, or releases "
                                               "measurement name")
    cell: str | None = None
    model: str | None = None
    engine: str | None = Field(None, description="releases: the release's spec")
    flags: str | None = None
    cache: str | None = None
    repetition: int | None = Field(None, description="releases: the round (0-based; None for "
                                                     "a prime)")
    concurrency: int | None = None
    role: str | None = Field(None, description="measure or prime (campaign, releases); "
                                               "baseline, trial or verify (tune)")
    trial: int | None = Field(None, description="tune: the trial's number")
    change: str | None = Field(None, description="tune: the mitigation tried")
    slot: int | None = Field(None, description="campaign: the wave's slot; releases: the "
                                               "release's place in the order given (0-based)")
    port: int | None = None
    host: str | None = None
    started_with: list[str] = Field(default_factory=list)


class Launch(_Record):
    """Who launched a run and what it leaves behind if it is killed: the coldscope process
    (pid and start time, so a reused pid is not mistaken for it) and the temporary and
    per-run cache directories. The next coldscope command uses it to recover a run whose
    coldscope was killed (status ``running`` -> ``lost``)."""

    owner_pid: int
    owner_started: float = Field(description="the owner's process start time (Unix s)")
    host: str | None = None
    tmp_dir: str | None = None
    cache_dir: str | None = Field(None, description="removed with the run (cold caches)")


class MissedItem(_Record):
    what: str
    seconds: float | None = None
    detail: str | None = None


class Run(_Record):
    """One start-up. See the module docstring for the JSON contract."""

    id: str
    status: Status
    reason: str | None = None
    cache: CacheState | None = Field(None, description="the caches' state this run actually saw")
    time_to_ready_s: float | None = None
    first_token_s: float | None = None
    stages: dict[str, float | None] = Field(default_factory=lambda: dict.fromkeys(BUCKETS))
    substeps: dict[str, float] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    environment: Environment = Field(default_factory=Environment)
    schema_version: Literal[2] = RUN_SCHEMA_VERSION
    origin: Origin = "profile"
    started_at: str
    tool: Tool = Field(default_factory=Tool)
    label: str | None = None
    config_key: str | None = None
    cache_requested: Literal["cold", "warm"] | None = None
    env_overrides: dict[str, str] = Field(default_factory=dict)
    model: ModelRef = Field(default_factory=ModelRef)
    engine: EngineInfo = Field(default_factory=EngineInfo)
    page_cache: str | None = Field(None, description="what was done to the page cache")
    storage: Storage = Field(default_factory=Storage)
    origin_unix: float | None = None
    not_applicable: list[str] = Field(default_factory=list)
    intervals: list[SpanRecord] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    campaign: Membership | None = Field(None, description="campaign cell / tune session")
    verification: dict[str, Any] | None = Field(
        None, description="what a post-ready check (tune) found while the engine was up")
    notes: list[str] = Field(default_factory=list)
    health_url: str | None = None
    log_path: str | None = None
    log_tail: str | None = None
    log_info: LogInfo | None = None
    processes: list[ProcessRecord] = Field(default_factory=list)
    probe_cost_s: float | None = None
    imports: list[ImportRecord] = Field(
        default_factory=list, description="import time by top-level package per process "
                                          "(profile --imports)")
    cpu: CpuSamples | None = None
    paper_metrics: dict[str, float | None] | None = None
    missed_by_paper_parser: list[MissedItem] | None = None
    launch: Launch | None = None
    compile_key: CompileKey | None = Field(
        None, description="what this run's compile cache was keyed by (None: it compiled "
                          "nothing, or the engine did not say)")
    cache_held: list[CompileKey] = Field(
        default_factory=list, description="the compile keys of the earlier runs whose caches "
                                          "this run was given (warm caches), newest last")

    # -- the typed timeline ------------------------------------------------------------------

    @property
    def membership(self) -> Membership | None:
        """The campaign cell or tune session (stored under the JSON key ``campaign``)."""
        return self.campaign

    @property
    def timeline(self) -> Timeline:
        """The reconciled timeline this record carries, as a ``Timeline``."""
        return Timeline(
            time_to_ready=self.time_to_ready_s,
            stages={b: self.stages.get(b) for b in BUCKETS},
            substeps=dict(self.substeps),
            sources=dict(self.sources),
            spans=tuple(Span(name=s.name, start=s.start, end=s.end, source=s.source,
                             process=s.process, pid=s.pid) for s in self.intervals),
            not_applicable=frozenset(self.not_applicable),
            origin_unix=self.origin_unix,
            segments=tuple((g.bucket, g.start, g.end) for g in self.segments),
        )

    def with_timeline(self, tl: Timeline) -> Run:
        """A copy carrying ``tl`` (its stages, sub-steps, sources, spans and segments)."""
        return self.evolve(**timeline_fields(tl))


    # -- JSON --------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The JSON contract (what ``show --json`` prints), as a dict in contract order."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        """A record as stored: schema 2 JSON, or a schema 1 (coldscope 0.1) dict."""
        if data.get("schema_version") == RUN_SCHEMA_VERSION:
            return cls.model_validate(data)
        return cls.from_legacy(data)

    @classmethod
    def from_legacy(cls, data: Mapping[str, Any]) -> Run:
        """A Run from a schema 1 record dict (coldscope 0.1's store and JSON). Keys this model
        does not know are dropped, each named in ``notes``."""
        d = {k: v for k, v in data.items() if v is not None or k in ("reason",)}
        d.pop("schema_version", None)
        if "campaign" in d and isinstance(d["campaign"], Mapping):
            d["campaign"] = {"kind": "campaign", **d["campaign"]}
            d.setdefault("origin", "campaign")
        stages = dict.fromkeys(BUCKETS)
        stages.update(d.get("stages") or {})
        d["stages"] = stages
        if d.get("cache") not in (None, "cold", "warm", "unknown"):
            d["cache"] = "unknown"
        known = set(cls.model_fields)
        dropped = sorted(k for k in d if k not in known)
        notes = list(d.get("notes") or [])
        notes += [f"schema 1 field {k!r} dropped in migration" for k in dropped]
        d = {k: v for k, v in d.items() if k in known}
        d["notes"] = notes
        d["schema_version"] = RUN_SCHEMA_VERSION
        return cls.model_validate(d)


def timeline_fields(tl: Timeline) -> dict[str, Any]:
    """The Run fields that carry a reconciled timeline, from ``tl`` (typed): the JSON shape of
    ``timeline_dict`` with its intervals and segments as records, ready for ``model_copy``."""
    fields = timeline_dict(tl)
    fields["intervals"] = [SpanRecord(**s) for s in fields["intervals"]]
    fields["segments"] = [Segment(**s) for s in fields["segments"]]
    return fields
