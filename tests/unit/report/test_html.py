"""The page: well-formed inline SVG, no external resource, CSV links that carry the data, and
the CLI's errors; checked by parsing the output, not by looking at it."""

from __future__ import annotations

import re
import urllib.parse
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from coldscope.cli.main import main
from coldscope.report.build import build_report
from coldscope.report.html import render_report
from coldscope.report.paper import paper_records
from coldscope.report.sections.tune import tune_knobs
from coldscope.report.svg import nice_ticks
from coldscope.store.db import Store
from tests.unit.report.test_sections import PAPER, _session, record

SVG_NS = "{http://www.w3.org/2000/svg}"


def page(records, **kw) -> str:
    report = build_report(records, **kw)
    return render_report(report, generated_at=datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture
def two_runs():
    return [record("a"), record("b", scale=1.1), record("w", cache="warm", scale=0.6)]


def test_every_chart_is_well_formed_svg_with_marks(two_runs):
    html = page(two_runs)
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    assert len(svgs) >= 4  # breakdown, 2 timelines, comparison, cpu
    for markup in svgs:
        root = ET.fromstring(markup)
        assert root.tag == SVG_NS + "svg"
        marks = [e for e in root.iter() if "mark" in (e.get("class") or "").split()]
        assert marks, "a chart without any data mark"


def test_page_is_self_contained(two_runs):
    html = page(two_runs)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<script src" not in html and "<link" not in html
    assert "@import" not in html


def test_csv_link_carries_the_breakdown(two_runs):
    html = page(two_runs)
    m = re.search(r'download="breakdown-1.csv" href="data:text/csv;charset=utf-8,([^"]*)"', html)
    text = urllib.parse.unquote(m.group(1).replace("&amp;", "&"))
    lines = text.strip().splitlines()
    assert lines[0].startswith("configuration,runs,bootstrap_mean_s")
    cold = lines[1].split(",")
    assert cold[0] == "cold" and cold[1] == "2"
    assert float(cold[2]) == pytest.approx((10 + 11) / 2)


def test_hover_text_names_duration_and_source(two_runs):
    html = page(two_runs)
    assert "model_loading/weights — 1.00 s" in html
    assert "source: span · worker pid 3" in html


def test_nice_ticks_cover_the_range():
    for lo, hi in ((0, 78.4), (0, 0.0012), (0, 1), (0, 456)):
        t = nice_ticks(lo, hi)
        assert t[0] <= lo and t[-1] >= hi
        steps = {round(b - a, 12) for a, b in zip(t, t[1:], strict=False)}
        assert len(steps) == 1


def test_cli_writes_report_from_store(tmp_path, two_runs, capsys):
    store = tmp_path / "s.db"
    with Store(store) as s:
        for r in two_runs:
            s.add_run(r)
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "-o", str(out), "--runs", "warm",
                 "--json"]) == 0
    assert '"runs": 1' in capsys.readouterr().out
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", "--store", str(store), "-o", str(out), "--model", "nope"]) == 2
    assert "no successful runs match --model nope" in capsys.readouterr().err
    assert main(["report", "--paper", str(tmp_path / "missing"), "-o", str(out)]) == 2
    assert main(["report", "--store", str(tmp_path / "none.db"), "-o", str(out)]) == 2


