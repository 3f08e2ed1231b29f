"""``coldscope schema KIND``: the JSON Schema of a JSON output, from its pydantic model.

The models are the single source: ``show``/``profile --json`` print ``Run``, ``plan --json``
``PlanReport``, ``compare --json`` ``Comparison``, ``simulate --json`` ``SimResult``,
``predict --json`` ``PredictionReport``, ``tune --json`` ``TuneResult``, ``releases --json``
``ReleasesResult``, and
``fit`` writes ``StartupModelFile``.
The schema describes the JSON as written (pydantic's serialization mode).
"""

from __future__ import annotations

import importlib
from typing import Any

import click
from pydantic import BaseModel

from coldscope.cli.common import print_json
from coldscope.util.errors import ColdscopeError

#: kind -> ("module:attribute" of the pydantic model, what the JSON is)
SCHEMAS: dict[str, tuple[str, str]] = {
    "run": ("coldscope.core.records:Run", "a run (show --json, profile --json runs[])"),
    "compare": ("coldscope.analysis.comparison:Comparison", "compare --json"),
    "plan": ("coldscope.planning:PlanReport", "plan --json"),
    "simulate": ("coldscope.sim:SimResult", "simulate --json"),
    "startup-model": (
        "coldscope.prediction.startup_model:StartupModelFile", "the startup-model file of fit"
    ),
    "predict": ("coldscope.prediction.startup_model:PredictionReport", "predict --json"),
    "tune": ("coldscope.tuning.report:TuneResult", "tune --json"),
    "releases": ("coldscope.launch.releases:ReleasesResult", "releases --json"),
}


def schema_of(kind: str) -> dict[str, Any]:
    """The JSON Schema (a dict) of ``kind``; a one-line error if its model is not there."""
    target, what = SCHEMAS[kind]
    module, attr = target.split(":")
    try:
        model: type[BaseModel] = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        raise ColdscopeError(f"no schema for {kind}: {module}.{attr} is not available in this "
                             "coldscope") from None
    schema = model.model_json_schema(mode="serialization")
    schema.setdefault("description", what)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


@click.command()
@click.argument("kind", type=click.Choice(sorted(SCHEMAS)))
def schema(kind: str) -> None:
    """Print the JSON Schema of a JSON output: run, compare, plan, predict, simulate,
    releases, startup-model, tune."""
    print_json(schema_of(kind))
