"""Intel oneMKL: the plan sets the vendor, assembles Intel's pinned PyPI wheels into one root in the cache (or takes
mkl.root), points FindBLAS at it through MKLROOT and the wheel through LD_LIBRARY_PATH; the probe finds a root as
FindBLAS and ggml-blas need it; the assembled root has the link names the wheels lack, and FindBLAS really finds
MKL in it (network test)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from machines import machine

from playbook.backends import mkl, registry
from playbook.backends.plan import defined_value
from playbook.errors import ParameterError
from playbook.facts import Mkl
from playbook.params import PARAMS_DIR, Params, load_params
from playbook.probing import ProbeContext
from playbook.steps.configure import configure
from playbook.toolkits import pypi

PROFILE = PARAMS_DIR / "mkl.yaml"
VERSION = str(mkl.table()["default_version"])
LINK_NAMES = ("mkl_intel_lp64", "mkl_intel_thread", "mkl_core")


def fake_root(root: Path, *, without: str = "") -> Path:
    """A root laid out as oneAPI's or the assembled one: lib/ with the link names, include/ with mkl.h."""
    (root / "lib").mkdir(parents=True)
    (root / "include").mkdir()
    for name in (*LINK_NAMES, "iomp5"):
        if name != without:
            (root / "lib" / f"lib{name}.so").write_text("")
    (root / "include" / "mkl.h").write_text("")
    (root / "include" / "mkl_version.h").write_text("#define __INTEL_MKL_MINOR__    0\n"
                                                    "#define INTEL_MKL_VERSION      20250300\n")
    return root


def test_the_profile_plans_the_pinned_wheels_assembled_in_the_cache(tmp_path):
    params = load_params(PROFILE, [f"build.cache_dir={tmp_path}"])
    plan = configure(machine("debian12-openblas"), params)
    root = tmp_path / "toolkits" / f"mkl-{VERSION}"
    assert plan.backend == "mkl" and plan.blockers == []
    assert defined_value(plan.cmake_args, "GGML_BLAS") == "ON"
    assert defined_value(plan.cmake_args, "GGML_BLAS_VENDOR") == "Intel10_64lp"
    assert defined_value(plan.cmake_args, "BLAS_INCLUDE_DIRS") == (root / "include").as_posix()
    assert plan.env["MKLROOT"] == root.as_posix()
    assert plan.runtime_env["LD_LIBRARY_PATH"] == (root / "lib").as_posix()
    assert plan.toolkit_request is not None and plan.toolkit_request.release == VERSION
    assert set(plan.toolkit_request.components) == {"runtime", "include", "devel", "openmp"}
    assert "cpu-only" in plan.warning_codes()
    decided = {d.what: d.value for d in plan.decisions}
    assert "mkl-devel==" + VERSION in decided["oneMKL"] and "intel-openmp==" in decided["oneMKL"]


def test_every_pinned_wheel_names_its_public_source_and_a_sha256():
    for version, rows in mkl.table()["wheels"].items():
        for part, wheel in rows["linux-x86_64"].items():
            assert wheel["source"].startswith(f"https://pypi.org/project/{wheel['package']}/"), part
            assert len(wheel["sha256"]) == 64 and wheel["file"].endswith(".whl") and wheel["version"] == version


def test_an_installed_mkl_is_used_when_named_and_refused_when_it_lacks_a_library(tmp_path):
    oneapi = fake_root(tmp_path / "oneapi" / "mkl" / "latest")
    facts = machine("debian12-openblas")
    facts.mkl = mkl.find_mkl(str(oneapi), {}, tmp_path)
    assert facts.mkl.found and facts.mkl.version == "2025.3.0" and facts.mkl.origin == "mkl.root"
    params = load_params(PROFILE, [f"mkl.root={oneapi}"])
    plan = configure(facts, params)
    assert plan.blockers == [] and plan.toolkit_request is None
    assert plan.env["MKLROOT"] == oneapi.as_posix() and plan.runtime_env["LD_LIBRARY_PATH"] == f"{oneapi}/lib"

    broken = fake_root(tmp_path / "broken", without="iomp5")
    facts.mkl = mkl.find_mkl(str(broken), {}, tmp_path)
    assert facts.mkl.missing == ["libiomp5.so"] and not facts.mkl.found
    refused = configure(facts, load_params(PROFILE, [f"mkl.root={broken}"]))
    assert [b.code for b in refused.blockers] == ["mkl-missing"] and "libiomp5.so" in refused.blockers[0].message


