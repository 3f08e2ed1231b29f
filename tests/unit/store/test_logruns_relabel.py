"""Issue 33: ``parse --save --label NAME`` of start-ups already stored gives them the new label
(``relabelled: N``) instead of keeping the old one; saving again with the same label or none
stores nothing and says so. The label is changed in the store's column (what ``runs --label``
selects by) and in the run's record alike. The logs are the shared fixtures."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError
from tests.unit.store.test_logruns import A100, L40S, WILD, cli

# the same logs and CLI runner as the saved-once tests beside it
pytestmark = pytest.mark.skipif(not WILD.is_dir(), reason="shared fixtures not present")


def save(db: str, *label: str) -> subprocess.CompletedProcess[str]:
    done = cli("parse", str(L40S), str(A100), "--save", "--store", db, *label)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


def labels(db: str) -> tuple[set[str | None], set[str | None]]:
    """The runs' labels as the store's column has them (``runs --label``), and as their
    records do (``runs --json``)."""
    with Store(db, create=False) as store:
        by_record = {r.label for r in store.runs(status=None)}
    listed = json.loads(cli("runs", "--store", db, "--json").stdout)["runs"]
    assert {r["label"] for r in listed} == by_record
    by_column = set()
    for name in ("fleet-a", "fleet-b"):
        got = json.loads(cli("runs", "--label", name, "--store", db, "--json").stdout)["runs"]
        if got:
            assert len(got) == 2
            by_column.add(name)
    return by_column or {None}, by_record


def test_a_second_save_with_another_label_relabels_and_says_so(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    first = save(db)
    assert "already stored" not in first.stderr and "relabelled" not in first.stderr
    assert labels(db) == ({None}, {None})

    named = save(db, "--label", "fleet-a")
    assert "relabelled: 2" in named.stderr and "fleet-a" in named.stderr
    assert "already stored" not in named.stderr
    assert labels(db) == ({"fleet-a"}, {"fleet-a"})

    same = save(db, "--label", "fleet-a")  # the same label: nothing new, and it says so
    assert "already stored: 2" in same.stderr and "relabelled" not in same.stderr
    bare = save(db)  # no label: the label it has stays
    assert "already stored: 2" in bare.stderr and "relabelled" not in bare.stderr
    assert labels(db) == ({"fleet-a"}, {"fleet-a"})

    other = save(db, "--label", "fleet-b")
    assert "relabelled: 2" in other.stderr
    assert labels(db) == ({"fleet-b"}, {"fleet-b"})
    with Store(db, create=False) as store:
        assert store.count() == 2  # never stored twice
        for run in store.runs(status=None):  # the rest of the record is what it was
            assert store.evidence(run.id)["saved_log"]
            assert store.timeline(run.id).stages == run.timeline.stages


def test_relabel_changes_one_run_and_refuses_an_unknown_id(tmp_path: Path) -> None:
    import coldscope
    db = tmp_path / "s.db"
    parsed = coldscope.parse_logs([L40S, A100], store=db)
    a, b = (p.run.id for p in parsed if p.run is not None)
    with Store(db) as store:
        assert store.relabel(a, "x") is True
        assert store.relabel(a, "x") is False  # already so: nothing written
        assert store.run(a).label == "x" and store.run(b).label is None
        assert [r.id for r in store.runs(status=None, label="x")] == [a]
        with pytest.raises(ColdscopeError, match="no run"):
            store.relabel("log-0000000000", "x")
