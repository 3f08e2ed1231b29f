"""`coldscope make-model`: a random-weight model with a locally trained tokenizer."""

from __future__ import annotations

from pathlib import Path

import click

from coldscope.cli.common import echo


@click.command("make-model")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--architecture", default="llama", show_default=True,
              type=click.Choice(["llama", "qwen2", "mistral", "mixtral"]))
@click.option("--layers", default=2, show_default=True, type=click.IntRange(1))
@click.option("--hidden", default=128, show_default=True, type=click.IntRange(64))
@click.option("--heads", default=2, show_default=True, type=click.IntRange(1))
@click.option("--kv-heads", default=1, show_default=True, type=click.IntRange(1))
@click.option("--intermediate", default=None, type=click.IntRange(1))
@click.option("--vocab", default=512, show_default=True, type=click.IntRange(300))
@click.option("--experts", default=4, show_default=True, type=click.IntRange(2))
@click.option("--seed", default=0, show_default=True)
@click.option("--exist-ok", is_flag=True, help="Succeed quietly if OUT_DIR already has a model.")
def make_model(out_dir: str, architecture: str, layers: int, hidden: int, heads: int,
               kv_heads: int, intermediate: int | None, vocab: int, experts: int, seed: int,
               exist_ok: bool) -> None:
    """Make a small model in OUT_DIR (random weights, locally trained BPE tokenizer)."""
    from pydantic import ValidationError

    from coldscope.synth.tiny_model import ModelShape
    from coldscope.synth.tiny_model import make_model as make
    from coldscope.util.errors import validation_error
    if exist_ok and (Path(out_dir) / "config.json").exists():
        echo(f"{out_dir} already holds a model")
        return
    try:
        shape = ModelShape(architecture=architecture, num_layers=layers, hidden_size=hidden,
                           num_heads=heads, num_kv_heads=kv_heads,
                           intermediate_size=intermediate, vocab_size=vocab,
                           num_experts=experts, seed=seed)
    except ValidationError as exc:
        raise validation_error(exc, "make-model") from None
    path = make(shape, Path(out_dir))
    echo(f"made {architecture} model in {path}")
