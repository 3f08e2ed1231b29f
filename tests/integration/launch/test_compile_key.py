"""Why the compile cache missed, on the real engine: two start-ups of the tiny model share one
cache directory (`profile --cache-dir`, as a persistent volume would) and differ in one flag.
The second is given the first's warm cache, compiles anyway, and `compile_cache_miss` must
name the flag that differs, with the values this test passed; the keys are the directories
the engine's own log names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, engine_ready, needs, profile_tiny

PORT = 8775
pytestmark = pytest.mark.engine


def _profile(tmp_path: Path, max_model_len: int) -> dict:
    return profile_tiny(tmp_path / "store.db", ["--cache-dir", str(tmp_path / "shared")],
                        ["--port", str(PORT), "--max-model-len", str(max_model_len),
                         "--max-num-seqs", "4", "--dtype", "bfloat16"])


@needs(*engine_ready())
def test_a_changed_flag_is_named_when_a_shared_compile_cache_misses(tmp_path):
    first = _profile(tmp_path, 256)
    second = _profile(tmp_path, 512)
    artefact = REPO / "artifacts" / "compile-key-integration.json"
    artefact.parent.mkdir(exist_ok=True)
    artefact.write_text(json.dumps({
        run["id"]: {"cache": run["cache"], "torch_compile_s": run["stages"]["torch_compile"],
                    "compile_key": run["compile_key"],
                    "findings": [f for f in run["findings"] if f["id"].startswith("compile")]}
        for run in (first, second)}, indent=2))

    assert first["cache"] == "cold" and first["cache_held"] == []
    assert second["cache"] == "warm"
    # the keys are what the engine's log says it used
    log = (Path(second["log_path"])).read_text(errors="replace")
    (held,) = second["cache_held"]
    assert held["run"] == first["id"]
    assert held["flags"]["--max-model-len"] == "256"
    assert second["compile_key"]["flags"]["--max-model-len"] == "512"
    assert held["dirs"] and second["compile_key"]["dirs"]
    assert held["dirs"] != second["compile_key"]["dirs"]
    shared = (tmp_path / "shared").resolve()
    assert all(str(shared / d) in log for d in second["compile_key"]["dirs"])

    miss = [f for f in second["findings"] if f["id"] == "compile_cache_miss"]
    assert len(miss) == 1, second["findings"]
    assert "--max-model-len: 256 → 512" in miss[0]["evidence"]
    assert miss[0]["seconds_at_stake"] == pytest.approx(second["stages"]["torch_compile"])
    assert "--port" not in miss[0]["evidence"]  # same in both runs
    assert "compile_cache_miss" not in {f["id"] for f in first["findings"]}
