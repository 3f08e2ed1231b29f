"""Request traces: read (Azure LLM inference format or the generic one), check, write, synthesise.

Two formats are read, as CSV (with a header row) or Parquet:

* **Azure** (the Azure LLM inference traces 2023/2024): ``TIMESTAMP`` ("YYYY-MM-DD
  HH:MM:SS.fffffff", naive), ``ContextTokens``, ``GeneratedTokens``. Arrival times become
  seconds since the first timestamp, which is kept as the trace's ``origin``.
* **Generic**: ``arrival_s`` (seconds since the trace's origin, >= 0, float), ``context_tokens``,
  ``generated_tokens`` (integers >= 0). Extra columns are ignored. ``synth`` writes this.

A bad trace is never changed silently. Without ``repair`` it is an error naming the first bad
data row (1-based, header not counted) and how many rows are bad. With ``repair`` the bad rows
are dropped (malformed, negative tokens) or the rows are sorted by arrival, and each repair is
counted in ``Trace.repairs`` so that the simulation output reports it. An empty trace is always
an error.

Large files load columnar: pyarrow reads CSV and Parquet in a few seconds per ten million rows.
A file that pyarrow cannot convert, or a machine without pyarrow, takes the row-by-row reader,
which also finds the row numbers for the messages.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from coldscope.errors import ColdscopeError

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
GENERIC_COLUMNS = ("arrival_s", "context_tokens", "generated_tokens")


@dataclass
class Trace:
    """Requests as columns, sorted by arrival.

    ``arrival``: seconds since ``origin`` (float64). ``context_tokens``, ``generated_tokens``:
    int64 >= 0. ``origin``: ISO-8601 wall time of arrival 0 when the trace had timestamps.
    ``repairs``: what reading changed, as counts (empty when nothing was changed).
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

    def describe(self) -> dict:
        return {"source": self.source, "requests": len(self), "duration_s": self.duration,
                "origin": self.origin, "repairs": dict(self.repairs)}


