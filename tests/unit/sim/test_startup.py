"""Cold-start distributions against the paper's files and closed forms."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coldscope.cli.main import main
from coldscope.core.interval import Interval
from coldscope.core.records import Run
from coldscope.planning.result import read_plan
from coldscope.prediction.core import Prediction
from coldscope.sim import startup as st
from coldscope.util.errors import ColdscopeError

PAPER = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "paper"


def test_paper_default_is_the_measured_h100_runs():
    values = []
    for i in range(1, 6):
        f = PAPER / "figures" / "figure-rest" / "iterations" / str(i) / "comparison_results.json"
        values += [round(x, 2) for x in json.loads(f.read_text())["data"]["actual_total_time"]
                   if x is not None]
    assert sorted(values) == sorted(st.PAPER_H100_TIME_TO_READY_S)
    d = st.paper_default()
    assert "default" in d.source
    draws = [d.sample(np.random.default_rng(k)) for k in range(50)]
    assert set(draws) <= set(values)


def _prediction(total_s: float, low: float, high: float) -> Prediction:
    return Prediction(total_s=total_s, interval=Interval(low=low, high=high), stages={})


def test_lognormal_from_a_prediction_matches_its_interval():
    pred = _prediction(40.0, 20.0, 80.0)
    d = st.from_prediction(pred, "test")
    assert d.quantile(0.5) == pytest.approx(40.0)
    assert d.quantile(0.05) == pytest.approx(20.0, rel=1e-6)
    assert d.quantile(0.95) == pytest.approx(80.0, rel=1e-6)
    rng = np.random.default_rng(1)
    many = np.array([d.sample(rng) for _ in range(20000)])
    assert np.mean((many >= 20) & (many <= 80)) == pytest.approx(0.9, abs=0.01)


def test_prediction_interval_touching_zero_keeps_a_spread():
    d = st.from_prediction(_prediction(10.0, 0.0, 20.0), "t")
    assert d.low > 0 and d.quantile(0.95) == pytest.approx(20.0, rel=1e-6)


def test_plan_store_and_mitigation(tmp_path, capsys):
    path = tmp_path / "plan.json"
    assert main(["plan", "--params", "70B", "--no-store", "-o", str(path)]) == 0
    capsys.readouterr()
    total = json.loads(path.read_text())["total_s"]
    plan = st.from_plan(read_plan(path), "plan.json")
    assert (plan.quantile(0), plan.quantile(1)) == (total["low"], total["high"])
    assert plan.source == "plan plan.json"
    bad = tmp_path / "x.json"
    bad.write_text('{"total": 3}')
    with pytest.raises(ColdscopeError, match="not a plan"):
        read_plan(bad)
    # a plan missing a field the record needs is named, not half-read
    data = json.loads(path.read_text())
    del data["parts"]
    bad.write_text(json.dumps(data))
    with pytest.raises(ColdscopeError, match="not a plan: parts"):
        read_plan(bad)
    runs = [Run(id=f"r{i}", status=status, time_to_ready_s=ttr, started_at="2026-01-01")
            for i, (status, ttr) in enumerate((("ok", 75.0), ("failed", None), ("ok", 81.0)))]
    emp = st.from_store_runs(runs, "store")
    assert sorted(emp.values) == [75.0, 81.0]
    with pytest.raises(ColdscopeError, match="no successful runs"):
        st.from_store_runs(runs[1:2], "store")
    m = st.mitigate(st.Fixed(40.0), scale=0.5, extra_s=100.0)
    assert m.sample(np.random.default_rng(0)) == 120.0
    assert st.mitigate(plan) is plan


def test_bad_values_are_errors():
    with pytest.raises(ColdscopeError):
        st.Fixed(-1.0)
    with pytest.raises(ColdscopeError):
        st.LogNormal(10.0, 20.0, 30.0, "t")
