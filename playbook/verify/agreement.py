"""GPU against CPU: the same tokens' logits with all layers offloaded and with none, within the
quantization's tolerance (``playbook/knowledge/tolerances.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from playbook.knowledge.compatibility import knowledge


@dataclass
class Agreement:
    positions: int
    relative_error: float
    top1_agreement: float
    max_relative_error: float
    min_top1_agreement: float
    ok: bool
    top1_in_cpu_top5: float = 0.0  # near-ties in random-weight models swap places; this shows it


def tolerances() -> dict[str, dict[str, float]]:
    return knowledge("tolerances")["tolerances"]


def compare_logits(cpu_file: Path, gpu_file: Path, n_vocab: int, quant: str) -> Agreement:
    import numpy as np  # the parent never loads llama_cpp, so numpy is safe here

    cpu = np.fromfile(cpu_file, dtype=np.float32).reshape(-1, n_vocab).astype(np.float64)
    gpu = np.fromfile(gpu_file, dtype=np.float32).reshape(-1, n_vocab).astype(np.float64)
    rel = float(np.linalg.norm(gpu - cpu) / max(float(np.linalg.norm(cpu)), 1e-30))
    top1 = float(np.mean(cpu.argmax(axis=1) == gpu.argmax(axis=1)))
    cpu_top5 = np.argsort(cpu, axis=1)[:, -5:]
    in_top5 = float(np.mean([g in row for g, row in zip(gpu.argmax(axis=1), cpu_top5)]))
    limits = tolerances().get(quant, tolerances()["default"])
    ok = bool(np.isfinite(gpu).all()) and rel <= limits["relative_error"] and top1 >= limits["top1_agreement"]
    return Agreement(cpu.shape[0], rel, top1, limits["relative_error"], limits["top1_agreement"], ok, in_top5)
