"""Real failures provoked on this machine with the real llama-cpp-python source, named and repaired.

This machine's CUDA 13.0 toolkit compiles but has no cuBLAS and no GPU, so a CUDA configure
here ends with `CUDA::cublas ... target was not found`: the failure after every repair below."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import H100, make_facts

from playbook.knowledge.failures import diagnose_file
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.steps.build import run_build
from playbook.steps.configure import configure
from playbook.steps.repair import apply_remedies

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cuda13(this_machine):
    toolkits = [t for t in this_machine.cuda_toolkits if t.version.startswith("13.") and not t.has_cublas]
    if not toolkits:
        pytest.skip("needs a CUDA 13 toolkit without cuBLAS, as on this project's development and CI machines")
    return toolkits[0]


def ids(run_dir, result):
    return [f.id for f in diagnose_file(run_dir / result.log_file)]


def test_deprecated_flag_is_replaced_then_the_missing_cublas_is_named(this_machine, cuda13, pinned_source, tmp_path):
    source, cache = pinned_source
    params = load_params(None, ["backend=cpu", "build.ccache=off", "build.cmake_args=['-DLLAMA_CUBLAS=on']"])
    plan = configure(this_machine, params)
    first = run_build(plan, source, Layout(tmp_path), cache)
    assert not first.ok
    assert ids(tmp_path, first)[0] == "deprecated-cuda-flag"

    fixed = apply_remedies(plan, diagnose_file(tmp_path / first.log_file), this_machine)
    assert fixed and "-DLLAMA_CUBLAS=on" not in fixed.cmake_args and "-DGGML_CUDA=on" in fixed.cmake_args
    fixed = dataclasses.replace(fixed, cmake_args=[a for a in fixed.cmake_args if a != "-DGGML_CUDA=off"]
                                + ["-DCMAKE_CUDA_ARCHITECTURES=90"], env={"CUDACXX": cuda13.nvcc})
    second = run_build(fixed, source, Layout(tmp_path), cache)
    assert not second.ok
    assert "cublas-missing" in ids(tmp_path, second)
    assert "deprecated-cuda-flag" not in ids(tmp_path, second)


def test_architecture_dropped_by_nvcc_13_is_replaced_by_the_gpus(this_machine, cuda13, pinned_source, tmp_path):
    source, cache = pinned_source
    params = load_params(None, ["backend=cuda", "build.ccache=off", "cuda.architectures=61",
                                f"cuda.toolkit={cuda13.root}"])
    plan = configure(this_machine, params)
    assert "cuda-arch-unsupported" in plan.warning_codes()  # said before building
    assert any("CUDA 13.0 dropped sm_61" in w for w in map(str, plan.warnings))
    result = run_build(plan, source, Layout(tmp_path), cache)
    assert not result.ok
    findings = diagnose_file(tmp_path / result.log_file)
    assert findings[0].id == "cuda-arch-unsupported"
    assert "compute_61" in findings[0].evidence

    gpu_machine = make_facts(this_machine, gpus=[H100])  # the remedy needs a GPU to take the architecture from
    fixed = apply_remedies(plan, findings, gpu_machine)
    assert fixed and fixed.cuda_architectures == "90" and "-DCMAKE_CUDA_ARCHITECTURES=61" not in fixed.cmake_args
