"""Under CI=true a test whose real part (engine, Chromium, Prometheus) is missing fails; on a
developer's machine it is skipped with the reason (tests/conftest.py: ``needs``). Checked by
running pytest on the probe test below with the part made "missing" by an environment
variable, with and without CI."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import needs

REPO = Path(__file__).resolve().parents[2]
PROBE = "tests/unit/test_ci_requirements.py::test_probe_needs_a_part"


@needs(os.environ.get("COLDSCOPE_TEST_PART") != "missing", "the probe's part is missing")
def test_probe_needs_a_part():
    pass


def run_probe(ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["COLDSCOPE_TEST_PART"] = "missing"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p",
                           "no:cacheprovider", PROBE], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_missing_part_is_a_skip_here_and_a_failure_under_ci():
    local = run_probe(None)
    assert local.returncode == 0, local.stdout
    assert "1 skipped" in local.stdout and "the probe's part is missing" in local.stdout
    ci = run_probe("true")
    assert ci.returncode == 1, ci.stdout
    assert "1 error" in ci.stdout  # failed in set-up: an error, exit 1 all the same
    assert "CI=true and a real part this test needs is missing: the probe's part is missing" \
        in ci.stdout
