"""verify.tune_build_flags: the wheel rebuilt with a candidate build flag by the build step's own machinery
(:func:`playbook.steps.build.run_build`: the same source tree, ccache, the wheel cache), written into the run folder's
tune wheelhouse (:meth:`Layout.for_tune_build`), never over the verified wheel or its build log."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playbook.runfolder.layout import Layout
from playbook.verify.tune import FlagBuild

if TYPE_CHECKING:
    from playbook.runfolder.folder import RunFolder
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.steps.source import SourceInfo

# The CMake arguments to add -> the rebuilt wheel (or why there is none).
WheelBuilder = Callable[[list[str]], FlagBuild]


def wheel_builder(plan: BuildPlan, source: SourceInfo, layout: Layout, cache_dir: Path, toolchain: dict[str, Any],
                  python: str = sys.executable, timeout_s: float = 3600, run_id: str = "") -> WheelBuilder:
    """Rebuilds ``plan`` with CMake arguments added (CMake takes the last of a repeated ``-D``)."""
    from playbook.steps.build import run_build

    def build(extra_args: list[str]) -> FlagBuild:
        rebuilt = dataclasses.replace(plan, cmake_args=[*plan.cmake_args, *extra_args])
        result = run_build(rebuilt, source, layout.for_tune_build(), cache_dir, toolchain, python, timeout_s,
                           run_id=run_id)
        return flag_build(extra_args, result, layout)

    return build


def flag_build(extra_args: list[str], result: BuildResult, layout: Layout) -> FlagBuild:
    """What the tune records of a rebuild."""
    from playbook.steps.build import ccache_summary

    log_file = layout.in_run(layout.for_tune_build().build_log(result.attempt))
    built = FlagBuild(list(extra_args), result.ok, result.wheel.path if result.wheel else "",
                      result.wheel.sha256 if result.wheel else "", result.duration_s, bool(result.reused_wheel),
                      ccache_summary(result.ccache) if result.ccache else "", log_file)
    if not result.ok:
        why = "timed out" if result.timed_out else "stalled" if result.stalled else f"pip exited with {result.exit_code}"
        built.error = f"the rebuild failed ({why}); see {log_file}"
    return built


def run_wheel_builder(run: RunFolder, build: Any, plan: Any, facts: Any) -> WheelBuilder:
    """The verify step's rebuilder: the plan of the verified build attempt, its source, the run's cache."""
    from playbook.steps.build import toolchain

    params = run.params()
    return wheel_builder(plan, build.source, run.layout, params.cache_dir, toolchain(facts, plan), sys.executable,
                         params.build.timeout_s, run.run_id)
