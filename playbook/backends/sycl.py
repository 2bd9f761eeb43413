"""SYCL: llama.cpp's backend for Intel GPUs, built by Intel's oneAPI compilers. Planned and diagnosed only:
the playbook has never built it (Intel's compiler is not obtainable where it runs).

Reads detect's ``sycl`` (oneAPI's root and setvars script, icpx/icx, ``sycl-ls``'s devices) and ``os``; its
table is ``knowledge/sycl.yaml`` (compilers per platform, the oldest oneAPI, the runtime environment), each
row from llama.cpp's ``docs/backend/SYCL.md``. oneAPI's libraries (oneMKL, oneDNN, libsycl) are found by
CMake and by the loader only in a shell where setvars ran, so the plan refuses to build in any other.
"""

from __future__ import annotations

from typing import Any

from playbook.backends.base import GIB_MIB, Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, PlanDraft
from playbook.facts import Device, Facts, Sycl, Tool
from playbook.knowledge import compatibility


def table() -> dict[str, Any]:
    return compatibility.knowledge("sycl")


def for_platform(rows: list[dict[str, Any]], platform: str) -> dict[str, Any]:
    """The row of ``platform`` (windows, else linux: WSL and Linux build alike)."""
    wanted = "windows" if platform == "windows" else "linux"
    return next(row for row in rows if row["platform"] == wanted)


def compiler(sycl: Sycl, platform: str) -> Tool:
    """The C++ compiler the guide names for ``platform`` (icpx; icx on Windows), as detect found it."""
    return sycl.icx if for_platform(table()["compilers"], platform)["cxx"] == "icx" else sycl.icpx


class SyclBackend(BackendUnit):
    name = "sycl"
    cmake_switch = "-DGGML_SYCL=on"
    facts_read = ("sycl", "os")
    knowledge = ("sycl.yaml",)
    failure_family = "sycl"
    profile = "sycl"
    mib_per_compile_job = 3 * GIB_MIB  # not measured: taken as CUDA's (icpx compiles ggml-sycl's large sources)
    device_log_name = "SYCL"
    status = "planned only"

    def assess(self, inputs: BackendInputs) -> Assessment:
        sycl = inputs.facts.sycl
        cxx = compiler(sycl, inputs.platform or "linux")
        if not sycl.found:
            return Assessment(blocked_because="no Intel oneAPI (setvars, icpx) found")
        if not cxx.found:
            return Assessment(blocked_because=f"oneAPI at {sycl.root} but no {cxx.name} in it")
        if not sycl.gpus:
            return Assessment(blocked_because=f"{cxx.name} {cxx.version} found, but sycl-ls lists no GPU")
        return Assessment(f"{sycl.gpus[0].name} and {cxx.name} {cxx.version} found")

    def not_automatic(self, inputs: BackendInputs) -> str:
        assessment = self.assess(inputs)
        return assessment.blocked_because or (f"{assessment.usable_because}, but SYCL builds are planned only, never "
                                              "run by the playbook: set backend: sycl to build it")

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        self._plan(draft)
        return draft.result()

    def _plan(self, planner: PlanDraft) -> None:
        sycl, platform = planner.facts.sycl, planner.platform
        compilers = for_platform(table()["compilers"], platform)
        setvars = for_platform(table()["setvars"], platform)
        planner.add_cmake_arg(self.cmake_switch)
        planner.add_cmake_arg(f"-DCMAKE_C_COMPILER={compilers['c']}")
        planner.add_cmake_arg(f"-DCMAKE_CXX_COMPILER={compilers['cxx']}")
        planner.decide("SYCL compilers", f"{compilers['c']} and {compilers['cxx']}",
                       f"as llama.cpp's SYCL guide builds it ({compilers['source']})")
        planner.warn("sycl-planned-only", "SYCL is planned and diagnosed only: the playbook has never built or run it")
        cxx = compiler(sycl, platform)
        if not sycl.found:
            planner.block("oneapi-missing", "backend sycl asked for, but no Intel oneAPI was found (no setvars script "
                          f"in ONEAPI_ROOT or the default folders, no {cxx.name} on PATH): install {table()['install']}")
            return
        if not cxx.found:
            planner.block("sycl-compiler-missing", f"oneAPI at {sycl.root} has no {cxx.name} (compiler/latest/bin): "
                          "install its DPC++/C++ compiler component")
        elif not sycl.environment_set:
            planner.block("oneapi-environment-not-set",
                          f"oneAPI's environment is not set in this shell: CMake finds neither oneMKL nor oneDNN, and "
                          f"the built library will not load libsycl; run `{setvars['command']}` in this shell, then "
                          "the playbook again")
        else:
            planner.decide("oneAPI", f"{cxx.name} {cxx.version} ({cxx.path})", f"setvars has run in this shell "
                           f"({sycl.setvars or 'compilers on PATH'})")
        self._version(planner, cxx.version)
        self._devices(planner, sycl)
        f16 = table()["f16_option"]
        planner.decide("SYCL precision", "FP32 (GGML_SYCL_F16 off)",
                       f"llama.cpp's default; for FP16 set build.cmake_args: [{f16['option']}] ({f16['source']})")
        for row in table()["runtime_env"]:
            planner.runtime_env[row["name"]] = row["value"]
            planner.decide(row["name"], row["value"], row["source"])

    def _version(self, planner: PlanDraft, version: str) -> None:
        minimum = table()["minimum_oneapi"]
        if version and compatibility.version_tuple(version) < compatibility.version_tuple(minimum["version"]):
            planner.block("oneapi-too-old", f"oneAPI {version} is older than {minimum['version']}, the oldest the SYCL "
                          f"backend compiles with ({minimum['source']}): install oneAPI {minimum['version']} or newer")

    def _devices(self, planner: PlanDraft, sycl: Sycl) -> None:
        if sycl.gpus:
            planner.decide("SYCL devices", ", ".join(f"{d.name} ({d.backend})" for d in sycl.gpus),
                           "sycl-ls; llama.cpp uses the level_zero GPUs by default (ONEAPI_DEVICE_SELECTOR to choose)")
            return
        why = "sycl-ls did not run (the oneAPI environment is not set)" if not sycl.sycl_ls.found \
            else "sycl-ls lists no GPU"
        planner.warn("sycl-no-gpu", f"no SYCL GPU seen ({why}): the wheel may build, but verify will offload nothing "
                     "unless an Intel GPU and its driver are present where it runs")

    def devices(self, facts: Facts) -> list[Device]:
        return [Device(self.name, d.name, kind="gpu" if d.is_gpu else "cpu", detail=d.backend)
                for d in facts.sycl.devices]

    def device(self, facts: Facts) -> str:
        return facts.sycl.gpus[0].name if facts.sycl.gpus else ""
