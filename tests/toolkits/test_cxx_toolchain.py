"""The C++ toolchain planned before the first build, provoked for real: a relocated-GCC-like ``g++`` wrapper that
copies the C++ runtime into every library (``-static-libstdc++``), named in CXX and CUDAHOSTCXX as a GPU
machine's container did (2026-11-29: ``CC``/``CXX``/``CUDAHOSTCXX`` = ``/opt/gcc/bin/*``). Detect probes it,
configure plans this machine's g++ instead, and what CMake then really builds (a C++ library, and a CUDA library
that nvcc 13.0 compiles and links here) needs libstdc++.so.6. The repair remedy is held to the same: its plan
must change what builds even where CUDAHOSTCXX is inherited, which -DCMAKE_CUDA_HOST_COMPILER alone does not."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from playbook.facts import Facts
from playbook.knowledge.failures import finding_for
from playbook.params import load_params
from playbook.steps.build import toolchain
from playbook.steps.configure import BuildPlan, configure
from playbook.steps.detect import detect_compilers, run_command
from playbook.steps.repair import apply_remedies
from playbook.toolkits.cxx_runtime import defines_runtime
from tests.conftest import make_facts, toolkit

NVCC = Path("/usr/local/cuda/bin/nvcc")
needs_gxx = pytest.mark.skipif(not (shutil.which("g++") and shutil.which("readelf")), reason="needs g++ and readelf")
needs_nvcc = pytest.mark.skipif(not NVCC.is_file(), reason="needs nvcc at /usr/local/cuda (CI's machine has 13.0)")
pytestmark = needs_gxx

CXX_SOURCE = '#include <sstream>\n#include <string>\nstd::string probe(int n) { std::ostringstream s; s << n; ' \
             'return s.str(); }\n'
CUDA_SOURCE = "__global__ void kernel(int *x) { *x = 1; }\n" + CXX_SOURCE


def relocated_gcc(folder: Path) -> Path:
    """``gcc`` and ``g++`` wrappers that link libstdc++ statically, as /opt/gcc/bin's do: returns the g++."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, real in (("gcc", "gcc"), ("g++", "g++")):
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which(real)} -static-libstdc++ "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return folder / "g++"


def environment_naming(wrapper: Path) -> dict[str, str]:
    return {**os.environ, "CC": str(wrapper.with_name("gcc")), "CXX": str(wrapper), "CUDAHOSTCXX": str(wrapper)}


def facts_in(environ: dict[str, str], base: Facts) -> Facts:
    """This machine's facts as detect reads them in ``environ`` (its compilers probed for real)."""
    facts = make_facts(base, toolkits=[toolkit("13.0", cublas=True)])
    facts.compilers = detect_compilers(environ, environ["PATH"], run_command)
    facts.environment = {k: environ[k] for k in ("CC", "CXX", "CUDAHOSTCXX") if k in environ}
    return facts


def cmake() -> str:
    beside = Path(sys.executable).parent / "cmake"
    return str(beside) if beside.is_file() else "cmake"


def build_library(tmp_path: Path, plan: BuildPlan, environ: dict[str, str], cuda: bool,
                  with_plan_env: bool = True) -> Path:
    """Configure and build one shared library with the plan's compiler arguments (and its build environment on top
    of ``environ``, as the build step runs pip): the library CMake linked."""
    project = tmp_path / ("cuda" if cuda else "cxx")
    project.mkdir(parents=True, exist_ok=True)
    source = "probe.cu" if cuda else "probe.cpp"
    (project / source).write_text(CUDA_SOURCE if cuda else CXX_SOURCE)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        f"project(probe LANGUAGES CXX{' CUDA' if cuda else ''})\n"
        f"add_library(probe SHARED {source})\n"
        + ("set_target_properties(probe PROPERTIES CUDA_ARCHITECTURES 90)\n" if cuda else ""))
    env = {**environ, **(plan.env if with_plan_env else {})}
    if cuda:
        env["CUDACXX"] = str(NVCC)
    compiler_args = [a for a in plan.cmake_args if a.split("=")[0] in
                     ("-DCMAKE_C_COMPILER", "-DCMAKE_CXX_COMPILER", "-DCMAKE_CUDA_HOST_COMPILER")]
    build = project / "build"
    subprocess.run([cmake(), "-S", str(project), "-B", str(build), *compiler_args], env=env, check=True,
                   capture_output=True, timeout=300)
    subprocess.run([cmake(), "--build", str(build)], env=env, check=True, capture_output=True, timeout=300)
    return build / "libprobe.so"


def needs_shared_runtime(library: Path) -> bool:
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return "libstdc++.so.6" in needed and defines_runtime(library) is False


def test_detect_probes_each_cxx_compiler_for_how_it_links_the_runtime(tmp_path):
    wrapper = relocated_gcc(tmp_path / "opt-gcc" / "bin")
    compilers = detect_compilers(environment_naming(wrapper), os.environ["PATH"], run_command)
    linkage = {t.name: t.links_cxx_runtime_shared for t in compilers if t.found}
    assert linkage[str(wrapper)] is False  # named by CXX and CUDAHOSTCXX: probed once, copies the runtime
    assert linkage["g++"] is True and linkage["c++"] is True
    assert linkage[str(wrapper.with_name("gcc"))] is None and linkage["gcc"] is None  # C compilers: not probed


