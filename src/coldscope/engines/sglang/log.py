"""SGLang's start-up log (0.5.x) read into evidence and a six-stage timeline.

Pure functions of lines: ``parse_sglang_log(lines) -> SGLangEvidence``, ``sglang_spans(ev,
clock)`` and ``sglang_reading(ev)``. One table of line rules (``RULES``) over the message of
SGLang's own lines, which carry a ``[YYYY-MM-DD HH:MM:SS]`` stamp (``[... TP0]`` with tensor
parallelism). Unknown lines are skipped, never fatal. Reached only from the
``coldscope.engines.sglang`` package (import-linter contract ``engine-packages``), as vLLM's
rules are reached only from ``coldscope.engines.vllm``.

How the stages come out of a log (times on the log's own clock, 1 s resolution, unless a line
states its seconds):

- ``bootstrap``: the engine's first own line to the first ``Load weight begin`` (only when the
  log shows the start: a ``server_args=ServerArgs(...)`` line), sub-step
  ``bootstrap/init_distributed`` from ``Init torch distributed ... elapsed=X s``.
- ``model_loading``: each ``Load weight begin`` / ``Load weight end`` pair; the pair's own
  ``elapsed=X s`` (0.5.11+) else its two timestamps. A speculative draft model loads a second
  time: the stage is the sum of the loads' own durations, never first begin to last end.
  With tensor parallelism the slowest rank's loads (said in the notes).
- ``kv_cache_profiling``: each load's end to its ``Memory pool end`` (``KV Cache is allocated``
  when that line is missing) -- SGLang sizes the pool from free memory, then allocates it; plus
  the host memory of a hierarchical cache (``Allocating X GB host memory for hierarchical KV
  cache`` up to the last engine line before the HTTP server starts).
- ``cuda_graph_capture``: each ``Capture [<phase>] cuda graph end. Time elapsed: X s`` /
  ``elapsed=X s`` (sub-step ``cuda_graph_capture/<phase>``, ``decode`` for the unnamed batch
  pass), less the compile below.
- ``torch_compile``: the piecewise pass's ``Compiling num tokens ... N/N [MM:SS<`` progress bar
  (whole seconds, from the pass's begin), else ``Compiling a graph for ... takes X s`` lines.
- ``server_ready``: the last engine step to the ready line, sub-step ``server_ready/warmup``
  from ``Application startup complete.`` to the ready line.
- ready: ``The server is fired up and ready to roll!`` -- SGLang's health check answers 200 only
  after its own warm-up request, which that line ends; ``Application startup complete.`` is
  the ready line only when the server args say ``skip_server_warmup=True``.
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coldscope.capture.logtext import (
    MAX_CLOCK_STEP_S,
    MAX_STARTUP_S,
    NumberedLines,
    cleaned,
    clock_step_error,
    is_plain,
    line_numbers,
    redraws,
    startup_length_error,
    strip_outer_prefix,
)
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TORCH_COMPILE,
)
from coldscope.core.timeline import Span, Timeline, from_durations, reconcile, subtract
from coldscope.engines.sglang.markers import FATAL_RX, STAMP

#: The source name of stages timed on the log's own clock between lines (as vLLM's reading).
LOG_CLOCK = "log-clock"

#: A level (and ``file.py:N:``) some releases put after the stamp; uvicorn's ``INFO:``.
LEVEL = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)"
                   r"(?::\s+| (?P<where>[\w.\-/]+\.py:\d+): )")

_S = r"(?P<s>\d+(?:\.\d+)?)\s*s\b"
#: (event, pattern over the message of an own line). The first match names the line.
RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx, re.IGNORECASE if name.startswith("capture") else 0))
    for name, rx in (
        ("server_args", r"\bserver_args=ServerArgs\("),
        ("init_dist_begin", r"^Init torch distributed begin"),
        ("init_dist_end", r"^Init torch distributed ends\.(?:\s*elapsed=" + _S + ")?"),
        ("load_begin", r"^Load weight begin\b"),
        ("load_end", r"^Load weight end\.(?:\s*elapsed=" + _S + ")?"),
        ("kv_allocated", r"^KV Cache is allocated\b"),
        ("pool_end", r"^Memory pool end\b"),
        ("capture_begin", r"^Capture (?P<phase>(?:(?!cuda graph)[\w-]+ ){0,2})cuda graph begin"),
        ("capture_end", r"^Capture (?P<phase>(?:(?!cuda graph)[\w-]+ ){0,2})cuda graph end\b"
                        r".*?(?:Time elapsed:|elapsed=)\s*" + _S),
        ("compile_graph", r"^Compiling a graph for .*? takes " + _S),
        ("host_cache", r"^Allocating \d+(?:\.\d+)? [KMGT]i?B host memory for hierarchical"),
        ("scheduler_done", r"^max_total_num_tokens="),
        ("server_process", r"^Started server process"),
        ("app_startup_complete", r"^Application startup complete"),
        ("ready", r"^The server is fired up and ready to roll"),
        ("fatal", FATAL_RX),
    )
)


def _any_rule(anchored: bool) -> re.Pattern[str]:
    """One pattern for the ``RULES`` that open with ``^`` (``anchored``, without it: tried at
    the message's start only), or for the others."""
    parts = []
    for _, rx in RULES:
        if rx.pattern.startswith("^") != anchored:
            continue
        # (groups made plain; word boundaries left out: they only narrow a match, and one
        # in front of an alternative makes the search try it at every character)
        body = re.sub(r"\(\?P<\w+>", "(?:", rx.pattern.removeprefix("^")).replace(r"\b", "")
        parts.append(("(?i:{})" if rx.flags & re.IGNORECASE else "(?:{})").format(body))
    return re.compile("|".join(parts))


#: Whether any of ``RULES`` can match a message (``_may_mean``): most lines are passed over
#: with two quick looks instead of a search per rule.
_ANY_OPENING, _ANY_INSIDE = _any_rule(anchored=True), _any_rule(anchored=False)


def _may_mean(msg: str) -> bool:
    return _ANY_OPENING.match(msg) is not None or _ANY_INSIDE.search(msg) is not None

#: The release as a log states it (a container banner ``SGLang Version 0.5.11+05fb6a52``, a
#: package list ``sglang==0.5.7``, ``sglang version: X``); never a path such as
#: ``/src/sglang_0.5.7/``.
VERSION = re.compile(r"(?:\bSGLang[ _]?[Vv]ersion[:=]?\s*v?|\bsglang(?:==|\s+version:?\s+v?))"
                     r"(?P<v>\d+\.\d+(?:\.\d+)?(?:[\w.+-]*\w)?)")
#: The banner as a container prints it: the whole line is ``SGLang Version X``.
BANNER_LINE = re.compile(r"SGLang[ _]?[Vv]ersion[:=]?\s*v?\d+\.\d+(?:\.\d+)?(?:[\w.+-]*\w)?")
#: A tqdm bar's last frame of the piecewise pass's compile: ``58/58 [00:08<00:00``.
#: (From the first "Compiling num tokens" of the frame only: a later one would read the same,
#: and trying each would cost the square of a crafted line's length.)
COMPILE_BAR = re.compile(r"^(?>.*?Compiling num tokens).*?\|\s*(?P<n>\d+)/(?P=n)\s*"
                         r"\[(?:(?P<h>\d+):)?(?P<m>\d+):(?P<sec>\d+)<")
TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b.*")
#: Server arguments the reading uses, as ``server_args=ServerArgs(...)`` prints them.
ARG = re.compile(r"\b(?P<k>model_path|served_model_name|device|skip_server_warmup|"
                 r"enable_torch_compile|disable_cuda_graph|tp_size|speculative_algorithm|"
                 r"speculative_draft_model_path|cuda_graph_bs|disable_piecewise_cuda_graph)="
                 r"(?P<v>'[^']*'|\[[^\]]*\]|[^,)]+)")

#: How much of the ``server_args=ServerArgs(...)`` line the arguments are read from (the
#: longest real one: 12 kB).
ARGS_CHARS = 64 * 1024

READY_TEXT = "The server is fired up and ready to roll!"
_QUOTE_MAX = 200


@dataclass(frozen=True)
class Event:
    """One meaningful line: ``name`` from ``RULES`` (or ``compile_bar``, ``exception``), its
    0-based line number, its time on the log's clock (Unix seconds of the stamp read as UTC;
    only differences matter), the seconds it states, the rank tags and the capture phase."""

    line_no: int
    name: str
    t: float | None
    seconds: float | None = None
    rank: str = ""
    phase: str | None = None
    text: str = ""


@dataclass
class SGLangEvidence:
    """What ``parse_sglang_log`` read: events in line order, the first own line, the server
    arguments it uses, the version and each line's time (the last own stamp on it)."""

    events: list[Event] = field(default_factory=list)
    first_own: tuple[int, float] | None = None
    args: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    line_clock: dict[int, float] = field(default_factory=dict)
    """The time of each line with an own stamp (the last one on it), by line number; lines
    without one are not in it."""
    line_count: int = 0
    """How many lines the log has (line numbers run from 0 to ``line_count - 1``)."""
    _stamped: list[int] | None = field(default=None, repr=False, compare=False)

    def stamped_lines(self) -> list[int]:
        """The numbers of the lines in ``line_clock``, in order (read once, then kept)."""
        if self._stamped is None or len(self._stamped) != len(self.line_clock):
            self._stamped = sorted(self.line_clock)
        return self._stamped
    warnings: list[tuple[int, str, str, str]] = field(default_factory=list)
    """(line, level, where, message) of WARNING/ERROR/CRITICAL own lines."""

    def named(self, *names: str) -> list[Event]:
        return [e for e in self.events if e.name in names]

    def first(self, name: str) -> Event | None:
        return next((e for e in self.events if e.name == name), None)

    repeated: int = 0
    """Lines of the rules seen a second time with the same stamp and text (counted once)."""
    banner: bool = False
    """Whether SGLang's container banner (``SGLang Version X``) is there."""

    @property
    def recognised(self) -> bool:
        """Whether the lines are SGLang's: a line only SGLang prints, or its banner (a package
        list naming ``sglang==X`` in another engine's log proves nothing)."""
        return self.banner or any(e.name in _OWN_MARKERS for e in self.events)


#: Events only SGLang logs (a uvicorn line or a traceback proves nothing).
_OWN_MARKERS = frozenset({"server_args", "load_begin", "load_end", "kv_allocated", "pool_end",
                          "capture_begin", "capture_end", "ready", "scheduler_done"})


def clean_lines(lines: Sequence[str]) -> list[str]:
    """Raw lines -> text the rules read, one for one: terminal control sequences removed and a
    tqdm bar's carriage-return frames split onto newlines within the line, a collector's
    timestamp prefix (docker/kubectl/journald) removed. The pieces are the engine-neutral
    cleaner's (``capture.logtext``), applied line for line so that indexes stay the caller's:
    live spans look arrival times up by them."""
    out = []
    for line in lines:
        if line.__class__ is str and is_plain(line):  # (most lines)
            out.append(line.rstrip("\r\n"))
            continue
        text, _ = strip_outer_prefix(str(line).lstrip("\ufeff"))
        out.append("\n".join(cleaned(piece) for piece in redraws(text)))
    return out


def _stamp_time(m: re.Match[str]) -> float | None:
    """A stamp's Unix seconds, read as UTC; None when it is not a real time."""
    whole = _unix_seconds(f"{m.group('date')} {m.group('time')[:8]}")
    if whole is None:
        return None
    frac = m.group("time")[9:]
    return float(whole) + (float("0." + frac) if frac else 0.0)


def _unix_seconds(text: str) -> int | None:
    """``YYYY-MM-DD HH:MM:SS`` as Unix seconds (UTC): what ``datetime.strptime`` reads, with
    its arithmetic done here (it is read for every stamped line); None when not a real
    time."""
    if not text.isascii():  # other digits: as strptime reads them
        try:
            when = dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
        return int(when.replace(tzinfo=dt.UTC).timestamp())
    try:
        year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
        hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    except ValueError:
        return None
    if not (year >= 1 and 1 <= month <= 12 and hour < 24 and minute < 60 and second < 60):
        return None
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= day <= (29 if month == 2 and leap else _DAYS_IN[month - 1]):
        return None
    # days from 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's algorithm)
    y = year - (month <= 2)
    era, yoe = divmod(y, 400)
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return days * 86400 + hour * 3600 + minute * 60 + second


_DAYS_IN = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def parse_sglang_log(lines: Sequence[str]) -> SGLangEvidence:
    """Evidence from a saved or followed SGLang log (raw lines; cleaned here). Line numbers
    are the log's own (``logtext.line_numbers``: a ``NumberedLines``' numbers, else the
    indexes), so every quote is the line the user sees."""
    count = lines.file_lines if isinstance(lines, NumberedLines) else len(lines)
    return _parse_clean(clean_lines(lines), line_numbers(lines), count)


def _parse_clean(lines: Sequence[str], numbers: Sequence[int], count: int) -> SGLangEvidence:
    ev = SGLangEvidence(line_count=count)
    in_traceback = False
    seen: set[tuple[str, str]] = set()  # (stamp with tags, message) of the events read
    for at, line in enumerate(lines):
        if not line:
            continue
        i = numbers[at]
        for seg in line.split("\n"):
            if not seg.strip():
                continue
            if ev.version is None and ("SGLang" in seg or "sglang" in seg) and \
                    (v := VERSION.search(seg)):
                ev.version = v.group("v")
                # the container's banner is a line of its own; quoted in prose it proves nothing
                ev.banner = (v.group(0).lower().startswith("sglang version")
                             and BANNER_LINE.fullmatch(seg.strip()) is not None)
            m = STAMP.search(seg)
            if m is None:
                in_traceback = _unstamped(ev, i, seg, in_traceback)
                continue
            t = _stamp_time(m)
            if t is None:
                continue
            in_traceback = False
            ev.line_clock[i] = t
            if ev.first_own is None:
                ev.first_own = (i, t)
            msg = m.group("msg")
            rank = m.group("tags").strip()
            lv = LEVEL.match(msg)
            if lv is not None:
                msg = msg[lv.end():]
                if lv.group("level") in ("WARNING", "ERROR", "CRITICAL"):
                    ev.warnings.append((i, lv.group("level"), lv.group("where") or "",
                                        msg.strip()))
            if TRACEBACK.match(msg):
                in_traceback = True
            for name, rx in RULES if _may_mean(msg) else ():
                r = rx.search(msg)
                if r is None:
                    continue
                key = (m.group(0)[: m.start("msg") - m.start()], msg)
                if key in seen:  # a line a harness or a log shipper repeated counts once
                    ev.repeated += 1
                    break
                seen.add(key)
                groups = r.groupdict()
                secs = float(groups["s"]) if groups.get("s") else None
                phase = (groups.get("phase") or "").strip() or None
                ev.events.append(Event(i, name, t, secs, rank, phase, msg.strip()))
                if name == "server_args" and not ev.args:
                    # (the first ARGS_CHARS of the line: an unclosed bracket or quote makes
                    # each argument after it look to the end of the line)
                    ev.args = {a.group("k"): a.group("v").strip("'")
                               for a in ARG.finditer(msg, 0, ARGS_CHARS)}
                if name == "fatal" and "Traceback" in msg:
                    in_traceback = True
                break
    return ev


def _unstamped(ev: SGLangEvidence, i: int, seg: str, in_traceback: bool) -> bool:
    """Unstamped text: a tqdm compile bar's last frame, a traceback and its exception line."""
    if "Compiling num tokens" in seg:
        last = COMPILE_BAR.search(seg)  # one frame per segment: clean_lines split them
        if last is not None:
            secs = (int(last.group("h") or 0) * 3600 + int(last.group("m")) * 60
                    + int(last.group("sec")))
            ev.events.append(Event(i, "compile_bar", None, float(secs)))
        return in_traceback
    if TRACEBACK.match(seg.strip()):
        return True
    if in_traceback and not seg.startswith((" ", "\t")) and EXCEPTION.match(seg):
        ev.events.append(Event(i, "exception", None, text=seg.strip()))
        return False
    return in_traceback


# --------------------------------------------------------------------------------------------
# Reading: spans, time to ready, failure


@dataclass
class SGLangReading:
    """The timeline of one SGLang start-up read from its log (for one that never became ready:
    the stages it got through, with no time to ready), why it failed (quoted from the log) and
    how it was read."""

    timeline: Timeline | None
    failure: str | None
    notes: list[str]
    ready: Event | None
    start: int
    end: int


def _quote(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _QUOTE_MAX else text[: _QUOTE_MAX - 1] + "…"


def _window(ev: SGLangEvidence, notes: list[str]) -> tuple[int, int]:
    """Line range of the first start-up: from the first own line to the next ``server_args``
    line (a second start-up: a restart, or another server's log appended)."""
    starts = ev.named("server_args")
    start = ev.first_own[0] if ev.first_own is not None else 0
    end = ev.line_count
    if len(starts) > 1:
        end = starts[1].line_no
        notes.append(f"the log holds {len(starts)} start-ups (server_args lines at "
                     f"{', '.join(str(s.line_no + 1) for s in starts)}); the first is read")
    return start, end


def _pick_rank(events: list[Event], notes: list[str]) -> str:
    """The rank whose loads took longest (tensor parallelism); '' without rank tags."""
    ranks = sorted({e.rank for e in events if e.name in ("load_begin", "load_end")})
    if len(ranks) <= 1:
        return ranks[0] if ranks else ""
    by_rank: dict[str, list[Event]] = {}
    for e in events:
        by_rank.setdefault(e.rank, []).append(e)
    totals = {r: sum(d for _, _, d in _loads(by_rank[r])) for r in ranks}
    slowest = max(ranks, key=lambda r: totals[r])
    notes.append(f"{len(ranks)} ranks load weights ({_listed(ranks)}); the slowest, "
                 f"{slowest} ({totals[slowest]:.2f} s), is reported")
    return slowest


#: Most items a note lists (a crafted log can hold thousands of ranks or loads).
_LISTED = 16


def _listed(items: Sequence[str], sep: str = ", ") -> str:
    """``items`` joined, the first ``_LISTED`` of them when there are more."""
    if len(items) <= _LISTED:
        return sep.join(items)
    return f"{sep.join(items[:_LISTED])}{sep}... ({len(items)} in all)"


def _loads(events: list[Event]) -> list[tuple[Event, Event, float]]:
    """(begin, end, seconds) of each weight load: each begin with the next end; the end's own
    ``elapsed=`` when it states one, else the two stamps."""
    out = []
    begin: Event | None = None
    for e in events:
        if e.name == "load_begin":
            begin = e
        elif e.name == "load_end" and begin is not None:
            secs = e.seconds if e.seconds is not None else (e.t or 0.0) - (begin.t or 0.0)
            out.append((begin, e, max(0.0, secs)))
            begin = None
    return out


def _placed(tb: float | None, te: float | None,
            secs: float | None) -> tuple[float, float] | None:
    """Where a step ran, from its begin and end lines' times and the seconds it states: with
    whole-second stamps (truncated), a step that states ``secs`` began no earlier than its
    begin line's stamp, so it is placed there when ``te - secs`` would start it earlier."""
    if secs is None:
        return (tb, te) if tb is not None and te is not None and te >= tb else None
    if te is None:
        return None
    start = te - secs if tb is None else max(tb, te - secs)
    return (start, start + secs)




def sglang_spans(ev: SGLangEvidence, clock: Callable[[Event], float | None], *,
                 start: int = 0, end: int | None = None, ready: Event | None = None,
                 notes: list[str] | None = None) -> list[Span]:
    """Spans (source ``"log"``) of the start-up in lines ``[start, end)``, on ``clock`` (a
    line's time: its stamp for a saved log, its arrival for a followed one)."""
    notes = [] if notes is None else notes
    end = ev.line_count if end is None else end
    events = [e for e in ev.events if start <= e.line_no < end
              and (ready is None or e.line_no <= ready.line_no)]
    rank = _pick_rank(events, notes)
    own = [e for e in events if e.rank == rank or e.name not in _RANKED]
    if not any(e.name in _RANKED for e in own):
        own = events

    def at(e: Event | None) -> float | None:
        return None if e is None else clock(e)

    spans: list[Span] = []

    def add(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None and b > a:
            spans.append(Span(name, a, b, "log", "engine"))

    loads = _loads(own)
    steps_end: list[float] = []
    pool_ends = _Ordered(x for x in own if x.name == "pool_end")
    allocated = _Ordered(x for x in own if x.name == "kv_allocated")
    for i, (begin, e, secs) in enumerate(loads):
        window = _placed(at(begin), at(e), secs)
        if window is None:
            continue
        what = f"{MODEL_LOADING}/weights" if i == 0 else f"{MODEL_LOADING}/draft_weights"
        add(what, *window)
        add(MODEL_LOADING, *window)
        steps_end.append(window[1])
        nxt = loads[i + 1][0].line_no if i + 1 < len(loads) else end
        pool = _first_between(pool_ends, e.line_no, nxt) or \
            _first_between(allocated, e.line_no, nxt)
        if pool is not None and (tp := at(pool)) is not None:
            add(KV_CACHE_PROFILING, window[1], tp)
            steps_end.append(max(tp, window[1]))
    if len(loads) > 1:
        notes.append(f"{len(loads)} weight loads (a speculative draft model's second load): "
                     "model_loading is the sum of their own durations "
                     f"({_listed([f'{s:.2f}' for _, _, s in loads], ' + ')} s)")

    # Capture passes: each end with the last begin of its phase before it.
    begins = _Ordered(e for e in own if e.name == "capture_begin")
    by_phase: dict[str, list[Event]] = {}
    for x in begins.events:
        by_phase.setdefault((x.phase or "").lower(), []).append(x)
    phase_begins = {phase: _Ordered(xs) for phase, xs in by_phase.items()}
    passes: list[tuple[Event | None, Event, tuple[float, float]]] = []
    first_window: dict[int, tuple[float, float]] = {}  # id of a begin -> its first pass
    for e in (x for x in own if x.name == "capture_end"):
        same = phase_begins.get((e.phase or "").lower())
        pb = same.last_before(e.line_no) if same is not None else None
        window = _placed(at(pb), at(e), e.seconds)
        if window is not None:
            passes.append((pb, e, window))
            first_window.setdefault(id(pb), window)

    # Compile inside a capture pass (the piecewise pass): its progress bar's whole seconds
    # from the pass's start (a bar drawn twice counts once), else the graph compile lines.
    compiles: list[tuple[float, float]] = []
    drawn: set[tuple[float, float]] = set()
    for bar in (e for e in own if e.name == "compile_bar"):
        bb = begins.last_before(bar.line_no + 1)
        window = first_window.get(id(bb))
        tb = window[0] if window is not None else at(bb)
        if tb is not None and bar.seconds:
            piece = (tb, tb + bar.seconds if window is None else min(window[1], tb + bar.seconds))
            if piece not in drawn:
                drawn.add(piece)
                compiles.append(piece)
    if compiles:
        notes.append("torch_compile: the piecewise capture pass's 'Compiling num tokens' "
                     f"progress bar ({' + '.join(f'{b - a:g}' for a, b in compiles)} s, whole "
                     "seconds), carved out of that pass")
    else:
        for e in (x for x in own if x.name == "compile_graph"):
            te = at(e)
            if te is not None and e.seconds:
                compiles.append((te - e.seconds, te))
    for lo, hi in compiles:
        add(TORCH_COMPILE, lo, hi)

    for _, e, window in passes:
        phase = (e.phase or "decode").lower().replace(" ", "_")
        for lo, hi in subtract(window, compiles):
            add(CUDA_GRAPH_CAPTURE, lo, hi)
            add(f"{CUDA_GRAPH_CAPTURE}/{phase}", lo, hi)
        steps_end.append(window[1])

    host = next((x for x in own if x.name == "host_cache"), None)
    if host is not None:
        server = next((x for x in events if x.line_no > host.line_no
                       and x.name in ("server_process", "app_startup_complete")), None)
        stop = server.line_no if server else end
        last = max((x for x in ev.line_clock if host.line_no <= x < stop), default=None)
        if last is not None:
            tl = clock(Event(last, "line", ev.line_clock[last]))
            add(f"{KV_CACHE_PROFILING}/host_cache", at(host), tl)
            add(KV_CACHE_PROFILING, at(host), tl)
            if tl is not None:
                steps_end.append(tl)

    first_load = loads[0][0] if loads else next((x for x in own if x.name == "load_begin"),
                                                None)
    shows_start = ev.first("server_args") is not None  # else the log was cut at the front
    if shows_start and first_load is not None and ev.first_own is not None:
        first = clock(Event(ev.first_own[0], "line", ev.first_own[1]))
        add(BOOTSTRAP, first, at(first_load))
        d = next((x for x in own if x.name == "init_dist_end"), None)
        td = at(d)
        if d is not None and d.seconds and td is not None:
            add(f"{BOOTSTRAP}/init_distributed", td - d.seconds, td)

    if ready is not None and steps_end:
        tr = at(ready)
        add(SERVER_READY, max(steps_end), tr)
        app = next((x for x in events if x.name == "app_startup_complete"), None)
        if app is not None and ready.name == "ready":
            add(f"{SERVER_READY}/warmup", at(app), tr)
    return spans


class _Ordered:
    """Events in line order, looked up by line number (bisection, not a scan per look)."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.events = list(events)
        self.lines = [e.line_no for e in self.events]

    def last_before(self, line_no: int) -> Event | None:
        """The last event on a line before ``line_no``."""
        at = bisect.bisect_left(self.lines, line_no)
        return self.events[at - 1] if at else None


def _first_between(events: _Ordered, after: int, before: int) -> Event | None:
    """The first of ``events`` on a line after ``after`` and before ``before``."""
    at = bisect.bisect_right(events.lines, after)
    return events.events[at] if at < len(events.lines) and events.lines[at] < before else None


_RANKED = frozenset({"load_begin", "load_end", "kv_allocated", "pool_end", "capture_begin",
                     "capture_end", "compile_graph", "init_dist_end", "host_cache"})


def _ready(ev: SGLangEvidence, start: int, end: int, notes: list[str]) -> Event | None:
    inside = [e for e in ev.events if start <= e.line_no < end]
    ready = next((e for e in inside if e.name == "ready"), None)
    if ready is not None:
        app = next((e for e in inside if e.name == "app_startup_complete"), None)
        if app is not None:
            notes.append("ready: 'The server is fired up and ready to roll!' (after SGLang's "
                         "own warm-up request; its health check answers only then), not "
                         "'Application startup complete.' "
                         f"({(ready.t or 0) - (app.t or 0):.0f} s earlier, server_ready/warmup)")
        return ready
    app = next((e for e in inside if e.name == "app_startup_complete"), None)
    if app is not None and ev.args.get("skip_server_warmup") == "True":
        notes.append("ready: 'Application startup complete.' (skip_server_warmup=True: no "
                     "warm-up request, so no 'fired up' line)")
        return app
    return None


def _failure(ev: SGLangEvidence, start: int, end: int) -> str:
    """Why a start-up never reached its ready line, quoted from the log."""
    inside = [e for e in ev.events if start <= e.line_no < end]
    exc = next((e for e in inside if e.name == "exception"), None)
    fatal = next((e for e in inside if e.name == "fatal"), None)
    errors = [(i, msg) for i, level, _, msg in ev.warnings
              if start <= i < end and level in ("ERROR", "CRITICAL")]
    if exc is not None:
        return f"crashed before ready: \"{_quote(exc.text)}\" (line {exc.line_no + 1})"
    if fatal is not None:
        return f"crashed before ready: \"{_quote(fatal.text)}\" (line {fatal.line_no + 1})"
    if errors:
        i, msg = errors[0]
        return f"failed before ready: \"{_quote(msg)}\" (line {i + 1})"
    last = next((e for e in reversed(inside) if e.name in _MILESTONES), None)
    where = (f"after \"{_quote(last.text)}\" (line {last.line_no + 1})" if last is not None
             else "before any start-up step")
    return f"cut off {where}: no \"{READY_TEXT}\" line"


_MILESTONES = frozenset({"server_args", "init_dist_begin", "init_dist_end", "load_begin",
                         "load_end", "kv_allocated", "pool_end", "capture_begin", "capture_end",
                         "scheduler_done", "host_cache", "server_process",
                         "app_startup_complete"})


def sglang_reading(ev: SGLangEvidence) -> SGLangReading:
    """The start-up a saved log shows, on its own clock: time to ready from the engine's first
    own line to the ready line, stages from ``sglang_spans`` reconciled by
    ``coldscope.core.timeline.reconcile`` (so the buckets sum to time to ready exactly)."""
    notes: list[str] = []
    if ev.repeated:
        notes.append(f"{ev.repeated} repeated line(s) (same stamp and text) counted once")
    start, end = _window(ev, notes)
    ready = _ready(ev, start, end, notes)
    if ready is None or ev.first_own is None or ready.t is None:
        return SGLangReading(_partial(ev, start, end, notes), _failure(ev, start, end), notes,
                             None, start, end)
    t0 = ev.first_own[1]
    ttr = ready.t - t0
    if ttr < 0:
        return SGLangReading(None, "the log's clock runs backwards between its first line "
                             f"(line {start + 1}) and its ready line (line {ready.line_no + 1})",
                             notes, ready, start, end)
    untrue = _untrue_clock(ev, start, ready, ttr)
    if untrue is not None:
        return SGLangReading(None, untrue, notes, ready, start, end)
    if ev.first("server_args") is None:
        notes.append("the log does not show the start (no server_args line): bootstrap is "
                     "unknown and time to ready runs from its first line")

    def clock(e: Event) -> float | None:
        t = e.t if e.t is not None else _line_time(ev, e.line_no)
        return None if t is None else t - t0

    spans = sglang_spans(ev, clock, start=start, end=end, ready=ready, notes=notes)
    not_applicable = set()
    if ev.args.get("disable_cuda_graph") == "True" or ev.args.get("device") == "cpu":
        not_applicable.add(CUDA_GRAPH_CAPTURE)
    if not any(s.stage == TORCH_COMPILE for s in spans) and \
            ev.args.get("enable_torch_compile") == "False" and \
            (ev.args.get("disable_piecewise_cuda_graph") in (None, "True")
             or CUDA_GRAPH_CAPTURE in not_applicable):
        not_applicable.add(TORCH_COMPILE)
    tl = reconcile(spans, ttr, not_applicable=not_applicable)
    if tl.stages.get(BOOTSTRAP) is not None:
        tl = replace(tl, sources={**tl.sources, BOOTSTRAP: LOG_CLOCK})
    return SGLangReading(tl, None, notes, ready, start, end)


#: The most the clock may step back below the latest stamp before it, in seconds: the
#: processes (ranks, nodes) stamp their own lines with their own clocks, whole seconds.
BACK_TOLERANCE_S = 60.0


def _untrue_clock(ev: SGLangEvidence, start: int, ready: Event, ttr: float) -> str | None:
    """Why the start-up's clock, from its first own line to its ready line, cannot be true
    (a step forward past ``logtext.MAX_CLOCK_STEP_S`` -- a stamp in another year is one,
    unless at the turn of the year --, a step back past ``BACK_TOLERANCE_S``, a time to
    ready past ``logtext.MAX_STARTUP_S``), naming the line; None when it can."""
    stamped = ev.stamped_lines()
    lo = bisect.bisect_left(stamped, start)
    hi = bisect.bisect_right(stamped, ready.line_no)
    before: tuple[float, int] | None = None
    peak: tuple[float, int] | None = None
    for x in stamped[lo:hi]:
        t = ev.line_clock[x]
        if before is not None and t - before[0] > MAX_CLOCK_STEP_S:
            return clock_step_error(t - before[0], x + 1, _when(t), _when(before[0]),
                                    before[1] + 1)
        if peak is not None and t < peak[0] - BACK_TOLERANCE_S:
            return (f"the log's clock goes back {peak[0] - t:,.0f} s at line {x + 1} "
                    f"({_when(t)}, after {_when(peak[0])} at line {peak[1] + 1}): more than "
                    f"its processes' clocks differ ({BACK_TOLERANCE_S:g} s); its lines are "
                    "out of order")
        before = (t, x)
        if peak is None or t > peak[0]:
            peak = (t, x)
    if not 0 <= ttr <= MAX_STARTUP_S:
        return startup_length_error(ttr, ready.line_no + 1)
    return None


def _when(t: float) -> str:
    """A stamp as SGLang prints it (``2026-06-08 01:57:04``), from its Unix seconds."""
    try:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{t:.0f}"


def _partial(ev: SGLangEvidence, start: int, end: int, notes: list[str]) -> Timeline | None:
    """The stages a start-up that never became ready got through (no time to ready, so no
    ``unattributed`` either), cut at its last own line."""
    if ev.first_own is None:
        return None
    t0 = ev.first_own[1]
    last = max((t for x, t in ev.line_clock.items() if start <= x < end), default=None)
    if last is None or last <= t0:
        return None

    def clock(e: Event) -> float | None:
        t = e.t if e.t is not None else _line_time(ev, e.line_no)
        return None if t is None else t - t0

    tl = reconcile(sglang_spans(ev, clock, start=start, end=end, notes=notes), last - t0)
    known = {k: v for k, v in tl.stages.items() if k in tl.sources and v is not None}
    return from_durations(known, source="log", substeps=tl.substeps)


def _line_time(ev: SGLangEvidence, line_no: int) -> float | None:
    """An unstamped line's time: the last own stamp at or before it."""
    stamped = ev.stamped_lines()
    at = bisect.bisect_right(stamped, line_no)
    return ev.line_clock[stamped[at - 1]] if at else None


def describe(ev: SGLangEvidence) -> dict[str, Any]:
    """Facts the adapter reports: model, device, capture sizes, compile on/off."""
    bs = ev.args.get("cuda_graph_bs")
    sizes = None
    if bs and bs.startswith("["):
        sizes = len([x for x in bs.strip("[]").split(",") if x.strip()]) or None
    compile_on = {"True": True, "False": False}.get(ev.args.get("enable_torch_compile", ""))
    return {"model": ev.args.get("model_path"), "device": ev.args.get("device"),
            "capture_sizes": sizes, "compile_enabled": compile_on}


def first_own_line(lines: Sequence[str]) -> int | None:
    """The index of the first of ``lines`` that only SGLang prints (a line of
    ``SGLangEvidence.recognised``: one of its own start-up lines, or its banner), or None."""
    ev = parse_sglang_log(lines)
    at = [e.line_no for e in ev.events if e.name in _OWN_MARKERS][:1]
    if ev.banner:
        at += [i for i, text in enumerate(lines)
               if any(BANNER_LINE.fullmatch(seg.strip()) for seg in text.split("\n"))][:1]
    return min(at) if at else None
