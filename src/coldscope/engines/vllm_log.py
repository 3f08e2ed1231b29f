"""Version-aware adapters for vLLM start-up logs.

A log is the one piece of evidence every user already has (a pod's log, a saved terminal). Its
wording changes between vLLM releases, so parsing is split in two:

1. ``parse_vllm_log(lines) -> LogEvidence`` detects the version and the *format family*, then
   runs that family's small table of ``(regex -> meaning)`` rules over every line. A meaning is
   a stage or ``stage/substep`` name from :mod:`coldscope.core.stages` with the seconds the line
   reports, or a ``marker:<event>`` whose time is the line's arrival. Unknown lines are skipped;
   nothing in a line can make the parser fail.
2. Pure consumers of that evidence: ``log_timeline`` (a timeline from a saved log),
   ``log_spans`` (spans for the profiler, given each line's arrival time), ``paper_metrics`` (the
   metrics of the parser of "Breaking the Ice", MLSys 2026, for comparison) and ``missed`` (what
   that parser missed).

Times: durations are seconds as printed. ``LogEvidence.line_clock`` is the log's own clock,
seconds since the first timestamped line (vLLM prints ``MM-DD HH:MM:SS`` with or without
milliseconds; the year is not printed). ``log_spans`` works in the caller's clock, usually
seconds since the engine's launch.
"""

from __future__ import annotations

import bisect
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypedDict

from coldscope.capture.logtext import CleanLines, as_text, without_colours
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TOKENIZER,
    TORCH_COMPILE,
    substep,
)
from coldscope.core.timeline import Span, Timeline, from_durations, reconcile, subtract

# Record names (the vocabulary of the log, mapped once onto the shared stage names).
WEIGHTS = substep(MODEL_LOADING, "weights")
#: "Time spent downloading weights for M: X seconds": inside vLLM's own "Model loading took".
DOWNLOAD = substep(MODEL_LOADING, "download")
INIT_MODEL = substep(MODEL_LOADING, "init_model")
DYNAMO = substep(TORCH_COMPILE, "dynamo")
INDUCTOR = substep(TORCH_COMPILE, "inductor")
GRAPH_LOAD = substep(TORCH_COMPILE, "graph_load")
WARMUP_COMPILE = substep(TORCH_COMPILE, "warmup")
WARMUP_EAGER = substep(KV_CACHE_PROFILING, "warmup")
PROFILE_RUN = substep(KV_CACHE_PROFILING, "profile_run")

ENGINE_CORE_START = "marker:engine_core_start"
MODEL_LOADING_START = "marker:model_loading_start"
MODEL_LOADING_END = "marker:model_loading_end"
WARMUP_START = "marker:warmup_start"
WARMUP_END = "marker:warmup_end"
#: "Memory profiling takes X seconds": X spans compile *and* the profiling forward pass.
MEMORY_PROFILING_END = "marker:memory_profiling_end"
#: "init engine (profile, create kv cache, warmup model) took X": X spans compile, KV-cache
#: profiling and allocation, and CUDA-graph capture.
KV_CACHE_END = "marker:kv_cache_end"
#: V0 engines print "# GPU blocks: N" once the KV cache is sized.
KV_CACHE_SIZED = "marker:kv_cache_sized"
CAPTURE_START = "marker:cuda_graph_capture_start"
#: "init engine (...) took X s (compilation: Y s)" (0.20+): Y is vLLM's own compile figure.
INIT_COMPILATION = "marker:init_compilation"
#: A persisted start-up plan (0.28+) or a configured KV-cache size: no memory profiling ran.
STARTUP_PLAN = "marker:startup_plan"
TORCH_COMPILE_START = "marker:torch_compile_start"
SERVER_START = "marker:server_start"
APP_STARTUP_COMPLETE = "marker:app_startup_complete"
#: "initialize_engine took X seconds", printed by the paper's harness around ``LLM(...)``.
HARNESS_END = "marker:harness_end"

_COMPILE_SUBSTEPS = (DYNAMO, INDUCTOR, GRAPH_LOAD)
#: Duration records whose phase ends at the line that prints them, so [arrival - d, arrival]
#: is where the phase ran. ("torch.compile takes X s in total" is not one: vLLM prints it after
#: the first forward pass that follows compilation.)
_ANCHORED = (
    TOKENIZER,
    MODEL_LOADING,
    DOWNLOAD,
    WEIGHTS,
    INIT_MODEL,
    *_COMPILE_SUBSTEPS,
    PROFILE_RUN,
    CUDA_GRAPH_CAPTURE,
)


@dataclass(frozen=True, slots=True)  # (slots: a long log holds one per meaningful line)
class LogRecord:
    """One meaningful line.

    ``name`` is a stage, a ``stage/substep`` or a ``marker:<event>``. ``duration`` is the seconds
    the line reports for the phase that ends at it (None for a plain marker). ``line_no`` is the
    0-based index in the lines given to ``parse_vllm_log``; ``wallclock`` the line's own
    timestamp text, or None when it has none.
    """

    line_no: int
    name: str
    duration: float | None
    process: str | None
    pid: int | None
    wallclock: str | None


@dataclass(frozen=True)
class LogEvidence:
    """Everything a vLLM log says about one start-up.

    ``family`` is the format family whose rules were used (``v0.6``, ``v0.8``, ``v0.10``,
    ``v0.32``, or ``unknown`` when no version line was found: then every family's rules run).
    ``compile_cache`` is ``"miss"`` when any graph was compiled, ``"hit"`` when graphs were only
    loaded from the cache. ``capture_sizes`` counts the configured CUDA-graph batch sizes.
    ``harness_total`` is the paper harness's ``initialize_engine took X seconds``.
    ``line_clock[i]`` is line i's time on the log's own clock (seconds since the first
    timestamped line, carried forward over lines without a timestamp; None before it).
    ``paper_blind_spots`` names the lines here that the paper's parser misreads (see
    ``missed``). ``start_line`` is the first timestamped line when it shows the engine's
    process starting (see ``_shows_start``), so that the log's clock 0 is the engine's start;
    None when the log begins later (cut at the front) or has no timestamps.
    """

    version: str | None
    family: str
    records: tuple[LogRecord, ...]
    enforce_eager: bool | None
    compile_cache: str | None
    capture_sizes: int | None
    device: str | None
    harness_total: float | None
    compile_enabled: bool | None = None
    line_clock: tuple[float | None, ...] = ()
    first_wallclock: str | None = None
    paper_blind_spots: frozenset[str] = field(default_factory=frozenset)
    start_line: int | None = None

    @property
    def line_count(self) -> int:
        return len(self.line_clock)

    def named(self, name: str) -> tuple[LogRecord, ...]:
        return tuple(r for r in self.records if r.name == name)

    def last(self, name: str) -> LogRecord | None:
        found = self.named(name)
        return found[-1] if found else None


# --------------------------------------------------------------------------------------------
# Format families: one small table each.


@dataclass(frozen=True)
class Rule:
    """A line whose message matches ``pattern`` means ``name``; the group ``s``, when the
    pattern has one, is the duration in seconds."""

    name: str
    pattern: re.Pattern[str]


def _rules(*pairs: tuple[str, str]) -> tuple[Rule, ...]:
    return tuple(Rule(name, re.compile(rx)) for name, rx in pairs)


_SECONDS = r"(?P<s>\d+(?:\.\d+)?)"


def _from_first(literal: str) -> str:
    """A pattern's opening ``literal`` (a regex) as its first occurrence in the line: the
    rest of the pattern is tried from there only, not again from every later occurrence. The
    same lines match, with the same groups (what follows a later occurrence also follows the
    first), and a line that repeats the literal costs its length, not its square."""
    return rf"^(?>.*?{literal}){_FIRST}"


#: Marks the end of a ``_from_first`` opening (a regex comment: it matches nothing).
_FIRST = "(?#first)"


#: Printed by the paper's harness, not by vLLM; every family may carry it.
_HARNESS = _rules((HARNESS_END, rf"^initialize_engine took {_SECONDS} seconds"))

#: The V0 engine (vLLM 0.6): few durations; the rest is only visible through timestamps.
V0_6 = (
    _rules(
        (ENGINE_CORE_START, r"Initializing an LLM engine \(v"),
        (MODEL_LOADING_START, r"Starting to load model"),
        (MODEL_LOADING_END, r"Loading model weights took [\d.]+ GB"),
        (MODEL_LOADING, rf"Loading model weights took [\d.]+ GB and {_SECONDS} seconds"),
        (KV_CACHE_SIZED, r"# GPU blocks: \d+"),
        (CAPTURE_START, r"Capturing the model for CUDA graphs"),
        (CUDA_GRAPH_CAPTURE, rf"Graph capturing finished in {_SECONDS} secs"),
    )
    + _HARNESS
)