def test_report_progress_phases_and_when_it_shows(tmp_path, two_runs):
    """make_report names each phase with a growing fraction; the CLI draws it only on a
    terminal, without --json, for a store of at least ``LARGE_STORE`` runs."""
    import io

    from rich.console import Console

    from coldscope.cli.report import report_progress
    from coldscope.report.build import make_report
    store = tmp_path / "s.db"
    with Store(store) as s:
        for r in two_runs:
            s.add_run(r)
    seen = []
    make_report(store_path=store, progress=lambda what, f: seen.append((what, f)))
    assert seen[0] == ("reading 3 runs", 0.0) and seen[-1] == ("done", 1.0)
    assert [f for _, f in seen] == sorted(f for _, f in seen)
    assert any(w.startswith("building charts of 3 runs") for w, _ in seen)

    def shown(**kw) -> str:
        buf = io.StringIO()
        out = Console(file=buf, force_terminal=kw.pop("tty", True), width=100)
        with report_progress(out, store_path=store, **kw) as progress:
            if progress is not None:
                make_report(store_path=store, progress=progress)
        return buf.getvalue()

    assert "report:" in shown(as_json=False, large=2)
    assert shown(as_json=True, large=2) == ""  # --json
    assert shown(as_json=False, large=2, tty=False) == ""  # piped
    assert shown(as_json=False) == ""  # 3 runs: a small store


@pytest.mark.skipif(not PAPER.is_dir(), reason="../shared/data/paper not present")
def test_every_axis_caption_and_numeric_header_has_a_unit(two_runs):
    """Axis captions say their unit; numeric table headers end in one (s, %, ×) or count."""
    from coldscope.prediction.paper import paper_features
    pages = [page(two_runs), page(paper_records(PAPER), features=paper_features(PAPER)),
             page(_session())]
    units = ("(s)", "(%)", "(GB)", "(MiB)", "(log scale)", "seconds")
    for html in pages:
        for markup in re.findall(r"<svg .*?</svg>", html, flags=re.S):
            for cap in ET.fromstring(markup).iter(SVG_NS + "text"):
                if "caption" in (cap.get("class") or "").split():
                    assert any(u in cap.text for u in units), cap.text
        for head in re.findall(r'<th scope="col" class="num[^"]*">([^<]*)</th>', html):
            head = head.replace("&amp;", "&")
            assert head.endswith((" s", "%", "ratio", "runs", "samples", "Pearson r",
                                  "inside")) or "(s per" in head or head == "n", head


def _write_session(store_path, last_kept: bool):
    """A session file for ``_session()``'s runs without their confirm: the budget ran out
    after the mp trial, which only the file says was kept (or not)."""
    from coldscope.analysis.comparison import ratio_interval
    from coldscope.engines.knobs import Knob
    from coldscope.tuning.search import Baseline, Outcome, TrialRow
    from coldscope.tuning.session import SessionSpec, save, sessions_dir
    runs = _session()[:-1]
    rows = [TrialRow(trial=r.campaign.trial, role=r.campaign.role, change=r.campaign.change,
                     knobs=tune_knobs(r), cache="seeded" if r.campaign.trial > 1 else "cold",
                     run_id=r.id, ok=True, time_to_ready_s=r.time_to_ready_s,
                     kept={"r5": True, "t6": last_kept}.get(r.id))
            for r in runs]
    best = ["warm", "eager", "mp"] if last_kept else ["warm", "eager"]
    outcome = Outcome(cold=Baseline(time_to_ready_s=76.0, runs=["b1", "b2"], times=[72, 80]),
                      warm=Baseline(time_to_ready_s=50.0, runs=["t2"], times=[50.0]),
                      best_knobs=best, best_s=13.0, best_runs=[], best_selected_by=["t6"],
                      best_confirmed=False, best_seeded=True,
                      vs_cold=ratio_interval([72, 80], [13.0]), vs_warm=None,
                      throughput_ratio=None, throughput_limit=None, greedy_match=True,
                      output_change_allowed=False, spread=0.1, used=7, budget=7, rows=rows,
                      skipped=[], stopped="budget of 7 start-ups spent")
    knobs = [Knob(name=n, stage="bootstrap", description=f"what {n} does", tradeoff="")
             for n in ("warm", "eager", "mp")]
    spec = SessionSpec(id="tune-1", created_at="2026-01-01T00:00:00+00:00", command=["x"],
                       budget=7, knobs=knobs, outcome=outcome.model_dump(mode="json"))
    save(spec, sessions_dir(store_path) / "tune-1")
    return runs


