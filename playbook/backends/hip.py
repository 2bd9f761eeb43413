"""ROCm/HIP: ``-DGGML_HIP=on`` for the detected gfx targets, built by ROCm's clang.

llama.cpp's ggml-hip compiles ggml-cuda's sources as HIP; its CMakeLists forwards ``AMDGPU_TARGETS`` or
``GPU_TARGETS`` to ``CMAKE_HIP_ARCHITECTURES`` and finds hip, hipblas and rocblas under ``ROCM_PATH``.
Reads detect's ``rocm`` (hipconfig, rocminfo's gfx targets, ROCm's clang, hipBLAS/rocBLAS); its table is
``knowledge/rocm.yaml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from playbook.backends.base import GIB_MIB, Assessment, BackendUnit
from playbook.knowledge import compatibility
from playbook.params import Backend
from playbook.steps.detect import Facts, Rocm

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner


def usable(rocm: Rocm) -> bool:
    return rocm.found and bool(rocm.gpus) and bool(rocm.hip_clang)


def configure(planner: Planner) -> None:
    rocm, wanted = planner.facts.rocm, planner.params.hip.targets
    planner.cmake_args.append(HipBackend.cmake_switch)
    if not rocm.found:
        planner.block("rocm-missing", "backend hip asked for, but no ROCm (hipconfig, /opt/rocm) was found: the build "
                      "will fail; install ROCm (https://rocm.docs.amd.com/projects/install-on-linux/) or set ROCM_PATH")
    _targets(planner, rocm, wanted)
    _compiler(planner, rocm)
    _libraries(planner, rocm)


def _targets(planner: Planner, rocm: Rocm, wanted: str) -> None:
    if wanted == "native":
        targets = rocm.gfx_targets
        why = "the detected GPUs (rocminfo): " + ", ".join(f"{g.name or '?'} {g.gfx}" for g in rocm.gpus)
    else:
        targets = [t for t in wanted.replace(",", ";").split(";") if t]
        why = "given in parameters hip.targets"
    if not targets:
        planner.block("hip-no-gfx-target", "no gfx target: rocminfo lists no GPU agent; set hip.targets (e.g. gfx1100) "
                      "or check that this user can open /dev/kfd (groups render and video)")
        return
    planner.gpu_targets = ";".join(targets)
    planner.set_cmake_arg(f"-DAMDGPU_TARGETS={planner.gpu_targets}")
    planner.set_cmake_arg(f"-DGPU_TARGETS={planner.gpu_targets}")
    planner.decide("gfx targets", planner.gpu_targets, why)
    for gfx in targets:
        supported, reason = compatibility.rocm_supports_gfx(rocm.version, gfx)
        if supported is False:
            planner.warn("rocm-gfx-unsupported", reason)
        elif supported is None:
            planner.warn("rocm-gfx-unknown", f"{reason}: the playbook cannot say whether ROCm {rocm.version} supports it")


def _compiler(planner: Planner, rocm: Rocm) -> None:
    minimum, source = compatibility.llama_cpp_min_rocm()
    if rocm.version and compatibility.version_tuple(rocm.version) < compatibility.version_tuple(minimum):
        planner.block("rocm-too-old", f"ROCm {rocm.version} is older than {minimum}, the oldest the pinned llama.cpp "
                      f"accepts ({source}): install ROCm {minimum} or newer")
    if not rocm.hip_clang:
        if rocm.found:
            planner.block("hip-compiler-missing", f"no HIP compiler (llvm/bin/clang) under {rocm.root}: CMake's "
                          "enable_language(HIP) will fail; install the rocm-llvm (hip-dev) package")
        return
    planner.env["HIPCXX"] = rocm.hip_clang
    planner.env["HIP_PATH"] = rocm.root
    planner.env["ROCM_PATH"] = rocm.root
    planner.decide("HIP compiler", rocm.hip_clang,
                   f"ROCm {rocm.version or '?'}'s clang (HIPCXX), as llama.cpp's build guide sets it; HIP_PATH={rocm.root}")


def _libraries(planner: Planner, rocm: Rocm) -> None:
    if rocm.found and not (rocm.has_hipblas and rocm.has_rocblas):
        missing = " and ".join(n for n, ok in (("hipBLAS", rocm.has_hipblas), ("rocBLAS", rocm.has_rocblas)) if not ok)
        planner.block("hipblas-missing", f"{missing} not found under {rocm.root}/lib: ggml-hip's find_package(hipblas) "
                      "and find_package(rocblas) will fail; install hipblas-dev and rocblas-dev")


class HipBackend(BackendUnit):
    name = Backend.HIP
    cmake_switch = "-DGGML_HIP=on"
    facts_read = ("rocm",)
    knowledge = ("rocm.yaml",)
    failure_family = "hip"
    profile = "hip"
    auto_rank = 20
    mib_per_compile_job = 3 * GIB_MIB
    device_log_name = "ROCm"
    status = "planned only"

    def assess(self, planner: Planner) -> Assessment:
        rocm = planner.facts.rocm
        if usable(rocm):
            gpus = ", ".join(g.name or g.gfx for g in rocm.gpus)
            return Assessment(f"{gpus} ({', '.join(rocm.gfx_targets)}) and ROCm {rocm.version or '?'} found")
        return Assessment(blocked_because="no ROCm (hipconfig) found" if not rocm.found
                          else "rocminfo lists no AMD GPU" if not rocm.gpus
                          else "no HIP compiler (ROCm's llvm/bin/clang)")

    def requested(self, planner: Planner) -> Backend:
        planner.decide("backend", "hip", f"asked for in parameters; ROCm {planner.facts.rocm.version or 'not found'}")
        return self.name

    def settings_given(self, planner: Planner) -> list[str]:
        targets = planner.params.hip.targets
        return [f"hip.targets={targets}"] if targets != "native" else []

    def configure(self, planner: Planner) -> None:
        configure(planner)

    def device(self, facts: Facts) -> str:
        return facts.rocm.gpus[0].name if facts.rocm.gpus else ""
