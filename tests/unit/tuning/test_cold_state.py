"""What tune's cold start-ups had: the model's and the engine's Python files evicted from the
page cache before each (a new node's state, ``cold_evict``, the default) or only empty engine
caches on a warm machine; recorded as ``baselines.cold_state`` and said in every label."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from coldscope.launch.runner import RunConfig
from coldscope.render.tune import tune_tables
from coldscope.store.db import Store
from coldscope.tuning import session as ts
from coldscope.tuning.report import (
    COLD_NEW_NODE,
    COLD_WARM_MACHINE,
    cold_label,
    cold_state,
    tune_result,
)
from coldscope.tuning.search import Measurement, TrialRequest
from coldscope.tuning.tuned import tuned_startup
from tests.conftest import as_vllm
from tests.serve_replay import free_port
from tests.unit.tuning.test_search import cpu_knobs

FAKE = str(Path(__file__).resolve().parents[2] / "fake_tunable_engine.py")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "model.safetensors").write_bytes(b"\0" * 64)
    return d


@pytest.mark.parametrize("evict", [True, False])
def test_cold_start_ups_evict_the_model_and_the_engine_python_when_the_session_says(
        tmp_path: Path, model_dir: Path, evict: bool) -> None:
    """Budget 2 on the fake engine: the cold default, then the warm default on its caches.
    Only the cold one is evicted (the model by the runner, the engine's Python by the
    executor), and the result's state and label follow what was done."""
    command = [as_vllm(model_dir.parent), FAKE, "--port", str(free_port()), "--model",
               str(model_dir), "--scale", "0.03", "--served-model-name", "vllm-fake"]
    spec = ts.SessionSpec(id="tune-evict", created_at="2026-01-01T00:00:00Z", command=command,
                          budget=2, timeout=60, knobs=cpu_knobs(), cold_evict=evict)
    store = Store(tmp_path / "store.db")
    active = ts.ActiveSession(spec, tmp_path / "tune" / spec.id)
    asked: list[list[str]] = []

    def evict_python(config: RunConfig) -> str:  # the real one walks this machine's venv
        asked.append(list(config.command))
        return "done: fadvise DONTNEED on /venv/lib (3 files)"

    outcome = ts.run_search(active, ts.EngineExecutor(active, store, evict=evict_python))
    done = {t.request.role: t.measurement for t in active.spec.done}
    assert set(done) == {"baseline", "warm"}
    runs = {r.campaign.role: r for r in store.runs()}
    result = tune_result(active.spec, outcome, store)
    con = Console(record=True, width=200)
    con.print(tune_tables(result))
    text = con.export_text()
    if evict:
        assert asked == [command]  # once: the cold start-up, not the seeded warm one
        assert done["baseline"].evicted == ["model", "engine python"]
        assert done["warm"].evicted == []
        # the model directory holds two files; the warm start-up's page cache was left alone
        assert runs["baseline"].page_cache == "done: fadvise DONTNEED on 2 files"
        assert runs["warm"].page_cache == "not requested"
        assert "page cache, engine python: done: fadvise DONTNEED on /venv/lib (3 files)" \
            in runs["baseline"].notes
        assert result.baselines.cold_state == "page cache evicted: model, engine python"
        assert "vs a new node (default, 1 cold start-ups)" in text
    else:
        assert asked == []
        assert done["baseline"].evicted == [] and runs["baseline"].page_cache == "not requested"
        assert result.baselines.cold_state == "engine caches empty, machine warm"
        assert "vs empty engine caches (warm machine) (default, 1 cold start-ups)" in text
        assert "new node" not in text


def test_a_session_file_without_cold_evict_ran_without_eviction(tmp_path: Path) -> None:
    """Session files written before tune evicted anything resume as they ran."""
    spec = ts.SessionSpec(id="tune-old", created_at="2026-01-01T00:00:00Z", command=["x"],
                          budget=2, knobs=cpu_knobs())
    raw = spec.model_dump(mode="json")
    raw.pop("cold_evict")
    (tmp_path / ts.SESSION_FILE).write_text(json.dumps(raw))
    assert ts.load(tmp_path).cold_evict is False