@pytest.mark.parametrize("last_kept", [True, False])
def test_report_reads_a_tune_sessions_kept_changes_from_its_file(tmp_path, capsys,
                                                                  last_kept):
    """The session file decides what was kept: here, the last trial, which its runs alone
    cannot tell; without the file the report reads the runs, and says so."""
    from coldscope.report.build import make_report
    store = tmp_path / "s.db"
    runs = _write_session(store, last_kept)
    with Store(store) as s:
        for r in runs:
            s.add_run(r)
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "-o", str(out), "--json"]) == 0
    html, report = make_report(store_path=store)
    [w] = report.tune.waterfalls
    assert w.steps[-1].knobs == (("warm", "eager", "mp") if last_kept else
                                 ("warm", "eager"))
    assert not w.inferred and w.steps[1].description == "what warm does"
    assert 'id="s-tune"' in html and 'data-chart="tune-1"' in html
    assert '"tune_sessions": 1' in capsys.readouterr().out
    (tmp_path / "tune" / "tune-1" / "session.json").unlink()
    _, report = make_report(store_path=store)
    assert report.tune.waterfalls[0].inferred
    assert [s.knobs for s in report.tune.waterfalls[0].steps][-1] == ("warm", "eager")
    assert any("no session file" in n for n in report.notes)


def test_tune_waterfall_chart_spans_baseline_to_best(two_runs):
    """The waterfall's rows, as drawn: the baseline's and the best's bars end at their time
    to ready, each step's savings span from the previous time to ready to its own."""
    html = page([*two_runs, *_session()])
    assert 'id="s-tune"' in html
    markup = re.search(r'<figure class="figure" id="tune-1".*?(<svg .*?</svg>)', html,
                       flags=re.S).group(1)
    root = ET.fromstring(markup)
    texts = [t.text for t in root.iter(SVG_NS + "text")]
    assert "+ warm caches (the default run again)" in texts and "+ eager" in texts
    assert "best: 2 change(s)" in texts
    # ratios against the warm default (t2: 50 s, 104 tokens/s), which is the reference
    assert "throughput: the reference" in texts
    assert "throughput 0.82× (no interval) vs warm default" in texts  # eager: 85 / 104
    assert "−26.0 s → 50.0 s" in texts
    assert "33.0 s · 1.52× (no interval) faster than warm default" in texts  # 50 / 33
    ticks = {t.text: float(t.get("x")) for t in root.iter(SVG_NS + "text")
             if t.get("class") == "tick" and t.text in ("0", "80")}

    def px(v: float) -> float:
        return ticks["0"] + v / 80 * (ticks["80"] - ticks["0"])

    def span(prefix: str) -> tuple[float, float]:
        rects = [r for r in root.iter(SVG_NS + "rect")
                 if (r.findtext(SVG_NS + "title") or "").startswith(prefix)]
        assert rects, prefix
        return (min(float(r.get("x")) for r in rects),
                max(float(r.get("x")) + float(r.get("width")) for r in rects))

    assert span("warm caches (the default run again): ") == pytest.approx(
        (px(50.0), px(76.0)), abs=0.2)
    # eager saves 20 s of compile, leftwards from 50 s; its 2 s more bootstrap and 1 s more
    # server_ready are added back on the thin bar, ending at its 33 s
    assert span("eager: torch compile saved") == pytest.approx((px(30.0), px(50.0)), abs=0.2)
    assert span("eager: bootstrap 2.00 s slower") == pytest.approx((px(30.0), px(32.0)),
                                                                   abs=0.2)
    assert span("eager: server ready 1.00 s slower") == pytest.approx((px(32.0), px(33.0)),
                                                                      abs=0.2)
    assert span("best: 2 change(s)") == pytest.approx((px(0.0), px(33.0)), abs=0.2)
    assert page(two_runs).count('id="s-tune"') == 0  # no tune session, no section
