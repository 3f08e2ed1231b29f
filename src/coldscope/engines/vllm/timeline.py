"""One vLLM start-up as a saved log shows it (sections 3 and 6 of vLLM's log grammar): the
durations the lines report, the log's own clock, and ``read_startup``: the engine's own lines,
ready or failed, and a timeline whose buckets sum to time to ready."""


from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from coldscope.capture.logtext import CleanLines, as_text
from coldscope.core.stages import (
    BOOTSTRAP,
    CUDA_GRAPH_CAPTURE,
    KV_CACHE_PROFILING,
    MODEL_LOADING,
    SERVER_READY,
    TOKENIZER,
    TORCH_COMPILE,
    stages_not_applicable,
)
from coldscope.core.timeline import Timeline, from_durations, reconcile
from coldscope.engines.vllm.grammar import (
    APP_STARTUP_COMPLETE,
    BLANK_LINE,
    COMPILE_SUBSTEPS,
    DOWNLOAD,
    FIRST_BLOCK,
    GRAPH_LOAD,
    HARNESS_END,
    INIT_COMPILATION,
    INIT_MODEL,
    KV_CACHE_END,
    MEMORY_PROFILING_END,
    MODEL_LOADING_START,
    PROFILE_RUN,
    SERVER_START,
    WEIGHTS,
    Line,
    LogEvidence,
    LogRecord,
    evidence_of,
    is_start,
    taken_apart,
    to_microsecond,
    total_seconds,
)
from coldscope.engines.vllm.spans import (
    log_spans,
)

# --------------------------------------------------------------------------------------------
# Durations


