"""Run records cannot be changed behind a consumer's back: they are frozen, and a changed one
is a new record made through a validating copy."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from coldscope.core.records import Run


def _run() -> Run:
    return Run.model_validate({"id": "r1", "status": "ok", "started_at": "2026-12-02T00:00:00Z",
                               "engine": {"name": "vllm"}, "time_to_ready_s": 10.0})


def test_a_run_and_its_parts_are_frozen():
    run = _run()
    with pytest.raises(ValidationError, match="frozen"):
        run.status = "failed"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        run.engine.version = "0.32.0"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        run.environment.hostname = "x"  # type: ignore[misc]


def test_evolve_is_a_validated_new_record():
    run = _run()
    later = run.evolve(status="failed", reason="the engine exited")
    assert (run.status, later.status, later.reason) == ("ok", "failed", "the engine exited")
    assert later.engine == run.engine and later.id == run.id
    # what model_copy(update=...) would let through is refused
    with pytest.raises(ValidationError, match="status"):
        run.evolve(status="done")
    with pytest.raises(ValidationError, match="time_to_ready_s"):
        run.evolve(time_to_ready_s="soon")
    assert run.model_copy(update={"status": "done"}).status == "done"  # the unchecked way
    # parts evolve the same way
    assert run.engine.evolve(version="0.32.0").version == "0.32.0"