def _done(evicted_by_run: dict[str, list[str]]) -> ts.SessionSpec:
    done = [ts.Trial(request=TrialRequest(index=i, role="baseline", cache_key="default"),
                     measurement=Measurement(ok=True, run_id=rid, time_to_ready_s=10.0,
                                             evicted=ev))
            for i, (rid, ev) in enumerate(evicted_by_run.items())]
    return ts.SessionSpec(id="tune-s", created_at="2026-01-01T00:00:00Z", command=["x"],
                          budget=4, knobs=cpu_knobs(), done=done)


def test_cold_state_says_what_every_cold_start_up_had() -> None:
    both = ["model", "engine python"]
    assert cold_state(_done({"a": both, "b": both}), ["a", "b"]) == COLD_NEW_NODE
    assert cold_state(_done({"a": [], "b": []}), ["a", "b"]) == COLD_WARM_MACHINE
    # a model that is not a local directory: only the engine's Python was evicted
    assert cold_state(_done({"a": ["engine python"]}), ["a"]) == \
        "page cache evicted: engine python"
    assert cold_state(_done({"a": both, "b": []}), ["a", "b"]) == \
        "mixed: the page cache was evicted before 1 of 2 cold start-ups"
    assert cold_label(COLD_NEW_NODE) == "vs a new node"
    assert cold_label(COLD_WARM_MACHINE) == "vs empty engine caches (warm machine)"
    assert cold_label("page cache evicted: engine python") == \
        "vs empty engine caches (page cache evicted: engine python)"
    assert cold_label(None) == "vs empty engine caches"


def _tune_doc(state: str | None) -> dict[str, object]:
    baselines: dict[str, object] = {"cold": {"time_to_ready_s": 80.0}}
    if state is not None:
        baselines["cold_state"] = state
    return {"schema_version": 2, "session": "tune-x", "baselines": baselines,
            "best": {"time_to_ready_s": 20.0, "knobs": [], "argv": [], "env": {}}}


@pytest.mark.parametrize(("state", "basis"), [
    (COLD_NEW_NODE, "a new node: the default started cold vs the winner"),
    (COLD_WARM_MACHINE, "the default started on empty engine caches (engine caches empty, "
                        "machine warm) vs the winner"),
    # a tune file from before cold_state: that tune evicted nothing
    (None, "the default started on empty engine caches (engine caches empty, machine warm) "
           "vs the winner"),
])
def test_plan_tuned_basis_says_what_the_cold_start_ups_had(tmp_path: Path, state: str | None,
                                                           basis: str) -> None:
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(_tune_doc(state)))
    assert tuned_startup(path)["basis"] == basis


def test_python_trees_are_this_interpreters_stdlib_and_site_packages() -> None:
    import pydantic

    trees = ts.python_trees(sys.executable)
    stdlib = Path(os.__file__).resolve().parent
    site = Path(pydantic.__file__).resolve().parents[1]
    assert any(stdlib.is_relative_to(t) for t in trees)
    assert any(site.is_relative_to(t) for t in trees)
    # outermost only: no tree inside another, so no file is evicted twice
    assert not any(a != b and a.is_relative_to(b) for a in trees for b in trees)


def test_evict_python_evicts_every_tree_the_interpreter_lists(tmp_path: Path) -> None:
    lib, site = tmp_path / "lib", tmp_path / "site"
    for d, n in ((lib, 3), (site, 2)):
        (d / "pkg").mkdir(parents=True)
        for i in range(n):
            (d / "pkg" / f"m{i}.py").write_text("x = 1\n")
    fake = tmp_path / "python"  # answers the sys.path question with the two trees
    fake.write_text(f"#!/bin/sh\necho '{json.dumps([str(lib), str(site), '/'])}'\n")
    fake.chmod(0o755)
    assert ts.evict_python(str(fake)) == \
        f"done: fadvise DONTNEED on {lib} (3 files), {site} (2 files)"
    mute = tmp_path / "mute"
    mute.write_text("#!/bin/sh\nexit 1\n")
    mute.chmod(0o755)
    assert ts.evict_python(str(mute)) == \
        f"not possible: {mute} did not list its import directories"
    assert ts.evict_python(None) == "not possible: the command's interpreter was not found"
