"""The cold-start planner: budget, mitigations, cost, SLA search, scale hints.

The records and calls other code uses: ``plan(PlanRequest) -> PlanReport`` (the JSON of
``plan --json``) and ``scale_hint(ScaleHintRequest) -> ScaleHint`` (``serve``'s
/v1/scale-hint). Imported lazily so that ``import coldscope.planning`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as the type checker sees them; at run time, ``__getattr__``
    from coldscope.planning.hint import ScaleHint, ScaleHintRequest, scale_hint
    from coldscope.planning.planner import PlanRequest, plan
    from coldscope.planning.result import PlanReport

__all__ = ["PlanReport", "PlanRequest", "ScaleHint", "ScaleHintRequest", "plan", "scale_hint"]

_WHERE = {"PlanReport": "result", "PlanRequest": "planner", "plan": "planner",
          "ScaleHint": "hint", "ScaleHintRequest": "hint", "scale_hint": "hint"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"coldscope.planning.{_WHERE[name]}"), name)
    raise AttributeError(name)