def test_mkl_exists_for_x86_64_only():
    arm = machine("debian12-openblas")
    arm.os = dataclasses.replace(arm.os, machine="aarch64")
    plan = configure(arm, load_params(PROFILE))
    assert "mkl-unsupported-machine" in [b.code for b in plan.blockers]
    rejected = {d.value: d.reason for d in configure(arm, load_params()).decisions if d.what == "backend rejected"}
    assert rejected["mkl"] == "oneMKL exists for x86_64 only, this machine is aarch64"


def test_auto_keeps_the_plain_cpu_and_the_wheel_offloads_nothing():
    unit = registry.unit("mkl")
    assert unit.offloads is False and unit.ggml_library == "ggml-blas" and unit.ggml_device == "BLAS"
    assert unit.device(machine("debian12-openblas")) == ""
    auto = configure(machine("debian12-openblas"), load_params())
    rejected = {d.value: d.reason for d in auto.decisions if d.what == "backend rejected"}
    assert auto.backend == "cpu" and rejected["mkl"].endswith("but chosen only when asked for (backend: mkl)")


def test_a_version_that_is_not_pinned_is_refused_before_anything_runs():
    with pytest.raises(ParameterError, match="mkl.version '1999.0' has no pinned wheels"):
        load_params(PROFILE, ["mkl.version=1999.0"])


def test_the_probe_finds_mkl_root_then_mklroot_then_an_assembled_root(tmp_path):
    unit = registry.unit("mkl")
    environ = {"MKLROOT": str(fake_root(tmp_path / "env"))}

    def probe(settings: mkl.MklSettings, env: dict[str, str]) -> Mkl:
        found = unit.probe(ProbeContext(environ=env, search_path="", settings=settings, cache_dir=tmp_path))
        assert set(found) == {"mkl"}
        return found["mkl"]

    named = fake_root(tmp_path / "named")
    assert probe(mkl.MklSettings(root=str(named)), environ).root == str(named)
    assert probe(mkl.MklSettings(), environ).origin == "MKLROOT"
    assert probe(mkl.MklSettings(), {}) == Mkl()
    for version in ("2025.3.0", "2026.2.0"):
        fake_root(tmp_path / "toolkits" / f"mkl-{version}")
    (tmp_path / "toolkits" / "mkl-2025.3.0" / pypi.MARKER).write_text("{}")
    # 2026.2.0 has no marker (an interrupted assembly): the newest complete root is taken
    assert probe(mkl.MklSettings(), {}).root == str(tmp_path / "toolkits" / "mkl-2025.3.0")


def wheel(folder: Path, dist: str, members: dict[str, bytes]) -> tuple[str, str]:
    path = folder / f"{dist}-1.0-py2.py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{dist}-1.0.dist-info/METADATA", "Name: x\n")
        for name, data in members.items():
            archive.writestr(f"{dist}-1.0.data/data/{name}", data)
    return path.name, hashlib.sha256(path.read_bytes()).hexdigest()