#: Lines every V1-engine release prints (0.8 onwards), in its wording of the time.
_V1 = (
    _rules(
        (ENGINE_CORE_START, r"Initializing a V1 LLM engine \(v"),
        # "Starting to load model M..."; the V2 model runner (0.28+): "Loading model from scratch"
        (MODEL_LOADING_START, r"Starting to load model|Loading model from scratch"),
        (DOWNLOAD,
         _from_first("Time spent downloading weights for ") + rf".*?: {_SECONDS} seconds"),
        (WEIGHTS, rf"Loading weights took {_SECONDS} seconds"),
        (MODEL_LOADING_END, r"Loading weights took"),
        (MODEL_LOADING, rf"Model loading took [\d.]+ Gi?B(?: memory)? and {_SECONDS} seconds"),
        (MODEL_LOADING_END, r"Model loading took"),
        (DYNAMO, rf"Dynamo bytecode transform time: {_SECONDS} s"),
        (INDUCTOR, _from_first("Compiling a graph for ") + rf".*? takes {_SECONDS} s"),
        (
            GRAPH_LOAD,
            _from_first(r"Directly load the compiled graph\(s\) for ")
            + rf".*? from the cache, took {_SECONDS} s",
        ),
        (TORCH_COMPILE, rf"torch\.compile (?:takes|took) {_SECONDS} s in total"),
        (MEMORY_PROFILING_END, rf"Memory profiling takes {_SECONDS} seconds"),
        (CUDA_GRAPH_CAPTURE, rf"Graph capturing finished in {_SECONDS} secs"),
        (
            KV_CACHE_END,
            rf"init engine \(profile, create kv cache, warmup model\) took {_SECONDS} s",
        ),
        # "Starting vLLM API server 0 on" (up to 0.17), "Starting vLLM server on" (0.18+)
        (SERVER_START, r"Starting vLLM (?:API )?server (?:\d+ )?on"),
        (INIT_COMPILATION, _from_first(r"init engine \(profile")
         + rf".*?\) took [\d.]+ s \(compilation: {_SECONDS} s\)"),
        (STARTUP_PLAN, r"Applying persisted startup plan|skipped memory profiling"),
        (APP_STARTUP_COMPLETE, r"Application startup complete"),
    )
    + _HARNESS
)

#: 0.8 and 0.9: "general shape" compiles, no tokenizer or model-init lines.
V0_8 = _V1

#: 0.10 and 0.11, including the paper's patched 0.10.1.1 with its two "NEW:" lines.
V0_10 = _V1 + _rules(
    (TOKENIZER, rf"NEW: Init Tokenizer took {_SECONDS} seconds"),
    (INIT_MODEL, rf"NEW: Initializing Model took {_SECONDS} seconds"),
)

#: 0.32 (the CPU build): model-init line in stock wording, compile inside a CPU warm-up.
V0_32 = _V1 + _rules(
    (INIT_MODEL, rf"Initializing model took {_SECONDS} seconds"),
    (TORCH_COMPILE_START, r"Starting torch\.compile"),
    (WARMUP_START, r"Warming up model for the compilation"),
    (WARMUP_END, r"Warming up done"),
    (PROFILE_RUN, rf"Initial profiling/warmup run took {_SECONDS} s"),
)

FAMILIES: dict[str, tuple[Rule, ...]] = {
    "v0.6": V0_6,
    "v0.8": V0_8,
    "v0.10": V0_10,
    "v0.32": V0_32,
}
_UNKNOWN = tuple({(r.name, r.pattern.pattern): r for t in FAMILIES.values() for r in t}.values())


def family_of(version: str | None, v0_engine: bool = False) -> str:
    """The format family for a vLLM version string (``"0.10.1.1"``): V0 engines and releases
    before 0.8 read as 0.6, 0.8-0.9 as 0.8, 0.10-0.11 as 0.10, 0.12 and later as 0.32."""
    if v0_engine:
        return "v0.6"
    if version is None:
        return "unknown"
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        return "unknown"
    major_minor = (int(m.group(1)), int(m.group(2)))
    if major_minor < (0, 8):
        return "v0.6"
    if major_minor < (0, 10):
        return "v0.8"
    if major_minor < (0, 12):
        return "v0.10"
    return "v0.32"


# --------------------------------------------------------------------------------------------
# Line anatomy: "(EngineCore_0 pid=1) INFO 02-09 17:53:44.072 [core.py:636] message"
# (V0: "INFO 09-25 16:20:27 llm_engine.py:213] message").

_PREFIX = re.compile(r"^\((?P<tag>[A-Za-z][\w\-]*)(?:\s+rank=\d+)?\s+pid=(?P<pid>\d+)\)\s*")
_HEADER = re.compile(
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+(?:\[[^\]]*\]|\S+\])\s?(?P<msg>.*)$"
)
#: ``_PREFIX`` then ``_HEADER`` after it, each where it matches, in one match (it always
#: matches; a part that does not is empty): a line is taken apart in one pass.
_ANATOMY = re.compile(f"(?:{_PREFIX.pattern})?(?:{_HEADER.pattern.removeprefix('^')})?")

#: Up to a line's first block letter (the banner's): patterns that read the banner start
#: there, at the beginning of the line, so that a line of many block letters is read once, not
#: again from each of them (which costs the square of its length).
_FIRST_BLOCK = _from_first("\u2588")

_VERSION_PATTERNS = (
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>\d+\.\d+[\w.+\-]*)\)"),
    # the 0.11+ ASCII-art banner; from its first block letter only (``_FIRST_BLOCK``)
    re.compile(_FIRST_BLOCK + r".*\bversion\s+(?P<v>\d+\.\d+[\w.+\-]*)"),
    re.compile(r"vLLM API server version (?P<v>\d+\.\d+[\w.+\-]*)"),
)
_V0_ENGINE = re.compile(r"Initializing an LLM engine \(v")
_ENFORCE_EAGER = re.compile(r"\benforce_eager=(?P<b>True|False)\b")
_EAGER_WARNING = re.compile(r"Enforce eager set, disabling torch\.compile")
_DEVICE = re.compile(r"\bdevice_config=(?P<d>[a-z]+)")
_PLATFORM = re.compile(r"Automatically detected platform (?P<d>[a-z]+)")
_CAPTURE_SIZES = re.compile(_from_first(r"""["']cudagraph_capture_sizes["']:\s*\[""")
                            + r"(?P<l>[^\]]*)\]")
_COMPILE_LEVEL = re.compile(
    r"""["'](?:level|mode)["']:\s*(?:<CompilationMode\.\w+:\s*)?(?P<n>\d)"""
)
_CACHE_HIT = re.compile(r"Directly load (?:the compiled graph|AOT compilation)")
_CACHE_MISS = re.compile(
    r"Compiling a graph for|Compiling model again due to a load failure|saved AOT compiled function"
)

#: Lines whose wording the paper's parser (``profile_log.py``) misreads: it reads 0 or nothing.
_PAPER_BLIND_SPOTS = {
    "model_loading_unit": re.compile(r"Model loading took [\d.]+ (?:GB|GiB memory) and"),
    # (from the first "init engine (profile" only, for the same reason as _FIRST_BLOCK)
    "init_engine_unit": re.compile(_from_first(r"init engine \(profile")
                                   + r".*took [\d.]+ s\b"),
    "init_model_wording": re.compile(r"(?<!NEW: )Initializing model took"),
    "compile_total_wording": re.compile(r"torch\.compile took [\d.]+ s in total"),
    "capture_whole_seconds": re.compile(r"Graph capturing finished in \d+ secs"),
}
#: Lines a vLLM process prints as it starts: platform detection and plugin discovery (on
#: ``import vllm``), the API server's banner, version and arguments, the V0 engine's first line.
_START = re.compile(
    r"No plugins for group|Automatically detected platform|vLLM API server version"
    r"|non-default args|Initializing an LLM engine \(v"
)
#: The banner's version line (block letters, then ``version``), from its first block letter.
_BANNER_VERSION = re.compile(_FIRST_BLOCK + r".*\bversion\s")


def _is_start(message: str) -> bool:
    """Whether a message is one a vLLM process prints as it starts (``_START``, the banner)."""
    return _START.search(message) is not None or (
        "\u2588" in message and _BANNER_VERSION.search(message) is not None)
#: The paper's timestamp pattern, searched anywhere in a line (its first line must have one).
_PAPER_STAMP = re.compile(r"\d{2}-\d{2}\s\d{2}:\d{2}:\d{2}")


def _any_of(patterns: Iterable[str]) -> re.Pattern[str]:
    """One pattern that matches a text where any of ``patterns`` does, or more: a line none
    of a table's patterns can match is passed over with one search instead of one per
    pattern, which is most lines of a long log. Each alternative of each pattern stands for
    its opening literal alone (every text it matches holds that; a ``_from_first`` pattern
    for the literal it opens with); an alternative that opens otherwise stands as it is."""
    plain: list[str] = []
    for p in patterns:
        if _FIRST in p:
            p = p[p.index("^(?>.*?") + len("^(?>.*?"):p.index(_FIRST) - 1]
        for alternative in _alternatives(p):
            # an anchor or a look-behind in front only narrows a match
            alternative = _OPENING_ASSERTION.sub("", alternative)
            literal = _opening_literal(alternative)
            if not literal and (m := _OPENING_CLASS.match(alternative)):
                literal = _opening_literal(alternative[m.end():])  # what follows ["']
            plain.append(re.escape(literal) if len(literal) >= 3 else
                         _NAMED_GROUP.sub("(?:", alternative))
    return re.compile("|".join(f"(?:{p})" for p in dict.fromkeys(plain)))


