"""What a backend unit plans from and what it returns: frozen inputs in, a :class:`BackendPlan` value out.

As scikit-build-core's builder returns the defines and environment it computed instead of mutating shared
state, a unit never sees the planner: it gets :class:`BackendInputs` (the detected facts, its own typed
settings, the platform, the environment planned before it) and returns a :class:`BackendPlan` (CMake
arguments, build and runtime environment, decisions with reasons, warnings and blockers with codes). The
planner (:mod:`playbook.steps.configure.planner`) composes those values. Inside a unit, its checks write into
a :class:`PlanDraft`, a scratch pad that belongs to one call and ends as a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.facts import CudaToolkit, Facts
from playbook.toolkits.pypi import ToolkitRequest

MULTIMODAL_OPTION = "LLAVA_BUILD"  # llama-cpp-python's switch for libmtmd
# Every name the switch has: JamePeng's fork (guide 002) renamed it MTMD_BUILD and ignores LLAVA_BUILD.
MULTIMODAL_OPTIONS = (MULTIMODAL_OPTION, "MTMD_BUILD")


@dataclass
class Decision:
    what: str
    value: str
    reason: str


@dataclass
class PlanWarning:
    """A conflict the plan found. ``code`` is stable (tests and tools match it); ``message`` is for people."""

    code: str
    message: str

    def __str__(self) -> str:
        return self.message

    @classmethod
    def from_text(cls, text: str) -> PlanWarning:
        """A plan written before warnings had codes (an archived run folder)."""
        return cls("unclassified", text)


def cmake_define(arg: str) -> tuple[str, str] | None:
    """``("CMAKE_CXX_COMPILER", "/usr/bin/g++")`` of ``-DCMAKE_CXX_COMPILER:FILEPATH=/usr/bin/g++``; None when the
    argument defines no variable. The one reader of a ``-D`` argument."""
    if not arg.startswith("-D") or "=" not in arg:
        return None
    name, value = arg[2:].split("=", 1)
    return name.split(":")[0], value


def defined_value(cmake_args: list[str] | tuple[str, ...], name: str) -> str | None:
    """The last value ``cmake_args`` give the variable ``name``; None when none does."""
    values = [define[1] for a in cmake_args if (define := cmake_define(a)) and define[0] == name]
    return values[-1] if values else None


def with_cmake_arg(cmake_args: list[str], arg: str) -> list[str]:
    """``cmake_args`` with ``-DNAME=value`` added last, replacing every earlier value of the same variable."""
    define = cmake_define(arg)
    if define is None:
        return [a for a in cmake_args if a != arg] + [arg]
    return [a for a in cmake_args if (cmake_define(a) or ("",))[0] != define[0]] + [arg]


@dataclass(frozen=True)
class BackendInputs:
    """Everything a unit plans from; nothing it could change."""

    facts: Facts
    """What detect found."""
    settings: Any
    """The unit's own typed settings (an instance of its ``settings_type``), defaults when none were given."""
    platform: str = "linux"
    """linux, wsl, windows or macos."""
    wanted: str = "auto"
    """The ``backend`` parameter: ``auto`` or a unit's name."""
    cache_dir: Path = Path()
    """The playbook's cache (toolkits assembled from PyPI go there)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The build environment planned before the unit (build.env, the C/C++ compilers configure chose)."""
    cmake_args: tuple[str, ...] = ()
    """The CMake arguments planned before the unit."""
    source_release: str = ""
    """The llama-cpp-python release being built (source.version of an sdist); empty for a local tree."""
    prebuilt_lib: str = ""
    """build.prebuilt_lib: an existing llama.cpp library to bind instead of building one."""
    jobs: int = 1
    """The build's parallel compile jobs, once decided (the expected build time reads it)."""
    toolkit_root: str = ""
    """A remedy's input: the toolkit the failed attempt built with."""
    toolkit_request: ToolkitRequest | None = None
    """A remedy's input: the PyPI toolkit the failed attempt assembled, if any."""
    architectures: str = ""
    """A remedy's input: the GPU architectures the failed attempt compiled for."""


