"""Every compatibility row has a public source, and every rule has a test that fails without it."""

from __future__ import annotations

import pytest

from playbook.knowledge import compatibility as compat
from playbook.knowledge.compatibility import minimum_driver, toolkit_supports_arch


@pytest.mark.parametrize("name", ["cuda", "gpus", "cmake_options"])
def test_every_row_names_its_source(name):
    document = compat.knowledge(name)
    tables = [value for value in document.values() if isinstance(value, list)]
    assert tables
    for table in tables:
        for row in table:
            assert str(row.get("source", "")).strip(), f"{name}.yaml row without a source: {row}"


@pytest.mark.parametrize("version, arch, ok", [
    ("11.8", "89", True), ("11.8", "90", True), ("11.7", "90", False), ("12.8", "100", True), ("12.8", "120", True),
    ("12.6", "120", False), ("12.9", "121", True), ("12.8", "121", False), ("13.0", "50", False), ("13.0", "72", False),
    ("12.9", "72", True), ("13.0", "75", True), ("13.0", "101", False), ("13.0", "110", True),
    ("13.0.88", "88", True), ("12.9.86", "88", False), ("13.4.92", "107", True), ("13.3.73", "107", False),
])
def test_architectures(version, arch, ok):
    assert toolkit_supports_arch(version, arch)[0] is ok


def test_minimum_driver_per_major():
    assert [minimum_driver(v) for v in ("11.8", "12.4", "13.0")] == ["450.80.02", "525.60.13", "580.65.06"]
    assert minimum_driver("12.4", "Windows") == "527.41"


@pytest.mark.parametrize("driver, cuda", [("535.183.01", "12.2"), ("550.120", "12.4"), ("580.159.04", "13.0"),
                                          ("470.256.02", "11.4"), ("576.52", "12.9"), ("440.1", "")])
def test_driver_max_cuda(driver, cuda):
    assert compat.driver_max_cuda(driver) == cuda


@pytest.mark.parametrize("nvcc, gcc, msvc", [("11.8.89", 11, "19.39"), ("12.1.66", 12, "19.39"),
                                             ("12.4.99", 13, "19.39"), ("12.4.131", 13, "19.49"),
                                             ("12.8.93", 14, "19.49"), ("13.0.88", 15, "19.49"),
                                             ("13.1.115", 15, "19.49"), ("13.2.78", 15, "19.59"),
                                             ("13.4.92", 16, "19.59")])
def test_host_compiler_limits(nvcc, gcc, msvc):
    limits = compat.host_compiler_limits(nvcc)
    assert (limits.max_gcc, limits.max_msvc) == (gcc, msvc)


def test_oldest_nvcc_accepting():
    assert compat.oldest_nvcc_accepting(gcc_major=14) == "12.8"
    assert compat.oldest_nvcc_accepting(msvc="19.40.33811") == "12.4.131"


def test_msvc_stl_and_visual_studio_versions():
    assert compat.msvc_stl_min_cuda("19.41.34120")[0] == "12.4"
    assert compat.msvc_stl_min_cuda("19.40.33811")[0] == ""
    assert compat.visual_studio_for_msvc("19.40.33811") == "17.10"
    assert compat.visual_studio_for_msvc("19.44.35208") == "17.14"


def test_cccl_headers():
    assert compat.cccl_min_cuda() == {"cub/cub.cuh": "11.0", "nv/target": "11.5", "thrust": "4.0"}


@pytest.mark.parametrize("name, compute", [
    ("NVIDIA GeForce GTX 1080 Ti", "6.1"), ("NVIDIA GeForce GTX 1660 SUPER", "7.5"), ("NVIDIA GeForce RTX 2080", "7.5"),
    ("NVIDIA GeForce RTX 3090", "8.6"), ("NVIDIA GeForce RTX 4070", "8.9"), ("NVIDIA GeForce RTX 5090", "12.0"),
    ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA H200", "9.0"), ("NVIDIA B200", "10.0"),
    ("NVIDIA Jetson AGX Orin", "8.7"), ("NVIDIA Jetson Nano", "5.3"), ("Tesla T4", "7.5"), ("NVIDIA A10G", "8.6"),
])
def test_gpu_names(name, compute):
    assert compat.gpu_model(name).compute == compute


def test_unknown_gpu_name():
    assert compat.gpu_model("Matrox G200eW") is None


@pytest.mark.parametrize("arg, new, effect", [
    ("-DLLAMA_CUBLAS=on", "-DGGML_CUDA=on", "stops with an error"), ("-DLLAMA_CUDA=ON", "-DGGML_CUDA=ON", "maps"),
    ("-DLLAMA_METAL=on", "-DGGML_METAL=on", "maps"), ("-DLLAMA_NATIVE=OFF", "-DGGML_NATIVE=OFF", "maps"),
    ("-DLLAMA_CUDA_F16=on", "-DGGML_CUDA_F16=on", "ignores"), ("-DCUDA_DOCKER_ARCH=86", "-DCMAKE_CUDA_ARCHITECTURES=86", "ignores"),
])
def test_renamed_cmake_options(arg, new, effect):
    problem = compat.renamed_option_problem(arg)
    assert f"use {new}" in problem and effect in problem
    assert compat.renamed_option_problem("-DGGML_CUDA=on") == ""


def test_renamed_option_is_explained_by_configure(this_machine):
    from playbook.params import load_params
    from playbook.steps.configure import configure

    plan = configure(this_machine, load_params(None, ["backend=cpu", "build.cmake_args=['-DLLAMA_CUDA_F16=on']"]))
    assert any("LLAMA_CUDA_F16 was renamed GGML_CUDA_F16" in w for w in map(str, plan.warnings))
