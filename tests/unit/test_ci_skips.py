"""No silent skips under CI (tests/conftest.py): with ``CI=true`` a test that would skip for a
missing dependency or fixture fails, naming it, however it skips (a ``skipif`` mark,
``pytest.skip``, ``importorskip`` at run time or as its module is collected); a test that lacks
a part of the platform (``platform_skip``) stays skipped and is listed by name in the summary.
Without CI every one of them is a skip, as on a developer's machine. Checked by running pytest
on the probes below (and on ``ci_skip_probe_module.py``, a module that skips as it is
collected: under CI a collection error, which stops the run), made to skip by an environment
variable, with and without CI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import platform_skip

REPO = Path(__file__).resolve().parents[2]
HERE = "tests/unit/test_ci_skips.py"
MODULE = "tests/unit/ci_skip_probe_module.py"
PROBING = os.environ.get("COLDSCOPE_SKIP_PROBE") == "1"


@pytest.mark.skipif(PROBING, reason="the probe's dependency is missing")
def test_probe_skipif():
    pass


def test_probe_skip():
    if PROBING:
        pytest.skip("../shared/probe-fixture is not present")


def test_probe_importorskip():
    if PROBING:
        pytest.importorskip("coldscope_probe_no_such_module")


def test_probe_platform():
    if PROBING:
        platform_skip("a probe GPU")


def run_probes(ci: str | None, *paths: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["COLDSCOPE_SKIP_PROBE"] = "1"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-k", "probe", *paths], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


MISSING = "CI=true and a real part this test needs is missing: "


def test_skips_here_and_fails_under_ci_naming_what_is_missing():
    local = run_probes(None, HERE)
    assert local.returncode == 0, local.stdout
    assert "4 skipped" in local.stdout, local.stdout
    for reason in ("the probe's dependency is missing", "../shared/probe-fixture is not present",
                   "coldscope_probe_no_such_module", "the platform lacks a probe GPU"):
        assert reason in local.stdout, (reason, local.stdout)

    ci = run_probes("true", HERE)
    assert ci.returncode == 1, ci.stdout
    out = ci.stdout
    # a mark fails in set-up (an error), the others in the call: exit 1 all the same
    assert "2 failed, 1 skipped" in out and "1 error" in out, out
    for reason in ("the probe's dependency is missing", "../shared/probe-fixture is not present",
                   "could not import 'coldscope_probe_no_such_module'"):
        assert MISSING + reason in out, (reason, out)
    # the platform skip stays a skip, listed by name in its own section
    section = out.split("skipped: the platform lacks a part (allowed under CI too)", 1)[1]
    assert "test_ci_skips.py::test_probe_platform: the platform lacks a probe GPU" in section


def test_a_module_that_skips_as_it_is_collected_is_a_collection_error_under_ci():
    local = run_probes(None, MODULE)
    assert local.returncode in (0, 5) and "1 skipped" in local.stdout, local.stdout  # 5: none ran
    ci = run_probes("true", MODULE)
    # pytest stops at a collection error: under CI the run fails before any test runs
    assert ci.returncode == 2 and "1 error" in ci.stdout, ci.stdout
    assert MISSING + "could not import 'coldscope_probe_collect_no_such_module'" in ci.stdout
