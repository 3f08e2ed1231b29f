"""The comparison core (coldscope.analysis.comparison) against independent answers: a Welch interval
worked by hand from its closed form, coverage on simulated data, and datasets whose answer is
known by construction."""

import math
import random

import jsonschema
import pytest
from scipy.stats import t as student_t

from coldscope.analysis.comparison import (
    Prime,
    compare,
    parse_threshold,
    practical_size,
    ratio_interval,
    regression,
    row,
    sample_of,
    welch_interval,
)
from coldscope.cli.schema import schema_of
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.util.errors import ColdscopeError


def by_hand(a, b, confidence=0.95):
    """Welch's interval from its textbook form: se² = s²a/na + s²b/nb, Welch–Satterthwaite df,
    delta ± t(df) · se."""
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    se2 = va / na + vb / nb
    df = se2 ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    half = student_t.ppf(0.5 + confidence / 2, df) * math.sqrt(se2)
    return mb - ma, mb - ma - half, mb - ma + half


def run(i, ttr, stages, *, na=(), substeps=None, cache="warm", status="ok", config="k"):
    full = dict.fromkeys(BUCKETS)
    full.update(stages)
    return Run(id=f"r{i}", status=status, cache=cache, time_to_ready_s=ttr, stages=full,
               substeps=substeps or {}, not_applicable=list(na), config_key=config,
               started_at=f"2026-01-01T00:00:{i:02d}")


def test_welch_interval_matches_the_closed_form_on_tiny_data():
    a, b = [10.0, 12.0, 11.0], [14.0, 15.0, 17.0]
    iv = welch_interval(a, b)
    delta, low, high = by_hand(a, b)
    assert row(a, b).delta == pytest.approx(delta)
    assert (iv.low, iv.high) == (pytest.approx(low), pytest.approx(high))
    # the row's bounds, flat in its JSON, are the same interval as a record
    r = row(a, b).interval
    assert r is not None and (r.low, r.high) == (pytest.approx(low), pytest.approx(high))
    assert row(a, b[:1]).interval is None
    # the numbers themselves: delta 4.333, df 3.448, t 2.9597... -> ±3.12 (worked out once)
    assert delta == pytest.approx(13 / 3)
    assert high - low == pytest.approx(2 * 3.12, abs=0.02)
    # unequal counts and a 90 % interval
    a, b = [1.0, 1.5, 0.7, 1.2], [2.0, 2.9]
    iv = welch_interval(a, b, confidence=0.9)
    assert (iv.low, iv.high) == tuple(pytest.approx(x) for x in by_hand(a, b, 0.9)[1:])


def test_welch_interval_covers_the_true_difference_about_95_percent_of_the_time():
    rng = random.Random(7)
    covered, trials = 0, 1000
    for _ in range(trials):
        a = [rng.gauss(40.0, 3.0) for _ in range(3)]
        b = [rng.gauss(38.0, 1.0) for _ in range(4)]  # true delta -2, unequal spreads
        iv = welch_interval(a, b)
        covered += iv.low <= -2.0 <= iv.high
    assert 0.93 <= covered / trials <= 0.97


def test_clearly_slower_b_is_slower_identical_sides_unresolved():
    a = [run(i, 30.0 + d, {"bootstrap": 20.0 + d, "torch_compile": 10.0})
         for i, d in enumerate((0.0, 0.4, -0.3))]
    b = [run(10 + i, 36.0 + d, {"bootstrap": 26.0 + d, "torch_compile": 10.0})
         for i, d in enumerate((0.2, -0.1, 0.3))]
    result = compare(a, b)
    assert result.time_to_ready.verdict == "slower"
    assert result.stages["bootstrap"].verdict == "slower"
    assert result.time_to_ready.low > 0
    assert result.stages["bootstrap"].delta == pytest.approx(6.0 + (0.4 - 0.1) / 3)
    # torch_compile is the same constant on both sides: a point interval at 0, not a difference
    tc = result.stages["torch_compile"]
    assert (tc.delta, tc.low, tc.high, tc.verdict) == (0.0, 0.0, 0.0, "unresolved")
    same = compare(a, [run(20 + i, r.time_to_ready_s, r.stages) for i, r in enumerate(a)])
    assert same.time_to_ready.verdict == "unresolved"
    assert same.time_to_ready.delta == pytest.approx(0.0)
    assert same.time_to_ready.note == "the interval holds 0"
    assert result.order == ["a", "a", "a", "b", "b", "b"]  # by started_at


