"""CPU only: what every machine can build, and what ``backend: auto`` falls back to. Reads nothing beyond
the compilers every build needs; ``build.native`` (``-march=native`` or not) is the planner's."""

from __future__ import annotations

from playbook.backends.base import Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.facts import Device, Facts

CPU_ONLY_WARNING = "cpu-only"


class CpuBackend(BackendUnit):
    name = "cpu"
    cmake_switch = "-DGGML_CUDA=off"
    failure_family = "cpu"
    profile = "cpu"
    offloads = False
    upstream_variants = ("cpu",)
    tune_build_flags = "llamafile-kernels"
    status = "runs here"

    def assess(self, inputs: BackendInputs) -> Assessment:
        return Assessment("every machine can build it")

    def requested(self, inputs: BackendInputs) -> Choice:
        draft = PlanDraft(inputs)
        draft.decide("backend", self.name, f"asked for in parameters (backend: {self.name})")
        draft.warn(CPU_ONLY_WARNING, "CPU-only build: the wheel will not offload any layer to a GPU")
        return Choice(self.name, draft.result())

    def devices(self, facts: Facts) -> list[Device]:
        return [Device(self.name, facts.cpu.model or "CPU", kind="cpu", detail=f"{facts.cpu.logical_cores} cores")]

    def device(self, facts: Facts) -> str:
        return ""  # nothing is offloaded: the layers stay where they are

    def fallen_back(self, inputs: BackendInputs, missing: str) -> BackendPlan:
        """``backend: auto`` (or the platform's choice) found no usable accelerator; ``missing`` says why."""
        draft = PlanDraft(inputs)
        draft.decide("backend", self.name, f"{missing}: building CPU-only")
        draft.warn(CPU_ONLY_WARNING, f"CPU-only build ({missing}): the wheel will not offload any layer to a GPU")
        return draft.result()
