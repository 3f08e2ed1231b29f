"""``Interval``: a low and a high estimate, the one interval record of coldscope.

A plan's cold path, a prediction's 90 % interval, a simulation's start-up range, a scale hint's
start-up, the startup-model file's held-out intervals and a comparison row's 95 % interval
are all this record, so each is read the same way (``iv.low``, ``iv.high``) and written as the
same JSON (``{"low": ..., "high": ...}``). Seconds unless the field holding it says otherwise;
what the interval means (its level, its method, the estimate it surrounds) belongs to the
record that holds it, not to the interval.

An end may be infinite or NaN where the arithmetic behind it overflowed (a startup model's
formula on an absurd model); JSON has neither, so every writer of an interval's JSON writes
such an end as ``null`` (pydantic's ``model_dump_json`` does by default, and ``predict --json``
checks it). ``low <= high`` is not enforced: what a
plan's mitigation removes is the drop of the cold path's low end and the drop of its high end,
and those two need not be ordered.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Interval(BaseModel):
    """A low and a high estimate (seconds unless the field holding it says otherwise)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float
    high: float
