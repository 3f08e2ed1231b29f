"""Request traces: read (Azure LLM inference format or the generic one), check, write, synthesise.

The one trace reader of coldscope: ``simulate`` replays what it returns and ``plan --trace``
measures its rate and burstiness (:func:`shape`).

Two formats are read, as CSV (with a header row) or Parquet:

* **Azure** (the Azure LLM inference traces 2023/2024): ``TIMESTAMP`` ("YYYY-MM-DD
  HH:MM:SS.fffffff", naive), ``ContextTokens``, ``GeneratedTokens``. Arrival times become
  seconds since the first timestamp, which is kept as the trace's ``origin``.
* **Generic**: ``arrival_s`` (seconds since the trace's origin, >= 0, float), ``context_tokens``,
  ``generated_tokens`` (integers >= 0). Extra columns are ignored. ``synth`` writes this.

A bad trace is never changed silently. Without ``repair`` it is an error naming the first bad
data row (1-based, header not counted) and how many rows are bad. With ``repair`` the bad rows
are dropped (malformed, negative or implausibly large token counts) or the rows are sorted by
arrival, and each repair is counted in ``Trace.repairs`` so that the simulation output reports
it. An empty trace is always an error, and so is a file that is not text.

Big traces: a week at 45 requests/s is 27 million rows. Columns are read by pyarrow straight
into the arrays the simulator uses (arrival float64, token counts int32: 16 bytes a request),
one column at a time, and checked in chunks, so that no full-length temporary is made; a file
pyarrow cannot convert takes the row-by-row reader, which also finds the row numbers for the
messages.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    import pyarrow as pa

#: What a reader gives: arrival times (s, or datetime64 before ``_timestamps``), context
#: tokens, generated tokens, and the ISO time of the first request when the file has one.
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, str | None]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
GENERIC_COLUMNS = ("arrival_s", "context_tokens", "generated_tokens")

#: Token counts above this in one request are not plausible (no model reads 10 M tokens):
#: such a row is malformed, and it keeps the counts inside int32.
MAX_TOKENS = 10_000_000
#: Requests ``synthesize`` makes at most: 200 M requests take about 3.2 GB as columns.
MAX_SYNTH_REQUESTS = 200_000_000
#: The longest synthetic trace, in days.
MAX_SYNTH_DAYS = 366.0
#: Rows checked at a time: temporaries stay at a few MB whatever the trace's length.
_CHUNK = 1 << 20


@dataclass
class Trace:
    """Requests as columns, sorted by arrival.

    ``arrival``: seconds since ``origin`` (float64). ``context_tokens``, ``generated_tokens``:
    int32, 0 <= count <= ``MAX_TOKENS``. ``origin``: ISO-8601 wall time of arrival 0 when the
    trace had timestamps. ``repairs``: what reading changed, as counts (empty when nothing was).
    """

    arrival: np.ndarray
    context_tokens: np.ndarray
    generated_tokens: np.ndarray
    source: str = ""
    origin: str | None = None
    repairs: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def duration(self) -> float:
        """Seconds from the origin to the last arrival."""
        return float(self.arrival[-1]) if self.arrival.size else 0.0

    def head(self, n: int) -> Trace:
        """The first ``n`` requests (for a quick look or a slower reference model)."""
        return Trace(self.arrival[:n], self.context_tokens[:n], self.generated_tokens[:n],
                     source=f"{self.source}[:{n}]", origin=self.origin, repairs=self.repairs)

    def describe(self) -> dict[str, object]:
        return {"source": self.source, "requests": len(self), "duration_s": self.duration,
                "origin": self.origin, "repairs": dict(self.repairs)}


def shape(arrival: np.ndarray) -> dict[str, float]:
    """Mean rate (req/s) and burstiness of request times (s, sorted or not).

    Burstiness is the squared coefficient of variation of the gaps between requests (1 for
    Poisson), floored at 1 for the planner; ``scv_measured`` is the unfloored value.
    """
    ts = np.sort(np.asarray(arrival, dtype=np.float64))
    if ts.size < 3:
        raise ColdscopeError("a trace needs at least 3 requests to measure its burstiness")
    gaps = np.diff(ts)
    mean = float(gaps.mean())
    if mean <= 0:
        raise ColdscopeError("all requests of the trace have the same time")
    scv = float(gaps.var()) / mean**2
    return {"requests": float(ts.size), "span_s": float(ts[-1] - ts[0]), "mean_rps": 1.0 / mean,
            "burstiness": max(1.0, scv), "scv_measured": scv}


def _kind(columns: list[str], path: Path) -> str:
    if all(c in columns for c in AZURE_COLUMNS):
        return "azure"
    if all(c in columns for c in GENERIC_COLUMNS):
        return "generic"
    shown = ", ".join(repr(c[:40]) for c in columns[:6])
    raise ColdscopeError(
        f"{path}: unknown trace columns [{shown}]; expected {', '.join(AZURE_COLUMNS)} "
        f"(Azure) or {', '.join(GENERIC_COLUMNS)} (generic)")


def read_trace(path: str | Path, repair: bool = False) -> Trace:
    """Read a trace file (CSV or Parquet, Azure or generic columns); see the module doc."""
    path = Path(path)
    if not path.is_file():
        raise ColdscopeError(f"trace file not found: {path}")
    parquet = path.suffix.lower() in (".parquet", ".pq")
    columns = None
    if parquet:
        columns = _read_parquet(path)
    else:
        header = _header(path)
        try:
            columns = _read_csv_arrow(path, header)
        except ImportError:
            columns = None
        if columns is None:
            columns = _read_csv_rows(path)
    return _check(*columns, path=path, repair=repair)


def _header(path: Path) -> list[str]:
    """The CSV header row; a file that is not UTF-8 text is a one-line error."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), None)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ColdscopeError(f"{path}: not a CSV trace (not UTF-8 text: {exc})") from None
    if header is None:
        raise ColdscopeError(f"{path}: empty trace file (no header, no requests)")
    return header


