"""uvicorn's h11 protocol with request headers bounded in size and in time.

uvicorn bounds header size only through h11 (``h11_max_incomplete_event_size``; its httptools
protocol has no such option), and it has no header-read timeout at all: its keep-alive timer is
armed only after a response, so a client that connects and sends a header a byte at a time (or
nothing) holds its connection for ever. This protocol arms a timer when a connection opens and
when each new request's first bytes arrive, and closes the connection if the request line and
headers are not complete ``header_timeout`` seconds later. It also counts the bytes of each
request's line and headers as they arrive (h11's own bound applies only to what it has not
parsed yet, so a large header sent in one piece passes it) and answers 431 past
``max_header_bytes``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: Defaults: h11's own 16 KiB for the request line and headers together; 10 s to send them.
MAX_HEADER_BYTES = 16 * 1024
HEADER_TIMEOUT_S = 10.0


def bounded_h11(header_timeout: float = HEADER_TIMEOUT_S,
                max_header_bytes: int = MAX_HEADER_BYTES) -> type[asyncio.Protocol]:
    """The protocol class to pass as uvicorn's ``http`` (with
    ``h11_max_incomplete_event_size=max_header_bytes`` as well)."""
    too_large = json.dumps({"error": f"request headers over {max_header_bytes} bytes"}).encode()
    answer = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
              b"content-type: application/json\r\nconnection: close\r\n"
              b"content-length: " + str(len(too_large)).encode() + b"\r\n\r\n" + too_large)

    class BoundedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _header_seen = 0  # bytes of the current request's line and headers so far
        _header_tail = b""  # the last bytes seen, for an end of headers split across reads

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        # Any: uvicorn narrows asyncio's BaseTransport to Transport here, which mypy would
        # call an incompatible override of asyncio's protocol
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

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
                self.transport.write(answer)
                self.transport.close()
                return
            super().data_received(data)
            if self.transport.is_closing():
                self._disarm()
            elif self.conn.their_state is h11.IDLE:
                self._arm()  # still waiting for this request's headers
            else:
                self._disarm()  # headers complete: the request is the app's now

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.logger.warning("request headers not complete after %g s; connection "
                                    "closed", header_timeout)
                self.transport.close()

    return BoundedH11Protocol
