"""The page: well-formed inline SVG, no external resource, CSV links that carry the data, and
the CLI's errors; checked by parsing the output, not by looking at it."""

from __future__ import annotations

import re
import urllib.parse
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from coldscope.cli.main import main
from coldscope.report import data as d
from coldscope.report.html import nice_ticks, render_report
from coldscope.store import Store
from tests.unit.test_report_data import PAPER, record

SVG_NS = "{http://www.w3.org/2000/svg}"


def page(records, **kw) -> str:
    data = d.build_report_data(records, **kw)
    return render_report(data, generated_at=datetime(2026, 1, 1, tzinfo=UTC))


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
    from coldscope.predict.paper import paper_features

    pages = [page(two_runs), page(d.paper_records(PAPER), features=paper_features(PAPER))]
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
