"""A standby launcher in the simulator: each engine start-up shorter by the saving (never
below 0 s), before --startup-scale and --startup-extra; the saving given or read from a
measured ``coldscope compare --json``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coldscope.analysis.comparison import compare
from coldscope.cli.main import main
from coldscope.planning.traces import Trace, synthesize
from coldscope.sim.simulate import SimConfig, simulate
from coldscope.sim.startup import Fixed, Shortened, Uniform, shorten


def test_shortened_draws_and_quantiles():
    u = Uniform(10.0, 50.0, "u")
    s = Shortened(u, 15.0)
    assert s.quantile(0.5) == pytest.approx(30.0 - 15.0)
    assert s.quantile(0.0) == 0.0  # 10 - 15: never below 0
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(50):
        assert s.sample(rng_a) == pytest.approx(max(0.0, u.sample(rng_b) - 15.0))
    assert s.describe()["standby_saving_s"] == 15.0 and "less 15 s" in s.describe()["source"]
    assert shorten(u, 0.0) is u


def _trace() -> Trace:
    day = synthesize(0.05, 2.0, seed=1)
    morning = 8 * 3600.0  # one request after an idle night: a cold start from zero
    return Trace(np.append(day.arrival, morning), np.append(day.context_tokens, 100),
                 np.append(day.generated_tokens, 10), source="day+morning")


def test_a_45_s_start_up_less_15_s_simulates_as_a_30_s_one():
    trace = _trace()
    less = simulate(trace, SimConfig(standby_saving_s=15.0), startup=Fixed(45.0))
    thirty = simulate(trace, SimConfig(), startup=Fixed(30.0))
    assert less.ttft_s == thirty.ttft_s and less.cold_starts == thirty.cold_starts
    assert less.replica_seconds == pytest.approx(thirty.replica_seconds)
    assert less.startup.standby_saving_s == 15.0 and thirty.startup.standby_saving_s == 0.0
    # before the scale: (45 - 15) x 2 = 60 s, not 45 x 2 - 15
    scaled = simulate(trace, SimConfig(standby_saving_s=15.0, startup_scale=2.0),
                      startup=Fixed(45.0))
    sixty = simulate(trace, SimConfig(), startup=Fixed(60.0))
    assert scaled.ttft_s == sixty.ttft_s


def _compare_file(tmp_path):
    a = [{"bootstrap": x, "model_loading": 2.0} for x in (20.0, 22.0, 24.0)]
    b = [{"bootstrap": x, "model_loading": 2.0} for x in (4.0, 5.0, 6.0)]
    path = tmp_path / "cmp.json"
    path.write_text(json.dumps(compare(a, b, cache="warm", b_info={"standby": "sb"}).to_json()))
    return path


def _trace_file(tmp_path):
    t = _trace()
    path = tmp_path / "t.csv"
    rows = "\n".join(f"{x:.3f},{c},{g}" for x, c, g in zip(t.arrival, t.context_tokens,
                                                              t.generated_tokens, strict=True))
    path.write_text("arrival_s,context_tokens,generated_tokens\n" + rows + "\n")
    return path


def _sim(capsys, *args):
    code = main(["simulate", *args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_cli_reads_the_mean_bootstrap_saving_from_a_compare(tmp_path, capsys):
    trace = str(_trace_file(tmp_path))
    # a: 20, 22, 24 s of bootstrap; b: 4, 5, 6 s: 22 - 5 = 17 s saved on average
    r = _sim(capsys, "--trace", trace, "--startup-s", "45s", "--standby-from",
             str(_compare_file(tmp_path)))
    assert r["startup"]["standby_saving_s"] == pytest.approx(17.0)
    assert "measured" in r["startup"]["source"]
    same = _sim(capsys, "--trace", trace, "--startup-s", "28s")
    assert r["ttft_s"] == same["ttft_s"]
    given = _sim(capsys, "--trace", trace, "--startup-s", "45s", "--standby-saving", "17s")
    assert given["ttft_s"] == same["ttft_s"]


@pytest.mark.parametrize("extra, message", [
    (["--standby-saving", "5s", "--standby-from", "X"], "give one of --standby-from"),
    (["--standby-from", "PLAN"], "is not a `coldscope compare --json` output"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, extra, message):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema_version": 2}))
    extra = [str(_compare_file(tmp_path)) if x == "X" else str(plan) if x == "PLAN" else x
             for x in extra]
    assert main(["simulate", "--trace", str(_trace_file(tmp_path)), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
