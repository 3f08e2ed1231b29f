"""Where serve's request work runs: daemon threads for light work, a process of its own for
each piece of heavy work.

Threads (``run``, ``call``): everything a request does off the event loop - store queries, the
in-progress timelines, and waiting for a process - each call with a time limit: past it the
request gets a 503 and the loop goes on answering ``/metrics`` and ``/healthz``. The threads
are daemons (``concurrent.futures.ThreadPoolExecutor``'s are joined when the interpreter exits,
so one stuck call would hold SIGTERM back).

Processes (``isolated``): work that reads model files or computes from them (a model
directory's features and safetensors headers, plans, scale hints) runs in a process of its own,
forked from a fork server that has coldscope's modules loaded (tens of milliseconds; none of
serve's threads, sockets or memory is inherited), so that the work itself can be bounded:

* at most ``processes`` at once: one more is refused at once with a 503 (``Busy``), never
  queued, so a burst of heavy requests costs a fixed amount of memory and CPU (the storing
  thread, which has time, waits for a slot instead);
* its address space may grow by ``memory_bytes`` past what it starts with (``RLIMIT_AS``): an
  allocation beyond it is a ``MemoryError`` there and a 503 here (``TooBig``), and whatever it
  allocated goes back to the system when it ends;
* past its time limit it is killed (SIGKILL), so ``--request-timeout`` ends the work, not only
  the wait; it also sets an alarm on itself, so it ends even if serve is killed first.

Refusals raised there (``ColdscopeError``) come back as the same one-line error; any other
exception is logged here with its traceback and is a 500, as on a thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import os
import queue
import resource
import signal
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from coldscope.util.errors import ColdscopeError

T = TypeVar("T")

log = logging.getLogger("coldscope.serve")

#: Modules the fork server loads once, so that a process forked for a request starts in tens
#: of milliseconds with everything its work imports already there. Each such process runs the
#: program's main script again under the name ``__mp_main__`` (multiprocessing's rule for
#: scripts: its entry point must be guarded); ``coldscope.cli.main`` is what the ``coldscope``
#: script imports, so that costs nothing. ``__main__`` as multiprocessing's default has it.
PRELOAD = ["__main__", "coldscope.cli.main", "coldscope.serve.service",
           "coldscope.prediction.startup_model", "coldscope.prediction.features",
           "coldscope.planning.planner", "coldscope.planning.hint"]
#: Memory one heavy request's process may add to what it starts with (``--request-memory``).
REQUEST_MEMORY_BYTES = 1024 * 2**20


class Unavailable(ColdscopeError):
    """Serve cannot answer this now: the store cannot be read, the work ran past its time or
    memory bound, or too many heavy requests are running (HTTP 503)."""


class TooSlow(Unavailable):
    """The work did not finish within its time limit (HTTP 503)."""


class Busy(Unavailable):
    """Every process slot is taken (HTTP 503)."""


class TooBig(Unavailable):
    """The work needed more memory than its process may have (HTTP 503)."""


class Workers:
    """``size`` daemon threads taking calls from one queue, and at most ``processes`` heavy
    calls at once, each in a process of its own that may use ``memory_bytes`` more memory than
    it starts with."""

    def __init__(self, size: int = 4, name: str = "coldscope-work", *, processes: int = 4,
                 memory_bytes: int = REQUEST_MEMORY_BYTES):
        # calls of every result type share the queue: (future, function, args, kwargs)
        self._calls: queue.SimpleQueue[
            tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] = \
            queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                         for i in range(size)]
        self._started = False
        self._lock = threading.Lock()
        self.processes = processes
        self.memory_bytes = memory_bytes
        self._slots = threading.BoundedSemaphore(processes)
        self._children: set[BaseProcess] = set()

    # -- threads ---------------------------------------------------------------------------------

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

    # -- processes -------------------------------------------------------------------------------

    def warm(self) -> None:
        """Start the fork server now (about a second), so the first heavy request does not
        wait for it. Safe to call from any thread, any number of times."""
        if _context().get_start_method() == "forkserver":
            from multiprocessing import forkserver
            forkserver.ensure_running()

    def isolated(self, fn: Callable[..., T], *args: Any, timeout: float,
                 what: str = "the request", wait: bool = False) -> T:
        """``fn(*args)`` in a process of its own, killed after ``timeout`` seconds; ``fn`` and
        ``args`` must pickle (a module-level function, plain data). With every slot taken it
        raises ``Busy`` at once, or, with ``wait``, waits up to ``timeout`` for one. Blocks the
        calling thread (never the event loop's)."""
        acquired = (self._slots.acquire(timeout=timeout) if wait
                    else self._slots.acquire(blocking=False))
        if not acquired:
            raise Busy(f"{what} not started: {self.processes} requests that read model files "
                       "are already running (serve's --workers); try again shortly")
        try:
            return self._in_process(fn, args, timeout, what)  # type: ignore[no-any-return]
        finally:
            self._slots.release()

    def _in_process(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float,
                    what: str) -> Any:
        ctx = _context()
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, name=f"coldscope-{what}", daemon=True,
                           args=(writer, fn, args, self.memory_bytes, math.ceil(timeout) + 1))
        deadline = time.monotonic() + timeout
        reply: tuple[Any, ...] | None = None
        try:
            proc.start()
            with self._lock:
                self._children.add(proc)
            writer.close()  # the child's end: EOF here once the child is gone
            if not reader.poll(max(deadline - time.monotonic(), 0.0)):
                raise TooSlow(f"{what} did not finish within {timeout:g} s; stopped "
                              "(serve's --request-timeout)")
            try:
                reply = reader.recv()
            except (EOFError, OSError):
                reply = None  # it died without a word: killed, or out of memory in C code
        finally:
            if proc.is_alive():
                proc.kill()
            if proc.pid is not None:
                proc.join()
            with self._lock:
                self._children.discard(proc)
            reader.close()
            writer.close()
        return self._answer(reply, proc.exitcode, what)

    def _answer(self, reply: tuple[Any, ...] | None, exitcode: int | None, what: str) -> Any:
        if reply is None:
            raise Unavailable(f"{what} ended without an answer (its process exited with "
                              f"{exitcode}); try again, or with less")
        kind = reply[0]
        if kind == "ok":
            return reply[1]
        if kind == "refused":
            raise reply[1](reply[2])
        if kind == "memory":
            raise TooBig(f"{what} needed more than {self.memory_bytes // 2**20} MiB of memory "
                         "(serve's --request-memory); gave up")
        log.error("%s failed in its process:\n%s", what, reply[1])
        raise RuntimeError(f"{what} failed (see serve's log)")

    def stop(self) -> None:
        """Let idle threads end (a busy one ends with its call, never waited for) and kill the
        processes still working."""
        with self._lock:
            if self._started:
                for _ in self._threads:
                    self._calls.put(None)
                self._started = False
                self._threads = [threading.Thread(target=self._loop, name=t.name, daemon=True)
                                 for t in self._threads]
            children = list(self._children)
        for proc in children:
            try:
                proc.kill()
            except (AttributeError, ValueError, OSError):
                pass  # already gone or closed


