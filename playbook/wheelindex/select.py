"""Which published wheel fits this machine, with a reason for every choice and every rejection.

What the machine needs comes from detect's :class:`~playbook.facts.Facts` and the target interpreter's wheel tags.
A wheel is rejected when this machine cannot run it: a tag the interpreter does not accept, a glibc newer than
this one, a CPU instruction this CPU lacks (the CPU code is every wheel's: its rules are here), or what its
backend's own rules refuse (:meth:`~playbook.backends.base.BackendUnit.wheel_fit`: no device of that backend here,
a CUDA release newer than the driver supports, no machine code or PTX for this GPU). Of the rest the best is
chosen: the preferred backend first (the registry's ``backend: auto`` order, then the other backends that offload,
then those that do not, the CPU last), then a wheel with a playbook record over one a plain index lists
(:mod:`.upstream`: what it cannot say is left to the check), then the backend's own rank (CUDA: native machine code
over PTX), then the wheel that uses the most of this CPU's instructions, then the newest version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from playbook.backends import registry
from playbook.backends.base import BackendUnit
from playbook.facts import Facts
from playbook.wheelindex.metadata import CPU_FEATURES, WheelRecord

ANY_BACKEND = ("", "auto")


def preferred_units() -> list[BackendUnit]:
    """Every backend, in the order install prefers its wheels: ``backend: auto``'s order (``auto_rank``), then the
    other backends that offload, then those that do not, the fallback (the CPU) last; the registry's order within
    each."""
    units = list(registry.units())
    fallback = registry.fallback()
    return sorted(units, key=lambda u: (u is fallback, not u.offloads,
                                        u.auto_rank if u.auto_rank is not None else float("inf"), units.index(u)))


def has_device_here(unit: BackendUnit, facts: Facts) -> bool:
    """A wheel of ``unit`` has what it runs on here: the fallback and a backend that offloads nothing run on the
    CPU; one that offloads needs one of its devices that is a GPU (CPU-type devices make it no faster than the CPU)."""
    return unit is registry.fallback() or not unit.offloads or any(d.kind == "gpu" for d in unit.devices(facts))


@dataclass
class MachineNeeds:
    """What a wheel must fit."""

    backends: list[str]
    """Backends whose wheels may run here, preferred first (the CPU last): those with a device here, as far as the
    ``backend`` parameter allows."""
    tags: list[str]
    """The wheel tags the target interpreter accepts (``cp311-cp311-manylinux_2_36_x86_64`` ...), best first."""
    facts: Facts
    """This machine, as detect found it: every backend's :meth:`~playbook.backends.base.BackendUnit.wheel_fit`
    reads it."""
    version: str = ""
    """The llama-cpp-python version asked for; "" for any."""
    why_not: dict[str, str] = field(default_factory=dict)
    """backend -> why this machine cannot run it (for the rejections' reasons)."""

    @property
    def cpu_flags(self) -> list[str]:
        return list(self.facts.cpu.flags)

    @property
    def cpu_model(self) -> str:
        return self.facts.cpu.model

    @property
    def glibc(self) -> str:
        return self.facts.os.glibc


@dataclass
class Verdict:
    """One candidate and what was decided about it."""

    source: str
    wheel: str
    variant: str
    accepted: bool
    reason: str


@dataclass
class Candidate:
    source: str
    """The index it is listed in (a folder, URL or s3:// URL)."""
    record: WheelRecord
    url: str = ""
    """The wheel's address, for a wheel a plain PEP 503 index lists with no playbook record (:mod:`.upstream`);
    "" for a wheel in the playbook's own layout."""

    @property
    def label(self) -> str:
        """How verdicts name it: its variant, or for a wheel of a plain index (many in one folder) its file name."""
        return self.record.wheel if self.url else self.record.variant

    def verdict(self, accepted: bool, reason: str) -> Verdict:
        """What was decided about this candidate, as the record of a choice keeps it."""
        return Verdict(self.source, self.record.wheel, self.label, accepted, reason)


def needs_from_facts(facts: Facts, tags: list[str], backend: str = "auto", version: str = "") -> MachineNeeds:
    """What this machine can run, from detect's facts (``backend``: the parameter; ``auto`` allows every backend
    with a device here)."""
    usable, why_not = [], {}
    for unit in preferred_units():
        if has_device_here(unit, facts):
            usable.append(unit.name)
        else:
            why_not[unit.name] = unit.wheel_fit({}, facts).reason or f"no {unit.name} device was detected"
    if backend not in ANY_BACKEND:
        for other in usable:
            if other != backend:
                why_not[other] = f"backend is set to {backend}"
        usable = [backend] if backend in usable else []
    return MachineNeeds(usable, tags, facts, version, why_not)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:4])


