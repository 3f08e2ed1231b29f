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

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coldscope.capture.logtext import CleanLines, as_text, without_colours
from coldscope.core.stages import (
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    TOKENIZER,
    TORCH_COMPILE,
)

# Record names (the vocabulary of the log, mapped once onto the shared stage names;
# ``stages.substep``'s form, written out: importing the grammar runs no other module's code).
WEIGHTS = f"{MODEL_LOADING}/weights"
#: "Time spent downloading weights for M: X seconds": inside vLLM's own "Model loading took".
DOWNLOAD = f"{MODEL_LOADING}/download"
INIT_MODEL = f"{MODEL_LOADING}/init_model"
DYNAMO = f"{TORCH_COMPILE}/dynamo"
INDUCTOR = f"{TORCH_COMPILE}/inductor"
GRAPH_LOAD = f"{TORCH_COMPILE}/graph_load"
#: The TPU model runner's XLA pre-compilation passes ("Compilation finished in X [secs].",
#: one per pass: backbone, hidden-state selection, logits, sampler): compile work, added up.
XLA_COMPILE = f"{TORCH_COMPILE}/xla"
WARMUP_COMPILE = f"{TORCH_COMPILE}/warmup"
WARMUP_EAGER = f"{KV_CACHE_PROFILING}/warmup"
PROFILE_RUN = f"{KV_CACHE_PROFILING}/profile_run"

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

COMPILE_SUBSTEPS = (DYNAMO, INDUCTOR, GRAPH_LOAD, XLA_COMPILE)
#: Duration records whose phase ends at the line that prints them, so [arrival - d, arrival]
#: is where the phase ran. ("torch.compile takes X s in total" is not one: vLLM prints it after
#: the first forward pass that follows compilation.)
ANCHORED = (
    TOKENIZER,
    MODEL_LOADING,
    DOWNLOAD,
    WEIGHTS,
    INIT_MODEL,
    *COMPILE_SUBSTEPS,
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


# The durations the records report (section 3's arithmetic on them): here, beside the records,
# so that every reader of the evidence (timeline, facts, the paper's parser) sums them alike
# without reaching into another reader.

def total_seconds(ev: LogEvidence, name: str) -> float | None:
    """Seconds spent on ``name``: summed within a process (repeated phases, e.g. two compiled
    sub-modules), the slowest process across processes (tensor-parallel workers run at once)."""
    per_pid: dict[int | None, float] = {}
    for r in ev.records:
        if r.name == name and r.duration is not None:
            per_pid[r.pid] = per_pid.get(r.pid, 0.0) + r.duration
    return max(per_pid.values()) if per_pid else None


def last_seconds(ev: LogEvidence, name: str) -> float | None:
    r = ev.last(name)
    return None if r is None else r.duration


def to_microsecond(seconds: float | None) -> float | None:
    """Rounded to the microsecond: sums of printed values carry float noise, not precision."""
    return None if seconds is None else round(seconds, 6)


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
        # Platform plugins' own model runners, in their words:
        # vllm-metal (Apple Silicon, MLX): "Loading model: M (VLM: False)", then "Model loaded
        # in X.XXs: M" ("Model loaded from cache in X.XXXs: M" when its process cache has it)
        (MODEL_LOADING_START, r"^Loading model: "),
        (MODEL_LOADING, rf"^Model loaded (?:from cache )?in {_SECONDS}s\b"),
        (MODEL_LOADING_END, r"^Model loaded (?:from cache )?in "),
        # vllm-ascend's NPU model runner, HPU and the V0-shaped runners of other platforms:
        # "Loading model weights took X GB" (memory only: the clock times the stage, from
        # "Starting to load model" to this line)
        (MODEL_LOADING_END, r"Loading model weights took [\d.]+ Gi?B"),
        # the TPU model runner's XLA pre-compilation, one line per pass
        (XLA_COMPILE, rf"^Compilation finished in {_SECONDS} \[secs\]"),
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
FIRST_BLOCK = _from_first("\u2588")

_VERSION_PATTERNS = (
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>\d+\.\d+[\w.+\-]*)\)"),
    # the 0.11+ ASCII-art banner; from its first block letter only (``FIRST_BLOCK``)
    re.compile(FIRST_BLOCK + r".*\bversion\s+(?P<v>\d+\.\d+[\w.+\-]*)"),
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
    # (from the first "init engine (profile" only, for the same reason as FIRST_BLOCK)
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
    # a platform plugin's start (vllm-ascend, vllm-metal, ...): plugin discovery, and on a
    # platform without Triton the import's first line
    r"|Available plugins for group|Platform plugin \w+ is activated"
    r"|Triton module has been replaced with a placeholder"
)
#: The banner's version line (block letters, then ``version``), from its first block letter.
_BANNER_VERSION = re.compile(FIRST_BLOCK + r".*\bversion\s")