def _kind(columns: list[str], path: Path) -> str:
    if all(c in columns for c in AZURE_COLUMNS):
        return "azure"
    if all(c in columns for c in GENERIC_COLUMNS):
        return "generic"
    raise ColdscopeError(
        f"{path}: unknown trace columns {columns[:6]}; expected {', '.join(AZURE_COLUMNS)} "
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
        try:
            columns = _read_csv_arrow(path)
        except ImportError:
            columns = None
        if columns is None:
            columns = _read_csv_rows(path)
    return _check(*columns, path=path, repair=repair)


def _read_parquet(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ColdscopeError("reading Parquet needs pyarrow: pip install 'coldscope[parquet]'"
                             ) from exc
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ColdscopeError(f"{path}: not a readable Parquet file ({exc})") from exc
    kind = _kind(table.column_names, path)
    names = AZURE_COLUMNS if kind == "azure" else GENERIC_COLUMNS
    cols = []
    for name in names:
        col = table.column(name)
        if name == "TIMESTAMP":
            import pyarrow as pa

            if pa.types.is_timestamp(col.type):
                values = col.cast(pa.timestamp("ns")).to_numpy(zero_copy_only=False)
            else:
                values = _parse_timestamps(col.cast(pa.string()).to_pylist())
            cols.append(values)
        else:
            cols.append(col.cast("float64").to_numpy(zero_copy_only=False))
    origin = None
    if kind == "azure":
        cols[0], origin = _timestamps(cols[0])
    return cols[0], cols[1], cols[2], origin


def _parse_timestamps(texts: list) -> np.ndarray:
    """ISO-8601 strings (a space or a T between date and time) -> datetime64[ns]; NaT if bad."""
    try:
        return np.array(texts, dtype="datetime64[ns]")
    except (ValueError, TypeError):
        pass
    out = np.empty(len(texts), dtype="datetime64[ns]")
    for k, s in enumerate(texts):
        try:
            out[k] = np.datetime64(s.strip(), "ns") if s else np.datetime64("NaT")
        except (ValueError, TypeError, AttributeError):
            out[k] = np.datetime64("NaT")
    return out


def _timestamps(ts: np.ndarray) -> tuple[np.ndarray, str | None]:
    """datetime64 values -> (float seconds, not yet shifted; NaN for NaT), ISO of the first."""
    ts = ts.astype("datetime64[ns]")
    bad = np.isnat(ts)
    out = ts.astype(np.int64).astype(np.float64) / 1e9
    out[bad] = np.nan
    origin = str(ts[~bad].min()).replace("T", " ") if (~bad).any() else None
    return out, origin


def _read_csv_arrow(path: Path):
    """Fast columnar read; None when the file needs the row-by-row reader's diagnostics."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with open(path, newline="") as f:
        header = next(csv.reader(f), None)
    if header is None:
        raise ColdscopeError(f"{path}: empty trace file (no header, no requests)")
    kind = _kind([h.strip() for h in header], path)
    if any(h != h.strip() for h in header):
        return None
    if kind == "azure":
        types = {"TIMESTAMP": pa.timestamp("ns"), "ContextTokens": pa.float64(),
                 "GeneratedTokens": pa.float64()}
        names = AZURE_COLUMNS
    else:
        types = dict.fromkeys(GENERIC_COLUMNS, pa.float64())
        names = GENERIC_COLUMNS
    try:
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types=types, include_columns=list(names), strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None
    if any(table.column(n).null_count for n in names):
        return None
    cols = [table.column(n).to_numpy() for n in names]
    origin = None
    if kind == "azure":
        cols[0], origin = _timestamps(cols[0])
    return cols[0], cols[1], cols[2], origin


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _read_csv_rows(path: Path):
    """Row-by-row read: malformed rows become NaN so that ``_check`` can report or drop them."""
    t: list[float] = []
    ctx: list[float] = []
    gen: list[float] = []
    nan = math.nan
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ColdscopeError(f"{path}: empty trace file (no header, no requests)")
        header = [h.strip() for h in header]
        kind = _kind(header, path)
        names = AZURE_COLUMNS if kind == "azure" else GENERIC_COLUMNS
        idx = [header.index(n) for n in names]
        width = len(header)
        times: list[str] = []
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
    origin = None
    if kind == "azure":
        arr, origin = _timestamps(_parse_timestamps(times))
    else:
        arr = np.asarray(t, dtype=np.float64)
    return arr, np.asarray(ctx, dtype=np.float64), np.asarray(gen, dtype=np.float64), origin


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0]) + 1


def _check(arrival: np.ndarray, ctx: np.ndarray, gen: np.ndarray, origin: str | None, *,
           path: Path, repair: bool) -> Trace:
    n = arrival.size
    if n == 0:
        raise ColdscopeError(f"{path}: empty trace (a header but no requests)")
    repairs: dict[str, int] = {}
    hint = "; pass --repair to drop them and report the count"
    finite = np.isfinite(arrival) & np.isfinite(ctx) & np.isfinite(gen)
    malformed = ~finite | (np.where(finite, arrival, 0) < 0)
    malformed |= (np.where(finite, ctx, 0) % 1 != 0) | (np.where(finite, gen, 0) % 1 != 0)
    negative = ~malformed & ((ctx < 0) | (gen < 0))
    for key, mask, what in (("malformed_rows_dropped", malformed,
                             "malformed (missing fields, not a number, bad timestamp)"),
                            ("negative_token_rows_dropped", negative,
                             "with negative token counts")):
        bad = int(mask.sum())
        if bad:
            if not repair:
                raise ColdscopeError(f"{path}: {bad} row(s) {what}, first at data row "
                                     f"{_first(mask)}{hint}")
            repairs[key] = bad
    keep = ~(malformed | negative)
    if not keep.all():
        arrival, ctx, gen = arrival[keep], ctx[keep], gen[keep]
    if arrival.size == 0:
        raise ColdscopeError(f"{path}: no usable requests ({n} rows, all dropped)")
    back = np.diff(arrival) < 0
    if back.any():
        if not repair:
            raise ColdscopeError(
                f"{path}: arrivals not sorted: {int(back.sum())} row(s) earlier than the row "
                f"before, first at data row {_first(back) + 1}; pass --repair to sort and "
                f"report the count")
        order = np.argsort(arrival, kind="stable")
        repairs["rows_reordered"] = int((order != np.arange(order.size)).sum())
        arrival, ctx, gen = arrival[order], ctx[order], gen[order]
    if origin is not None:  # Azure: seconds since the first request
        arrival = arrival - arrival[0]
    return Trace(np.ascontiguousarray(arrival), ctx.astype(np.int64), gen.astype(np.int64),
                 source=str(path), origin=origin, repairs=repairs)


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write the generic format: Parquet for ``.parquet``/``.pq``, else CSV."""
    path = Path(path)
    try:
        import pyarrow as pa
    except ImportError:
        pa = None
    if path.suffix.lower() in (".parquet", ".pq"):
        if pa is None:
            raise ColdscopeError("writing Parquet needs pyarrow: pip install "
                                 "'coldscope[parquet]'")
        import pyarrow.parquet as pq

        pq.write_table(_table(trace), path)
        return
    if pa is not None:
        import pyarrow.csv as pacsv

        pacsv.write_csv(_table(trace), path,
                        pacsv.WriteOptions(quoting_style="needed"))
        return
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(GENERIC_COLUMNS)
        w.writerows(zip((repr(float(x)) for x in trace.arrival), trace.context_tokens.tolist(),
                        trace.generated_tokens.tolist(), strict=True))


def _table(trace: Trace):
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
    return rate * shape * (n / shape.sum())


def synthesize(days: float = 7.0, rate: float = 45.0, *, diurnal: bool = False,
               bursts: bool = False, idle_nights: bool = False, seed: int = 0,
               context_log: tuple[float, float] = AZURE_CONV_CONTEXT_LOG,
               generated_log: tuple[float, float] = AZURE_CONV_GENERATED_LOG) -> Trace:
    """A synthetic trace: Poisson arrivals with the rate of :func:`rate_curve` (mean ``rate``
    requests/s over ``days`` days) and log-normal token counts fitted to the Azure conversation
    trace. The same arguments and ``seed`` give the same trace."""
    if not days > 0:
        raise ColdscopeError(f"days must be > 0, got {days}")
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
    ctx = np.maximum(1, np.rint(rng.lognormal(*context_log, n))).astype(np.int64)
    gen = np.maximum(1, np.rint(rng.lognormal(*generated_log, n))).astype(np.int64)
    flags = [k for k, v in (("diurnal", diurnal), ("bursts", bursts),
                            ("idle-nights", idle_nights)) if v]
    source = f"synthetic {days:g} d at {rate:g}/s{' ' + ','.join(flags) if flags else ''}, " \
             f"seed {seed}"
    return Trace(arrival, ctx, gen, source=source)
