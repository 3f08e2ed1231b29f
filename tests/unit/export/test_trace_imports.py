"""Import slices in the Chrome trace and the OTLP export (``trace`` of a run profiled with
``--imports``): the intervals built from a hand-written import file, checked against values
worked out by hand from its text; where they land in the trace (their process, nested in
``bootstrap`` and its sub-steps, or on an overlap track); and that a run without import
evidence gives the trace it gave before import slices existed."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from coldscope.capture.imports import TRACE_MIN_SECONDS, ImportInterval, import_intervals
from coldscope.core.records import Run
from coldscope.export.trace import (
    IMPORT_CATEGORY,
    IMPORT_SOURCE,
    chrome_trace,
    otlp_request,
    processes,
)
from tests.unit.export.test_trace import (
    _decode,
    assert_children_inside,
    messy_run,
    parent_chain,
)

DATA = Path(__file__).resolve().parents[2] / "data"
LAUNCH = 500.0
READY = 12.0

# The API server (pid 101), rows in completion order as the probe writes them:
#   vllm 0.50-1.25 > torch 0.55-1.10 > torch._C 0.60-0.80, torch.nn 0.90-0.95
#                  > json 1.200-1.204 (4 ms: under the threshold)
#   vllm.config 3.80-4.30 (crosses the end of bootstrap/api_server_imports at 4.0)
#                  > transformers 3.90-4.10
#   then a torn line, and an import that ends at 12.5 s, after ready (12 s)
API = """\
500.600000\t200000\t200000\t2\ttorch._C\ttorch
500.900000\t50000\t50000\t2\ttorch.nn\ttorch
500.550000\t300000\t550000\t1\ttorch\tvllm
501.200000\t4000\t4000\t1\tjson\tvllm
500.500000\t100000\t750000\t0\tvllm\t__main__
503.900000\t200000\t200000\t1\ttransformers\tvllm.config
503.800000\t300000\t500000\t0\tvllm.config\t__main__
503.9\t12
511.500000\t1000000\t1000000\t0\tvllm.entrypoints.openai.serving_chat\t__main__
"""
# The engine core (pid 202): torch 2.5-4.0 > torch._dynamo 3.0-3.5
CORE = ("503.000000\t500000\t500000\t1\ttorch._dynamo\ttorch\n"
        "502.500000\t1000000\t1500000\t0\ttorch\tvllm.v1.engine.core\n")
# A process with no stage evidence of its own (pid 303): transformers 1.00-1.03
HELPER = "501.000000\t30000\t30000\t0\ttransformers\t__main__\n"
RAW = {"101": API, "202": CORE, "303": HELPER}


def run_with_bootstrap() -> Run:
    def iv(name, process, pid, start, end):
        return {"name": name, "process": process, "pid": pid, "start": start, "end": end,
                "source": "probe"}

    return Run.model_validate({
        "id": "r2", "status": "ok", "started_at": "2026-12-02T01:00:00+00:00", "cache": "cold",
        "time_to_ready_s": READY, "origin_unix": 1_780_000_000.0,
        "segments": [{"bucket": "bootstrap", "start": 0.0, "end": 10.0},
                     {"bucket": "model_loading", "start": 10.0, "end": READY}],
        "intervals": [
            iv("bootstrap", "api_server", 101, 0.0, 10.0),
            iv("bootstrap/api_server_imports", "api_server", 101, 0.4, 4.0),
            iv("bootstrap/engine_config", "api_server", 101, 4.0, 6.0),
            iv("bootstrap", "engine_core", 202, 2.0, 9.0),
            iv("model_loading", "worker", 303, 10.0, READY),
        ],
        "processes": [{"pid": 101, "role": "api_server", "probe_loaded_s": 0.3},
                      {"pid": 202, "role": "engine_core", "probe_loaded_s": 2.4},
                      {"pid": 404, "role": "helper", "probe_loaded_s": 0.9}],
    })


def spans(intervals: dict[int, list[ImportInterval]]) -> dict[int, list[tuple]]:
    return {pid: [(iv.name, round(iv.start, 9), round(iv.end, 9), iv.depth, iv.parent)
                  for iv in ivs] for pid, ivs in intervals.items()}


# -- the intervals ---------------------------------------------------------------------------


def test_intervals_are_seconds_since_launch_in_start_order():
    got = import_intervals(RAW, launch_mono=LAUNCH, ready_at=READY)
    assert TRACE_MIN_SECONDS == 0.010
    assert spans(got) == {
        101: [("import vllm", 0.5, 1.25, 0, "__main__"),
              ("import torch", 0.55, 1.1, 1, "vllm"),
              ("import torch._C", 0.6, 0.8, 2, "torch"),
              ("import torch.nn", 0.9, 0.95, 2, "torch"),
              ("import vllm.config", 3.8, 4.3, 0, "__main__"),
              ("import transformers", 3.9, 4.1, 1, "vllm.config")],
        202: [("import torch", 2.5, 4.0, 0, "vllm.v1.engine.core"),
              ("import torch._dynamo", 3.0, 3.5, 1, "torch")],
        303: [("import transformers", 1.0, 1.03, 0, "__main__")],
    }
    (torch,) = [iv for iv in got[101] if iv.module == "torch"]
    assert torch.self_s == pytest.approx(0.3)


def test_threshold_drops_short_imports_and_ready_drops_late_ones():
    def names(ivs):
        return [iv.module for iv in ivs]

    everything = import_intervals({"101": API}, launch_mono=LAUNCH, ready_at=None,
                                  min_seconds=0.0)[101]
    assert len(everything) == 8  # the torn line is skipped
    by_ready = import_intervals({"101": API}, launch_mono=LAUNCH, ready_at=READY,
                                min_seconds=0.0)[101]
    assert "json" in names(by_ready)  # 4 ms, kept with no threshold
    assert "vllm.entrypoints.openai.serving_chat" not in names(by_ready)  # ends at 12.5 s
    # 200 ms and more: torch._C's 200 000 us is on the threshold and kept
    assert names(import_intervals({"101": API}, launch_mono=LAUNCH, ready_at=READY,
                                  min_seconds=0.2)[101]) == [
        "vllm", "torch", "torch._C", "vllm.config", "transformers"]
    # a process left with nothing is left out
    assert import_intervals({"303": HELPER}, launch_mono=LAUNCH, ready_at=READY,
                            min_seconds=0.05) == {}


# -- the Chrome trace ------------------------------------------------------------------------


def x_events(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def inside(e, outer, eps=1e-3):
    return (outer["ts"] - eps <= e["ts"]
            and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + eps)


def assert_threads_nest(trace):
    threads = defaultdict(list)
    for e in x_events(trace):
        threads[(e["pid"], e["tid"])].append(e)
    for (_pid, tid), evs in threads.items():
        stack: list[dict] = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + 1e-3:
                stack.pop()
            if stack:
                assert inside(e, stack[-1]), f"{e['name']} crosses {stack[-1]['name']} ({tid})"
            stack.append(e)


def test_import_slices_nest_under_bootstrap_of_their_process():
    imports = import_intervals(RAW, launch_mono=LAUNCH, ready_at=READY)
    trace = json.loads(json.dumps(chrome_trace(run_with_bootstrap(), imports=imports)))
    assert_threads_nest(trace)
    xs = x_events(trace)
    got = [e for e in xs if e["cat"] == IMPORT_CATEGORY]
    assert len(got) == 9 == sum(len(v) for v in imports.values())
    assert all(e["args"]["source"] == IMPORT_SOURCE for e in got)
    assert {(e["pid"], e["name"]) for e in got} == {
        (pid, iv.name) for pid, ivs in imports.items() for iv in ivs}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in got:
        if e["pid"] == 303:  # no bootstrap evidence: its own process, role from run.processes
            continue
        boot = [b for b in xs if b["pid"] == e["pid"] and b["tid"] == e["tid"]
                and b["name"].split("/")[0] == "bootstrap" and inside(e, b)]
        assert boot or "overlapping" in threads[(e["pid"], e["tid"])], e["name"]

    def one(pid, name):
        (e,) = [x for x in xs if x["pid"] == pid and x["name"] == name]
        return e

    # the API server: the first import tree inside the imports sub-step, on the main track
    subst = one(101, "bootstrap/api_server_imports")
    for name in ("import vllm", "import torch", "import torch._C", "import torch.nn"):
        assert one(101, name)["tid"] == 101 and inside(one(101, name), subst), name
    assert inside(one(101, "import torch._C"), one(101, "import torch"))
    assert inside(one(101, "import torch"), one(101, "import vllm"))
    c = one(101, "import torch._C")
    assert (c["ts"], c["dur"]) == (pytest.approx(0.6e6), pytest.approx(0.2e6))
    assert c["args"] == {"source": IMPORT_SOURCE, "seconds": 0.2, "self_seconds": 0.2,
                         "depth": 2, "importer": "torch"}
    # vllm.config crosses the sub-step's end: a second track, its child nested in it there
    cfg, tf = one(101, "import vllm.config"), one(101, "import transformers")
    assert cfg["tid"] != 101 and threads[(101, cfg["tid"])] == "api_server: overlapping (2)"
    assert tf["tid"] == cfg["tid"] and inside(tf, cfg)
    # the engine core: its imports under its own bootstrap
    boot = one(202, "bootstrap")
    assert one(202, "import torch")["tid"] == one(202, "import torch._dynamo")["tid"] == 202
    assert inside(one(202, "import torch._dynamo"), one(202, "import torch"))
    assert inside(one(202, "import torch"), boot)
    # a pid with stage evidence keeps its role; its imports on its track
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs[303] == "worker (pid 303)"
    assert one(303, "import transformers")["tid"] == 303


def test_a_pid_with_imports_only_becomes_a_process_named_by_its_role():
    imports = {404: [ImportInterval("torch", 1.0, 2.0, 1.0, 0, "__main__")],
               505: [ImportInterval("json", 1.0, 1.5, 0.5, 0, "__main__")]}
    procs = {p.pid: p for p in processes(run_with_bootstrap(), imports=imports)}
    assert procs[404].role == "helper" and procs[505].role == "helper"
    assert [[s.name for s in t] for t in procs[404].tracks] == [["import torch"]]
    # processes keep their order: by role, then start
    assert [p.pid for p in processes(run_with_bootstrap(), imports=imports)] == [
        101, 202, 303, 404, 505]


def test_a_run_without_imports_gives_the_trace_it_gave_before():
    """``trace-messy-run.json`` is ``chrome_trace(messy_run())`` written by the trace export as
    it was before import slices (git HEAD at the time)."""
    before = json.loads((DATA / "trace-messy-run.json").read_text())
    run = messy_run()
    for imports in (None, {}):
        assert json.loads(json.dumps(chrome_trace(run, imports=imports))) == before
    assert processes(run) == processes(run, imports={})


# -- OTLP ------------------------------------------------------------------------------------


def test_otlp_import_spans_nest_under_their_importer_and_stage():
    imports = import_intervals(RAW, launch_mono=LAUNCH, ready_at=READY)
    _, got = _decode(otlp_request(run_with_bootstrap(), imports=imports))

    def chain(span):
        return parent_chain(got, span)

    def attrs(span):
        return {kv.key: getattr(kv.value, kv.value.WhichOneof("value"))
                for kv in span.attributes}

    (c,) = [s for s in got if s.name == "import torch._C"]
    assert chain(c) == ["import torch._C", "import torch", "import vllm",
                        "bootstrap/api_server_imports", "bootstrap",
                        "process api_server (pid 101)", "coldscope.startup"]
    assert attrs(c)["coldscope.kind"] == "import"
    assert attrs(c)["coldscope.source"] == IMPORT_SOURCE
    assert attrs(c)["coldscope.import.importer"] == "torch"
    (tf,) = [s for s in got if s.name == "import transformers" and attrs(s)["process.pid"] == 101]
    # vllm.config crosses bootstrap/api_server_imports' end (an overlap track in the Chrome
    # trace): its parent is the innermost span that holds it
    assert chain(tf)[:4] == ["import transformers", "import vllm.config", "bootstrap",
                             "process api_server (pid 101)"]
    assert sum(attrs(s).get("coldscope.kind") == "import" for s in got) == 9
    assert_children_inside(got)


# -- the command -----------------------------------------------------------------------------


def test_trace_command_writes_import_slices_from_the_stored_evidence(tmp_path, capsys):
    from coldscope.cli.main import main
    from coldscope.store.db import Store
    plain = messy_run()
    with Store(tmp_path / "s.db") as s:
        s.add_run(run_with_bootstrap(), {"imports": RAW, "launch": {"mono": LAUNCH}})
        s.add_run(plain, {"launch": {"mono": LAUNCH}})
    store = str(tmp_path / "s.db")
    assert main(["trace", "r2", "-o", str(tmp_path / "t.json"), "--store", store,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["import_slices"] == 9
    written = json.loads((tmp_path / "t.json").read_text())
    assert sum(e.get("cat") == IMPORT_CATEGORY for e in written["traceEvents"]) == 9
    assert out["events"] == len(written["traceEvents"])
    # a run without import evidence: the trace as before, and no import count
    assert main(["trace", "r1", "-o", str(tmp_path / "p.json"), "--store", store,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["import_slices"] is None
    assert json.loads((tmp_path / "p.json").read_text()) == json.loads(
        (DATA / "trace-messy-run.json").read_text())
    assert main(["trace", "r1", "-o", str(tmp_path / "p.json"), "--store", store]) == 0
    assert "import slices" not in capsys.readouterr().out
    assert main(["trace", "r2", "-o", str(tmp_path / "t.json"), "--store", store]) == 0
    assert ", 9 import slices); open it in ui.perfetto.dev" in capsys.readouterr().out