@pytest.mark.long
def test_a_cpu_plan_moves_cc_and_cxx_off_a_copying_compiler_and_what_builds_needs_libstdcxx(this_machine, tmp_path):
    wrapper = relocated_gcc(tmp_path / "opt-gcc" / "bin")
    environ = environment_naming(wrapper)
    plan = configure(facts_in(environ, this_machine), load_params(None, ["backend=cpu", "build.ccache=off"]))

    gxx = plan.env["CXX"]
    assert Path(gxx).resolve() == Path(shutil.which("c++") or "").resolve() and plan.env["CC"] != str(wrapper)
    assert f"-DCMAKE_CXX_COMPILER={gxx}" in plan.cmake_args
    assert "CUDAHOSTCXX" not in plan.env  # a CPU build leaves the CUDA host compiler alone
    decision = next(d for d in plan.decisions if d.what == "C++ compiler")
    assert str(wrapper) in decision.reason and "copies the C++ runtime" in decision.reason

    assert needs_shared_runtime(build_library(tmp_path, plan, environ, cuda=False))


def test_a_compiler_that_links_shared_is_kept_and_said_so(this_machine, tmp_path):
    plan = configure(facts_in(dict(os.environ), this_machine), load_params(None, ["backend=cpu", "build.ccache=off"]))
    assert "CXX" not in plan.env and not any(a.startswith("-DCMAKE_CXX_COMPILER") for a in plan.cmake_args)
    assert any(d.what == "C++ runtime" and "links it shared" in d.reason for d in plan.decisions)


def test_no_compiler_linking_shared_is_a_warning_not_a_silent_plan(this_machine, tmp_path):
    wrapper = relocated_gcc(tmp_path / "opt-gcc" / "bin")
    facts = facts_in(environment_naming(wrapper), this_machine)
    facts.compilers = [dataclasses.replace(t, links_cxx_runtime_shared=False if t.links_cxx_runtime_shared else
                                           t.links_cxx_runtime_shared) for t in facts.compilers]
    plan = configure(facts, load_params(None, ["backend=cpu", "build.ccache=off"]))
    assert "cxx-runtime-static" in plan.warning_codes() and "CXX" not in plan.env


@pytest.mark.long
@needs_nvcc
def test_a_cuda_plan_names_one_host_compiler_in_cudahostcxx_and_cmake_and_nvcc_links_it_shared(this_machine,
                                                                                               tmp_path):
    wrapper = relocated_gcc(tmp_path / "opt-gcc" / "bin")
    environ = environment_naming(wrapper)
    plan = configure(facts_in(environ, this_machine),
                     load_params(None, ["backend=cuda", "cuda.architectures=90", "build.ccache=off"]))

    host = plan.env["CUDAHOSTCXX"]
    assert host != str(wrapper) and f"-DCMAKE_CUDA_HOST_COMPILER={host}" in plan.cmake_args
    assert any(d.what == "CUDA host compiler" for d in plan.decisions)
    assert plan.effective_compilers(environ)["CUDA host"] == shutil.which(host)

    assert needs_shared_runtime(build_library(tmp_path / "planned", plan, environ, cuda=True))
    # The arguments without the environment, as the old remedy planned: CUDAHOSTCXX still wins, the runtime
    # is copied into the CUDA library (what the GPU machine showed)
    assert not needs_shared_runtime(build_library(tmp_path / "arguments-only", plan, environ, cuda=True,
                                                  with_plan_env=False))


@pytest.mark.long
@needs_nvcc
def test_the_remedy_rebuilds_with_the_host_compiler_even_where_cudahostcxx_is_inherited(this_machine, tmp_path):
    wrapper = relocated_gcc(tmp_path / "opt-gcc" / "bin")
    environ = environment_naming(wrapper)
    facts = facts_in(environ, this_machine)
    # attempt 1 as a plan that kept the environment's compilers (facts from before the probe existed)
    unprobed = dataclasses.replace(facts, compilers=[dataclasses.replace(t, links_cxx_runtime_shared=None)
                                                     for t in facts.compilers])
    plan = configure(unprobed, load_params(None, ["backend=cuda", "cuda.architectures=90", "build.ccache=off"]))
    assert "CUDAHOSTCXX" not in plan.env
    assert not needs_shared_runtime(build_library(tmp_path / "attempt-1", plan, environ, cuda=True))

    finding = finding_for("cxx-runtime-copies", "playbook: 1 library carries its own copy of the C++ runtime")
    repaired = apply_remedies(plan, [finding], facts, cache_dir=tmp_path)
    assert repaired is not None and repaired.env["CUDAHOSTCXX"] == repaired.env["CXX"] != str(wrapper)
    assert needs_shared_runtime(build_library(tmp_path / "attempt-2", repaired, environ, cuda=True))

    # the wheel cache cannot serve attempt 1's wheel to attempt 2: the compilers used are in the key
    assert toolchain(facts, plan, environ)["compilers used"] != toolchain(facts, repaired, environ)["compilers used"]