def test_a_stage_that_does_not_apply_counts_as_zero_and_an_unknown_one_is_left_out():
    compiled = [run(i, 45.0 + i, {"bootstrap": 25.0, "torch_compile": 13.0 + i / 2,
                                  "tokenizer": 1.0}) for i in range(3)]
    eager = [run(10 + i, 31.0 + i / 3, {"bootstrap": 25.0 + i / 3, "tokenizer": None},
                 na=["torch_compile"]) for i in range(3)]
    result = compare(compiled, eager)
    tc = result.stages["torch_compile"]
    assert tc.b_mean == 0.0 and tc.b_n == 3
    assert tc.delta == pytest.approx(-13.5)
    assert tc.verdict == "faster" and tc.high < 0
    _, low, high = by_hand([13.0, 13.5, 14.0], [0.0, 0.0, 0.0])  # one side constant
    assert (tc.low, tc.high) == (pytest.approx(low), pytest.approx(high))
    tok = result.stages["tokenizer"]  # unknown in eager runs: no values, not zeros
    assert (tok.a_n, tok.b_n, tok.b_mean, tok.verdict) == (3, 0, None, "unresolved")


def test_substeps_missing_from_a_run_whose_stage_is_known_count_as_zero():
    a = [run(i, 30.0, {"bootstrap": 20.0}, substeps={"bootstrap/model_inspect": 9.0 + i})
         for i in range(3)]
    b = [run(10 + i, 21.0, {"bootstrap": 11.0}) for i in range(3)]
    result = compare(a, b)
    s = result.substeps["bootstrap/model_inspect"]
    assert (s.a_mean, s.b_mean, s.b_n) == (10.0, 0.0, 3)
    assert s.verdict == "faster"


def test_fewer_than_two_runs_means_no_interval():
    result = compare([run(1, 30.0, {"bootstrap": 30.0})],
                     [run(2, 10.0, {"bootstrap": 10.0}), run(3, 11.0, {"bootstrap": 11.0})])
    ttr = result.time_to_ready
    assert (ttr.low, ttr.high, ttr.verdict) == (None, None, "unresolved")
    assert ttr.delta == pytest.approx(-19.5)
    assert "fewer than 2" in ttr.note
    assert any("a has 1 usable run" in n for n in result.notes)


def test_a_resolved_difference_below_the_practical_size_is_not_called_one():
    assert practical_size(None) == 0.05
    assert practical_size(20.0) == pytest.approx(0.2)
    r = row([10.00, 10.001, 10.002], [10.02, 10.021, 10.022], practical=practical_size(10.0))
    assert r.low > 0  # resolved ...
    assert r.verdict == "unresolved" and "practical size" in r.note  # ... but 0.02 s < 0.10 s
    r = row([10.00, 10.001, 10.002], [10.30, 10.301, 10.302], practical=0.1)
    assert r.verdict == "slower"


def test_failed_and_wrong_cache_runs_are_excluded_with_the_reason():
    a = [run(1, 30.0, {"bootstrap": 30.0}), run(2, 31.0, {"bootstrap": 31.0}),
         run(3, None, {}, status="failed"), run(4, 60.0, {"bootstrap": 60.0}, cache="cold")]
    b = [run(5, 30.0, {"bootstrap": 30.0}), run(6, 31.0, {"bootstrap": 31.0})]
    result = compare(a, b, cache="warm")
    assert result.a.n == 2 and result.a.runs == ["r1", "r2"]
    assert [e.id for e in result.a.excluded] == ["r3", "r4"]
    assert "not warm" in result.a.excluded[1].reason
    assert result.time_to_ready.a_mean == 30.5


