"""Three real start-ups of the tiny model that several integration tests read, made once per
test session (``primed``) instead of seven times across four modules.

Every real start-up costs a minute or two on these 2 cores, and four tests only read what a
start-up stored: the cold/warm pair against an outside stopwatch (``cli/test_profile.py``),
the per-process import times (``cli/test_profile.py``), the weights read with the page cache
dropped and kept (``capture/test_storage.py``), and the compile key named when a shared cache
misses (``launch/test_compile_key.py``). One sequence gives each what it needs, as a platform
engineer's node would see it:

1. ``cold``: a new node. The page cache dropped (``--drop-page-cache``), an empty compile
   cache in a shared directory (``--cache-dir``, a persistent volume), the imports traced
   (``--imports``), ``--max-model-len 256``.
2. ``warm``: the same command started again, its weights kept in the page cache (this VM
   evicts pages idle for 60 s; ``kept_in_page_cache``), the compile cache as the cold run left
   it.
3. ``changed``: the same cache directory, ``--max-model-len 512``: the cache misses, and the
   finding must name the flag.

An outside stopwatch (``Stopwatch``) times each from the engine process appearing to its health
endpoint answering, independently of coldscope. The tests that need other start-ups (``tune``,
``releases``, Ray Serve's, serve's) make their own.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.conftest import TINY_MODEL

#: The port the primed start-ups serve on (the stopwatch polls its /health).
PRIMED_PORT = 8771
CLI = str(Path(sys.executable).parent / "coldscope")


class Stopwatch(threading.Thread):
    """An outside stopwatch: sees the engine process appear (polling every 5 ms) and its
    health endpoint answer 200 (polling every 20 ms), independently of coldscope."""

    def __init__(self, parent_pid: int, port: int) -> None:
        super().__init__(daemon=True)
        self.parent = psutil.Process(parent_pid)
        self.port = port
        self.readings: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        seen: set[int] = set()
        while not self.done.is_set():
            kids = []
            try:
                children = self.parent.children()
            except psutil.Error:
                return  # coldscope itself has exited
            for p in children:
                try:
                    if "vllm.entrypoints" in " ".join(p.cmdline()):
                        kids.append(p)
                except psutil.Error:
                    continue  # a child that is exiting
            new = [p for p in kids if p.pid not in seen]
            if not new:
                time.sleep(0.005)
                continue
            launched = time.monotonic()
            seen.update(p.pid for p in new)
            while not self.done.is_set():
                if self.health_ok():
                    self.readings.append(time.monotonic() - launched)
                    break
                time.sleep(0.02)
            while self.health_ok() and not self.done.is_set():
                time.sleep(0.05)

    def health_ok(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=0.5)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()


@contextlib.contextmanager
def kept_in_page_cache(paths: list[Path], every_s: float = 2.0) -> Iterator[None]:
    """Read ``paths`` now and every ``every_s`` seconds while the block runs.

    This VM pages out page cache idle for 60 s (DAMON's proactive reclaim: a ``pageout``
    scheme on physical memory, ``access_pattern/age/min`` 12 aggregations of 5 s). Under a busy
    suite a start-up reaches its weights more than 60 s after they were last read, and found
    part of them gone (256 KB of 1.2 MB read from disk): the "started again, cached" state
    the storage test sets out to measure no longer held. Reading keeps the pages young, so the
    premise holds; what the probe then reads from /proc/PID/io is still the kernel's answer."""
    stop = threading.Event()

    def read_all() -> None:
        for p in paths:
            with p.open("rb") as f:
                while f.read(1 << 20):
                    pass

    def touch() -> None:
        while not stop.wait(every_s):
            read_all()

    read_all()
    touch_thread = threading.Thread(target=touch, daemon=True)
    touch_thread.start()
    try:
        yield
    finally:
        stop.set()
        touch_thread.join(timeout=30)


@dataclass(frozen=True)
class Primed:
    """The three start-ups' JSON records (``coldscope profile --json``), the store and the
    shared compile-cache directory they used, and the outside stopwatch's reading of each."""

    store: Path
    cache_dir: Path
    cold: dict
    warm: dict
    changed: dict
    outside_s: dict[str, float]


def _profile(store: Path, cache_dir: Path, options: list[str], max_model_len: int,
             cwd: Path) -> tuple[dict, float | None]:
    cmd = [CLI, "profile", "--json", "--quiet", "--store", str(store), "--cache-dir",
           str(cache_dir), "--timeout", "600", *options,
           "--", "python", "-m", "vllm.entrypoints.openai.api_server", "--model",
           str(TINY_MODEL), "--host", "127.0.0.1", "--port", str(PRIMED_PORT),
           "--max-model-len", str(max_model_len), "--max-num-seqs", "4", "--dtype", "bfloat16"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd)
    watch = Stopwatch(proc.pid, PRIMED_PORT)
    watch.start()
    try:
        out, err = proc.communicate(timeout=1500)
    finally:
        watch.done.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    runs = json.loads(out)["runs"] if out.strip() else []
    assert proc.returncode == 0, (err[-2000:], [(r["reason"], r.get("log_tail", "")[-6000:])
                                                for r in runs])
    (run,) = runs
    return run, (watch.readings[0] if watch.readings else None)


@pytest.fixture(scope="session")
def primed(tmp_path_factory: pytest.TempPathFactory) -> Primed:
    """The cold, warm and changed-flag start-ups (the module's docstring), made on first use."""
    top = tmp_path_factory.mktemp("primed")
    store, cache_dir = top / "store.db", top / "shared"
    weights = sorted(TINY_MODEL.glob("*.safetensors"))
    cold, cold_s = _profile(store, cache_dir, ["--drop-page-cache", "--imports"], 256, top)
    with kept_in_page_cache(weights):
        warm, warm_s = _profile(store, cache_dir, [], 256, top)
    changed, changed_s = _profile(store, cache_dir, [], 512, top)
    outside = {r["id"]: s for r, s in ((cold, cold_s), (warm, warm_s), (changed, changed_s))
               if s is not None}
    return Primed(store=store, cache_dir=cache_dir, cold=cold, warm=warm, changed=changed,
                  outside_s=outside)
