"""Model features for start-up prediction, read without loading a single weight.

``model_features(path)`` accepts a model directory, a ``config.json``, a
``model.safetensors.index.json``, or a features JSON in the paper's ``models_config.json``
per-model format (optionally with ``params``, the exact parameter count, and ``name``).

Where the numbers come from, best first:

* parameter count and weight bytes: the safetensors headers when every weight file is present
  (only the 8-byte length and the JSON header of each file are read); otherwise an
  architecture-aware count from the config (gated or plain MLP, GQA/MQA, head_dim, tied
  embeddings, biases, MoE experts), with the index's ``metadata.total_size`` as the weight bytes
  when an index is there;
* tokenizer bytes: the size of ``tokenizer.json`` (else the other tokenizer files), on disk;
* compiled graph size: bytes of a compile cache directory when one is given, else an estimate
  from the number of layers (``GRAPH_BYTES_PER_LAYER``).

Counts are of the parameters the engine keeps: a tied ``lm_head`` is counted once, as vLLM
loads it once. ``weight_bytes`` is the bytes of those parameters as stored.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_confined, loads_json, open_regular, read_text

#: The one dtype table: bytes per element (parameter) of every dtype name coldscope reads -
#: safetensors header names (upper case), torch / config names, and the short names users type
#: (``plan --dtype bf16``). Look up exactly, then lower-cased.
DTYPE_BYTES: dict[str, float] = {
    # safetensors headers
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
    "I16": 2, "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1,
    "BOOL": 1, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
    # torch / config.json names
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2,
    "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "uint8": 1,
    "mxfp4": 0.53125,  # 4 bits plus one shared 8-bit scale per 32 values
    # short names
    "fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int4": 0.5, "fp4": 0.5,
}

#: Bounds on the numbers a config or header may hold: beyond them the file is wrong (the
#: largest published models have ~200 layers, ~10^5 hidden, ~10^6 vocabulary, ~10^13 params).
MAX_LAYERS = 10_000
MAX_DIM = 10_000_000
MAX_TENSOR_ELEMENTS = 10**14
#: Tensors one safetensors file may hold. Real shards hold a few hundred to a few thousand (a
#: whole 600B-parameter MoE holds about 150,000 across all its files); at this bound the worst
#: header is read, parsed and counted in about half a second.
MAX_HEADER_TENSORS = 50_000
#: A safetensors header longer than this is refused before it is read: what 50,000 tensor
#: entries with long names need (real entries take 100-200 B; the format's own limit, 100 MB,
#: took 28 s to parse at 900,000 tensors).
MAX_HEADER_BYTES = 16 * 2**20
#: JSON values a header may hold (counted as its commas and colons before it is parsed): a
#: tensor entry of 16 dimensions needs 24, so a header of 50,000 such tensors fits.
MAX_HEADER_VALUES = 24 * MAX_HEADER_TENSORS
#: Tensors all the safetensors files of one model may hold together.
MAX_MODEL_TENSORS = 2_000_000
#: Weight files an index may name (real models have at most a few hundred).
MAX_WEIGHT_FILES = 10_000
#: Dimensions of one tensor (real weights have 1-5; torch allows at most 64).
MAX_TENSOR_DIMS = 16
#: Bytes a tokenizer or compiled-graph figure may claim (1 TiB; real ones are MB to GB).
MAX_FILE_BYTES = 2**40

#: Estimated compiled-graph bytes per decoder layer when no compile cache is at hand: the median
#: of the paper's dense models (models_config.json ``compiled_graph_sizes`` / ``layers``, 12
#: models: 28.3-35.3 KiB per layer, median 31.4 KiB).
GRAPH_BYTES_PER_LAYER = 31.4 * 1024

#: Mamba/linear-attention hybrids: their start-up does not scale like a dense transformer's.
HYBRID_MODEL_TYPES = frozenset({
    "granitemoehybrid", "jamba", "bamba", "falcon_h1", "nemotron_h", "zamba", "zamba2",
    "qwen3_next", "lfm2", "plamo2", "minimax_text_01",
})

#: Families whose MLP is gated (gate, up, down: three matrices) - all others use two.
GATED_MLP_TYPES = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "granite", "phi3",
    "mixtral", "qwen2_moe", "qwen3_moe", "granitemoe", "olmoe", "deepseek_v2", "deepseek_v3",
    "gpt_oss", "yi", "internlm2", "olmo2", "cohere", "starcoder2_gated",
})

#: Families counted by ``_count_decoder`` (everything else is an unknown architecture).
SUPPORTED_MODEL_TYPES = GATED_MLP_TYPES | {"falcon", "gpt2", "gpt_neox", "opt", "mpt"}

#: Families with a bias on q, k and v even though their config does not say so.
QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe"})

#: Tie default of each family when ``tie_word_embeddings`` is absent from the config.
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text", "falcon", "gpt2", "opt", "mpt"})

Kind = Literal["dense", "moe", "hybrid"]

#: Whether one-line errors may quote the values they found in a model's files. ``coldscope
#: serve`` turns it off while a request's work runs (``values_withheld``): the files lie under
#: its --model-root and are not the client's to read, so an answer names the field that is
#: wrong, never what it holds. The CLI quotes them: its user is reading their own files.
_QUOTE_VALUES: ContextVar[bool] = ContextVar("coldscope_quote_values", default=True)


@contextlib.contextmanager
def values_withheld() -> Iterator[None]:
    """Within this block (this thread or task), errors about a model's files name the field
    that is wrong and never quote its value or a number derived from it."""
    token = _QUOTE_VALUES.set(False)
    try:
        yield
    finally:
        _QUOTE_VALUES.reset(token)


def _shown(value: Any, before: str = " ", after: str = "") -> str:
    """``before + repr(value) + after`` (the value cut to 60 characters) where errors may quote
    values; nothing inside ``values_withheld``."""
    return f"{before}{_brief(value)}{after}" if _QUOTE_VALUES.get() else ""


class ModelFeatures(BaseModel):
    """What start-up depends on, per model. Sizes in bytes; counts are plain integers."""

    model_config = ConfigDict(extra="forbid")

    # Every number is bounded (the module's MAX_* figures, far beyond any real model), so a
    # prediction made from a features document stays finite and small.
    name: str = Field(max_length=4096,
                      description="model name (directory name or features JSON name)")
    source: str = Field(max_length=64,
                        description="what was read: safetensors | index | config | features")
    model_type: str | None = Field(None, max_length=256)
    kind: Kind = Field("dense", description="dense | moe | hybrid (MoE/hybrid need own data)")
    params: int = Field(ge=0, le=MAX_TENSOR_ELEMENTS,
                        description="parameters the engine keeps (tied lm_head once)")
    params_source: str = Field(max_length=64,
                               description="safetensors | config | published | nominal")
    weight_bytes: int = Field(ge=0, le=8 * MAX_TENSOR_ELEMENTS,
                              description="bytes of those parameters as stored")
    dtype: str | None = Field(None, max_length=64)
    bytes_per_param: float = Field(gt=0, le=1024, allow_inf_nan=False)
    num_layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden_size: int | None = Field(None, ge=0, le=MAX_DIM)
    ffn_size: int | None = Field(None, ge=0, le=MAX_DIM)
    num_heads: int | None = Field(None, ge=0, le=MAX_DIM)
    num_kv_heads: int | None = Field(None, ge=0, le=MAX_DIM)
    head_dim: int | None = Field(None, ge=0, le=MAX_DIM)
    vocab_size: int | None = Field(None, ge=0, le=MAX_DIM)
    tie_word_embeddings: bool | None = None
    is_moe: bool = False
    num_experts: int | None = Field(None, ge=0, le=MAX_DIM)
    num_active_experts: int | None = Field(None, ge=0, le=MAX_DIM)
    active_params: int | None = Field(None, ge=0, le=MAX_TENSOR_ELEMENTS,
                                      description="parameters used per token (MoE)")
    tokenizer_bytes: int | None = Field(None, ge=0, le=MAX_FILE_BYTES,
                                        description="bytes of the tokenizer file(s)")
    graph_size: int | None = Field(None, ge=0, le=MAX_FILE_BYTES,
                                   description="bytes of compiled graphs")
    graph_size_source: str | None = Field(None, max_length=64,
                                          description="measured | estimated | published")
    checkpoint_bytes: int | None = Field(None, ge=0, le=8 * MAX_TENSOR_ELEMENTS,
                                         description="bytes of the weight files on disk")


def model_features(path: str | Path, compile_cache: str | Path | None = None) -> ModelFeatures:
    """Features of the model at ``path`` (directory, config, index or features JSON).

    ``compile_cache``: a directory of compiled graphs for this model (e.g. one hash directory
    under ``VLLM_CACHE_ROOT/torch_compile_cache``); its bytes become ``graph_size``.
    """
    from pydantic import ValidationError

    from coldscope.util.errors import validation_error
    try:
        return _model_features(Path(path), compile_cache)
    except ValidationError as exc:
        raise validation_error(exc, f"features of {path}") from None


def _model_features(p: Path, compile_cache: str | Path | None) -> ModelFeatures:
    # Inside serve's confinement a path outside the roots is refused before it is looked at,
    # so the answer is the same whether or not something exists there.
    check_confined(p, "model path")
    if not p.exists():
        raise ColdscopeError(f"no such model path: {p}")
    if p.is_dir():
        features = _from_directory(p)
    else:
        data = _read_json(p)
        if "params_source" in data and "source" in data:  # what `features --json` printed
            features = ModelFeatures.model_validate(data)
        elif p.name.endswith(".index.json") or "weight_map" in data:
            features = _from_directory(p.parent, index_path=p)
        elif _looks_like_hf_config(data):
            features = _from_config(data, name=p.parent.name or p.stem, source="config")
        else:
            features = features_from_paper(data, name=p.stem)
    if compile_cache is not None:
        features.graph_size = measure_graph_bytes(compile_cache)
        features.graph_size_source = "measured"
    return features


def features_from_paper(entry: dict[str, Any], name: str,
                        params: int | None = None, hybrid: bool = False) -> ModelFeatures:
    """Features from one entry of the paper's ``models_config.json``.

    Its units: ``size`` (nominal billions), ``tokenizer_size`` (MiB of tokenizer.json),
    ``compiled_graph_sizes`` (KiB). ``params`` (or an entry key ``params``) is the exact count;
    without it the nominal size is used and marked as such. Dtype: 2 bytes per parameter (the
    paper's models are fp16/bf16 checkpoints). ``hybrid`` (or entry key ``hybrid``) marks a
    Mamba-hybrid model, which the paper's features cannot tell apart.
    """
    from pydantic import ValidationError

    from coldscope.util.errors import validation_error
    entry = dict(entry)
    title = str(entry.pop("name", name))
    # the entry's own name is quoted only where values may be (see ``values_withheld``)
    where = repr(title if _QUOTE_VALUES.get() else name)
    exact = entry.pop("params", params)
    hybrid = bool(entry.pop("hybrid", hybrid))
    required = ("layers", "hidden_size", "vocab_size")
    missing = [k for k in required if k not in entry]
    if missing or ("size" not in entry and exact is None):
        raise ColdscopeError(
            f"features JSON for {where} lacks {', '.join(missing) or 'size or params'}; expected "
            "the paper's models_config.json per-model format (size, layers, hidden_size, ...)"
        )
    try:
        if exact is not None:
            count = _bounded(exact, "params", 0, MAX_TENSOR_ELEMENTS)
        else:
            count = round(_real(entry["size"], "size", 0, MAX_TENSOR_ELEMENTS / 1e9) * 1e9)
        moe = entry.get("moe")
        if moe and not isinstance(moe, dict):
            raise ColdscopeError("moe must be an object (n_experts, active_size, ...)")
        tokenizer_mib = entry.get("tokenizer_size")
        graph_kib = entry.get("compiled_graph_sizes")
        return ModelFeatures(
            name=title, source="features", model_type=None,
            kind="hybrid" if hybrid else ("moe" if moe else "dense"),
            params=count, params_source="published" if exact is not None else "nominal",
            weight_bytes=2 * count, dtype="bfloat16", bytes_per_param=2.0,
            num_layers=_bounded(entry["layers"], "layers", 1, MAX_LAYERS),
            hidden_size=_bounded(entry["hidden_size"], "hidden_size", 1, MAX_DIM),
            ffn_size=_opt_int(entry.get("ffn_dim"), "ffn_dim"),
            num_heads=_opt_int(entry.get("num_attention_heads"), "num_attention_heads"),
            num_kv_heads=_opt_int(entry.get("num_key_value_heads"), "num_key_value_heads"),
            vocab_size=_bounded(entry["vocab_size"], "vocab_size", 1, MAX_DIM), is_moe=bool(moe),
            num_experts=_opt_int(moe.get("n_experts"), "moe.n_experts") if moe else None,
            num_active_experts=(_opt_int(moe.get("n_active_experts"), "moe.n_active_experts")
                                if moe else None),
            active_params=(int(_real(moe.get("active_size"), "moe.active_size", 0,
                                     MAX_TENSOR_ELEMENTS / 1e9) * 1e9) if moe else None),
            tokenizer_bytes=(round(_real(tokenizer_mib, "tokenizer_size", 0,
                                         MAX_FILE_BYTES / 2**20) * 2**20)
                             if tokenizer_mib else None),
            graph_size=(round(_real(graph_kib, "compiled_graph_sizes", 0, MAX_FILE_BYTES / 1024)
                              * 1024) if graph_kib else None),
            graph_size_source="published" if graph_kib else None,
        )
    except ValidationError as exc:  # its one line names the field and the bound, not the value
        raise validation_error(exc, f"malformed features JSON for {where}") from None
    except ColdscopeError as exc:
        raise ColdscopeError(f"malformed features JSON for {where}: {exc}") from None
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        raise ColdscopeError(f"malformed features JSON for {where}: a field has the wrong "
                             "type") from None


def measure_graph_bytes(cache_dir: str | Path) -> int:
    """Total bytes of the regular files under a compile cache directory."""
    root = Path(cache_dir)
    if not root.is_dir():
        raise ColdscopeError(f"compile cache {root} is not a directory")
    total = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    if total == 0:
        raise ColdscopeError(f"compile cache {root} holds no files")
    return total


def read_safetensors_header(path: str | Path) -> dict[str, Any]:
    """The JSON header of a safetensors file: 8-byte little-endian length, then that much JSON.

    Reads only those bytes, never the tensors, from a regular file only (``safeio``). What it
    costs is bounded before the JSON is parsed: at most ``MAX_HEADER_BYTES`` of header, holding
    at most ``MAX_HEADER_TENSORS`` tensor entries and ``MAX_HEADER_VALUES`` JSON values (both
    counted over the raw bytes at C speed), so the worst header accepted is parsed in well
    under a second and a few tens of MB. No number from the file is quoted where values are
    withheld (``values_withheld``).
    """
    p = Path(path)
    try:
        with open_regular(p, "safetensors file") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ColdscopeError(f"truncated safetensors header in {p}: file shorter than 8 B")
            (length,) = struct.unpack("<Q", head)
            size = os.fstat(f.fileno()).st_size
            if length > MAX_HEADER_BYTES:
                raise ColdscopeError(f"safetensors header in {p}{_shown(length, ' says ', ' B,')}"
                                     f" is longer than {MAX_HEADER_BYTES} B; refused")
            if length > size - 8:
                raise ColdscopeError(
                    f"truncated safetensors header in {p}: the header is longer than the file"
                    + (f" (header says {length} B, file has {size - 8} B after the length)"
                       if _QUOTE_VALUES.get() else ""))
            raw = f.read(length)
    except OSError as exc:
        raise ColdscopeError(f"cannot read {p}: {exc.strerror or exc}") from None
    return _parse_header(raw, p)


def _parse_header(raw: bytes, p: Path) -> dict[str, Any]:
    """The header's JSON object, refused before parsing past the tensor and value bounds.
    Plain ``json.loads``: its C parser bounds nesting by the recursion limit (a
    RecursionError here), integers by the interpreter's digit limit, and NaN/Infinity are
    refused; every number is checked per tensor afterwards (``_tensor_size``)."""
    tensors = raw.count(b'"data_offsets"')  # names may say it too: over-counting only refuses
    if tensors > MAX_HEADER_TENSORS:
        raise ColdscopeError(f"safetensors header in {p} holds more than {MAX_HEADER_TENSORS} "
                             "tensors; refused")
    if raw.count(b",") + raw.count(b":") > MAX_HEADER_VALUES:
        raise ColdscopeError(f"safetensors header in {p} holds more than {MAX_HEADER_VALUES} "
                             "JSON values; refused")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ColdscopeError(f"malformed safetensors header in {p}: not UTF-8 ({exc.reason} "
                             f"at byte {exc.start})") from None
    try:
        header = json.loads(text, parse_constant=_not_finite)
    except json.JSONDecodeError as exc:
        raise ColdscopeError(f"malformed safetensors header in {p}: not valid JSON ({exc.msg} "
                             f"at byte {exc.pos})") from None
    except (ValueError, RecursionError):  # a number too long or not finite; nesting too deep
        raise ColdscopeError(f"malformed safetensors header in {p}: not valid JSON (a number "
                             "too long or not finite, or nesting too deep)") from None
    if not isinstance(header, dict):
        raise ColdscopeError(f"malformed safetensors header in {p}: not a JSON object")
    return header


def _not_finite(constant: str) -> Any:
    raise ValueError(f"{constant} is not a finite number")


# ---------------------------------------------------------------------------------------------
# directories, configs, safetensors


def _from_directory(directory: Path, index_path: Path | None = None) -> ModelFeatures:
    config_path = directory / "config.json"
    if not _is_file(config_path, "model file"):
        raise ColdscopeError(f"no config.json in {directory}")
    config = _read_json(config_path)
    uncounted: UncountableArchitecture | None = None
    try:
        features = _from_config(config, name=directory.name, source="config")
    except UncountableArchitecture as exc:
        # the safetensors headers can still count it: keep the config's shape, count the files
        uncounted = exc
        features = _shape_only(config, directory.name, exc.kind)
    if index_path is None and _is_file(directory / "model.safetensors.index.json", "model file"):
        index_path = directory / "model.safetensors.index.json"
    index = _read_json(index_path) if index_path is not None else None
    files = _weight_files(directory, index)
    tied = bool(features.tie_word_embeddings)
    complete = bool(files) and all(_is_file(f, "safetensors file") for f in files)
    if uncounted is not None and not complete:
        raise uncounted
    if complete:
        params, weight_bytes, file_bytes, dtype = _count_safetensors(files, tied)
        features.params, features.weight_bytes = params, weight_bytes
        features.params_source, features.source = "safetensors", "safetensors"
        features.checkpoint_bytes, features.dtype = file_bytes, dtype
        features.bytes_per_param = weight_bytes / params if params else features.bytes_per_param
    elif index is not None:
        total = _index_total_size(index, index_path)
        if total is not None:
            features.checkpoint_bytes = total
            features.source = "index"
            duplicate = _tied_duplicate_bytes(index, features)
            features.weight_bytes = total - duplicate
            if features.params:
                features.bytes_per_param = features.weight_bytes / features.params
    features.tokenizer_bytes = _tokenizer_bytes(directory)
    return features


def _weight_files(directory: Path, index: dict[str, Any] | None) -> list[Path]:
    if index is not None:
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ColdscopeError(f"malformed index in {directory}: no weight_map")
        names = sorted({str(v) for v in weight_map.values()})
        if len(names) > MAX_WEIGHT_FILES:
            raise ColdscopeError(f"malformed index in {directory}: more than "
                                 f"{MAX_WEIGHT_FILES} weight files")
        if not all(n.endswith(".safetensors") for n in names):
            return []  # a pytorch .bin index: no headers to read
        for n in names:  # weight files live in the model's directory, never beside or above it
            if Path(n).is_absolute() or ".." in Path(n).parts or "\x00" in n:
                raise ColdscopeError(f"malformed index in {directory}: weight file"
                                     f"{_shown(n[:200])} is outside the model directory")
        return [directory / n for n in names]
    return sorted(directory.glob("*.safetensors"))


def _count_safetensors(files: list[Path], tied: bool) -> tuple[int, int, int, str]:
    params = weight_bytes = file_bytes = tensors = 0
    by_dtype: dict[str, int] = {}
    for path in files:
        header = read_safetensors_header(path)
        file_bytes += path.stat().st_size
        tensors += len(header)
        if tensors > MAX_MODEL_TENSORS:
            raise ColdscopeError(f"the safetensors files in {path.parent} hold more than "
                                 f"{MAX_MODEL_TENSORS} tensors together; refused")
        for name, info in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape = info["dtype"], info["shape"]
                start, end = info["data_offsets"]
            except (KeyError, TypeError, ValueError) as exc:
                raise ColdscopeError(f"malformed tensor entry {_brief(name)} in {path}") \
                    from exc
            numel, nbytes = _tensor_size(name, dtype, shape, start, end, path)
            if tied and name.endswith("lm_head.weight"):
                continue  # the engine ties it to the embedding and never loads it
            params += numel
            weight_bytes += nbytes
            by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
        del header  # one file's entries at a time
    if params == 0:
        raise ColdscopeError(f"no tensors in {files[0].parent}")
    if params > MAX_TENSOR_ELEMENTS:
        raise ColdscopeError(f"the safetensors files in {files[0].parent} hold more than "
                             f"{MAX_TENSOR_ELEMENTS:.0e} parameters together, more than any "
                             "real model")
    dominant = max(by_dtype, key=lambda k: by_dtype[k])
    return params, weight_bytes, file_bytes, _SAFETENSORS_TO_TORCH.get(dominant, dominant.lower())


def _tensor_size(name: str, dtype: Any, shape: Any, start: Any, end: Any,
                 path: Path) -> tuple[int, int]:
    """(elements, bytes) of one safetensors tensor entry, refusing impossible ones.

    Called once per tensor of every header (up to ``MAX_HEADER_TENSORS`` per file), so the
    accepted case is a few exact type tests (``type(x) is int`` also refuses booleans) and one
    running product; the messages are built only on refusal."""
    size = DTYPE_BYTES.get(dtype) if type(dtype) is str and dtype.isupper() else None
    if size is None:
        raise ColdscopeError(f"tensor {_brief(name)} in {path} has an unknown dtype"
                             f"{_shown(dtype)}")
    # The count of dimensions and each dimension are bounded before multiplying, so the product
    # (and any message quoting it) stays a small number whatever the header claims.
    if type(shape) is not list or len(shape) > MAX_TENSOR_DIMS:
        detail = ("not a list of dimensions" if type(shape) is not list
                  else f"{len(shape)} dimensions, more than {MAX_TENSOR_DIMS}"
                  if _QUOTE_VALUES.get() else f"more than {MAX_TENSOR_DIMS} dimensions")
        raise ColdscopeError(f"tensor {_brief(name)} in {path} has an impossible shape "
                             f"({detail})")
    numel = 1
    for d in shape:
        if type(d) is not int or not 0 <= d <= MAX_TENSOR_ELEMENTS:
            raise ColdscopeError(f"tensor {_brief(name)} in {path} has an impossible shape "
                                 f"({_brief(shape) if _QUOTE_VALUES.get() else 'a dimension'}"
                                 f" is not a whole number in 0-{MAX_TENSOR_ELEMENTS:.0e})")
        numel *= d
    if numel > MAX_TENSOR_ELEMENTS:
        claims = f"{numel:.3g} elements" if _QUOTE_VALUES.get() else "too many elements"
        raise ColdscopeError(f"tensor {_brief(name)} in {path} claims {claims}, more than any "
                             "real model")
    if type(start) is not int or type(end) is not int or not 0 <= start <= end:
        raise ColdscopeError(f"tensor {_brief(name)} in {path} has impossible data offsets"
                             + (f" [{_brief(start)}, {_brief(end)}]" if _QUOTE_VALUES.get()
                                else ""))
    nbytes = end - start
    if nbytes != math.ceil(numel * size):
        raise ColdscopeError(
            f"tensor {_brief(name)} in {path}: " +
            (f"{numel} x {dtype} is {math.ceil(numel * size)} B but its data offsets span "
             f"{nbytes} B" if _QUOTE_VALUES.get()
             else "its data offsets do not span what its shape and dtype need"))
    return numel, nbytes


def _brief(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: a header's value quoted in a one-line error."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_SAFETENSORS_TO_TORCH = {"BF16": "bfloat16", "F16": "float16", "F32": "float32",
                         "F8_E4M3": "float8_e4m3fn", "U8": "uint8", "I8": "int8"}


def _index_total_size(index: dict[str, Any], path: Path | None) -> int | None:
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is None:
        return None
    try:
        return _bounded(total, "metadata.total_size", 0, MAX_TENSOR_ELEMENTS * 8)
    except ColdscopeError as exc:
        raise ColdscopeError(f"malformed total_size in {path}: {exc}") from None


def _tied_duplicate_bytes(index: dict[str, Any], f: ModelFeatures) -> int:
    """Bytes of an ``lm_head`` stored although tied: in the file, never loaded."""
    if f.tie_word_embeddings and any(n.endswith("lm_head.weight") for n in index["weight_map"]):
        return int((f.vocab_size or 0) * (f.hidden_size or 0) * f.bytes_per_param)
    return 0


def _tokenizer_bytes(directory: Path) -> int | None:
    main = directory / "tokenizer.json"
    if _is_file(main, "tokenizer file"):
        return main.stat().st_size
    others = [directory / n for n in ("tokenizer.model", "vocab.json", "merges.txt", "vocab.txt")]
    others += sorted(directory.glob("*.tiktoken"))
    sizes = [p.stat().st_size for p in others if _is_file(p, "tokenizer file")]
    return sum(sizes) if sizes else None


def _is_file(path: Path, what: str) -> bool:
    """``path.is_file()``, refused first when it resolves outside serve's confinement
    (``safeio.confined``): neither an answer nor a size may tell whether a file is there."""
    check_confined(path, what)
    return path.is_file()


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a model file, through the one reader of user files."""
    from coldscope.util.config_file import read_mapping
    if path.suffix != ".json":  # a features file without the suffix is still JSON
        data = loads_json(read_text(path, what="model file"), str(path))
        if not isinstance(data, dict):
            raise ColdscopeError(f"{path}: expected a JSON object")
        return data
    return read_mapping(path, "model file")


def _looks_like_hf_config(data: dict[str, Any]) -> bool:
    return "model_type" in data or "architectures" in data


def _opt_int(value: Any, name: str = "value", hi: int = MAX_DIM) -> int | None:
    return None if value is None else _bounded(value, name, 0, hi)


def _bounded(value: Any, name: str, lo: int, hi: int) -> int:
    """``value`` as an integer in [lo, hi]: a config's number that is not one is an error, not
    a loop over 10^30 layers or a negative parameter count."""
    number = _number(value, name)
    if not math.isfinite(number) or number != int(number) or not lo <= number <= hi:
        raise ColdscopeError(f"{name}{_shown(value, ' = ')} is not an integer in {lo}-{hi:,}")
    return int(number)


def _real(value: Any, name: str, lo: float, hi: float) -> float:
    """``value`` as a finite number in [lo, hi], or a one-line error naming ``name``."""
    number = _number(value, name)
    if not (math.isfinite(number) and lo <= number <= hi):
        raise ColdscopeError(f"{name}{_shown(value, ' = ')} is not a number in {lo:g}-{hi:g}")
    return number


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ColdscopeError(f"{name} must be a number{_shown(value, ', not ')}")
    try:
        return float(value)
    except ValueError:
        raise ColdscopeError(f"{name} must be a number{_shown(value, ', not ')}") from None
    except OverflowError:  # an integer of hundreds of digits
        return math.inf


# ---------------------------------------------------------------------------------------------
# architecture-aware parameter count


def _from_config(config: dict[str, Any], name: str, source: str) -> ModelFeatures:
    """Features from a Hugging Face config; parameters counted from the architecture."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    c = {**config, **text} if text else config
    model_type = str(c.get("model_type") or "")
    if not model_type:
        raise ColdscopeError(f"config of {name!r} has no model_type")
    layer_types = c.get("layer_types")
    hybrid = model_type in HYBRID_MODEL_TYPES or isinstance(layer_types, list) and any(
        str(t).lower() in ("mamba", "linear_attention") for t in layer_types
    )
    if hybrid or model_type not in SUPPORTED_MODEL_TYPES:
        what = "hybrid architecture" if hybrid else "unknown architecture"
        raise UncountableArchitecture(
            f"{what}{_shown(model_type)} for {name!r}: its parameters cannot be counted from the "
            "config; give the model directory with its safetensors files (config counts "
            f"support: {', '.join(sorted(SUPPORTED_MODEL_TYPES))})",
            kind="hybrid" if hybrid else "dense",
        )
    try:
        arch = _Arch.from_config(c, model_type)
        total, active = _count_decoder(arch)
    except ColdscopeError as exc:
        raise ColdscopeError(f"config of {name!r}: {exc}") from None
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        # a missing key is named; other messages may quote a value ("could not convert ...")
        detail = f": {exc}" if _QUOTE_VALUES.get() or isinstance(exc, KeyError) else ""
        raise ColdscopeError(f"config of {name!r} lacks or mangles a field{detail}") from None
    if total > MAX_TENSOR_ELEMENTS:
        raise ColdscopeError(f"config of {name!r} describes{_shown(total, ' ', ',')} more "
                             f"parameters than any real model ({MAX_TENSOR_ELEMENTS:.0e}): "
                             "check its sizes")
    dtype = _config_dtype(config, text)
    bpp = _dtype_bytes(dtype) or 2.0
    return ModelFeatures(
        name=name, source=source, model_type=model_type,
        kind="moe" if arch.num_experts else "dense",
        params=total, params_source="config", weight_bytes=int(round(total * bpp)),
        dtype=dtype, bytes_per_param=bpp, num_layers=arch.layers, hidden_size=arch.hidden,
        ffn_size=arch.ffn, num_heads=arch.heads, num_kv_heads=arch.kv_heads,
        head_dim=arch.head_dim, vocab_size=arch.vocab, tie_word_embeddings=arch.tied,
        is_moe=bool(arch.num_experts), num_experts=arch.num_experts or None,
        num_active_experts=arch.active_experts or None,
        active_params=active if arch.num_experts else None,
        graph_size=int(arch.layers * GRAPH_BYTES_PER_LAYER), graph_size_source="estimated",
    )


class UncountableArchitecture(ColdscopeError):
    """A config whose parameters this module cannot count (hybrid or unknown family)."""

    def __init__(self, message: str, kind: Kind) -> None:
        super().__init__(message)
        self.kind = kind


def _shape_only(config: dict[str, Any], name: str, kind: Kind) -> ModelFeatures:
    """Features of a config whose parameters only the weight files can count."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    c = {**config, **text} if text else config
    try:
        layers = _bounded(_first(c, "num_hidden_layers", "n_layer", "n_layers", "num_layers"),
                          "num_hidden_layers", 1, MAX_LAYERS)
    except KeyError:
        raise ColdscopeError(f"config of {name!r} has no layer count") from None
    except ColdscopeError as exc:
        raise ColdscopeError(f"config of {name!r}: {exc}") from None
    dtype = _config_dtype(config, text)
    experts = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts")
    return ModelFeatures(
        name=name, source="config", model_type=str(c.get("model_type")),
        kind=kind if kind == "hybrid" else ("moe" if experts else "dense"),
        params=0, params_source="none", weight_bytes=0, dtype=dtype,
        bytes_per_param=_dtype_bytes(dtype) or 2.0, num_layers=layers,
        hidden_size=_opt_int(c.get("hidden_size"), "hidden_size"),
        vocab_size=_opt_int(c.get("vocab_size"), "vocab_size"),
        num_heads=_opt_int(c.get("num_attention_heads"), "num_attention_heads"),
        num_kv_heads=_opt_int(c.get("num_key_value_heads"), "num_key_value_heads"),
        tie_word_embeddings=tied if isinstance(tied := c.get("tie_word_embeddings"), bool)
        else None, is_moe=bool(experts), num_experts=_opt_int(experts, "num_experts"),
        graph_size=int(layers * GRAPH_BYTES_PER_LAYER),
        graph_size_source="estimated",
    )


def _dtype_bytes(name: str | None) -> float | None:
    """Bytes per element of a dtype name (exact, then lower-cased); None if unknown."""
    if not name:
        return None
    return DTYPE_BYTES.get(name, DTYPE_BYTES.get(name.lower()))


def _config_dtype(config: dict[str, Any], text: dict[str, Any] | None) -> str | None:
    quant = config.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    if method in ("mxfp4", "fp8"):
        return method
    for c in (config, text or {}):
        value = c.get("torch_dtype") or c.get("dtype")
        if isinstance(value, str):
            return value.replace("torch.", "")
    return None


class _Arch:
    """The shape numbers a parameter count needs, normalised across config dialects."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    model_type: str
    num_experts: int
    active_experts: int
    c: dict[str, Any]

    @classmethod
    def from_config(cls, c: dict[str, Any], model_type: str) -> _Arch:
        def dim(value: Any, name: str, lo: int = 1, hi: int = MAX_DIM) -> int:
            return _bounded(value, name, lo, hi)

        hidden = dim(_first(c, "hidden_size", "n_embd", "d_model"), "hidden_size")
        heads = dim(_first(c, "num_attention_heads", "n_head", "n_heads"), "num_attention_heads")
        kv = c.get("num_key_value_heads", c.get("num_kv_heads", c.get("n_head_kv")))
        if model_type == "falcon" and kv is None:
            kv = 1 if c.get("multi_query", True) and not c.get("new_decoder_architecture") \
                else heads
        ffn = _first(c, "intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim", default=None)
        if model_type == "mpt":
            ffn = float(c.get("expansion_ratio", 4)) * hidden
            ffn = int(ffn) if math.isfinite(ffn) else ffn
        ffn = dim(ffn, "intermediate_size") if ffn else 4 * hidden
        tied = c.get("tie_word_embeddings")
        if tied is None:
            tied = model_type in TIED_BY_DEFAULT
        experts = dim(c.get("num_local_experts") or c.get("num_experts")
                      or c.get("n_routed_experts") or 0, "num_experts", 0)
        active = dim(c.get("num_experts_per_tok") or c.get("experts_per_token") or 0,
                     "num_experts_per_tok", 0)
        return cls(
            layers=dim(_first(c, "num_hidden_layers", "n_layer", "n_layers", "num_layers"),
                       "num_hidden_layers", 1, MAX_LAYERS),
            hidden=hidden, ffn=ffn, heads=heads,
            kv_heads=dim(kv if kv is not None else heads, "num_key_value_heads"),
            head_dim=dim(c.get("head_dim") or hidden // heads, "head_dim"),
            vocab=dim(c["vocab_size"], "vocab_size"), tied=bool(tied), model_type=model_type,
            num_experts=experts, active_experts=active, c=c,
        )


def _first(c: dict[str, Any], *keys: str, default: Any = KeyError) -> Any:
    for k in keys:
        if c.get(k) is not None:
            return c[k]
    if default is KeyError:
        raise KeyError(keys[0])
    return default


def _count_decoder(a: _Arch) -> tuple[int, int]:
    """(total, active) parameters of a decoder-only transformer described by ``a``."""
    c, h, t = a.c, a.hidden, a.model_type
    layernorm = t in ("falcon", "gpt2", "gpt_neox", "opt")  # weight and bias
    norm = 2 * h if layernorm else h
    if t == "mpt":
        norm = h if c.get("no_bias", True) else 2 * h

    # attention
    if t in ("deepseek_v2", "deepseek_v3"):
        attn = _mla_params(c, h, a.heads)
    else:
        q_out, kv_out = a.heads * a.head_dim, a.kv_heads * a.head_dim
        attn = h * q_out + 2 * h * kv_out + q_out * h
        bias = bool(c.get("attention_bias", c.get("bias", False))) or t in QKV_BIAS_TYPES
        if t in ("gpt2", "gpt_neox", "opt"):
            bias = True
        if t == "mpt":
            bias = not c.get("no_bias", True)
        if bias:
            attn += q_out + 2 * kv_out
            if t not in QKV_BIAS_TYPES:
                attn += h  # output projection bias
        if t in ("qwen3", "qwen3_moe"):
            attn += 2 * a.head_dim  # q_norm, k_norm
        if t == "gpt_oss":
            attn += a.heads  # attention sinks

    # MLP (dense) and norms per layer
    gated = t in GATED_MLP_TYPES
    mlp_bias = bool(c.get("mlp_bias", False)) or t in ("gpt2", "gpt_neox", "opt") or (
        t == "falcon" and c.get("bias", False))

    def dense_mlp(ffn: int) -> int:
        n = (3 if gated else 2) * h * ffn
        if mlp_bias:
            n += (2 * ffn if gated else ffn) + h
        return n

    if t == "falcon":
        two_ln = c.get("new_decoder_architecture") and c.get("num_ln_in_parallel_attn", 2) == 2
        norms = norm * (2 if two_ln or not c.get("parallel_attn", True) else 1)
    elif t in ("gemma2", "gemma3_text"):
        norms = 4 * norm  # pre/post attention and pre/post feed-forward
    else:
        norms = 2 * norm

    total = active = 0
    moe_ffn = int(c.get("moe_intermediate_size") or a.ffn)
    first_dense = int(c.get("first_k_dense_replace", 0))
    for layer in range(a.layers):
        base = attn + norms
        if a.num_experts and layer >= first_dense and _is_moe_layer(c, layer):
            expert = 3 * h * moe_ffn
            if t == "gpt_oss":
                expert += 2 * moe_ffn + h  # gate_up and down biases
            router = h * a.num_experts + (a.num_experts if t in ("gpt_oss", "deepseek_v3") else 0)
            shared = int(c.get("n_shared_experts") or 0) * 3 * h * moe_ffn
            if c.get("shared_expert_intermediate_size"):
                shared = 3 * h * int(c["shared_expert_intermediate_size"]) + h  # + its gate
            total += base + a.num_experts * expert + router + shared
            active += base + a.active_experts * expert + router + shared
        else:
            total += base + dense_mlp(a.ffn)
            active += base + dense_mlp(a.ffn)

    embed = a.vocab * h
    head = 0 if a.tied else a.vocab * h
    positions = 0
    if t in ("gpt2", "opt"):
        positions = int(_first(c, "n_positions", "max_position_embeddings")) * h
    final_norm = norm
    extra = embed + head + positions + final_norm
    return total + extra, active + extra


def _is_moe_layer(c: dict[str, Any], layer: int) -> bool:
    """Whether decoder layer ``layer`` (0-based) has experts, in each family's convention."""
    if layer in [int(x) for x in c.get("mlp_only_layers") or []]:
        return False
    if c.get("decoder_sparse_step"):  # Qwen MoE: every step-th layer, counted from 1
        return (layer + 1) % int(c["decoder_sparse_step"]) == 0
    if c.get("moe_layer_freq"):  # DeepSeek: every freq-th layer after the first dense ones
        return layer % int(c["moe_layer_freq"]) == 0
    return True


def _mla_params(c: dict[str, Any], h: int, heads: int) -> int:
    """Multi-head latent attention (DeepSeek V2/V3)."""
    nope, rope = int(c["qk_nope_head_dim"]), int(c["qk_rope_head_dim"])
    v_dim, kv_rank = int(c["v_head_dim"]), int(c["kv_lora_rank"])
    q_rank = c.get("q_lora_rank")
    q_head = heads * (nope + rope)
    q = h * q_head if not q_rank else h * int(q_rank) + int(q_rank) + int(q_rank) * q_head
    kv = h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v_dim)
    return q + kv + heads * v_dim * h


