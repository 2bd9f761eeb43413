"""Tests for playbook.verify.synthetic_gguf: real GGUF files written to tmp_path and read back with gguf-py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.quants import dequantize

from playbook.errors import ParameterError, PlaybookError
from playbook.verify.launcher import install_wheel
from playbook.verify.synthetic_gguf import (
    QUANT_TYPES,
    SHAPES,
    VOCAB_FILE_NAME,
    ModelSpec,
    bytes_per_weight,
    describe_gguf,
    find_vocab_gguf,
    write_synthetic_gguf,
)

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
TINY = SHAPES["tiny"]
N_TENSORS_TINY = 3 + 9 * TINY.n_layer  # token_embd, output_norm, output + 9 per block
FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7}  # llama_ftype / gguf.LlamaFileType


@pytest.fixture(scope="session")
def vocab_gguf() -> Path:
    path = DATA_DIR / VOCAB_FILE_NAME
    assert path.is_file(), f"missing test data {path}"
    return path


@pytest.fixture(scope="session")
def vocab_reader(vocab_gguf: Path) -> GGUFReader:
    return GGUFReader(vocab_gguf)


@pytest.fixture(scope="session")
def vocab_size(vocab_reader: GGUFReader) -> int:
    return len(vocab_reader.fields["tokenizer.ggml.tokens"].data)


@pytest.fixture(scope="module", params=QUANT_TYPES)
def tiny_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, vocab_gguf: Path):
    """(quant, path, reader) of a tiny model written once per quant type."""
    quant = request.param
    path = tmp_path_factory.mktemp(f"tiny-{quant}") / f"tiny-{quant}.gguf"
    assert write_synthetic_gguf(path, ModelSpec("tiny", quant), vocab_gguf) == path
    return quant, path, GGUFReader(path)


def expected_ne_shapes(n_vocab: int) -> dict[str, tuple[int, ...]]:
    """Tensor names and ggml shapes (ne) that llama.cpp's LLM_ARCH_LLAMA loader asks for."""
    n_embd, n_ff = TINY.n_embd, TINY.n_ff
    n_embd_kv = TINY.n_head_kv * (n_embd // TINY.n_head)
    shapes = {
        "token_embd.weight": (n_embd, n_vocab),
        "output_norm.weight": (n_embd,),
        "output.weight": (n_embd, n_vocab),
    }
    for i in range(TINY.n_layer):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (n_embd,),
            f"blk.{i}.attn_q.weight": (n_embd, n_embd),
            f"blk.{i}.attn_k.weight": (n_embd, n_embd_kv),
            f"blk.{i}.attn_v.weight": (n_embd, n_embd_kv),
            f"blk.{i}.attn_output.weight": (n_embd, n_embd),
            f"blk.{i}.ffn_norm.weight": (n_embd,),
            f"blk.{i}.ffn_gate.weight": (n_embd, n_ff),
            f"blk.{i}.ffn_up.weight": (n_embd, n_ff),
            f"blk.{i}.ffn_down.weight": (n_ff, n_embd),
        }
    return shapes


def field_value(reader: GGUFReader, key: str):
    assert key in reader.fields, f"missing metadata key {key}"
    return reader.fields[key].contents()


@pytest.mark.long
def test_describe_gguf_reports_the_tiny_model(tiny_model, vocab_size: int) -> None:
    quant, path, _ = tiny_model
    info = describe_gguf(path)
    assert info["architecture"] == "llama"
    assert info["n_layer"] == TINY.n_layer
    assert info["n_embd"] == TINY.n_embd
    assert info["n_head"] == TINY.n_head
    assert info["n_head_kv"] == TINY.n_head_kv
    assert info["n_ff"] == TINY.n_ff
    assert info["n_ctx_train"] == TINY.n_ctx_train
    assert info["n_vocab"] == vocab_size == 32000
    assert info["tensor_count"] == N_TENSORS_TINY
    assert info["file_size_bytes"] == path.stat().st_size
    assert info["file_type"] == {"F32": "ALL_F32", "F16": "MOSTLY_F16"}.get(quant, f"MOSTLY_{quant}")
    assert info["quant_types"] == sorted({"F32", quant})
    assert info["tensor_type_counts"].get(quant) == (N_TENSORS_TINY if quant == "F32" else 7 * TINY.n_layer + 2)
    assert info["n_params"] == sum(int(np.prod(s)) for s in expected_ne_shapes(vocab_size).values())
    assert info["split_count"] == 1


def test_tensor_names_shapes_and_types_match_llama_cpp(tiny_model, vocab_size: int) -> None:
    quant, _, reader = tiny_model
    expected = expected_ne_shapes(vocab_size)
    tensors = {t.name: t for t in reader.tensors}
    assert len(reader.tensors) == len(tensors) == N_TENSORS_TINY
    assert set(tensors) == set(expected)
    for name, ne in expected.items():
        tensor = tensors[name]
        assert tuple(int(d) for d in tensor.shape) == ne, name
        want = GGMLQuantizationType.F32 if len(ne) == 1 else GGMLQuantizationType[quant]
        assert tensor.tensor_type == want, name


