"""``benches/figures.toml`` lists every figure README.md and docs/ quote with what reproduces
it; ``make bench`` prints each with a verdict. These checks keep the list and the docs from
drifting apart: each quoted text is still in its doc, each bench, test and artefact named is
one the repository has, and each bench figure is text that bench reports."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRIES = tomllib.loads((REPO / "benches" / "figures.toml").read_text())["figure"]
SOURCES = {"bench", "test", "command", "cited", "none"}


def _flat(text: str) -> str:
    return " ".join(text.split())


def _id(entry: dict) -> str:
    return f"{entry['doc']}: {_flat(entry['quote'])[:40]}"


@pytest.mark.parametrize("entry", ENTRIES, ids=_id)
def test_the_quoted_figure_is_in_its_doc(entry):
    doc = REPO / entry["doc"]
    assert doc.is_file(), entry["doc"]
    assert _flat(entry["quote"]) in _flat(doc.read_text(encoding="utf-8")), (
        f"{entry['doc']} no longer says {_flat(entry['quote'])!r}: update benches/figures.toml "
        "with the doc")


@pytest.mark.parametrize("entry", ENTRIES, ids=_id)
def test_the_source_named_exists(entry):
    assert entry["source"] in SOURCES, entry["source"]
    if entry["source"] == "bench":
        bench = REPO / "benches" / f"bench_{entry['bench']}.py"
        assert bench.is_file(), bench
        # the figure's text, as the bench writes it (before any "{name}: " it prefixes)
        wanted = entry["figure"].split(": ", 1)[-1] if ": " in entry["figure"] else entry["figure"]
        assert wanted.strip() in bench.read_text(encoding="utf-8"), (bench.name, wanted)
        assert entry.get("command"), "a bench figure names the command that reproduces it"
    elif entry["source"] == "test":
        assert (REPO / entry["test"]).is_file(), entry["test"]
    elif entry["source"] in ("command", "none"):
        assert entry.get("note"), "say why make bench does not reproduce it"


def test_the_docs_quote_the_benches_by_the_names_they_have():
    """Every ``benches/bench_*.py`` the docs name exists (a renamed bench is not left quoted)."""
    import re

    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    named = {m for d in docs for m in re.findall(r"benches/(bench_\w+)\.py", d.read_text())}
    assert named and all((REPO / "benches" / f"{n}.py").is_file() for n in named), named


def test_make_bench_gives_each_quoted_figure_the_verdict_of_its_bench():
    """run_all's verdict per figure: its bench's status and value in this run; "not run now" for
    a bench left out; NOT REPRODUCED when the bench ran and reported no such figure."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", REPO / "benches" / "run_all.py")
    assert spec is not None and spec.loader is not None
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    entry = {"source": "bench", "bench": "demo", "figure": "demo: time to ready"}
    rows = [{"bench": "demo", "figure": "demo: time to ready, cold -> warm", "status": "measured",
             "measured": "60.1 -> 40.2 s"},
            {"bench": "tune", "figure": "demo: time to ready", "status": "met", "measured": "x"}]
    assert run_all.figure_verdict(entry, rows, {"demo"}) == "measured: 60.1 -> 40.2 s"
    assert run_all.figure_verdict(entry, rows, {"tune"}) == "not run now"
    assert run_all.figure_verdict(entry, rows[1:], {"demo", "tune"}).startswith("NOT REPRODUCED")
    test = {"source": "test", "test": "tests/x.py", "artefact": "artifacts/none-such.json"}
    assert "absent" in run_all.figure_verdict(test, [], set())
    assert len(run_all.figures_table([], set()).splitlines()) == len(ENTRIES) + 2