def test_flat_bucket_dicts_are_runs_too():
    a = [{"bootstrap": 20.0 + i, "torch_compile": 10.0} for i in range(3)]
    b = [{"bootstrap": 20.0 + i, "torch_compile": 4.0 + i / 10} for i in range(3)]
    result = compare(a, b)
    assert result.time_to_ready.a_mean == pytest.approx(31.0)  # the sum of its buckets
    assert result.stages["torch_compile"].verdict == "faster"
    assert sample_of({"bootstrap": 1.0, "time_to_ready": 3.0}).time_to_ready == 3.0
    with pytest.raises(ColdscopeError, match="not a bucket"):
        sample_of({"bootstap": 1.0})


def test_mixed_configurations_in_a_side_are_noted():
    a = [run(1, 30.0, {"bootstrap": 30.0}, config="x"),
         run(2, 31.0, {"bootstrap": 31.0}, config="y")]
    result = compare(a, a[:1] + [run(3, 30.5, {"bootstrap": 30.5}, config="x")])
    assert any("a mixes 2 configurations" in n for n in result.notes)


@pytest.mark.parametrize("text, seconds", [("2s", 2.0), ("2", 2.0), (" 1.5 s", 1.5),
                                           ("5%", 2.0), (".5%", 0.2)])
def test_threshold_in_seconds_or_percent_of_a(text, seconds):
    assert parse_threshold(text).seconds(40.0) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "-2s", "2 ms", "nan", "1e400"])
def test_bad_thresholds_are_refused(text):
    with pytest.raises(ColdscopeError):
        parse_threshold(text)


def test_regression_gate_uses_the_low_end_of_the_interval():
    a = [run(i, 40.0 + d, {"bootstrap": 40.0 + d}) for i, d in enumerate((0.0, 0.5, -0.5))]
    b = [run(10 + i, 44.0 + d, {"bootstrap": 44.0 + d}) for i, d in enumerate((0.0, 0.5, -0.5))]
    result = compare(a, b)
    low = result.time_to_ready.low
    assert low == pytest.approx(4.0 - 2.776 * math.sqrt(0.25 / 3 * 2), abs=1e-3)  # df 4
    _, by_hand_low, _ = by_hand([r.time_to_ready_s for r in a], [r.time_to_ready_s for r in b])
    assert low == pytest.approx(by_hand_low)
    assert regression(result, parse_threshold("2s")) is not None
    assert regression(result, parse_threshold(f"{low + 0.01:.3f}s")) is None
    assert regression(result, parse_threshold("5%")) is not None   # 2 s of a's 40 s
    assert regression(result, parse_threshold("10%")) is None      # 4 s
    assert regression(compare(b, a), parse_threshold("0")) is None  # faster never fails


def test_the_json_matches_its_published_schema():
    a = [run(i, 30.0 + i, {"bootstrap": 30.0 + i}) for i in range(2)]
    b = [run(5 + i, 20.0 + i, {"bootstrap": 20.0 + i}) for i in range(3)]
    result = compare(a, b, cache="warm", order=["a", "b", "a", "b", "b"],
                     primes=[Prime(side="a", run="p1", status="ok")],
                     a_info={"command": "python -m x", "env": {"A": "1"}})
    doc = result.to_json()
    jsonschema.validate(doc, schema_of("compare"))
    assert list(doc)[:7] == ["schema_version", "order", "primes", "a", "b", "stages",
                             "substeps"]
    assert set(doc["stages"]) == set(BUCKETS)
    assert set(doc["stages"]["bootstrap"]) >= {"a_mean", "b_mean", "delta", "low", "high",
                                               "verdict"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "time_to_ready": {**doc["time_to_ready"],
                                                      "verdict": "maybe"}},
                            schema_of("compare"))


