"""A binding over a llama.cpp library built elsewhere (``build.prebuilt_lib``): no llama.cpp compiled, the
library found at run time through ``LLAMA_CPP_LIB_PATH``. Never a ``backend`` parameter value: the
parameter ``build.prebuilt_lib`` chooses it over any backend."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from playbook.backends import cuda
from playbook.backends.base import Assessment, BackendUnit
from playbook.params import Backend
from playbook.steps.configure.plan import MULTIMODAL_OPTION

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner
    from playbook.steps.detect import Facts


class PrebuiltBackend(BackendUnit):
    name = Backend.PREBUILT
    facts_read = ("gpus", "libcuda_paths", "stub_on_ld_library_path", "wsl_driver_libs")
    failure_family = "loader"
    profile = "prebuilt-lib"
    builds_llama_cpp = False
    offloads = False  # whatever the library was built for, verify cannot know it offloads
    status = "runs here"

    def takes_precedence(self, planner: Planner) -> str:
        library = planner.params.build.prebuilt_lib
        return f"build.prebuilt_lib: {library}" if library else ""

    def assess(self, planner: Planner) -> Assessment:
        reason = self.takes_precedence(planner)
        return Assessment(reason) if reason else Assessment(blocked_because="build.prebuilt_lib is not set")

    def configure(self, planner: Planner) -> None:
        folder = Path(planner.params.build.prebuilt_lib).expanduser()
        folder = folder if folder.is_dir() else folder.parent
        planner.runtime_env["LLAMA_CPP_LIB_PATH"] = str(folder)
        planner.decide("llama.cpp library", str(folder),
                       "build.prebuilt_lib: llama-cpp-python 0.3.36 loads libllama from $LLAMA_CPP_LIB_PATH "
                       "(llama_cpp/llama_cpp.py), and its CMakeLists.txt skips compiling llama.cpp with -DLLAMA_BUILD=OFF")
        planner.warn("prebuilt-library", f"prebuilt library: the wheel holds no llama.cpp; set LLAMA_CPP_LIB_PATH={folder} "
                     "wherever it is imported, and keep the library's GPU support and version matching llama-cpp-python "
                     "0.3.36")
        planner.cmake_args += ["-DLLAMA_BUILD=OFF", f"-D{MULTIMODAL_OPTION}=OFF"]
        if planner.platform in ("linux", "wsl"):
            cuda.check_driver_libraries(planner)  # the library may well be a CUDA build

    def device(self, facts: Facts) -> str:
        best = facts.best_gpu
        return best.name if best else ""
