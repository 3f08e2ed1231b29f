"""The report in a real browser (Debian's Chromium, headless, network cut off): the page loads
with no console error and no request, every chart renders, hovering shows a bar's duration and
evidence source, and a full-page screenshot is kept in artifacts/ for people to look at."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from coldscope.report.build import build_report
from coldscope.report.html import render_report
from coldscope.report.paper import paper_records
from tests.browser import CHROMIUM
from tests.conftest import needs
from tests.unit.report.test_sections import _session, record

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO / "artifacts"
PAPER = REPO.parent / "shared" / "data" / "paper"

try:
    import websockets.sync.client  # noqa: F401  (the DevTools client of tests/browser.py)
    HAVE_WEBSOCKETS = True
except ImportError:
    HAVE_WEBSOCKETS = False

pytestmark = [
    needs(Path(CHROMIUM).exists(), f"{CHROMIUM} missing: apt-get install -y chromium"),
    needs(HAVE_WEBSOCKETS, "the DevTools client needs websockets (the dev extra)"),
]


@pytest.fixture(scope="module")
def browser():
    from tests.browser import Browser

    with Browser() as b:
        yield b


def write(tmp_path: Path, records, name: str, **kw) -> Path:
    report = build_report(records, **kw)
    path = tmp_path / name
    path.write_text(render_report(report, generated_at=datetime(2026, 1, 1, tzinfo=UTC)))
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


def test_tune_session_renders_as_a_waterfall(browser, tmp_path):
    """A store holding a tune session: its waterfall renders with a legend, one row per
    configuration (baseline, each kept change, best), each labelled with its throughput
    ratio, and no label overlaps another, a bar, or the chart's edge."""
    probe = browser.open(write(tmp_path, [record("p"), *_session()], "tune.html"))
    assert probe["errors"] == [] and probe["requests"] == [] and probe["empty_charts"] == 0
    assert "tune-1" in probe["figures"]
    got = browser.evaluate("""(() => {
      const f = document.querySelector('figure[data-chart="tune-1"]');
      f.scrollIntoView();
      const texts = [...f.querySelectorAll('svg text')].map(t => t.textContent);
      return {legend: [...f.querySelectorAll('.legend .key')].map(k => k.textContent),
              rows: texts.filter(t => t.startsWith('+ ') || t.startsWith('baseline')
                                      || t.startsWith('best')),
              ratios: texts.filter(t => t.startsWith('throughput ')),
              segs: f.querySelectorAll('svg .mark.seg').length,
              width: f.querySelector('svg').getBoundingClientRect().width};
    })()""")
    assert got["rows"] == ["baseline (default, cold)", "+ warm caches (the default run again)",
                           "+ eager", "best: 2 change(s)"]
    # against the warm default (t2: 104 tokens/s, one start-up: no interval), whose own row
    # reads "throughput: the reference"
    assert got["ratios"] == ["throughput 0.82× (no interval) vs warm default",
                             "throughput 0.82× (no interval) vs warm default"]
    assert "torch compile" in got["legend"] and any("slower" in k for k in got["legend"])
    assert got["segs"] >= 8 and got["width"] > 600
    assert browser.evaluate(OVERLAPS) == []
    browser.screenshot(ARTIFACTS / "report_tune.png")


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
    from coldscope.prediction.paper import paper_features
    recs = paper_records(PAPER)
    path = write(tmp_path, recs, "paper.html", features=paper_features(PAPER),
                 title="The paper's data")
    probe = browser.open(path)
    assert probe["errors"] == [] and probe["requests"] == []
    assert probe["empty_charts"] == 0
    assert "scaling" in probe["figures"] and sum(
        f.startswith("compare-") for f in probe["figures"]) >= 6
    browser.screenshot(ARTIFACTS / "report_paper.png")


def _findings_record(rid: str, **kw):
    return record(rid, findings=[
        {"id": "compile-cache-miss", "stage": "torch_compile", "seconds_at_stake": 4.0,
         "evidence": "torch.compile ran from scratch", "advice": "keep the compile cache"},
        {"id": "weights-cold", "stage": "model_loading", "seconds_at_stake": None,
         "evidence": "page cache was dropped", "advice": "prefetch the weights"}], **kw)


@pytest.fixture(scope="module")
def store_page(browser, tmp_path_factory):
    """The store report of three runs (two cold with findings, one warm), opened."""
    tmp = tmp_path_factory.mktemp("report")
    recs = [_findings_record("a"), _findings_record("b", scale=1.1),
            record("w", cache="warm", scale=0.6)]
    path = write(tmp, recs, "findings.html")
    probe = browser.open(path)
    assert probe["errors"] == []
    return path


