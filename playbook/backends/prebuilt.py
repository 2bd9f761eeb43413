"""A binding over a llama.cpp library built elsewhere (``build.prebuilt_lib``): no llama.cpp compiled, the
library found at run time through ``LLAMA_CPP_LIB_PATH``. Never a ``backend`` parameter value: the
parameter ``build.prebuilt_lib`` chooses it over any backend."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from playbook.backends import cuda
from playbook.backends.base import Assessment, BackendUnit, WheelFit
from playbook.backends.plan import MULTIMODAL_OPTION, BackendInputs, BackendPlan, PlanDraft
from playbook.facts import Device, Facts


class PrebuiltBackend(BackendUnit):
    name = "prebuilt"
    facts_read = ("gpus", "libcuda_paths", "stub_on_ld_library_path", "wsl_driver_libs")
    failure_family = "loader"
    profile = "prebuilt-lib"
    builds_llama_cpp = False
    offloads = False  # whatever the library was built for, verify cannot know it offloads
    asked_by_name = False
    status = "runs here"

    def takes_precedence(self, inputs: BackendInputs) -> str:
        library = inputs.prebuilt_lib
        return f"build.prebuilt_lib: {library}" if library else ""

    def assess(self, inputs: BackendInputs) -> Assessment:
        reason = self.takes_precedence(inputs)
        return Assessment(reason) if reason else Assessment(blocked_because="build.prebuilt_lib is not set")

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        folder = Path(inputs.prebuilt_lib).expanduser()
        folder = folder if folder.is_dir() else folder.parent
        draft.runtime_env["LLAMA_CPP_LIB_PATH"] = str(folder)
        draft.decide("llama.cpp library", str(folder),
                     "build.prebuilt_lib: llama-cpp-python 0.3.36 loads libllama from $LLAMA_CPP_LIB_PATH "
                     "(llama_cpp/llama_cpp.py), and its CMakeLists.txt skips compiling llama.cpp with -DLLAMA_BUILD=OFF")
        draft.warn("prebuilt-library", f"prebuilt library: the wheel holds no llama.cpp; set LLAMA_CPP_LIB_PATH={folder} "
                   "wherever it is imported, and keep the library's GPU support and version matching llama-cpp-python "
                   "0.3.36")
        draft.add_cmake_arg("-DLLAMA_BUILD=OFF")
        draft.add_cmake_arg(f"-D{MULTIMODAL_OPTION}=OFF")
        if inputs.platform in ("linux", "wsl"):
            cuda.check_driver_libraries(draft)  # the library may well be a CUDA build
        return draft.result()

    def wheel_fit(self, requirements: Mapping[str, Any], facts: Facts) -> WheelFit:
        """Never elsewhere: the wheel holds no llama.cpp and loads the library build.prebuilt_lib named on the
        machine that built it."""
        return WheelFit(False, "it holds no llama.cpp and loads a library built elsewhere (build.prebuilt_lib), "
                               "which only the machine that built it has")

    def devices(self, facts: Facts) -> list[Device]:
        return []  # whatever the library was built for: verify cannot know

    def device(self, facts: Facts) -> str:
        best = facts.best_gpu
        return best.name if best else ""
