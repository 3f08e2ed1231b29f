"""The report in a real browser (Debian's Chromium, headless, network cut off): the page loads
with no console error and no request, every chart renders, hovering shows a bar's duration and
evidence source, and a full-page screenshot is kept in artifacts/ for people to look at."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from coldscope.report import data as d
from tests.browser import CHROMIUM
from coldscope.report.html import render_report
from tests.unit.test_report_data import record

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"
PAPER = REPO.parent / "shared" / "data" / "paper"

pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"{CHROMIUM} missing: apt-get install -y chromium"),
]
pytest.importorskip("websockets.sync.client", reason="the DevTools client needs websockets")


@pytest.fixture(scope="module")
def browser():
    from tests.browser import Browser

    with Browser() as b:
        yield b


def write(tmp_path: Path, records, name: str, **kw) -> Path:
    data = d.build_report_data(records, **kw)
    path = tmp_path / name
    path.write_text(render_report(data, generated_at=datetime(2026, 1, 1, tzinfo=UTC)))
    return path


def test_store_report_renders_offline_without_errors(browser, tmp_path):
    recs = [record("a"), record("b", scale=1.1), record("w", cache="warm", scale=0.6)]
    probe = browser.open(write(tmp_path, recs, "store.html"))
    assert probe["errors"] == []
    assert probe["requests"] == []
    assert probe["script_ready"]  # the inlined script ran to its end
    assert probe["charts"] >= 4 and probe["empty_charts"] == 0
    for chart in ("breakdown-1", "timeline-1", "compare-1", "cpu-1"):
        assert chart in probe["figures"]
    assert probe["csv_links"] == len(probe["figures"]) + 1  # + the runs table
    browser.screenshot(ARTIFACTS / "report_store.png")

    # hover the sub-step bar of the open timeline: the tooltip names duration and source
    rect = browser.evaluate("""(() => {
      const el = [...document.querySelectorAll('details[open] svg.gantt .bar.sub')].find(
        e => e.querySelector('title').textContent.startsWith('model_loading/weights'));
      el.scrollIntoView({block: 'center'});
      const s = el.getBoundingClientRect();
      return {x: s.x + s.width / 2, y: s.y + s.height / 2};
    })()""")
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=rect["x"], y=rect["y"])
    tip = browser.evaluate("(() => { const t = document.getElementById('tip');"
                           " return {hidden: t.hidden, text: t.textContent}; })()")
    assert not tip["hidden"]
    assert "model_loading/weights — 1.00 s" in tip["text"] and "source: span" in tip["text"]


def test_harness_sees_errors_and_requests(browser, tmp_path):
    """The checks above can fail: a broken script and an external image are caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><svg class="chart"></svg><img src="http://example.com/x.png">'
                   "<script>undefinedFunction()</script></body></html>")
    probe = browser.open(bad)
    assert any("undefinedFunction is not defined" in e for e in probe["errors"])
    assert probe["requests"] == ["http://example.com/x.png"]
    assert probe["empty_charts"] == 1


@pytest.mark.skipif(not PAPER.is_dir(), reason="../shared/data/paper not present")
def test_paper_report_renders(browser, tmp_path):
    from coldscope.predict.paper import paper_features

    recs = d.paper_records(PAPER)
    path = write(tmp_path, recs, "paper.html", features=paper_features(PAPER),
                 title="The paper's data")
    probe = browser.open(path)
    assert probe["errors"] == [] and probe["requests"] == []
    assert probe["empty_charts"] == 0
    assert "scaling" in probe["figures"] and sum(
        f.startswith("compare-") for f in probe["figures"]) >= 6
    browser.screenshot(ARTIFACTS / "report_paper.png")
