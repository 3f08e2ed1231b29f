"""uvicorn's h11 protocol with each request's headers and body bounded in time, and its
headers in size.

uvicorn has no read timeout of its own: its keep-alive timer is armed only after a response
and cancelled by any byte that arrives, so a client that sends a header a byte at a time (or
nothing), or declares a body (a ``Content-Length``, or a chunk announcing 2^64 bytes) and sends
it a byte every few seconds, holds its connection for ever. Neither h11 nor uvicorn (nor
Starlette) has an option that bounds the time a request may take to arrive — hypercorn's
``read_timeout`` bounds the gap between two reads, which a byte every second passes — so this
protocol keeps one timer per connection for what the connection waits for:

* a request's line and headers: armed when the connection opens and when a new request's first
  bytes arrive; past ``header_timeout`` the connection is closed;
* a request's body: armed once its headers are complete (whatever framing it uses: h11 says
  when the body is complete); past ``body_timeout`` the client gets a 408 (when no answer has
  begun) and the connection is closed. The bound also holds when the app answered without
  reading the body (a 413, a 401): uvicorn would otherwise read and discard what the client
  keeps sending for ever.

Closing the connection is what frees the request: uvicorn tells the app it disconnected.

It also counts the bytes of each request's line and headers as they arrive (h11's own bound,
``h11_max_incomplete_event_size``, applies only to what it has not parsed yet, so a large header
sent in one piece passes it; uvicorn's httptools protocol has no bound at all) and answers 431
past ``max_header_bytes``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: Defaults: h11's own 16 KiB for the request line and headers together; 10 s to send them;
#: 10 s to send a body once its headers are in (a 1 MiB body at 1 Mbit/s takes 8 s).
MAX_HEADER_BYTES = 16 * 1024
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0

#: What a connection's timer waits for when it is not a request's body (a request's cycle).
_HEADERS = object()


def _answer(status: bytes, message: str) -> bytes:
    """A whole HTTP/1.1 answer with serve's one-line JSON error, closing the connection."""
    body = json.dumps({"error": message}).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)


def bounded_h11(header_timeout: float = HEADER_TIMEOUT_S,
                max_header_bytes: int = MAX_HEADER_BYTES,
                body_timeout: float = BODY_TIMEOUT_S) -> type[asyncio.Protocol]:
    """The protocol class to pass as uvicorn's ``http`` (with
    ``h11_max_incomplete_event_size=max_header_bytes`` as well)."""
    too_large = _answer(b"431 Request Header Fields Too Large",
                        f"request headers over {max_header_bytes} bytes")
    too_slow = _answer(b"408 Request Timeout",
                       f"request body not complete after {body_timeout:g} s")

    class BoundedH11Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _awaited: object = None  # _HEADERS, or the RequestResponseCycle whose body it is
        _header_seen = 0  # bytes of the current request's line and headers so far
        _header_tail = b""  # the last bytes seen, for an end of headers split across reads

        def _arm(self, awaited: object) -> None:
            """Wait for ``awaited`` (unless it is already waited for), within its bound."""
            if self._awaited is awaited:
                return
            self._disarm()
            if awaited is _HEADERS:
                self._timer = self.loop.call_later(header_timeout, self._headers_late)
            else:
                self._timer = self.loop.call_later(body_timeout, self._body_late)
            self._awaited = awaited

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._awaited = None, None

        def _track(self, *, data_came: bool) -> None:
            """Arm the timer for what the connection waits for now: the rest of a request's
            headers (only once its first bytes came: between requests uvicorn's keep-alive
            timer rules), a request's body, or nothing (the app has the request)."""
            state = self.conn.their_state
            if self.transport.is_closing():
                self._disarm()
            elif state is h11.SEND_BODY:
                self._arm(self.cycle)
            elif state is h11.IDLE and (data_came or self._awaited is _HEADERS):
                self._arm(_HEADERS)
            else:
                self._disarm()

        # Any: uvicorn narrows asyncio's BaseTransport to Transport here, which mypy would
        # call an incompatible override of asyncio's protocol
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm(_HEADERS)

        def _headers_too_large(self, data: bytes) -> bool:
            """Count ``data`` toward the current request's headers; True past the bound."""
            window = self._header_tail + data
            ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n")
                    if (i := window.find(sep)) >= 0]
            upto = min(ends) if ends else len(window)
            length = self._header_seen - len(self._header_tail) + upto
            if length > max_header_bytes:
                return True
            if ends:  # complete: the rest is body (or the next request, bounded by h11)
                self._header_seen, self._header_tail = 0, b""
            else:
                self._header_seen, self._header_tail = length, window[-3:]
            return False

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE and self._headers_too_large(data):
                self._disarm()
                self.logger.warning("request headers over %d bytes; connection closed",
                                    max_header_bytes)
                self.transport.write(too_large)
                self.transport.close()
                return
            super().data_received(data)
            self._track(data_came=True)

        def on_response_complete(self) -> None:
            # the answer may come before the body (a 413, a 401), and a pipelined request
            # may begin here: its body is bounded too
            super().on_response_complete()
            self._track(data_came=False)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _headers_late(self) -> None:
            self._timer, self._awaited = None, None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.logger.warning("request headers not complete after %g s; connection "
                                    "closed", header_timeout)
                self.transport.close()

        def _body_late(self) -> None:
            self._timer, self._awaited = None, None
            if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
                return
            self.logger.warning("request body not complete after %g s; connection closed",
                                body_timeout)
            if self.cycle is not None and not self.cycle.response_started:
                self.transport.write(too_slow)
            # uvicorn then tells the app the client is gone (http.disconnect)
            self.transport.close()

    return BoundedH11Protocol
