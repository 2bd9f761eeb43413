"""What every backend is: one :class:`BackendUnit` per module of :mod:`playbook.backends`, registered once in
:mod:`playbook.backends.registry`.

A unit owns everything particular to its backend: its parameter section (``settings_type``, checked by
:meth:`BackendUnit.check_settings`), which detected facts it reads and the devices it sees in them, whether this
machine can use it (and why not), and its plan: CMake arguments, the build's and the built package's environment,
its checks as decisions, warnings and blockers. It plans from frozen :class:`~playbook.backends.plan.BackendInputs`
and returns :class:`~playbook.backends.plan.BackendPlan` values; it never imports a step. The planner, the chooser,
verify and the fleet table only ask the registry; none of them names a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.facts import Device, Facts
from playbook.knowledge.failures import Remedy
from playbook.probing import ProbeContext
from playbook.toolkits import pypi

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


@dataclass(frozen=True)
class WheelFit:
    """Whether a published wheel of a backend runs on this machine, as that backend's own rules say (its tags, its
    glibc and its CPU code are the index's to check, not the backend's)."""

    ok: bool
    """The backend's part of the wheel runs here."""
    reason: str
    """Why it runs ("native machine code sm_86 for NVIDIA GeForce RTX 3090") or why not ("CUDA 13.0 is newer than
    the driver supports"); a sentence for people, empty when the backend has nothing to say."""
    rank: tuple[int, ...] = ()
    """Among fitting wheels of one backend, the higher runs better here (CUDA: (3,) exact machine code, (2,) machine
    code of an older minor, (1,) PTX only); compared only between wheels of the same backend."""


@dataclass(frozen=True)
class NoSettings:
    """A backend without a parameter section of its own."""


