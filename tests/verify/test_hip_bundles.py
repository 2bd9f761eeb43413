"""The gfx targets of a HIP build, read from the offload bundles in its .hip_fatbin section, and a HIP wheel that
cannot load where it was built (Debian 13's ROCm on Debian 12) verified as "compiled only".

tests/data/hip/arange.cu.o is a real object file: llama-cpp-python 0.3.15's ggml-cuda/arange.cu compiled by
Debian 13's ROCm clang 17 for gfx1100;gfx1030 (scripts/rocm-debian.sh, the hip profile); beside it, what
LLVM's own clang-offload-bundler --list printed for its .hip_fatbin section."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from playbook.files import sha256_of
from playbook.knowledge.failures import diagnose_text
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.verify import step
from playbook.verify.hip_bundles import expected_targets, gfx_of, list_objects, objects_text, read_bundles
from playbook.verify.launcher import ChildOutcome
from playbook.verify.step import VerifyRequest, VerifyTarget
from playbook.verify.units import import_probe
from playbook.verify.units.machine_code import MACHINE_CODE

DATA = Path(__file__).resolve().parent.parent / "data" / "hip"
OBJECT = DATA / "arange.cu.o"
GLIBC_ERROR = (DATA.parent / "failures" / "hip-rocm-needs-newer-glibc" / "import.txt")


def bundler_listing() -> list[str]:
    lines = (DATA / "arange.cu.o.bundler-list.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_the_entries_of_a_real_code_object_are_those_llvms_bundler_lists():
    bundles = read_bundles(OBJECT, "gfx1100;gfx1030")
    assert sorted(bundles.entries) == sorted(bundler_listing())
    assert bundles.architectures == ["gfx1030", "gfx1100"] and bundles.bundles == 1
    assert bundles.ok and bundles.missing == []


def test_a_target_the_plan_asked_for_and_the_code_lacks_is_missing():
    bundles = read_bundles(OBJECT, "gfx1100;gfx906")
    assert bundles.missing == ["gfx906"] and not bundles.ok


def test_an_elf_file_without_hip_code_says_so():
    python = Path(sys.executable).resolve()
    if python.read_bytes()[:4] != b"\x7fELF":
        pytest.skip("the interpreter is not an ELF file here")
    bundles = read_bundles(python, "gfx1100")
    assert "no .hip_fatbin section" in bundles.error and not bundles.ok


def test_entry_ids_and_target_lists():
    assert gfx_of("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-") == "gfx90a"
    assert gfx_of("host-x86_64-unknown-linux--") == ""
    assert expected_targets("gfx1100;gfx1030") == ["gfx1100", "gfx1030"]
    assert expected_targets("gfx1100,gfx90a:xnack+") == ["gfx1100", "gfx90a"]


@pytest.fixture()
def hip_wheel_that_cannot_load(monkeypatch, tmp_path):
    """A HIP wheel whose ggml-hip library is the real code object, and an import that fails the way Debian 13's
    libamdhip64 fails on Debian 12 (the real message)."""
    wheel = tmp_path / "llama_cpp_python-0.3.15-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel")
    site = tmp_path / "cache" / "site" / sha256_of(wheel)[:16]
    (site / "llama_cpp" / "lib").mkdir(parents=True)
    shutil.copy(OBJECT, site / "llama_cpp" / "lib" / "libggml-hip.so")
    children: list[str] = []

    def run_child(args, site_dir, log, timeout, python=None, expected=(), extra_env=None, **kwargs):
        children.append(args[0])
        text = GLIBC_ERROR.read_text()
        # as the launcher does with a child's failed output
        return ChildOutcome("error", 1, 0.1, str(log), error_tail=text, findings=diagnose_text(text, stage="any"))

    monkeypatch.setattr(step, "install_wheel", lambda *a, **k: subprocess.CompletedProcess([], 0, "", ""))
    monkeypatch.setattr(import_probe, "run_child", run_child)
    return wheel, children


def verify_hip(tmp_path, wheel, compiled_only: str):
    (tmp_path / "run").mkdir(exist_ok=True)
    target = VerifyTarget(expect_gpu=True, gpu_present=False, backend="hip", machine_code="hip-fatbin", gpu_targets="gfx1100;gfx1030",
                          compiled_only=compiled_only)
    return step.run_verify(VerifyRequest(Layout(tmp_path / "run"), wheel, load_params(), target, tmp_path,
                                         tmp_path / "cache"), log=lambda *_: None)


def test_a_hip_wheel_that_cannot_load_here_is_compiled_only_with_its_machine_code(hip_wheel_that_cannot_load,
                                                                                    tmp_path):
    wheel, children = hip_wheel_that_cannot_load
    result = verify_hip(tmp_path, wheel, "ROCm's libamdhip64 needs glibc 2.38 and this system has 2.36")
    assert result.ok and result.findings == [] and children == ["probe"]  # nothing after the probe ran
    assert result.compiled_only.startswith("ROCm's libamdhip64 needs glibc 2.38")
    assert result.summary.startswith("compiled only: ") and "machine code for gfx1030, gfx1100" in result.summary
    listing = result.measured(MACHINE_CODE)
    assert listing is not None and listing.listing.architectures == ["gfx1030", "gfx1100"]
    listing = Layout(tmp_path / "run").unit_files(1, "hip-fatbin").log().read_text()
    assert "hipv4-amdgcn-amd-amdhsa--gfx1100" in listing


def test_the_same_import_failure_without_the_plans_word_fails(hip_wheel_that_cannot_load, tmp_path):
    wheel, _ = hip_wheel_that_cannot_load
    result = verify_hip(tmp_path, wheel, "")
    assert not result.ok and not result.compiled_only
    assert "hip-rocm-needs-newer-glibc" in [f.id for f in result.findings]


def test_a_partial_build_folder_lists_its_hip_objects_and_skips_the_others(tmp_path):
    hip_dir = tmp_path / "vendor" / "ggml-hip.dir"
    hip_dir.mkdir(parents=True)
    shutil.copy(OBJECT, hip_dir / "arange.cu.o")
    shutil.copy(Path(sys.executable).resolve(), tmp_path / "vendor" / "ggml.c.o")  # an ELF file without HIP code
    objects = list_objects(tmp_path, "gfx1100;gfx1030")
    assert [Path(b.library).name for b in objects] == ["arange.cu.o"]
    text = objects_text(tmp_path, objects)
    assert text.splitlines() == ["vendor/ggml-hip.dir/arange.cu.o: gfx1030, gfx1100",
                                 "1 HIP objects; 1 hold code for every target asked for; targets seen: gfx1030, gfx1100"]
