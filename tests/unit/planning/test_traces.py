"""Trace reading, checking and synthesis, against the files' own numbers and hand-made cases."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coldscope.planning import traces
from coldscope.planning.traces import parse_rate, read_trace, synthesize, write_trace
from coldscope.util.errors import ColdscopeError

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data" / "traces"


def _stdlib(path: Path):
    rows = list(csv.DictReader(open(path)))
    ts = [datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f") for r in rows]
    return rows, ts


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_conv.csv",
                                  "AzureLLMInferenceTrace_code.csv"])
def test_reads_the_azure_traces(name):
    trace = read_trace(DATA / name)
    rows, ts = _stdlib(DATA / name)
    assert len(trace) == len(rows)
    assert trace.repairs == {}
    assert trace.duration == pytest.approx((ts[-1] - ts[0]).total_seconds(), abs=1e-5)
    assert trace.origin.startswith(ts[0].strftime("%Y-%m-%d %H:%M:%S"))
    assert trace.context_tokens.sum() == sum(int(r["ContextTokens"]) for r in rows)
    assert trace.generated_tokens[-1] == int(rows[-1]["GeneratedTokens"])


def test_row_reader_agrees_with_columnar_reader(monkeypatch):
    fast = read_trace(DATA / "AzureLLMInferenceTrace_code.csv")
    monkeypatch.setattr(traces, "_read_csv_arrow", lambda path, header: None)
    slow = read_trace(DATA / "AzureLLMInferenceTrace_code.csv")
    assert np.allclose(fast.arrival, slow.arrival, atol=1e-6)
    assert np.array_equal(fast.context_tokens, slow.context_tokens)
    assert fast.origin == slow.origin


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_generic_round_trip(tmp_path, suffix):
    pytest.importorskip("pyarrow")
    trace = synthesize(0.01, 3.0, seed=2)
    write_trace(trace, tmp_path / f"t{suffix}")
    back = read_trace(tmp_path / f"t{suffix}")
    assert np.array_equal(back.arrival, trace.arrival)
    assert np.array_equal(back.context_tokens, trace.context_tokens)
    assert np.array_equal(back.generated_tokens, trace.generated_tokens)


HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROWS = ["2023-11-16 18:00:00.0000000,10,5", "2023-11-16 18:00:01.5000000,20,6",
        "2023-11-16 18:00:03.0000000,30,7"]


def _write(tmp_path: Path, lines: list[str], head: str = HEAD) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(head + "\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("bad,message,key", [
    ("2023-11-16 18:00:02.0000000,abc,7", "malformed", "malformed_rows_dropped"),
    ("2023-11-16 18:00:02.0000000,12", "malformed", "malformed_rows_dropped"),
    ("not a time,12,7", "malformed", "malformed_rows_dropped"),
    ("2023-11-16 18:00:02.0000000,-4,7", "negative", "negative_token_rows_dropped"),
])
def test_bad_rows_are_errors_or_counted_repairs(tmp_path, bad, message, key):
    path = _write(tmp_path, [ROWS[0], ROWS[1], bad, ROWS[2]])
    with pytest.raises(ColdscopeError, match=f"1 row.*{message}.*data row 3"):
        read_trace(path)
    trace = read_trace(path, repair=True)
    assert trace.repairs == {key: 1}
    assert trace.arrival.tolist() == [0.0, 1.5, 3.0]
    assert trace.context_tokens.tolist() == [10, 20, 30]


def test_unsorted_trace(tmp_path):
    path = _write(tmp_path, [ROWS[1], ROWS[0], ROWS[2]])
    with pytest.raises(ColdscopeError, match="not sorted.*data row 2"):
        read_trace(path)
    trace = read_trace(path, repair=True)
    assert trace.repairs == {"rows_reordered": 2}
    assert trace.arrival.tolist() == [0.0, 1.5, 3.0]
    assert trace.context_tokens.tolist() == [10, 20, 30]
    assert trace.origin.startswith("2023-11-16 18:00:00")


@pytest.mark.parametrize("content,message", [
    ("", "empty trace file"),
    (HEAD, "empty trace"),
    ("a,b,c\n1,2,3\n", "unknown trace columns"),
])
def test_empty_or_unknown_traces(tmp_path, content, message):
    p = tmp_path / "t.csv"
    p.write_text(content)
    with pytest.raises(ColdscopeError, match=message):
        read_trace(p, repair=True)


def test_missing_file(tmp_path):
    with pytest.raises(ColdscopeError, match="not found"):
        read_trace(tmp_path / "nope.csv")


def test_synthesize_rate_shape_and_seed():
    trace = synthesize(2, 4.0, diurnal=True, idle_nights=True, seed=5)
    again = synthesize(2, 4.0, diurnal=True, idle_nights=True, seed=5)
    assert np.array_equal(trace.arrival, again.arrival)
    assert np.all(np.diff(trace.arrival) >= 0)
    expected = 4.0 * 2 * 86400
    assert abs(len(trace) - expected) < 4 * np.sqrt(expected)  # Poisson count, 4 sigma
    hour = (trace.arrival % 86400) / 3600
    assert not np.any((hour >= 1) & (hour < 6))
    # Diurnal shape 1 + 0.5 sin(2 pi (h - 8) / 24): 1.5 at 14:00, 1.0 at 20:00.
    peak = np.sum((hour >= 13.5) & (hour < 14.5))
    evening = np.sum((hour >= 19.5) & (hour < 20.5))
    assert peak / evening == pytest.approx(1.5, rel=0.05)


def test_parse_rate():
    assert parse_rate("45/s") == 45
    assert parse_rate("2700/min") == 45
    assert parse_rate("86400/day") == 1
    assert parse_rate("3") == 3
    with pytest.raises(ColdscopeError):
        parse_rate("fast")


_ROWS = st.lists(st.tuples(st.one_of(st.floats(allow_nan=True), st.text(max_size=8)),
                           st.one_of(st.integers(-10, 10**12), st.text(max_size=5)),
                           st.one_of(st.integers(-10, 10**12), st.floats())), max_size=20)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=400), _ROWS.map(
    lambda rows: ("arrival_s,context_tokens,generated_tokens\n" + "\n".join(
        f"{a},{c},{g}" for a, c, g in rows)).encode("utf-8", "surrogatepass"))))
def test_any_bytes_read_as_a_trace_or_a_one_line_error(tmp_path, data):
    """Whatever the file holds: a checked trace, or a ColdscopeError with a one-line message."""
    p = tmp_path / "t.csv"
    p.write_bytes(data)
    for repair in (False, True):
        try:
            trace = read_trace(p, repair=repair)
        except ColdscopeError as exc:
            assert "\n" not in str(exc)
            continue
        assert len(trace) > 0 and np.all(np.diff(trace.arrival) >= 0)
        assert trace.context_tokens.dtype == np.int32
        assert np.all((trace.context_tokens >= 0) & (trace.context_tokens <= traces.MAX_TOKENS))
