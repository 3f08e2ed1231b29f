"""Fixtures the tuning tests share."""

import pytest


@pytest.fixture
def model_dir(tmp_path):
    """A model directory as tune reads it (a config and a weights file), no real weights."""
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "model.safetensors").write_bytes(b"\0" * 64)
    return d