@dataclass(frozen=True)
class BackendPlan:
    """What a unit adds to the build plan: a value the planner composes."""

    cmake_args: tuple[str, ...] = ()
    """Added in order, each ``-DNAME=value`` replacing an earlier value of the same variable."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Set in the build's environment."""
    runtime_env: Mapping[str, str] = field(default_factory=dict)
    """Set for every process that loads the wheel (verify's children, the install line)."""
    dll_directories: tuple[str, ...] = ()
    """Folders Windows must search for the wheel's DLLs (os.add_dll_directory)."""
    decisions: tuple[Decision, ...] = ()
    warnings: tuple[PlanWarning, ...] = ()
    blockers: tuple[PlanWarning, ...] = ()
    """Conflicts that make the build fail for certain (each is a warning too)."""
    toolkit: CudaToolkit | None = None
    """The GPU toolkit it builds with, where it has one."""
    toolkit_request: ToolkitRequest | None = None
    """A toolkit build must first assemble from PyPI wheels."""
    architectures: str = ""
    """The GPU architectures it compiles for, as its CMake argument gives them ("90", "native")."""
    gpu_targets: str = ""
    """The GPU targets verify looks for in the machine code ("90", "gfx1100")."""


class PlanNotes:
    """What a plan in the making says about itself: decisions, warnings (each once) and blockers. Shared by a
    unit's :class:`PlanDraft` and the configure step's planner, which keep the three lists."""

    decisions: list[Decision]
    warnings: list[PlanWarning]
    blockers: list[PlanWarning]

    def decide(self, what: str, value: str, reason: str) -> None:
        self.decisions.append(Decision(what, value, reason))

    def warn(self, code: str, message: str) -> None:
        if not any(w.code == code and w.message == message for w in self.warnings):
            self.warnings.append(PlanWarning(code, message))

    def block(self, code: str, message: str) -> None:
        """A conflict that makes the build fail for certain: the run refuses to build unless forced."""
        self.blockers.append(PlanWarning(code, message))
        self.warn(code, message)

    def note(self, plan: BackendPlan) -> None:
        """Another plan's decisions, warnings and blockers, as if this one had said them."""
        self.decisions += plan.decisions
        for warning in plan.warnings:
            self.warn(warning.code, warning.message)
        self.blockers += plan.blockers


class PlanDraft(PlanNotes):
    """One unit call's scratch pad: its checks add to it, :meth:`result` freezes it. Holds the inputs it was
    opened with, so that a check reads the facts, the settings and the environment planned so far from it."""

    def __init__(self, inputs: BackendInputs):
        self.inputs = inputs
        self.facts = inputs.facts
        self.settings = inputs.settings
        self.platform = inputs.platform
        self.env: dict[str, str] = dict(inputs.env)
        self.cmake_args: list[str] = list(inputs.cmake_args)
        self.runtime_env: dict[str, str] = {}
        self.dll_directories: list[str] = []
        self.decisions: list[Decision] = []
        self.warnings: list[PlanWarning] = []
        self.blockers: list[PlanWarning] = []
        self.toolkit: CudaToolkit | None = None
        self.toolkit_request: ToolkitRequest | None = None
        self.architectures = ""
        self.gpu_targets = ""
        self._added: list[str] = []

    def add_cmake_arg(self, arg: str) -> None:
        """Add ``-DNAME=value``, replacing an earlier value of the same variable."""
        self.cmake_args = with_cmake_arg(self.cmake_args, arg)
        self._added = with_cmake_arg(self._added, arg)

    def include(self, other: BackendPlan) -> None:
        """Take another plan's additions as if this draft's checks had made them."""
        for arg in other.cmake_args:
            self.add_cmake_arg(arg)
        self.env.update(other.env)
        self.runtime_env.update(other.runtime_env)
        self.dll_directories += list(other.dll_directories)
        self.note(other)

    def result(self) -> BackendPlan:
        changed = {k: v for k, v in self.env.items() if self.inputs.env.get(k) != v}
        return BackendPlan(
            cmake_args=tuple(self._added),
            env=changed,
            runtime_env=dict(self.runtime_env),
            dll_directories=tuple(self.dll_directories),
            decisions=tuple(self.decisions),
            warnings=tuple(self.warnings),
            blockers=tuple(self.blockers),
            toolkit=self.toolkit,
            toolkit_request=self.toolkit_request,
            architectures=self.architectures,
            gpu_targets=self.gpu_targets,
        )


@dataclass(frozen=True)
class Choice:
    """What a unit says when the parameters ask for it: the backend really built (one that cannot exist here
    names another, which is then asked in turn) and the decisions and warnings of that choice."""

    backend: str
    plan: BackendPlan = BackendPlan()
    fell_back_because: str = ""
    """When ``backend`` is another than the one asked: why (the fallback then says so in its own decision)."""


def draft_result(inputs: BackendInputs, *steps: Any) -> BackendPlan:
    """Run ``steps`` (functions of a :class:`PlanDraft`) in order on one draft and return its value."""
    draft = PlanDraft(inputs)
    for step in steps:
        step(draft)
    return draft.result()
