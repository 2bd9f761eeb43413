"""Windows and the CMake generator: Ninja over Visual Studio's CUDA integration, short temp paths,
forward slashes in paths with spaces."""

from __future__ import annotations

from pathlib import PureWindowsPath
from typing import TYPE_CHECKING, Any

from playbook.knowledge.compatibility import version_tuple
from playbook.steps.detect import Facts

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner

# Windows' 260-character path limit: a build under a longer temp folder fails in llama.cpp's deep tree.
LONGEST_SAFE_TEMP = 20
SHORT_TEMP = "C:\\t"


def newest_visual_studio(facts: Facts) -> Any:
    return max(facts.visual_studio, key=lambda vs: version_tuple(vs.version), default=None)


def choose_generator(planner: Planner) -> str:
    facts = planner.facts
    if planner.platform != "windows":
        if facts.ninja.found:
            planner.decide("generator", "Ninja", f"ninja {facts.ninja.version} found; scikit-build-core uses it")
            return "Ninja"
        return ""
    if facts.ninja.found:
        planner.env["CMAKE_GENERATOR"] = "Ninja"
        planner.decide("generator", "Ninja", "the Visual Studio generator needs CUDA's Visual Studio integration "
                       "('No CUDA toolset found'); Ninja only needs the developer environment")
        return "Ninja"
    studio = newest_visual_studio(facts)
    if studio is None or not studio.cuda_integration:
        planner.warn("no-cuda-toolset", "ninja not found and CUDA's Visual Studio integration is not installed: CMake "
                     "will stop with 'No CUDA toolset found'; `pip install ninja` (the playbook then uses the Ninja "
                     "generator)")
    planner.decide("generator", "Visual Studio", "ninja not found")
    return "Visual Studio"


def short_temp(planner: Planner) -> None:
    temp = planner.facts.temp_dir
    if temp and len(temp) <= LONGEST_SAFE_TEMP and " " not in temp:
        return
    planner.env["TEMP"] = planner.env["TMP"] = SHORT_TEMP
    planner.decide("TEMP/TMP", SHORT_TEMP, f"the temp folder {temp or '(unknown)'} is long: llama.cpp's deep build "
                   "tree under it passes Windows' 260-character path limit; create C:\\t first")


def cudacxx_path(planner: Planner, nvcc: str) -> str:
    if planner.platform != "windows" or " " not in nvcc:
        return nvcc
    forward = PureWindowsPath(nvcc).as_posix()
    planner.decide("CUDACXX path", forward, "the path has spaces: CMake reads forward slashes whole, backslashes with "
                   "spaces break (guide: 'CMAKE_CUDA_COMPILER: c:PERSONAL')")
    return forward
