"""Storage evidence on the real engine: the tiny model's weights evicted from the page cache
(`profile --drop-page-cache`), then started again with them cached. Expected values come from
the weight files on disk (their sizes) and from what eviction and a read mean for the page
cache; the bytes read are the kernel's (/proc/PID/io, through the probe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY_MODEL, engine_ready, needs, profile_tiny

PORT = 8774
pytestmark = pytest.mark.engine


def _profile(tmp_path: Path, *extra: str) -> dict:
    return profile_tiny(tmp_path / "store.db", ["--cache-root", str(tmp_path / "caches"), *extra],
                        ["--enforce-eager", "--port", str(PORT), "--max-model-len", "256",
                         "--max-num-seqs", "4", "--dtype", "bfloat16"])


@needs(*engine_ready())
def test_weights_read_from_storage_when_evicted_and_not_when_cached(tmp_path):
    size = sum(p.stat().st_size for p in TINY_MODEL.glob("*.safetensors"))
    evicted = _profile(tmp_path, "--drop-page-cache")
    cached = _profile(tmp_path)
    artefact = REPO / "artifacts" / "storage-integration.json"
    artefact.parent.mkdir(exist_ok=True)
    artefact.write_text(json.dumps({"weights_bytes_on_disk": size, "evicted": evicted["storage"],
                                    "cached": cached["storage"]}, indent=2))
    for run in (evicted, cached):
        assert run["status"] == "ok"
        assert run["storage"]["weights_bytes"] == size
    st = evicted["storage"]
    assert st["resident_at_launch"] <= 0.1
    assert st["weights_read_bytes"] >= 0.5 * size, st
    assert st["read_bandwidth_bps"] > 0
    assert "weights_from_disk" in {f["id"] for f in evicted["findings"]}
    st = cached["storage"]
    assert st["resident_at_launch"] >= 0.99
    assert st["weights_read_bytes"] < 0.1 * size, st
    assert "weights_from_disk" not in {f["id"] for f in cached["findings"]}