def is_start(message: str) -> bool:
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
#: Whether a message can say any of the facts ``evidence_of`` looks for besides the rules.
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
class Line:
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
    borrowed: str | None = None
    """A stamp (``MM-DD HH:MM:SS[.ffffff]``) from a collector's prefix, for a line without
    one of its own (``borrow_clock``)."""

    @property
    def message(self) -> str:
        return self.text[self.at:] if self.at else self.text

    @property
    def wallclock(self) -> str | None:
        return self.text[self.stamp_at:self.stamp_end] if self.stamp_end else self.borrowed


def borrow_clock(line: Line, stamp: str) -> Line:
    """``line`` with the date-time of a collector's prefix (``YYYY-MM-DD[T ]HH:MM:SS[.f]``,
    any zone after it left out: every line of the file has the same) as its stamp, for a log
    whose engine lines carry none of their own; ``line`` as it is when ``stamp`` is not one or
    the line has its own."""
    if line.stamp_end or len(stamp) < 19 or not line.text:
        return line
    fraction = re.match(r"[.,](\d+)", stamp[19:])
    text = f"{stamp[5:10]} {stamp[11:19]}" + (f".{fraction.group(1)[:6]}" if fraction else "")
    seconds = _wallclock_seconds(text)
    if seconds is None:
        return line
    return Line(line.text, line.process, line.pid, line.tag, line.at, seconds=seconds,
                borrowed=text)


def taken_apart(clean: CleanLines) -> tuple[list[Line], bool]:
    """Each of ``clean``'s lines taken apart (``split_clean``), and whether their stamps are
    borrowed from the log's prefix (``borrow_clock``): only when no line has a stamp of its
    own, so that one start-up is never timed on two clocks."""
    parsed = [split_clean(t) for t in clean.lines]
    if not clean.prefix_clock or any(p.stamp_end for p in parsed):
        return parsed, False
    return [borrow_clock(p, t) if t else p
            for p, t in zip(parsed, clean.prefix_clock, strict=True)], True


#: A blank line taken apart (shared: a log may hold many, and lines are never changed).
BLANK_LINE = Line("", None, None)


def split_line(raw: object) -> Line:
    if raw == "":
        return BLANK_LINE
    return split_clean(without_colours(as_text(raw)).rstrip("\r\n"))


def split_clean(text: str) -> Line:
    """``split_line`` of a line ``logtext.normalise`` cleaned (no colours, no trailing
    whitespace). The prefix and header patterns are tried only where they can match (their
    first character)."""
    if not text:
        return BLANK_LINE
    m = _ANATOMY.match(text)
    assert m is not None  # (every part is optional)
    process = pid = tag = None
    if m.start("tag") >= 0:
        tag = sys.intern(m.group("tag"))
        process, pid = _process_of(tag), int(m.group("pid"))
    if m.start("ts") < 0:
        return Line(text, process, pid, tag, m.end())
    return Line(text, process, pid, tag, m.start("msg"), m.start("ts"), m.end("ts"),
                 _wallclock_seconds(m.group("ts")))


def _shows_start(parsed: Sequence[Line], clock: Sequence[float | None]) -> int | None:
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
        if is_start(ln.message):
            return first
    return None


def parse_vllm_log(lines: Iterable[str]) -> LogEvidence:
    """Parse the lines of one vLLM start-up (stdout and stderr, in order).

    Pure and total: ANSI colour codes are stripped, lines that match no rule are skipped, and
    bytes or junk never raise. A whole text passed as one string is split into lines.
    """
    if isinstance(lines, str | bytes):
        lines = as_text(lines).splitlines()
    return evidence_of([split_line(raw) for raw in lines])


def evidence_of(parsed: Sequence[Line]) -> LogEvidence:
    """``parse_vllm_log`` of lines already taken apart (``split_line``), each line once."""
    version = None
    v0_engine = False
    for ln in parsed:
        # a version counts from the engine's own line (its time or process prefix, or the
        # banner's block letters), never from prose that quotes one (a README, a ticket)
        if not ln.wallclock and ln.process is None and "\u2588" not in ln.text:
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


def first_own_line(lines: Sequence[str]) -> int | None:
    """The index of the first of ``lines`` that only vLLM prints: its version line, or a line
    in vLLM's own format (level, MM-DD time, [file:line]) that a rule reads. uvicorn's
    "Application startup complete" is any Python server's, and SGLang prints vLLM's compile
    lines in its own format."""
    from coldscope.capture.logtext import normalise
    # as ``read_startup`` reads them, but on the engine's own stamps only: a collector's clock
    # (``taken_apart``) would make any program's "Model loaded in" line look like vLLM's
    clean = normalise(lines, drop_repeats=False)
    ev = parse_vllm_log(clean.lines)
    at = [r.line_no for r in ev.records
          if r.wallclock is not None and r.name != APP_STARTUP_COMPLETE][:1]
    if ev.version is not None:
        at += [i for i, text in enumerate(clean.lines) if _ANY_VERSION.search(text)][:1]
    return clean.source[min(at)] if at else None
