"""Configure: the build plan from detected facts and parameters (see :mod:`.planner`).

The names below are resolved when first used (PEP 562), not when the package is imported: a module of
this package, or a backend unit that uses one (``windows``, ``plan``), can then be imported alone, and no
import cycle runs through here.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BuildPlan": "plan", "Decision": "plan", "PlanWarning": "plan", "multimodal_built": "plan",
    "Planner": "planner", "configure": "planner", "configure_here": "planner", "configure_step": "planner",
    "machine_platform": "planner", "parallel_jobs": "planner",
}
__all__ = ["BuildPlan", "Decision", "PlanWarning", "Planner", "configure", "configure_here", "configure_step",
           "machine_platform", "multimodal_built", "parallel_jobs"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
