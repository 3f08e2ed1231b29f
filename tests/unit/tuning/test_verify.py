"""``compare --serving-check``'s summary of the runs' serving checks (``serving_comparison``),
on made runs: the ratio and its interval worked out here by Fieller's formula with scipy's t."""

import math
import statistics

import pytest
from scipy.stats import t as student_t

from coldscope.core.records import Run
from coldscope.tuning.verify import serving_comparison


def run(i: int, throughput: float | None, greedy: str | None = "same text",
        status: str = "ok") -> Run:
    verification = {"greedy": greedy, **({"throughput": throughput} if throughput else {})}
    return Run(id=f"r{i}", status=status, started_at="2026-12-04T00:00:00+00:00",
               verification=verification)


def fieller(num: list[float], den: list[float]) -> tuple[float, float]:
    """Fieller's 95 % interval for mean(num) / mean(den), Welch degrees of freedom at the
    estimate (worked out here, independently of coldscope.analysis)."""
    x, y = statistics.fmean(num), statistics.fmean(den)
    vx, vy = statistics.variance(num) / len(num), statistics.variance(den) / len(den)
    rho = x / y
    a, b = vx, rho * rho * vy
    df = (a + b) ** 2 / (a * a / (len(num) - 1) + b * b / (len(den) - 1))
    t2 = student_t.ppf(0.975, df) ** 2
    # (x - rho y)^2 = t^2 (vx + rho^2 vy), a quadratic in rho
    qa, qb, qc = y * y - t2 * vy, -2 * x * y, x * x - t2 * vx
    root = math.sqrt(qb * qb - 4 * qa * qc)
    return (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)


def test_ratio_b_over_a_with_fieller_interval_and_greedy_match():
    a = [run(i, tp) for i, tp in enumerate([100.0, 110.0, 90.0])]
    b = [run(10 + i, tp) for i, tp in enumerate([95.0, 105.0, 101.0])]
    out = serving_comparison(a, b)
    assert out["ratio"]["value"] == pytest.approx(statistics.fmean([95, 105, 101]) / 100.0)
    low, high = fieller([95.0, 105.0, 101.0], [100.0, 110.0, 90.0])
    assert (out["ratio"]["low"], out["ratio"]["high"]) == (pytest.approx(low),
                                                           pytest.approx(high))
    assert low <= 1.0 <= high and out["includes_1"] is True
    assert out["greedy"] == {"same": True, "text": "same text", "difference": None}
    assert (out["a"]["n"], out["b"]["n"]) == (3, 3)


def test_a_different_greedy_text_is_named():
    a = [run(0, 100.0), run(1, 101.0)]
    b = [run(2, 99.0), run(3, 98.0, greedy="same texT")]
    greedy = serving_comparison(a, b)["greedy"]
    assert greedy["same"] is False
    assert greedy["difference"].startswith("differs at character 8")


def test_no_text_is_never_a_match_and_unmeasured_runs_are_counted():
    a = [run(0, 100.0, greedy=""), run(1, None, greedy=""), run(2, 80.0, status="failed")]
    b = [run(3, 90.0, greedy=""), run(4, 91.0, greedy="")]
    out = serving_comparison(a, b)
    assert out["greedy"]["same"] is None and "no greedy text" in out["greedy"]["difference"]
    assert out["a"] == {"throughput": [100.0], "n": 1, "not_measured": 2}
    # one value on a side: a ratio, no interval, and no claim either way
    assert out["ratio"]["low"] is None and out["includes_1"] is None
