"""Typed, versioned records that travel between coldscope's parts.

Pydantic models with ``extra="forbid"``: what capture produces, the store keeps, and every
consumer (CLI JSON, report, fit, export, serve) reads. Seconds are floats.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Finding(BaseModel):
    """Something wrong or improvable in one start-up, backed by evidence, with the seconds at
    stake. ``id`` is one of the stable ids documented in ``docs/findings.md``; ``stage`` is a
    bucket name from ``coldscope.stages``; ``seconds_at_stake`` is None only when the evidence
    shows the fault but cannot time it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    stage: str | None = None
    seconds_at_stake: float | None = Field(None, ge=0)
    evidence: str
    advice: str