def test_assembling_lays_the_wheels_out_as_one_root_with_link_names(tmp_path, monkeypatch):
    """The wheels' layout as Intel ships it (checked on 2026.2.0): mkl holds lib/libmkl_core.so.3 and no
    libmkl_core.so, intel-openmp lib/libiomp5.so, mkl-include include/mkl.h, and static libraries and debug
    symbols the root leaves out. Files already in the cache with the pinned sha256 are not downloaded again."""
    wheels = tmp_path / "cache" / "toolkits" / "wheels"
    wheels.mkdir(parents=True)
    rows = {}
    for part, dist, members in (
        ("runtime", "mkl", {f"lib/lib{n}.so.3": b"so" for n in LINK_NAMES}),
        ("include", "mkl_include", {"include/mkl.h": b"h", "include/mkl_version.h":
                                    b"#define INTEL_MKL_VERSION      20260200\n"}),
        ("openmp", "intel_openmp", {"lib/libiomp5.so": b"so", "lib/libiomp5.a": b"a", "lib/libiomp5.dbg": b"d"}),
    ):
        file, sha = wheel(wheels, dist, members)
        rows[part] = {"package": dist.replace("_", "-"), "version": "1.0", "file": file, "sha256": sha}
    table = {**mkl.table(), "wheels": {"1.0": {"linux-x86_64": rows}}}
    monkeypatch.setattr(mkl, "table", lambda: table)
    request = pypi.ToolkitRequest("1.0", tuple(rows))
    assembled = registry.unit("mkl").assemble(request, tmp_path / "cache", python="no-python-needed")
    root = Path(assembled.root)
    assert root == tmp_path / "cache" / "toolkits" / "mkl-1.0" and not assembled.reused
    assert os.readlink(root / "lib" / "libmkl_core.so") == "libmkl_core.so.3"
    assert not (root / "lib" / "libiomp5.a").exists() and not (root / "lib" / "libiomp5.dbg").exists()
    assert json.loads((root / pypi.MARKER).read_text())["release"] == "1.0"
    found = mkl.find_mkl("", {}, tmp_path / "cache")
    assert found.found and found.origin == "assembled" and found.version == "2026.2.0"
    assert registry.unit("mkl").assemble(request, tmp_path / "cache", python="no-python-needed").reused


def test_member_targets():
    assert mkl.member_target("mkl-2026.2.0.data/data/lib/libmkl_core.so.3") == Path("lib/libmkl_core.so.3")
    assert mkl.member_target("mkl_devel-2026.2.0.data/data/lib/pkgconfig/mkl-sdl.pc") is not None
    assert mkl.member_target("mkl-2026.2.0.dist-info/RECORD") is None
    assert mkl.member_target("intel_openmp-2026.2.0.data/data/lib/libiomp5.a") is None
    assert mkl.member_target("mkl-2026.2.0.data/data/share/doc/mkl/licensing/license.txt") is None


FIND_BLAS = """cmake_minimum_required(VERSION 3.21)
project(find_mkl C)
set(BLA_VENDOR Intel10_64lp)
find_package(BLAS)
message(STATUS "BLAS_FOUND=${BLAS_FOUND} LIBS=${BLAS_LIBRARIES}")
"""


@pytest.mark.network
@pytest.mark.skipif(os.environ.get("PLAYBOOK_NETWORK_TESTS") != "1",
                    reason="downloads Intel's wheels; set PLAYBOOK_NETWORK_TESTS=1")
@pytest.mark.skipif(pypi.platform_key() != "linux-x86_64" or not shutil.which("cmake"),
                    reason="the pinned wheels are Linux x86_64; needs cmake")
def test_find_blas_finds_the_assembled_root_and_needs_its_link_names(tmp_path):
    """The real pinned wheels, assembled as build does: CMake's FindBLAS (Intel10_64lp) finds the four libraries
    through MKLROOT; the same files without the link names the assembly adds are not found."""
    root = Path(mkl.assemble_root(VERSION, Params().cache_dir, python=os.environ.get("PYTHON", "python3")).root)
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(FIND_BLAS)

    def find(mklroot: Path) -> str:
        done = subprocess.run(["cmake", "-S", str(project), "-B", str(tmp_path / f"b-{mklroot.name}")],
                              env={**os.environ, "MKLROOT": str(mklroot)}, capture_output=True, text=True,
                              timeout=300, check=False)
        return done.stdout + done.stderr

    found = find(root)
    assert "BLAS_FOUND=TRUE" in found
    for name in (*LINK_NAMES, "iomp5"):
        assert f"{root}/lib/lib{name}.so" in found
    bare = tmp_path / "bare"
    (bare / "lib").mkdir(parents=True)
    for item in (root / "lib").iterdir():
        if (not item.is_symlink() and item.suffix != ".so") or item.name == "libiomp5.so":
            (bare / "lib" / item.name).symlink_to(item.resolve())
    assert "BLAS_FOUND=FALSE" in find(bare)
