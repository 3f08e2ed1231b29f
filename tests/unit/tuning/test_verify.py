"""``compare --serving-check``'s summary of the runs' serving checks (``serving_comparison``),
on made runs: the ratio and its interval worked out here by Fieller's formula with scipy's t."""

import math
import statistics

import pytest
from scipy.stats import t as student_t

from coldscope.core.records import Run
from coldscope.tuning.verify import (
    GreedyOutput,
    greedy,
    greedy_difference,
    serving_comparison,
    token_ids,
)


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
    assert out["greedy"] == {"same": True, "text": "same text", "compared": "text",
                             "difference": None}
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


# -- the greedy output's token ids --------------------------------------------------------------

def test_token_ids_read_from_either_of_vllms_answers_and_none_otherwise():
    """The shapes vLLM's completions answer has (a choice's ``token_ids`` for
    ``return_token_ids``; ``logprobs.tokens`` as ``token_id:N`` for
    ``return_tokens_as_token_ids``), and an OpenAI-style answer with token strings only."""
    assert token_ids({"text": "ab", "token_ids": [71, 283]}) == (71, 283)
    assert token_ids({"text": "ab", "logprobs": {"tokens": ["token_id:71", "token_id:283"]}}) \
        == (71, 283)
    assert token_ids({"text": "ab", "logprobs": {"tokens": ["a", "b"]}}) is None
    assert token_ids({"text": "ab", "logprobs": {"tokens": ["token_id:71", "b"]}}) is None
    assert token_ids({"text": "ab"}) is None


def test_the_same_text_from_other_tokens_differs():
    """Two token sequences that decode to one string are two outputs: the gate compares ids."""
    base = GreedyOutput("emej", (71, 283))
    assert greedy_difference(base, GreedyOutput("emej", (71, 283))) is None
    split = greedy_difference(base, GreedyOutput("emej", (71, 9, 12)))
    assert split == "differs at token 1: [283] vs [9, 12] (the same text)"
    assert greedy_difference(base, GreedyOutput("emej", None)) \
        == "no token ids returned, where the baseline's were"
    assert greedy_difference(base, GreedyOutput("", (71, 283))) == "empty greedy output"
    assert greedy_difference(base, GreedyOutput(None, None)) == "no greedy output"
    # without the baseline's ids the text decides
    assert greedy_difference(GreedyOutput("emej"), GreedyOutput("emej", (1,))) is None
    assert greedy_difference(GreedyOutput("emej"), GreedyOutput("emek")).startswith(
        "differs at character 3")


def test_serving_comparison_compares_token_ids_and_says_what_it_compared():
    def with_ids(i: int, ids: list[int] | None, text: str = "same text") -> Run:
        r = run(i, 100.0 + i, greedy=text)
        return r.evolve(verification={**(r.verification or {}), "greedy_token_ids": ids})

    same = serving_comparison([with_ids(0, [1, 2]), with_ids(1, [1, 2])], [with_ids(2, [1, 2])])
    assert same["greedy"]["same"] is True and same["greedy"]["compared"] == "token ids"
    other = serving_comparison([with_ids(0, [1, 2])], [with_ids(2, [1, 3]), with_ids(3, [1, 2])])
    assert other["greedy"]["same"] is False
    assert other["greedy"]["difference"] == "differs at token 1: [2] vs [3] (the same text)"
    texts = serving_comparison([run(0, 100.0)], [run(1, 101.0)])
    assert texts["greedy"]["same"] is True and texts["greedy"]["compared"] == "text"


def test_greedy_asks_for_the_ids_and_reads_them_over_http():
    """``greedy`` against a server that answers as vLLM 0.32 did here (the body of a real answer:
    ``return_token_ids`` and ``logprobs`` with ``return_tokens_as_token_ids``)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            choice = {"index": 0, "text": "emejmej",
                      "logprobs": {"tokens": ["token_id:71", "token_id:283", "token_id:76"]}}
            if body.get("return_token_ids"):
                choice["token_ids"] = [71, 283, 76]
            data = json.dumps({"choices": [choice]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = greedy(f"http://127.0.0.1:{server.server_port}", "m")
    finally:
        server.shutdown()
    assert out == GreedyOutput("emejmej", (71, 283, 76))
    assert seen[0]["return_token_ids"] is True and seen[0]["temperature"] == 0
    assert seen[0]["logprobs"] == 1 and seen[0]["return_tokens_as_token_ids"] is True
