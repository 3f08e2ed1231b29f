"""Engine-neutral cleaning of saved log lines, before any engine's adapter reads them.

Logs reach coldscope wrapped by whatever carried them: terminal colours, ``docker logs
--timestamps`` / ``kubectl logs --timestamps`` / CRI-file / journald prefixes, the ``==> file <==``
separators of ``tail`` over several files, progress bars redrawn with carriage returns, and
harnesses that print a line twice. ``normalise(lines)`` removes all of that and nothing else, so
every engine adapter reads the engine's own text. Which of the remaining lines are the engine's
(its process prefixes, its banner), a summary block a harness printed before the full log, or
another service's ready line is engine-specific judgement: it stays in the adapter.

Pure and total: no input line can make it raise. Times here are not parsed: an outer prefix's
timestamp is removed, never used as the log's clock (each engine reads its own).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from coldscope.util.safeio import clean_text

#: ``docker logs --timestamps`` / ``kubectl logs --timestamps`` (RFC 3339, nanoseconds), also
#: the CRI log-file format (``... stdout F text``) and ``journalctl -o short-iso`` /
#: ``short-iso-precise`` (``2024-01-01T12:00:00+0000 host unit[pid]: text``).
_ISO_T = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
_OUTER_PREFIXES = (
    # journald short-iso: stamp, host, unit[pid]:
    re.compile(rf"^{_ISO_T} \S+ [\w.@\-/]+(?:\[\d+\])?: ?"),
    # CRI log file: stamp, stream, partial/full tag
    re.compile(rf"^{_ISO_T} (?:stdout|stderr) [FP] ?"),
    # docker / kubectl --timestamps
    re.compile(rf"^{_ISO_T}[ \t]"),
    # journald short (the default): "Jan 01 12:00:00 host unit[pid]: "
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \S+ [\w.@\-/]+(?:\[\d+\])?: ?"),
    # a space-separated ISO stamp with a zone or fraction put before every line by a collector
    # (not Python logging's own "2024-01-01 12:00:00,123 - name - LEVEL" text, which is kept)
    re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2}) (?!- )"),
)
#: A CRI log file writes a long line as partial pieces (``P``) ended by a full one (``F``).
_CRI_PARTIAL = re.compile(rf"^{_ISO_T} (?:stdout|stderr) P ?")
#: ``tail -f a.log b.log`` separates the files it follows with ``==> a.log <==``.
_TAIL_SEPARATOR = re.compile(r"^==> .* <==$")
#: A time of day anywhere in a line: only such lines are dropped as repeats (a line without a
#: time, such as a progress bar at 100 %, can legitimately be printed twice).
_TIME_OF_DAY = re.compile(r"\d{2}:\d{2}:\d{2}")


@dataclass(frozen=True)
class CleanLines:
    """The result of ``normalise``.

    ``lines`` are the kept lines, cleaned; ``source[i]`` is the 0-based index, in the lines
    given, of the physical line ``lines[i]`` came from (for a CRI line written in partial
    pieces, its last piece) (a redrawn progress bar gives several
    kept lines from one physical line), so that evidence can quote the user's own line numbers.
    ``dropped`` counts what was removed, by reason: ``separator`` (``==> file <==``),
    ``repeat`` (a line seen before with the same time and text), ``blank_redraw`` (an empty
    piece of a carriage-return redraw). ``prefixed`` counts lines an outer timestamp prefix was
    removed from.
    """

    lines: tuple[str, ...]
    source: tuple[int, ...]
    dropped: dict[str, int] = field(default_factory=dict)
    prefixed: int = 0

    def notes(self) -> list[str]:
        """One line per kind of change, for a reading's ``notes`` (empty when nothing changed
        beyond colours)."""
        out = []
        if self.prefixed:
            out.append(f"removed a collector's timestamp prefix (docker, kubectl, journald) "
                       f"from {self.prefixed} lines")
        if self.dropped.get("separator"):
            out.append(f"skipped {self.dropped['separator']} '==> file <==' separators of "
                       "several tailed files")
        if self.dropped.get("repeat"):
            n = self.dropped["repeat"]
            out.append(f"counted {n} line{'s' if n > 1 else ''} seen twice (same time and "
                       "text) once")
        return out


COLOUR = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""A terminal colour or cursor sequence (CSI) as engines print them in their logs."""


