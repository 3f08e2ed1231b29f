"""The root stays a door: no module below the front door imports the package root, the version
lives in the bottom layer, ``coldscope.predict`` loads only what predicting needs, and the
library (not the CLI) stores parsed logs.

Expected values come from independent sources: the source files' own text (their imports),
``pyproject.toml``'s version, a log file's bytes (its SHA-256), closed-form stage times."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import coldscope
from coldscope.util.errors import ColdscopeError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "coldscope"
LOGS = ROOT.parent / "shared" / "fixtures" / "vllm-logs"
LOG_A = LOGS / "v0.9.0_h100_opt-6.7b_unpatched.log"
LOG_B = LOGS / "v0.8.0_h100_opt-6.7b_unpatched.log"
#: The packages above the front door, which may call it (``import coldscope``).
ABOVE_THE_DOOR = ("cli", "integrations")


def _python(code: str, cwd: Path = ROOT) -> str:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "120"})


# -- no arrow up into the root ---------------------------------------------------------------


def _root_imports(path: Path) -> list[str]:
    """What ``path`` takes from the package root itself: ``import coldscope``, or names of
    ``from coldscope import ...`` that are not its subpackages or modules (anywhere in the
    file, ``if TYPE_CHECKING`` blocks and function bodies included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "coldscope"]
        elif isinstance(node, ast.ImportFrom) and node.module == "coldscope" and not node.level:
            found += [f"coldscope.{a.name}" for a in node.names
                      if not (SRC / a.name).is_dir() and not (SRC / f"{a.name}.py").is_file()]
    return found


def test_no_module_below_the_front_door_imports_the_package_root() -> None:
    upward = {}
    for path in sorted(SRC.rglob("*.py")):
        package = path.relative_to(SRC).parts[0]
        if path.parent == SRC or package in ABOVE_THE_DOOR:
            continue
        if found := _root_imports(path):
            upward[str(path.relative_to(SRC))] = found
    assert upward == {}


def test_the_version_is_pyprojects_and_lives_in_the_bottom_layer() -> None:
    from coldscope.core import version
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert coldscope.__version__ == version.__version__ == declared
    # stored runs and startup models say which coldscope made them: the same version
    [run] = coldscope.parse_log(LOG_A)
    assert run.tool.version == declared


def test_the_layering_contracts_need_no_exemption_for_the_root() -> None:
    """Nothing imports the root, so no path up through it needs ignoring (``make lint``'s
    lint-imports checks the rest)."""
    assert "coldscope -> coldscope.**" not in (ROOT / ".importlinter").read_text()


# -- predict loads what predicting needs -------------------------------------------------------


def test_predict_through_the_door_loads_no_planner_tuner_or_engine(tmp_path: Path) -> None:
    from tests.shapes import shape_run, write_shape
    runs = [shape_run(f"run{i}", write_shape(tmp_path / f"shape{i}", layers, i), layers,
                      started_at=f"2026-11-29T10:0{i}:00Z")
            for i, layers in enumerate((2, 4, 6, 8))]
    coldscope.fit(runs).save(tmp_path / "m.json")  # compile = 5 s x (4 + layers)
    out = _python(
        "import json, sys\n"
        "import coldscope\n"
        f"p = coldscope.predict({str(tmp_path / 'm.json')!r}, {str(tmp_path / 'shape1')!r})\n"
        "loaded = sorted({'.'.join(m.split('.')[:2]) for m in sys.modules\n"
        "                 if m.startswith('coldscope.')})\n"
        "print(json.dumps([p.stages['torch_compile'].s, p.total_s, loaded]))\n")
    compile_s, total_s, loaded = json.loads(out)
    assert compile_s == pytest.approx(5.0 * (4 + 4))
    assert total_s == pytest.approx(30 + 0.2 + 1 + 40 + 2 + 1 + 0.5)
    assert set(loaded) <= {"coldscope.api", "coldscope.core", "coldscope.prediction",
                           "coldscope.util"}, loaded


