"""Make small models locally: random weights and a tokenizer trained on local text.

No model hub is reachable from our machines, so every engine run in tests, demos and campaigns
uses a model made here. The shapes are real Hugging Face architectures (Llama, Qwen2, Mistral,
Mixtral-style MoE) saved exactly as a hub checkpoint would be (``config.json``,
``model.safetensors``, ``tokenizer.json``), so the engine's real loading code runs on them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from coldscope.util.errors import ColdscopeError


class ModelShape(BaseModel):
    """The shape of a locally made model. head_dim = hidden_size / num_heads must be >= 64
    (vLLM's CPU attention needs it)."""

    model_config = ConfigDict(extra="forbid")

    architecture: str = Field("llama", description="llama | qwen2 | mistral | mixtral")
    num_layers: int = Field(2, ge=1, le=1000)
    hidden_size: int = Field(128, ge=64, le=65536)
    intermediate_size: int | None = Field(None, ge=1, le=1_000_000)
    num_heads: int = Field(2, ge=1, le=1024)
    num_kv_heads: int = Field(1, ge=1, le=1024)
    vocab_size: int = Field(512, ge=300, le=1_000_000)
    num_experts: int = Field(4, ge=2, le=512, description="mixtral only")
    experts_per_token: int = Field(2, ge=1, le=512, description="mixtral only")
    max_position_embeddings: int = Field(2048, ge=1, le=1_048_576)
    dtype: str = "bfloat16"
    seed: int = 0


def _check(shape: ModelShape) -> None:
    if shape.architecture not in _ARCHITECTURES:
        raise ColdscopeError(
            f"unknown architecture {shape.architecture!r}; choose one of {sorted(_ARCHITECTURES)}"
        )
    if shape.hidden_size % shape.num_heads:
        raise ColdscopeError("hidden_size must be a multiple of num_heads")
    if shape.hidden_size // shape.num_heads < 64:
        raise ColdscopeError("head_dim (hidden_size / num_heads) must be >= 64 for vLLM on CPU")
    if shape.num_heads % shape.num_kv_heads:
        raise ColdscopeError("num_heads must be a multiple of num_kv_heads")


def parameter_count(shape: ModelShape) -> int:
    """Parameters of the model ``make_model`` would build (untied embeddings and head)."""
    h = shape.hidden_size
    ffn = shape.intermediate_size or 4 * h
    head_dim = h // shape.num_heads
    attn = 2 * h * h + 2 * h * shape.num_kv_heads * head_dim
    mlp = 3 * h * ffn
    if shape.architecture == "mixtral":
        mlp = shape.num_experts * mlp + h * shape.num_experts
    return shape.num_layers * (attn + mlp + 2 * h) + 2 * shape.vocab_size * h + h


def making_bytes(shape: ModelShape) -> int:
    """Peak memory to make the model: transformers initialises in float32 (4 B per parameter)
    and ``.to(dtype)`` holds the converted copy beside it; saving adds no full copy."""
    from coldscope.prediction.features import DTYPE_BYTES
    return int(parameter_count(shape) * (4 + DTYPE_BYTES.get(shape.dtype, 4)))


def available_memory() -> int | None:
    """Bytes of memory available now (Linux MemAvailable), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(shape: ModelShape, available: int | None = None) -> None:
    """Refuse, before allocating anything, a shape that cannot fit in memory."""
    need = making_bytes(shape)
    have = available_memory() if available is None else available
    if have is not None and need > 0.8 * have:
        raise ColdscopeError(
            f"a {shape.architecture} model of this shape has {parameter_count(shape) / 1e9:.3g} B "
            f"parameters and needs about {need / 1e9:.3g} GB of memory to make, more than 80 % "
            f"of the {have / 1e9:.3g} GB available; choose fewer layers or a smaller hidden size")


_ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
}


def training_corpus(max_bytes: int = 4_000_000) -> list[str]:
    """Deterministic local text to train tokenizers on: the Python standard library's sources."""
    lib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    texts: list[str] = []
    total = 0
    for path in sorted(lib.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    if not texts:
        raise ColdscopeError(f"no training text found under {lib}")
    return texts


def train_tokenizer(vocab_size: int, out_dir: Path) -> int:
    """Train a byte-level BPE tokenizer of ``vocab_size`` and save it as a Hugging Face
    fast tokenizer in ``out_dir``. Returns the size of tokenizer.json in bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    )
    fast.save_pretrained(out_dir)
    return (out_dir / "tokenizer.json").stat().st_size


def make_model(shape: ModelShape, out_dir: Path) -> Path:
    """Write a random-weight model of ``shape`` with a locally trained tokenizer to ``out_dir``.

    The directory is complete as soon as this returns; it is written to a temporary sibling first
    and renamed, so an interrupted run never leaves a half-made model that looks finished.
    """
    _check(shape)
    check_memory(shape)
    import shutil

    import torch
    import transformers

    out_dir = Path(out_dir)
    if (out_dir / "config.json").exists():
        raise ColdscopeError(f"{out_dir} already holds a model; remove it or choose another path")
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    vocab = shape.vocab_size
    train_tokenizer(vocab, tmp)
    config_cls, model_cls = (getattr(transformers, n) for n in _ARCHITECTURES[shape.architecture])
    kwargs = dict(
        vocab_size=vocab,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size or 4 * shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.max_position_embeddings,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=False,
    )
    if shape.architecture == "mixtral":
        kwargs.update(num_local_experts=shape.num_experts,
                      num_experts_per_tok=shape.experts_per_token)
    config = config_cls(**kwargs)
    torch.manual_seed(shape.seed)
    model = model_cls(config).to(getattr(torch, shape.dtype))
    model.save_pretrained(tmp, safe_serialization=True)
    (tmp / "coldscope-shape.json").write_text(json.dumps(shape.model_dump(), indent=2))
    tmp.rename(out_dir)
    return out_dir


def validate_shape(shape: ModelShape) -> None:
    """Raise ColdscopeError if ``make_model`` would refuse ``shape`` (unknown architecture,
    head_dim < 64, heads not divisible), so a campaign file is checked before any run starts."""
    _check(shape)