def _read_parquet(path: Path) -> _Columns:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ColdscopeError("reading Parquet needs pyarrow: pip install pyarrow") from exc
    try:
        names = pq.read_schema(path).names
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ColdscopeError(f"{path}: not a readable Parquet file ({exc})") from None
    kind = _kind(names, path)
    names = AZURE_COLUMNS if kind == "azure" else GENERIC_COLUMNS
    try:
        table = pq.read_table(path, columns=list(names))
    except Exception as exc:
        raise ColdscopeError(f"{path}: not a readable Parquet file ({exc})") from None
    cols = []
    for name in names:
        col = table.column(name)
        if name == "TIMESTAMP":
            if pa.types.is_timestamp(col.type):
                values = col.cast(pa.timestamp("ns")).to_numpy(zero_copy_only=False)
            else:
                values = _parse_timestamps(col.cast(pa.string()).to_pylist())
        elif pa.types.is_integer(col.type) and col.null_count == 0:
            values = col.to_numpy()  # checked and narrowed to int32 by _check
        else:
            try:
                values = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ColdscopeError(f"{path}: column {name} is not numeric ({exc})") from None
        cols.append(values)
        table = table.drop_columns([name])  # free each column once converted
    origin = None
    if kind == "azure":
        cols[0], origin = _timestamps(cols[0])
    return cols[0], cols[1], cols[2], origin


def _parse_timestamps(texts: list[str]) -> np.ndarray:
    """ISO-8601 strings (a space or a T between date and time) -> datetime64[ns]; NaT if bad."""
    try:
        return np.array(texts, dtype="datetime64[ns]")
    except (ValueError, TypeError, OverflowError):
        pass
    out = np.empty(len(texts), dtype="datetime64[ns]")
    for k, s in enumerate(texts):
        try:
            out[k] = np.datetime64(s.strip(), "ns") if s else np.datetime64("NaT")
        except (ValueError, TypeError, AttributeError, OverflowError):
            out[k] = np.datetime64("NaT")
    return out


