"""Model features: checked against real configs, index files and published parameter counts."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from coldscope.prediction.features import (
    features_from_paper,
    measure_graph_bytes,
    model_features,
    read_safetensors_header,
)
from coldscope.util.errors import ColdscopeError

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
CONFIGS = SHARED / "fixtures" / "model-configs"
PAPER = SHARED / "data" / "paper"

# Published counts from the fixtures' README (model cards): total, active (MoE) in billions,
# and the relative tolerance the rounding of the published number allows.
PUBLISHED = {
    "llama-3.2-1b": (1.23, None, 0.01),
    "llama-3.1-8b": (8.03, None, 0.002),
    "llama-2-7b-hf": (6.74, None, 0.002),
    "mixtral-8x7b-v0.1": (46.7, 12.9, 0.003),
    "gpt-oss-20b": (20.9, 4.19, 0.005),  # OpenAI's "3.6 B active" leaves out the embedding
    "qwen3-30b-a3b": (30.5, 3.3, 0.02),
    "qwen3-0.6b": (0.6, None, 0.02),
    "deepseek-v3": (671.0, 37.0, 0.02),
    "granite-3b-code-instruct-128k": (3.48, None, 0.002),
    "granite-3.1-1b-a400m-instruct": (1.3, 0.4, 0.08),
    "gemma-2b-it": (2.51, None, 0.002),
    "phi-3-mini-128k-instruct": (3.82, None, 0.002),
    "mistral-7b-instruct-v0.2-resaved-fp32": (7.24, None, 0.002),
    "qwen2.5-1.5b-instruct-resaved-tf5": (1.54, None, 0.003),
    # falcon-7b ties lm_head to the embedding: 7.22 B in the .bin index counts it twice
    "falcon-7b-instruct": (6.92, None, 0.002),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_config_count_matches_published(name: str) -> None:
    total, active, tol = PUBLISHED[name]
    f = model_features(CONFIGS / name)
    assert f.params == pytest.approx(total * 1e9, rel=tol)
    if active is not None:
        assert f.is_moe and f.kind == "moe"
        assert f.active_params == pytest.approx(active * 1e9, rel=max(tol, 0.03))
    else:
        assert not f.is_moe


@pytest.mark.parametrize("name", ["gemma-2b-it", "granite-3b-code-instruct-128k",
                                  "mixtral-8x7b-v0.1", "phi-3-mini-128k-instruct",
                                  "mistral-7b-instruct-v0.2-resaved-fp32"])
def test_config_count_times_dtype_equals_index_total_size(name: str) -> None:
    index = json.loads((CONFIGS / name / "model.safetensors.index.json").read_text())
    f = model_features(CONFIGS / name)
    assert f.source == "index"
    assert f.weight_bytes == index["metadata"]["total_size"]
    assert f.params * f.bytes_per_param == index["metadata"]["total_size"]


def test_paper_models_match_params_json() -> None:
    params = json.loads((PAPER / "params.json").read_text())
    pairs = {"llama-2-7b-hf": "llama2-7b-hf", "falcon-7b-instruct": "falcon-7b",
             "llama-3.1-8b": "llama3.1-8b-instruct",
             "mistral-7b-instruct-v0.2-resaved-fp32": "mistral-7b", "gpt-oss-20b": "gpt-oss-20b"}
    for fixture, paper_name in pairs.items():
        f = model_features(CONFIGS / fixture)
        assert f.params == pytest.approx(params[paper_name], rel=0.005), fixture


def test_gpt_oss_active_without_embedding_is_the_published_3_6b() -> None:
    f = model_features(CONFIGS / "gpt-oss-20b")
    assert f.active_params - f.vocab_size * f.hidden_size == pytest.approx(3.6e9, rel=0.01)
    assert f.dtype == "mxfp4" and f.weight_bytes < f.params  # 4-bit experts


def test_config_json_path_and_dtype() -> None:
    f = model_features(CONFIGS / "mistral-7b-instruct-v0.2-resaved-fp32" / "config.json")
    assert (f.dtype, f.bytes_per_param) == ("float32", 4)
    assert (f.num_layers, f.num_heads, f.num_kv_heads, f.head_dim) == (32, 32, 8, 128)
    tf5 = model_features(CONFIGS / "qwen2.5-1.5b-instruct-resaved-tf5" / "config.json")
    assert tf5.dtype == "float16" and tf5.tie_word_embeddings is True


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A valid safetensors file with zero data; returns the data bytes."""
    size = {"BF16": 2, "F32": 4}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


