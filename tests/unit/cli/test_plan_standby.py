"""``coldscope plan --mitigate standby_launcher`` and ``--standby-from``: the layer's row, its
reason on a new node, a measured share, and one-line errors."""

from __future__ import annotations

import json

import pytest

from coldscope.analysis.comparison import compare
from coldscope.cli.main import main
from coldscope.planning.infra import load_profile


def _plan(capsys, *args):
    code = main(["plan", *args, "--json", "--no-store"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def _layer(report):
    return next(m for m in report["mitigations"] if m["name"] == "standby_launcher")


def test_on_a_new_node_the_row_says_it_does_not_apply(capsys):
    r = _plan(capsys, "--params", "70e9", "--mitigate", "standby_launcher")
    m = _layer(r)
    assert m["removes_s"] == {"low": 0.0, "high": 0.0}
    assert m["assumptions"][0].startswith("not applied here") and "new node" in \
        m["assumptions"][0]
    # the lesson's 220-510 s stays: the launcher does nothing to the pull or the weights
    assert (round(r["total_s"]["low"]), round(r["total_s"]["high"])) == (220, 510)
    p = load_profile().mitigations
    gb = p.standby_launcher.resident_bytes / 1e9
    assert m["monthly_cost"] == pytest.approx(gb * p.tiered_loading.dram_price_per_gb_hour * 720)


def test_a_measured_compare_sets_the_share(tmp_path, capsys):
    # one run a side: no interval, the point share 15 / 20 = 0.75 on both ends
    a, b = [{"bootstrap": 20.0}], [{"bootstrap": 5.0}]
    path = tmp_path / "cmp.json"
    path.write_text(json.dumps(compare(a, b, cache="warm", b_info={"standby": "sb"}).to_json()))
    r = _plan(capsys, "--params", "7e9", "--mitigate", "tiered_loading,standby_launcher",
              "--standby-from", str(path))
    m = _layer(r)
    boot = load_profile().mitigations.standby_launcher.bootstrap_s
    assert m["removes_s"]["low"] == pytest.approx(0.75 * boot.low)
    assert m["removes_s"]["high"] == pytest.approx(0.75 * boot.high)
    assert "measured: cmp.json" in m["assumptions"][0]


def test_standby_from_refuses_another_document(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema_version": 2, "total_s": {"low": 1.0, "high": 2.0}}))
    assert main(["plan", "--params", "7e9", "--standby-from", str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a `coldscope compare --json` output" in err
    assert err.count("\n") == 1