def _alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of a pattern (``a|b(c|d)`` -> ``a``, ``b(c|d)``)."""
    out, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "]":  # a "]" first in a class is a literal
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    out.append(pattern[start:])
    return out


def _opening_literal(alternative: str) -> str:
    """The literal text every match of ``alternative`` opens with ("" when it opens with
    something else): its characters up to the first one a pattern reads specially, less the
    last when a quantifier follows it."""
    out: list[str] = []
    i = 0
    while i < len(alternative):
        c = alternative[i]
        if c == "\\" and i + 1 < len(alternative):
            nxt = alternative[i + 1]
            if nxt.isalnum():  # \d, \b, \s, a back-reference: not a literal
                break
            out.append(nxt)
            i += 2
        elif c in ".^$*+?{}[]()|":
            if c in "*?{" and out:
                out.pop()
            break
        else:
            out.append(c)
            i += 1
    return "".join(out)

_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
_OPENING_ASSERTION = re.compile(r"^(?:\^|\\b|\(\?<[!=][^()]*\))+")
#: A character class (no quantifier after it) that a pattern opens with.
_OPENING_CLASS = re.compile(r"^\[[^\]\\]+\](?![*+?{])")


#: Per rule table: whether any of its rules can match a message.
_ANY_RULE = {id(rules): _any_of(r.pattern.pattern for r in rules)
             for rules in (*FAMILIES.values(), _UNKNOWN)}
#: Whether a message can say any of the facts ``_evidence`` looks for besides the rules.
_FACT_PATTERNS = [p.pattern for p in (_ENFORCE_EAGER, _EAGER_WARNING, _DEVICE, _CAPTURE_SIZES,
                                      _CACHE_HIT, _CACHE_MISS, *_PAPER_BLIND_SPOTS.values())]
_ANY_FACT = _any_of([*_FACT_PATTERNS, "compilation_config="])
#: Per rule table: whether a message can mean anything at all (a rule or a fact).
_ANYTHING = {id(rules): _any_of([*(r.pattern.pattern for r in rules), *_FACT_PATTERNS,
                                 "compilation_config="])
             for rules in (*FAMILIES.values(), _UNKNOWN)}
#: Whether a message can name a version (``_VERSION_PATTERNS``).
_ANY_VERSION = _any_of(p.pattern for p in _VERSION_PATTERNS)


def _process_of(tag: str) -> str:
    if tag.startswith("APIServer"):
        return "api_server"
    if tag.startswith("EngineCore"):
        return "engine_core"
    if "Worker" in tag:
        return "worker"
    return sys.intern(tag.lower())




#: Days before each month, and days in it, in a leap year (vLLM's stamps print no year).
_DAYS_BEFORE = (0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)
_DAYS_IN = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _wallclock_seconds(text: str) -> float | None:
    """Seconds of an ``MM-DD HH:MM:SS[.ffffff]`` stamp within a leap year (the year is not
    printed); None when it is not a real date. What ``datetime.strptime`` of it in the year
    2000, less 2000-01-01, gives, without its cost (it is read for every stamped line)."""
    if not text.isascii():  # other digits: as strptime reads them
        return _strptime_seconds(text)
    whole = _SECONDS_OF.get(text[:14])
    if whole is None:
        whole = _whole_seconds(text[:14])
        if len(_SECONDS_OF) > 4096:  # (lines share their second: a few are enough)
            _SECONDS_OF.clear()
        _SECONDS_OF[text[:14]] = whole
    if whole < 0:
        return None
    fraction = text[14:]
    micro = 0
    if fraction:
        if fraction[0] != "." or not 1 <= len(fraction) - 1 <= 6 or not fraction[1:].isdigit():
            return None
        micro = int(fraction[1:].ljust(6, "0"))
    return (whole * 10**6 + micro) / 10**6


#: ``_whole_seconds`` of the stamps seen lately.
_SECONDS_OF: dict[str, int] = {}


def _whole_seconds(text: str) -> int:
    """Whole seconds of ``MM-DD HH:MM:SS`` within a leap year; -1 when it is not a real
    date."""
    if len(text) < 14 or text[2] != "-" or text[5] != " " or text[8] != ":" or \
            text[11] != ":":
        return -1
    try:
        month, day = int(text[0:2]), int(text[3:5])
        hour, minute, second = int(text[6:8]), int(text[9:11]), int(text[12:14])
    except ValueError:
        return -1
    if not (1 <= month <= 12 and 1 <= day <= _DAYS_IN[month - 1] and hour < 24 and minute < 60
            and second < 60):
        return -1
    days = _DAYS_BEFORE[month - 1] + day - 1
    return days * 86400 + hour * 3600 + minute * 60 + second


def _strptime_seconds(text: str) -> float | None:
    from datetime import datetime
    fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in text else "%Y-%m-%d %H:%M:%S"
    try:
        stamp = datetime.strptime("2000-" + text, fmt)
    except ValueError:
        return None
    return (stamp - datetime(2000, 1, 1)).total_seconds()


@dataclass(slots=True)
class _Line:
    """One line taken apart: the text, the process (role), its pid and its tag, where in the
    text the message (after the process tag and the level/time header) and the stamp
    (``MM-DD HH:MM:SS[.fff]``) are, and the stamp's seconds (``_wallclock_seconds``). The
    message and the stamp are cut from the text when asked for, so that a long log holds
    each line's text once. Never changed once made (not frozen: made faster)."""

    text: str
    process: str | None
    pid: int | None
    tag: str | None = None
    at: int = 0
    stamp_at: int = 0
    stamp_end: int = 0
    seconds: float | None = None

    @property
    def message(self) -> str:
        return self.text[self.at:] if self.at else self.text

    @property
    def wallclock(self) -> str | None:
        return self.text[self.stamp_at:self.stamp_end] if self.stamp_end else None


#: A blank line taken apart (shared: a log may hold many, and lines are never changed).
_BLANK = _Line("", None, None)


def _split(raw: object) -> _Line:
    if raw == "":
        return _BLANK
    return _split_clean(without_colours(as_text(raw)).rstrip("\r\n"))


def _split_clean(text: str) -> _Line:
    """``_split`` of a line ``logtext.normalise`` cleaned (no colours, no trailing
    whitespace). The prefix and header patterns are tried only where they can match (their
    first character)."""
    if not text:
        return _BLANK
    m = _ANATOMY.match(text)
    assert m is not None  # (every part is optional)
    process = pid = tag = None
    if m.start("tag") >= 0:
        tag = sys.intern(m.group("tag"))
        process, pid = _process_of(tag), int(m.group("pid"))
    if m.start("ts") < 0:
        return _Line(text, process, pid, tag, m.end())
    return _Line(text, process, pid, tag, m.start("msg"), m.start("ts"), m.end("ts"),
                 _wallclock_seconds(m.group("ts")))


def _shows_start(parsed: Sequence[_Line], clock: Sequence[float | None]) -> int | None:
    """The first timestamped line, when it is the engine's start: a line of the API server
    process (the process that starts all others: its first line is its start), or a front-end
    line (no process tag) with a start line (``_START``) within the first second. A log that
    begins with an engine-core or worker line, or with other front-end lines, was cut at the
    front: its clock starts somewhere inside the start-up, so None."""
    first = next((i for i, t in enumerate(clock) if t is not None), None)
    if first is None:
        return None
    if parsed[first].process == "api_server":
        return first
    if parsed[first].process is not None:
        return None
    for ln, t in zip(parsed[first:], clock[first:], strict=True):
        if t is None or t > 1.0 or ln.process not in (None, "api_server"):
            break
        if _is_start(ln.message):
            return first
    return None


def parse_vllm_log(lines: Iterable[str]) -> LogEvidence:
    """Parse the lines of one vLLM start-up (stdout and stderr, in order).

    Pure and total: ANSI colour codes are stripped, lines that match no rule are skipped, and
    bytes or junk never raise. A whole text passed as one string is split into lines.
    """
    if isinstance(lines, str | bytes):
        lines = as_text(lines).splitlines()
    return _evidence([_split(raw) for raw in lines])


def _evidence(parsed: Sequence[_Line]) -> LogEvidence:
    """``parse_vllm_log`` of lines already taken apart (``_split``), each line once."""
    version = None
    v0_engine = False
    for ln in parsed:
        # a version counts from the engine's own line (its time or process prefix, or the
        # banner's block letters), never from prose that quotes one (a README, a ticket)
        if not ln.stamp_end and ln.process is None and "\u2588" not in ln.text:
            continue
        msg = ln.message
        if not _ANY_VERSION.search(msg):
            continue
        for pat in _VERSION_PATTERNS:
            m = pat.search(msg)
            if m:
                version = m.group("v")
                v0_engine = bool(_V0_ENGINE.search(msg))
                break
        if version:
            break
    family = family_of(version, v0_engine)
    rules = FAMILIES.get(family, _UNKNOWN)
    any_rule = _ANY_RULE[id(rules)].search
    any_fact = _ANY_FACT.search
    anything = _ANYTHING[id(rules)].search

    records: list[LogRecord] = []
    engine_started = False
    enforce_eager = device = capture_sizes = compile_level = None
    saw_hit = saw_miss = eager_warning = False
    blind: set[str] = set()
    clock: list[float | None] = []
    origin = previous = None
    now: float | None = None  # the clock of the last stamped line, shared by the lines after
    year_offset = 0.0
    first_wallclock = None

    for i, ln in enumerate(parsed):
        # The log's own clock, robust to a year boundary (the year is never printed).
        wallclock = ln.wallclock
        seconds = ln.seconds
        if seconds is not None:
            seconds += year_offset
            if previous is not None and seconds < previous - 180 * 86400:
                year_offset += 366 * 86400
                seconds += 366 * 86400
            if origin is None:
                origin, first_wallclock = seconds, wallclock
            previous = seconds
            now = round(previous - origin, 6)
        clock.append(now)

        msg = ln.message
        if not msg:
            continue
        if not engine_started and ln.process == "engine_core":
            engine_started = True
            records.append(LogRecord(i, ENGINE_CORE_START, None, ln.process, ln.pid, wallclock))
        if not anything(msg):  # (most lines of a long log)
            continue
        for rule in rules if any_rule(msg) else ():
            m = rule.pattern.search(msg)
            if not m:
                continue
            if rule.name == ENGINE_CORE_START:
                if engine_started:
                    continue
                engine_started = True
            s = m.groupdict().get("s")
            records.append(
                LogRecord(i, rule.name, float(s) if s else None, ln.process, ln.pid, wallclock)
            )

        if not any_fact(msg):
            continue
        if enforce_eager is None and (m := _ENFORCE_EAGER.search(msg)):
            enforce_eager = m.group("b") == "True"
        eager_warning = eager_warning or bool(_EAGER_WARNING.search(msg))
        if device is None and (m := _DEVICE.search(msg)):
            device = m.group("d")
        if capture_sizes is None and (m := _CAPTURE_SIZES.search(msg)):
            capture_sizes = len(re.findall(r"\d+", m.group("l")))
        if compile_level is None and "compilation_config=" in msg:
            if m := _COMPILE_LEVEL.search(msg.split("compilation_config=", 1)[1]):
                compile_level = int(m.group("n"))
        saw_hit = saw_hit or bool(_CACHE_HIT.search(msg))
        saw_miss = saw_miss or bool(_CACHE_MISS.search(msg))
        blind.update(key for key, pat in _PAPER_BLIND_SPOTS.items() if pat.search(msg))

    if parsed and not _PAPER_STAMP.search(parsed[0].text):
        blind.add("first_line_unstamped")
    if device is None:
        for ln in parsed:
            if m := _PLATFORM.search(ln.message):
                device = m.group("d")
                break
    if enforce_eager is None and eager_warning:
        enforce_eager = True
    if family == "v0.6" or enforce_eager or compile_level == 0:
        compile_enabled = False  # V0 never compiled; eager and level/mode 0 turn it off
    elif enforce_eager is False or compile_level:
        compile_enabled = True
    else:
        compile_enabled = None
    harness = [r.duration for r in records if r.name == HARNESS_END]
    return LogEvidence(
        version=version,
        family=family,
        records=tuple(records),
        enforce_eager=enforce_eager,
        compile_cache="miss" if saw_miss else ("hit" if saw_hit else None),
        capture_sizes=capture_sizes,
        device=device,
        harness_total=harness[-1] if harness else None,
        compile_enabled=compile_enabled,
        line_clock=tuple(clock),
        first_wallclock=first_wallclock,
        paper_blind_spots=frozenset(blind),
        start_line=_shows_start(parsed, clock),
    )


