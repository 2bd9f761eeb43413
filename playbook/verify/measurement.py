"""Verify's measurements as units: one small interface, one registry, one context they all take.

Modelled on papermill's engines: a unit is a class with a ``name`` that :class:`Registry` keeps in
order, and verify runs every registered unit in turn. A unit takes the :class:`VerifyContext` (the
installed wheel, the model, the settings, the plan's expectations, and the results of the units before
it) and returns a :class:`Measured`: its typed value, its findings, the run-folder files it wrote
(named under its namespace by :meth:`VerifyContext.files`), and, when nothing after it can run, why.
Its value goes into ``verify-attempt-N.json``'s ``measurements`` under its name, and comes back as its
``value_type`` through :meth:`~playbook.verify.result.VerifyResult.measured`.

Adding a measurement: one module under ``playbook/verify/units/`` with one class, and one
``registry.register(...)`` line in ``playbook/verify/units/__init__.py`` at the place in the order
where the values it reads exist. Nothing else: neither the result nor the layout has a line per unit.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from playbook.backends.rpc import RpcPlan
from playbook.errors import PlaybookError
from playbook.knowledge.failures import Finding
from playbook.params import Params
from playbook.runfolder.layout import Layout, UnitFiles
from playbook.verify.result import UnitRecord, VerifyResult
from playbook.verify.rpc_server import RpcServerBuild
from playbook.verify.settings import BenchSettings
from playbook.verify.tune import FlagBuild
from playbook.verify.yardsticks import LlamaBench

T = TypeVar("T")

# llama-bench from the wheel's own tree: (model, layer counts, settings) -> its measurements.
Yardstick = Callable[[Path, list[int], BenchSettings], LlamaBench]
# rpc-server from the wheel's own tree: (its build log) -> the build.
RpcServerBuilder = Callable[[Path], RpcServerBuild]
# verify.tune_build_flags: the wheel rebuilt with CMake arguments added (playbook.verify.tune_build).
TuneWheelBuilder = Callable[[list[str]], FlagBuild]


@dataclass
class VerifyTarget:
    """What the plan built and where verify runs it: what verify may expect of the wheel."""

    expect_gpu: bool
    """The plan built for a GPU backend (not cpu, not prebuilt): a wheel that cannot offload is a finding."""
    gpu_present: bool = True
    """detect found a device for the plan's backend; without one the GPU checks are skipped, not failed."""
    backend: str = ""
    """The plan's backend (``cuda``, ``hip``, ``cpu`` ...), as messages name it."""
    tune_build_flags: str = ""
    """The kind of build flags verify.tune_build_flags may try for the backend (its unit's ``tune_build_flags``)."""
    machine_code: str = ""
    """The tool that lists the machine code the backend's library holds (its unit's ``machine_code``)."""
    gpu_targets: str = ""
    """The architectures the plan compiled for (CMAKE_CUDA_ARCHITECTURES); "" lists no machine code."""
    toolkit: str = ""
    """The plan's GPU toolkit root, where the listing tool (cuobjdump) is looked for first."""
    compiled_only: str = ""
    """Why the wheel cannot load on this machine although it built (the plan said so: ROCm libraries that need a
    newer glibc); an import that fails here then ends verify as "compiled only", not as a failure."""
    multimodal: bool = False
    """The plan built libmtmd: its bindings must load too."""
    runtime_env: dict[str, str] = field(default_factory=dict)
    """The plan's variables every child gets (LLAMA_CPP_LIB_PATH for a prebuilt library)."""
    dll_directories: list[str] = field(default_factory=list)
    """The plan's DLL folders (Windows), passed to every child."""
    extras: list[str] = field(default_factory=list)
    """Installed with the wheel (``llama-cpp-python[server]``); the server extra is checked by starting it."""
    find_links: str = ""
    """Where the extras' packages come from when not from the index."""
    cmake_args: list[str] = field(default_factory=list)
    """The plan's CMake arguments: what the build compiled in (every flash-attention K/V pair, say)."""
    gpu_bandwidth_gb_per_s: float | None = None
    """The GPU's peak memory bandwidth (NVML), for token generation's upper limit."""
    rpc: RpcPlan | None = None
    """build.rpc: the wheel has the RPC client, and this is how rpc-server is built from the same tree."""


@dataclass
class VerifyRequest:
    """One verify: the built wheel, what the plan expects of it, and where its files go."""

    layout: Layout
    """The run folder; every file a unit writes is named by it."""
    wheel: Path
    """The wheel the build attempt made."""
    params: Params
    """The run's parameters (``verify`` and ``model`` are read)."""
    target: VerifyTarget
    """What the plan built and where it runs."""
    source_path: Path
    """The llama-cpp-python source (sdist or tree): the synthetic model's vocabulary comes from it."""
    cache_dir: Path
    """The playbook's cache: installed wheels, synthetic models, cuobjdump."""
    attempt: int = 1
    """The build attempt; verify's files carry it in their names, so a retry never overwrites them."""
    python: str = sys.executable
    """The interpreter every child runs with."""
    yardstick: Yardstick | None = None
    """llama-bench on the same build (verify.llama_bench), or None."""
    rpc_server: RpcServerBuilder | None = None
    """build.rpc: builds rpc-server from the wheel's tree (its log file given), or None."""
    tune_rebuild: TuneWheelBuilder | None = None
    """verify.tune_build_flags: rebuilds the wheel with CMake arguments added, or None."""


