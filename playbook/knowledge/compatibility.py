"""Compatibility rules read from the knowledge files (cuda.yaml, gpus.yaml, cmake_options.yaml).

Each function answers one question from one table; ``configure`` turns the answers into
decisions and warnings. Versions compare as integer tuples ("12.4.131" > "12.4").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


@cache
def knowledge(name: str) -> dict[str, Any]:
    text = resources.files("playbook.knowledge").joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@dataclass(frozen=True)
class MeasuredBuild:
    """One measured CUDA build (cuda.yaml's build_time): what the plan's time estimate scales from."""

    source: str
    wall_s: float
    steps: int
    cuda_objects: int
    architectures: int
    jobs: int

    @property
    def seconds_per_object(self) -> float:
        """Seconds per CUDA object and architecture on one compile job (the C++ steps spread over them)."""
        return self.wall_s * self.jobs / (self.cuda_objects * self.architectures)


def measured_cuda_build() -> MeasuredBuild:
    row = knowledge("cuda")["build_time"]
    return MeasuredBuild(str(row["source"]), float(row["wall_s"]), int(row["steps"]), int(row["cuda_objects"]),
                         int(row["architectures"]), int(row["jobs"]))


@dataclass(frozen=True)
class HostCompilerLimits:
    max_gcc: int
    max_msvc: str  # "19.49"
    source: str


def host_compiler_limits(nvcc_version: str) -> HostCompilerLimits | None:
    """The newest gcc and MSVC that nvcc ``nvcc_version`` accepts, or None for an unknown old nvcc."""
    have = version_tuple(nvcc_version)
    rows = [row for row in knowledge("cuda")["host_compilers"] if version_tuple(str(row["min_nvcc"])) <= have]
    if not have or not rows:
        return None
    row = max(rows, key=lambda r: version_tuple(str(r["min_nvcc"])))
    return HostCompilerLimits(int(row["max_gcc"]), str(row["max_msvc"]), row["source"])


def oldest_nvcc_accepting(gcc_major: int | None = None, msvc: str = "") -> str:
    """The first CUDA release whose nvcc accepts this gcc major or this cl version."""
    for row in sorted(knowledge("cuda")["host_compilers"], key=lambda r: version_tuple(str(r["min_nvcc"]))):
        if gcc_major is not None and int(row["max_gcc"]) >= gcc_major:
            return str(row["min_nvcc"])
        if msvc and version_tuple(str(row["max_msvc"])) >= version_tuple(msvc)[:2]:
            return str(row["min_nvcc"])
    return ""


def msvc_stl_min_cuda(msvc: str) -> tuple[str, str]:
    """(the oldest CUDA this MSVC's standard library accepts, source), or ("", "")."""
    found = ("", "")
    for row in knowledge("cuda")["msvc_stl_min_cuda"]:
        if version_tuple(msvc)[:2] >= version_tuple(str(row["min_msvc"])):
            found = (str(row["min_cuda"]), row["source"])
    return found


def visual_studio_for_msvc(msvc: str) -> str:
    """Visual Studio release that ships cl ``msvc`` ("19.40.33811" -> "17.10"); "" when unknown."""
    wanted = version_tuple(msvc)[:2]
    for row in knowledge("cuda")["visual_studio_msvc"]:
        if version_tuple(str(row["msvc"])) == wanted:
            return str(row["visual_studio"])
    return ""


def driver_max_cuda(driver_version: str) -> str:
    """The newest CUDA a driver supports, from its branch ("535.183.01" -> "12.2")."""
    branch = version_tuple(driver_version)[:1]
    best = ""
    for row in knowledge("cuda")["driver_max_cuda"]:
        if branch and version_tuple(str(row["driver"]))[:1] <= branch:
            best = str(row["cuda"])
    return best


def cccl_min_cuda() -> dict[str, str]:
    return {row["header"]: str(row["min_cuda"]) for row in knowledge("cuda")["cccl"]}


@dataclass(frozen=True)
class GpuModel:
    compute: str
    family: str
    source: str


def gpu_model(name: str) -> GpuModel | None:
    """Compute capability for a GPU product name ("NVIDIA GeForce RTX 4070" -> 8.9)."""
    for row in knowledge("gpus")["gpus"]:
        if re.search(row["pattern"], name, re.IGNORECASE):
            return GpuModel(str(row["compute"]), row["family"], row["source"])
    return None


@dataclass(frozen=True)
class RenamedOption:
    old: str
    new: str
    effect: str  # fatal, mapped, ignored
    source: str


def renamed_options() -> dict[str, RenamedOption]:
    return {row["old"]: RenamedOption(row["old"], row["new"], row["effect"], row["source"])
            for row in knowledge("cmake_options")["options"]}


def renamed_option_problem(cmake_arg: str) -> str:
    """A sentence naming the problem and the fix when ``cmake_arg`` uses an old llama.cpp option name."""
    name = cmake_arg.removeprefix("-D").split("=")[0].split(":")[0]
    row = renamed_options().get(name)
    if row is None:
        return ""
    value = cmake_arg.split("=", 1)[1] if "=" in cmake_arg else "ON"
    consequence = {
        "fatal": "llama.cpp stops with an error",
        "mapped": "llama.cpp maps it with a deprecation warning, for now",
        "ignored": "CMake ignores it and the feature stays off",
    }[row.effect]
    return f"{cmake_arg}: {name} was renamed {row.new} ({consequence}); use -D{row.new}={value} ({row.source})"


@dataclass(frozen=True)
class ArchSupport:
    arch: str
    min_cuda: str
    max_cuda: str  # exclusive; "" = still supported


def arch_support() -> dict[str, ArchSupport]:
    return {str(row["arch"]): ArchSupport(str(row["arch"]), row["min_cuda"], row["max_cuda"] or "")
            for row in knowledge("cuda")["architectures"]}


def toolkit_supports_arch(toolkit_version: str, arch: str) -> tuple[bool, str]:
    """Whether nvcc ``toolkit_version`` compiles for ``arch`` ("90", "80-real"), and why not."""
    number = re.match(r"\d+", arch)
    row = arch_support().get(number.group(0) if number else arch)
    if row is None:
        return True, f"sm_{arch} is not in the compatibility table; nvcc will decide"
    have = version_tuple(toolkit_version)
    if have < version_tuple(row.min_cuda):
        return False, (f"sm_{row.arch} needs CUDA {row.min_cuda} or newer; this toolkit is {toolkit_version}: "
                       f"install CUDA {row.min_cuda} or newer")
    if row.max_cuda and have >= version_tuple(row.max_cuda):
        return False, f"CUDA {row.max_cuda} dropped sm_{row.arch}; this toolkit is {toolkit_version}: use CUDA 12.x"
    return True, f"CUDA {toolkit_version} compiles sm_{row.arch}"


def minimum_driver(cuda_version: str, system: str = "linux") -> str:
    major = version_tuple(cuda_version)[0]
    for row in knowledge("cuda")["minimum_driver"]:
        if row["cuda_major"] == major:
            return str(row["windows" if system.lower() == "windows" else "linux"])
    return ""


@dataclass(frozen=True)
class GfxTarget:
    gfx: str
    products: str
    supported: bool
    min_rocm: str
    max_rocm: str  # the first release that dropped it (exclusive); "" while still listed
    override: str  # HSA_OVERRIDE_GFX_VERSION that makes a listed target's code run on it
    source: str


def gfx_targets() -> dict[str, GfxTarget]:
    return {str(row["gfx"]): GfxTarget(str(row["gfx"]), row["products"], bool(row["supported"]), str(row["min_rocm"]),
                                       str(row["max_rocm"]), str(row.get("override", "")), row["source"])
            for row in knowledge("rocm")["targets"]}


def rocm_supports_gfx(rocm_version: str, gfx: str) -> tuple[bool | None, str]:
    """(whether ROCm ``rocm_version`` lists ``gfx``, why); None when the table does not know the target."""
    row = gfx_targets().get(gfx)
    if row is None:
        return None, f"{gfx} is not in playbook/knowledge/rocm.yaml"
    if not row.supported:
        hint = f"; set HSA_OVERRIDE_GFX_VERSION={row.override} at run time" if row.override else ""
        return False, f"no ROCm release lists {gfx} ({row.products}){hint} ({row.source})"
    have = version_tuple(rocm_version)
    if have and have < version_tuple(row.min_rocm):
        return False, f"{gfx} ({row.products}) needs ROCm {row.min_rocm} or newer; this is ROCm {rocm_version} ({row.source})"
    if have and row.max_rocm and have >= version_tuple(row.max_rocm):
        return False, f"ROCm {row.max_rocm} dropped {gfx} ({row.products}); this is ROCm {rocm_version} ({row.source})"
    return True, f"ROCm {rocm_version or '?'} lists {gfx} ({row.products})"


def vulkan_min_headers() -> tuple[str, str, str]:
    """(the oldest Vulkan headers the pinned llama.cpp compiles with, source, where to get newer ones)."""
    headers = knowledge("vulkan")["headers"]
    return str(headers["min_version"]), headers["source"], headers["newer_package"]


def llama_cpp_min_rocm(llama_cpp_python: str = "") -> tuple[str, str] | None:
    """(the oldest ROCm, its source) for a llama-cpp-python release ("": the newest row); None when the release is
    older than every row (unknown)."""
    rows = sorted(knowledge("rocm")["llama_cpp"], key=lambda r: version_tuple(str(r["since"])), reverse=True)
    if not llama_cpp_python:
        return str(rows[0]["min_rocm"]), rows[0]["source"]
    row = next((r for r in rows if version_tuple(llama_cpp_python) >= version_tuple(str(r["since"]))), None)
    return (str(row["min_rocm"]), row["source"]) if row else None


def newest_llama_cpp_python_for_rocm(rocm: str) -> tuple[str, str] | None:
    """(version, sdist sha256) of the newest llama-cpp-python release whose llama.cpp accepts ``rocm``; None when
    the table has none."""
    rows = [r for r in knowledge("rocm")["newest_release_for"]
            if version_tuple(str(r["min_rocm"])) <= version_tuple(rocm) < version_tuple(str(r["below_rocm"]))]
    row = min(rows, key=lambda r: version_tuple(str(r["below_rocm"])), default=None)
    return (str(row["version"]), str(row["sha256"])) if row else None


def cmake_for_multiarch_hip() -> tuple[str, str]:
    """(the oldest CMake whose HIP language finds Debian's lib/<multiarch>/cmake/hip-lang, its source)."""
    row = knowledge("rocm")["cmake_multiarch_hip"]
    return str(row["min_cmake"]), row["source"]
