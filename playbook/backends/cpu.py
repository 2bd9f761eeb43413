"""CPU only: what every machine can build, and what ``backend: auto`` falls back to. Reads nothing beyond
the compilers every build needs; ``build.native`` (``-march=native`` or not) is the planner's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playbook.backends.base import Assessment, BackendUnit
from playbook.params import Backend

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner

CPU_ONLY_WARNING = "cpu-only"


class CpuBackend(BackendUnit):
    name = Backend.CPU
    cmake_switch = "-DGGML_CUDA=off"
    failure_family = "cpu"
    profile = "cpu"
    offloads = False
    status = "runs here"

    def assess(self, planner: Planner) -> Assessment:
        return Assessment("every machine can build it")

    def requested(self, planner: Planner) -> Backend:
        planner.decide("backend", "cpu", "asked for in parameters (backend: cpu)")
        planner.warn(CPU_ONLY_WARNING, "CPU-only build: the wheel will not offload any layer to a GPU")
        return self.name

    def fallen_back(self, planner: Planner, missing: str) -> Backend:
        """``backend: auto`` found no usable accelerator; ``missing`` is why the first choice was not usable."""
        planner.decide("backend", "cpu", f"{missing}: building CPU-only")
        planner.warn(CPU_ONLY_WARNING, f"CPU-only build ({missing}): the wheel will not offload any layer to a GPU")
        return self.name