def _sum_known(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _not_applicable(ev: LogEvidence) -> frozenset[str]:
    """The adapter's rule (``Engine.not_applicable``) on what the log says."""
    return stages_not_applicable(compile_enabled=ev.compile_enabled, on_cpu=ev.device == "cpu",
                                 eager=bool(ev.enforce_eager))


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
    for name in (DOWNLOAD, WEIGHTS, INIT_MODEL, *COMPILE_SUBSTEPS, PROFILE_RUN):
        value = total_seconds(ev, name)
        if value is not None:
            substeps[name] = value

    stages[TOKENIZER] = total_seconds(ev, TOKENIZER)

    loading = total_seconds(ev, MODEL_LOADING)
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
        printed = _sum_known(*(substeps.get(n) for n in COMPILE_SUBSTEPS))
        total = total_seconds(ev, TORCH_COMPILE)
        figures = [v for v in (printed, total) if v is not None]
        compile_s = max(figures) if figures else clock.get(TORCH_COMPILE)
    stages[TORCH_COMPILE] = compile_s

    capture = None if CUDA_GRAPH_CAPTURE in na else total_seconds(ev, CUDA_GRAPH_CAPTURE)
    stages[CUDA_GRAPH_CAPTURE] = capture

    init_engine = total_seconds(ev, KV_CACHE_END)
    memory = total_seconds(ev, MEMORY_PROFILING_END)
    kv: float | None
    if init_engine is not None:
        kv = max(0.0, init_engine - (compile_s or 0.0) - (capture or 0.0))
    elif memory is not None:
        compiled = (total_seconds(ev, TORCH_COMPILE) or 0.0) + (substeps.get(GRAPH_LOAD) or 0.0)
        kv = max(0.0, memory - compiled)
    else:
        kv = clock.get(KV_CACHE_PROFILING)
    stages[KV_CACHE_PROFILING] = kv

    stages[SERVER_READY] = clock.get(SERVER_READY) if ev.named(SERVER_START) else None
    stages[BOOTSTRAP] = log_bootstrap(ev, clock)
    # rounded to the microsecond (as to_microsecond): sums of printed values carry float noise
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
    return to_microsecond(seconds)


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
    re.compile(FIRST_BLOCK + r".*\bmodel\s+(?P<m>\S+)\s*$"),  # the 0.11+ banner
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
    overlapped, what was skipped, and which rank is reported. ``durations`` are the stage
    durations the lines show before they were fitted to time to ready (``stage_durations``):
    what the paper's parser is compared with.
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
    durations: tuple[dict[str, float], dict[str, float], frozenset[str]]


def _clip(text: str, limit: int = _QUOTE) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _leading_repeats(clean: CleanLines, parsed: Sequence[Line],
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


def _drop_out_of_order(clean: CleanLines, parsed: Sequence[Line]
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


def _engine_mask(parsed: Sequence[Line]) -> tuple[list[bool], int | None, str | None]:
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
        if ln.process == "api_server" and is_start(ln.message):
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


def _model_of(parsed: Sequence[Line]) -> str | None:
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


def _failure(lines: Sequence[str], parsed: Sequence[Line], ev: LogEvidence,
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

    total = total_seconds(ev, TORCH_COMPILE)
    parts = _sum_known(*(substeps.get(n) for n in COMPILE_SUBSTEPS))
    if total is not None and parts is not None and abs(total - parts) > 0.005:
        won = "'torch.compile ... took/takes X s in total'" if total >= parts else \
            "the sum of Dynamo, Inductor and graph-load lines"
        notes.append(f"torch_compile: {max(total, parts):.2f} s from {won}; the other gives "
                     f"{min(total, parts):.2f} s (the larger wins: vLLM's total leaves cache "
                     "loads out, its parts leave other compile work out)")
    init_compile = total_seconds(ev, INIT_COMPILATION)
    if init_compile is not None and stages.get(TORCH_COMPILE) is not None and \
            abs(init_compile - stages[TORCH_COMPILE]) > 0.05:
        notes.append(f"torch_compile: {stages[TORCH_COMPILE]:.2f} s from the compile lines, "
                     f"not the {init_compile:.2f} s of 'init engine ... (compilation: Y s)'"
                     f"{at(INIT_COMPILATION)}")
    init = total_seconds(ev, KV_CACHE_END)
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
        stages[name] = to_microsecond(stages[name] - cut) or 0.0
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
        stages[big] = to_microsecond(stages[big] - excess) or 0.0
        notes.append(f"{big} shortened by {excess:.2f} s to fit time to ready (within the "
                     "resolution of the log's clock and of its printed figures)")
    return stages, notes, None


def _untrue_clock(ev: LogEvidence, parsed: Sequence[Line], ready: int, ttr: float | None,
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
    ready line (``_ready``); where no line has a stamp of the engine's, the date-time of a
    prefix the lines carry serves (``grammar.taken_apart``), and a note says so. Stages are the
    durations the engine prints, the log's clock where it prints none, fitted so that they
    never exceed time to ready (``_fit``); the rest is ``unattributed``. A start-up without its
    ready line has a ``failure`` quoted from the log.
    """
    from coldscope.capture.logtext import first_copies, normalise, split_lines, without_repeats
    if isinstance(lines, str | bytes | bytearray):
        lines = split_lines(as_text(lines))
    clean = normalise(lines, drop_repeats=False)
    parsed, borrowed = taken_apart(clean)  # each line taken apart once
    keep, notes, refused = _drop_out_of_order(clean, parsed)
    if len(keep) < len(parsed):
        clean = clean.only(keep)
        parsed = [parsed[i] for i in keep]
    firsts = first_copies(clean.lines)
    if len(firsts) < len(parsed):
        clean = without_repeats(clean, firsts)
        parsed = [parsed[i] for i in firsts]
    notes = clean.notes() + notes
    if borrowed:
        example = next((t for t in clean.prefix_clock if t), "")
        notes.append(f"the engine's lines carry no time of their own: the log's clock is the "
                     f"date-time before each line (as {example!r}), the time a collector "
                     "wrote it")
    other, api_pid, other_note = _engine_mask(parsed)
    if other_note:
        notes.append(other_note)
    own = tuple("" if o else t for t, o in zip(clean.lines, other, strict=True))
    parsed = [BLANK_LINE if o else p for p, o in zip(parsed, other, strict=True)]
    ev = evidence_of(parsed)
    source = clean.source
    first = next((i for i, p in enumerate(parsed) if p.wallclock), None)
    if first is not None and first > 0:
        skipped = sum(1 for t in own[:first] if t.strip())
        if skipped:
            notes.append(f"{skipped} lines before the engine's first own line (line "
                         f"{source[first] + 1}) are a wrapper's or a shell's: not timed")
    served = api_pid is not None or bool(ev.named(SERVER_START)) or any(
        is_start(p.message) and p.process in (None, "api_server") and "LLM engine" not in
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
    durations = (dict(stages), dict(substeps), na)  # as the lines show them, before the fit
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
                   failure=failure, refused=refused, notes=tuple(notes), model=model,
                   durations=durations)

