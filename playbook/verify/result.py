"""What verify leaves in ``verify-attempt-N.json``: what is verify's own (the verdict, the wheel, the findings,
the settings every unit shared), a record per unit (measured, skipped and why, or where verify stopped) with its
findings and files, and ``measurements``: each unit's value by the unit's name, of the type the unit declares.

A reader asks for a unit's value through the unit, ``result.measured(OFFLOAD_SWEEP)``, and gets the unit's own
dataclass (or None when it did not run). This module names no unit: a new measurement adds nothing here.

Files written before the mapping (every unit's value in a field of its own: ``probe``, ``points``, ``rpc`` ...)
are read through :meth:`VerifyResult.upgrade_json`, the one converter from that flat shape to this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from playbook.knowledge.failures import Finding
from playbook.serialization import as_type
from playbook.verify.flat_result import flat_to_mapping
from playbook.verify.settings import BenchSettings

T_co = TypeVar("T_co", covariant=True)


class Unit(Protocol[T_co]):
    """What names a unit's value: its name (the key in ``measurements``) and its value's type."""

    @property
    def name(self) -> str: ...

    @property
    def value_type(self) -> type[T_co]: ...


@dataclass
class UnitRecord:
    """One verify unit's turn."""

    name: str
    """The unit (``import-probe``, ``offload-sweep`` ...)."""
    status: str
    """measured, skipped, or stopped verify (nothing after it could run)."""
    note: str = ""
    """Why it was skipped, or why verify stopped there."""
    findings: list[str] = field(default_factory=list)
    """The ids of what it found."""
    files: list[str] = field(default_factory=list)
    """The run-folder files it wrote, relative to the run folder."""
    duration_s: float | None = None
    """How long it took."""
    passed: bool = True
    """False when its check failed even without a finding."""


@dataclass
class VerifyResult:
    ok: bool
    """Every unit had its turn, the sweep measured, nothing was found and every check passed."""
    wheel: str
    """The wheel's file name."""
    site_dir: str
    """Where it was installed alone (first on every child's path)."""
    threads: int = 0
    """The threads every throughput measurement ran with."""
    settings: BenchSettings | None = None
    """Every throughput measurement's runtime settings (llama-bench got the same)."""
    findings: list[Finding] = field(default_factory=list)
    """What verify found wrong, most specific first."""
    summary: str = ""
    """One sentence: the units' summaries and notes, or why verify stopped."""
    compiled_only: str = ""
    """Why only the build and its machine code were checked: the wheel cannot load here ("" otherwise)."""
    runtime_env: dict[str, str] = field(default_factory=dict)
    """The plan's variables every child got."""
    dll_directories: list[str] = field(default_factory=list)
    """Passed to every child (os.add_dll_directory, Windows)."""
    extras: list[str] = field(default_factory=list)
    """Installed with the wheel: llama-cpp-python[extras]."""
    units: list[UnitRecord] = field(default_factory=list)
    """Each unit's turn, in the order they ran."""
    measurements: dict[str, Any] = field(default_factory=dict)
    """Each unit's value by its name; typed by the unit when read through :meth:`measured`."""

    def measured(self, unit: Unit[T_co]) -> T_co | None:
        """``unit``'s value, as its own type; None when it did not run or made none."""
        value = self.measurements.get(unit.name)
        if value is None:
            return None
        typed = as_type(unit.value_type, value)
        self.measurements[unit.name] = typed
        return typed

    def record(self, unit: Unit[Any], value: Any) -> None:
        """Keep ``unit``'s value under its name."""
        self.measurements[unit.name] = value

    @classmethod
    def upgrade_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A verify-attempt-N.json of either shape as this one: a file from before the mapping (no
        ``measurements``) has its units' fields moved under their units' names; a current one is kept as it is."""
        return data if "measurements" in data else flat_to_mapping(data)