def read_vllm_log(path: str | Path) -> LogEvidence:
    """``parse_vllm_log`` of a saved log file (undecodable bytes are replaced, not fatal)."""
    from coldscope.util.safeio import MAX_LOG_BYTES, input_limit, read_bytes
    # a regular file only (a FIFO or /dev/zero is refused, never read), at most MAX_LOG_BYTES
    data = read_bytes(path, limit=input_limit(MAX_LOG_BYTES), what="log file")
    return parse_vllm_log(data.decode("utf-8", "replace").splitlines())


# --------------------------------------------------------------------------------------------
# Durations


def _total(ev: LogEvidence, name: str) -> float | None:
    """Seconds spent on ``name``: summed within a process (repeated phases, e.g. two compiled
    sub-modules), the slowest process across processes (tensor-parallel workers run at once)."""
    per_pid: dict[int | None, float] = {}
    for r in ev.records:
        if r.name == name and r.duration is not None:
            per_pid[r.pid] = per_pid.get(r.pid, 0.0) + r.duration
    return max(per_pid.values()) if per_pid else None


def _last(ev: LogEvidence, name: str) -> float | None:
    r = ev.last(name)
    return None if r is None else r.duration


def _us(seconds: float | None) -> float | None:
    """Rounded to the microsecond: sums of printed values carry float noise, not precision."""
    return None if seconds is None else round(seconds, 6)


