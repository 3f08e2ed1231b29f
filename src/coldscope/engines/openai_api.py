"""The OpenAI-compatible completions API that vLLM and SGLang serve, as coldscope uses it: one
streamed completion timed to its first token (the runner's first request) and plain
completions (``tune``'s greedy check and serving load). One client, so the runner and the
verifier send the same requests and read answers the same way; standard library only.

Every failure (refused connection, HTTP error, a body that is not the API's JSON) is a
``ColdscopeError`` naming ``what`` ("first request", "verification request").
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from coldscope.util.errors import ColdscopeError

COMPLETIONS = "/v1/completions"


@contextmanager
def _post(base: str, body: Mapping[str, Any], timeout: float,
          what: str) -> Iterator[http.client.HTTPResponse]:
    parts = urllib.parse.urlsplit(base)
    if not parts.hostname:
        raise ColdscopeError(f"{what} failed: no host in {base!r}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        conn.request("POST", COMPLETIONS, json.dumps(dict(body)),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ColdscopeError(f"{what} got HTTP {resp.status}: {resp.read(300)!r}")
        yield resp
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise ColdscopeError(f"{what} failed: {exc}") from None
    finally:
        conn.close()


def complete(base: str, body: Mapping[str, Any], *, timeout: float,
             what: str = "request") -> dict[str, Any]:
    """One completion (not streamed): the API's answer as a dict."""
    with _post(base, {**body, "stream": False}, timeout, what) as resp:
        data = json.loads(resp.read())
    if not isinstance(data, dict):
        raise ColdscopeError(f"{what} failed: the answer is not a JSON object")
    return data


def first_token(base: str, body: Mapping[str, Any], *, timeout: float,
                what: str = "first request") -> tuple[float, str]:
    """One streamed completion: (seconds from sending it to the first token, all text)."""
    t0 = time.monotonic()
    with _post(base, {**body, "stream": True}, timeout, what) as resp:
        ttft = None
        text = ""
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            choices = json.loads(line[5:]).get("choices") or []
            if choices and ttft is None:
                ttft = time.monotonic() - t0
            text += "".join(c.get("text") or "" for c in choices)
    if ttft is None:
        raise ColdscopeError(f"{what} returned no tokens")
    return ttft, text