def test_metadata_has_every_key_llama_cpp_reads_for_llama(tiny_model) -> None:
    quant, _, reader = tiny_model
    assert field_value(reader, "general.architecture") == "llama"
    assert field_value(reader, "general.file_type") == FILE_TYPES[quant]
    assert field_value(reader, "general.quantization_version") == 2
    assert field_value(reader, "llama.context_length") == TINY.n_ctx_train
    assert field_value(reader, "llama.embedding_length") == TINY.n_embd
    assert field_value(reader, "llama.block_count") == TINY.n_layer
    assert field_value(reader, "llama.feed_forward_length") == TINY.n_ff
    assert field_value(reader, "llama.attention.head_count") == TINY.n_head
    assert field_value(reader, "llama.attention.head_count_kv") == TINY.n_head_kv
    assert field_value(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    # llama.cpp rejects llama models whose n_rot differs from the head size
    assert field_value(reader, "llama.rope.dimension_count") == TINY.n_embd // TINY.n_head
    assert field_value(reader, "llama.vocab_size") == 32000
    # the counted types must be exact: llama.cpp reads these as uint32 / float32
    for key in ("llama.context_length", "llama.block_count", "llama.embedding_length", "llama.attention.head_count"):
        assert reader.fields[key].types == [GGUFValueType.UINT32], key
    assert reader.fields["llama.attention.layer_norm_rms_epsilon"].types == [GGUFValueType.FLOAT32]


def test_tokenizer_is_copied_from_the_vocab_file(tiny_model, vocab_reader: GGUFReader) -> None:
    _, _, reader = tiny_model
    tokenizer_keys = [k for k in vocab_reader.fields if k.startswith("tokenizer.")]
    for key in (
        "tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.add_bos_token",
    ):
        assert key in tokenizer_keys
    for key in tokenizer_keys:
        src, dst = vocab_reader.fields[key], reader.fields[key]
        assert dst.types == src.types, key
        assert dst.contents() == src.contents(), key


def test_file_size_matches_bytes_per_weight(tiny_model, vocab_size: int) -> None:
    quant, path, _ = tiny_model
    shapes = expected_ne_shapes(vocab_size).values()
    weights = sum(int(np.prod(s)) for s in shapes if len(s) == 2)
    norms = sum(int(np.prod(s)) for s in shapes if len(s) == 1)
    tensor_bytes = weights * bytes_per_weight(quant) + norms * 4
    # the rest is metadata (mostly the 32000-token vocabulary, ~0.7 MB) and alignment padding
    assert tensor_bytes < path.stat().st_size < tensor_bytes + 2_000_000
    assert bytes_per_weight(quant) == {"F32": 4, "F16": 2, "Q8_0": 34 / 32, "Q4_0": 18 / 32}[quant]


def test_weights_are_small_random_and_finite(tiny_model) -> None:
    quant, _, reader = tiny_model
    tensors = {t.name: t for t in reader.tensors}
    if quant == "Q8_0":  # like ggml's quantizer: int8 quants in [-127, 127]
        quants = np.asarray(tensors["blk.0.ffn_up.weight"].data).reshape(-1, 34)[:, 2:].view(np.int8)
        assert quants.min() == -127 and quants.max() == 127
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.3.ffn_down.weight", "output.weight"):
        tensor = tensors[name]
        values = dequantize(tensor.data, tensor.tensor_type).astype(np.float64)
        assert np.isfinite(values).all(), name
        assert 0.015 < values.std() < 0.025, name
        assert abs(values.mean()) < 0.001, name  # no systematic bias (Q4_0 quants average -0.5)
        assert len(np.unique(values[:4].ravel())) > 100, name
    for name in ("output_norm.weight", "blk.0.attn_norm.weight"):
        norm = np.asarray(tensors[name].data)
        assert norm.dtype == np.float32
        assert np.all(np.abs(norm - 1.0) < 0.2), name
    different = tensors["blk.0.attn_q.weight"].data.tobytes() != tensors["blk.1.attn_q.weight"].data.tobytes()
    assert different, "each tensor must get its own random data"


@pytest.mark.parametrize("quant", ["Q4_0", "F16"])
def test_same_seed_same_file_other_seed_differs(tmp_path: Path, vocab_gguf: Path, quant: str) -> None:
    first = write_synthetic_gguf(tmp_path / "a.gguf", ModelSpec("tiny", quant, seed=0), vocab_gguf)
    again = write_synthetic_gguf(tmp_path / "b.gguf", ModelSpec("tiny", quant, seed=0), vocab_gguf)
    other = write_synthetic_gguf(tmp_path / "c.gguf", ModelSpec("tiny", quant, seed=1), vocab_gguf)
    assert first.read_bytes() == again.read_bytes()
    assert other.stat().st_size == first.stat().st_size
    first_bytes, other_bytes = np.fromfile(first, np.uint8), np.fromfile(other, np.uint8)
    assert (first_bytes != other_bytes).mean() > 0.5  # the weights differ, not just the name


def test_write_creates_parent_and_leaves_no_partial_file(tmp_path: Path, vocab_gguf: Path) -> None:
    path = tmp_path / "new" / "dir" / "model.gguf"
    write_synthetic_gguf(path, ModelSpec("tiny", "Q4_0"), vocab_gguf)
    assert [p.name for p in path.parent.iterdir()] == ["model.gguf"]


def test_write_with_missing_vocab_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError, match="does not exist"):
        write_synthetic_gguf(tmp_path / "m.gguf", ModelSpec("tiny", "Q8_0"), tmp_path / "nope.gguf")
    assert not list(tmp_path.iterdir())