def _sum_known(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _not_applicable(ev: LogEvidence) -> frozenset[str]:
    na = set()
    if ev.compile_enabled is False:
        na.add(TORCH_COMPILE)
    if ev.device == "cpu" or ev.enforce_eager:
        na.add(CUDA_GRAPH_CAPTURE)
    return frozenset(na)


def log_time_to_ready(ev: LogEvidence) -> tuple[float | None, str | None]:
    """Time to ready and where it came from.

    ``"harness"``: the paper harness's ``initialize_engine took X seconds``. ``"timestamps"``:
    from the first timestamped line to readiness ("Application startup complete", else the
    server or engine start-up line) on the log's own clock; it cannot see what happened before
    the first line (interpreter start and imports). A log with none of these lines never shows
    the engine ready (truncated, or it failed): (None, None), not the time of its last line.
    """
    if ev.harness_total is not None:
        return ev.harness_total, "harness"
    if not ev.line_clock or ev.line_clock[-1] is None:
        return None, None
    for name in (APP_STARTUP_COMPLETE, SERVER_START, KV_CACHE_END):
        r = ev.named(name)
        if r and ev.line_clock[r[0].line_no] is not None:
            return ev.line_clock[r[0].line_no], "timestamps"
    return None, None


def _clock_stages(ev: LogEvidence) -> dict[str, float | None]:
    """Stage durations measured between markers on the log's own clock (second resolution in
    most releases), used where no line prints the duration."""
    if not ev.line_clock or ev.line_clock[-1] is None:
        return {}
    arrival = [t if t is not None else 0.0 for t in ev.line_clock]
    end = max(arrival)
    if end <= 0:
        return {}
    tl = reconcile(log_spans(ev, arrival), end)
    return dict(tl.stages)


def stage_durations(ev: LogEvidence) -> tuple[dict[str, float], dict[str, float], frozenset[str]]:
    """(stages, substeps, not applicable) from one log; stages the log cannot show are absent.

    - tokenizer: the patched ``NEW: Init Tokenizer took``; stock vLLM does not log it.
    - model_loading: ``Model loading took``; else the larger of init + weights and the span
      from "Starting to load model" to the engine's next phase on the log's clock.
    - torch_compile: ``torch.compile … in total`` or Dynamo + Inductor + graph load, whichever
      is larger (the total leaves cache loads out); on CPU the compile warm-up on the clock.
    - kv_cache_profiling: what ``init engine … took`` leaves after compile and capture (dummy
      forward pass and KV-cache allocation); else memory profiling minus compile; else clock.
    - cuda_graph_capture: ``Graph capturing finished in``.
    - server_ready: engine initialised to "Application startup complete", on the clock.
    - bootstrap: on the log's clock where the log shows the engine's start (``log_bootstrap``),
      else unknown.
    """
    na = _not_applicable(ev)
    clock = _clock_stages(ev)
    stages: dict[str, float | None] = {}
    substeps: dict[str, float] = {}
    for name in (DOWNLOAD, WEIGHTS, INIT_MODEL, *_COMPILE_SUBSTEPS, PROFILE_RUN):
        value = _total(ev, name)
        if value is not None:
            substeps[name] = value

    stages[TOKENIZER] = _total(ev, TOKENIZER)

    loading = _total(ev, MODEL_LOADING)
    if loading is None:
        candidates = [
            _sum_known(substeps.get(INIT_MODEL), substeps.get(WEIGHTS)),
            clock.get(MODEL_LOADING),
        ]
        found = [c for c in candidates if c is not None]
        loading = max(found) if found else None
    stages[MODEL_LOADING] = loading

    compile_s = None
    if TORCH_COMPILE not in na:
        printed = _sum_known(*(substeps.get(n) for n in _COMPILE_SUBSTEPS))
        total = _total(ev, TORCH_COMPILE)
        figures = [v for v in (printed, total) if v is not None]
        compile_s = max(figures) if figures else clock.get(TORCH_COMPILE)
    stages[TORCH_COMPILE] = compile_s

    capture = None if CUDA_GRAPH_CAPTURE in na else _total(ev, CUDA_GRAPH_CAPTURE)
    stages[CUDA_GRAPH_CAPTURE] = capture

    init_engine = _total(ev, KV_CACHE_END)
    memory = _total(ev, MEMORY_PROFILING_END)
    kv: float | None
    if init_engine is not None:
        kv = max(0.0, init_engine - (compile_s or 0.0) - (capture or 0.0))
    elif memory is not None:
        compiled = (_total(ev, TORCH_COMPILE) or 0.0) + (substeps.get(GRAPH_LOAD) or 0.0)
        kv = max(0.0, memory - compiled)
    else:
        kv = clock.get(KV_CACHE_PROFILING)
    stages[KV_CACHE_PROFILING] = kv

    stages[SERVER_READY] = clock.get(SERVER_READY) if ev.named(SERVER_START) else None
    stages[BOOTSTRAP] = log_bootstrap(ev, clock)
    # rounded to the microsecond (as _us): sums of printed values carry float noise
    known = {k: round(v, 6) for k, v in stages.items() if v is not None}
    return known, {k: round(v, 6) for k, v in substeps.items()}, na


def log_bootstrap(ev: LogEvidence, clock: dict[str, float | None] | None = None) -> float | None:
    """Bootstrap (imports, configuration, process spawns) on the log's own clock: from the
    engine's start to its first model-loading step, less what other stages hold inside that
    window (the tokenizer). Source ``log-clock``.

    The start is the log's first line when that line shows the engine starting
    (``LogEvidence.start_line``); time to ready from timestamps starts there too. When time to
    ready is the paper harness's ``initialize_engine took X`` (timed around ``LLM(...)``), the
    harness started X before the line that prints it, so the window starts there (the log's
    first lines come from ``import vllm``, before the harness's clock). What ran before the
    first line (the interpreter, the first imports) is in no log, so this is a lower bound of
    the engine's bootstrap, at the log's clock resolution (1 s in releases before 0.10.1).
    None when the log does not show the start, or never reaches model loading."""
    if ev.start_line is None or not ev.named(MODEL_LOADING_START):
        return None
    clock = _clock_stages(ev) if clock is None else clock
    seconds = clock.get(BOOTSTRAP)
    if seconds is None:
        return None
    harness = ev.last(HARNESS_END)
    if harness is not None and ev.harness_total is not None:
        printed_at = ev.line_clock[harness.line_no]
        if printed_at is None:
            return None
        seconds -= max(0.0, printed_at - ev.harness_total)
        if seconds < 0:  # the harness started after model loading: the clocks disagree
            return None
    return _us(seconds)


#: The evidence behind a stage of a saved log's timeline when it is not a printed duration.
LOG_CLOCK = "log-clock"


def log_timeline(ev: LogEvidence) -> Timeline:
    """The six-stage timeline a saved log can show (see ``stage_durations``); time to ready
    from ``log_time_to_ready``. Unknown stages are None, never zero. Sources: ``log`` for the
    stages lines print or bracket; ``log-clock`` for bootstrap, timed between the log's first
    line and model loading (``log_bootstrap``)."""
    stages, substeps, na = stage_durations(ev)
    ttr, _ = log_time_to_ready(ev)
    tl = from_durations(
        stages, source="log", time_to_ready=ttr, substeps=substeps, not_applicable=na
    )
    if stages.get(BOOTSTRAP) is not None:
        tl = replace(tl, sources={**tl.sources, BOOTSTRAP: LOG_CLOCK})
    return tl


# --------------------------------------------------------------------------------------------
# Spans for the profiler (arrival times known)




class _ByPid:
    """Records in line order, per process, looked up by line number (bisection)."""

    def __init__(self, records: Iterable[LogRecord]) -> None:
        self.records: dict[int | None, list[LogRecord]] = {}
        for r in records:
            self.records.setdefault(r.pid, []).append(r)
        self.lines = {pid: [r.line_no for r in rs] for pid, rs in self.records.items()}

    def next_after(self, after: int, pid: int | None) -> LogRecord | None:
        """``_next(records, after, pid)``: the process's first record after line ``after``."""
        lines = self.lines.get(pid)
        if lines is None:
            return None
        at = bisect.bisect_right(lines, after)
        return self.records[pid][at] if at < len(lines) else None


class _Union:
    """Intervals merged where they overlap or touch, for ``timeline.subtract``: what a window
    less them is does not change, and only those that reach into a window are handed over
    (bisection), so that many windows cost their own pieces, not all intervals each."""

    def __init__(self, intervals: Iterable[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for a, b in sorted(intervals):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def within(self, start: float, end: float) -> list[tuple[float, float]]:
        lo = bisect.bisect_right(self.ends, start)  # the first ending after the start
        hi = bisect.bisect_left(self.starts, end)   # those starting before the end
        return list(zip(self.starts[lo:hi], self.ends[lo:hi], strict=True))


def _next(records: Sequence[LogRecord], after: int, pid: int | None = None,
          any_pid: bool = False) -> LogRecord | None:
    for r in records:
        if r.line_no > after and (any_pid or r.pid == pid):
            return r
    return None


def log_spans(ev: LogEvidence, arrival: Sequence[float]) -> list[Span]:
    """Spans (source ``"log"``) from the log, given each line's arrival time.

    ``arrival[i]`` is when line ``i`` arrived, in seconds on the caller's clock (normally since
    the engine's launch, so that 0 is the launch). Duration lines become
    ``[arrival - duration, arrival]``; marker pairs become spans where the pair brackets one
    stage: the compile warm-up (torch_compile, or kv_cache_profiling/warmup when compile is
    off), model loading when no total is printed, the ``init engine`` window less compilation
    (kv_cache_profiling; CUDA-graph capture inside it wins in reconciliation), launch to model
    loading (bootstrap), and engine initialised to "Application startup complete"
    (server_ready).
    """
    if ev.records and len(arrival) <= max(r.line_no for r in ev.records):
        raise ValueError(f"arrival has {len(arrival)} times, the log has {ev.line_count} lines")

    def at(r: LogRecord) -> float:
        return float(arrival[r.line_no])

    def span(name: str, start: float, end: float, r: LogRecord | None = None,
             process: str | None = None) -> Span:
        proc = process or (r.process if r is not None and r.process else "engine")
        return Span(name, start, end, "log", proc, r.pid if r is not None else None)

    spans: list[Span] = []
    for r in ev.records:
        if r.name in _ANCHORED and r.duration is not None:
            spans.append(span(r.name, at(r) - r.duration, at(r), r))

    # Compilation as one phase per process, from the first compile step to the last.
    by_pid: dict[int | None, list[Span]] = {}
    for s in spans:
        if s.name in _COMPILE_SUBSTEPS:
            by_pid.setdefault(s.pid, []).append(s)
    for group in by_pid.values():
        spans.append(
            Span(
                TORCH_COMPILE,
                min(s.start for s in group),
                max(s.end for s in group),
                "log",
                group[0].process,
                group[0].pid,
            )
        )

    # CPU warm-up: where torch.compile runs on the CPU backends.
    ends = _ByPid(ev.named(WARMUP_END))
    for start in ev.named(WARMUP_START):
        end = ends.next_after(start.line_no, start.pid)
        if end is not None and at(end) >= at(start):
            name = WARMUP_EAGER if ev.compile_enabled is False else WARMUP_COMPILE
            spans.append(span(name, at(start), at(end), start))

    compiling = _Union((s.start, s.end) for s in spans if s.stage == TORCH_COMPILE)

    # init engine: profiling, KV-cache allocation, (capture), less the compilation inside it.
    init = ev.named(KV_CACHE_END)
    init_start = None
    for r in init:
        if r.duration is None:
            continue
        init_start = at(r) - r.duration if init_start is None else init_start
        window = (at(r) - r.duration, at(r))
        for a, b in subtract(window, compiling.within(*window)):
            spans.append(span(KV_CACHE_PROFILING, a, b, r))
    if not init:  # V0: weights loaded -> KV cache sized
        sized = ev.named(KV_CACHE_SIZED)
        loaded = ev.named(MODEL_LOADING_END)
        if sized and loaded and at(sized[0]) >= at(loaded[-1]):
            spans.append(span(KV_CACHE_PROFILING, at(loaded[-1]), at(sized[0]), sized[0]))

    # Model loading from markers when no line prints its total.
    if not ev.named(MODEL_LOADING):
        last_loaded: dict[int | None, LogRecord] = {}  # each process's last such line
        for r in ev.named(MODEL_LOADING_END):
            last_loaded[r.pid] = r
        for start in ev.named(MODEL_LOADING_START):
            end_t = None
            if init_start is not None and init_start > at(start):
                end_t = init_start
            else:
                last = last_loaded.get(start.pid)
                end_t = at(last) if last is not None and last.line_no > start.line_no else None
            if end_t is not None and end_t >= at(start):
                spans.append(span(MODEL_LOADING, at(start), end_t, start))

    # Bootstrap: launch to the first model-loading step (imports, config, process spawn).
    starts = ev.named(MODEL_LOADING_START)
    if starts:
        first_load = at(starts[0])
        engine = ev.named(ENGINE_CORE_START)
        served = any(r.process == "api_server" for r in ev.records)
        if engine and 0.0 < at(engine[0]) < first_load:
            frontend = "api_server" if served else "engine"
            spans.append(span(substep(BOOTSTRAP, "frontend"), 0.0, at(engine[0]), process=frontend))
            spans.append(span(substep(BOOTSTRAP, "engine"), at(engine[0]), first_load, engine[0]))
        elif first_load > 0:
            spans.append(span(BOOTSTRAP, 0.0, first_load))

    # Server ready: engine initialised -> the HTTP app has started.
    server = ev.named(SERVER_START)
    if server:
        done = _next(ev.named(APP_STARTUP_COMPLETE), server[0].line_no, any_pid=True)
        end_t = at(done) if done is not None else at(server[0])
        begin = at(init[-1]) if init and at(init[-1]) <= end_t else at(server[0])
        if end_t > begin:
            spans.append(span(SERVER_READY, begin, end_t, process="api_server"))

    return sorted(spans, key=lambda s: (s.start, s.end, s.name))


# --------------------------------------------------------------------------------------------
# The paper's parser, for comparison


#: The metrics of the paper's ``profile_log.py`` that its ``comparison_results.json`` reports.
PAPER_METRICS: tuple[str, ...] = (
    "load_weights",
    "dynamo_transform_time",
    "graph_compile_cached",
    "kv_cache_profiling",
    "graph_capturing",
    "init_engine",
    "tokenizer_init",
    "actual_total_time",
)


def paper_metrics(ev: LogEvidence) -> dict[str, float | None]:
    """The paper parser's metrics, by its definitions, from this evidence.

    Its rules: the last matching line wins; ``load_weights`` falls back to model loading minus
    model init when no "Loading weights took" line exists (tensorizer, Run:ai streamer);
    ``kv_cache_profiling`` is "Memory profiling takes" minus "torch.compile … in total" minus
    the cached graph load; ``actual_total_time`` is the last timestamp minus the first.
    Where its regexes misread a newer wording (``missed`` lists them), this reports the value
    the line actually holds.
    """
    weights = _last(ev, WEIGHTS)
    loading, init_model = _last(ev, MODEL_LOADING), _last(ev, INIT_MODEL)
    if weights is None and loading is not None and init_model is not None:
        weights = loading - init_model
    graph_load = _last(ev, GRAPH_LOAD)
    memory = _last(ev, MEMORY_PROFILING_END)
    kv = None
    if memory is not None:
        kv = memory - (_last(ev, TORCH_COMPILE) or 0.0) - (graph_load or 0.0)
    total = ev.line_clock[-1] if ev.line_clock else None
    return {
        "load_weights": weights,
        "dynamo_transform_time": _last(ev, DYNAMO),
        "graph_compile_cached": graph_load,
        "kv_cache_profiling": kv,
        "graph_capturing": _last(ev, CUDA_GRAPH_CAPTURE),
        "init_engine": _last(ev, KV_CACHE_END),
        "tokenizer_init": _last(ev, TOKENIZER),
        "actual_total_time": total,
    }


class Missed(TypedDict):
    """One thing the paper's parser misses or misreads (``records.MissedItem``'s fields)."""

    what: str
    """A stage or metric."""
    seconds: float | None
    detail: str
    """One line."""


def missed(ev: LogEvidence) -> list[Missed]:
    """What the paper's parser misses or misreads in this log."""
    out: list[Missed] = []

    def add(what: str, seconds: float | None, detail: str) -> None:
        out.append({"what": what, "seconds": _us(seconds), "detail": detail})

    stages, substeps, _ = stage_durations(ev)
    inductor = substeps.get(INDUCTOR)
    if inductor is not None:
        add(
            INDUCTOR,
            inductor,
            f"Inductor compile ('Compiling a graph for ... takes {inductor:g} s') is in none of "
            "the paper's metrics: it only reports dynamo_transform_time and subtracts the "
            "compile total out of kv_cache_profiling",
        )
    dynamo, graph_load = substeps.get(DYNAMO), substeps.get(GRAPH_LOAD)
    if dynamo is not None and graph_load is not None:
        add(
            TORCH_COMPILE,
            dynamo + graph_load,
            f"on a compile-cache hit torch.compile is Dynamo {dynamo:g} s + graph load "
            f"{graph_load:g} s; vLLM's 'torch.compile ... in total' "
            f"({_total(ev, TORCH_COMPILE) or 0:g} s) leaves the graph load out",
        )
    init_model = substeps.get(INIT_MODEL)
    if init_model is not None:
        if "init_model_wording" in ev.paper_blind_spots:
            detail = (
                "stock 'Initializing model took' is not matched: the paper's parser only "
                "knows its patched 'NEW: Initializing Model took'"
            )
        else:
            detail = "parsed by the paper as model_init but in none of its reported metrics"
        add(INIT_MODEL, init_model, detail)
    loading = _total(ev, MODEL_LOADING)
    if loading is not None and "model_loading_unit" in ev.paper_blind_spots:
        add(
            MODEL_LOADING,
            loading,
            "'Model loading took X GB and …' / 'GiB memory and …': the paper's regex wants "
            "'GiB and', so it reads model_loading as 0",
        )
    init_engine = _total(ev, KV_CACHE_END)
    if init_engine is not None and "init_engine_unit" in ev.paper_blind_spots:
        add(
            "init_engine",
            init_engine,
            "'init engine … took X s': the paper's regex wants 'seconds', so it reads 0",
        )
    if "compile_total_wording" in ev.paper_blind_spots:
        add(
            TORCH_COMPILE,
            _total(ev, TORCH_COMPILE),
            "'torch.compile took X s in total': the paper's parser only matches 'takes'",
        )
    memory = _total(ev, MEMORY_PROFILING_END)
    kv = stages.get(KV_CACHE_PROFILING)
    if kv is not None and memory is None:
        add(
            KV_CACHE_PROFILING,
            kv,
            "no 'Memory profiling takes' line here, so the paper reports null; coldscope "
            "derives it from init engine, compile and capture (or the log's clock)",
        )
    elif kv is not None and init_engine is not None and memory is not None:
        rest = init_engine - memory - (stages.get(CUDA_GRAPH_CAPTURE) or 0.0)
        if rest > 0.05:
            add(
                KV_CACHE_PROFILING,
                rest,
                "init engine time after memory profiling and outside capture (KV-cache "
                "allocation, warm-up) is not in the paper's kv_cache_profiling",
            )
    if "capture_whole_seconds" in ev.paper_blind_spots:
        add(
            CUDA_GRAPH_CAPTURE,
            _total(ev, CUDA_GRAPH_CAPTURE),
            "this release prints graph capture in whole seconds ('%.0f secs'): ±0.5 s",
        )
    if (
        ev.named(WARMUP_START)
        and stages.get(TORCH_COMPILE) is not None
        and _total(ev, DYNAMO) is None
    ):
        add(
            TORCH_COMPILE,
            stages[TORCH_COMPILE],
            "compilation inside the CPU warm-up prints no duration; coldscope times it "
            "between 'Warming up model for the compilation' and 'Warming up done'",
        )
    if ev.family == "v0.6" and stages.get(MODEL_LOADING) is not None and loading is None:
        add(
            MODEL_LOADING,
            stages[MODEL_LOADING],
            "V0 prints no loading time (only 'Loading model weights took N GB'); coldscope "
            "times it on the log's clock (1 s resolution); the paper reports null",
        )
    actual = ev.line_clock[-1] if ev.line_clock else None
    if actual is not None and ev.harness_total is not None and abs(actual - ev.harness_total) > 0.5:
        add(
            "actual_total_time",
            actual,
            f"first-to-last timestamp ({actual:g} s) differs from the harness's own "
            f"initialize_engine ({ev.harness_total:g} s): coarse stamps, shutdown lines",
        )
    if "first_line_unstamped" in ev.paper_blind_spots:
        add(
            "actual_total_time",
            None,
            "the first line has no timestamp: the paper's parser raises on this log "
            "(first timestamp of line 0) and reports nothing for it",
        )
    boot = stages.get(BOOTSTRAP)
    if boot is not None:
        add(
            BOOTSTRAP,
            boot,
            f"the paper's framework_bootstrap only sums gaps between a few debug lines; "
            f"coldscope times the engine's start (the log's first line, or the harness's "
            f"start when later) to model loading on the log's clock ({boot:g} s, a lower "
            f"bound: what ran before the first line is in no log)",
        )
    else:
        add(
            BOOTSTRAP,
            None,
            "time before the first log line (interpreter start, imports) is in no log; the "
            "paper's framework_bootstrap only sums gaps between a few debug lines",
        )
    return out


# --------------------------------------------------------------------------------------------
# One start-up as a saved log shows it: the engine's own lines, ready or failed, and a timeline
# whose buckets sum to time to ready.

#: The log's clock may step back this many seconds between two processes' lines (each process
#: stamps its own lines; docker merges stdout and stderr); a longer step back is a block of
#: lines out of order.
_BACK_TOLERANCE = 2.0
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
#: The last line of a traceback: ``RuntimeError: ...``, ``torch.OutOfMemoryError: ...``.
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b(?::\s*.*)?$"
)
#: Lines in which vLLM (its engine core, its API server) or uvicorn says the start-up failed.
_STARTUP_FAILED = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|"
    r"Engine process failed to start|Application startup failed"
)
_ERROR_LEVEL = re.compile(r"^(?:\([^)]*pid=\d+\)\s*)?(?:ERROR|CRITICAL)\s+\d{2}-\d{2} ")
_INIT_ENGINE_LINE = re.compile(r"init engine \(profile")
_MODEL_PATTERNS = (
    re.compile(r"\bmodel='(?P<m>[^']+)'"),                  # the engine config
    re.compile(r"""['"]model['"]:\s*['"](?P<m>[^'"]+)['"]"""),  # non-default args
    re.compile(_FIRST_BLOCK + r".*\bmodel\s+(?P<m>\S+)\s*$"),  # the 0.11+ banner
)
_QUOTE = 200


@dataclass(frozen=True)
class Startup:
    """One vLLM start-up read from a saved log (``read_startup``).

    ``lines`` are the lines the engine's evidence was read from (cleaned by
    ``capture.logtext.normalise``; other services' lines blanked) and ``source[i]`` the 0-based
    physical line of the log that ``lines[i]`` came from; ``evidence`` is ``parse_vllm_log`` of
    ``lines``. ``ready_line`` (an index into ``lines``) is the engine's own ready line; when
    there is none, ``failure`` says why, quoted from the log. ``refused`` is a one-line reason
    when the log's evidence cannot be reconciled (then no timeline should be reported).
    ``timeline`` has time to ready on the log's own clock, from the engine's first own line to
    its ready line, and buckets that sum to it; ``notes`` say which line won where evidence
    overlapped, what was skipped, and which rank is reported.
    """

    evidence: LogEvidence
    lines: tuple[str, ...]
    source: tuple[int, ...]
    timeline: Timeline
    time_to_ready_from: str | None
    ready_line: int | None
    failure: str | None
    refused: str | None
    notes: tuple[str, ...]
    model: str | None


def _clip(text: str, limit: int = _QUOTE) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _leading_repeats(clean: CleanLines, parsed: Sequence[_Line],
                     secs: Sequence[float | None]) -> int:
    """How many leading lines are a block whose every timed line comes again later, out of
    time order (a summary a harness printed before the full log): the largest ``i`` such that
    each timed line before ``i`` has a copy at or after ``i`` and the block holds a line later
    than the first timed line after it; 0 when there is none. ``secs``: each line's stamp in
    seconds (None: no stamp)."""
    first = next((i for i, p in enumerate(parsed) if p.wallclock), None)
    if first is None:
        return 0
    # The block cannot reach past the last copy of its first timed line (the loop below
    # looks one line further): only the texts of the timed lines up to there need their last
    # copy looked up (one pass, not a table of every line of the log).
    text0 = clean.lines[first]
    bound = max(i for i in range(first, len(parsed)) if clean.lines[i] == text0)
    wanted = {clean.lines[i] for i in range(first, min(bound + 2, len(parsed)))
              if parsed[i].wallclock}
    last: dict[str, int] = {}
    for i, (text, p) in enumerate(zip(clean.lines, parsed, strict=True)):
        if p.wallclock and text in wanted:
            last[text] = i
    best, reach, timed = 0, len(parsed), False
    for i, (text, p) in enumerate(zip(clean.lines, parsed, strict=True)):
        if timed and reach >= i:
            best = i
        if p.wallclock:
            timed = True
            reach = min(reach, last[text] if last[text] > i else -1)
        if reach < i:
            break
    # Only a block out of time order is a summary; a line an engine itself prints twice at
    # the same time (a banner's blank line) is not.
    block = [t for t in secs[:best] if t is not None]
    after = next((t for t in secs[best:] if t is not None), None)
    return best if block and after is not None and max(block) > after else 0


#: A run of at most this many timed lines stamped before the lines ahead of it is output a
#: process flushed late (kept); a longer one is a block of the log out of order.
_LATE_FLUSH_LINES = 20


def _drop_out_of_order(clean: CleanLines, parsed: Sequence[_Line]
                       ) -> tuple[Sequence[int], list[str], str | None]:
    """(kept indexes, notes, refusal) where the log's clock goes back.

    A leading block whose timed lines all come again later, out of time order, is a harness's
    summary printed before the full log; a block after the step back whose lines all came
    before it is one printed after it: either is skipped. A short run of lines stamped earlier
    than the lines ahead of it (up to ``_LATE_FLUSH_LINES`` timed lines, until the clock is
    back where it was or the log ends) is output flushed late: kept, with a note. Any other
    step back is refused: the lines cannot be put in order.

    One pass: each line is looked at a bounded number of times whatever the log holds (the
    texts before a step back are collected once, as the pass goes, not again per step)."""
    secs = [p.seconds for p in parsed]
    lead = _leading_repeats(clean, parsed, secs)
    n = len(parsed)
    skipped: list[tuple[int, int]] = []  # [a, b) ranges left out
    notes: list[str] = []
    if lead:
        notes.append(f"lines {clean.source[0] + 1}-{clean.source[lead - 1] + 1} skipped: a "
                     "summary printed before the full log (its engine lines all come again "
                     "after it, out of time order)")

    def back(t: float | None, peak: float | None) -> bool:
        return t is not None and peak is not None and \
            peak - 180 * 86400 < t < peak - _BACK_TOLERANCE

    def kept() -> Sequence[int]:
        if not skipped:
            return range(lead, n)
        out: list[int] = []
        at = lead
        for a, b in skipped:
            out.extend(range(at, a))
            at = b
        out.extend(range(at, n))
        return out

    texts_before: set[str] = set()  # texts of the kept lines before ``upto``
    upto = lead
    pos, peak = lead, None
    while True:
        while pos < n:
            t = secs[pos]
            if back(t, peak):
                break
            if t is not None:
                peak = t if peak is None else max(peak, t)
            pos += 1
        if pos >= n:
            return kept(), notes, None
        jump = pos
        line = clean.source[jump] + 1
        texts_before.update(clean.lines[upto:jump])
        upto = jump
        end = jump
        while end < n and (secs[end] is None or clean.lines[end] in texts_before):
            end += 1
        if end > jump and any(secs[i] is not None for i in range(jump, end)):
            notes.append(f"lines {line}-{clean.source[end - 1] + 1} skipped: they repeat "
                         "earlier lines out of order (a summary printed after them)")
            skipped.append((jump, end))
            pos = upto = end
            continue
        late, timed = jump, 0
        while late < n and (secs[late] is None or back(secs[late], peak)):
            timed += secs[late] is not None
            late += 1
        if timed <= _LATE_FLUSH_LINES:
            notes.append(f"lines {line}-{clean.source[late - 1] + 1} are stamped before "
                         "the lines ahead of them (output flushed late): kept in place")
            pos = late
            continue
        return kept(), notes, (f"the log's clock goes back to {parsed[jump].wallclock} at "
                               f"line {line} for {timed} timed lines and they are not a "
                               "repeat: its lines are out of order")


def _engine_mask(parsed: Sequence[_Line]) -> tuple[list[bool], int | None, str | None]:
    """Which lines are not this engine's (another service's), the engine's API-server pid, and
    a note. The engine is the first vLLM API server that shows its start; another API server
    process that prints its own start (banner, version, arguments) is another service, and so
    is a second engine core of the same name that initialises its own engine."""
    api_pid = None
    other_pids: set[int] = set()
    cores: dict[str, int] = {}
    for ln in parsed:
        if ln.pid is None:
            continue
        if ln.process == "api_server" and _is_start(ln.message):
            if api_pid is None:
                api_pid = ln.pid
            elif ln.pid != api_pid:
                other_pids.add(ln.pid)
        if ln.process == "engine_core" and "LLM engine (v" in ln.message:
            first = cores.setdefault(ln.tag or "", ln.pid)
            if first != ln.pid:
                other_pids.add(ln.pid)
    if api_pid is None:
        api_pid = next((ln.pid for ln in parsed if ln.process == "api_server"), None)
    other = [ln.pid in other_pids for ln in parsed]
    note = None
    if any(other):
        note = (f"{sum(other)} lines of another service's processes (pid "
                f"{', '.join(str(p) for p in sorted(other_pids))}) are not this engine's: "
                "skipped")
    return other, api_pid, note


def _model_of(parsed: Sequence[_Line]) -> str | None:
    """The model the lines' messages name (the first pattern of ``_MODEL_PATTERNS`` that any
    line matches, its first line)."""
    lines = [p.message for p in parsed if "model" in p.text]  # every pattern names it
    for pattern in _MODEL_PATTERNS:
        for text in lines:
            if m := pattern.search(text):
                return m.group("m")
    return None


def _ready(ev: LogEvidence, api_pid: int | None, served: bool) -> LogRecord | None:
    """The engine's own ready line: the paper harness's ``initialize_engine took``; else the
    API server's "Application startup complete" after the engine's init (its own process when
    the line names one; an unnamed one only after the engine's "Starting vLLM server on"); else,
    for an engine with no API server (``LLM(...)``), its "init engine ... took" line."""
    harness = ev.last(HARNESS_END)
    if harness is not None:
        return harness
    inits = ev.named(KV_CACHE_END)
    after = inits[0].line_no if inits else -1
    servers = [r for r in ev.named(SERVER_START) if r.line_no > after]
    any_server = bool(ev.named(SERVER_START))
    for r in ev.named(APP_STARTUP_COMPLETE):
        if r.line_no <= after:
            continue
        if r.process is not None:
            if r.process == "api_server" and (api_pid is None or r.pid == api_pid):
                return r
        elif servers and r.line_no > servers[0].line_no:
            return r
        elif not any_server and not served and inits:
            return r
    if not served and inits:
        return inits[-1]
    return None


def _failure(lines: Sequence[str], parsed: Sequence[_Line], ev: LogEvidence,
             source: Sequence[int]) -> str:
    """Why a start-up never reached its ready line, quoted from the log: after the engine's
    last step, the first traceback's exception (the root cause; later tracebacks of other
    processes repeat it), else the first line saying the start-up failed, else the first
    ERROR line; an error the start-up went on after is not the reason. With none of these the
    log was cut off (or the engine got stuck) after its last step."""
    after = ev.records[-1].line_no if ev.records else -1
    exc: int | None = None
    failed: int | None = None
    error: int | None = None
    in_traceback = False
    for i, ln in enumerate(parsed):
        msg = ln.message.strip()
        if i <= after or not msg:
            continue
        if _TRACEBACK.search(msg):
            in_traceback = True
            continue
        if in_traceback and _EXCEPTION.match(msg):
            in_traceback = False
            exc = i if exc is None else exc
        if _STARTUP_FAILED.search(msg):
            failed = i if failed is None else failed
        elif _ERROR_LEVEL.match(lines[i]) and not _TRACEBACK.search(msg):
            error = i if error is None else error
    stage = "after engine init" if ev.named(KV_CACHE_END) else "during start-up"
    for at in (exc, failed, error):
        if at is not None:
            return f"crashed {stage}: {_clip(parsed[at].message)} (line {source[at] + 1})"
    last = ev.records[-1] if ev.records else None
    if last is None:
        return "cut off: the log never shows the engine's start-up going past its first lines"
    return (f"cut off: the log ends after '{_clip(parsed[last.line_no].message, 120)}' (line "
            f"{source[last.line_no] + 1}) and never shows the engine ready")


def _per_rank_notes(ev: LogEvidence, tags: dict[int | None, str | None]) -> list[str]:
    notes = []
    for name in (MODEL_LOADING, WEIGHTS, TORCH_COMPILE, CUDA_GRAPH_CAPTURE):
        per: dict[int | None, float] = {}
        for r in ev.records:
            if r.name == name and r.duration is not None:
                per[r.pid] = per.get(r.pid, 0.0) + r.duration
        if len(per) > 1:
            slow = max(per, key=lambda p: per[p])
            notes.append(f"{name}: the slowest of {len(per)} processes is reported "
                         f"({tags.get(slow) or 'pid'} pid={slow}, {per[slow]:.2f} s; fastest "
                         f"{min(per.values()):.2f} s): tensor-parallel workers run at once")
    return notes


def _overlap_notes(ev: LogEvidence, stages: dict[str, float], substeps: dict[str, float],
                   source: Sequence[int]) -> list[str]:
    notes = []

    def at(name: str) -> str:
        r = ev.last(name)
        return f" (line {source[r.line_no] + 1})" if r is not None else ""

    total = _total(ev, TORCH_COMPILE)
    parts = _sum_known(*(substeps.get(n) for n in _COMPILE_SUBSTEPS))
    if total is not None and parts is not None and abs(total - parts) > 0.005:
        won = "'torch.compile ... took/takes X s in total'" if total >= parts else \
            "the sum of Dynamo, Inductor and graph-load lines"
        notes.append(f"torch_compile: {max(total, parts):.2f} s from {won}; the other gives "
                     f"{min(total, parts):.2f} s (the larger wins: vLLM's total leaves cache "
                     "loads out, its parts leave other compile work out)")
    init_compile = _total(ev, INIT_COMPILATION)
    if init_compile is not None and stages.get(TORCH_COMPILE) is not None and \
            abs(init_compile - stages[TORCH_COMPILE]) > 0.05:
        notes.append(f"torch_compile: {stages[TORCH_COMPILE]:.2f} s from the compile lines, "
                     f"not the {init_compile:.2f} s of 'init engine ... (compilation: Y s)'"
                     f"{at(INIT_COMPILATION)}")
    init = _total(ev, KV_CACHE_END)
    if init is not None and KV_CACHE_PROFILING in stages:
        inside = (stages.get(TORCH_COMPILE) or 0.0) + (stages.get(CUDA_GRAPH_CAPTURE) or 0.0)
        clamp = " (they exceed it: kv_cache_profiling is 0)" if inside > init else ""
        notes.append(f"kv_cache_profiling: what 'init engine ... took {init:g} s'{at(KV_CACHE_END)}"
                     f" leaves after torch_compile and cuda_graph_capture{clamp}")
    captures = [r for r in ev.named(CUDA_GRAPH_CAPTURE) if r.duration is not None]
    if len({r.pid for r in captures}) == 1 and len(captures) > 1:
        lines = ", ".join(str(source[r.line_no] + 1) for r in captures)
        notes.append(f"cuda_graph_capture: {len(captures)} capture passes (lines {lines}) "
                     "added up")
    download = substeps.get(DOWNLOAD)
    if download is not None:
        notes.append(f"model_loading/download: {download:g} s of weight download{at(DOWNLOAD)}, "
                     "inside vLLM's own 'Model loading took'")
    return notes


def _fit(stages: dict[str, float], ttr: float, coarse: bool,
         ev: LogEvidence) -> tuple[dict[str, float], list[str], str | None]:
    """Stages whose sum does not exceed time to ready: what the log's clock measured
    (bootstrap, server_ready) gives way first, then the derived remainder
    (kv_cache_profiling), then, within the clock's resolution, the largest stage; beyond it the
    log is refused."""
    stages = dict(stages)
    notes: list[str] = []
    excess = sum(stages.values()) - ttr
    if excess <= 1e-6:
        return stages, notes, None
    captures = len([r for r in ev.named(CUDA_GRAPH_CAPTURE) if r.duration is not None])
    tolerance = (1.0 if coarse else 0.1) + 0.5 * captures
    for name in (BOOTSTRAP, SERVER_READY, KV_CACHE_PROFILING):
        if excess <= 1e-6 or not stages.get(name):
            continue
        cut = min(stages[name], excess)
        stages[name] = _us(stages[name] - cut) or 0.0
        excess -= cut
        what = "a remainder of 'init engine ... took'" if name == KV_CACHE_PROFILING else \
            "timed on the log's clock"
        notes.append(f"{name} shortened by {cut:.2f} s: the durations the engine printed for the "
                     f"stages around it overlap it, and it is {what} (printed figures win)")
    if excess > tolerance:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in stages.items() if v)
        return stages, notes, (f"its printed stage durations add up to {sum(stages.values()):.2f} "
                               f"s ({parts}), {excess:.2f} s more than the {ttr:.2f} s from its "
                               "first line to its ready line: the lines cannot be reconciled")
    if excess > 1e-6:
        big = max(stages, key=lambda k: stages[k])
        stages[big] = _us(stages[big] - excess) or 0.0
        notes.append(f"{big} shortened by {excess:.2f} s to fit time to ready (within the "
                     "resolution of the log's clock and of its printed figures)")
    return stages, notes, None