@dataclass
class InstalledWheel:
    """The wheel installed alone into a folder of its own: what every unit's children import."""

    site_dir: Path
    """The folder the wheel is installed in, first on every child's path."""
    child_env: dict[str, str]
    """The plan's variables for every child (runtime_env, the DLL folders)."""
    returncode: int
    """pip's exit status."""
    output_tail: str = ""
    """pip's last lines, when it failed."""


@dataclass
class Measured(Generic[T]):
    """What one unit returns."""

    value: T | None = None
    """The unit's typed result (None when it could not make one)."""
    findings: list[Finding] = field(default_factory=list)
    """What it found wrong, from the knowledge base."""
    files: list[Path] = field(default_factory=list)
    """The run-folder files it wrote (named by Layout)."""
    passed: bool = True
    """False when its check failed even without a finding (machine code missing for an architecture)."""
    stop: str = ""
    """Why no unit after this one can run ("" when they can); it becomes verify's summary."""
    summary: str = ""
    """A sentence for verify's summary (the sweep's best throughput)."""
    note: str = ""
    """A clause verify's summary ends with (the machine code listed, the GPU checks skipped)."""


@dataclass
class VerifyContext:
    """What every unit takes: the request, the installed wheel, the settings, the units' results so far."""

    request: VerifyRequest
    """The verify this is."""
    wheel: InstalledWheel
    """The installed wheel."""
    settings: BenchSettings
    """Every throughput measurement's runtime settings (llama-bench gets the same)."""
    log: Callable[[str], None] = print
    """Where progress lines go (the notebook's output, the terminal)."""
    results: dict[str, Measured[Any]] = field(default_factory=dict)
    """Each unit's result by its name, in the order they ran."""

    @property
    def params(self) -> Params:
        return self.request.params

    @property
    def target(self) -> VerifyTarget:
        return self.request.target

    @property
    def layout(self) -> Layout:
        return self.request.layout

    @property
    def attempt(self) -> int:
        return self.request.attempt

    @property
    def timeout_s(self) -> float:
        return float(self.params.verify.timeout_s)

    def files(self, namespace: str) -> UnitFiles:
        """The run-folder names of a unit's files in this attempt, under ``namespace``."""
        return self.layout.unit_files(self.attempt, namespace)

    def value(self, unit: Measurement[T]) -> T | None:
        """The value of a unit that ran before; None when it did not run or made none."""
        measured = self.results.get(unit.name)
        return measured.value if measured is not None else None

    def require(self, unit: Measurement[T]) -> T:
        """The value of a unit this one cannot do without (the registry's order guarantees it)."""
        value = self.value(unit)
        if value is None:
            raise PlaybookError(f"verify unit {unit.name!r} has no result: it must run, and succeed, before this one")
        return value


class Measurement(Protocol[T]):
    """One unit of verify."""

    name: str
    """Its key in the registry, in the verify result's ``units`` and in its ``measurements``."""
    value_type: type[T]
    """The type of its value (a dataclass): what ``verify-attempt-N.json`` is read back as."""

    def skip_reason(self, ctx: VerifyContext) -> str:
        """Why it does not run here ("" when it does): verify.tune is false, no GPU to compare with."""
        ...

    def measure(self, ctx: VerifyContext) -> Measured[T]:
        """Run it; a crash or a hang of its children is a finding, never an exception."""
        ...


class Registry:
    """The units verify runs, in order (papermill's ``papermill_engines``, for measurements)."""

    def __init__(self) -> None:
        self._units: list[Measurement[Any]] = []

    def register(self, unit: Measurement[Any], *, after: str = "") -> None:
        """Add ``unit`` at the end, or right after the unit named ``after``."""
        if any(u.name == unit.name for u in self._units):
            raise PlaybookError(f"a verify unit named {unit.name!r} is registered already")
        names = [u.name for u in self._units]
        if after and after not in names:
            raise PlaybookError(f"cannot register {unit.name!r} after {after!r}: no such unit ({', '.join(names)})")
        self._units.insert(names.index(after) + 1 if after else len(self._units), unit)

    def __iter__(self) -> Iterator[Measurement[Any]]:
        return iter(list(self._units))

    @property
    def names(self) -> list[str]:
        return [u.name for u in self._units]


def run_units(units: Registry, ctx: VerifyContext, result: VerifyResult) -> str:
    """Every unit in turn, each recorded in ``result.units`` (measured, skipped and why, or stopped);
    returns why verify stopped early ("" when every unit had its turn)."""
    for unit in units:
        why_not = unit.skip_reason(ctx)
        if why_not:
            result.units.append(UnitRecord(unit.name, "skipped", why_not))
            continue
        started = time.monotonic()
        measured = unit.measure(ctx)
        ctx.results[unit.name] = measured
        if measured.value is not None:
            result.record(unit, measured.value)
        result.units.append(UnitRecord(
            unit.name, "stopped verify" if measured.stop else "measured", measured.stop,
            [f.id for f in measured.findings], [ctx.layout.in_run(f) for f in measured.files if f.exists()],
            round(time.monotonic() - started, 2), measured.passed))
        if measured.stop:
            return measured.stop
    return ""
