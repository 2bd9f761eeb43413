"""Seed scenario 004, for real: a CUDA nvcc without its CCCL component compiles ggml-cuda sources of the pinned
llama-cpp-python and stops at ``nv/target``; repair names ``cccl-headers-missing``, its remedy adds CCCL of
the same release from PyPI, and the same compile passes.

Guide 004's machine had CUDA 12.1. NVIDIA's PyPI wheels of 12.x hold no nvcc driver (only ptxas, libnvvm
and headers: see cuda_wheels.yaml), so no 12.1 compiler can be had here; the scenario runs with the
oldest release whose wheels compile (13.0), and the 12.1 remedy is checked as a plan (the CCCL wheel of
12.1, nvidia-cuda-cccl-cu12 12.1.109, is downloaded and holds the headers)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from conftest import make_facts, toolkit

from playbook.knowledge.failures import diagnose_text
from playbook.params import Params, load_params
from playbook.process import run_captured
from playbook.steps.configure import configure
from playbook.steps.repair import apply_remedies
from playbook.toolkits import pypi

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(os.environ.get("PLAYBOOK_NETWORK_TESTS") != "1",
                       reason="downloads NVIDIA's wheels and the sdist; set PLAYBOOK_NETWORK_TESTS=1"),
    pytest.mark.skipif(pypi.platform_key() != "linux-x86_64", reason="the pinned wheels are Linux x86_64"),
]

# Two ggml-cuda sources: sum.cu includes CUB (cub/cub.cuh), both include cuda_fp16.h (nv/target).
SOURCES = ("sum.cu", "mean.cu")


@pytest.fixture(scope="module")
def ggml_tree(pinned_source, tmp_path_factory) -> Path:
    """llama.cpp's ggml folder from the pinned sdist (only ggml/: include, src)."""
    source, _cache = pinned_source
    target = tmp_path_factory.mktemp("ggml")
    with tarfile.open(source.path) as sdist:
        members = [m for m in sdist.getmembers() if "/vendor/llama.cpp/ggml/include/" in m.name
                   or "/vendor/llama.cpp/ggml/src/" in m.name]
        sdist.extractall(target, members=members, filter="data")
    return next(target.glob("*/vendor/llama.cpp"))


def compile_sources(nvcc: str, tree: Path, out: Path) -> tuple[int, str]:
    text, worst = "", 0
    for name in SOURCES:
        done = run_captured([nvcc, "-std=c++17", "-arch=sm_86", "-I", "ggml/include", "-I", "ggml/src",
                             "-I", "ggml/src/ggml-cuda", "-c", f"ggml/src/ggml-cuda/{name}", "-o",
                             str(out / f"{name}.o")], cwd=tree, timeout_s=1800)
        text += done.stdout + done.stderr
        worst = worst or done.returncode
    return worst, text


@pytest.mark.slow
def test_nvcc_without_cccl_is_repaired_by_adding_cccl_of_the_same_release(ggml_tree, this_machine, tmp_path):
    cache = Params().cache_dir
    without = pypi.ToolkitRequest("13.0", ("nvcc", "crt", "nvvm", "cudart", "cublas"))
    root = pypi.provision(without, cache).root
    nvcc = str(pypi.nvcc_of(Path(root)))

    code, log = compile_sources(nvcc, ggml_tree, tmp_path)
    assert code != 0 and "nv/target: No such file or directory" in log
    findings = diagnose_text(log, stage="build", cuda_version="13.0.88")
    assert findings[0].id == "cccl-headers-missing" and findings[0].automatic
    assert "cuda-cccl-13-0" in findings[0].fix and "nvidia-cuda-cccl-cu12" not in findings[0].fix

    plan = configure(make_facts(this_machine, gpus=[]),
                     load_params(None, ["backend=cuda", "cuda.toolkit=pypi:13.0", "cuda.architectures=86"]))
    plan.toolkit_request, plan.cuda_toolkit, plan.env["CUDACXX"] = without, root, nvcc
    repaired = apply_remedies(plan, findings, this_machine, cache_dir=cache)
    assert repaired is not None and repaired.remedies_applied == ["cccl-headers-missing"]
    assert repaired.toolkit_request.components == (*without.components, "cccl")
    assert repaired.backend == "cuda"
    fixed = pypi.provision(repaired.toolkit_request, cache)
    assert fixed.root == repaired.cuda_toolkit and repaired.env["CUDACXX"] == str(pypi.nvcc_of(Path(fixed.root)))

    code, log = compile_sources(repaired.env["CUDACXX"], ggml_tree, tmp_path)
    assert code == 0, log[-2000:]
    assert all((tmp_path / f"{name}.o").stat().st_size > 0 for name in SOURCES)


def test_cuda_12_1_without_cccl_gets_a_cccl_that_has_nv_target(this_machine, tmp_path):
    """Guide 004's toolkit (12.1, no CCCL) as the plan sees it. PyPI's CCCL wheel of 12.1 (nvidia-cuda-cccl-cu12
    12.1.109) has CUB and Thrust but not <nv/target>, the very header guide 004 misses; the pins give
    12.0-12.4 the oldest CCCL wheel that has it, and say so."""
    facts = make_facts(this_machine, gpus=[], toolkits=[toolkit("12.1.105", root="/usr/local/cuda-12.1", cccl=False)])
    plan = configure(facts, load_params(None, ["backend=cuda", "cuda.architectures=86"]))
    assert "cccl-headers-missing" in plan.warning_codes() and not plan.blockers
    wheel = pypi.release("12.1").wheels["cccl"]
    assert wheel.version == "12.5.39" and "12.1.109 has no nv/target" in wheel.note
    assert f"nvidia-cuda-cccl-cu12=={wheel.version}" in " ".join(map(str, plan.warnings))
    findings = diagnose_text("fatal error: nv/target: No such file or directory", cuda_version="12.1.105")
    repaired = apply_remedies(plan, findings, facts, cache_dir=tmp_path)
    assert repaired.toolkit_request == pypi.ToolkitRequest("12.1", ("cccl",), "/usr/local/cuda-12.1")
    files = pypi.download([wheel], Params().cache_dir / "toolkits" / "wheels")
    import zipfile
    names = zipfile.ZipFile(files["cccl"]).namelist()
    assert {"nvidia/cuda_cccl/include/cub/cub.cuh", "nvidia/cuda_cccl/include/nv/target"} <= set(names)
