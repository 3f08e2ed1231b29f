"""What a vLLM start-up's reading says for the findings rules (``LogFacts``), in engine-neutral
terms: the compile cache's load failure and the recompile after it, the warnings, the memory
profiling line, the child processes' spawn gaps, the compile-cache directories.

It reads the lines the reading kept (``timeline.Startup.lines``: ``logtext.normalise`` has
cleaned them, so no colour or control sequence is left and none is removed again here) and the
evidence the grammar made of them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from coldscope.engines.roles import EngineWarning, LogFacts, LogLine
from coldscope.engines.vllm.grammar import (
    DOWNLOAD,
    MEMORY_PROFILING_END,
    STARTUP_PLAN,
    LogEvidence,
    split_clean,
    total_seconds,
)

if TYPE_CHECKING:
    from coldscope.engines.vllm.timeline import Startup

#: Lines meaning "a compile cache was there but could not be used, so the graphs were compiled
#: again" (0.32's AOT loader, whose warning names ``finalize_loading``; the older inductor-cache
#: wording).
LOAD_FAILED = re.compile(
    r"Compiling model again due to a load failure"
    r"|Failed to load (?:the )?(?:AOT[- ]compiled|compiled) (?:graph|function|artifact)"
    r"|Cache (?:load|loading) failed(?:(?!Cache (?:load|loading) failed).)*?recompil"
)
# (In these patterns, what lies between a phrase and its end never holds the phrase again:
# the same lines match, and a line that repeats the phrase costs its length, not its square.)
#: Lines that end a compile: the AOT artefact saved, or a graph's compile time reported.
COMPILE_SAVED = re.compile(r"saved AOT compiled function"
                           r"|Compiling a graph for (?:(?!Compiling a graph for ).)*? takes")
#: A warning or error line: optional process prefix, level, ``MM-DD HH:MM:SS``, ``[where]``.
WARNING_LINE = re.compile(
    r"^(?:\((?P<tag>[A-Za-z][\w\-]*)(?:\s+rank=\d+)?\s+pid=\d+\)\s*)?"
    r"(?P<level>WARNING|ERROR|CRITICAL)\s+\d{2}-\d{2} [\d:.]+\s+"
    r"\[(?P<where>[^\]]*)\]\s?(?P<msg>.*)$"
)
#: Lines of a shutdown (after readiness or after a failure), never start-up warnings.
SHUTDOWN = re.compile(r"\[shutdown\]|shutdown triggered|EngineDeadError|output_handler failed")
#: The child processes whose spawn the log's clock shows (coldscope's probe roles).
_CHILD_ROLES = ("engine_core", "worker")



#: Lines saying compiled artefacts were written to the compile cache (inductor graphs, the AOT
#: function of 0.20+, the computation graph).
COMPILE_CACHE_SAVED = re.compile(
    r"saved AOT compiled function"
    r"|Cache the graph (?:of|for) (?:(?!Cache the graph (?:of|for) ).)*? for later use"
    r"|Computation graph saved to"
    r"|Store the \d+-th graph (?:(?!Store the \d+-th graph ).)*? from inductor"
)


#: Lines naming the compile-cache directory vLLM chose (0.7+), saved its AOT function to, loaded
#: it from, or failed to load it from (0.20+).
COMPILE_CACHE_DIR = re.compile(
    r"Using cache directory: (?P<a>\S+) for vLLM's torch\.compile"
    r"|saved AOT compiled function to (?P<b>\S+)"
    r"|Directly load AOT compilation from path (?P<c>\S+)"
    r"|load failure from (?P<d>\S+?),? reason")


def compile_dirs(lines: Sequence[str]) -> tuple[str, ...]:
    """The compile-cache directories ``lines`` name, in order of first mention, each once."""
    out: dict[str, None] = {}
    for text in lines:
        if "torch" not in text and "AOT" not in text and "load failure" not in text:
            continue
        m = COMPILE_CACHE_DIR.search(text)
        if m is not None:
            out.setdefault(next(g for g in m.groups() if g), None)
    return tuple(out)


def startup_facts(st: Startup) -> LogFacts:
    """The findings' facts of one reading (``timeline.Startup``); line numbers are the log's
    own physical lines (0-based), so evidence quotes the line the user sees."""
    lines, ev, src = list(st.lines), st.evidence, st.source

    def phys(i: int | None) -> int | None:
        return None if i is None else src[i]

    def first(pattern: re.Pattern[str]) -> LogLine | None:
        at = next((i for i, t in enumerate(lines) if pattern.search(t)), None)
        return None if at is None else LogLine(src[at], _message(lines[at]))

    failed = _load_failure(lines, ev.line_clock)
    if failed.get("compile_cache_load_failed") is not None:
        line = failed["compile_cache_load_failed"]
        failed["compile_cache_load_failed"] = LogLine(src[line.line_no], line.message)
    memory = _memory_profiling(ev)
    if memory:
        memory["memory_profiling_line"] = phys(memory["memory_profiling_line"])
    download = ev.last(DOWNLOAD)
    plans = ev.named(STARTUP_PLAN)
    return LogFacts(
        compile_enabled=ev.compile_enabled,
        compile_cache=ev.compile_cache,
        capture_sizes=ev.capture_sizes,
        device=ev.device,
        child_process_gaps=_child_process_gaps(lines, ev.line_clock),
        model=st.model,
        ready_line=phys(st.ready_line),
        warnings=tuple(EngineWarning(src[w.line_no], w.level, w.where, w.message)
                       for w in _warnings(lines)),
        compile_saved=first(COMPILE_CACHE_SAVED),
        weights_download=None if download is None else
        LogLine(src[download.line_no], _message(lines[download.line_no])),
        weights_download_s=total_seconds(ev, DOWNLOAD),
        startup_plan=LogLine(src[plans[0].line_no], _message(lines[plans[0].line_no]))
        if plans else None,
        compile_dirs=compile_dirs(lines),
        **failed,
        **memory,
    )


def _message(text: str) -> str:
    return split_clean(text).message or text


def _load_failure(lines: Sequence[str], clock: Sequence[float | None]) -> dict[str, Any]:
    """The first compile-cache load failure line, and the seconds on the log's clock from it to
    the first later line with a time that says the new compile was done."""
    at = next((i for i, t in enumerate(lines) if LOAD_FAILED.search(t)), None)
    if at is None:
        return {}
    text = lines[at]
    seconds = None
    start = clock[at] if at < len(clock) else None
    if start is not None:
        for i in range(at + 1, min(len(lines), len(clock))):
            done = clock[i]
            if done is not None and COMPILE_SAVED.search(lines[i]):
                seconds = max(0.0, done - start)
                break
    return {"compile_cache_load_failed": LogLine(at, split_clean(text).message or text),
            "recompile_s": seconds}


def _memory_profiling(ev: LogEvidence) -> dict[str, Any]:
    """The line reporting memory profiling (the first that gives seconds, else the last
    one), and its seconds."""
    rec = next((r for r in ev.records if r.name.endswith("memory_profiling_end")
                and r.duration is not None), ev.last(MEMORY_PROFILING_END))
    if rec is None:
        return {}
    return {"memory_profiling_line": rec.line_no, "memory_profiling_s": rec.duration}


def _warnings(lines: Sequence[str]) -> tuple[EngineWarning, ...]:
    """Every WARNING/ERROR/CRITICAL line but the compile-cache load failure and shutdown."""
    out = []
    for i, text in enumerate(lines):
        m = WARNING_LINE.match(text)
        if not m or LOAD_FAILED.search(text) or SHUTDOWN.search(text):
            continue
        out.append(EngineWarning(i, m.group("level"), m.group("where"), m.group("msg").strip()))
    return tuple(out)


def _child_process_gaps(lines: Sequence[str], clock: Sequence[float | None]) -> dict[str, float]:
    """Per child process (engine core, worker): seconds on the log's clock between the last
    timestamped line before its first timestamped line and that line."""
    if not clock:
        return {}
    gaps: dict[str, float] = {}
    seen: set[str] = set()
    prev_clock: float | None = None
    for i, text in enumerate(lines):
        ln = split_clean(text)
        t = clock[i] if i < len(clock) else None
        if ln.process in _CHILD_ROLES and ln.process not in seen and ln.wallclock:
            seen.add(ln.process)
            if prev_clock is not None and t is not None:
                gaps[ln.process] = max(0.0, t - prev_clock)
        if ln.wallclock and t is not None:
            prev_clock = t
    return gaps
