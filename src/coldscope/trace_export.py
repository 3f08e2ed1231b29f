"""Export a stored run as a Chrome trace (opens in Perfetto / chrome://tracing) or as OTLP
spans to a user's collector. Functions of a run record only."""

from __future__ import annotations

import http.client
import os
import urllib.parse

from coldscope.errors import ColdscopeError

_US = 1e6


def chrome_trace(record: dict) -> dict:
    """Trace Event Format: one track per engine process with its evidence spans, one track
    with the reconciled buckets (they tile [0, ready] exactly), and CPU use as counters."""
    events: list[dict] = []
    pids: dict[object, int] = {}

    def track(key, name: str) -> int:
        if key not in pids:
            pids[key] = len(pids) + 1
            events.append({"ph": "M", "name": "process_name", "pid": pids[key], "tid": 0,
                           "args": {"name": name}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pids[key], "tid": 0,
                           "args": {"sort_index": pids[key]}})
        return pids[key]

    buckets = track("buckets", "coldscope: stages (reconciled)")
    for seg in record.get("segments") or []:
        events.append({"ph": "X", "name": seg["bucket"], "cat": "stage", "pid": buckets,
                       "tid": 0, "ts": seg["start"] * _US, "dur": (seg["end"] - seg["start"]) * _US,
                       "args": {"seconds": round(seg["end"] - seg["start"], 4)}})
    for iv in record.get("intervals") or []:
        proc = iv.get("process") or "engine"
        pid = track((proc, iv.get("pid")), f"{proc} (pid {iv.get('pid')})" if iv.get("pid")
                    else proc)
        depth = iv["name"].count("/")
        events.append({"ph": "X", "name": iv["name"], "cat": iv["source"], "pid": pid,
                       "tid": depth, "ts": iv["start"] * _US,
                       "dur": (iv["end"] - iv["start"]) * _US,
                       "args": {"source": iv["source"],
                                "seconds": round(iv["end"] - iv["start"], 4)}})
    cpu = record.get("cpu") or {}
    if cpu.get("t"):
        pid = track("cpu", "CPU utilisation (percent per core)")
        for t, cores in zip(cpu["t"], cpu["per_core"], strict=False):
            events.append({"ph": "C", "name": "cpu", "pid": pid, "tid": 0, "ts": t * _US,
                           "args": {f"core{i}": v for i, v in enumerate(cores)}})
    if record.get("time_to_ready_s") is not None:
        events.append({"ph": "i", "name": "ready", "s": "g", "pid": buckets, "tid": 0,
                       "ts": record["time_to_ready_s"] * _US})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run": record["id"], "cache": record.get("cache"),
                          "model": (record.get("model") or {}).get("path")}}


def otlp_request(record: dict) -> bytes:
    """The run as an OTLP ExportTraceServiceRequest: a root span for the start-up, one child
    per reconciled bucket segment and per evidence interval."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    origin = record.get("origin_unix")
    if origin is None:
        started = record.get("started_at")
        import datetime as dt

        origin = dt.datetime.fromisoformat(started).timestamp() if started else 0.0
    trace_id = os.urandom(16)
    root_id = os.urandom(8)

    def kv(k: str, v) -> KeyValue:
        if isinstance(v, float):
            return KeyValue(key=k, value=AnyValue(double_value=v))
        return KeyValue(key=k, value=AnyValue(string_value=str(v)))

    def span(name, start, end, parent, attrs) -> Span:
        return Span(trace_id=trace_id, span_id=os.urandom(8) if parent else root_id,
                    parent_span_id=parent or b"", name=name,
                    start_time_unix_nano=int((origin + start) * 1e9),
                    end_time_unix_nano=int((origin + end) * 1e9),
                    attributes=[kv(k, v) for k, v in attrs.items()])

    ttr = record.get("time_to_ready_s") or 0.0
    spans = [span("coldscope.startup", 0.0, ttr, None,
                  {"coldscope.run_id": record["id"], "coldscope.cache": record.get("cache")})]
    for seg in record.get("segments") or []:
        spans.append(span(seg["bucket"], seg["start"], seg["end"], root_id,
                          {"coldscope.kind": "stage"}))
    for iv in record.get("intervals") or []:
        spans.append(span(iv["name"], iv["start"], iv["end"], root_id,
                          {"coldscope.kind": "evidence", "coldscope.source": iv["source"],
                           "coldscope.process": iv.get("process") or ""}))
    resource_attrs = [kv("service.name", "coldscope")]
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource={"attributes": resource_attrs},
        scope_spans=[ScopeSpans(scope={"name": "coldscope"}, spans=spans)],
    )])
    return req.SerializeToString()


def send_otlp(record: dict, endpoint: str, timeout: float = 10.0) -> int:
    """POST the run's spans to an OTLP/HTTP collector (``http://host:4318/v1/traces``)."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ColdscopeError(f"not an OTLP/HTTP endpoint URL: {endpoint!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    try:
        body = otlp_request(record)
        conn.request("POST", parts.path or "/v1/traces", body,
                     {"Content-Type": "application/x-protobuf"})
        status = conn.getresponse().status
    except OSError as exc:
        raise ColdscopeError(f"cannot send spans to {endpoint}: {exc}") from None
    finally:
        conn.close()
    if status >= 300:
        raise ColdscopeError(f"collector at {endpoint} answered HTTP {status}")
    return status
