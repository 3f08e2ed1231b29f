"""``coldscope.render.render``: one contract for terminal output. Which module draws which
record, what importing the package costs, and lines of figures kept whole on any console."""

from __future__ import annotations

import importlib
import io
import pkgutil
import subprocess
import sys

import pytest

import coldscope.render
from coldscope.cli.common import show
from coldscope.core.interval import Interval
from coldscope.core.records import Run
from coldscope.prediction.core import Prediction, Served, StagePrediction
from coldscope.prediction.modelfile import (
    Candidate,
    FitSummary,
    FitSummaryBucket,
    IntervalSpec,
    TrainedOn,
)
from coldscope.render import render
from coldscope.util.terminal import SafeConsole


def _modules() -> list[str]:
    return [m.name for m in pkgutil.iter_modules(coldscope.render.__path__)]


def test_each_record_is_drawn_by_the_module_its_package_routes_to():
    """``_DRAWN_BY`` (what ``render`` imports on a record's first visit) against what each
    module registers when imported."""
    for name in _modules():
        importlib.import_module(f"coldscope.render.{name}")
    drawn = {cls: impl for cls, impl in render.registry.items() if cls is not object}
    assert drawn, "no module registered a renderer"
    for cls, impl in drawn.items():
        package = ".".join(cls.__module__.split(".")[:2])
        assert impl.__module__ == f"coldscope.render.{coldscope.render._DRAWN_BY[package]}", \
            (cls, impl)
    assert set(coldscope.render._DRAWN_BY.values()) <= set(_modules())


def test_a_record_no_module_draws_is_a_type_error():
    with pytest.raises(TypeError, match="no terminal rendering for a dict"):
        render({"total_s": 1.0})


def test_importing_the_package_loads_no_renderer_and_drawing_loads_only_its_own():
    code = ("import sys, coldscope\n"
            "assert 'coldscope.render' not in sys.modules\n"
            "import coldscope.render\n"
            "assert 'rich' not in sys.modules, 'import coldscope.render loaded rich'\n"
            "from coldscope.core.records import Run\n"
            "coldscope.render.render(Run.model_validate({'id': 'r', 'status': 'failed',"
            " 'reason': 'x', 'started_at': '2026-01-01T00:00:00Z'}))\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('coldscope.render.'))\n"
            "print(' '.join(loaded), 'coldscope.sim' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["coldscope.render.findings", "coldscope.render.tables",
                                   "False"]


def _print(renderable: object, width: int) -> str:
    out = io.StringIO()
    SafeConsole(file=out, width=width).print(renderable, crop=False)
    return out.getvalue()


def test_a_failed_run_is_drawn_as_why_it_failed():
    run = Run.model_validate({"id": "r9", "status": "failed", "reason": "engine exited",
                              "log_tail": "one\ntwo", "started_at": "2026-01-01T00:00:00Z"})
    assert _print(render(run), 80) == "run r9 failed: engine exited\none\ntwo\n"


def _prediction(warning: str) -> Prediction:
    return Prediction(
        total_s=12.3456, interval=Interval(low=10.0, high=15.5), level=0.9,
        stages={"bootstrap": StagePrediction(2.0, Interval(low=1.5, high=2.25)),
                "model_loading": StagePrediction(10.3456, Interval(low=8.5, high=13.25))},
        calibrated_on=["a", "b"], warnings=[warning],
        formulas={"bootstrap": Served(["1"], [2.0], "bootstrap = 2", None, 0.0, "chosen"),
                  "model_loading": Served(["weight_gb"], [1.8], "model_loading = 1.8 x "
                                          "weight_gb", 1, 3.0, "range rule")})


def test_a_prediction_prints_line_for_line_whatever_the_width(capsys):
    """``predict``'s lines, the long warning whole (not wrapped, not cut) on a 120-column pipe
    and on a 30-column console, and a control sequence in it removed."""
    warning = "the model's weight_gb " + "x" * 150 + " \x1b]0;title\x07is outside"
    expected = ("stage                 seconds  90% interval\n"
                "bootstrap                2.00  [1.50, 2.25]\n"
                "model_loading           10.35  [8.50, 13.25]\n"
                "total                   12.35  [10.00, 15.50]\n"
                "calibrated on: a, b\n"
                "served: model_loading = 1.8 x weight_gb\n"
                "warning: the model's weight_gb " + "x" * 150 + " is outside\n")
    show(_prediction(warning))
    assert capsys.readouterr().out == expected
    assert _print(render(_prediction(warning)), 30) == expected


def _summary(**parts: object) -> FitSummary:
    return FitSummary(
        out="m.json",
        trained_on=TrainedOn(source="paper", models=["a", "b", "c"], replicates=[1, 1, 1],
                             n_models=3, kinds=["dense"], excluded=["moe-1"], selection=""),
        environment={}, storage=None,
        interval=IntervalSpec(level=0.9, t=2.0, dof=1, method="ols", description="OLS"),
        buckets={"bootstrap": FitSummaryBucket(
            formula="bootstrap = 8", terms=["1"], coef=[8.0], residual_sd=0.07,
            lomo_rmse=0.075,
            candidates=[Candidate(terms=["1"], lomo_rmse=0.075, lomo_max_abs=0.1),
                        Candidate(terms=["1", "layers"], lomo_rmse=0.08, lomo_max_abs=0.2,
                                  comparable=True, extrap_rmse=0.09)],
            pcc={"weight_gb": 0.33, "layers": None})},
        lomo=None, extrapolation=None, loading_rate=None, notes=["run r1 skipped"], **parts)


def test_fit_summary_json_has_every_part_and_omits_empty_fields_below():
    """``fit --json``: a part the fit did not make is null, never missing; inside the parts,
    unset fields are left out as in the model file."""
    data = _summary().to_json()
    assert list(data) == ["out", "trained_on", "environment", "storage", "interval", "buckets",
                          "lomo", "extrapolation", "loading_rate", "notes"]
    assert data["storage"] is None and data["lomo"] is None and data["loading_rate"] is None
    first, second = data["buckets"]["bootstrap"]["candidates"]
    assert first == {"terms": ["1"], "lomo_rmse": 0.075, "lomo_max_abs": 0.1}
    assert second["comparable"] is True and "coef" not in second


def test_fit_summary_text():
    text = _print(render(_summary()), 40)
    assert text.splitlines() == [
        "trained on 3 dense models from paper",
        "excluded (other kinds): moe-1",
        "",
        "stage                resid sd LOMO rmse  formula (seconds)",
        "bootstrap               0.070     0.075  bootstrap = 8",
        "",
        "candidates (LOMO rmse / extrapolation-fold rmse, s; * comparable to the choice: the "
        "range rule may serve it where the choice extrapolates):",
        "  bootstrap            1: 0.075, 1+layers*: 0.080 / 0.090",
        "",
        "Pearson correlation of each stage with each feature:",
        "  stage                  weight_gb      layers",
        "  bootstrap                   0.33           -",
        "",
        "intervals: OLS",
        "note: run r1 skipped",
        "wrote m.json",
    ]