def _tiny_dir(tmp_path: Path, tied: bool) -> Path:
    d = tmp_path / ("tied" if tied else "untied")
    d.mkdir()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 1, "num_key_value_heads": 1,
              "num_hidden_layers": 1, "vocab_size": 100, "tie_word_embeddings": tied,
              "torch_dtype": "bfloat16"}
    (d / "config.json").write_text(json.dumps(config))
    tensors = {"model.embed_tokens.weight": ("BF16", [100, 64]),
               "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64]),
               "model.layers.0.self_attn.k_proj.weight": ("BF16", [64, 64]),
               "model.layers.0.self_attn.v_proj.weight": ("BF16", [64, 64]),
               "model.layers.0.self_attn.o_proj.weight": ("BF16", [64, 64]),
               "model.layers.0.mlp.gate_proj.weight": ("BF16", [128, 64]),
               "model.layers.0.mlp.up_proj.weight": ("BF16", [128, 64]),
               "model.layers.0.mlp.down_proj.weight": ("BF16", [64, 128]),
               "model.layers.0.input_layernorm.weight": ("BF16", [64]),
               "model.layers.0.post_attention_layernorm.weight": ("BF16", [64]),
               "model.norm.weight": ("BF16", [64]),
               "lm_head.weight": ("BF16", [100, 64])}
    _write_safetensors(d / "model.safetensors", tensors)
    (d / "tokenizer.json").write_text("x" * 1234)
    return d


def test_safetensors_headers_count_exactly(tmp_path: Path) -> None:
    untied = model_features(_tiny_dir(tmp_path, tied=False))
    # by hand: embed + head 2*6400, attention 4*4096, mlp 3*8192, norms 3*64
    expected = 2 * 6400 + 4 * 4096 + 3 * 8192 + 3 * 64
    assert untied.source == "safetensors" and untied.params == expected
    assert untied.weight_bytes == 2 * expected
    assert untied.tokenizer_bytes == 1234
    # the config count agrees with the header count
    from_config = model_features(tmp_path / "untied" / "config.json")
    assert from_config.params == expected
    # a tied lm_head stored in the file is not a parameter the engine loads
    tied = model_features(_tiny_dir(tmp_path, tied=True))
    assert tied.params == expected - 6400
    assert tied.checkpoint_bytes == (tmp_path / "tied" / "model.safetensors").stat().st_size


def test_truncated_safetensors_header_is_a_clear_error(tmp_path: Path) -> None:
    d = _tiny_dir(tmp_path, tied=False)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:40])
    with pytest.raises(ColdscopeError, match="truncated safetensors header"):
        model_features(d)
    (d / "model.safetensors").write_bytes(b"\1\2")
    with pytest.raises(ColdscopeError, match="truncated safetensors header"):
        read_safetensors_header(d / "model.safetensors")


def test_header_reader_reads_only_the_header(tmp_path: Path) -> None:
    d = _tiny_dir(tmp_path, tied=False)
    header = read_safetensors_header(d / "model.safetensors")
    assert header["lm_head.weight"]["shape"] == [100, 64]


def test_paper_features_units() -> None:
    configs = json.loads((PAPER / "models_config.json").read_text())
    f = features_from_paper(configs["gemma-7b"], name="gemma-7b", params=8_540_000_000)
    assert f.params == 8_540_000_000 and f.params_source == "published"
    assert f.weight_bytes == 2 * 8_540_000_000
    assert f.tokenizer_bytes == round(17.5 * 2**20)
    assert f.graph_size == 704 * 1024 and f.graph_size_source == "published"
    nominal = features_from_paper(configs["gemma-7b"], name="gemma-7b")
    assert nominal.params == 7_000_000_000 and nominal.params_source == "nominal"
    moe = features_from_paper(configs["qwen-14.3b"], name="qwen-14.3b")
    assert moe.kind == "moe" and moe.num_experts == 60 and moe.active_params == 2_700_000_000


def test_features_json_file(tmp_path: Path) -> None:
    entry = json.loads((PAPER / "models_config.json").read_text())["llama3-3b"]
    path = tmp_path / "llama3-3b.json"
    path.write_text(json.dumps({**entry, "params": 3_210_000_000}))
    f = model_features(path)
    assert f.name == "llama3-3b" and f.params == 3_210_000_000 and f.num_layers == 28


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"layers": 4}', "lacks"),
    ('{"model_type": "whisper", "num_hidden_layers": 2}', "unknown architecture"),
    ('{"model_type": "granitemoehybrid", "num_hidden_layers": 2}', "hybrid architecture"),
    ('{"model_type": "llama", "num_hidden_layers": 2}', "lacks or mangles"),
])
def test_bad_input_is_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ColdscopeError, match=message) as info:
        model_features(path)
    assert "\n" not in str(info.value)


def test_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(ColdscopeError, match="no such model path"):
        model_features(tmp_path / "nope")
    with pytest.raises(ColdscopeError, match="no config.json"):
        model_features(tmp_path)