def _untrue_clock(ev: LogEvidence, parsed: Sequence[_Line], ready: int, ttr: float | None,
                  source: Sequence[int]) -> str | None:
    """Why the start-up's clock, from its first stamped line to its ready line, cannot be
    true (a step forward past ``logtext.MAX_CLOCK_STEP_S``, a time to ready past
    ``logtext.MAX_STARTUP_S``), naming the line; None when it can. Steps back are
    ``_drop_out_of_order``'s; one of more than 180 days is read as a new year, so a stamp
    that leaves the log's year is a step forward here."""
    from coldscope.capture.logtext import (
        MAX_CLOCK_STEP_S,
        MAX_STARTUP_S,
        clock_step_error,
        startup_length_error,
    )
    before: tuple[float, int] | None = None
    for i in range(min(ready + 1, len(parsed))):
        t = ev.line_clock[i]
        if not parsed[i].wallclock or t is None:
            continue
        if before is not None and t - before[0] > MAX_CLOCK_STEP_S:
            j = before[1]
            return clock_step_error(t - before[0], source[i] + 1, parsed[i].wallclock or "",
                                    parsed[j].wallclock or "", source[j] + 1)
        before = (t, i)
    if ttr is not None and not 0 <= ttr <= MAX_STARTUP_S:
        return startup_length_error(ttr, source[ready] + 1)
    return None


