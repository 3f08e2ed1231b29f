"""Autoscaling with cold starts, simulated over a request trace.

The records and the calls behind ``coldscope simulate``: ``SimResult`` is the JSON that
``simulate --json`` prints (``SweepResult`` with ``--sweep``); ``run(SimInputs)`` produces it
from data (a ``Trace``, a cold-start distribution), and ``load_inputs(SimRequest)`` reads the
files a request names into those inputs. Imported lazily so that ``import coldscope.sim`` does
not load numba.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReplicaSpec", "SimConfig", "SimInputs", "SimRequest", "SimResult", "SweepResult",
           "load_inputs", "run"]

_WHERE = {"ReplicaSpec": "simulate", "SimConfig": "simulate", "SimResult": "simulate",
          "SimInputs": "request", "SimRequest": "request", "load_inputs": "request",
          "run": "request", "SweepResult": "sweep"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"coldscope.sim.{_WHERE[name]}"), name)
    raise AttributeError(name)
