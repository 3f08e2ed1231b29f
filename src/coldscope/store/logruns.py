"""What a start-up read from a log is, once stored: its id, and the timeline it is drawn with.

One module for every path that stores a log's start-up (``parse --save``, ``serve``'s watcher,
the front door's ``parse_logs``), so that the same start-up is one run however, and however
often, it was stored (``Store.save_startup`` stores one under ``startup_id``). Pure
functions of the lines and of a ``Timeline``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from coldscope.core.stages import BUCKETS, UNATTRIBUTED
from coldscope.core.timeline import Span, Timeline

#: How a log run's id begins: ``log-`` and ``ID_HEX`` hex digits of ``startup_id``'s hash.
ID_PREFIX = "log-"
#: Hex digits of the hash in a log run's id: 40 bits, short enough to type (a unique prefix of
#: it will do for ``show``), and a chance of one in a million of two start-ups of a store of
#: 1,500 sharing one.
ID_HEX = 10

#: The process under which a saved log's stage bars are laid end to end (``laid_end_to_end``):
#: the name says, in the trace and the report's Gantt, that they are not measured positions.
LAID_OUT = "log (stages laid end to end)"


def startup_id(lines: Sequence[str]) -> str:
    """The id of the start-up ``lines`` hold, from what it is rather than where it was read:
    ``log-`` and the first ``ID_HEX`` hex digits of the SHA-256 of its engine lines, from its
    first start line (``LogReader.startup_boundary``; the first line when it has none) to its
    ready or failure line (a start line of a kind already seen since the window began starts
    it again, as the watcher starts a new start-up there: a harness's summary of the log's
    first lines above the full log), each cleaned as the readers clean them
    (``logtext.normalise``: a collector's or a repeated per-line prefix, colours, redraws) and
    with its whitespace collapsed, blank lines left out.

    ``serve``'s watcher holds a start-up from its start line to its ready line; ``parse``
    cuts one from its launcher's first line to the next start-up (requests and shutdown
    included); a file name, a path or a container prefix differs with how it was collected.
    The window and the cleaning leave exactly what all of them share, so the same start-up
    stored by either, or twice, has one id; the lines' own stamps keep two start-ups apart."""
    from coldscope.capture.logtext import normalise
    from coldscope.engines import FAILED, READY, START_PREFIX, identify_log
    clean = [" ".join(line.split()) for line in normalise(list(lines), drop_repeats=False).lines]
    engine = identify_log(clean)
    start: int | None = None
    end = len(clean)
    seen: set[str] = set()  # the kinds of start line since ``start``
    for i, line in enumerate(clean if engine is not None else ()):
        kind = engine.startup_boundary(line) if line and engine is not None else None
        if kind is None:
            continue
        if kind.startswith(START_PREFIX):
            if start is None or kind in seen:  # a start line again: the watcher starts anew
                start, seen = i, set()
            seen.add(kind)
        elif kind == READY or (kind == FAILED and start is not None):
            end = i + 1
            break
    digest = hashlib.sha256("\n".join(t for t in clean[start or 0:end] if t).encode(
        "utf-8", "surrogatepass")).hexdigest()
    return f"{ID_PREFIX}{digest[:ID_HEX]}"


def laid_end_to_end(tl: Timeline) -> Timeline:
    """A timeline of stage durations alone (a saved log whose engine gives durations, not
    where each stage began: vLLM's) with its stages laid end to end from 0 in their usual
    order, as the report has always drawn such data: segments that tile [0, ready], and a
    stage bar per known stage with its sub-steps laid end to end inside it, all under the
    process ``LAID_OUT`` so that what draws them can say they are not measured positions.
    The durations themselves are unchanged. A timeline that has segments or spans (its
    engine placed its stages), or no time to ready, is returned as it is."""
    if tl.segments or tl.spans or tl.time_to_ready is None:
        return tl
    t = 0.0
    segments: list[tuple[str, float, float]] = []
    spans: list[Span] = []
    for bucket in BUCKETS:
        seconds = tl.stages.get(bucket)
        if not seconds or seconds <= 0:
            continue
        end = t + seconds
        segments.append((bucket, t, end))
        if bucket != UNATTRIBUTED:
            spans.append(Span(name=bucket, start=t, end=end, source="log", process=LAID_OUT))
            at = t
            for name, sub in tl.substeps.items():
                if name.split("/", 1)[0] == bucket and sub > 0 and at < end:
                    spans.append(Span(name=name, start=at, end=min(end, at + sub),
                                      source="log", process=LAID_OUT))
                    at = min(end, at + sub)
        t = end
    return replace(tl, segments=tuple(segments), spans=tuple(spans))

