from __future__ import annotations

import json
from pathlib import Path

import pytest

from playbook.detect import CudaToolkit, Facts, Gpu, NvidiaDriver, detect
from playbook.facts import from_dict

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def this_machine() -> Facts:
    return detect()


def make_facts(base: Facts, *, gpus: list[Gpu] | None = None, toolkits: list[CudaToolkit] | None = None,
               driver: NvidiaDriver | None = None) -> Facts:
    """A copy of real facts with the GPU side replaced: a machine we cannot run here."""
    import dataclasses

    facts = from_dict(Facts, json.loads(json.dumps(dataclasses.asdict(base))))
    if gpus is not None:
        facts.gpus = gpus
    if toolkits is not None:
        facts.cuda_toolkits = toolkits
    if driver is not None:
        facts.driver = driver
    return facts


def toolkit(version: str, root: str = "/usr/local/cuda", cublas: bool = True, cccl: bool = True) -> CudaToolkit:
    headers = {"nv/target": cccl, "cub/cub.cuh": cccl, "thrust": cccl}
    return CudaToolkit(root, "standard location", f"{root}/bin/nvcc", version, headers, cublas)


H100 = Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "9.0", 5120, 2619)
RTX_4070 = Gpu(0, "NVIDIA GeForce RTX 4070", 12282, "8.9")


@pytest.fixture(scope="session")
def pinned_source(tmp_path_factory):
    """The pinned llama-cpp-python sdist (downloaded once per session) and a cache folder for it."""
    from playbook.params import load_params
    from playbook.source import resolve_source

    cache = tmp_path_factory.mktemp("playbook-cache")
    source = load_params().source
    return resolve_source(source.version, source.sha256, cache), cache