def test_the_reexported_names_load_on_first_use_and_are_the_librarys() -> None:
    out = _python(
        "import json, sys\n"
        "import coldscope.api as api\n"
        "before = [m for m in ('coldscope.planning.planner', 'coldscope.analysis.comparison',\n"
        "                      'coldscope.scaling.advisor', 'coldscope.tuning')\n"
        "          if m in sys.modules]\n"
        "from coldscope.analysis.comparison import compare\n"
        "from coldscope.planning.planner import plan\n"
        "from coldscope.scaling.advisor import ScaleAdvisor, ScaleDecision\n"
        "same = [api.compare is compare, api.plan is plan, api.ScaleAdvisor is ScaleAdvisor,\n"
        "        api.ScaleDecision is ScaleDecision]\n"
        "print(json.dumps([before, same]))\n")
    assert json.loads(out) == [[], [True, True, True, True]]
    with pytest.raises(AttributeError):
        coldscope.api.no_such_name  # type: ignore[attr-defined]  # noqa: B018


# -- parse_logs: the library stores and names saved logs ---------------------------------------


def test_parse_logs_stores_each_run_named_after_its_file_and_content(tmp_path: Path) -> None:
    from coldscope.store.db import Store
    two = tmp_path / "two.log"
    two.write_bytes(LOG_A.read_bytes() + LOG_B.read_bytes())  # one log, two start-ups
    digest = hashlib.sha256(two.read_bytes()).hexdigest()[:8]
    parsed = coldscope.parse_logs([two], store=tmp_path / "s.db")
    assert [(p.status, p.part) for p in parsed] == [("ok", "#1"), ("ok", "#2")]
    ids = [p.run.id for p in parsed if p.run is not None]
    # named by what each start-up is (issue 33), not by the file: two ids, short
    assert len(set(ids)) == 2 and all(i.startswith("log-") and len(i) == 14 for i in ids)
    assert digest not in "".join(ids)
    with Store(tmp_path / "s.db", create=False) as store:
        assert sorted(r.id for r in store.runs()) == sorted(ids)
        evidence = store.evidence(ids[0])
    assert evidence["saved_log"][0] in LOG_A.read_text()  # what it was read from is kept
    # the same log saved again is the same runs, not new ones
    coldscope.parse_logs([str(two)], store=tmp_path / "s.db")
    with Store(tmp_path / "s.db", create=False) as store:
        assert len(store.runs()) == 2


def test_parse_logs_opens_no_store_when_nothing_was_read(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("nothing an engine wrote\n")
    [refused] = coldscope.parse_logs([notes], store=tmp_path / "s.db")
    assert refused.status == "refused" and refused.run is None and refused.reason
    assert not (tmp_path / "s.db").exists()
    # without a store nothing is stored and the runs keep the file's own name
    [p] = coldscope.parse_logs([LOG_A])
    assert p.run is not None and p.run.id == LOG_A.name and p.lines == []


def test_tune_opens_the_store_only_once_the_session_is(tmp_path: Path) -> None:
    with pytest.raises(ColdscopeError, match="no tune session"):
        coldscope.tune(store=tmp_path / "t.db", resume=True)
    assert not (tmp_path / "t.db").exists()


# -- the CLI through the door ------------------------------------------------------------------


def test_parse_of_relative_and_absolute_logs_is_a_table_not_a_traceback(tmp_path: Path) -> None:
    shutil.copy(LOG_A, tmp_path / "a.log")
    done = _cli("parse", "a.log", str(LOG_B), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "2 logs" in done.stdout and "a.log" in done.stdout
    assert str(LOG_B)[:40] in done.stdout  # an absolute name shown whole (maybe folded)


def test_parse_save_prints_the_ids_the_library_stored(tmp_path: Path) -> None:
    digest = hashlib.sha256(LOG_A.read_bytes()).hexdigest()[:8]
    done = _cli("parse", "--save", "--store", str(tmp_path / "s.db"), str(LOG_A), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    stored = done.stdout.splitlines()[-1]
    assert stored.startswith("stored as run log-") and digest not in stored
    # saved again: the run it already is, not an error
    again = _cli("parse", "--save", "--store", str(tmp_path / "s.db"), str(LOG_A), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr
    listed = _cli("runs", "--json", "--store", str(tmp_path / "s.db"), cwd=tmp_path)
    assert [r["id"] for r in json.loads(listed.stdout)["runs"]] == [stored.split()[-1]]
    assert "already stored: 1" in again.stderr