def read_startup(lines: Iterable[object]) -> Startup:
    """One vLLM start-up from a saved log (the lines in order; a whole text is split).

    The lines are cleaned (``capture.logtext.normalise``: colours, collector prefixes, tail
    separators, progress redraws); a block a harness repeated out of order is skipped, then
    lines repeated with the same time and text count once; other services' processes are left
    out. Time to ready is on the log's own clock from the engine's first own line to its own
    ready line (``_ready``). Stages are the durations the engine prints, the log's clock where
    it prints none, fitted so that they never exceed time to ready (``_fit``); the rest is
    ``unattributed``. A start-up without its ready line has a ``failure`` quoted from the log.
    """
    from coldscope.capture.logtext import first_copies, normalise, split_lines, without_repeats
    if isinstance(lines, str | bytes | bytearray):
        lines = split_lines(as_text(lines))
    clean = normalise(lines, drop_repeats=False)
    parsed = [_split_clean(t) for t in clean.lines]  # each line taken apart once
    keep, notes, refused = _drop_out_of_order(clean, parsed)
    if len(keep) < len(parsed):
        clean = type(clean)(tuple(clean.lines[i] for i in keep),
                            tuple(clean.source[i] for i in keep), clean.dropped, clean.prefixed)
        parsed = [parsed[i] for i in keep]
    firsts = first_copies(clean.lines)
    if len(firsts) < len(parsed):
        clean = without_repeats(clean, firsts)
        parsed = [parsed[i] for i in firsts]
    notes = clean.notes() + notes
    other, api_pid, other_note = _engine_mask(parsed)
    if other_note:
        notes.append(other_note)
    own = tuple("" if o else t for t, o in zip(clean.lines, other, strict=True))
    parsed = [_BLANK if o else p for p, o in zip(parsed, other, strict=True)]
    ev = _evidence(parsed)
    source = clean.source
    first = next((i for i, p in enumerate(parsed) if p.wallclock), None)
    if first is not None and first > 0:
        skipped = sum(1 for t in own[:first] if t.strip())
        if skipped:
            notes.append(f"{skipped} lines before the engine's first own line (line "
                         f"{source[first] + 1}) are a wrapper's or a shell's: not timed")
    served = api_pid is not None or bool(ev.named(SERVER_START)) or any(
        _is_start(p.message) and p.process in (None, "api_server") and "LLM engine" not in
        p.message for p in parsed)
    ready = _ready(ev, api_pid, served)
    ttr, ttr_from = None, None
    failure = None
    if ready is None:
        failure = _failure(own, parsed, ev, source)
    elif ready.name == HARNESS_END:
        ttr, ttr_from = ev.harness_total, "harness"
    elif ev.line_clock and ev.line_clock[ready.line_no] is not None:
        ttr, ttr_from = ev.line_clock[ready.line_no], "timestamps"
    else:
        failure = "the log has no timestamps: time to ready cannot be read"
    untrue = None
    if ready is not None and failure is None:
        untrue = failure = _untrue_clock(ev, parsed, ready.line_no, ttr, source)
        if failure is not None:  # a failed start-up, as one without its ready line
            ttr = ttr_from = None
    tags: dict[int | None, str | None] = {p.pid: p.tag for p in parsed if p.pid is not None}
    model = _model_of(parsed)
    del parsed  # (the lines taken apart are done with: the stages' spans need the room)
    stages, substeps, na = stage_durations(ev)
    if ready is None or untrue is not None:
        stages.pop(SERVER_READY, None)
        if refused is not None:  # a failed start-up is reported failed; its clock is a note
            notes.append(refused)
            refused = None
    notes += _per_rank_notes(ev, tags)
    if ready is not None and ev.start_line is None and ttr_from == "timestamps":
        notes.append("the log begins after the engine started (its first line is not the "
                     "start): time to ready counts from its first line, a lower bound; "
                     "bootstrap unknown")
    if ttr is not None and refused is None:
        coarse = bool(ev.first_wallclock) and "." not in (ev.first_wallclock or "")
        stages, fit_notes, refused = _fit(stages, ttr, coarse, ev)
        notes += fit_notes
    notes += _overlap_notes(ev, stages, substeps, source)
    tl = from_durations(stages, source="log", time_to_ready=ttr, substeps=substeps,
                        not_applicable=na)
    if stages.get(BOOTSTRAP) is not None:
        tl = replace(tl, sources={**tl.sources, BOOTSTRAP: LOG_CLOCK})
    return Startup(evidence=ev, lines=own, source=source, timeline=tl,
                   time_to_ready_from=ttr_from,
                   ready_line=ready.line_no if ready is not None else None,
                   failure=failure, refused=refused, notes=tuple(notes), model=model)


__all__ = [
    "Startup",
    "read_startup",
    "FAMILIES",
    "LogEvidence",
    "LogRecord",
    "PAPER_METRICS",
    "family_of",
    "LOG_CLOCK",
    "log_bootstrap",
    "log_spans",
    "log_time_to_ready",
    "log_timeline",
    "missed",
    "paper_metrics",
    "parse_vllm_log",
    "read_vllm_log",
    "stage_durations",
]