def _timestamps(ts: np.ndarray) -> tuple[np.ndarray, str | None]:
    """datetime64 values -> (float seconds, not yet shifted; NaN for NaT), ISO of the first."""
    ts = ts.astype("datetime64[ns]", copy=False)
    bad = np.isnat(ts)
    out = ts.view(np.int64).astype(np.float64)
    out /= 1e9
    out[bad] = np.nan
    origin = str(ts[~bad].min()).replace("T", " ") if (~bad).any() else None
    return out, origin


def _read_csv_arrow(path: Path, header: list[str]) -> _Columns | None:
    """Fast columnar read; None when the file needs the row-by-row reader's diagnostics."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    kind = _kind([h.strip() for h in header], path)
    if any(h != h.strip() for h in header):
        return None
    tokens = pa.int32()
    if kind == "azure":
        types = {"TIMESTAMP": pa.timestamp("ns"), "ContextTokens": tokens,
                 "GeneratedTokens": tokens}
        names = AZURE_COLUMNS
    else:
        types = {"arrival_s": pa.float64(), "context_tokens": tokens,
                 "generated_tokens": tokens}
        names = GENERIC_COLUMNS
    try:
        # The system allocator hands freed columns back to the OS at once.
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types=types, include_columns=list(names), strings_can_be_null=False),
            memory_pool=pa.system_memory_pool())
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if any(table.column(n).null_count for n in names):
        return None
    cols = []
    for name in names:
        cols.append(table.column(name).to_numpy())
        table = table.drop_columns([name])
    del table
    _give_back_freed_memory()
    origin = None
    if kind == "azure":
        cols[0], origin = _timestamps(cols[0])
    return cols[0], cols[1], cols[2], origin


def _give_back_freed_memory() -> None:
    """Return the freed Arrow blocks to the OS (glibc keeps them in its arenas otherwise).

    pyarrow parses a CSV in ~1 MB blocks on several threads; once the columns are copied out,
    ~500 MB of a 27-million-row week sit freed but still resident until ``malloc_trim``.
    A no-op where the C library has no such call.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _read_csv_rows(path: Path) -> _Columns:
    """Row-by-row read: malformed rows become NaN so that ``_check`` can report or drop them."""
    t: list[float] = []
    ctx: list[float] = []
    gen: list[float] = []
    nan = math.nan
    times: list[str] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ColdscopeError(f"{path}: empty trace file (no header, no requests)")
            header = [h.strip() for h in header]
            kind = _kind(header, path)
            names = AZURE_COLUMNS if kind == "azure" else GENERIC_COLUMNS
            idx = [header.index(n) for n in names]
            width = len(header)
            for row in reader:
                if not row:
                    continue
                if len(row) != width:
                    times.append("")
                    t.append(nan)
                    ctx.append(nan)
                    gen.append(nan)
                    continue
                a, c, g = (row[k].strip() for k in idx)
                ctx.append(float(c) if _NUMBER.match(c) else nan)
                gen.append(float(g) if _NUMBER.match(g) else nan)
                if kind == "azure":
                    times.append(a)
                else:
                    t.append(float(a) if _NUMBER.match(a) else nan)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ColdscopeError(f"{path}: not a CSV trace (row {len(ctx) + 1}: {exc})") from None
    origin = None
    if kind == "azure":
        arr, origin = _timestamps(_parse_timestamps(times))
    else:
        arr = np.asarray(t, dtype=np.float64)
    return arr, np.asarray(ctx, dtype=np.float64), np.asarray(gen, dtype=np.float64), origin