def test_key_findings_lead_the_page(browser, store_page):
    got = browser.evaluate("""(() => {
      const first = document.querySelector('main section');
      return {id: first.id, text: first.innerText,
              findings: [...first.querySelectorAll('[data-finding]')].map(e => e.dataset.finding),
              top: first.getBoundingClientRect().top};
    })()""")
    assert got["id"] == "s-findings"
    # bootstrap is 10 of 18.5 s: the biggest stage, named first
    assert got["text"].index("bootstrap") < got["text"].index("torch compile")
    assert "54%" in got["text"].replace(" ", "")
    # findings by seconds at stake: the timed one first, then the untimed one
    assert got["findings"] == ["compile-cache-miss", "weights-cold"]
    assert "2 of 3 run(s)" in got["text"]
    # one warm run: no change is headlined (a headline needs two runs a side and an interval)
    assert "no change is headlined" in got["text"] and "warm vs cold" not in got["text"]


def test_a_change_is_headlined_from_two_runs_a_side(browser, tmp_path):
    recs = [_findings_record("a"), _findings_record("b", scale=1.1),
            record("w", cache="warm", scale=0.6), record("v", cache="warm", scale=0.62)]
    probe = browser.open(write(tmp_path, recs, "headline.html"))
    assert probe["errors"] == []
    text = browser.evaluate("document.querySelector('main section').innerText")
    # warm vs cold: mean 0.61 / mean 1.05 of the time to ready, with its interval
    assert "warm vs cold" in text and "0.58×" in text
    assert "interval 0.40×–0.97×" in text  # Fieller's, checked in tests/unit
    assert "over 1 pair(s) of at least 2 runs a side" in text


def test_every_chart_has_a_legend(browser, store_page):
    missing = browser.evaluate("""[...document.querySelectorAll('figure[data-chart]')]
      .filter(f => !f.querySelector('.legend .key')).map(f => f.dataset.chart)""")
    assert missing == []


def test_no_two_labels_of_a_chart_overlap(browser, tmp_path):
    """Every text element of every chart (ticks, captions, labels, values, marker names),
    laid out by the browser: no two intersect, none sits on a mark, none is clipped. Checked
    on the store's report (ready and first token 0.1 s apart) and on the paper's (many series
    and panels)."""
    pages = [write(tmp_path, [record("a"), record("b", scale=1.1),
                              record("w", cache="warm", scale=0.6)], "labels.html"),
             write(tmp_path, _session(), "tune-labels.html")]
    if PAPER.is_dir():
        from coldscope.prediction.paper import paper_features
        pages.append(write(tmp_path, paper_records(PAPER), "paper-labels.html",
                           features=paper_features(PAPER)))
    for path in pages:
        browser.open(path)
        clashes = browser.evaluate(OVERLAPS)
        assert clashes == [], f"{path.name}: {clashes[:5]}"


OVERLAPS = """(() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  const out = [];
  const hit = (a, b) => a.x + 0.5 < b.x + b.width && b.x + 0.5 < a.x + a.width &&
                        a.y + 0.5 < b.y + b.height && b.y + 0.5 < a.y + a.height;
  document.querySelectorAll('svg.chart').forEach((svg, k) => {
    const boxes = [...svg.querySelectorAll('text')]
      .filter(t => t.getAttribute('display') !== 'none' && t.textContent.trim())
      .filter(t => !t.getAttribute('transform'))  // rotated axis captions sit apart
      .filter(t => !t.classList.contains('inbar'))  // written inside their own bar
      .map(t => ({t: t.textContent, b: t.getBBox()}));
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++)
      if (hit(boxes[i].b, boxes[j].b)) out.push(`chart ${k}: "${boxes[i].t}" / "${boxes[j].t}"`);
    // inside the chart (nothing clipped at its edges)
    const vb = svg.viewBox.baseVal;
    for (const o of boxes)
      if (o.b.x < -0.5 || o.b.y < -0.5 || o.b.x + o.b.width > vb.width + 0.5 ||
          o.b.y + o.b.height > vb.height + 0.5) out.push(`chart ${k}: "${o.t}" clipped`);
    // nor on a data mark or a fitted line
    const marks = [...svg.querySelectorAll('.mark, line.fit, line.marker')].map(m => m.getBBox());
    for (const o of boxes) for (const m of marks)
      if (hit(o.b, m)) { out.push(`chart ${k}: "${o.t}" on a mark`); break; }
  });
  return out;
})()"""


