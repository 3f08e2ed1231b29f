"""The simulator core: replicas with slots, a FIFO queue, cold starts; no autoscaling policy.

Model (all times in seconds since the trace's origin):

* A replica has ``concurrency`` slots; each slot serves one request at a time. A request's
  service takes ``service_s`` (prefill then decode) and its first token comes ``first_token_s``
  after its service starts. Concurrent requests do not slow each other down (a documented
  simplification of continuous batching: pick ``concurrency`` and the rates so that it holds).
* One FIFO queue in front of all replicas (like Knative's activator): a request starts on the
  slot that frees first (ties: the oldest replica), at ``max(arrival, slot free time)``. A new
  replica's slots are "free" from its ready time, so a request waiting for a starting replica
  simply starts when it is ready. This is the exact FCFS multi-server recurrence, done with a
  heap in compiled code.
* A *controller* (any policy) is consulted every ``controller.tick_s`` seconds with an
  :class:`TickObservation` and answers how many replicas it wants. The engine starts new replicas
  (each ready after a draw from the cold-start distribution) or removes surplus ones: starting
  ones first (newest first), then ready ones that free up first. A removed replica takes no new
  request, finishes the ones it has, and is paid for until then.
* A request "hit a cold start" when the replica that served it was not ready when it arrived.

Between ticks the engine runs requests in a compiled kernel (numba); only the controller runs
in Python, once a tick. The core knows nothing about any policy: see ``policies.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import numpy as np
from numba import njit

from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.sim.startup import ColdStart

#: Replicas (ready + starting) a run may hold unless told otherwise: 100,000 replicas of 8
#: slots take ~13 MB of heaps; a billion would take 100 GB.
REPLICA_LIMIT = 100_000

# Positions in the engine's int64 state vector, shared with the kernel.
_I, _J, _HEAP_N, _DEP_N, _FULL = 0, 1, 2, 3, 4

_F = TypeVar("_F", bound=Callable[..., Any])


def _jit(**options: Any) -> Callable[[_F], _F]:
    """numba's ``njit(**options)``, typed: the compiled function keeps the Python one's
    signature for the type checker (numba ships no type information)."""
    return cast(Callable[[_F], _F], njit(**options))


@_jit(cache=True, inline="always")
def _sift_down(ht: np.ndarray, hr: np.ndarray, n: int, pos: int) -> None:
    # Order: free time, then replica id (ties go to the oldest replica, deterministically).
    t, r = ht[pos], hr[pos]
    while True:
        c = 2 * pos + 1
        if c >= n:
            break
        if c + 1 < n and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hr[c + 1] < hr[c])):
            c += 1
        if ht[c] > t or (ht[c] == t and hr[c] >= r):
            break
        ht[pos], hr[pos] = ht[c], hr[c]
        pos = c
    ht[pos], hr[pos] = t, r


@_jit(cache=True, inline="always")
def _sift_up(ht: np.ndarray, hr: np.ndarray, pos: int) -> None:
    t, r = ht[pos], hr[pos]
    while pos > 0:
        p = (pos - 1) >> 1
        if ht[p] < t or (ht[p] == t and hr[p] <= r):
            break
        ht[pos], hr[pos] = ht[p], hr[p]
        pos = p
    ht[pos], hr[pos] = t, r


@_jit(cache=True)
def _dep_push(dep: np.ndarray, n: int, d: float) -> None:
    pos = n
    while pos > 0:
        p = (pos - 1) >> 1
        if dep[p] <= d:
            break
        dep[pos] = dep[p]
        pos = p
    dep[pos] = d


@_jit(cache=True)
def _dep_pop(dep: np.ndarray, n: int) -> None:
    """Remove the minimum of the departure heap of size n (n > 0)."""
    n -= 1
    d = dep[n]
    pos = 0
    while True:
        c = 2 * pos + 1
        if c >= n:
            break
        if c + 1 < n and dep[c + 1] < dep[c]:
            c += 1
        if dep[c] >= d:
            break
        dep[pos] = dep[c]
        pos = c
    if n > 0:
        dep[pos] = d


@_jit(cache=True)
def _advance(t_end: float, arrival: np.ndarray, service: np.ndarray, start: np.ndarray,
             cold: np.ndarray, heap_t: np.ndarray, heap_r: np.ndarray, dep: np.ndarray,
             ready_t: np.ndarray, removed: np.ndarray, busy_until: np.ndarray,
             st: np.ndarray) -> None:
    """Start every request that can start before ``t_end``; count arrivals and departures.

    ``st`` holds [next unstarted request, arrivals before t_end, slot-heap size, in-flight,
    departure heap full]. When the departure heap is full it stops early with ``st[_FULL]``
    set; the caller grows the heap and calls again.
    """
    n = arrival.shape[0]
    i, hn, dn = st[_I], st[_HEAP_N], st[_DEP_N]
    st[_FULL] = 0
    while i < n:
        a = arrival[i]
        if a >= t_end:
            break
        while dn > 0 and dep[0] <= a:  # finished before this arrival
            _dep_pop(dep, dn)
            dn -= 1
        if dn == dep.shape[0]:
            st[_FULL] = 1
            break
        while hn > 0 and removed[heap_r[0]]:  # lazily drop slots of removed replicas
            hn -= 1
            heap_t[0], heap_r[0] = heap_t[hn], heap_r[hn]
            _sift_down(heap_t, heap_r, hn, 0)
        if hn == 0:
            break
        r = heap_r[0]
        s = max(a, heap_t[0])
        if s >= t_end:
            break
        d = s + service[i]
        start[i] = s
        cold[i] = ready_t[r] > a
        heap_t[0] = d
        _sift_down(heap_t, heap_r, hn, 0)
        if d > busy_until[r]:
            busy_until[r] = d
        _dep_push(dep, dn, d)
        dn += 1
        i += 1
    while dn > 0 and dep[0] <= t_end:
        _dep_pop(dep, dn)
        dn -= 1
    j = st[_J]
    while j < n and arrival[j] < t_end:
        j += 1
    st[_I], st[_J], st[_HEAP_N], st[_DEP_N] = i, j, hn, dn


@_jit(cache=True)
def _push_slots(heap_t: np.ndarray, heap_r: np.ndarray, st: np.ndarray, free_t: float,
                replica: int, count: int) -> None:
    hn = st[_HEAP_N]
    for _ in range(count):
        heap_t[hn], heap_r[hn] = free_t, replica
        _sift_up(heap_t, heap_r, hn)
        hn += 1
    st[_HEAP_N] = hn


def _grown(a: np.ndarray, fill: float) -> np.ndarray:
    """``a`` twice as long, the new half ``fill`` (in ``a``'s dtype)."""
    return np.concatenate([a, np.full(a.size, fill, a.dtype)])


class TickObservation:
    """What a controller sees at a tick. One object, updated in place (ticks are hot).

    ``time``: the tick (s). ``in_flight``: requests being served. ``queued``: arrived, not
    started. ``concurrency`` = in_flight + queued (Knative's observed concurrency).
    ``arrivals``: requests that arrived since the previous tick. ``ready``/``starting``:
    replicas serving / still cold-starting (removed ones not counted).
    """

    __slots__ = ("time", "in_flight", "queued", "concurrency", "arrivals", "ready", "starting")

    def __init__(self) -> None:
        self.time = 0.0
        self.in_flight = self.queued = self.concurrency = self.arrivals = 0
        self.ready = self.starting = 0


@dataclass(frozen=True)
class PolicyContext:
    """Fixed facts a controller may use: slots per replica, tick, the start-up distribution."""

    concurrency: int
    tick_s: float
    startup: ColdStart


class Controller(Protocol):
    """Anything with these three members can drive the engine (see ``policies.py``)."""

    tick_s: float | None  # seconds between decisions; None: decide once, at the start

    def start(self, context: PolicyContext) -> int:
        """Reset state; return the replicas warm at time 0 (no cold start, paid from 0)."""
        ...

    def desired(self, obs: TickObservation) -> int:
        """The number of replicas wanted now (ready + starting)."""
        ...


@dataclass
class Workload:
    """Requests as columns: arrival (s since origin, sorted), service and first-token times.

    ``first_token_s`` may be None: the core never reads it, and a 27-million-request week saves
    216 MB by computing it later, in chunks, from the token counts.
    """

    arrival: np.ndarray
    service_s: np.ndarray
    first_token_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.arrival = np.ascontiguousarray(self.arrival, dtype=np.float64)
        self.service_s = np.ascontiguousarray(self.service_s, dtype=np.float64)
        n = self.arrival.size
        if self.first_token_s is not None:
            self.first_token_s = np.ascontiguousarray(self.first_token_s, dtype=np.float64)
            if self.first_token_s.size != n:
                raise ValueError("workload columns differ in length")
        if self.service_s.size != n:
            raise ValueError("workload columns differ in length")
        for lo in range(0, n - 1, 1 << 20):  # in chunks: no full-length temporary
            if np.any(np.diff(self.arrival[lo:lo + (1 << 20) + 1]) < 0):
                raise ValueError("arrivals must be sorted")


@dataclass
class RawRun:
    """Everything one engine run produced, before any summary.

    Per request: ``start`` (s; NaN if never served) and ``cold`` (hit a cold start).
    Per replica (creation order): ``replica_start`` (when it was asked for, billing starts),
    ``replica_ready``, ``replica_removed`` (inf: never), ``replica_busy_until`` (last
    departure; 0 if it served nothing), ``replica_warm`` (warm at time 0, no cold start).
    Per tick: ``tick_t``, ``tick_ready``, ``tick_starting``, ``tick_in_flight``,
    ``tick_queued``. ``end`` is the time the run stopped (s).
    """

    start: np.ndarray
    cold: np.ndarray
    replica_start: np.ndarray
    replica_ready: np.ndarray
    replica_removed: np.ndarray
    replica_busy_until: np.ndarray
    replica_warm: np.ndarray
    tick_t: np.ndarray
    tick_ready: np.ndarray
    tick_starting: np.ndarray
    tick_in_flight: np.ndarray
    tick_queued: np.ndarray
    end: float
    unserved: int


class Simulator:
    """Run a workload under a controller. Randomness only from the ``rng`` it is given.

    ``replica_limit`` bounds the replicas (ready + starting) a controller may hold: each costs
    ``concurrency`` slots of memory, so a policy asking for a billion replicas is refused with
    a one-line error instead of eating the machine.
    """

    def __init__(self, concurrency: int, startup: ColdStart, rng: np.random.Generator,
                 drain_limit_s: float = 3600.0, replica_limit: int = REPLICA_LIMIT) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.concurrency = int(concurrency)
        self.startup = startup
        self.rng = rng
        self.drain_limit_s = drain_limit_s
        self.replica_limit = int(replica_limit)

    def _bound(self, want: int, what: str) -> int:
        if want > self.replica_limit:
            raise ColdscopeError(
                f"{what} {want:,} replicas, above the limit of {self.replica_limit:,} "
                f"(raise it with --replica-limit)")
        return want

    def run(self, workload: Workload, controller: Controller,
            progress: Callable[[float], None] | None = None) -> RawRun:
        """Run to the end of the trace (plus draining); ``progress(fraction)`` now and then."""
        arrival, service = workload.arrival, workload.service_s
        n = arrival.size
        c = self.concurrency
        tick = controller.tick_s
        context = PolicyContext(concurrency=c, tick_s=tick if tick else math.inf,
                          startup=self.startup)
        start = np.full(n, np.nan)
        cold = np.zeros(n, dtype=np.bool_)
        st = np.zeros(5, dtype=np.int64)
        cap = 64
        rep_start = np.zeros(cap)
        rep_ready = np.zeros(cap)
        rep_busy = np.zeros(cap)
        rep_removed = np.zeros(cap, dtype=np.bool_)
        rep_removed_t = np.full(cap, np.inf)
        rep_warm = np.zeros(cap, dtype=np.bool_)
        heap_t = np.empty(cap * c)
        heap_r = np.empty(cap * c, dtype=np.int64)
        dep = np.empty(cap * c)
        n_rep = 0
        starting: list[int] = []  # ids of replicas not yet ready
        ready: list[int] = []  # ids of ready, not removed replicas

        def add(now: float, warm: bool) -> None:
            nonlocal n_rep, cap, rep_start, rep_ready, rep_busy, rep_removed, rep_removed_t
            nonlocal rep_warm, heap_t, heap_r
            if n_rep == cap:
                cap *= 2
                rep_start, rep_ready, rep_busy = (_grown(x, 0) for x in
                                                  (rep_start, rep_ready, rep_busy))
                rep_removed, rep_warm = _grown(rep_removed, False), _grown(rep_warm, False)
                rep_removed_t = _grown(rep_removed_t, np.inf)
                heap_t = _grown(heap_t, 0)
                heap_r = _grown(heap_r, 0)
            r = n_rep
            n_rep += 1
            ready_at = now if warm else now + float(self.startup.sample(self.rng))
            rep_start[r], rep_ready[r], rep_warm[r] = now, ready_at, warm
            _push_slots(heap_t, heap_r, st, ready_at, r, c)
            (ready if warm else starting).append(r)

        def remove(now: float, k: int) -> None:
            # Cancel starting replicas first (newest first): they serve nobody yet.
            while k and starting:
                r = max(starting)
                starting.remove(r)
                rep_removed[r], rep_removed_t[r] = True, now
                k -= 1
            if k:
                ids = np.asarray(ready)
                order = np.lexsort((ids, rep_busy[ids]))  # frees up first, then oldest
                for r in ids[order[:k]].tolist():
                    ready.remove(r)
                    rep_removed[r], rep_removed_t[r] = True, now
        for _ in range(self._bound(int(controller.start(context)), "the policy keeps")):
            add(0.0, warm=True)

        last = float(arrival[-1]) if n else 0.0
        if tick is None or not tick > 0:
            tick = math.inf
        obs = TickObservation()
        t_rec: list[float] = []
        rec_ready: list[int] = []
        rec_starting: list[int] = []
        rec_in_flight: list[int] = []
        rec_queued: list[int] = []
        now = 0.0
        arrived_before = 0
        stop_at = last + self.drain_limit_s
        while True:
            now = min(now + tick, stop_at) if math.isfinite(tick) else stop_at
            if starting:  # replicas whose cold start ended by now
                for r in [r for r in starting if rep_ready[r] <= now]:
                    starting.remove(r)
                    ready.append(r)
            while True:
                _advance(now, arrival, service, start, cold, heap_t, heap_r, dep, rep_ready,
                         rep_removed, rep_busy, st)
                if not st[_FULL]:
                    break
                dep = np.concatenate([dep, np.empty_like(dep)])
            i, j, in_flight = int(st[_I]), int(st[_J]), int(st[_DEP_N])
            obs.time = now
            obs.in_flight = in_flight
            obs.queued = j - i
            obs.concurrency = in_flight + j - i
            obs.arrivals = j - arrived_before
            arrived_before = j
            obs.ready, obs.starting = len(ready), len(starting)
            t_rec.append(now)
            rec_ready.append(obs.ready)
            rec_starting.append(obs.starting)
            rec_in_flight.append(in_flight)
            rec_queued.append(obs.queued)
            if (i >= n and now >= last) or now >= stop_at:
                break
            want = self._bound(max(0, int(controller.desired(obs))), "the policy asked for")
            if progress is not None and len(t_rec) % 4096 == 0:
                progress(min(1.0, now / last) if last > 0 else 1.0)
            have = obs.ready + obs.starting
            if want > have:
                for _ in range(want - have):
                    add(now, warm=False)
            elif want < have:
                remove(now, have - want)

        m = n_rep
        return RawRun(
            start=start, cold=cold,
            replica_start=rep_start[:m].copy(), replica_ready=rep_ready[:m].copy(),
            replica_removed=rep_removed_t[:m].copy(), replica_busy_until=rep_busy[:m].copy(),
            replica_warm=rep_warm[:m].copy(),
            tick_t=np.asarray(t_rec), tick_ready=np.asarray(rec_ready, dtype=np.int64),
            tick_starting=np.asarray(rec_starting, dtype=np.int64),
            tick_in_flight=np.asarray(rec_in_flight, dtype=np.int64),
            tick_queued=np.asarray(rec_queued, dtype=np.int64),
            end=now, unserved=int(n - st[_I]),
        )