def test_compile_cache_bytes_become_graph_size(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "rank_0_0"
    cache.mkdir(parents=True)
    (cache / "model").write_bytes(b"a" * 3000)
    (cache / "extra.py").write_bytes(b"b" * 500)
    assert measure_graph_bytes(tmp_path / "cache") == 3500
    f = model_features(CONFIGS / "llama-3.2-1b", compile_cache=tmp_path / "cache")
    assert (f.graph_size, f.graph_size_source) == (3500, "measured")
    assert model_features(CONFIGS / "llama-3.2-1b").graph_size_source == "estimated"


# -- issue 14: bounded, one-line errors on hostile configs and headers ---------------------------


@pytest.mark.parametrize("layers, message", [
    (1e30, r"num_hidden_layers = 1e\+30 is not an integer in 1-10,000"),
    (-3, "num_hidden_layers = -3 is not an integer"),
    ("many", "num_hidden_layers must be a number"),
    (2.5, "is not an integer"),
])
def test_config_layer_counts_are_bounded(tmp_path: Path, layers: object, message: str) -> None:
    """1e30 layers used to loop for ever; -3 gave a traceback."""
    config = {"model_type": "llama", "num_hidden_layers": layers, "hidden_size": 64,
              "num_attention_heads": 1, "vocab_size": 300, "intermediate_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ColdscopeError, match=message) as info:
        model_features(tmp_path)
    assert "\n" not in str(info.value)


def _safetensors(path: Path, header: dict) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 64)


@pytest.mark.parametrize("entry, message", [
    ({"dtype": "BF16", "shape": [-4, 8], "data_offsets": [0, 64]}, "impossible shape"),
    ({"dtype": "BF16", "shape": [10**12, 10**12], "data_offsets": [0, 64]}, "more than any"),
    ({"dtype": "Q9", "shape": [4, 8], "data_offsets": [0, 64]}, "unknown dtype 'Q9'"),
    ({"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 60]}, "span 60 B"),
])
def test_impossible_safetensors_tensors_are_refused(tmp_path: Path, entry: dict,
                                                    message: str) -> None:
    """Negative or 10^24-element shapes and unknown dtypes gave impossible parameter counts."""
    config = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64,
              "num_attention_heads": 1, "vocab_size": 300, "intermediate_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    _safetensors(tmp_path / "model.safetensors", {"w": entry})
    with pytest.raises(ColdscopeError, match=message) as info:
        model_features(tmp_path)
    assert "\n" not in str(info.value)


def test_a_consistent_safetensors_header_is_counted(tmp_path: Path) -> None:
    config = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64,
              "num_attention_heads": 1, "vocab_size": 300, "intermediate_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    _safetensors(tmp_path / "model.safetensors",
                 {"w": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}})
    f = model_features(tmp_path)
    assert (f.params, f.weight_bytes, f.dtype) == (32, 64, "bfloat16")


def test_one_dtype_table_has_every_spelling() -> None:
    from coldscope.prediction.features import DTYPE_BYTES
    assert DTYPE_BYTES["BF16"] == DTYPE_BYTES["bfloat16"] == DTYPE_BYTES["bf16"] == 2
    assert DTYPE_BYTES["F8_E4M3"] == DTYPE_BYTES["fp8"] == 1 and DTYPE_BYTES["int4"] == 0.5


def test_make_model_refuses_a_shape_too_large_for_memory(tmp_path: Path) -> None:
    """Issue 14: the shape is checked against available memory before anything is allocated."""
    from coldscope.cli.main import main
    from coldscope.synth.tiny_model import ModelShape, check_memory, making_bytes, parameter_count
    shape = ModelShape(num_layers=1000, hidden_size=65536, num_heads=512, num_kv_heads=8)
    assert parameter_count(shape) > 10**13
    with pytest.raises(ColdscopeError, match="needs about .* GB of memory to make"):
        check_memory(shape, available=64 * 2**30)
    small = ModelShape()
    check_memory(small, available=64 * 2**30)  # the default tiny model fits
    assert making_bytes(small) == parameter_count(small) * 6  # fp32 init + bf16 copy
    out = tmp_path / "huge"
    assert main(["make-model", str(out), "--layers", "1000", "--hidden", "65536",
                 "--heads", "512", "--kv-heads", "8"]) == 2
    assert not out.exists() and not (tmp_path / "huge.partial").exists()
    assert main(["make-model", str(out), "--layers", "100000"]) == 2  # above the bound


def test_parameter_count_of_make_model_matches_transformers() -> None:
    from coldscope.synth.tiny_model import ModelShape, parameter_count
    transformers = pytest.importorskip("transformers")
    for arch, cls in (("llama", "LlamaForCausalLM"), ("mixtral", "MixtralForCausalLM")):
        shape = ModelShape(architecture=arch, num_layers=2, hidden_size=128, num_heads=2)
        cfg_cls = getattr(transformers, cls.replace("ForCausalLM", "Config"))
        config = cfg_cls(vocab_size=512, hidden_size=128, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         tie_word_embeddings=False, num_local_experts=4)
        with __import__("torch").device("meta"):
            model = getattr(transformers, cls)(config)
        assert parameter_count(shape) == sum(p.numel() for p in model.parameters())
