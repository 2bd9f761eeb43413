"""What every backend is: one :class:`BackendUnit` per module of :mod:`playbook.backends`, registered once in
:mod:`playbook.backends.registry`.

A unit owns everything particular to its backend: which detected facts it reads, whether this machine can
use it (and why not), what the plan gets (CMake arguments, the build's and the built package's
environment, its checks as decisions, warnings and blockers), the device verify offloads to, its
knowledge file and its profile. The planner, the chooser, verify and the fleet table only ask the
registry; none of them names a backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from playbook.params import Backend

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner
    from playbook.steps.detect import Facts

GIB_MIB = 1024


@dataclass(frozen=True)
class Assessment:
    """Whether ``backend: auto`` may choose a backend on this machine."""

    usable_because: str = ""
    """Why it is usable ("NVIDIA H200 (compute 9.0) and CUDA 13.0 found"); empty when it is not."""
    blocked_because: str = ""
    """Why it is not ("no NVIDIA GPU visible"); empty when it is usable."""

    @property
    def usable(self) -> bool:
        return not self.blocked_because


class BackendUnit:
    """One backend. Subclasses set the class attributes and override what differs from these defaults."""

    name: ClassVar[Backend]
    """The ``backend`` parameter's value and the plan's ``backend``."""
    cmake_switch: ClassVar[str] = ""
    """The CMake argument that selects it ("-DGGML_CUDA=on"); empty when it has none of its own."""
    facts_read: ClassVar[tuple[str, ...]] = ()
    """The :class:`~playbook.steps.detect.Facts` fields it reads (detect probes them; tests check the names)."""
    knowledge: ClassVar[tuple[str, ...]] = ()
    """Its compatibility tables under ``playbook/knowledge/`` ("cuda.yaml"); failures.yaml holds its ``family``."""
    failure_family: ClassVar[str] = ""
    """The family of its entries in ``knowledge/failures.yaml``; empty when it has none of its own."""
    profile: ClassVar[str] = ""
    """Its ready parameter set, ``params/<profile>.yaml``."""
    auto_rank: ClassVar[int | None] = None
    """Its place in ``backend: auto``'s order of preference (lower first); None: chosen only when asked for."""
    offloads: ClassVar[bool] = True
    """Whether its wheel offloads layers to a device (verify then sweeps ``n_gpu_layers`` and expects offload)."""
    builds_llama_cpp: ClassVar[bool] = True
    """False when the wheel binds a llama.cpp built elsewhere (then libmtmd is not built either)."""
    mib_per_compile_job: ClassVar[int] = 1 * GIB_MIB
    """Peak resident memory of one compiler process on its sources, measured on llama.cpp's."""
    device_log_name: ClassVar[str] = ""
    """The name llama.cpp gives its buffers in a load log ("CUDA" in "CUDA0 model buffer size = ...")."""
    ggml_library: ClassVar[str] = ""
    """The ggml backend library its wheel must hold and load beside the CPU's ("ggml-blas"); empty when the backend
    has none of its own to check (verify's backend-library unit looks for it)."""
    ggml_device: ClassVar[str] = ""
    """The device that library registers ("BLAS"), as ggml's registry names it."""
    planned_on_macos: ClassVar[bool] = False
    """True when asking for it on macOS plans it as on any other system; otherwise the Mac's own choice (Metal or
    CPU, :mod:`playbook.steps.configure.apple`) decides."""
    status: ClassVar[str] = ""
    """Where it has run, as the README's backend table says: runs here, runs on the GPU machine, compiled only,
    planned only."""

    def takes_precedence(self, planner: Planner) -> str:
        """Why the parameters make it the backend whatever ``backend`` says; empty when they do not."""
        return ""

    def prepare(self, planner: Planner) -> None:
        """Choices the assessment needs before any backend is chosen (CUDA: which toolkit)."""

    def assess(self, planner: Planner) -> Assessment:
        """Usable here or not, with the reason, for ``backend: auto``."""
        return Assessment(blocked_because="chosen only when asked for")

    def not_automatic(self, planner: Planner) -> str:
        """Why ``backend: auto`` did not take a backend it never takes (``auto_rank`` None)."""
        assessment = self.assess(planner)
        return assessment.blocked_because or f"{assessment.usable_because}, but chosen only when asked for " \
                                             f"(backend: {self.name.value})"

    def requested(self, planner: Planner) -> Backend:
        """Record the decision when the parameters ask for it; return the backend really built (one that
        cannot exist here falls back to another, which is then asked in turn)."""
        assessment = self.assess(planner)
        planner.decide("backend", self.name.value,
                       f"asked for in parameters; {assessment.usable_because or assessment.blocked_because}")
        return self.name

    def settings_given(self, planner: Planner) -> list[str]:
        """Its parameters set away from their defaults ("cuda.architectures=999"): ignored when another backend is
        built, which the plan then says."""
        return []

    def fallback_hint(self, planner: Planner) -> None:
        """``backend: auto`` found nothing better than the CPU: say what would make this backend usable."""

    def configure(self, planner: Planner) -> None:
        """Its CMake arguments, build and runtime environment, and checks, into ``planner``."""
        if self.cmake_switch:
            planner.cmake_args.append(self.cmake_switch)

    def device(self, facts: Facts) -> str:
        """The device its wheel offloads to on this machine, named; empty when there is none."""
        return ""

    def expected_build_time(self, planner: Planner) -> None:
        """Once the parallel jobs are decided: say how long the build will take here, where it is measured."""
