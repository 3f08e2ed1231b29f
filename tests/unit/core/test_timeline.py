import ast
import random
from pathlib import Path

import pytest

from coldscope.core.stages import BUCKETS, STAGES
from coldscope.core.timeline import Span, from_durations, reconcile, union_length


def test_buckets_sum_exactly_to_time_to_ready():
    rng = random.Random(7)
    for _ in range(200):
        ttr = rng.uniform(1, 100)
        spans = []
        for _ in range(rng.randint(0, 12)):
            a = rng.uniform(-5, ttr + 5)
            b = a + rng.uniform(0, 30)
            spans.append(Span(rng.choice(STAGES), a, b, rng.choice(["log", "probe", "span"])))
        tl = reconcile(spans, ttr)
        total = sum(v for v in tl.stages.values() if v is not None)
        assert total == pytest.approx(ttr, abs=1e-9)
        # segments tile [0, ttr] without gaps or overlaps
        segs = tl.segments
        assert segs[0][1] == 0.0 and segs[-1][2] == pytest.approx(ttr)
        for (_, _, end), (_, start, _) in zip(segs, segs[1:], strict=False):
            assert start == pytest.approx(end)


def test_specific_stage_is_carved_out_of_bootstrap_and_gaps_are_unattributed():
    spans = [
        Span("bootstrap", 0, 10, "probe"),
        Span("tokenizer", 4, 5, "probe"),
        Span("model_loading", 12, 15, "span"),
    ]
    tl = reconcile(spans, 20)
    assert tl.stages["bootstrap"] == pytest.approx(9)
    assert tl.stages["tokenizer"] == pytest.approx(1)
    assert tl.stages["model_loading"] == pytest.approx(3)
    assert tl.stages["unattributed"] == pytest.approx(7)
    assert tl.stages["torch_compile"] is None  # unknown, not zero
    assert [s[0] for s in tl.segments] == [
        "bootstrap", "tokenizer", "bootstrap", "unattributed", "model_loading", "unattributed"]


def test_better_source_wins_for_the_same_stage():
    spans = [Span("model_loading", 2, 9, "log"), Span("model_loading", 3, 4, "span")]
    tl = reconcile(spans, 10)
    assert tl.sources["model_loading"] == "span"
    assert tl.stages["model_loading"] == pytest.approx(1)
    assert tl.stages["unattributed"] == pytest.approx(9)


def test_not_applicable_and_substeps():
    spans = [Span("torch_compile/warmup", 1, 3, "span"), Span("torch_compile/warmup", 2, 4, "span")]
    tl = reconcile(spans, 5, not_applicable={"cuda_graph_capture"})
    assert tl.stages["cuda_graph_capture"] is None
    assert "cuda_graph_capture" in tl.not_applicable
    assert tl.substeps["torch_compile/warmup"] == pytest.approx(3)  # union, overlap once


def test_union_length_matches_brute_force():
    rng = random.Random(3)
    for _ in range(50):
        ivs = [(a, a + rng.uniform(0, 5)) for a in (rng.uniform(0, 20) for _ in range(6))]
        grid = [i / 1000 for i in range(30000)]
        brute = sum(1 for x in grid if any(a <= x < b for a, b in ivs)) / 1000
        assert union_length(ivs) == pytest.approx(brute, abs=0.01)


def test_from_durations_keeps_unknowns_unknown():
    tl = from_durations({"model_loading": 2.0, "tokenizer": 0.5}, source="log", time_to_ready=10)
    assert tl.stages["torch_compile"] is None
    assert tl.stages["unattributed"] == pytest.approx(7.5)
    assert set(tl.stages) == set(BUCKETS)


def test_timeline_imports_only_stages():
    """The timeline is pure data: it must not import the runner or any consumer."""
    src = Path(__file__).resolve().parents[3] / "src" / "coldscope" / "core" / "timeline.py"
    tree = ast.parse(src.read_text())
    imported = {
        node.module for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("coldscope")
    }
    assert imported == {"coldscope.core.stages"}
