"""Engine-neutral cleaning of saved log lines, before any engine's adapter reads them.

Logs reach coldscope wrapped by whatever carried them: terminal colours, ``docker logs
--timestamps`` / ``kubectl logs --timestamps`` / CRI-file / journald prefixes, a prefix the file
repeats on its lines that no list names (docker compose's ``vllm-1  | ``, a collector's
``2026-05-01 23:11:07.242 | ``, ``[pod/name/container] ``: found by its shape, from the file
itself, ``repeated_prefix``), the ``==> file <==``
separators of ``tail`` over several files, progress bars redrawn with carriage returns, and
harnesses that print a line twice. ``normalise(lines)`` removes all of that and nothing else, so
every engine adapter reads the engine's own text. Which of the remaining lines are the engine's
(its process prefixes, its banner), a summary block a harness printed before the full log, or
another service's ready line is engine-specific judgement: it stays in the adapter.

Pure and total: no input line can make it raise. Times here are not parsed: an outer prefix's
timestamp is removed and never taken for the engine's clock (each engine reads its own); its
text is kept beside the line (``CleanLines.prefix_clock``) for a reader whose engine printed no
time at all, which then says it used the collector's clock.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import overload

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
#: The shapes of a per-line prefix a file may repeat that no fixed pattern above knows, each
#: with the prefix as group ``p`` (and its date-time as ``ts``, when it has one): a service
#: name and ``|`` (docker compose's ``vllm-1  | ``, a supervisor's ``api | ``), a date-time
#: with or without zone and a ``|`` or blank after it (``2026-05-01 23:11:07.242 | ``; not
#: Python logging's own ``date - name - LEVEL``, not a bracketed stamp, which is an engine's
#: own), a pod and container name (``kubectl logs --prefix``: ``[pod/name/container] ``).
#: ``repeated_prefix`` takes one only when most of the file's lines carry it.
_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a service name and '|'", re.compile(r"^(?P<p>[A-Za-z0-9][\w.\-]*[ \t]*\|(?: |$))")),
    ("a date-time", re.compile(
        r"^(?P<p>(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?"
        r"(?:Z| ?[+-]\d{2}:?\d{2}| ?UTC)?)(?:[ \t]*\|(?: |$)|[ \t]+(?![-|])))")),
    ("a pod and container name", re.compile(r"^(?P<p>\[pod/[^\]\s]+\] ?)")),
)
#: Lines ``repeated_prefix`` looks at (the first non-blank ones), and the share of them that
#: must carry one shape for it to be the file's prefix.
PREFIX_SAMPLE = 400
PREFIX_SHARE = 0.6


@dataclass(frozen=True)
class LinePrefix:
    """A per-line prefix a file repeats (``repeated_prefix``): its shape in words, the pattern
    that finds it (group ``p``; ``ts`` its date-time, when it has one) and one the file holds."""

    shape: str
    pattern: re.Pattern[str]
    example: str

    @property
    def has_clock(self) -> bool:
        return "ts" in self.pattern.groupindex

    def split(self, text: str) -> tuple[str, str | None] | None:
        """``text`` without the prefix, and the prefix's date-time; None when it has none."""
        m = self.pattern.match(text)
        if m is None:
            return None
        return text[m.end():], m.groupdict().get("ts")


