"""Configure: the build plan from detected facts and parameters (see :mod:`.planner`)."""

from playbook.steps.configure.plan import BuildPlan, Decision, PlanWarning, multimodal_built
from playbook.steps.configure.planner import (
    Planner,
    configure,
    configure_here,
    configure_step,
    machine_platform,
    parallel_jobs,
)

__all__ = ["BuildPlan", "Decision", "PlanWarning", "Planner", "configure", "configure_here", "configure_step", "machine_platform",
           "multimodal_built", "parallel_jobs"]
