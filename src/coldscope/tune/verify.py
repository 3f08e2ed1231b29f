"""Checks run while a trial's engine is up: a fixed greedy prompt (the same text as the
baseline's, or the difference is shown) and a short fixed serving load whose throughput makes
a trade-off like eager mode a number.

The load is the same for every trial: ``REQUESTS`` completions of ``MAX_TOKENS`` tokens each
(``ignore_eos`` so that every request really generates them), ``CONCURRENCY`` at a time, greedy,
after one short unmeasured round, ``ROUNDS`` times. Throughput is output tokens per second of
wall time over one round, the best round's.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from coldscope.errors import ColdscopeError

GREEDY_PROMPT = "The cold start of an inference server is"
GREEDY_TOKENS = 16
REQUESTS = 32
CONCURRENCY = 4
MAX_TOKENS = 32
ROUNDS = 3
LOAD_PROMPTS = tuple(f"Request {i}: describe the start-up of a server in detail."
                     for i in range(8))


def _post(base: str, body: dict, timeout: float) -> dict:
    parts = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise ColdscopeError(f"verification request got HTTP {resp.status}: {data[:200]!r}")
        return json.loads(data)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise ColdscopeError(f"verification request failed: {exc}") from None
    finally:
        conn.close()


def greedy(base: str, model: str, *, timeout: float = 120.0) -> str:
    """The text of the fixed greedy prompt."""
    out = _post(base, {"model": model, "prompt": GREEDY_PROMPT, "max_tokens": GREEDY_TOKENS,
                       "temperature": 0, "seed": 0}, timeout)
    choices = out.get("choices") or [{}]
    return choices[0].get("text") or ""


def serving_load(base: str, model: str, *, requests: int = REQUESTS,
                 concurrency: int = CONCURRENCY, max_tokens: int = MAX_TOKENS,
                 timeout: float = 300.0) -> dict:
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


def verify(base: str, model: str, *, rounds: int = ROUNDS) -> dict:
    """Both checks; the runner stores this dict on the run as ``verification``.

    The load runs once unmeasured (first requests after start-up pay one-off costs), then
    ``rounds`` times; the throughput is the best round's. On a shared machine, other work only
    ever slows a round down, so the best of a few is the steadiest estimate of what the
    configuration can do (measured here: single 32-request rounds of one configuration varied
    by up to 25 %)."""
    text = greedy(base, model)
    serving_load(base, model, requests=CONCURRENCY * 2)
    loads = [serving_load(base, model) for _ in range(rounds)]
    best = max(loads, key=lambda x: x["tokens_per_s"] or 0.0)
    return {"greedy_prompt": GREEDY_PROMPT, "greedy": text, "load": best,
            "rounds_tokens_per_s": [x["tokens_per_s"] for x in loads],
            "throughput": best["tokens_per_s"]}


def first_difference(a: str | None, b: str | None) -> str | None:
    """Where two greedy texts first differ, for the report (None when equal)."""
    if a is None or b is None or a == b:
        return None
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
             min(len(a), len(b)))
    return f"differs at character {i}: {a[i:i + 20]!r} vs {b[i:i + 20]!r}"