def repeated_prefix(lines: Iterable[object]) -> LinePrefix | None:
    """The per-line prefix the file itself repeats: of its first ``PREFIX_SAMPLE`` non-blank
    lines (once colours and a known collector's prefix are off), the ``_SHAPES`` shape that at
    least ``PREFIX_SHARE`` of them (and three at least) open with; None when none does. The
    file decides, not a list of names: any service, any container, any date-time format of
    those shapes."""
    sample: list[str] = []
    for raw in lines:
        text = as_text(raw)
        if not text.strip():
            continue
        text, _ = strip_outer_prefix(COLOUR.sub("", text).lstrip("\ufeff"))
        sample.append(text)
        if len(sample) >= PREFIX_SAMPLE:
            break
    if len(sample) < 3:
        return None
    for shape, pattern in _SHAPES:
        found = [m.group("p") for t in sample if (m := pattern.match(t))]
        if len(found) >= 3 and len(found) >= PREFIX_SHARE * len(sample):
            return LinePrefix(shape, pattern, found[0])
    return None


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
    prefix: LinePrefix | None = None
    """The prefix the file repeats (``repeated_prefix``) that was removed, if any."""
    repeated: int = 0
    """How many lines ``prefix`` was removed from."""
    prefix_clock: tuple[str | None, ...] = ()
    """When a prefix removed carried a date with its time (``repeated_prefix``'s, docker's,
    kubectl's): ``prefix_clock[i]`` is the one ``lines[i]`` had (None for a line without);
    empty when no line had one. Not the engine's clock: a reader may use it where the engine's
    own lines carry none, and says so."""

    def notes(self) -> list[str]:
        """One line per kind of change, for a reading's ``notes`` (empty when nothing changed
        beyond colours)."""
        out = []
        if self.prefixed:
            out.append(f"removed a collector's timestamp prefix (docker, kubectl, journald) "
                       f"from {self.prefixed} lines")
        if self.repeated and self.prefix is not None:
            out.append(f"removed a prefix the log repeats ({self.prefix.shape}, as "
                       f"{self.prefix.example.strip()!r}) from {self.repeated} lines")
        if self.dropped.get("separator"):
            out.append(f"skipped {self.dropped['separator']} '==> file <==' separators of "
                       "several tailed files")
        if self.dropped.get("repeat"):
            n = self.dropped["repeat"]
            out.append(f"counted {n} line{'s' if n > 1 else ''} seen twice (same time and "
                       "text) once")
        return out

    def kept_clock(self, keep: Sequence[int]) -> tuple[str | None, ...]:
        """``prefix_clock`` of the lines ``keep`` names (empty when there is none)."""
        return tuple(self.prefix_clock[i] for i in keep) if self.prefix_clock else ()

    def only(self, keep: Sequence[int]) -> CleanLines:
        """These lines less all but those ``keep`` names (indexes, in order)."""
        return CleanLines(tuple(self.lines[i] for i in keep), tuple(self.source[i] for i in keep),
                          self.dropped, self.prefixed, self.prefix, self.repeated,
                          self.kept_clock(keep))


#: The most one start-up's clock may move forward between two of its stamped lines, and the
#: most its time to ready may be, in seconds. No start-up takes longer (the slowest in our
#: real logs: 32 minutes between two lines, 39 minutes in all), so a stamp that moves further
#: (a line a year later, a year 9999) was not written by the clock the start-up ran on: the
#: engines' readers report such a start-up failed, naming the line, and never ``ok``.
MAX_CLOCK_STEP_S = 6 * 3600.0
MAX_STARTUP_S = 24 * 3600.0


def clock_step_error(step_s: float, line: int, stamp: str, before: str, before_line: int
                     ) -> str:
    """Why a start-up whose clock moves ``step_s`` seconds forward at 1-based ``line``
    (stamped ``stamp``; the stamped line before it: ``before`` at ``before_line``) is not
    read as ok."""
    return (f"the log's clock jumps {step_s:,.0f} s forward at line {line} ({stamp}, after "
            f"{before} at line {before_line}): more than a start-up takes "
            f"({MAX_CLOCK_STEP_S / 3600:g} h between two lines); its stamps cannot all be true")


def startup_length_error(ttr_s: float, line: int) -> str:
    """Why a start-up whose time to ready is ``ttr_s`` seconds at 1-based ``line`` (its ready
    line) is not read as ok."""
    what = "less than nothing" if ttr_s < 0 else \
        f"more than a start-up takes ({MAX_STARTUP_S / 3600:g} h)"
    return (f"time to ready would be {ttr_s:,.0f} s at line {line}: {what}; the log's stamps "
            "cannot all be true")