def without_colours(text: str) -> str:
    """``text`` without its terminal colour sequences (``COLOUR``); for every other control
    sequence, ``safeio.clean_text``."""
    return COLOUR.sub("", text)


def as_text(line: object) -> str:
    """A line as text: bytes decoded as UTF-8 with replacement, anything else empty."""
    if isinstance(line, str):
        return line
    if isinstance(line, bytes | bytearray):
        return bytes(line).decode("utf-8", errors="replace")
    return ""


def split_lines(text: str) -> list[str]:
    """The physical lines of a whole text: split at newlines only (``str.splitlines`` would
    also split at the carriage returns of a progress bar's redraws and shift line numbers)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def strip_outer_prefix(text: str) -> tuple[str, bool]:
    """``text`` without a collector's timestamp prefix (docker/kubectl ``--timestamps``, CRI
    files, journald), and whether one was there. The engine's own stamp, after it, is kept."""
    for pattern in _OUTER_PREFIXES:
        m = pattern.match(text)
        if m:
            return text[m.end():], True
    return text, False


def redraws(text: str) -> list[str]:
    """The pieces of one physical line that carriage returns separate (tqdm redraws its bar on
    one line; a terminal shows only the last piece, a saved log keeps them all). A trailing
    ``\\r`` (CRLF endings) is not a redraw."""
    text = text.rstrip("\r\n")
    return text.split("\r") if "\r" in text else [text]


def normalise(lines: Iterable[object], *, drop_repeats: bool = True) -> CleanLines:
    """The lines of a saved log as the engine wrote them.

    For each physical line (a whole text is split into lines first; bytes are decoded as
    UTF-8 with replacement): carriage-return redraws are split into separate lines, then each
    piece loses a collector's timestamp prefix (``strip_outer_prefix``), ANSI colours and other
    terminal control sequences (``safeio.clean_text``) and trailing whitespace; ``==> file
    <==`` separators are dropped. With ``drop_repeats`` (the default), a line that carries a
    time of day and is identical to an earlier kept line is dropped, so a line a harness
    printed twice counts once. An adapter that must see repeats first (a summary block a
    harness printed before the full log) passes ``drop_repeats=False`` and calls
    ``without_repeats`` after its own judgement.
    """
    if isinstance(lines, str | bytes | bytearray):
        lines = split_lines(as_text(lines))
    kept: list[str] = []
    source: list[int] = []
    dropped: dict[str, int] = {}
    prefixed = 0
    partial = ""
    for i, raw in enumerate(lines):
        text = as_text(raw).lstrip("\ufeff")
        if m := _CRI_PARTIAL.match(text):  # joined with the pieces that follow
            partial += text[m.end():]
            prefixed += 1
            continue
        text, had_prefix = strip_outer_prefix(text)
        text, partial = partial + text, ""
        prefixed += had_prefix
        pieces = redraws(text)
        for n, piece in enumerate(pieces):
            clean = clean_text(piece).rstrip()
            if n and not clean.strip():
                dropped["blank_redraw"] = dropped.get("blank_redraw", 0) + 1
                continue
            if _TAIL_SEPARATOR.match(clean):
                dropped["separator"] = dropped.get("separator", 0) + 1
                continue
            kept.append(clean)
            source.append(i)
    result = CleanLines(tuple(kept), tuple(source), dropped, prefixed)
    return without_repeats(result) if drop_repeats else result


def without_repeats(clean: CleanLines) -> CleanLines:
    """``clean`` without lines that carry a time of day and repeat an earlier kept line
    exactly (the first one stays)."""
    seen: set[str] = set()
    lines: list[str] = []
    source: list[int] = []
    repeats = 0
    for text, src in zip(clean.lines, clean.source, strict=True):
        if text in seen:
            repeats += 1
            continue
        if _TIME_OF_DAY.search(text):
            seen.add(text)
        lines.append(text)
        source.append(src)
    dropped = dict(clean.dropped)
    if repeats:
        dropped["repeat"] = dropped.get("repeat", 0) + repeats
    return CleanLines(tuple(lines), tuple(source), dropped, clean.prefixed)


__all__ = ["CleanLines", "normalise", "redraws", "split_lines", "strip_outer_prefix",
           "without_repeats"]
