"""Autoscaling with cold starts, simulated over a request trace.

The records and the one call behind ``coldscope simulate``: ``SimResult`` is the JSON that
``simulate --json`` prints (``SweepResult`` with ``--sweep``); ``run(SimRequest)`` produces it.
Imported lazily so that ``import coldscope.sim`` does not load numba.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReplicaSpec", "SimConfig", "SimRequest", "SimResult", "SweepResult", "run"]

_WHERE = {"ReplicaSpec": "simulate", "SimConfig": "simulate", "SimResult": "simulate",
          "SimRequest": "request", "run": "request",
          "SweepResult": "sweep"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"coldscope.sim.{_WHERE[name]}"), name)
    raise AttributeError(name)