# -- ratios (speed-ups, throughput ratios) -------------------------------------------------------


def by_inversion(num, den, confidence=0.95):
    """Fieller's set by brute force: the rho on a fine grid that scipy's own Welch test of
    ``num`` against ``rho * den`` does not reject (its degrees of freedom taken at each rho)."""
    from scipy.stats import ttest_ind

    value = (sum(num) / len(num)) / (sum(den) / len(den))
    grid = [value * (0.2 + i * 0.0005) for i in range(6000)]
    kept = [r for r in grid if ttest_ind(num, [r * y for y in den],
                                         equal_var=False).pvalue >= 1 - confidence]
    return min(kept), max(kept)


def test_ratio_interval_matches_the_inverted_welch_test():
    cases = [([46.0, 40.0, 44.0], [17.0, 16.0, 18.0]),  # a speed-up: warm default / winner
             ([80.0, 70.0, 77.0], [16.8, 17.9]),
             ([0.93, 0.95, 0.91, 0.94], [1.0, 1.02, 0.98])]  # a throughput ratio
    for num, den in cases:
        r = ratio_interval(num, den)
        low, high = by_inversion(num, den)
        assert r.value == pytest.approx((sum(num) / len(num)) / (sum(den) / len(den)))
        assert r.low <= r.value <= r.high
        # the df is taken at the estimate rather than at each rho: equal to within 2 %
        assert (r.low, r.high) == (pytest.approx(low, rel=0.02), pytest.approx(high, rel=0.02))


def test_ratio_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = random.Random(11)
    covered, trials = 0, 1500
    for _ in range(trials):
        num = [rng.gauss(40.0, 4.0) for _ in range(3)]  # warm default: true mean 40 s
        den = [rng.gauss(16.0, 1.5) for _ in range(3)]  # winner: 16 s, so the ratio is 2.5
        r = ratio_interval(num, den)
        covered += r.low <= 2.5 <= r.high
    assert 0.93 <= covered / trials <= 0.975


def test_ratio_interval_edges():
    one = ratio_interval([10.0], [5.0, 5.5])
    assert one.value == pytest.approx(10 / 5.25) and one.low is None and "fewer than 2" in one.note
    flat = ratio_interval([10.0, 10.0], [5.0, 5.0])
    assert (flat.value, flat.low, flat.high) == (2.0, 2.0, 2.0)
    # a denominator whose mean is within its own noise of 0: no bounded interval
    loose = ratio_interval([10.0, 11.0, 9.0], [0.1, -0.2, 0.3])
    assert loose.low is None and "cannot be told from 0" in loose.note


def test_identical_saved_log_values_are_unresolved_not_a_point_interval():
    """Two saved logs a side on a 1 s clock, identical within each side (40, 40 s against
    41, 41 s): zero spread is no evidence. Each side's mean can be off by up to the clock's
    1 s, so the interval is at least delta ± 2 s = [-1, 3] s: unresolved, and the gate
    passes."""
    a = [run(i, 40.0, {"bootstrap": 40.0}) for i in range(2)]
    b = [run(10 + i, 41.0, {"bootstrap": 41.0}) for i in range(2)]
    result = compare(a, b)
    for r in (result.time_to_ready, result.stages["bootstrap"]):
        assert (r.delta, r.low, r.high, r.verdict) == (1.0, -1.0, 3.0, "unresolved")
    assert regression(result, parse_threshold("2%")) is None


def test_constant_sides_with_no_known_clock_give_no_verdict():
    """One value each side (a clock the values cannot reveal): the interval is the point, the
    verdict unresolved, and the note says why."""
    r = row([12.34, 12.34], [17.89, 17.89])
    assert (r.low, r.high) == (pytest.approx(5.55), pytest.approx(5.55))
    assert r.verdict == "unresolved" and "no spread" in r.note
