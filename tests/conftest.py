"""Shared test set-up: paths to ../shared, and a guard that no engine outlives a test."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
#: The tiny local model `make test` makes (the real-engine tests start vLLM on it).
TINY_MODEL = REPO / "models" / "tiny"


def vllm_available() -> bool:
    """Whether the engine the real-engine tests start can be imported here."""
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True

# Every process this test session starts (engines included: the runner passes the environment
# on) carries this marker, so the guard below never touches anyone else's processes.
SESSION = f"pytest-{os.getpid()}"
os.environ["COLDSCOPE_TEST_SESSION"] = SESSION


def run_processes() -> list[psutil.Process]:
    """Live processes of a coldscope run started by this test session."""
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == os.getpid():
            continue
        try:
            env = p.environ()
            if "COLDSCOPE_RUN_ID" in env and env.get("COLDSCOPE_TEST_SESSION") == SESSION:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.fixture(autouse=True)
def no_engine_left_behind():
    """Every test must leave no process of any engine it started."""
    yield
    left = run_processes()
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    assert not left, f"processes left alive after the test: {[p.pid for p in left]}"


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED
