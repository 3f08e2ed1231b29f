"""``coldscope tune`` / ``bundle`` command-line errors: one line, exit 2, never a traceback; and
the printed table of a finished session."""

from __future__ import annotations

import pytest

from coldscope.cli.main import main
from coldscope.cli.tune import parse_fraction
from coldscope.render.tune import tune_tables
from coldscope.tuning import session as ts
from coldscope.tuning.report import tune_result
from coldscope.util.errors import ColdscopeError
from tests.fake_tunable_engine import FakeTunable
from tests.unit.tuning.test_search import cpu_knobs


def test_parse_fraction():
    assert parse_fraction("10%") == pytest.approx(0.10)
    assert parse_fraction("0.25") == pytest.approx(0.25)
    assert parse_fraction(None) is None
    for bad in ("ten", "150%", "-1%"):
        with pytest.raises(ColdscopeError, match="max-throughput-loss"):
            parse_fraction(bad)


@pytest.mark.parametrize("args, message", [
    (["tune"], "engine command after `--`"),
    (["tune", "--max-throughput-loss", "abc", "--", "python", "-m", "vllm.x"],
     "max-throughput-loss"),
    (["tune", "--", "python", "server.py"], "tune knows no start-up knobs of python"),
    # a path that mentions vLLM is not vLLM (the adapter is chosen by what the command runs)
    (["tune", "--", "python", "server.py", "--model", "/m/vllm"], "no start-up knobs"),
    (["tune", "--resume"], "no tune session"),
    (["bundle", "-o", "x.tar.gz"], "no tune session"),
])
def test_errors_are_one_line(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code = main([*args[:1], "--store", str(tmp_path / "s.db"), *args[1:]])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bundle_of_unfinished_session_is_refused(tmp_path, capsys):
    spec = ts.SessionSpec(id="tune-x", created_at="2026-01-01T00:00:00Z",
                          command=["python", "-m", "vllm.fake"], budget=3, knobs=cpu_knobs())
    ts.save(spec, tmp_path / "tune" / "tune-x")
    code = main(["bundle", "--store", str(tmp_path / "s.db"), "-o", str(tmp_path / "b.tgz")])
    assert code == 2
    assert "has not finished" in capsys.readouterr().err


def test_tables_show_trials_skipped_and_winner(tmp_path):
    spec = ts.SessionSpec(id="tune-x", created_at="2026-01-01T00:00:00Z",
                          command=["python", "-m", "vllm.entrypoints.openai.api_server"],
                          budget=20, knobs=cpu_knobs())
    outcome = ts.run_search(ts.ActiveSession(spec, tmp_path / "s"), FakeTunable())
    result = tune_result(ts.load(tmp_path / "s"), outcome)
    doc = result.to_json()
    assert doc["best"]["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "--enforce-eager" in doc["best"]["argv"]
    assert [w["step"] for w in doc["waterfall"]][0] == "baseline"
    assert doc["waterfall"][-1]["step"] == "best"
    from rich.console import Console

    con = Console(record=True, width=200)
    con.print(tune_tables(result))
    text = con.export_text()
    # the two answers lead, each with its interval: running the default again, and the cold
    # default, which is no new node here: the fake's measurements evicted nothing
    warm_at = text.index("vs running the default again")
    cold_at = text.index("vs empty engine caches (warm machine) (default, 3 cold start-ups)")
    assert "new node" not in text and "the cold start-ups: engine caches empty, machine warm" \
        in text
    assert warm_at < cold_at < text.index("tune tune-x")
    assert f"{78 / 50:.2f}x [" in text[warm_at:cold_at]  # the fake: 78 s warm, 50 s best
    assert f"{122 / 50:.2f}x [" in text[cold_at:]
    assert "warm_caches" in text and "not tried" in text and "snapshot_restore" in text
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0" in text
    assert "coldscope bundle --tune tune-x" in text


def test_tables_say_so_when_the_winner_is_the_warm_default(tmp_path):
    """A budget of 3 leaves the warm default the winner: there is no warm start-up apart from
    its own to compare it with, which the first line says (it used to fail on an empty mean)."""
    spec = ts.SessionSpec(id="tune-w", created_at="2026-01-01T00:00:00Z",
                          command=["python", "-m", "vllm.entrypoints.openai.api_server"],
                          budget=3, knobs=cpu_knobs())
    outcome = ts.run_search(ts.ActiveSession(spec, tmp_path / "s"), FakeTunable())
    assert outcome.best_knobs == ["warm_caches"]
    from rich.console import Console

    con = Console(record=True, width=200)
    con.print(tune_tables(tune_result(ts.load(tmp_path / "s"), outcome)))
    first, second = con.export_text().splitlines()[:2]
    assert first == "vs running the default again: the winner is the default with warm caches"
    # the fake: 122 s cold, 78 s warm (fake_tunable_engine's stage costs)
    assert f"{122 / 78:.2f}x" in second and "122.0 s -> 78.0 s" in second


def test_resume_says_it_stopped_the_launcher_a_killed_session_left(tmp_path, capsys,
                                                                   monkeypatch):
    from tests.conftest import process_gone
    from tests.unit.tuning import test_standby_knob as sk
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    session, _store, _port = sk._session(tmp_path, model, budget=2)
    left = ts.SessionLauncher(session.spec, session.directory)
    assert left.ensure() is None  # as a tune killed with -9 leaves it
    (proc,) = sk._launchers_left(session.spec.id)
    monkeypatch.setattr(sk.tv, "verify", sk._quick_verify)
    code = main(["tune", "--store", str(tmp_path / "store.db"), "--resume", "--session",
                 session.spec.id, "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"stopped the standby launcher the interrupted session left (pid {proc.pid})" in err
    assert process_gone(proc.pid) and sk._launchers_left(session.spec.id) == []
