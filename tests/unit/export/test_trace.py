"""The Chrome trace and the OTLP export of a run, checked against the Trace Event Format's rules
for nesting ("X" events on one thread must nest: a slice that starts inside another ends inside
it) and against the span tree a collector receives.

Perfetto's own trace processor is not used: the ``perfetto`` package (0.59.1) ships no binary;
``TraceProcessor`` downloads ``trace_processor_shell`` at run time, which this machine cannot
(tried: curl exit 6, no network), and Debian has no package of it. So the rules the trace
processor applies to JSON traces (per-thread nesting, process/thread names from "M" events,
instant events) are checked here directly.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict

import pytest

from coldscope.core.records import Run
from coldscope.export.trace import SYNTHETIC_BASE, chrome_trace, otlp_request, send_otlp


def iv(name, process, pid, start, end, source):
    return {"name": name, "process": process, "pid": pid, "start": start, "end": end,
            "source": source}


def messy_run() -> Run:
    """Evidence as three sources give it: the worker's model_loading seen by spans (twice,
    one inside the other) and by the probe; the API server's two bootstrap sub-steps crossing
    each other; a log line with no pid."""
    segs, t = [], 0.0
    for b, d in (("bootstrap", 6.0), ("unattributed", 0.5), ("bootstrap", 3.5),
                 ("model_loading", 2.5), ("torch_compile", 5.0), ("server_ready", 1.0)):
        segs.append({"bucket": b, "start": t, "end": t + d})
        t += d
    return Run.model_validate({
        "id": "r1", "status": "ok", "started_at": "2026-12-01T01:00:00+00:00", "cache": "cold",
        "time_to_ready_s": t, "first_token_s": t + 0.1, "origin_unix": 1_780_000_000.0,
        "stages": {"bootstrap": 9.5, "tokenizer": None, "model_loading": 2.5,
                   "torch_compile": 5.0, "kv_cache_profiling": None,
                   "cuda_graph_capture": None, "server_ready": 1.0, "unattributed": 0.5},
        "substeps": {"model_loading/weights": 1.0, "bootstrap/api_server_imports": 4.0,
                     "bootstrap/engine_config": 3.0},
        "sources": {"bootstrap": "probe", "model_loading": "span"},
        "segments": segs,
        "intervals": [
            iv("bootstrap", "api_server", 101, 0.0, 10.0, "probe"),
            iv("bootstrap/api_server_imports", "api_server", 101, 0.0, 4.0, "probe"),
            iv("bootstrap/engine_config", "api_server", 101, 3.0, 6.0, "probe"),
            iv("model_loading", "worker", 303, 10.0, 12.5, "span"),
            iv("model_loading", "worker", 303, 10.1, 12.4, "span"),
            iv("model_loading", "worker", 303, 9.9, 12.6, "probe"),
            iv("model_loading/weights", "worker", 303, 11.0, 12.0, "span"),
            iv("torch_compile", "engine", None, 12.5, 17.5, "log"),
        ],
        "cpu": {"interval_s": 1.0, "t": [1.0, 2.0], "per_core": [[90.0, 5.0], [80.0, 10.0]]},
        "engine": {"name": "vllm", "version": "0.32.0"},
        "model": {"name": "tiny", "path": "/models/tiny"},
        "environment": {"hostname": "box", "cpu_model": "AMD EPYC 9354", "cpu_cores": 2,
                        "gpus": [{"name": "NVIDIA H200"}]},
        "tool": {"name": "coldscope", "version": "0.1.0"},
    })


def x_events(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_trace_event_format_rules_hold():
    trace = json.loads(json.dumps(chrome_trace(messy_run())))  # plain JSON, as written
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    threads = defaultdict(list)
    for e in x_events(trace):
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["dur"] >= 0 and e["ts"] >= 0
        threads[(e["pid"], e["tid"])].append(e)
        assert (e["pid"], 0) in names, "every process is named"
        assert (e["pid"], e["tid"]) in names, "every thread is named"
    for (_pid, tid), evs in threads.items():  # per thread, slices nest
        stack = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + 1e-3:
                stack.pop()
            if stack:
                top = stack[-1]
                assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + 1e-3, (
                    f"{e['name']} crosses {top['name']} on thread {tid}")
            stack.append(e)


def test_sub_steps_nest_in_their_stage_on_one_thread_and_no_stage_twice():
    trace = chrome_trace(messy_run())
    worker = [e for e in x_events(trace) if e["pid"] == 303]
    loading = [e for e in worker if e["name"] == "model_loading"]
    assert len(loading) == 1  # three intervals, two sources: one slice, from the spans
    (ml,) = loading
    assert (ml["ts"], ml["dur"]) == (10.0e6, pytest.approx(2.5e6))
    assert ml["args"]["source"] == "span" and ml["args"]["also_seen_by"] == "probe"
    (weights,) = [e for e in worker if e["name"] == "model_loading/weights"]
    assert weights["tid"] == ml["tid"]
    assert ml["ts"] <= weights["ts"] and weights["ts"] + weights["dur"] <= ml["ts"] + ml["dur"]
    # the crossing sub-steps of the API server: one nests in bootstrap, the other gets its
    # own, named, thread
    api = [e for e in x_events(trace) if e["pid"] == 101]
    assert len({e["tid"] for e in api}) == 2
    boot = next(e for e in api if e["name"] == "bootstrap")
    imports = next(e for e in api if e["name"] == "bootstrap/api_server_imports")
    assert imports["tid"] == boot["tid"] == 101
    # the reconciled track: bootstrap's two segments stay two (a gap between them), nothing
    # repeated back to back, and the segments tile launch -> ready
    stages = [e for e in x_events(trace) if e["cat"] == "stage"]
    assert [e["name"] for e in stages] == ["bootstrap", "unattributed", "bootstrap",
                                          "model_loading", "torch_compile", "server_ready"]
    assert sum(e["dur"] for e in stages) == pytest.approx(18.5e6)


def test_real_pids_names_and_markers():
    trace = chrome_trace(messy_run())
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs[101] == "api_server (pid 101)" and procs[303] == "worker (pid 303)"
    unknown = [pid for pid, name in procs.items() if name == "engine (pid unknown)"]
    assert len(unknown) == 1 and unknown[0] >= SYNTHETIC_BASE
    synthetic = {pid for pid in procs if pid >= SYNTHETIC_BASE}
    assert len(synthetic) == 3  # reconciled stages, the pid-less log process, CPU counters
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads[(303, 303)] == "worker: start-up"
    assert "api_server: overlapping (2)" in threads.values()
    marks = {e["name"]: e["ts"] for e in trace["traceEvents"] if e["ph"] == "i"}
    assert marks == {"ready": pytest.approx(18.5e6), "first token": pytest.approx(18.6e6)}


def _decode(body: bytes):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    (rs,) = req.resource_spans
    res = {}
    for kv in rs.resource.attributes:
        kind = kv.value.WhichOneof("value")
        res[kv.key] = getattr(kv.value, kind)
    spans = [s for ss in rs.scope_spans for s in ss.spans]
    return res, spans


def parent_chain(spans, span) -> list[str]:
    """The names from ``span`` up through its parents to the root."""
    by_id = {s.span_id: s for s in spans}
    names = [span.name]
    while span.parent_span_id:
        span = by_id[span.parent_span_id]
        names.append(span.name)
    return names


def assert_children_inside(spans) -> None:
    """Every span lies inside its parent (1 µs of rounding allowed at the end)."""
    by_id = {s.span_id: s for s in spans}
    for s in spans:
        if s.parent_span_id:
            p = by_id[s.parent_span_id]
            assert p.start_time_unix_nano <= s.start_time_unix_nano
            assert s.end_time_unix_nano <= p.end_time_unix_nano + 1000


def test_otlp_spans_nest_by_process_and_stage_with_resource_attributes():
    res, spans = _decode(otlp_request(messy_run()))
    assert res["host.name"] == "box" and res["host.cpu.model.name"] == "AMD EPYC 9354"
    assert res["host.cpu.cores"] == 2 and res["host.gpu.name"] == "NVIDIA H200"
    assert res["coldscope.model.name"] == "tiny"
    assert res["coldscope.engine.version"] == "0.32.0"
    assert res["service.name"] == "coldscope" and res["service.version"] == "0.1.0"

    def chain(span):
        return parent_chain(spans, span)

    (weights,) = [s for s in spans if s.name == "model_loading/weights"]
    assert chain(weights) == ["model_loading/weights", "model_loading",
                              "process worker (pid 303)", "coldscope.startup"]
    (imports,) = [s for s in spans if s.name == "bootstrap/api_server_imports"]
    assert chain(imports)[1] == "bootstrap"
    assert sum(s.name == "model_loading" for s in spans) == 2  # reconciled + the worker's
    assert_children_inside(spans)


def test_send_otlp_confirms_what_the_collector_took(tmp_path, capsys):
    from coldscope.capture.otlp import Receiver
    from coldscope.cli.main import main
    from coldscope.store.db import Store
    from coldscope.util.errors import ColdscopeError
    run = messy_run()
    with Receiver() as rx:
        sent = send_otlp(run, rx.endpoint)
        # the root, 6 reconciled stages, 3 processes, 6 slices of evidence
        assert sent.status == 200 and sent.spans == len(rx.spans()) == 16
        with Store(tmp_path / "s.db") as s:
            s.add_run(run)
        assert main(["trace", "r1", "-o", str(tmp_path / "t.json"), "--store",
                     str(tmp_path / "s.db"), "--otlp-export", rx.endpoint]) == 0
    out = capsys.readouterr().out
    assert f"sent 16 spans to {rx.endpoint} (HTTP 200)" in out
    with pytest.raises(ColdscopeError, match="cannot send spans"):
        send_otlp(run, "http://127.0.0.1:9/v1/traces", timeout=2)


def test_profile_otlp_export_confirms_each_run(tmp_path):
    """`profile --otlp-export URL` says, per run, how many spans the collector took."""
    from coldscope.capture.otlp import Receiver
    from tests.unit.cli.test_profile import fake_profile

    with Receiver() as rx:
        out = subprocess.run(fake_profile(tmp_path, "--quiet", "--otlp-export", rx.endpoint),
                             capture_output=True, text=True, timeout=120)
        n = len(rx.spans())
    assert out.returncode == 0, out.stderr
    assert n > 0 and f"sent {n} spans to {rx.endpoint} (HTTP 200)" in out.stderr