def test_model_spec_rejects_unknown_values() -> None:
    with pytest.raises(ParameterError, match="tiny"):
        ModelSpec("13b", "Q8_0")
    with pytest.raises(ParameterError, match="Q4_0"):
        ModelSpec("tiny", "Q5_K")
    with pytest.raises(ParameterError, match="seed"):
        ModelSpec("tiny", "Q8_0", seed=-1)


def test_shapes_are_consistent() -> None:
    assert {"tiny", "1b", "7b"} <= set(SHAPES)
    assert (SHAPES["1b"].n_embd, SHAPES["1b"].n_layer, SHAPES["1b"].n_head, SHAPES["1b"].n_head_kv) == (2048, 16, 32, 8)
    assert (SHAPES["7b"].n_embd, SHAPES["7b"].n_layer, SHAPES["7b"].n_ff) == (4096, 32, 11008)
    for name, shape in SHAPES.items():
        assert shape.name == name
        assert shape.n_embd % shape.n_head == 0 and shape.n_head % shape.n_head_kv == 0
        assert shape.n_embd % 32 == 0 and shape.n_ff % 32 == 0  # quant block size


def test_find_vocab_gguf_in_a_source_tree(tmp_path: Path, vocab_gguf: Path) -> None:
    target = tmp_path / "vendor" / "llama.cpp" / "models" / VOCAB_FILE_NAME
    target.parent.mkdir(parents=True)
    shutil.copy(vocab_gguf, target)
    assert find_vocab_gguf(tmp_path) == target


def test_find_vocab_gguf_missing_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError) as info:
        find_vocab_gguf(tmp_path)
    message = str(info.value)
    assert str(tmp_path / "vendor" / "llama.cpp" / "models" / VOCAB_FILE_NAME) in message
    assert "sdist" in message and "git submodule update --init" in message
    assert "your own GGUF" in message


def test_describe_gguf_rejects_missing_and_non_gguf_files(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError, match="does not exist"):
        describe_gguf(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(PlaybookError, match="not a readable GGUF"):
        describe_gguf(junk)


def test_describe_gguf_on_a_vocab_only_file(vocab_gguf: Path) -> None:
    info = describe_gguf(vocab_gguf)
    assert info["architecture"] == "llama"
    assert info["tensor_count"] == 0 and info["quant_types"] == []
    assert info["n_vocab"] == 32000


# Run in a child with the wheel on its path: a crash there (ggml's CPU AMX repacking of Q8_0/Q4_0 faulted on a
# VM without working AMX) fails the test instead of taking the whole test process down.
LOAD_AND_EVAL = """
import json, sys
import numpy as np
import llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_ctx=64, n_gpu_layers=0, logits_all=True, verbose=False)
tokens = llm.tokenize(b"Hello, world")
llm.eval(tokens)
logits = np.asarray(llm.scores[: len(tokens)])
print(json.dumps({"n_vocab": llm.n_vocab(), "finite": bool(np.isfinite(logits).all()), "std": float(logits.std()),
                  "module": llama_cpp.__file__}))
"""


@pytest.mark.slow
def test_llama_cpp_loads_and_runs_the_tiny_model(tmp_path: Path, vocab_gguf: Path, cpu_wheel: Path) -> None:
    """The real llama-cpp-python (conftest's cpu_wheel: built once per session where none is given) reads the
    written file as a model and computes finite, varied logits."""
    site = tmp_path / "site"
    installed = install_wheel(cpu_wheel, site)
    assert installed.returncode == 0, installed.stderr
    # F16: the quantized CPU kernels fault on this project's development VM (cpu-amx-fault); the quant types
    # are checked above against gguf-py.
    path = write_synthetic_gguf(tmp_path / "tiny.gguf", ModelSpec("tiny", "F16"), vocab_gguf)
    child = subprocess.run([sys.executable, "-c", LOAD_AND_EVAL, str(path)], check=False, capture_output=True,
                           text=True,
                           timeout=300, env={**os.environ, "PYTHONPATH": str(site)})
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.splitlines()[-1])
    assert Path(result["module"]).is_relative_to(site)
    assert result["n_vocab"] == 32000 and result["finite"] and result["std"] > 0