class NumberedLines(list[str]):
    """The lines of a log that a reader reads, with the file's own line numbers.

    A saved log is read with its long runs of blank lines left out (``ingest.logfiles``: a
    megabyte of newlines costs nothing to hold), so the list's indexes are no longer the
    file's lines: ``numbers[i]`` is the 0-based line of the file that ``self[i]`` is, and
    ``file_lines`` how many lines the file has in all. Readers that quote line numbers
    (``normalise``'s ``source``, SGLang's events) number the lines by ``numbers``
    (``line_numbers``), so every quote is the line the user sees; a plain list is numbered 0,
    1, 2, ... A slice (``part``) keeps the numbers; ``list``'s own slicing does not."""

    numbers: Sequence[int]
    file_lines: int  # not ``count``: list.count is a method

    def __init__(self, lines: Iterable[str] = (), numbers: Sequence[int] | None = None,
                 count: int | None = None) -> None:
        super().__init__(lines)
        # a range when the lines follow one another (no memory per line)
        self.numbers = range(len(self)) if numbers is None else numbers
        if len(self.numbers) != len(self):
            raise ValueError(f"{len(self)} lines but {len(self.numbers)} line numbers")
        self.file_lines = (self.numbers[-1] + 1 if self.numbers else 0) if count is None else count

    def part(self, start: int | None = None, stop: int | None = None) -> NumberedLines:
        """``self[start:stop]`` with its line numbers; ``file_lines`` ends after its last line
        (the whole of it: itself)."""
        lines, numbers = self[start:stop], self.numbers[start:stop]
        if len(lines) == len(self):
            return self
        return NumberedLines(lines, numbers, numbers[-1] + 1 if numbers else 0)

    def then(self, other: NumberedLines) -> NumberedLines:
        """These lines followed by ``other``'s (with their numbers and ``other``'s file_lines)."""
        if not self:
            return other
        return NumberedLines([*self, *other], [*self.numbers, *other.numbers], other.file_lines)

    def by_number(self) -> Sequence[str]:
        """The file's lines indexed by their own numbers (0-based): a line left out reads as
        an empty one. For code that quotes ``lines[n]`` with a line number a reader gave."""
        return _ByNumber(self)


class _ByNumber(Sequence[str]):
    """``NumberedLines.by_number``: ``file_lines`` lines, looked up by bisection, nothing copied."""

    def __init__(self, lines: NumberedLines) -> None:
        self._lines = lines

    def __len__(self) -> int:
        return self._lines.file_lines

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        numbers = self._lines.numbers
        at = bisect.bisect_left(numbers, index)
        return self._lines[at] if at < len(numbers) and numbers[at] == index else ""


def line_numbers(lines: Sequence[object]) -> Sequence[int]:
    """The file's own 0-based line number of each of ``lines`` (``NumberedLines.numbers``;
    0, 1, 2, ... for any other sequence)."""
    return lines.numbers if isinstance(lines, NumberedLines) else range(len(lines))


