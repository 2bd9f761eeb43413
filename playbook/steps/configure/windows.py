"""Windows and the CMake generator: Ninja over Visual Studio's CUDA integration, short temp paths. Each returns
what it decided as a value (:class:`~playbook.backends.plan.BackendPlan`) for the planner to apply."""

from __future__ import annotations

from playbook.backends.plan import BackendPlan, Decision, PlanWarning
from playbook.facts import Facts

# Windows' 260-character path limit: a build under a longer temp folder fails in llama.cpp's deep tree.
LONGEST_SAFE_TEMP = 20
SHORT_TEMP = "C:\\t"


def choose_generator(facts: Facts, platform: str) -> tuple[str, BackendPlan]:
    """The CMake generator ("" for CMake's own choice) and the plan's part in choosing it."""
    if platform != "windows":
        if facts.ninja.found:
            return "Ninja", BackendPlan(decisions=(Decision(
                "generator", "Ninja", f"ninja {facts.ninja.version} found; scikit-build-core uses it"),))
        return "", BackendPlan()
    if facts.ninja.found:
        return "Ninja", BackendPlan(env={"CMAKE_GENERATOR": "Ninja"}, decisions=(Decision(
            "generator", "Ninja", "the Visual Studio generator needs CUDA's Visual Studio integration "
            "('No CUDA toolset found'); Ninja only needs the developer environment"),))
    studio = facts.newest_visual_studio
    warnings: tuple[PlanWarning, ...] = ()
    if studio is None or not studio.cuda_integration:
        warnings = (PlanWarning("no-cuda-toolset", "ninja not found and CUDA's Visual Studio integration is not "
                                "installed: CMake will stop with 'No CUDA toolset found'; `pip install ninja` (the "
                                "playbook then uses the Ninja generator)"),)
    return "Visual Studio", BackendPlan(warnings=warnings,
                                        decisions=(Decision("generator", "Visual Studio", "ninja not found"),))


def short_temp(facts: Facts) -> BackendPlan:
    temp = facts.temp_dir
    if temp and len(temp) <= LONGEST_SAFE_TEMP and " " not in temp:
        return BackendPlan()
    return BackendPlan(env={"TEMP": SHORT_TEMP, "TMP": SHORT_TEMP}, decisions=(Decision(
        "TEMP/TMP", SHORT_TEMP, f"the temp folder {temp or '(unknown)'} is long: llama.cpp's deep build tree under it "
        "passes Windows' 260-character path limit; create C:\\t first"),))