class BackendUnit:
    """One backend. Subclasses set the class attributes and override what differs from these defaults."""

    name: ClassVar[str]
    """The ``backend`` parameter's value, the plan's ``backend``, and its parameter section's key."""
    cmake_switch: ClassVar[str] = ""
    """The CMake argument that selects it ("-DGGML_CUDA=on"); empty when it has none of its own."""
    settings_type: ClassVar[type] = NoSettings
    """Its parameter section (``cuda: {architectures: "90"}``): a frozen dataclass with a docstring per field."""
    facts_read: ClassVar[tuple[str, ...]] = ()
    """The :class:`~playbook.facts.Facts` fields it reads (detect probes them; tests check the names)."""
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
    tune_build_flags: ClassVar[str] = ""
    """The kind of build flags verify.tune_build_flags may rebuild with ("flash-attention-kernels"); empty: none."""
    machine_code: ClassVar[str] = ""
    """The tool verify lists its library's machine code with ("cuobjdump"); empty when it compiles none of its own."""
    ggml_library: ClassVar[str] = ""
    """The ggml backend library its wheel must hold and load beside the CPU's ("ggml-blas"); empty when the backend
    has none of its own to check (verify's backend-library unit looks for it)."""
    ggml_device: ClassVar[str] = ""
    """The device that library registers ("BLAS"), as ggml's registry names it."""
    asked_by_name: ClassVar[bool] = True
    """Whether the ``backend`` parameter may name it; False for one that other parameters choose."""
    platforms: ClassVar[tuple[str, ...]] = ("linux", "wsl", "windows", "macos")
    """The platforms it exists on; asked for elsewhere, the plan says so and the platform's own choice decides."""
    native_to: ClassVar[str] = ""
    """The platform whose own choice it is ("macos" for Metal): there it is chosen before every other backend when
    usable, and a backend that does not exist there falls back to it or to the CPU."""
    upstream_variants: ClassVar[tuple[str, ...]] = ()
    """The folders of llama-cpp-python's own wheel index (``https://abetlen.github.io/llama-cpp-python/whl/<folder>``)
    that hold this backend's wheels ("cpu", "metal"); the first is the one :meth:`upstream_variant` names."""
    status: ClassVar[str] = ""
    """Where it has run, as the README's backend table says: runs here, runs on the GPU machine, compiled only,
    planned only."""

    # ------------------------------------------------------------------ parameters

    def check_settings(self, settings: Any) -> None:
        """Raise :class:`~playbook.errors.ParameterError` naming the key and what to change, before anything runs."""

    def settings_given(self, settings: Any) -> list[str]:
        """Its parameters set away from their defaults ("cuda.architectures=999"): ignored when another backend is
        built, which the plan then says."""
        defaults = self.settings_type()
        return [f"{self.name}.{key}={value}" for key, value in vars(settings).items()
                if value != getattr(defaults, key)]

    # ------------------------------------------------------------------ choosing

    def takes_precedence(self, inputs: BackendInputs) -> str:
        """Why the parameters make it the backend whatever ``backend`` says; empty when they do not."""
        return ""

    def assess(self, inputs: BackendInputs) -> Assessment:
        """Usable here or not, with the reason, for ``backend: auto``."""
        return Assessment(blocked_because="chosen only when asked for")

    def not_automatic(self, inputs: BackendInputs) -> str:
        """Why ``backend: auto`` did not take a backend it never takes (``auto_rank`` None)."""
        assessment = self.assess(inputs)
        return assessment.blocked_because or f"{assessment.usable_because}, but chosen only when asked for " \
                                             f"(backend: {self.name})"

    def requested(self, inputs: BackendInputs) -> Choice:
        """The parameters ask for it: the decision, and the backend really built (one that cannot exist here names
        another, which is then asked in turn)."""
        assessment = self.assess(inputs)
        draft = PlanDraft(inputs)
        draft.decide("backend", self.name,
                     f"asked for in parameters; {assessment.usable_because or assessment.blocked_because}")
        return Choice(self.name, draft.result())

    def choose_natively(self, inputs: BackendInputs) -> Choice:
        """The platform's own choice, for a unit ``native_to`` it: for ``backend: auto`` and for a backend that does
        not exist there; itself when usable, else another backend, saying why in ``fell_back_because``."""
        assessment = self.assess(inputs)
        if assessment.usable:
            return self.requested(inputs)
        return Choice("cpu", BackendPlan(), assessment.blocked_because)

    def whichever_built(self, inputs: BackendInputs) -> BackendPlan:
        """Checks of its settings that hold whichever backend is built (an architecture no toolkit knows)."""
        return BackendPlan()

    def fallback_hint(self, inputs: BackendInputs) -> BackendPlan:
        """``backend: auto`` found nothing better than the CPU: what would make this backend usable."""
        return BackendPlan()

    # ------------------------------------------------------------------ planning

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        """Its CMake arguments, build and runtime environment, and checks."""
        return BackendPlan(cmake_args=(self.cmake_switch,) if self.cmake_switch else ())

    def expected_build_time(self, inputs: BackendInputs, planned: BackendPlan) -> BackendPlan:
        """Once the parallel jobs are decided (``inputs.jobs``): how long the build will take here, where measured."""
        return BackendPlan()

    # ------------------------------------------------------------------ repairing

    def remedy(self, remedy: Remedy, inputs: BackendInputs) -> BackendPlan:
        """What a knowledge-base remedy changes in its own part of a failed attempt's plan (its toolkit, its GPU
        architectures, its host compiler), from that plan as ``inputs``; empty when nothing."""
        return BackendPlan()

    def assemble(self, request: pypi.ToolkitRequest, cache_dir: Path, *, python: str,
                 log: Callable[[str], None] | None = None) -> pypi.ProvisionedToolkit:
        """Lay out the toolkit its plan's ``toolkit_request`` names in the playbook's cache (build calls it before
        CMake runs; raises :class:`~playbook.toolkits.pypi.ToolkitError`). This default assembles NVIDIA's PyPI
        wheels (:func:`playbook.toolkits.pypi.provision`); a unit that requests another toolkit assembles its own."""
        return pypi.provision(request, cache_dir, python=python, log=log)

    def toolkit_release(self, inputs: BackendInputs) -> str:
        """The release of the toolkit a plan builds with ("13.0"), where it has one; "" otherwise."""
        return ""

    # ------------------------------------------------------------------ detecting

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        """The :class:`~playbook.facts.Facts` fields it owns, probed on this machine (detect calls each unit's probe
        and fills Facts with what they return); a missing tool is a fact, never an exception."""
        return {}

    # ------------------------------------------------------------------ published wheels

    def wheel_requirements(self, cmake_args: Sequence[str], toolkit_release: str,
                           machine_code: Sequence[str]) -> dict[str, Any]:
        """What a wheel of this backend needs of a machine beyond its CPU code, recorded beside it when it is
        published (plain JSON values, read back by :meth:`wheel_fit`).

        ``cmake_args``: the plan's CMake arguments; ``toolkit_release``: the release of the GPU toolkit it was built
        with ("12.8"; "" for none); ``machine_code``: the architectures verify's machine-code listing found in its
        library ("sm_86", "gfx1100"; empty when nothing was listed). {} when it needs nothing of its own."""
        return {}

    def wheel_fit(self, requirements: Mapping[str, Any], facts: Facts) -> WheelFit:
        """Whether a wheel of this backend whose :meth:`wheel_requirements` were ``requirements`` runs on the machine
        ``facts`` describe. This default: a backend that offloads needs a GPU among its :meth:`devices` (a CPU-type
        device, Mesa's lavapipe, is no reason to take its wheel over a CPU one); one that does not, nothing."""
        if not self.offloads:
            return WheelFit(True, "runs on the CPU")
        found = self.devices(facts)
        gpus = [d for d in found if d.kind == "gpu"]
        if gpus:
            return WheelFit(True, f"runs on {gpus[0].describe()}")
        if found:
            return WheelFit(False, f"only CPU-type {self.name} devices here ({', '.join(d.name for d in found)}): no "
                                   "faster than a CPU wheel")
        return WheelFit(False, f"no {self.name} GPU was detected")

    def upstream_requirements(self, variant: str) -> tuple[dict[str, Any], list[str]] | None:
        """What the name of a plain PEP 503 index folder (upstream's ``whl/cu124``; no playbook record beside its
        wheels) says a wheel of this backend needs, in :meth:`wheel_requirements`' form, and what it cannot say
        (["GPU architectures"]): the check on this machine decides that. None when the folder is not this backend's.
        This default: a folder of :attr:`upstream_variants` says nothing more."""
        return ({}, []) if variant in self.upstream_variants else None

    def upstream_variant(self, facts: Facts) -> str:
        """The upstream index folder whose wheels could run on this machine ("cu124" for a driver of CUDA 12.4 or
        12.5...); "" when upstream publishes none for it."""
        return self.upstream_variants[0] if self.upstream_variants else ""

    # ------------------------------------------------------------------ devices

    def devices(self, facts: Facts) -> list[Device]:
        """The devices its wheel could offload to on this machine, from the facts its probe filled."""
        return []

    def device(self, facts: Facts) -> str:
        """The device its wheel offloads to on this machine, named; empty when there is none."""
        found = self.devices(facts)
        return found[0].name if found else ""
