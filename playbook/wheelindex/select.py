"""Which published wheel fits this machine, with a reason for every choice and every rejection.

What the machine needs comes from detect's :class:`~playbook.steps.detect.Facts` and the target interpreter's
wheel tags. A wheel is rejected when this machine cannot run it: a tag the interpreter does not accept, a glibc
newer than this one, a backend without its device here, a CPU instruction this CPU lacks, a CUDA release newer
than the driver supports, or no machine code or PTX for this GPU (sm_90-only for an sm_86 GPU). Of the rest the
best is chosen: the preferred backend first, native machine code (SASS) over PTX, then the wheel that uses the
most of this CPU's instructions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from playbook.wheelindex.metadata import WheelRecord

# The order `backend: auto` prefers among wheels whose device is here; cpu always runs.
GPU_BACKENDS = ("cuda", "hip", "metal", "vulkan", "sycl")


@dataclass
class MachineNeeds:
    """What a wheel must fit."""

    backends: list[str]
    """Backends this machine can run, preferred first (cpu last)."""
    tags: list[str]
    """The wheel tags the target interpreter accepts (``cp311-cp311-manylinux_2_36_x86_64`` ...), best first."""
    cpu_flags: list[str] = field(default_factory=list)
    cpu_model: str = ""
    glibc: str = ""
    gpu_arch: str = ""
    """The best NVIDIA GPU's compute capability as CMake writes it: ``86``."""
    gpu_name: str = ""
    driver_cuda: str = ""
    """The newest CUDA release the driver supports: ``12.8``."""
    version: str = ""
    """The llama-cpp-python version asked for; "" for any."""
    why_not: dict[str, str] = field(default_factory=dict)
    """backend -> why this machine cannot run it (for the rejections' reasons)."""


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


def needs_from_facts(facts, tags: list[str], backend: str = "auto", version: str = "") -> MachineNeeds:  # type: ignore[no-untyped-def]
    """What this machine can run, from detect's facts (``backend``: the parameter; ``auto`` allows every backend
    whose device is here)."""
    present: dict[str, str] = {}
    gpu = facts.best_gpu
    if gpu is not None and facts.driver.found:
        present["cuda"] = ""
    if facts.rocm.gfx_targets:
        present["hip"] = ""
    if facts.os.apple_silicon:
        present["metal"] = ""
    if facts.vulkan.gpus:
        present["vulkan"] = ""
    if facts.sycl.gpus:
        present["sycl"] = ""
    if facts.openblas.found:
        present["openblas"] = ""
    present["cpu"] = ""
    why_not = {"cuda": "this machine has no NVIDIA GPU with a working driver", "hip": "no ROCm GPU was detected",
               "metal": "this is not Apple silicon", "vulkan": "no Vulkan GPU was detected",
               "sycl": "no SYCL GPU was detected", "openblas": "no OpenBLAS library was detected"}
    usable = [b for b in (*GPU_BACKENDS, "openblas", "cpu") if b in present]
    if backend not in ("", "auto"):
        for other in usable:
            if other != backend:
                why_not[other] = f"backend is set to {backend}"
        usable = [backend] if backend in present else []
    return MachineNeeds(usable, tags, list(facts.cpu.flags), facts.cpu.model, facts.os.glibc,
                        gpu.arch if gpu else "", gpu.name if gpu else "", facts.driver.cuda_version, version,
                        {b: r for b, r in why_not.items() if b not in usable})


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:4])


def gpu_code_fit(record: WheelRecord, needs: MachineNeeds) -> tuple[int, str]:
    """(3 exact machine code, 2 machine code of an older minor of the same major, 1 PTX only, 0 none), and why."""
    assert record.cuda is not None
    arch = needs.gpu_arch
    if not arch.isdigit():
        return 0, f"the GPU's compute capability ({arch or 'unknown'}) cannot be read"
    major, minor = int(arch[:-1]), int(arch[-1])
    sass = record.cuda.sass
    if f"sm_{arch}" in sass or f"sm_{arch}a" in sass:
        return 3, f"native machine code sm_{arch} for {needs.gpu_name or 'this GPU'}"
    for code in sass:
        match = re.fullmatch(r"sm_(\d+)(\d)f?", code)
        if match and int(match[1]) == major and int(match[2]) <= minor:
            return 2, f"machine code {code} runs on sm_{arch} (same major, older minor)"
    for code in record.cuda.ptx:
        match = re.fullmatch(r"compute_(\d+)", code)
        if match and int(match[1]) <= int(arch):
            return 1, f"PTX {code} only: the driver compiles it for sm_{arch} at the first load (slower start)"
    return 0, (f"holds machine code {', '.join(sass) or 'none'} and PTX {', '.join(record.cuda.ptx) or 'none'}: "
               f"nothing that runs on sm_{arch} ({needs.gpu_name or 'this GPU'})")


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
    missing = sorted(set(record.cpu.required_flags) - set(needs.cpu_flags))
    if missing:
        how = "compiled natively on a CPU with" if record.cpu.native else "compiled for"
        return None, f"{how} {', '.join(missing)}, which this CPU ({needs.cpu_model or 'unknown'}) lacks"
    reasons, gpu_fit = [], 0
    if record.cuda is not None:
        if not needs.driver_cuda:
            return None, "a CUDA wheel, and the driver's CUDA release is unknown"
        if version_key(record.cuda.release) > version_key(needs.driver_cuda):
            return None, (f"CUDA {record.cuda.release} is newer than the driver supports "
                          f"(CUDA {needs.driver_cuda}): update the driver or use a wheel built with an older toolkit")
        gpu_fit, why = gpu_code_fit(record, needs)
        if gpu_fit == 0:
            return None, why
        reasons.append(why)
    cpu = ("picks its CPU code when it loads" if record.cpu.runtime_dispatch
           else f"uses {', '.join(record.cpu.required_flags)}" if record.cpu.required_flags else "baseline CPU code")
    reasons.append(cpu + " (this CPU has " + (", ".join(needs.cpu_flags) or "no listed extensions") + ")")
    backend_rank = len(needs.backends) - needs.backends.index(record.backend)
    cpu_rank = len(needs.cpu_flags) + 1 if record.cpu.runtime_dispatch else len(record.cpu.required_flags)
    score = (backend_rank, gpu_fit, cpu_rank, *version_key(record.version))
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
            verdicts.append(Verdict(candidate.source, candidate.record.wheel, candidate.record.variant, False, reason))
        else:
            scored.append((score, candidate, reason))
    scored.sort(key=lambda item: item[0], reverse=True)
    for rank, (_, candidate, reason) in enumerate(scored):
        said = "best fit" if rank == 0 else f"fits, ranked {rank + 1}"
        verdicts.append(Verdict(candidate.source, candidate.record.wheel, candidate.record.variant, True,
                                f"{said}: {reason}"))
    return Selection([candidate for _, candidate, _ in scored], verdicts)
