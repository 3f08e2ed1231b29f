"""The report's tune waterfall gives its ratios against the warm default, with intervals: the
figures tune itself prints for the same session (``tune --json``'s ``speedup.vs_warm`` and
``best.throughput_ratio``), not ratios to the cold default's serving."""

from __future__ import annotations

from pathlib import Path

import pytest

from coldscope.report.build import make_report
from coldscope.report.text import fmt_x
from coldscope.store.db import Store
from coldscope.tuning import session as ts
from coldscope.tuning.report import tune_result
from coldscope.tuning.search import Measurement, TrialRequest
from tests.fake_tunable_engine import FakeTunable
from tests.unit.report.test_sections import tune_run
from tests.unit.tuning.test_search import cpu_knobs


def _stored_session(store_path: Path, evicted: list[str]) -> tuple[ts.SessionSpec, object]:
    """A budget-12 search on the fake engine, its session file where the report looks for it
    and its start-ups in the store; ``evicted``: what each cold start-up had evicted."""
    fake = FakeTunable(noise=0.04, seed=3)

    def measure(req: TrialRequest) -> Measurement:
        m = fake(req)
        return m if req.seeded else m.evolve(evicted=evicted)

    spec = ts.SessionSpec(id="tune-1", created_at="2026-01-01T00:00:00+00:00", command=["x"],
                          budget=12, knobs=cpu_knobs())
    active = ts.ActiveSession(spec, ts.sessions_dir(store_path) / spec.id)
    outcome = ts.run_search(active, measure)
    with Store(store_path) as store:
        for t in active.spec.done:
            m = t.measurement
            if m.ok:
                store.add_run(tune_run(m.run_id, t.request.role, t.request.knobs,
                                       t.request.index, dict(m.stages), m.throughput))
    return active.spec, outcome


def _x(r: dict) -> str:
    return f"{fmt_x(r['value'])} [{fmt_x(r['low'])}, {fmt_x(r['high'])}]"


def test_waterfall_ratios_are_tunes_own_against_the_warm_default(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    spec, outcome = _stored_session(store, ["model", "engine python"])
    doc = tune_result(spec, outcome).to_json()  # what `tune --json` says of this session
    vs_warm, vs_cold = doc["speedup"]["vs_warm"], doc["speedup"]["vs_cold"]
    throughput = doc["best"]["throughput_ratio"]
    assert None not in (vs_warm["low"], throughput["low"])  # this session has intervals

    html, report = make_report(store_path=store)
    [w] = report.tune.waterfalls
    assert not w.inferred
    # the same ratios, taken from the stored runs: the best against the warm default's
    # start-ups the session judged it by
    for got, want in ((w.vs_warm, vs_warm), (w.vs_cold, vs_cold),
                      (w.steps[-1].throughput_vs_warm, throughput)):
        assert got is not None
        assert (got.value, got.low, got.high) == pytest.approx(
            (want["value"], want["low"], want["high"]))
    # ... and shown so, with their intervals and what they are against
    assert f"{_x(vs_warm)} vs running the default again" in html
    assert f"{_x(vs_cold)} vs a new node" in html  # its cold start-ups were evicted
    assert f"throughput {_x(throughput)} vs warm default" in html
    assert "throughput vs warm default (95 % interval), ratio" in html
    assert "of baseline" not in html


def test_waterfall_says_empty_engine_caches_when_nothing_was_evicted(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    spec, outcome = _stored_session(store, [])
    vs_cold = tune_result(spec, outcome).to_json()["speedup"]["vs_cold"]
    html, _ = make_report(store_path=store)
    assert f"{_x(vs_cold)} vs empty engine caches (warm machine)" in html
    assert "new node" not in html
