"""Repairs remembered per machine: what a repair changed, kept once a wheel built with it passed verify.

The next plan on the same machine starts from the repaired configuration instead of building the
failing one again (the native CPU wheel that crashes on a CPU whose AMX faults, every time).
A repair depends only on what it is about: its backend's fingerprint of the machine, the OS, the CPU
model and flags and the compilers, plus the facts that backend reads (a CUDA repair: the GPUs, the
driver, the CUDA toolkits). A CPU repair survives a CUDA toolkit added to the cache.
Kept under ``<cache_dir>/repairs/<fingerprint>.json``; ``build.forget_repairs: true`` ignores it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from playbook.facts import Facts
from playbook.locks import RunLock
from playbook.serialization import read_json, write_json

if TYPE_CHECKING:
    from playbook.runfolder.folder import RunFolder
    from playbook.steps.configure.plan import BuildPlan


@dataclass
class RememberedRepair:
    """One repair that worked on this machine: the findings it answered and the plan changes it made."""

    findings: list[str]
    backend: str  # replayed only into a plan for the same backend
    run_id: str
    recorded: str
    cmake_args_added: list[str] = field(default_factory=list)
    cmake_args_removed: list[str] = field(default_factory=list)
    env_set: dict[str, str] = field(default_factory=dict)
    build_isolation: bool | None = None  # None: left as planned


@dataclass
class MachineRepairs:
    fingerprint: str
    machine: str  # in words, for a person reading the file
    repairs: list[RememberedRepair] = field(default_factory=list)


def machine_fingerprint(facts: Facts, backend: str) -> str:
    """What makes a build of ``backend`` behave differently on another machine: the OS, the CPU and the
    compilers, and the facts the backend's unit reads; not memory, load, paths, nor another backend's facts."""
    from playbook.backends.registry import unit

    identity: dict[str, object] = {
        "os": [facts.os.system, facts.os.machine],
        "cpu": [facts.cpu.model, sorted(facts.cpu.flags)],
        # each compiler file once, whatever names it (c++, g++, $CXX, $CUDAHOSTCXX): a variable that names a
        # compiler already found changes nothing
        "compilers": sorted({(Path(c.path).resolve().name, c.version) for c in facts.compilers if c.found}),
    }
    for name in unit(backend).facts_read:
        identity.setdefault(name, _identity_of(facts, name))
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _identity_of(facts: Facts, name: str) -> object:
    """One Facts field as far as it makes a build differ: GPUs by name and compute capability, the driver and
    the toolkits by version; the paths of libraries and drivers not at all (a copied toolkit is the same)."""
    if name == "gpus":
        return sorted([g.name, g.compute_capability] for g in facts.gpus)
    if name == "driver":
        return facts.driver.version
    if name == "cuda_toolkits":
        return sorted(t.version for t in facts.cuda_toolkits)
    if name in ("libcuda_paths", "stub_on_ld_library_path", "wsl_driver_libs"):
        return bool(getattr(facts, name))
    value = getattr(facts, name)
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


def describe_machine(facts: Facts) -> str:
    from playbook.steps.detect.summary import describe_devices

    return f"{facts.cpu.model}; {describe_devices(facts)}; {facts.os.pretty_name}"


def repairs_file(cache_dir: Path, fingerprint: str) -> Path:
    return Path(cache_dir) / "repairs" / f"{fingerprint}.json"


def recall(cache_dir: Path, facts: Facts) -> list[RememberedRepair]:
    """The repairs that worked on this machine, each backend's under its own fingerprint."""
    from playbook.backends.registry import units

    found: list[RememberedRepair] = []
    for backend in (u.name for u in units()):
        found += [r for r in _recorded(repairs_file(cache_dir, machine_fingerprint(facts, backend)))
                  if r.backend == backend]
    return found


def _recorded(path: Path) -> list[RememberedRepair]:
    if not path.is_file():
        return []
    try:
        return read_json(MachineRepairs, path).repairs
    except (ValueError, TypeError, KeyError):  # a damaged record only costs the shortcut
        return []


def plan_changes(before: BuildPlan, after: BuildPlan) -> RememberedRepair:
    """What the repairs between two plans changed, as a record to replay."""
    return RememberedRepair(
        findings=after.remedies_applied[len(before.remedies_applied):] or list(after.remedies_applied),
        backend=after.backend,
        run_id="",
        recorded="",
        cmake_args_added=[a for a in after.cmake_args if a not in before.cmake_args],
        cmake_args_removed=[a for a in before.cmake_args if a not in after.cmake_args],
        env_set={k: v for k, v in after.env.items() if before.env.get(k) != v},
        build_isolation=after.build_isolation if after.build_isolation != before.build_isolation else None,
    )


def remember(cache_dir: Path, facts: Facts, repair: RememberedRepair) -> Path:
    """Add a repair to this machine's record (one entry per set of findings: the newest wins)."""
    fingerprint = machine_fingerprint(facts, repair.backend)
    path = repairs_file(cache_dir, fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    with RunLock(path.with_suffix(".lock"), timeout_s=60):
        record = MachineRepairs(fingerprint, describe_machine(facts), _recorded(path))
        record.repairs = [r for r in record.repairs if sorted(r.findings) != sorted(repair.findings)]
        record.repairs.append(repair)
        write_json(record, path)
    return path


def replay(cmake_args: list[str], env: dict[str, str], repair: RememberedRepair) -> tuple[list[str], dict[str, str]]:
    """The arguments and environment of a plan with a remembered repair applied again."""
    names_added = {a.split("=")[0] for a in repair.cmake_args_added}
    args = [a for a in cmake_args if a not in repair.cmake_args_removed and a.split("=")[0] not in names_added]
    return args + list(repair.cmake_args_added), {**env, **repair.env_set}


def remember_passed_repairs(run: RunFolder, facts: Facts, plan: BuildPlan) -> None:
    """The wheel that ``plan`` built, with repairs applied, passed verify: keep what the repairs changed
    against the first plan, so the next plan on this machine starts from it. Nothing for an unrepaired plan."""
    from playbook.runfolder.folder import utc_now
    from playbook.steps.configure.plan import BuildPlan as Plan

    if not plan.remedies_applied:
        return
    repair = plan_changes(run.read(Plan, run.layout.plan(1)), plan)
    repair.run_id, repair.recorded = run.run_id, utc_now()
    remember(run.params().cache_dir, facts, repair)
