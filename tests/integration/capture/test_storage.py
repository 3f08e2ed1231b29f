"""Storage evidence on the real engine: the tiny model's weights evicted from the page cache
(the primed cold start-up, `profile --drop-page-cache`), then started again with them cached
(the primed warm one; tests/integration/conftest.py). Expected values come from the weight
files on disk (their sizes) and from what eviction and a read mean for the page cache; the
bytes read are the kernel's (/proc/PID/io, through the probe)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, TINY_MODEL, engine_ready, needs

pytestmark = pytest.mark.engine


@needs(*engine_ready())
def test_weights_read_from_storage_when_evicted_and_not_when_cached(primed):
    weights = sorted(TINY_MODEL.glob("*.safetensors"))
    size = sum(p.stat().st_size for p in weights)
    evicted, cached = primed.cold, primed.warm
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
