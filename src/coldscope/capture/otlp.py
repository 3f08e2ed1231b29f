"""A local OTLP/HTTP trace receiver (what span names mean is the engine adapter's business).

vLLM (0.11+), for example, emits OpenTelemetry spans for its own start-up ("Load weights",
"Warmup (CPU)", "Capture model", ...) when ``--otlp-traces-endpoint`` is set. The runner starts
a ``Receiver`` on a free loopback port, has the engine adapter point the engine at it, and
reads the spans after the run: exact start and end times, per process, with no log parsing.
Decoding uses the OpenTelemetry project's own protobuf definitions (``opentelemetry-proto``).
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

AttributeValue = str | bool | int | float | bytes | None
"""An OpenTelemetry attribute's value as received (arrays and key-value lists as text)."""

_HOST = "127.0.0.1"
"""The only address the receiver binds (loopback)."""


@dataclass(frozen=True)
class OtelSpan:
    """One received span. Times are Unix seconds (float)."""

    name: str
    start: float
    end: float
    trace_id: str
    span_id: str
    parent_id: str
    scope: str = ""
    process_kind: str | None = None
    pid: int | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "scope": self.scope, "start": self.start, "end": self.end,
            "trace": self.trace_id, "span": self.span_id, "parent": self.parent_id,
            "proc": self.process_kind, "pid": self.pid, "attrs": self.attributes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OtelSpan:
        """Read our own JSON form, or the fixture form (times in Unix ns)."""
        start, end = d["start"], d["end"]
        if start > 1e12:  # nanoseconds
            start, end = start / 1e9, end / 1e9
        pid = d.get("pid")
        return cls(
            name=d["name"], start=float(start), end=float(end), trace_id=d.get("trace", ""),
            span_id=d.get("span", ""), parent_id=d.get("parent", ""), scope=d.get("scope", ""),
            process_kind=d.get("proc"), pid=int(pid) if pid not in (None, "") else None,
            attributes=d.get("attrs") or {},
        )


def _any_value(v: AnyValue) -> AttributeValue:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value"):
        return str(getattr(v, kind))
    value: AttributeValue = getattr(v, kind)
    return value


def _engine_attr(resource: dict[str, AttributeValue], name: str) -> AttributeValue:
    """A resource attribute an engine sets under its own namespace (``<engine>.<name>``, e.g.
    vLLM's ``vllm.process_kind``), whatever the engine."""
    for key, value in resource.items():
        if key.endswith("." + name) and value not in (None, ""):
            return value
    return None


def decode_export_request(body: bytes) -> list[OtelSpan]:
    """Decode an OTLP ``ExportTraceServiceRequest`` (protobuf) into spans."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out: list[OtelSpan] = []
    for rs in req.resource_spans:
        res = {kv.key: _any_value(kv.value) for kv in rs.resource.attributes}
        kind = _engine_attr(res, "process_kind") or _engine_attr(res, "instrumenting_module_name")
        pid = _engine_attr(res, "process_id") or res.get("process.pid")
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(
                    OtelSpan(
                        name=sp.name,
                        start=sp.start_time_unix_nano / 1e9,
                        end=sp.end_time_unix_nano / 1e9,
                        trace_id=sp.trace_id.hex(),
                        span_id=sp.span_id.hex(),
                        parent_id=sp.parent_span_id.hex(),
                        scope=ss.scope.name,
                        process_kind=None if kind is None else str(kind),
                        pid=int(pid) if pid not in (None, "") else None,
                        attributes={kv.key: _any_value(kv.value) for kv in sp.attributes},
                    )
                )
    return out


MAX_REQUEST_BYTES = 64 * 2**20
"""Largest export request taken, before and after gzip: start-up spans are a few kB; a bigger
request is refused (413) rather than decompressed without limit."""


def _gunzip(body: bytes, limit: int) -> bytes:
    """gzip-decompress ``body``, refusing output beyond ``limit`` bytes (a zip bomb)."""
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(body, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        raise ValueError(f"gzip body expands past {limit} bytes")
    return out


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1 that keeps every span it is sent.

    Use as a context manager; ``endpoint`` is the URL to give the engine. Only loopback is bound.
    """

    def __init__(self, port: int = 0) -> None:
        self._spans: list[OtelSpan] = []
        self._lock = threading.Lock()
        self.errors = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_REQUEST_BYTES:
                    receiver.errors += 1
                    self.send_response(413)
                    self.end_headers()
                    return
                body = self.rfile.read(length)
                try:
                    if self.headers.get("Content-Encoding", "").lower() == "gzip":
                        body = _gunzip(body, MAX_REQUEST_BYTES)
                    spans = decode_export_request(body)
                except Exception:
                    receiver.errors += 1
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver._spans.extend(spans)
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceResponse,
                )

                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((_HOST, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._started = False

    @property
    def endpoint(self) -> str:
        return f"http://{_HOST}:{self._server.server_port}/v1/traces"

    def start(self) -> Receiver:
        self._thread.start()
        self._started = True
        return self

    def stop(self) -> None:
        """Stop serving (if started) and close the socket."""
        if self._started:
            self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[OtelSpan]:
        with self._lock:
            return list(self._spans)

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_spans_jsonl(lines: Iterable[str]) -> list[OtelSpan]:
    """Spans stored one JSON object a line (our form, or the fixtures' form)."""
    return [OtelSpan.from_dict(json.loads(line)) for line in lines if line.strip()]
