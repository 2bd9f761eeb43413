"""Synthetic llama GGUF models with random weights, for checking that a build loads and runs models.

The tokenizer comes from the vocab-only GGUF that ships with llama.cpp
(``vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf`` in the llama-cpp-python sdist),
so the file is a complete, loadable llama model; its output is meaningless.
Tensors are generated and written one at a time, so memory stays at about one tensor.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from gguf import (
    GGML_QUANT_SIZES,
    GGML_QUANT_VERSION,
    GGMLQuantizationType,
    GGUFReader,
    GGUFValueType,
    GGUFWriter,
    LlamaFileType,
)

from playbook.errors import ParameterError, PlaybookError

ARCHITECTURE = "llama"
VOCAB_FILE_NAME = "ggml-vocab-llama-spm.gguf"
VOCAB_PATH_IN_SOURCE = Path("vendor", "llama.cpp", "models", VOCAB_FILE_NAME)
WEIGHT_STD = 0.02
NORM_STD = 0.02  # norm weights are 1 + N(0, NORM_STD)
RMS_NORM_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0


@dataclass(frozen=True)
class ModelShape:
    """Hyperparameters of a llama model; the vocabulary size comes from the vocab file."""

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx_train: int

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


SHAPES: dict[str, ModelShape] = {
    shape.name: shape
    for shape in (
        # Head size 64 (not 32) so that GPU kernels such as flash attention take their usual path;
        # n_head_kv < n_head exercises grouped-query attention.
        ModelShape("tiny", n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=768, n_ctx_train=2048),
        # Llama 3.2 1B dimensions; its real 128k training context would make n_ctx=0 allocate a huge KV cache.
        ModelShape("1b", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, n_ff=8192, n_ctx_train=8192),
        ModelShape("7b", n_embd=4096, n_layer=32, n_head=32, n_head_kv=32, n_ff=11008, n_ctx_train=4096),
    )
}

QUANT_TYPES = ("F32", "F16", "Q8_0", "Q4_0")

_GGML_TYPES: dict[str, GGMLQuantizationType] = {
    "F32": GGMLQuantizationType.F32,
    "F16": GGMLQuantizationType.F16,
    "Q8_0": GGMLQuantizationType.Q8_0,
    "Q4_0": GGMLQuantizationType.Q4_0,
}
_FILE_TYPES: dict[str, LlamaFileType] = {
    "F32": LlamaFileType.ALL_F32,
    "F16": LlamaFileType.MOSTLY_F16,
    "Q8_0": LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": LlamaFileType.MOSTLY_Q4_0,
}
# Standard deviation of the integer quants when every byte of a block is uniformly random:
# Q8_0 quants are int8 in [-127, 127] (-128 clamped), Q4_0 quants are nibbles minus 8, in [-8, 7].
_QUANT_STD = {
    GGMLQuantizationType.Q8_0: float(np.sqrt((255**2 - 1) / 12)),
    GGMLQuantizationType.Q4_0: float(np.sqrt((16**2 - 1) / 12)),
}


def bytes_per_weight(quant: str) -> float:
    """Average bytes per weight of a quant type, block scales included."""
    block_size, type_size = GGML_QUANT_SIZES[_GGML_TYPES[quant]]
    return type_size / block_size


@dataclass(frozen=True)
class ModelSpec:
    """What to write: a shape from SHAPES, a quant type from QUANT_TYPES and the random seed."""

    shape: str
    quant: str
    seed: int = 0

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ParameterError(f"unknown model shape {self.shape!r}; choose one of {sorted(SHAPES)}")
        if self.quant not in QUANT_TYPES:
            raise ParameterError(f"unknown quant type {self.quant!r}; choose one of {list(QUANT_TYPES)}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ParameterError(f"seed must be a non-negative integer, got {self.seed!r}")

    @property
    def model_shape(self) -> ModelShape:
        return SHAPES[self.shape]


@dataclass(frozen=True)
class _TensorPlan:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, columns); ggml's ne is the reverse
    ggml_type: GGMLQuantizationType

    @property
    def nbytes(self) -> int:
        block_size, type_size = GGML_QUANT_SIZES[self.ggml_type]
        return int(np.prod(self.shape)) // block_size * type_size


def _tensor_plan(shape: ModelShape, n_vocab: int, quant: str) -> list[_TensorPlan]:
    """Every tensor llama.cpp's LLM_ARCH_LLAMA loader requires, in convert_hf_to_gguf's order."""
    weight_type = _GGML_TYPES[quant]
    f32 = GGMLQuantizationType.F32
    n_q = shape.n_head * shape.head_dim
    n_kv = shape.n_head_kv * shape.head_dim
    plan = [_TensorPlan("token_embd.weight", (n_vocab, shape.n_embd), weight_type)]
    for i in range(shape.n_layer):
        plan += [
            _TensorPlan(f"blk.{i}.attn_norm.weight", (shape.n_embd,), f32),
            _TensorPlan(f"blk.{i}.attn_q.weight", (n_q, shape.n_embd), weight_type),
            _TensorPlan(f"blk.{i}.attn_k.weight", (n_kv, shape.n_embd), weight_type),
            _TensorPlan(f"blk.{i}.attn_v.weight", (n_kv, shape.n_embd), weight_type),
            _TensorPlan(f"blk.{i}.attn_output.weight", (shape.n_embd, n_q), weight_type),
            _TensorPlan(f"blk.{i}.ffn_norm.weight", (shape.n_embd,), f32),
            _TensorPlan(f"blk.{i}.ffn_gate.weight", (shape.n_ff, shape.n_embd), weight_type),
            _TensorPlan(f"blk.{i}.ffn_up.weight", (shape.n_ff, shape.n_embd), weight_type),
            _TensorPlan(f"blk.{i}.ffn_down.weight", (shape.n_embd, shape.n_ff), weight_type),
        ]
    plan += [
        _TensorPlan("output_norm.weight", (shape.n_embd,), f32),
        _TensorPlan("output.weight", (n_vocab, shape.n_embd), weight_type),
    ]
    block_size = GGML_QUANT_SIZES[weight_type][0]
    for tensor in plan:
        if tensor.shape[-1] % block_size:
            raise ParameterError(
                f"{tensor.name}: row length {tensor.shape[-1]} is not a multiple of {quant}'s block size {block_size}"
            )
    return plan


def _random_tensor(tensor: _TensorPlan, rng: np.random.Generator) -> np.ndarray:
    """Random data for one tensor: float arrays, or the raw bytes of quantized blocks (uint8, rows x row bytes)."""
    if len(tensor.shape) == 1:
        return (1.0 + NORM_STD * rng.standard_normal(tensor.shape, dtype=np.float32)).astype(np.float32)
    if tensor.ggml_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        values = WEIGHT_STD * rng.standard_normal(tensor.shape, dtype=np.float32)
        return values if tensor.ggml_type == GGMLQuantizationType.F32 else values.astype(np.float16)
    # Quantized: fill every block with random bytes (these are the quants), then overwrite
    # the leading fp16 scale of each block. Scales vary by +-25% per block so that a kernel
    # reading the wrong block's scale gives a visibly different result.
    block_size, type_size = GGML_QUANT_SIZES[tensor.ggml_type]
    n_blocks = int(np.prod(tensor.shape)) // block_size
    n_bytes = n_blocks * type_size
    data = rng.bit_generator.random_raw(-(-n_bytes // 8)).view(np.uint8)[:n_bytes]
    blocks = data.reshape(n_blocks, type_size)
    if tensor.ggml_type == GGMLQuantizationType.Q8_0:  # ggml's own quantizer never emits -128
        quants = blocks[:, 2:].view(np.int8)
        np.maximum(quants, -127, out=quants)
    scales = rng.random(n_blocks, dtype=np.float32)
    scales *= 0.5
    scales += 0.75
    scales *= WEIGHT_STD / _QUANT_STD[tensor.ggml_type]
    if tensor.ggml_type == GGMLQuantizationType.Q4_0:
        # Q4_0 quants average -0.5; random scale signs (ggml's quantizer makes negative ones too)
        # cancel that bias, which otherwise shifts activations and logits in deep models.
        scales[rng.random(n_blocks, dtype=np.float32) < 0.5] *= -1
    blocks[:, :2] = scales.astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return data.reshape(tensor.shape[0], -1)


@dataclass(frozen=True)
class _KeyValue:
    key: str
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


def _read_tokenizer(vocab_gguf: Path) -> tuple[tuple[_KeyValue, ...], int]:
    """All ``tokenizer.*`` key-values of a GGUF file, values copied as they are, and the vocabulary size."""
    if not vocab_gguf.is_file():
        raise PlaybookError(f"vocab file {vocab_gguf} does not exist; pass llama.cpp's models/{VOCAB_FILE_NAME}")
    path = vocab_gguf.resolve()
    stat = path.stat()
    return _read_tokenizer_cached(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)
def _read_tokenizer_cached(vocab_gguf: Path, mtime_ns: int, size: int) -> tuple[tuple[_KeyValue, ...], int]:
    # GGUFReader takes over a second for a 32000-token vocabulary; cached per file version.
    reader = _open_gguf(vocab_gguf)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise PlaybookError(
            f"{vocab_gguf} has no tokenizer.ggml.tokens, so it cannot provide a vocabulary; "
            f"pass llama.cpp's models/{VOCAB_FILE_NAME}"
        )
    kvs: list[_KeyValue] = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main_type = field.types[0]
        if main_type == GGUFValueType.ARRAY:
            sub_type = field.types[1]
            if sub_type == GGUFValueType.ARRAY:
                raise PlaybookError(f"{vocab_gguf}: nested array {key} is not supported")
            if sub_type == GGUFValueType.STRING:  # raw bytes: no decode/encode round trip
                value: Any = [bytes(field.parts[i]) for i in field.data]
            else:
                value = field.contents()
            kvs.append(_KeyValue(key, value, main_type, sub_type))
        elif main_type == GGUFValueType.STRING:
            kvs.append(_KeyValue(key, bytes(field.parts[field.data[0]]), main_type))
        else:
            kvs.append(_KeyValue(key, field.contents(), main_type))
    return tuple(kvs), len(tokens.data)


def _add_metadata(writer: GGUFWriter, spec: ModelSpec, n_vocab: int, tokenizer: tuple[_KeyValue, ...]) -> None:
    shape = spec.model_shape
    writer.add_type("model")
    writer.add_name(f"playbook synthetic {shape.name} {spec.quant} seed {spec.seed}")
    writer.add_description("Random weights for testing a llama.cpp build; the output is meaningless.")
    writer.add_file_type(_FILE_TYPES[spec.quant])
    writer.add_quantization_version(GGML_QUANT_VERSION)
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    for kv in tokenizer:
        writer.add_key_value(kv.key, kv.value, kv.vtype, kv.sub_type)


def write_synthetic_gguf(path: Path, spec: ModelSpec, vocab_gguf: Path) -> Path:
    """Write a loadable llama GGUF with random weights and the vocab file's tokenizer; returns ``path``.

    The file appears at ``path`` only when complete (written to ``<path>.part``, then renamed).
    """
    path = Path(path)
    tokenizer, n_vocab = _read_tokenizer(Path(vocab_gguf))
    plan = _tensor_plan(spec.model_shape, n_vocab, spec.quant)

    path.parent.mkdir(parents=True, exist_ok=True)
    needed = sum(t.nbytes for t in plan) + 64 * 1024 * 1024
    free = shutil.disk_usage(path.parent).free
    if free < needed:
        raise PlaybookError(
            f"{spec.shape} {spec.quant} needs about {needed / 1e9:.1f} GB but {path.parent} has "
            f"{free / 1e9:.1f} GB free; free space or choose a smaller shape or quant"
        )

    part = path.with_name(path.name + ".part")
    writer = GGUFWriter(part, ARCHITECTURE)
    try:
        _add_metadata(writer, spec, n_vocab, tokenizer)
        for tensor in plan:
            if tensor.ggml_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                dtype = np.dtype(np.float32 if tensor.ggml_type == GGMLQuantizationType.F32 else np.float16)
                writer.add_tensor_info(tensor.name, tensor.shape, dtype, tensor.nbytes)
            else:  # byte shape; gguf converts it back to the element shape
                byte_shape = (tensor.shape[0], tensor.nbytes // tensor.shape[0])
                writer.add_tensor_info(tensor.name, byte_shape, np.dtype(np.uint8), tensor.nbytes, tensor.ggml_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for index, tensor in enumerate(plan):
            # One generator per tensor, keyed by (seed, index): reproducible and independent of the others.
            rng = np.random.default_rng([spec.seed, index])
            writer.write_tensor_data(_random_tensor(tensor, rng))
        writer.close()
        os.replace(part, path)
    except BaseException:
        writer.close()
        part.unlink(missing_ok=True)
        raise
    return path


def find_vocab_gguf(source_dir: Path) -> Path:
    """The llama SPM vocab GGUF inside a llama-cpp-python source tree (unpacked sdist or checkout)."""
    source_dir = Path(source_dir)
    candidates = [
        source_dir / VOCAB_PATH_IN_SOURCE,
        source_dir / "models" / VOCAB_FILE_NAME,  # source_dir is llama.cpp itself
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise PlaybookError(
        f"no {VOCAB_FILE_NAME} in {source_dir} (looked for {candidates[0]}). "
        "Pass the root of an unpacked llama-cpp-python sdist, or of a git checkout with its "
        "submodule (git submodule update --init vendor/llama.cpp); or pass the path of a "
        f"{VOCAB_FILE_NAME} file directly as the vocab file; or use your own GGUF model instead of a synthetic one."
    )


def _open_gguf(path: Path) -> GGUFReader:
    if not path.is_file():
        raise PlaybookError(f"GGUF file {path} does not exist; check the path")
    try:
        return GGUFReader(path)
    except (ValueError, OSError, KeyError, IndexError) as exc:
        raise PlaybookError(f"{path} is not a readable GGUF file ({exc}); pass a .gguf model file") from exc


def _scalar(reader: GGUFReader, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _file_type_name(file_type: Any) -> Any:
    try:
        return LlamaFileType(file_type).name
    except ValueError:
        return file_type  # None, or a type newer than this gguf package


def describe_gguf(path: Path) -> dict[str, Any]:
    """Summary of any GGUF model: architecture, sizes, tensor count and the tensor types present.

    Keys the file lacks are None. ``n_ff``, ``n_head`` and ``n_head_kv`` may be per-layer lists.
    A split model's first shard describes only its own tensors (``split_count`` > 1).
    """
    path = Path(path)
    reader = _open_gguf(path)
    arch = _scalar(reader, "general.architecture")

    def arch_key(name: str) -> Any:
        return _scalar(reader, f"{arch}.{name}") if arch else None

    tokens = reader.fields.get("tokenizer.ggml.tokens")
    file_type = _scalar(reader, "general.file_type")
    type_counts = Counter(t.tensor_type.name for t in reader.tensors)
    return {
        "path": str(path),
        "architecture": arch,
        "name": _scalar(reader, "general.name"),
        "n_layer": arch_key("block_count"),
        "n_embd": arch_key("embedding_length"),
        "n_head": arch_key("attention.head_count"),
        "n_head_kv": arch_key("attention.head_count_kv"),
        "n_ff": arch_key("feed_forward_length"),
        "n_ctx_train": arch_key("context_length"),
        "n_vocab": len(tokens.data) if tokens is not None else arch_key("vocab_size"),
        "file_type": _file_type_name(file_type),
        "file_size_bytes": path.stat().st_size,
        "tensor_count": len(reader.tensors),
        "n_params": int(sum(int(t.n_elements) for t in reader.tensors)),
        "quant_types": sorted(type_counts),
        "tensor_type_counts": dict(sorted(type_counts.items())),
        "split_count": _scalar(reader, "split.count") or 1,
    }
