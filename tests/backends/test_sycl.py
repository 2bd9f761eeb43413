"""SYCL, planned and diagnosed: detect reads oneAPI's setvars, icpx and sycl-ls; configure plans Intel's
compilers and refuses, with a code, what would fail."""

from __future__ import annotations

import dataclasses

from machines import DETECT, machine

from playbook.backends import registry
from playbook.backends.sycl import detect_sycl, parse_sycl_ls
from playbook.facts import Tool
from playbook.params import PARAMS_DIR, load_params
from playbook.probing import CommandOutput, parse_first_version
from playbook.steps.configure import configure

SYCL = PARAMS_DIR / "sycl.yaml"


def codes(warnings) -> list[str]:
    return [w.code for w in warnings]


def test_sycl_ls_in_both_formats():
    arc = parse_sycl_ls((DETECT / "sycl-ls-arc-a770.txt").read_text())
    assert [(d.backend, d.name) for d in arc if d.is_gpu] == [
        ("level_zero:gpu", "Intel(R) Arc(TM) A770 Graphics"), ("level_zero:gpu", "Intel(R) UHD Graphics 730"),
        ("opencl:gpu", "Intel(R) Arc(TM) A770 Graphics"), ("opencl:gpu", "Intel(R) UHD Graphics 730")]
    older = parse_sycl_ls((DETECT / "sycl-ls-iris-xe-2023.txt").read_text())
    assert [d.backend for d in older] == ["opencl:acc", "opencl:cpu", "opencl:gpu", "level_zero:gpu"]
    assert older[-1].name == "Intel(R) Iris(R) Xe Graphics"
    assert parse_sycl_ls("bash: sycl-ls: command not found\n") == []


def test_detect_finds_setvars_and_knows_whether_it_ran(tmp_path):
    root = tmp_path / "oneapi"
    (root / "compiler" / "latest" / "bin").mkdir(parents=True)
    (root / "setvars.sh").write_text("")
    for name in ("icpx", "icx", "sycl-ls"):
        tool = root / "compiler" / "latest" / "bin" / name
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    banner = (DETECT / "icpx-2025.1.1.txt").read_text()
    listing = (DETECT / "sycl-ls-arc-a770.txt").read_text()

    def runner(args: list[str], timeout: float) -> CommandOutput:
        return CommandOutput(0, listing if args[-1].endswith("sycl-ls") else banner)

    fresh_shell = detect_sycl({"ONEAPI_ROOT": str(root)}, "/usr/bin", runner)
    assert fresh_shell.root == str(root) and fresh_shell.setvars == str(root / "setvars.sh")
    assert fresh_shell.icpx.found and fresh_shell.icpx.version == "2025.1.1" and not fresh_shell.environment_set
    assert fresh_shell.devices == []  # sycl-ls needs the environment: not run
    sourced = detect_sycl({"ONEAPI_ROOT": str(root), "SETVARS_COMPLETED": "1"}, "/usr/bin", runner)
    assert sourced.environment_set and sourced.gpus[0].name == "Intel(R) Arc(TM) A770 Graphics"
    nothing = detect_sycl({}, str(tmp_path / "empty"), runner)
    assert not nothing.found and not nothing.icpx.found


def test_the_arc_machine_plans_intel_s_compilers_and_the_device():
    facts = machine("arc-a770-oneapi2025")
    plan = configure(facts, load_params(SYCL))
    assert plan.blockers == [] and "-DCMAKE_CXX_COMPILER=icpx" in plan.cmake_args
    decisions = {d.what: d.value for d in plan.decisions}
    assert decisions["SYCL devices"].startswith("Intel(R) Arc(TM) A770 Graphics (level_zero:gpu)")
    assert decisions["SYCL precision"] == "FP32 (GGML_SYCL_F16 off)"
    assert registry.unit("sycl").device(facts) == "Intel(R) Arc(TM) A770 Graphics"
    assert plan.jobs >= 1 and "-DLLAVA_BUILD=OFF" in plan.cmake_args


def test_oneapi_installed_but_not_sourced_is_refused_with_the_command():
    facts = machine("arc-a770-oneapi2025")
    facts.sycl = dataclasses.replace(facts.sycl, environment_set=False, devices=[])
    plan = configure(facts, load_params(SYCL))
    assert codes(plan.blockers) == ["oneapi-environment-not-set"]
    assert "source /opt/intel/oneapi/setvars.sh" in plan.blockers[0].message
    assert "sycl-no-gpu" in codes(plan.warnings)


def test_an_old_oneapi_and_a_missing_compiler_are_named():
    facts = machine("arc-a770-oneapi2025")
    banner = (DETECT / "icpx-2024.1.txt").read_text()
    old = Tool("icpx", True, "/opt/intel/oneapi/compiler/latest/bin/icpx", parse_first_version(banner))
    facts.sycl = dataclasses.replace(facts.sycl, icpx=old)
    plan = configure(facts, load_params(SYCL))
    assert codes(plan.blockers) == ["oneapi-too-old"] and "2024.1.0 is older than 2025.0" in plan.blockers[0].message
    facts.sycl = dataclasses.replace(facts.sycl, icpx=Tool("icpx", found=False))
    assert codes(configure(facts, load_params(SYCL)).blockers) == ["sycl-compiler-missing"]


def test_windows_uses_cl_and_icx():
    facts = machine("arc-a770-oneapi2025")
    facts.os = dataclasses.replace(facts.os, system="Windows", pretty_name="Windows 11")
    plan = configure(facts, load_params(SYCL))
    assert "-DCMAKE_C_COMPILER=cl" in plan.cmake_args and "-DCMAKE_CXX_COMPILER=icx" in plan.cmake_args


def test_auto_never_takes_sycl_but_says_why():
    auto = configure(machine("arc-a770-oneapi2025"), load_params())
    rejected = {d.value: d.reason for d in auto.decisions if d.what == "backend rejected"}
    assert auto.backend == "cpu"
    assert rejected["sycl"].startswith("Intel(R) Arc(TM) A770 Graphics and icpx 2025.1.1 found, but SYCL builds are "
                                       "planned only")
    none = configure(machine("no-gpu"), load_params())
    assert {d.value: d.reason for d in none.decisions if d.what == "backend rejected"}["sycl"] == \
        "no Intel oneAPI (setvars, icpx) found"
