"""The architectures a CUDA wheel holds machine code for, from ``cuobjdump --list-elf`` (the recorded
output is a shared library nvcc 13.0 from PyPI built with sm_86 and sm_120a, listed by cuobjdump 13.5)."""

from __future__ import annotations

from pathlib import Path

from playbook.verify.cuda_elf import (
    CudaElf,
    expected_architectures,
    find_library,
    missing_architectures,
    parse_list_elf,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "verify"


def test_list_elf_names_each_architecture_once():
    archs, files = parse_list_elf((DATA / "cuobjdump-list-elf-86-120a.txt").read_text())
    assert archs == ["sm_86", "sm_120a"]
    assert len(files) == 4 and files[0] == "libggml-cuda.1.sm_86.cubin"


def test_expected_architectures_leave_out_ptx_only_entries():
    assert expected_architectures("86;120") == ["sm_86", "sm_120"]
    assert expected_architectures("75-virtual;86-real;120a-real") == ["sm_86", "sm_120a"]


def test_an_arch_specific_variant_counts_for_its_architecture():
    assert missing_architectures(["sm_86", "sm_120"], ["sm_86", "sm_120a"]) == []
    assert missing_architectures(["sm_86", "sm_89"], ["sm_86"]) == ["sm_89"]
    assert not CudaElf(architectures=["sm_86"], expected=["sm_86", "sm_89"], missing=["sm_89"]).ok


def test_the_library_is_found_in_the_installed_package(tmp_path):
    lib = tmp_path / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (lib / "libggml-cuda.so").write_bytes(b"ELF")
    (lib / "libggml-cpu.so").write_bytes(b"ELF")
    assert find_library(tmp_path) == lib / "libggml-cuda.so"
    assert find_library(tmp_path / "llama_cpp" / "missing") is None