def _bad_rows(arrival: np.ndarray, ctx: np.ndarray, gen: np.ndarray, lo: int,
              hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks of rows lo..hi: malformed, negative tokens, too many tokens (exclusive kinds)."""
    a, c, g = arrival[lo:hi], ctx[lo:hi], gen[lo:hi]
    with np.errstate(invalid="ignore"):
        malformed = ~np.isfinite(a) | (a < 0)
        for col in (c, g):
            if col.dtype.kind == "f":
                malformed |= ~np.isfinite(col) | (np.mod(col, 1) != 0)
        negative = ~malformed & ((c < 0) | (g < 0))
        huge = ~malformed & ~negative & ((c > MAX_TOKENS) | (g > MAX_TOKENS))
    return malformed, negative, huge


_KINDS = (("malformed_rows_dropped", "malformed (missing fields, not a number, bad timestamp)"),
          ("negative_token_rows_dropped", "with negative token counts"),
          ("oversized_token_rows_dropped", f"with more than {MAX_TOKENS:,} tokens"))


def _check(arrival: np.ndarray, ctx: np.ndarray, gen: np.ndarray, origin: str | None, *,
           path: Path, repair: bool) -> Trace:
    n = arrival.size
    if n == 0:
        raise ColdscopeError(f"{path}: empty trace (a header but no requests)")
    counts = [0, 0, 0]
    firsts: list[int | None] = [None, None, None]
    for lo in range(0, n, _CHUNK):
        for k, mask in enumerate(_bad_rows(arrival, ctx, gen, lo, min(n, lo + _CHUNK))):
            bad = int(np.count_nonzero(mask))
            if bad:
                counts[k] += bad
                if firsts[k] is None:
                    firsts[k] = lo + int(np.flatnonzero(mask)[0]) + 1
    repairs: dict[str, int] = {}
    for (key, what), bad, first in zip(_KINDS, counts, firsts, strict=True):
        if bad:
            if not repair:
                raise ColdscopeError(f"{path}: {bad} row(s) {what}, first at data row "
                                     f"{first}; pass --repair to drop them and report the count")
            repairs[key] = bad
    if repairs:
        keep = np.ones(n, dtype=np.bool_)
        for lo in range(0, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            for mask in _bad_rows(arrival, ctx, gen, lo, hi):
                keep[lo:hi] &= ~mask
        arrival, ctx, gen = arrival[keep], ctx[keep], gen[keep]
        if arrival.size == 0:
            raise ColdscopeError(f"{path}: no usable requests ({n} rows, all dropped)")
    back, first_back = _unsorted(arrival)
    if back:
        if not repair:
            raise ColdscopeError(
                f"{path}: arrivals not sorted: {back} row(s) earlier than the row "
                f"before, first at data row {first_back}; pass --repair to sort and "
                f"report the count")
        order = np.argsort(arrival, kind="stable")
        repairs["rows_reordered"] = int((order != np.arange(order.size)).sum())
        arrival, ctx, gen = arrival[order], ctx[order], gen[order]
    if origin is not None:  # Azure: seconds since the first request
        arrival -= arrival[0]
    return Trace(np.ascontiguousarray(arrival), _int32(ctx), _int32(gen),
                 source=str(path), origin=origin, repairs=repairs)


def _unsorted(arrival: np.ndarray) -> tuple[int, int]:
    """Rows earlier than the row before, and the first such data row (1-based), in chunks."""
    count, first = 0, 0
    n = arrival.size
    for lo in range(0, n - 1, _CHUNK):
        hi = min(n, lo + _CHUNK + 1)  # one row of overlap with the next chunk
        back = np.diff(arrival[lo:hi]) < 0
        k = int(np.count_nonzero(back))
        if k:
            if not count:
                first = lo + int(np.flatnonzero(back)[0]) + 2
            count += k
    return count, first


def _int32(col: np.ndarray) -> np.ndarray:
    return col if col.dtype == np.int32 else col.astype(np.int32)


def write_trace(trace: Trace, path: str | Path,
                progress: Callable[[int, int], None] | None = None) -> None:
    """Write the generic format: Parquet for ``.parquet``/``.pq``, else CSV.

    ``progress(rows_written, rows)`` is called after each block of rows (for a progress bar).
    Written beside ``path`` and renamed over it (a regular file only): a failed write leaves
    the old file as it was.
    """
    from coldscope.util.safeio import atomic_path
    path = Path(path)
    try:
        import pyarrow as pa
    except ImportError:
        pa = None
    parquet = path.suffix.lower() in (".parquet", ".pq")
    if parquet and pa is None:
        raise ColdscopeError("writing Parquet needs pyarrow: pip install pyarrow")
    try:
        with atomic_path(path) as tmp:
            if parquet:
                import pyarrow.parquet as pq

                table = _table(trace)
                with pq.ParquetWriter(str(tmp), table.schema) as writer:
                    _write_blocks(table, writer.write_table, progress)
            elif pa is not None:
                import pyarrow.csv as pacsv

                table = _table(trace)
                options = pacsv.WriteOptions(quoting_style="needed")
                with pacsv.CSVWriter(str(tmp), table.schema, write_options=options) as w:
                    _write_blocks(table, w.write_table, progress)
            else:
                with open(tmp, "w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(GENERIC_COLUMNS)
                    w.writerows(zip((repr(float(x)) for x in trace.arrival),
                                    trace.context_tokens.tolist(),
                                    trace.generated_tokens.tolist(), strict=True))
    except OSError as exc:
        raise ColdscopeError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_blocks(table: pa.Table, write: Callable[[pa.Table], None],
                  progress: Callable[[int, int], None] | None, block: int = 1 << 20) -> None:
    n = table.num_rows
    for lo in range(0, max(n, 1), block):
        write(table.slice(lo, block))
        if progress is not None:
            progress(min(n, lo + block), n)


def _table(trace: Trace) -> pa.Table:
    import pyarrow as pa

    return pa.table({"arrival_s": trace.arrival, "context_tokens": trace.context_tokens,
                     "generated_tokens": trace.generated_tokens})


def parse_rate(text: str) -> float:
    """A rate such as ``45/s``, ``2700/min``, ``1e6/day`` or ``45`` -> requests per second."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(?:/\s*(s|sec|second|min|minute|h|hour|d|day))?\s*",
                     text)
    per = {None: 1, "s": 1, "sec": 1, "second": 1, "min": 60, "minute": 60, "h": 3600,
           "hour": 3600, "d": 86400, "day": 86400}
    try:
        value = float(m.group(1)) / per[m.group(2)] if m else math.nan
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ColdscopeError(f"bad rate {text!r}: expected e.g. 45/s, 2700/min or 1e6/day")
    return value