def assess(record: WheelRecord, needs: MachineNeeds) -> tuple[tuple[int, ...] | None, str]:
    """(a score to rank by, why) when the wheel runs here; (None, why not) when it does not."""
    tag = f"{record.python_tag}-{record.abi_tag}-{record.platform_tag}"
    accepted_tags = set(needs.tags)
    if not any(f"{py}-{abi}-{plat}" in accepted_tags for py in record.python_tag.split(".")
               for abi in record.abi_tag.split(".") for plat in record.platform_tag.split(".")):
        return None, f"{tag} is not a tag the target Python accepts"
    if needs.version and record.version != needs.version:
        return None, f"llama-cpp-python {record.version}, and {needs.version} is asked for"
    if record.backend not in needs.backends:
        return None, f"a {record.backend} wheel: {needs.why_not.get(record.backend, 'not a backend this machine runs')}"
    if record.glibc and needs.glibc and version_key(record.glibc) > version_key(needs.glibc):
        return None, f"built against glibc {record.glibc}; this machine has {needs.glibc}"
    if "glibc" in record.unknown and needs.glibc:
        glibc_said = f"glibc not said by its tag {record.platform_tag}"
    else:
        glibc_said = ""
    missing = sorted(set(record.cpu.required_flags) - set(needs.cpu_flags))
    if missing:
        how = "compiled natively on a CPU with" if record.cpu.native else "compiled for"
        return None, f"{how} {', '.join(missing)}, which this CPU ({needs.cpu_model or 'unknown'}) lacks"
    fit = registry.unit(record.backend).wheel_fit(record.requirements, needs.facts)
    if not fit.ok:
        return None, fit.reason
    reasons = [fit.reason] if fit.reason else []
    if CPU_FEATURES in record.unknown:
        cpu = "the CPU instructions it needs are not recorded"
    else:
        cpu = ("picks its CPU code when it loads" if record.cpu.runtime_dispatch
               else f"uses {', '.join(record.cpu.required_flags)}" if record.cpu.required_flags else "baseline CPU code")
    reasons.append(cpu + " (this CPU has " + (", ".join(needs.cpu_flags) or "no listed extensions") + ")")
    if glibc_said:
        reasons.append(glibc_said)
    backend_rank = len(needs.backends) - needs.backends.index(record.backend)
    recorded = 0 if record.unknown else 1
    cpu_rank = len(needs.cpu_flags) + 1 if record.cpu.runtime_dispatch else len(record.cpu.required_flags)
    score = (backend_rank, recorded, *fit.rank, cpu_rank, *version_key(record.version))
    if record.unknown:
        return score, (f"{record.backend} wheel of a plain index, ranked below recorded {record.backend} wheels "
                       f"(not known until the check here: {', '.join(record.unknown)}); " + "; ".join(reasons))
    return score, f"{record.backend} wheel; " + "; ".join(reasons)


@dataclass
class Selection:
    ranked: list[Candidate]
    """The wheels that fit, best first."""
    verdicts: list[Verdict]
    """A reason for every candidate, chosen or not."""


def choose(candidates: list[Candidate], needs: MachineNeeds) -> Selection:
    scored: list[tuple[tuple[int, ...], Candidate, str]] = []
    verdicts: list[Verdict] = []
    for candidate in candidates:
        score, reason = assess(candidate.record, needs)
        if score is None:
            verdicts.append(candidate.verdict(False, reason))
        else:
            scored.append((score, candidate, reason))
    scored.sort(key=lambda item: item[0], reverse=True)
    for rank, (_, candidate, reason) in enumerate(scored):
        said = "best fit" if rank == 0 else f"fits, ranked {rank + 1}"
        verdicts.append(candidate.verdict(True, f"{said}: {reason}"))
    return Selection([candidate for _, candidate, _ in scored], verdicts)