def test_time_to_ready_stays_in_view_when_tables_scroll(browser, tmp_path):
    """A narrow window and a wide runs table: scrolled all the way right and all the way left,
    the time-to-ready column is inside the table's visible box both times."""
    recs = [record(f"r{i}", model=f"model-{i}", label=f"label-{i}") for i in range(3)]
    browser.call("Emulation.setDeviceMetricsOverride", width=700, height=900,
                 deviceScaleFactor=1, mobile=False)
    try:
        browser.open(write(tmp_path, recs, "wide.html"))
        got = browser.evaluate("""(() => {
          const det = document.querySelector('details.runs'); det.open = true;
          const wrap = det.querySelector('.table-wrap');
          const cell = () => wrap.querySelector('tbody tr td:last-child').getBoundingClientRect();
          const box = () => wrap.getBoundingClientRect();
          const res = {scrollable: wrap.scrollWidth > wrap.clientWidth + 10};
          wrap.scrollLeft = 0;
          let c = cell(), b = box();
          res.left = c.left >= b.left - 1 && c.right <= b.right + 1;
          wrap.scrollLeft = wrap.scrollWidth;
          c = cell(); b = box();
          res.right = c.left >= b.left - 1 && c.right <= b.right + 1;
          res.header = wrap.querySelector('thead th:last-child').textContent;
          return res;
        })()""")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    assert got == {"scrollable": True, "left": True, "right": True, "header": "time to ready s"}


def test_cpu_charts_have_a_colour_scale(browser, store_page):
    got = browser.evaluate("""[...document.querySelectorAll('figure[data-chart^="cpu-"] svg')]
      .map(s => ({swatches: s.querySelectorAll('rect.scale').length,
                  labels: [...s.querySelectorAll('text')].map(t => t.textContent)}))""")
    assert got
    for chart in got:
        assert chart["swatches"] == 10
        assert "CPU busy (%)" in chart["labels"] and "100" in chart["labels"]


def test_gantt_zooms_on_drag_and_resets_on_double_click(browser, store_page):
    browser.open(store_page)
    where = browser.evaluate("""(() => {
      const svg = document.querySelector('details[open] svg.gantt');
      svg.scrollIntoView({block: 'center'});
      const r = svg.getBoundingClientRect(), k = r.width / svg.viewBox.baseVal.width;
      const left = +svg.dataset.left, right = +svg.dataset.right;
      const at = f => r.left + (left + f * (right - left)) * k;
      const bar = svg.querySelector('.bar.sub');
      return {x0: at(0.25), x1: at(0.5), y: r.top + r.height / 2,
              width: +bar.getAttribute('width'),
              ticks: [...svg.querySelectorAll('g.xaxis text.tick')].map(t => t.textContent)};
    })()""")
    for kind, x in (("mousePressed", where["x0"]), ("mouseMoved", where["x1"]),
                    ("mouseReleased", where["x1"])):
        browser.call("Input.dispatchMouseEvent", type=kind, x=x, y=where["y"], button="left",
                     clickCount=1)
    zoomed = browser.evaluate("""(() => {
      const svg = document.querySelector('details[open] svg.gantt');
      const reset = svg.closest('figure').querySelector('button.zoomreset');
      return {zoomed: svg.dataset.zoomed, reset_hidden: reset.hidden,
              width: +svg.querySelector('.bar.sub').getAttribute('width'),
              ticks: [...svg.querySelectorAll('g.xaxis text.tick')].map(t => t.textContent)};
    })()""")
    assert zoomed["zoomed"] == "1" and not zoomed["reset_hidden"]
    assert zoomed["width"] == pytest.approx(4 * where["width"], rel=0.05)  # a quarter of the span
    assert zoomed["ticks"] != where["ticks"]
    browser.call("Input.dispatchMouseEvent", type="mousePressed", x=where["x0"], y=where["y"],
                 button="left", clickCount=2)
    browser.call("Input.dispatchMouseEvent", type="mouseReleased", x=where["x0"], y=where["y"],
                 button="left", clickCount=2)
    back = browser.evaluate("""(() => {
      const svg = document.querySelector('details[open] svg.gantt');
      return {zoomed: svg.dataset.zoomed,
              width: +svg.querySelector('.bar.sub').getAttribute('width'),
              ticks: [...svg.querySelectorAll('g.xaxis text.tick')].map(t => t.textContent)};
    })()""")
    assert back["zoomed"] == "0"
    assert back["width"] == pytest.approx(where["width"], rel=0.01)
    assert back["ticks"] == where["ticks"]
