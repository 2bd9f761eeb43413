"""SYCL: llama.cpp's backend for Intel GPUs, built by Intel's oneAPI compilers. Planned and diagnosed only:
the playbook has never built it (Intel's compiler is not obtainable where it runs).

Reads detect's ``sycl`` (oneAPI's root and setvars script, icpx/icx, ``sycl-ls``'s devices) and ``os``; its
table is ``knowledge/sycl.yaml`` (compilers per platform, the oldest oneAPI, the runtime environment), each
row from llama.cpp's ``docs/backend/SYCL.md``. oneAPI's libraries (oneMKL, oneDNN, libsycl) are found by
CMake and by the loader only in a shell where setvars ran, so the plan refuses to build in any other.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from playbook.backends.base import GIB_MIB, Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, PlanDraft
from playbook.facts import Device, Facts, Sycl, SyclDevice, Tool
from playbook.knowledge import compatibility
from playbook.probing import CommandRunner, ProbeContext, detect_tool


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

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        """oneAPI's root, setvars script and compilers, and sycl-ls's devices once setvars has run."""
        return {"sycl": detect_sycl(context.environ, context.search_path, context.runner)}


# ---------------------------------------------------------------- detecting: parsers (pure)


def parse_sycl_ls(text: str) -> list[SyclDevice]:
    """``sycl-ls`` lines: ``[level_zero:gpu][level_zero:0] Intel(R) oneAPI Unified Runtime over Level-Zero, Intel(R)
    Arc(TM) A770 Graphics 12.55.8 [1.3.29735+27]`` (older releases: ``[ext_oneapi_level_zero:gpu:0] Intel(R)
    Level-Zero, Intel(R) Iris(R) Xe Graphics 1.3 [1.3.28044]``): the backend and type, and the device's name."""
    devices = []
    for match in re.finditer(r"^\[(?:ext_oneapi_)?(\w+):(\w+)(?::\d+)?\](?:\[[^\]]*\])?\s+[^,\n]*,\s*(.+?)\s*$", text,
                             re.MULTILINE):
        name = re.sub(r"\s+(?:OpenCL \S+.*|\d+\.\d+(?:\.\d+)?\s+\[.*\])$", "", match.group(3))
        devices.append(SyclDevice(f"{match.group(1)}:{match.group(2)}", name))
    return devices


# ---------------------------------------------------------------- detecting: probes


ONEAPI_DEFAULT_ROOTS = ("/opt/intel/oneapi", "~/intel/oneapi", r"C:\Program Files (x86)\Intel\oneAPI")


def detect_sycl(environ: Mapping[str, str], search_path: str, runner: CommandRunner) -> Sycl:
    """oneAPI's root and setvars script, its compilers (on PATH once setvars ran, else under the root's
    compiler/latest/bin), and ``sycl-ls``'s devices when the environment is set."""
    roots = [environ["ONEAPI_ROOT"]] if environ.get("ONEAPI_ROOT") else []
    roots += [str(Path(r).expanduser()) for r in ONEAPI_DEFAULT_ROOTS]
    sycl = Sycl()
    for root in roots:
        script = next((Path(root) / name for name in ("setvars.sh", "setvars.bat") if (Path(root) / name).is_file()), None)
        if script is not None:
            sycl.root, sycl.setvars = root, str(script)
            break
    on_path = shutil.which("icpx", path=search_path) or shutil.which("icx", path=search_path)
    sycl.environment_set = environ.get("SETVARS_COMPLETED") == "1" or bool(on_path)
    bins = os.pathsep.join([search_path, str(Path(sycl.root) / "compiler" / "latest" / "bin")]) if sycl.root \
        else search_path
    sycl.icpx = detect_tool("icpx", ["--version"], bins, runner)
    sycl.icx = detect_tool("icx", ["--version"], bins, runner)
    sycl.sycl_ls = detect_tool("sycl-ls", ["--version"], bins, runner) if sycl.environment_set else sycl.sycl_ls
    if sycl.sycl_ls.path:
        listed = runner([sycl.sycl_ls.path], 60)
        sycl.devices = parse_sycl_ls(listed.stdout) if listed.returncode == 0 else []
    return sycl