def _context() -> ForkServerContext | SpawnContext:
    """The fork server's context where there is one (Linux, macOS), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)  # read once, when the server starts
        return ctx
    return multiprocessing.get_context("spawn")


def _child(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...],
           memory_bytes: int, seconds: int) -> None:
    """A heavy call's process: bound itself, run ``fn``, send one reply, end."""
    signal.alarm(seconds)  # the kill from serve is the bound; this one outlives serve
    _bound_memory(memory_bytes)
    reply: tuple[Any, ...]
    try:
        reply = ("ok", fn(*args))
    except MemoryError:
        reply = ("memory",)
    except ColdscopeError as exc:
        # its own class when that is rebuilt from the message alone (NotFound, Busy, ...)
        simple = type(exc).__init__ is ColdscopeError.__init__
        reply = ("refused", type(exc) if simple else ColdscopeError, str(exc))
    except BaseException:
        reply = ("failed", traceback.format_exc())
    try:
        conn.send(reply)
    except MemoryError:  # the answer itself did not fit
        conn.send(("memory",))
    except Exception:  # an answer that does not pickle: a bug, reported as one
        conn.send(("failed", traceback.format_exc()))
    conn.close()


def _bound_memory(extra: int) -> None:
    """``RLIMIT_AS`` = this process's address space now + ``extra``; no core files. Without
    /proc (not Linux) the memory is not bounded."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return
    limit = pages * os.sysconf("SC_PAGE_SIZE") + extra
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    for bound in (soft, hard):
        if bound != resource.RLIM_INFINITY:
            limit = min(limit, bound)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