COLOUR = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""A terminal colour or cursor sequence (CSI) as engines print them in their logs."""


#: A character ``safeio.clean_text`` removes or that opens a sequence it removes (every such
#: sequence opens with a C0 or C1 control).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


#: The first characters of a line that may need more than its trailing whitespace removed:
#: a collector's prefix (a digit, a month's capital), a tail separator, a byte-order mark.
_CLEANING_STARTS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ=\ufeff")


def is_plain(text: str) -> bool:
    """Whether cleaning ``text`` can change nothing but its trailing whitespace: no control
    character (colours, carriage-return redraws), and a first character no collector's
    prefix, tail separator or byte-order mark begins with. One search: most lines are."""
    return not text or text[0] not in _CLEANING_STARTS and not _CONTROL.search(text)


def cleaned(text: str) -> str:
    """``safeio.clean_text(text)``, with one search for the common line that has nothing to
    clean."""
    return clean_text(text) if _CONTROL.search(text) else text


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
    rest, stamp = _outer_prefix(text)
    return rest, stamp is not None


def _outer_prefix(text: str) -> tuple[str, str | None]:
    """``strip_outer_prefix``, and the prefix itself ("" when its clock has no year: journald's
    short format) or None when there was none."""
    first = text[:1]
    if not ("0" <= first <= "9" or "A" <= first <= "Z"):  # every prefix opens so
        return text, None
    for pattern in _OUTER_PREFIXES:
        m = pattern.match(text)
        if m:
            stamp = _ISO_STAMP.match(text)
            return text[m.end():], stamp.group(0) if stamp else ""
    return text, None


_ISO_STAMP = re.compile(_ISO_T.replace("T", "[T ]", 1).replace("(?:Z|", "(?: ?Z|", 1))


def without_prefixes(text: str, prefix: LinePrefix | None) -> str:
    """``text`` less a collector's prefix (``strip_outer_prefix``) and the prefix its file
    repeats (``prefix``, from ``repeated_prefix``; colours around it ignored), as ``normalise``
    removes them: for a reader that looks at raw lines one at a time (cutting a log into its
    start-ups)."""
    text, _ = strip_outer_prefix(text)
    if prefix is None:
        return text
    cut = prefix.split(COLOUR.sub("", text) if "\x1b" in text else text)
    return text if cut is None else strip_outer_prefix(cut[0])[0]


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
    numbers = lines.numbers if isinstance(lines, NumberedLines) else None  # the file's own
    if not isinstance(lines, Sequence):
        lines = list(lines)
    prefix = repeated_prefix(lines)
    clock: dict[int, str] = {}  # the prefix's date-time of kept lines, by index
    kept: list[str] = []
    source: list[int] = []
    dropped: dict[str, int] = {}
    prefixed = repeated = 0
    partial = ""
    for i, raw in enumerate(lines):
        if numbers is not None:
            i = numbers[i]
        if prefix is None and raw.__class__ is str and not partial and is_plain(raw):
            kept.append(raw.rstrip())  # nothing to clean
            source.append(i)
            continue
        text = as_text(raw).lstrip("\ufeff")
        if m := _CRI_PARTIAL.match(text):  # joined with the pieces that follow
            partial += text[m.end():]
            prefixed += 1
            continue
        text, outer = _outer_prefix(text)
        stamp = outer or None
        if prefix is not None and (cut := prefix.split(
                COLOUR.sub("", text) if "\x1b" in text else text)) is not None:
            (text, own), repeated = cut, repeated + 1
            text, again = _outer_prefix(text)  # (docker compose -t: name, then stamp)
            stamp = stamp or own or again or None
            outer = outer if outer is not None else again
        text, partial = partial + text, ""
        prefixed += outer is not None
        pieces = redraws(text)
        for n, piece in enumerate(pieces):
            clean = cleaned(piece).rstrip()
            if n and not clean.strip():
                dropped["blank_redraw"] = dropped.get("blank_redraw", 0) + 1
                continue
            if _TAIL_SEPARATOR.match(clean):
                dropped["separator"] = dropped.get("separator", 0) + 1
                continue
            if stamp:
                clock[len(kept)] = stamp
            kept.append(clean)
            source.append(i)
    result = CleanLines(tuple(kept), tuple(source), dropped, prefixed, prefix, repeated,
                        tuple(map(clock.get, range(len(kept)))) if clock else ())
    return without_repeats(result) if drop_repeats else result


def without_repeats(clean: CleanLines, keep: Sequence[int] | None = None) -> CleanLines:
    """``clean`` without lines that carry a time of day and repeat an earlier kept line
    exactly (the first one stays). ``keep``: ``first_copies(clean.lines)``, when the caller
    has it already."""
    keep = first_copies(clean.lines) if keep is None else keep
    dropped = dict(clean.dropped)
    repeats = len(clean.lines) - len(keep)
    if repeats:
        dropped["repeat"] = dropped.get("repeat", 0) + repeats
    return CleanLines(tuple(clean.lines[i] for i in keep), tuple(clean.source[i] for i in keep),
                      dropped, clean.prefixed, clean.prefix, clean.repeated,
                      clean.kept_clock(keep))


def first_copies(lines: Sequence[str]) -> Sequence[int]:
    """The indexes ``without_repeats`` keeps: every line but those that carry a time of day
    and repeat an earlier kept line exactly (a ``range`` when that is every line)."""
    seen: set[str] = set()
    repeats: list[int] = []
    for i, text in enumerate(lines):
        if text in seen:
            repeats.append(i)
        elif text and _TIME_OF_DAY.search(text):
            seen.add(text)
    if not repeats:
        return range(len(lines))
    out: list[int] = []
    at = 0
    for i in repeats:
        out.extend(range(at, i))
        at = i + 1
    out.extend(range(at, len(lines)))
    return out


__all__ = ["MAX_CLOCK_STEP_S", "MAX_STARTUP_S", "CleanLines", "LinePrefix", "NumberedLines",
           "cleaned", "clock_step_error", "first_copies", "is_plain", "line_numbers",
           "normalise", "redraws", "repeated_prefix", "split_lines", "startup_length_error",
           "strip_outer_prefix", "without_prefixes", "without_repeats"]
