"""Config-only Llama shapes and their synthetic runs, for tests and benches that need a store of
runs with known per-stage answers (compile = ``compile_per_layer`` x (4 + layers) seconds)."""

from __future__ import annotations

import json
from pathlib import Path

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS

CONFIGS = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "model-configs"


def write_shape(d: Path, layers: int, index: int) -> Path:
    """A model directory with a real Llama config cut to ``layers`` layers and a tokenizer file
    of ``1000 x (index + 1)`` bytes (features read it; no weights)."""
    d.mkdir(parents=True, exist_ok=True)
    config = json.loads((CONFIGS / "llama-3.2-1b" / "config.json").read_text())
    config.update(num_hidden_layers=layers, hidden_size=256, intermediate_size=512,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=64, vocab_size=1000)
    (d / "config.json").write_text(json.dumps(config))
    (d / "tokenizer.json").write_text("t" * (1000 * (index + 1)))
    return d


def shape_run(run_id: str, d: Path, layers: int, *, bootstrap: float = 30.0,
              compile_per_layer: float = 5.0, started_at: str = "2026-11-29T10:00:00Z",
              template: dict | None = None, **fields) -> Run:
    """An ok cold run of the shape in ``d``; ``template`` (a stored record) gives it a real
    record's size, ``fields`` override any key."""
    stages = {b: None for b in BUCKETS}
    stages.update(bootstrap=bootstrap, tokenizer=0.2, model_loading=1.0,
                  torch_compile=compile_per_layer * (4 + layers), kv_cache_profiling=2.0,
                  server_ready=1.0, unattributed=0.5)
    record = dict(template or {"environment": {"cpu_model": "x"},
                               "engine": {"name": "vllm", "version": "0.32.0", "compile": True}})
    record.update(id=run_id, status="ok", started_at=started_at, cache="cold", stages=stages,
                  time_to_ready_s=sum(v for v in stages.values() if v),
                  model={"path": str(d), "name": d.name}, **fields)
    return Run.from_json(record)
