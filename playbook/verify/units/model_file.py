"""The model: the user's GGUF or a synthetic one (written once per shape, quant and seed into the
cache), and what its header says (layers, size). A model that cannot be written or read stops verify
with the finding that names why."""

from __future__ import annotations

import errno
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.errors import PlaybookError
from playbook.knowledge.failures import finding_for, unrecognised
from playbook.params import ModelParams
from playbook.verify.measurement import Measured, VerifyContext

# No space left, a file past the size limit (ulimit -f), a quota: the write failed for want of room.
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
VOCAB_NAME = "ggml-vocab-llama-spm.gguf"


@dataclass
class ModelFile:
    """The GGUF every unit after this one loads."""

    path: Path
    """Where it is (the cache's synthetic model, or model.path)."""
    description: dict[str, Any] = field(default_factory=dict)
    """Its header: architecture, n_layer, file_size_bytes ... (synthetic_gguf.describe_gguf)."""

    @property
    def n_layer(self) -> int:
        """Its block count; 0 for an architecture the reader does not know (measured on the CPU only)."""
        return int(self.description["n_layer"]) if self.description.get("n_layer") is not None else 0


class ModelFileUnit:
    name = "model"
    value_type = ModelFile

    def skip_reason(self, ctx: VerifyContext) -> str:
        return ""

    def measure(self, ctx: VerifyContext) -> Measured[ModelFile]:
        from playbook.verify.synthetic_gguf import describe_gguf

        cache_dir = ctx.request.cache_dir
        try:
            model = ModelFile(prepare_model(ctx.params.model, ctx.request.source_path, cache_dir))
        except OSError as error:  # the synthetic model's write: a full disk must not end verify unrecorded
            evidence = f"writing the model: {error}"
            failure = (finding_for("disk-full", evidence, stage="load") if error.errno in FULL_DISK_ERRNOS
                       else unrecognised(evidence, "load"))
            return Measured(ModelFile(cache_dir / "models"), [failure], stop=evidence)
        try:
            model.description = describe_gguf(model.path)
        except Exception as error:  # noqa: BLE001 gguf's reader names the damage: truncated, not GGUF, bad header
            evidence = f"gguf_init_from_file: failed to read {model.path}: {type(error).__name__}: {error}"
            return Measured(model, [finding_for("model-unreadable", evidence, stage="load")],
                            stop=f"the model {model.path.name} cannot be read ({type(error).__name__}: {error})")
        return Measured(model)



def vocab_from_source(source_path: Path, cache_dir: Path) -> Path:
    """The llama-spm vocabulary GGUF shipped in the llama.cpp source: a tree, or inside the sdist."""
    from playbook.verify.synthetic_gguf import find_vocab_gguf

    if source_path.is_dir():
        return find_vocab_gguf(source_path)
    target = cache_dir / "vocab" / VOCAB_NAME
    if not target.is_file():
        with tarfile.open(source_path) as sdist:
            member = next((m for m in sdist.getmembers() if m.name.endswith(f"vendor/llama.cpp/models/{VOCAB_NAME}")), None)
            if member is None:
                raise PlaybookError(f"{source_path} has no vendor/llama.cpp/models/{VOCAB_NAME}; set model.path")
            target.parent.mkdir(parents=True, exist_ok=True)
            extracted = sdist.extractfile(member)
            assert extracted is not None
            target.write_bytes(extracted.read())
    return target


def prepare_model(model: ModelParams, source_path: Path, cache_dir: Path) -> Path:
    """The user's GGUF, or a synthetic one written once per shape, quant and seed and then reused."""
    from playbook.verify.synthetic_gguf import ModelSpec, write_synthetic_gguf

    if model.path:
        return Path(model.path).expanduser().resolve()
    path = cache_dir / "models" / f"synthetic-llama-{model.shape}-{model.quant}-seed{model.seed}.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        write_synthetic_gguf(partial, ModelSpec(model.shape, model.quant, model.seed), vocab_from_source(source_path, cache_dir))
        partial.replace(path)
    return path


MODEL_FILE = ModelFileUnit()