#: Log-normal fits (mean and sd of ln tokens) of the Azure 2023 conversation trace
#: (AzureLLMInferenceTrace_conv.csv, 19,366 requests; median context 1,020, generated 129).
AZURE_CONV_CONTEXT_LOG = (6.633, 0.985)
AZURE_CONV_GENERATED_LOG = (5.019, 0.859)


def rate_curve(days: float, rate: float, *, diurnal: bool = False, bursts: bool = False,
               idle_nights: bool = False, bin_s: float = 60.0,
               rng: np.random.Generator) -> np.ndarray:
    """Arrival rate (requests/s) per ``bin_s`` bin, with mean ``rate`` over the whole span.

    ``diurnal``: a daily sine, peak at 14:00 and trough at 02:00, peak = 3 x trough.
    ``idle_nights``: no requests from 01:00 to 06:00. ``bursts``: about 8 bursts a day, each
    1-10 min long (exponential, mean 3 min), multiplying the rate by 2-5. Times of day count
    from the origin as midnight.
    """
    n = max(1, math.ceil(days * 86400 / bin_s))
    t = (np.arange(n) + 0.5) * bin_s
    hour = (t % 86400) / 3600
    shape = np.ones(n)
    if diurnal:
        shape = 1 + 0.5 * np.sin(2 * np.pi * (hour - 8) / 24)
    if idle_nights:
        shape = np.where((hour >= 1) & (hour < 6), 0.0, shape)
    if bursts:
        count = rng.poisson(8 * days)
        starts = rng.random(count) * n * bin_s
        lengths = np.clip(rng.exponential(180.0, count), 60.0, 600.0)
        factors = rng.uniform(2.0, 5.0, count)
        boost = np.ones(n)
        for s, ln, f in zip(starts, lengths, factors, strict=True):
            lo, hi = int(s // bin_s), int(math.ceil((s + ln) / bin_s))
            boost[lo:hi] = np.maximum(boost[lo:hi], f)
        shape = shape * np.where(shape > 0, boost, 1.0)
    if shape.sum() == 0:
        raise ColdscopeError("the traffic shape has no time with requests")
    curve: np.ndarray = rate * shape * (n / shape.sum())
    return curve


def check_synth_size(days: float, rate: float) -> None:
    """Refuse, before any work, a synthetic trace too long or too big to hold in memory."""
    if not (days > 0 and math.isfinite(days)):
        raise ColdscopeError(f"--days must be a number above 0, got {days:g}")
    if days > MAX_SYNTH_DAYS:
        raise ColdscopeError(f"--days {days:g} is above the limit of {MAX_SYNTH_DAYS:g} days")
    expected = days * 86400 * rate
    if not expected <= MAX_SYNTH_REQUESTS:
        raise ColdscopeError(
            f"--rate {rate:g}/s over {days:g} days is {expected:.3g} requests, above the limit "
            f"of {MAX_SYNTH_REQUESTS:.0e} (16 bytes each in memory); lower --rate or --days")


def _tokens(draws: np.ndarray) -> np.ndarray:
    """Log-normal draws -> int32 token counts in 1..MAX_TOKENS (in place: no second copy)."""
    np.rint(draws, out=draws)
    np.clip(draws, 1, MAX_TOKENS, out=draws)
    return draws.astype(np.int32)


def synthesize(days: float = 7.0, rate: float = 45.0, *, diurnal: bool = False,
               bursts: bool = False, idle_nights: bool = False, seed: int = 0,
               context_log: tuple[float, float] = AZURE_CONV_CONTEXT_LOG,
               generated_log: tuple[float, float] = AZURE_CONV_GENERATED_LOG) -> Trace:
    """A synthetic trace: Poisson arrivals with the rate of :func:`rate_curve` (mean ``rate``
    requests/s over ``days`` days) and log-normal token counts fitted to the Azure conversation
    trace. The same arguments and ``seed`` give the same trace."""
    check_synth_size(days, rate)
    rng = np.random.default_rng(seed)
    bin_s = 60.0
    curve = rate_curve(days, rate, diurnal=diurnal, bursts=bursts, idle_nights=idle_nights,
                       bin_s=bin_s, rng=rng)
    counts = rng.poisson(curve * bin_s)
    n = int(counts.sum())
    if n == 0:
        raise ColdscopeError("the synthetic trace has no requests; raise --rate or --days")
    arrival = np.repeat(np.arange(counts.size) * bin_s, counts)
    arrival += rng.random(n) * bin_s
    # Bins are in order, so the array is nearly sorted: a stable sort (timsort) is quick.
    arrival.sort(kind="stable")
    ctx = _tokens(rng.lognormal(*context_log, n))
    gen = _tokens(rng.lognormal(*generated_log, n))
    flags = [k for k, v in (("diurnal", diurnal), ("bursts", bursts),
                            ("idle-nights", idle_nights)) if v]
    source = f"synthetic {days:g} d at {rate:g}/s{' ' + ','.join(flags) if flags else ''}, " \
             f"seed {seed}"
    return Trace(arrival, ctx, gen, source=source)
