"""The one completions client the runner and tune's verifier share: its answers and its
one-line errors, against a local server whose replies the test writes."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from coldscope.engines.openai_api import complete, first_token
from coldscope.util.errors import ColdscopeError

REPLIES: dict[str, tuple[int, bytes]] = {}
SEEN: list[dict] = []


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(body)
        status, data = REPLIES[body["model"]]
        self.send_response(status)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_answers_are_read_as_the_api_sends_them(base):
    REPLIES["plain"] = (200, json.dumps({"choices": [{"text": "hi"}],
                                         "usage": {"completion_tokens": 1}}).encode())
    assert complete(base, {"model": "plain", "prompt": "p"}, timeout=5)["choices"][0]["text"] \
        == "hi"
    assert SEEN[-1]["stream"] is False
    REPLIES["stream"] = (200, b'data: {"choices": [{"text": "a"}]}\n\n'
                              b'data: {"choices": [{"text": "b"}]}\n\ndata: [DONE]\n\n')
    ttft, text = first_token(base, {"model": "stream", "prompt": "p"}, timeout=5)
    assert text == "ab" and 0 <= ttft < 5
    assert SEEN[-1]["stream"] is True


@pytest.mark.parametrize(("model", "reply", "message"), [
    ("e500", (500, b"boom"), "verification request got HTTP 500: b'boom'"),
    ("junk", (200, b"<html>"), "verification request failed: "),
    ("list", (200, b"[1]"), "verification request failed: the answer is not a JSON object"),
])
def test_failures_are_one_line_errors_naming_the_request(base, model, reply, message):
    REPLIES[model] = reply
    with pytest.raises(ColdscopeError) as info:
        complete(base, {"model": model}, timeout=5, what="verification request")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_stream_without_tokens_and_a_closed_port_are_errors(base):
    REPLIES["empty"] = (200, b"data: [DONE]\n\n")
    with pytest.raises(ColdscopeError, match="first request returned no tokens"):
        first_token(base, {"model": "empty"}, timeout=5)
    with pytest.raises(ColdscopeError, match="first request failed"):
        first_token("http://127.0.0.1:9", {"model": "x"}, timeout=5)