def describe(features: ModelFeatures) -> list[tuple[str, str]]:
    """Rows (label, value) for printing features to a person."""
    def gb(n: int | None) -> str:
        return "-" if n is None else f"{n / 1e9:.3f} GB"

    rows = [
        ("name", features.name), ("read from", features.source),
        ("architecture", f"{features.model_type or '?'} ({features.kind})"),
        ("parameters", f"{features.params:,} ({features.params / 1e9:.3f} B, "
                       f"{features.params_source})"),
        ("weight bytes", gb(features.weight_bytes)),
        ("dtype", f"{features.dtype or '?'} ({features.bytes_per_param:g} B/param)"),
        ("layers", str(features.num_layers)), ("hidden size", str(features.hidden_size)),
        ("FFN size", str(features.ffn_size)),
        ("heads / KV heads / head dim",
         f"{features.num_heads} / {features.num_kv_heads} / {features.head_dim}"),
        ("vocab", str(features.vocab_size)),
        ("tied embeddings", str(features.tie_word_embeddings)),
    ]
    if features.is_moe:
        rows += [("experts (active)", f"{features.num_experts} ({features.num_active_experts})"),
                 ("active parameters", f"{(features.active_params or 0) / 1e9:.3f} B")]
    tok = features.tokenizer_bytes
    rows.append(("tokenizer", "-" if tok is None else f"{tok / 2**20:.2f} MiB"))
    graph = features.graph_size
    rows.append(("compiled graphs", "-" if graph is None else
                 f"{graph / 1024:.0f} KiB ({features.graph_size_source})"))
    return rows

