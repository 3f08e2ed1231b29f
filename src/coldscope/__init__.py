"""coldscope: measure, explain, predict and plan the cold start of LLM inference servers.

The front door, one name per thing coldscope does (``docs/api.md`` has an example of each)::

    import coldscope

    runs = coldscope.parse_log("vllm.log")          # a saved log -> one Run per start-up
    runs[0].time_to_ready_s, runs[0].stages          # seconds, per stage

``parse_log``, ``parse_logs``, ``profile``, ``compare``, ``fit``, ``predict``, ``calibrate``,
``plan``, ``simulate`` and ``tune`` are plain functions (``coldscope.api``); ``ScaleAdvisor``
is the start-up-aware scaling policy an autoscaler calls each tick; ``Run``, ``Store`` and
the other records they take and return are named here too. Everything is loaded on first use:
``import coldscope`` itself loads no engine, web server or data-frame library, so a script
or an autoscaler that only reads logs or predicts start-ups stays light. ``__version__`` is
``coldscope.core.version``'s: modules below the front door read it there, never from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from coldscope.core.version import __version__

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time ``__getattr__`` loads these
    from coldscope.analysis.comparison import Comparison
    from coldscope.api import (
        calibrate,
        compare,
        fit,
        parse_log,
        parse_logs,
        plan,
        predict,
        profile,
        simulate,
        tune,
    )
    from coldscope.core.records import Run
    from coldscope.ingest.logfiles import ParsedLog
    from coldscope.launch.runner import RunConfig
    from coldscope.planning.planner import PlanRequest
    from coldscope.planning.result import PlanReport
    from coldscope.prediction.core import Prediction
    from coldscope.prediction.features import ModelFeatures, model_features
    from coldscope.prediction.startup_model import StartupModel
    from coldscope.prediction.training import TrainingSet
    from coldscope.scaling.advisor import ScaleAdvisor, ScaleDecision
    from coldscope.sim.request import SimRequest
    from coldscope.sim.simulate import SimResult
    from coldscope.sim.sweep import SweepResult
    from coldscope.store.db import Store
    from coldscope.tuning.report import TuneResult
    from coldscope.util.errors import ColdscopeError

#: Each public name -> the module that defines it (imported on first access).
_HOMES: dict[str, str] = {
    # what coldscope does
    "parse_log": "coldscope.api",
    "parse_logs": "coldscope.api",
    "profile": "coldscope.api",
    "compare": "coldscope.api",
    "fit": "coldscope.api",
    "predict": "coldscope.api",
    "calibrate": "coldscope.api",
    "plan": "coldscope.api",
    "simulate": "coldscope.api",
    "tune": "coldscope.api",
    "model_features": "coldscope.prediction.features",
    # the scaling policy (its own light module: no planner or engine behind it)
    "ScaleAdvisor": "coldscope.scaling.advisor",
    "ScaleDecision": "coldscope.scaling.advisor",
    # the records they take and return
    "Run": "coldscope.core.records",
    "ParsedLog": "coldscope.ingest.logfiles",
    "Store": "coldscope.store.db",
    "RunConfig": "coldscope.launch.runner",
    "Comparison": "coldscope.analysis.comparison",
    "TrainingSet": "coldscope.prediction.training",
    "ModelFeatures": "coldscope.prediction.features",
    "StartupModel": "coldscope.prediction.startup_model",
    "Prediction": "coldscope.prediction.core",
    "PlanRequest": "coldscope.planning.planner",
    "PlanReport": "coldscope.planning.result",
    "SimRequest": "coldscope.sim.request",
    "SimResult": "coldscope.sim.simulate",
    "SweepResult": "coldscope.sim.sweep",
    "TuneResult": "coldscope.tuning.report",
    "ColdscopeError": "coldscope.util.errors",
}

__all__ = [
    "ColdscopeError", "Comparison", "ModelFeatures", "ParsedLog", "PlanReport", "PlanRequest",
    "Prediction", "Run", "RunConfig", "ScaleAdvisor", "ScaleDecision", "SimRequest",
    "SimResult", "StartupModel", "Store", "SweepResult", "TrainingSet", "TuneResult",
    "__version__", "calibrate", "compare", "fit", "model_features", "parse_log", "parse_logs",
    "plan", "predict", "profile", "simulate", "tune",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first access and kept."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'coldscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
