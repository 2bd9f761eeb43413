"""Which backend the wheel is built for, and the CMake arguments that select it.

``backend: auto`` picks, in this order, what the machine can use: a prebuilt library when one is
given, Metal on Apple silicon, CUDA with an NVIDIA GPU and a toolkit, HIP with an AMD GPU that ROCm
sees, Vulkan with a Vulkan GPU and what building it needs, and CPU otherwise. The decision names the
reason, and a ``backend-rejected`` decision names why each alternative was not taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from playbook.params import Backend
from playbook.steps.configure import apple, cuda, hip, vulkan
from playbook.steps.detect import CudaToolkit

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner


def choose(planner: Planner) -> tuple[Backend, CudaToolkit | None]:
    facts, params = planner.facts, planner.params
    if params.build.prebuilt_lib:
        planner.decide("backend", "prebuilt", f"build.prebuilt_lib: {params.build.prebuilt_lib}")
        return Backend.PREBUILT, None
    if facts.os.system == "Darwin":
        return apple.choose_backend(planner), None
    wanted = params.backend
    toolkit = cuda.choose_toolkit_for(planner)
    if wanted is Backend.METAL:
        planner.warn("metal-not-here", "backend metal asked for, but Metal exists only on macOS with Apple silicon: "
                     "building CPU-only")
        wanted = Backend.CPU
    if wanted is Backend.CPU:
        planner.decide("backend", "cpu", "asked for in parameters (backend: cpu)")
        planner.warn("cpu-only", "CPU-only build: the wheel will not offload any layer to a GPU")
        return Backend.CPU, None
    if wanted is Backend.CUDA:
        if toolkit is None:
            where = "" if params.cuda.toolkit == "auto" else f" at {params.cuda.toolkit}"
            planner.block("cuda-toolkit-missing", f"backend cuda asked for, but no CUDA toolkit{where} was found: the "
                          "build will fail; install one, or set cuda.toolkit")
            cuda.propose_pypi_toolkit(planner, "no CUDA toolkit found")
            planner.decide("backend", "cuda", "asked for in parameters; no toolkit found")
            return Backend.CUDA, None
        planner.decide("backend", "cuda", f"asked for in parameters; CUDA {toolkit.version}")
        return Backend.CUDA, toolkit
    if wanted is Backend.HIP:
        planner.decide("backend", "hip", f"asked for in parameters; ROCm {facts.rocm.version or 'not found'}")
        return Backend.HIP, None
    if wanted is Backend.VULKAN:
        devices = vulkan.describe(facts.vulkan) or "no Vulkan device seen"
        planner.decide("backend", "vulkan", f"asked for in parameters; {devices}")
        return Backend.VULKAN, None
    return _auto(planner, toolkit)


def _auto(planner: Planner, toolkit: CudaToolkit | None) -> tuple[Backend, CudaToolkit | None]:
    """Each candidate in order of preference: the first usable one is chosen, each one before it is rejected
    with its reason, and each one after it with "<chosen> preferred"."""
    facts = planner.facts
    gpu = facts.best_gpu
    candidates: list[tuple[Backend, str, str]] = []  # (backend, why usable, why not; "" when usable)
    if gpu and toolkit:
        candidates.append((Backend.CUDA, f"{gpu.name} (compute {gpu.compute_capability}) and CUDA {toolkit.version} found", ""))
    else:
        candidates.append((Backend.CUDA, "", "no NVIDIA GPU visible" if not gpu else "no CUDA toolkit (nvcc) found"))
    rocm = facts.rocm
    if hip.usable(rocm):
        gpus = ", ".join(g.name or g.gfx for g in rocm.gpus)
        found = f"{gpus} ({', '.join(rocm.gfx_targets)}) and ROCm {rocm.version or '?'} found"
        candidates.append((Backend.HIP, found, ""))
    else:
        why = ("no ROCm (hipconfig) found" if not rocm.found else "rocminfo lists no AMD GPU" if not rocm.gpus
               else "no HIP compiler (ROCm's llvm/bin/clang)")
        candidates.append((Backend.HIP, "", why))
    candidates.append((Backend.METAL, "", "Metal exists only on macOS"))
    vk = facts.vulkan
    if vulkan.usable(vk):
        candidates.append((Backend.VULKAN, f"Vulkan GPU {vulkan.describe(vk)}; headers, glslc and SPIR-V headers found", ""))
    else:
        lacking = vulkan.missing(vk)
        if not vk.devices:
            why = "no Vulkan device seen (loader, driver or vulkaninfo missing)"
        elif not vk.gpus:
            why = (f"the only Vulkan devices are CPU-type ({vulkan.describe(vk)}): no faster than the CPU backend; "
                   "set backend: vulkan to build for it anyway")
        else:
            why = f"Vulkan GPU {vulkan.describe(vk)}, but missing {', '.join(lacking)}"
        candidates.append((Backend.VULKAN, "", why))
    chosen = next(((b, reason) for b, reason, why_not in candidates if not why_not), None)
    for backend, _, why_not in candidates:
        if why_not:
            planner.decide("backend rejected", backend.value, why_not)
        elif chosen and backend is not chosen[0]:
            planner.decide("backend rejected", backend.value, f"usable, but {chosen[0].value} is preferred")
    if chosen:
        planner.decide("backend", chosen[0].value, chosen[1])
        return chosen[0], toolkit if chosen[0] is Backend.CUDA else None
    missing = candidates[0][2]
    planner.decide("backend", "cpu", f"{missing}: building CPU-only")
    planner.warn("cpu-only", f"CPU-only build ({missing}): the wheel will not offload any layer to a GPU")
    if gpu:
        cuda.propose_pypi_toolkit(planner, f"{gpu.name} found but no CUDA toolkit; for a CUDA build set backend: cuda")
    return Backend.CPU, None


def configure_backend(planner: Planner) -> None:
    """The CMake arguments and checks of the chosen backend."""
    from playbook.steps.configure.planner import use_prebuilt_library

    backend = planner.backend
    if backend is Backend.PREBUILT:
        use_prebuilt_library(planner)
    elif backend is Backend.CUDA:
        cuda.configure(planner)
    elif backend is Backend.HIP:
        hip.configure(planner)
    elif backend is Backend.VULKAN:
        vulkan.configure(planner)
    elif backend is Backend.METAL:
        apple.configure_metal(planner)
    elif backend is Backend.CPU:
        planner.cmake_args.append("-DGGML_CUDA=off")
    if planner.platform in ("linux", "wsl") and backend in (Backend.CUDA, Backend.PREBUILT):
        cuda.check_driver_libraries(planner)
