"""Issue 33, part 7: what ``parse``, ``runs`` and ``show`` print reads when piped into an
80-column terminal (no line wider, every id whole on one line), a folder's README is not listed
as a refused log, and the fleet summary draws p50 and p90 only for a group of several runs.

The real CLI of this checkout runs in a subprocess with stdout a pipe and ``COLUMNS=80``.
Expected values come from the inputs: the shared wild logs' file names, the synthetic logs'
own times (``test_parse_many.sglang_log``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.cli.test_parse_many import sglang_log

SRC = str(Path(__file__).resolve().parents[3] / "src")
FIXTURES = Path(os.environ.get("COLDSCOPE_FIXTURES", "/work/shared/fixtures"))
WILD = FIXTURES / "wild-logs"
L40S = WILD / "vllm-0.29.0-l40s-gemma4-26b-a4b-fp8.log"
WIDTH = 80

needs_fixtures = pytest.mark.skipif(not WILD.is_dir(), reason="shared fixtures not present")


def piped(*args: str, stdin: str | None = None, cwd: Path | None = None, width: int = WIDTH
          ) -> subprocess.CompletedProcess[str]:
    """``coldscope ARGS | cat`` at ``width`` columns: stdout is a pipe, not a terminal."""
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                               "PYTHONPATH": SRC, "COLUMNS": str(width)})


def fits(text: str, width: int = WIDTH) -> list[str]:
    """The lines, each checked to fit in ``width`` columns."""
    lines = text.splitlines()
    wide = [line for line in lines if len(line) > width]
    assert not wide, f"wider than {width} columns:\n" + "\n".join(wide)
    return lines


def whole_on_a_line(word: str, lines: list[str]) -> bool:
    return any(word in line.split() for line in lines)


def stored_ids(db: Path) -> list[str]:
    listed = piped("runs", "--store", str(db), "--json")
    assert listed.returncode == 0, listed.stderr
    return [r["id"] for r in json.loads(listed.stdout)["runs"]]


@needs_fixtures
def test_parse_save_of_a_folder_fits_80_columns_with_every_id_whole(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    proc = piped("parse", "--save", "--store", str(db), str(WILD))
    assert proc.returncode == 0, proc.stderr
    lines = fits(proc.stdout)
    ids = stored_ids(db)
    logs = sorted(p.name for p in WILD.glob("*.log"))
    assert len(ids) == len(logs)  # one start-up each
    for rid in ids:
        assert whole_on_a_line(rid, lines), f"{rid} not whole on a line:\n{proc.stdout}"
    for name in logs:  # the names fit beside the ids: the engine and model give way
        assert whole_on_a_line(name, lines), f"{name} not whole on a line:\n{proc.stdout}"
    assert "README.md" not in proc.stdout  # the folder's README is no refused log


@needs_fixtures
@pytest.mark.parametrize("width", [40, 60])
def test_narrower_still_the_ids_stay_whole(tmp_path: Path, width: int) -> None:
    db = tmp_path / "s.db"
    for args in (("parse", "--save", "--store", str(db), str(WILD)), ("runs", "--store", str(db))):
        proc = piped(*args, width=width)
        assert proc.returncode == 0, proc.stderr
        lines = fits(proc.stdout, width)
        for rid in stored_ids(db):
            assert whole_on_a_line(rid, lines), f"{rid} not whole at {width}:\n{proc.stdout}"
        assert sum(line.split()[1:2] == ["ok"] for line in lines) == len(stored_ids(db))


@needs_fixtures
def test_parse_of_a_folder_without_save_fits_and_names_every_log(tmp_path: Path) -> None:
    proc = piped("parse", str(WILD))
    assert proc.returncode == 0, proc.stderr
    lines = fits(proc.stdout)
    logs = sorted(p.name for p in WILD.glob("*.log"))
    assert lines[0] == f"{len(logs)} logs in {WILD}"
    # every row's status is whole: one "ok" per log, each in a line of its own
    assert sum(line.split()[1:2] == ["ok"] for line in lines) == len(logs)
    assert "README.md" not in proc.stdout


@needs_fixtures
def test_one_log_runs_and_show_fit_80_columns(tmp_path: Path) -> None:
    one = piped("parse", str(L40S))
    assert one.returncode == 0, one.stderr
    lines = fits(one.stdout)
    found = piped("parse", str(L40S), "--json")
    for finding in json.loads(found.stdout)["findings"]:  # ids never cut ("…")
        assert whole_on_a_line(finding["id"], lines) or \
            any(line.split()[:1] == [finding["id"] + ":"] for line in lines), finding["id"]

    db = tmp_path / "s.db"
    assert piped("parse", "--save", "--store", str(db), str(WILD)).returncode == 0
    ids = stored_ids(db)
    runs = piped("runs", "--store", str(db))
    assert runs.returncode == 0, runs.stderr
    lines = fits(runs.stdout)
    for rid in ids:
        assert whole_on_a_line(rid, lines), f"{rid} not whole on a line:\n{runs.stdout}"
    # the log's own words: "Initializing a V1 LLM engine (v0.29.0)"
    assert any("0.29.0" in line.split() for line in lines)
    for rid in ids:
        shown = piped("show", rid, "--env", "--store", str(db))
        assert shown.returncode == 0, shown.stderr
        assert whole_on_a_line(rid, fits(shown.stdout))


def test_a_folders_readme_is_skipped_quietly_but_refused_when_named(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    (d / "docs").mkdir(parents=True)
    (d / "a.log").write_text(sglang_log(100, 10))
    (d / "README.md").write_text("# Our fleet's logs\n\nCollected with kubectl logs.\n")
    (d / "LICENSE").write_text("MIT License\n")
    (d / "docs" / "how.rst").write_text("How\n===\n")
    (d / "notes.txt").write_text("nothing to see\n")  # a .txt may be a log: read, refused
    proc = piped("parse", str(d), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [Path(r["log_path"]).name for r in doc["runs"]] == ["a.log"]
    assert [(Path(x["log"]).name, x["status"]) for x in doc["refused"]] == [
        ("notes.txt", "refused")]
    shown = piped("parse", str(d))
    assert "README" not in shown.stdout and "LICENSE" not in shown.stdout
    named = piped("parse", str(d / "README.md"))  # named: read, and refused in one line
    assert named.returncode == 2
    assert len(named.stderr.strip().splitlines()) == 1
    assert "README.md does not look like a log" in named.stderr


def test_fleet_summary_draws_percentiles_only_for_groups_of_several_runs(
        tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    # two start-ups of org/m-7b, ready at 100 s and 60 s; one of org/other-3b, at 42 s
    (d / "a.log").write_text(sglang_log(100, 10))
    (d / "b.log").write_text(sglang_log(60, 20))
    (d / "c.log").write_text(sglang_log(42, 7, model="org/other-3b"))
    proc = piped("parse", str(d))
    assert proc.returncode == 0, proc.stderr
    lines = fits(proc.stdout)
    assert "fleet: sglang 0.5.9 · m-7b · 2 ok run(s)" in lines
    assert not any("other-3b ·" in line for line in lines)  # one run: no table of its own
    assert "fleet: 1 group with one ok run (no p50/p90: they need 2 runs)" in lines
    [ttr] = [line for line in lines if line.strip().startswith("time to ready")]
    # p50 of 60 and 100 is 80; p90 is 60 + 0.9 * 40 = 96
    assert ttr.split()[3:6] == ["80.00", "96.00", "2"]
    assert sum(line.strip().startswith("time to ready") for line in lines) == 1
    # the JSON keeps every group, the one-run one with its count
    doc = json.loads(piped("parse", str(d), "--json").stdout)
    assert sorted((g["model"], g["count"]) for g in doc["fleet"]) == [
        ("m-7b", 2), ("other-3b", 1)]
