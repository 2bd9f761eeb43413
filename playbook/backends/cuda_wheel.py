"""A published CUDA wheel: what it holds (machine code, PTX, the CUDA release it was compiled with) and whether an
NVIDIA GPU and its driver run it. Values in, values out; :class:`~playbook.backends.cuda.CudaBackend` records and
checks through these.

The rules, from NVIDIA's compatibility guide: machine code (SASS, ``sm_86``) runs on GPUs of the same major
compute capability and an equal or newer minor (sm_86 on sm_89, never sm_90 on sm_86); PTX (``compute_80``) is
compiled by the driver for any GPU of that capability or newer when the library loads (a slower first start);
architecture-specific code (``sm_90a``, ``compute_90a``) runs on its own GPU only; and the driver must support the
CUDA release the wheel was compiled with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from playbook.backends.base import WheelFit
from playbook.backends.plan import defined_value
from playbook.knowledge.compatibility import version_tuple

# sm_86, sm_120a, sm_100f: machine code (a: this GPU only; f: its family, newer minors too); compute_90: PTX.
SASS = re.compile(r"sm_(\d+)(\d)([af]?)")
PTX = re.compile(r"compute_(\d+)")
CMAKE_ENTRY = re.compile(r"(\d{2,3}[af]?)(?:-(real|virtual))?")

EXACT, OLDER_MINOR, PTX_ONLY, NONE = 3, 2, 1, 0

# The CUDA releases llama-cpp-python's own index has a folder for (whl/cu118 ... whl/cu132): its README and the
# workflow that writes the index (.github/workflows/generate-index-from-release.yaml).
UPSTREAM_RELEASES = ("11.8", "12.1", "12.2", "12.3", "12.4", "12.5", "13.0", "13.2")
UPSTREAM_FOLDER = re.compile(r"cu(\d+)(\d)")
UNKNOWN_ARCHITECTURES = "GPU architectures (sm_XX, PTX)"


def upstream_requirements(variant: str) -> tuple[dict[str, Any], list[str]] | None:
    """``cu124`` -> CUDA 12.4, with its machine code and PTX unknown (``sass`` and ``ptx`` None): upstream's
    folders name the toolkit release and nothing else. None for a folder of another kind."""
    match = UPSTREAM_FOLDER.fullmatch(variant)
    if match is None:
        return None
    return ({"release": f"{int(match[1])}.{match[2]}", "sass": None, "ptx": None, "sass_listed": False},
            [UNKNOWN_ARCHITECTURES])


def upstream_variant(driver_release: str) -> str:
    """The folder of the newest release in :data:`UPSTREAM_RELEASES` a driver of ``driver_release`` supports
    ("12.8" -> "cu125"); "" when the driver's release is unknown or older than all of them."""
    if not driver_release:
        return ""
    fitting = [r for r in UPSTREAM_RELEASES if version_tuple(r)[:2] <= version_tuple(driver_release)[:2]]
    return "cu" + fitting[-1].replace(".", "") if fitting else ""


def requirements(cmake_args: Sequence[str], toolkit_release: str, machine_code: Sequence[str]) -> dict[str, Any]:
    """What a CUDA wheel holds, from its plan: CMake's ``86`` is both sm_86 machine code and compute_86 PTX,
    ``86-real`` machine code only, ``90-virtual`` PTX only; CMake's words (native, all) name no architecture here.
    The machine code verify listed (cuobjdump on the wheel), when it listed any, is what the wheel holds.

    ``release``: the CUDA release ("12.8") a driver must support; ``sass``: machine code; ``ptx``: PTX;
    ``sass_listed``: ``sass`` is cuobjdump's listing, not only the plan's architectures."""
    sass, ptx = [], []
    architectures = defined_value(tuple(cmake_args), "CMAKE_CUDA_ARCHITECTURES") or ""
    for item in filter(None, architectures.split(";")):
        entry = CMAKE_ENTRY.fullmatch(item.strip())
        if entry is None:
            continue
        number, kind = entry[1], entry[2] or ""
        if kind != "virtual":
            sass.append(f"sm_{number}")
        if kind != "real":
            ptx.append(f"compute_{number}")
    return {"release": ".".join(toolkit_release.split(".")[:2]), "sass": list(machine_code) or sass, "ptx": ptx,
            "sass_listed": bool(machine_code)}


def code_fit(sass: Sequence[str], ptx: Sequence[str], gpu_arch: str, gpu_name: str) -> WheelFit:
    """Whether the machine code or PTX runs on a GPU of compute capability ``gpu_arch`` ("86"), ranked: exact
    machine code over machine code of an older minor of the same major over PTX only."""
    gpu = gpu_name or "this GPU"
    if not gpu_arch.isdigit():
        return WheelFit(False, f"the GPU's compute capability ({gpu_arch or 'unknown'}) cannot be read", (NONE,))
    major, minor = int(gpu_arch[:-1]), int(gpu_arch[-1])
    if f"sm_{gpu_arch}" in sass or f"sm_{gpu_arch}a" in sass or f"sm_{gpu_arch}f" in sass:
        return WheelFit(True, f"native machine code sm_{gpu_arch} for {gpu}", (EXACT,))
    for code in sass:
        match = SASS.fullmatch(code)
        if match and match[3] != "a" and int(match[1]) == major and int(match[2]) <= minor:
            return WheelFit(True, f"machine code {code} runs on sm_{gpu_arch} (same major, older minor)",
                            (OLDER_MINOR,))
    for code in ptx:
        match = PTX.fullmatch(code)
        if match and int(match[1]) <= int(gpu_arch):
            return WheelFit(True, f"PTX {code} only: the driver compiles it for sm_{gpu_arch} at the first load "
                                  "(slower start)", (PTX_ONLY,))
    return WheelFit(False, f"holds machine code {', '.join(sass) or 'none'} and PTX {', '.join(ptx) or 'none'}: "
                           f"nothing that runs on sm_{gpu_arch} ({gpu})", (NONE,))


def fit(requirements: Mapping[str, Any], gpu_arch: str, gpu_name: str, driver_release: str) -> WheelFit:
    """Whether a wheel with ``requirements`` (:func:`requirements`) runs on a GPU of compute capability
    ``gpu_arch`` whose driver supports CUDA up to ``driver_release`` ("12.8"; "" when unknown)."""
    release = str(requirements.get("release") or "")
    if not driver_release:
        return WheelFit(False, "the driver's CUDA release is unknown")
    if release and version_tuple(release)[:2] > version_tuple(driver_release)[:2]:
        return WheelFit(False, f"CUDA {release} is newer than the driver supports (CUDA {driver_release}): update "
                               "the driver or use a wheel built with an older toolkit")
    if requirements.get("sass") is None and requirements.get("ptx") is None:
        return WheelFit(True, f"CUDA {release or 'of an unknown release'} runs with this driver (CUDA {driver_release}); "
                              f"its {UNKNOWN_ARCHITECTURES} are not recorded: the check here decides whether it runs "
                              f"on {gpu_name or 'this GPU'}", (NONE,))
    return code_fit([str(c) for c in requirements.get("sass") or []], [str(c) for c in requirements.get("ptx") or []],
                    gpu_arch, gpu_name)
