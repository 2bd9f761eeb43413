"""HIP with Debian's ROCm packages: detect finds their layout (lib/x86_64-linux-gnu, lib/llvm-17/bin/clang) in a
folder named by hip.rocm_path, the plan sets what that layout needs, and a ROCm older than the asked release's
llama.cpp accepts is refused before building, naming the newest release that builds.

The ROCm folder is built from the real file list of Debian 13's ROCm 5.7.1 as scripts/rocm-debian.sh unpacks it
(tests/data/rocm/debian-5.7.1-files.txt), with the version references objdump printed for its libamdhip64."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
from machines import machine

from playbook.backends.hip import detect_rocm
from playbook.errors import ParameterError
from playbook.facts import Tool
from playbook.knowledge.compatibility import (
    cmake_for_multiarch_hip,
    llama_cpp_min_rocm,
    newest_llama_cpp_python_for_rocm,
)
from playbook.params import load_params
from playbook.probing import run_command
from playbook.steps.configure import configure

DATA = Path(__file__).resolve().parent.parent / "data" / "rocm"
SDIST_0315 = "a2cf42935a9ff9e55804db01d6827b4862d7ab10ae72ea8e38b7d180d2c640f3"
HIPCONFIG_BANNER = "5.7.31921-0"  # what Debian 13's hipconfig --version printed


def debian_rocm(folder: Path) -> Path:
    """Debian 13's ROCm 5.7.1 as files: empty where detect reads only the name, hipconfig answering as the real
    one does, and libamdhip64 holding the symbol versions the real one asks for (as its .dynstr holds them)."""
    root = folder / "usr"
    for line in (DATA / "debian-5.7.1-files.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, target = line.partition(" -> ")
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            if target:
                (root / name).symlink_to(target)
            else:
                (root / name).touch()
    hipconfig = root / "bin" / "hipconfig"
    hipconfig.write_text(f"#!/bin/sh\necho {HIPCONFIG_BANNER}\n")
    hipconfig.chmod(0o755)
    references = re.findall(r"\s(GLIBC\w*_[\d.]+|CXXABI_[\d.]+|GCC_[\d.]+)$",
                            (DATA / "libamdhip64-5.7.1-version-references.txt").read_text(), re.MULTILINE)
    (root / "lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921").write_bytes(
        b"\x7fELF" + b"\x00".join(r.encode() for r in references) + b"\x00")
    return root


@pytest.fixture()
def rocm_root(tmp_path) -> Path:
    return debian_rocm(tmp_path / "rocm-debian-5.7.1")


def test_detect_finds_debian_rocm_in_the_folder_the_parameters_name(rocm_root):
    rocm = detect_rocm({}, os.environ.get("PATH", ""), run_command, str(rocm_root))
    assert rocm.found and rocm.found_by == "hip.rocm_path" and rocm.root == str(rocm_root)
    assert rocm.version == "5.7" and rocm.layout == "debian"
    assert rocm.hip_clang == str(rocm_root / "lib/llvm-17/bin/clang")
    assert rocm.has_hipblas and rocm.has_rocblas
    assert rocm.lib_dir == str(rocm_root / "lib/x86_64-linux-gnu") and rocm.glibc_needed == "2.38"
    assert rocm.gpus == []  # no rocminfo among the files, and no AMD GPU here anyway


def test_a_debian_clang_without_device_libraries_is_no_hip_compiler(rocm_root):
    for bitcode in (rocm_root / "lib/llvm-17/lib/clang/17/amdgcn/bitcode").iterdir():
        bitcode.unlink()
    rocm = detect_rocm({}, os.environ.get("PATH", ""), run_command, str(rocm_root))
    assert rocm.found and rocm.layout == "debian" and rocm.hip_clang == ""


def test_rocm_path_without_hipconfig_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ParameterError, match="hip.rocm_path .* holds no bin/hipconfig"):
        load_params(None, [f"hip.rocm_path={tmp_path}"])


def debian12_with(rocm_root: Path, cmake_version: str = "4.4.5"):
    facts = machine("rx7900xtx-rocm6.2")
    rocm = detect_rocm({}, os.environ.get("PATH", ""), run_command, str(rocm_root))
    return dataclasses.replace(facts, rocm=rocm, os=dataclasses.replace(facts.os, glibc="2.36"),
                               cmake=Tool("cmake", True, "/venv/bin/cmake", cmake_version))


def params_0315(*more: str):
    return load_params(None, ["backend=hip", "hip.targets=gfx1100;gfx1030", "source.version=0.3.15",
                              f"source.sha256={SDIST_0315}", *more])


def test_plan_for_debian_rocm_on_debian12_compiles_only(rocm_root):
    plan = configure(debian12_with(rocm_root), params_0315())
    assert plan.blockers == [] and plan.gpu_targets == "gfx1100;gfx1030"
    assert "-DAMDGPU_TARGETS=gfx1100;gfx1030" in plan.cmake_args and "-DGGML_HIP=on" in plan.cmake_args
    env = plan.env
    assert env["HIPCXX"] == str(rocm_root / "lib/llvm-17/bin/clang") and env["HIP_PATH"] == str(rocm_root)
    assert env["HIP_PLATFORM"] == "amd" and env["CMAKE_PREFIX_PATH"] == str(rocm_root)
    assert "ROCM_PATH" not in env  # clang would look for the device libraries there
    assert env["LDFLAGS"] == f"-L{rocm_root / 'lib/x86_64-linux-gnu'} -Wl,--allow-shlib-undefined"
    warning = next(w for w in plan.warnings if w.code == "rocm-needs-newer-glibc")
    assert "needs glibc 2.38 and this system has 2.36" in warning.message and "compiled only" in warning.message


def test_the_same_rocm_on_a_system_with_its_glibc_links_normally(rocm_root):
    facts = debian12_with(rocm_root)
    facts = dataclasses.replace(facts, os=dataclasses.replace(facts.os, glibc="2.41"))
    plan = configure(facts, params_0315())
    assert "rocm-needs-newer-glibc" not in plan.warning_codes()
    assert plan.env["LDFLAGS"] == f"-L{rocm_root / 'lib/x86_64-linux-gnu'}"


def test_rocm_57_is_refused_for_the_pinned_release_with_the_newest_that_builds(rocm_root):
    plan = configure(debian12_with(rocm_root), load_params(None, ["backend=hip", "hip.targets=gfx1100"]))
    blocker = next(b for b in plan.blockers if b.code == "rocm-too-old")
    assert "ROCm 5.7 is older than 6.1" in blocker.message and "llama-cpp-python 0.3.36" in blocker.message
    assert f"--set source.version=0.3.15 --set source.sha256={SDIST_0315}" in blocker.message


def test_cmake_older_than_327_is_refused_for_debians_layout(rocm_root):
    plan = configure(debian12_with(rocm_root, cmake_version="3.25.1"), params_0315())
    blocker = next(b for b in plan.blockers if b.code == "hip-cmake-multiarch")
    assert "CMake 3.25.1" in blocker.message and "3.27 or newer" in blocker.message


def test_the_oldest_rocm_follows_the_release():
    assert llama_cpp_min_rocm("0.3.14")[0] == llama_cpp_min_rocm("0.3.15")[0] == "5.5"
    assert llama_cpp_min_rocm("0.3.16")[0] == llama_cpp_min_rocm("0.3.36")[0] == llama_cpp_min_rocm()[0] == "6.1"
    assert llama_cpp_min_rocm("0.2.90") is None  # older than every row: unknown, not refused
    assert newest_llama_cpp_python_for_rocm("5.7") == ("0.3.15", SDIST_0315)
    assert newest_llama_cpp_python_for_rocm("5.2") is None and newest_llama_cpp_python_for_rocm("6.2") is None
    assert cmake_for_multiarch_hip()[0] == "3.27"


def test_the_fix_release_is_below_the_bump_and_its_sha256_is_the_one_pinned():
    """The release the plan offers must be older than the first one with the higher minimum."""
    version, sha256 = newest_llama_cpp_python_for_rocm("6.0")
    assert llama_cpp_min_rocm(version)[0] == "5.5" and sha256 == SDIST_0315
