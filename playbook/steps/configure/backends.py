"""Which backend the wheel is built for, and the CMake arguments that select it.

``backend: auto`` picks, in this order, what the machine can use: a prebuilt library when one is
given, Metal on Apple silicon, CUDA with an NVIDIA GPU and a toolkit, and CPU otherwise; the
decision names the reason, and a warning names each alternative rejected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from playbook.params import Backend
from playbook.steps.configure import apple, cuda
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
    gpu = facts.best_gpu
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
    if gpu and toolkit:
        planner.decide("backend", "cuda",
                       f"{gpu.name} (compute {gpu.compute_capability}) and CUDA {toolkit.version} found")
        return Backend.CUDA, toolkit
    missing = "no NVIDIA GPU visible" if not gpu else "no CUDA toolkit (nvcc) found"
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
    elif backend is Backend.METAL:
        planner.cmake_args.append("-DGGML_METAL=on")
    elif backend is Backend.CPU:
        planner.cmake_args.append("-DGGML_CUDA=off")
    if planner.platform in ("linux", "wsl") and backend in (Backend.CUDA, Backend.PREBUILT):
        cuda.check_driver_libraries(planner)
