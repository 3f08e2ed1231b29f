"""Checks run while a trial's engine is up: a fixed greedy prompt (the same text as the
baseline's, or the difference is shown) and a short fixed serving load whose throughput makes
a trade-off like eager mode a number.

The load is the same for every trial: ``REQUESTS`` completions of ``MAX_TOKENS`` tokens each
(``ignore_eos`` so that every request really generates them), ``CONCURRENCY`` at a time, greedy,
after one short unmeasured round, ``ROUNDS`` times. Throughput is output tokens per second of
wall time over one round, the median round's; tokens per CPU second of the engine are kept
beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coldscope.analysis.comparison import ratio_interval
from coldscope.core.records import Run
from coldscope.engines.openai_api import complete

GREEDY_PROMPT = "The cold start of an inference server is"
GREEDY_TOKENS = 16
REQUESTS = 32
CONCURRENCY = 4
MAX_TOKENS = 32
ROUNDS = 6
WARMUP_REQUESTS = 16
LOAD_PROMPTS = tuple(f"Request {i}: describe the start-up of a server in detail."
                     for i in range(8))


def _post(base: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    return complete(base, body, timeout=timeout, what="verification request")


def greedy(base: str, model: str, *, timeout: float = 120.0) -> str:
    """The text of the fixed greedy prompt."""
    out = _post(base, {"model": model, "prompt": GREEDY_PROMPT, "max_tokens": GREEDY_TOKENS,
                       "temperature": 0, "seed": 0}, timeout)
    choices = out.get("choices") or [{}]
    return choices[0].get("text") or ""


def serving_load(base: str, model: str, *, requests: int = REQUESTS,
                 concurrency: int = CONCURRENCY, max_tokens: int = MAX_TOKENS,
                 timeout: float = 300.0) -> dict[str, Any]:
    """Run the fixed load; tokens per second of output over its wall time."""
    def one(i: int) -> int:
        out = _post(base, {"model": model, "prompt": LOAD_PROMPTS[i % len(LOAD_PROMPTS)],
                           "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True},
                    timeout)
        usage = out.get("usage") or {}
        return int(usage.get("completion_tokens") or max_tokens)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        tokens = sum(pool.map(one, range(requests)))
    seconds = time.monotonic() - t0
    return {"requests": requests, "concurrency": concurrency, "max_tokens": max_tokens,
            "output_tokens": tokens, "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 3) if seconds > 0 else None}


def verify(base: str, model: str, cpu_seconds: Callable[[], float] | None = None, *,
           rounds: int = ROUNDS) -> dict[str, Any]:
    """Both checks; the runner stores this dict on the run as ``verification``.

    The load runs once unmeasured (first requests after start-up pay one-off costs), then
    ``rounds`` times. Each round records output tokens per second of wall time and, when the
    runner gives ``cpu_seconds`` (the engine process tree's CPU time so far), output tokens
    per CPU second of the engine. ``throughput`` is the median round's tokens per wall second:
    the median, not the best, so that one lucky round does not make a configuration look
    faster than it serves (docs/tune.md shows the spread of rounds and of start-ups)."""
    text = greedy(base, model)
    serving_load(base, model, requests=WARMUP_REQUESTS)
    loads = []
    for _ in range(rounds):
        before = cpu_seconds() if cpu_seconds is not None else None
        load = serving_load(base, model)
        if before is not None and cpu_seconds is not None:
            used = cpu_seconds() - before
            load["cpu_s"] = round(used, 3)
            load["tokens_per_cpu_s"] = round(load["output_tokens"] / used, 3) if used > 0 \
                else None
        loads.append(load)
    wall = [x["tokens_per_s"] for x in loads if x["tokens_per_s"]]
    cpu = [x["tokens_per_cpu_s"] for x in loads if x.get("tokens_per_cpu_s")]
    return {"greedy_prompt": GREEDY_PROMPT, "greedy": text,
            "load": {"requests": REQUESTS, "concurrency": CONCURRENCY, "max_tokens": MAX_TOKENS,
                     "warmup_requests": WARMUP_REQUESTS, "rounds": rounds},
            "rounds_tokens_per_s": [x["tokens_per_s"] for x in loads],
            "rounds_tokens_per_cpu_s": [x.get("tokens_per_cpu_s") for x in loads],
            "throughput": statistics.median(wall) if wall else None,
            "tokens_per_cpu_s": statistics.median(cpu) if cpu else None}


def first_difference(a: str | None, b: str | None) -> str | None:
    """Where two greedy texts first differ, for the report (None when equal)."""
    if a is None or b is None or a == b:
        return None
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
             min(len(a), len(b)))
    return f"differs at character {i}: {a[i:i + 20]!r} vs {b[i:i + 20]!r}"


def serving_comparison(a: Sequence[Run], b: Sequence[Run]) -> dict[str, Any]:
    """b's serving against a's, from the runs' ``verification`` (``compare --serving-check``):
    the ratio of the mean throughputs, b over a, with its Fieller interval (``includes_1``:
    whether the interval holds 1, i.e. no difference shown; None without an interval), and
    whether every run's greedy text is a's first. A run with no measured throughput is left
    out and counted; an empty or missing greedy text is never a match (a side that generated
    nothing would otherwise equal another that generated nothing)."""
    def side(runs: Sequence[Run]) -> dict[str, Any]:
        checked = [r.verification for r in runs if r.status == "ok" and r.verification]
        values = [float(v["throughput"]) for v in checked if v.get("throughput")]
        return {"throughput": values, "n": len(values),
                "not_measured": len(runs) - len(values),
                "greedy": [v.get("greedy") for v in checked]}

    sa, sb = side(a), side(b)
    ratio = ratio_interval(sb["throughput"], sa["throughput"])
    texts = [*sa["greedy"], *sb["greedy"]]
    reference = texts[0] if texts else None
    why: str | None
    same: bool | None
    if not reference:
        same = None
        why = "a's first run generated no greedy text: nothing to compare"
    else:
        same = all(t == reference for t in texts)
        why = None if same else next(first_difference(reference, t) for t in texts
                                     if t != reference)
    includes_1 = None if ratio.low is None or ratio.high is None \
        else ratio.low <= 1.0 <= ratio.high
    return {"a": {k: v for k, v in sa.items() if k != "greedy"},
            "b": {k: v for k, v in sb.items() if k != "greedy"},
            "ratio": {"value": ratio.value, "low": ratio.low, "high": ratio.high,
                      "note": ratio.note},
            "includes_1": includes_1,
            "greedy": {"same": same, "text": reference, "difference": why},
            "load": {"requests": REQUESTS, "concurrency": CONCURRENCY, "max_tokens": MAX_TOKENS,
                     "rounds": ROUNDS}}
