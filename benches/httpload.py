"""The serve benches' HTTP load: an open-loop schedule over keep-alive HTTP/1.1 connections.

Request i is due at start + i/rate whatever happened to the ones before it (no coordinated
omission), sent over a bounded pool of keep-alive connections by a small asyncio client (so
the client's own cost stays far below the server's). Each request's latency is counted from
when it was *due* (queueing included) and from when it was sent (service time); a warm-up at
the same rate comes first and is not counted. Used by ``bench_serve_predict.py`` and
``bench_scale_hint.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Conn:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, request: bytes) -> int:
        """``request`` (a whole HTTP/1.1 request) sent, its answer read whole: the status."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


def get_request(port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def post_request(port: int, path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def open_loop(port: int, request_for: Callable[[int], bytes], rate: float,
                    seconds: float, connections: int, warmup: float) -> dict:
    """``request_for(i)`` due at start + i/rate for ``warmup + seconds``: the counted
    requests' latencies from due time (``due``) and from send (``service``), every non-200
    (``errors``), and what was sent over how long (``sent``, ``elapsed_s``)."""
    pool: asyncio.Queue[Conn] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await Conn.open(port))
    due_lat: list[float] = []
    svc_lat: list[float] = []
    errors = 0

    async def one(i: int, due: float, counted: bool) -> None:
        nonlocal errors
        conn = await pool.get()  # bounded: at most `connections` requests in flight
        sent = time.perf_counter()
        try:
            status = await conn.send(request_for(i))
        finally:
            pool.put_nowait(conn)
        done = time.perf_counter()
        if status != 200:
            errors += 1
        if counted:
            due_lat.append(done - due)
            svc_lat.append(done - sent)

    tasks = []
    total = int((warmup + seconds) * rate)
    n_warm = int(warmup * rate)
    start = time.perf_counter() + 0.1
    for i in range(total):
        due = start + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        tasks.append(asyncio.ensure_future(one(i, due, i >= n_warm)))
        if len(tasks) > 2000:
            done = [t for t in tasks if t.done()]
            tasks = [t for t in tasks if not t.done()]
            for t in done:
                t.result()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    while not pool.empty():
        pool.get_nowait().close()
    return {"due": due_lat, "service": svc_lat, "errors": errors, "elapsed_s": elapsed,
            "sent": total}


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds), in milliseconds (nearest rank)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def server_buckets(port: int, route: str) -> dict[float, float]:
    """Cumulative bucket counts of serve's own timing of ``route``
    (``coldscope_http_request_seconds``)."""
    import httpx

    out = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics").text.splitlines():
        if line.startswith("coldscope_http_request_seconds_bucket{") and \
                f'route="{route}"' in line:
            le = line.split('le="')[1].split('"')[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.split()[-1])
    return out
