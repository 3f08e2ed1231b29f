"""Checks run while a trial's engine is up: a fixed greedy prompt (the same tokens as the
baseline's, or the difference is shown) and a short fixed serving load whose throughput makes
a trade-off like eager mode a number.

The greedy check compares the generated token ids, not only the text: two different token
sequences can decode to the same string (a word split in two tokens, or one), and the text
alone would call them the same output. vLLM returns the ids when asked (``return_token_ids``,
0.10.2 and later; ``logprobs`` with ``return_tokens_as_token_ids`` before that); an engine that
returns neither (one that knows neither field: not checked here for SGLang, which is not
installed) is compared on its text, and the comparison says so.

The load is the same for every trial: ``REQUESTS`` completions of ``MAX_TOKENS`` tokens each
(``ignore_eos`` so that every request really generates them), ``CONCURRENCY`` at a time, greedy,
after one short unmeasured round, ``ROUNDS`` times. Throughput is output tokens per second of
wall time over one round, the median round's; tokens per CPU second of the engine are kept
beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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


#: What the greedy request asks for besides the text: the generated token ids, both ways vLLM
#: knows (an engine ignores a field it does not know).
TOKEN_ID_FIELDS = {"return_token_ids": True, "logprobs": 1, "return_tokens_as_token_ids": True}


@dataclass(frozen=True)
class GreedyOutput:
    """The answer to the fixed greedy prompt: its text and, when the engine returned them, the
    generated token ids (None: not returned; the comparison then rests on the text)."""

    text: str | None
    token_ids: tuple[int, ...] | None = None

    @classmethod
    def of(cls, verification: Mapping[str, Any] | None) -> GreedyOutput:
        """The greedy output a run's ``verification`` stored (``greedy``, ``greedy_token_ids``)."""
        v = verification or {}
        ids = v.get("greedy_token_ids")
        return cls(v.get("greedy"), tuple(int(i) for i in ids) if ids is not None else None)


def token_ids(choice: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The generated token ids in one completion choice: ``token_ids`` (vLLM's
    ``return_token_ids``), else ``logprobs.tokens`` when every one reads ``token_id:N`` (vLLM's
    ``return_tokens_as_token_ids``); None when the choice carries neither."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        return tuple(ids)
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and tokens and all(
            isinstance(t, str) and t.startswith("token_id:") and t[9:].lstrip("-").isdigit()
            for t in tokens):
        return tuple(int(t[9:]) for t in tokens)
    return None


def greedy(base: str, model: str, *, timeout: float = 120.0) -> GreedyOutput:
    """The answer to the fixed greedy prompt: its text and generated token ids."""
    out = _post(base, {"model": model, "prompt": GREEDY_PROMPT, "max_tokens": GREEDY_TOKENS,
                       "temperature": 0, "seed": 0, **TOKEN_ID_FIELDS}, timeout)
    choices = out.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    return GreedyOutput(choice.get("text") or "", token_ids(choice))


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
    output = greedy(base, model)
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
    return {"greedy_prompt": GREEDY_PROMPT, "greedy": output.text,
            "greedy_token_ids": list(output.token_ids) if output.token_ids is not None else None,
            "load": {"requests": REQUESTS, "concurrency": CONCURRENCY, "max_tokens": MAX_TOKENS,
                     "warmup_requests": WARMUP_REQUESTS, "rounds": rounds},
            "rounds_tokens_per_s": [x["tokens_per_s"] for x in loads],
            "rounds_tokens_per_cpu_s": [x.get("tokens_per_cpu_s") for x in loads],
            "throughput": statistics.median(wall) if wall else None,
            "tokens_per_cpu_s": statistics.median(cpu) if cpu else None}


def _first_mismatch(a: Sequence[object], b: Sequence[object]) -> int:
    """The first index where two sequences differ (the shorter's length when one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def first_difference(a: str | None, b: str | None) -> str | None:
    """Where two greedy texts first differ, for the report (None when equal)."""
    if a is None or b is None or a == b:
        return None
    i = _first_mismatch(a, b)
    return f"differs at character {i}: {a[i:i + 20]!r} vs {b[i:i + 20]!r}"


def greedy_difference(base: GreedyOutput, other: GreedyOutput) -> str | None:
    """How ``other``'s greedy output differs from ``base``'s, None when it is the same: the same
    token ids when ``base`` has them (a trial that returns none then differs: it cannot be
    shown to be the same), else the same text. An output with no text never matches."""
    if not other.text:
        return "no greedy output" if other.text is None else "empty greedy output"
    if base.token_ids is not None:
        if other.token_ids is None:
            return "no token ids returned, where the baseline's were"
        if other.token_ids != base.token_ids:
            a, b = base.token_ids, other.token_ids
            i = _first_mismatch(a, b)
            return (f"differs at token {i}: {list(a[i:i + 5])} vs {list(b[i:i + 5])}"
                    + ("" if base.text != other.text else " (the same text)"))
    return first_difference(base.text, other.text)


def serving_comparison(a: Sequence[Run], b: Sequence[Run]) -> dict[str, Any]:
    """b's serving against a's, from the runs' ``verification`` (``compare --serving-check``):
    the ratio of the mean throughputs, b over a, with its Fieller interval (``includes_1``:
    whether the interval holds 1, i.e. no difference shown; None without an interval), and
    whether every run's greedy output is a's first (``greedy_difference``: the same token ids
    when a's first run returned them, else the same text; ``compared`` says which). A run with
    no measured throughput is left out and counted; an empty or missing greedy text is never a
    match (a side that generated nothing would otherwise equal another that generated
    nothing)."""
    def side(runs: Sequence[Run]) -> dict[str, Any]:
        checked = [r.verification for r in runs if r.status == "ok" and r.verification]
        values = [float(v["throughput"]) for v in checked if v.get("throughput")]
        return {"throughput": values, "n": len(values),
                "not_measured": len(runs) - len(values),
                "greedy": [GreedyOutput.of(v) for v in checked]}

    sa, sb = side(a), side(b)
    ratio = ratio_interval(sb["throughput"], sa["throughput"])
    outputs: list[GreedyOutput] = [*sa["greedy"], *sb["greedy"]]
    reference = outputs[0] if outputs else None
    why: str | None
    same: bool | None
    if reference is None or not reference.text:
        same = None
        why = "a's first run generated no greedy text: nothing to compare"
    else:
        why = next((d for o in outputs[1:] if (d := greedy_difference(reference, o))), None)
        same = why is None
    includes_1 = None if ratio.low is None or ratio.high is None \
        else ratio.low <= 1.0 <= ratio.high
    return {"a": {k: v for k, v in sa.items() if k != "greedy"},
            "b": {k: v for k, v in sb.items() if k != "greedy"},
            "ratio": {"value": ratio.value, "low": ratio.low, "high": ratio.high,
                      "note": ratio.note},
            "includes_1": includes_1,
            "greedy": {"same": same, "text": reference.text if reference else None,
                       "compared": None if same is None else
                       "token ids" if reference and reference.token_ids is not None
                       else "text",
                       "difference": why},
            "load": {"requests": REQUESTS, "concurrency": CONCURRENCY, "max_tokens": MAX_TOKENS,
                     "rounds": ROUNDS}}
