"""A few daemon threads that run serve's blocking and CPU-heavy work off the event loop.

Everything a request does that reads files or computes more than a lookup (predictions from a
model directory, plans, scale hints, store queries, the in-progress timelines) runs here, each
call with a time limit: past it the request gets a 503 and the loop goes on answering
``/metrics`` and ``/healthz``. The storing thread asks its predictions through the same pool,
so no single input can wedge it.

The threads are daemons (``concurrent.futures.ThreadPoolExecutor``'s are joined when the
interpreter exits, so one stuck call would hold SIGTERM back): a call that overran its limit
keeps its thread until it ends, and the process never waits for it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from coldscope.util.errors import ColdscopeError

T = TypeVar("T")


class TooSlow(ColdscopeError):
    """The work did not finish within its time limit (HTTP 503)."""


class Workers:
    """``size`` daemon threads taking calls from one queue."""

    def __init__(self, size: int = 4, name: str = "coldscope-work"):
        # calls of every result type share the queue: (future, function, args, kwargs)
        self._calls: queue.SimpleQueue[
            tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] = \
            queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                         for i in range(size)]
        self._started = False
        self._lock = threading.Lock()

    def _ensure_started(self) -> None:
        with self._lock:
            if not self._started:
                self._started = True
                for t in self._threads:
                    t.start()

    def _loop(self) -> None:
        while (item := self._calls.get()) is not None:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue  # given up on before it started
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the caller, who decides
                future.set_exception(exc)

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        self._ensure_started()
        future: Future[T] = Future()
        self._calls.put((future, fn, args, kwargs))
        return future

    def call(self, fn: Callable[..., T], *args: Any, timeout: float, what: str = "the work",
             **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a worker, waited for ``timeout`` seconds at most (for
        threads other than the event loop's)."""
        future = self.submit(fn, *args, **kwargs)
        try:
            return future.result(timeout=timeout)
        except FutureTimeout:
            future.cancel()
            raise TooSlow(f"{what} did not finish within {timeout:g} s; gave up") from None

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float,
                  what: str = "the request", **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a worker, awaited ``timeout`` seconds at most."""
        future = self.submit(fn, *args, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            future.cancel()
            raise TooSlow(f"{what} did not finish within {timeout:g} s; gave up "
                          "(serve's --request-timeout)") from None

    def stop(self) -> None:
        """Let idle threads end; a busy one ends with its call (never waited for)."""
        with self._lock:
            if self._started:
                for _ in self._threads:
                    self._calls.put(None)
                self._started = False
                self._threads = [threading.Thread(target=self._loop, name=t.name, daemon=True)
                                 for t in self._threads]
