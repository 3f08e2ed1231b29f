"""Why the compile cache missed, on the real engine: the primed start-ups of the tiny model
(tests/integration/conftest.py) share one cache directory (`profile --cache-dir`, as a
persistent volume would); the last differs in one flag (`--max-model-len` 256 -> 512). It is
given the warm cache, compiles anyway, and `compile_cache_miss` must name the flag that
differs, with the values the fixture passed; the keys are the directories the engine's own
log names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, engine_ready, needs

pytestmark = pytest.mark.engine


@needs(*engine_ready())
def test_a_changed_flag_is_named_when_a_shared_compile_cache_misses(primed):
    # first: the new node's start-up; before: the last run with 256 (the cache keeps one key
    # per set of directories, the newest run's); second: 512 on that cache
    first, before, second = primed.cold, primed.warm, primed.changed
    artefact = REPO / "artifacts" / "compile-key-integration.json"
    artefact.parent.mkdir(exist_ok=True)
    artefact.write_text(json.dumps({
        run["id"]: {"cache": run["cache"], "torch_compile_s": run["stages"]["torch_compile"],
                    "compile_key": run["compile_key"],
                    "findings": [f for f in run["findings"] if f["id"].startswith("compile")]}
        for run in (first, before, second)}, indent=2))

    assert first["cache"] == "cold" and first["cache_held"] == []
    assert second["cache"] == "warm"
    # the keys are what the engine's log says it used
    log = (Path(second["log_path"])).read_text(errors="replace")
    (held,) = second["cache_held"]
    assert held["run"] == before["id"]
    assert before["compile_key"]["dirs"] == first["compile_key"]["dirs"]  # the same key
    assert held["flags"]["--max-model-len"] == "256"
    assert second["compile_key"]["flags"]["--max-model-len"] == "512"
    assert held["dirs"] and second["compile_key"]["dirs"]
    assert held["dirs"] != second["compile_key"]["dirs"]
    shared = primed.cache_dir.resolve()
    assert all(str(shared / d) in log for d in second["compile_key"]["dirs"])

    miss = [f for f in second["findings"] if f["id"] == "compile_cache_miss"]
    assert len(miss) == 1, second["findings"]
    assert "--max-model-len: 256 → 512" in miss[0]["evidence"]
    assert miss[0]["seconds_at_stake"] == pytest.approx(second["stages"]["torch_compile"])
    assert "--port" not in miss[0]["evidence"]  # same in both runs
    assert "compile_cache_miss" not in {f["id"] for f in first["findings"]}
