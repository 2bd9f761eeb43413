"""Every backend, registered once. A new backend is one module with a :class:`BackendUnit` subclass and one
line in :data:`UNITS`, plus its knowledge, its profile and its tests (``tests/backends/test_registry.py`` checks
that each names what exists)."""

from __future__ import annotations

from typing import Any

from playbook.backends.base import BackendUnit
from playbook.backends.cpu import CpuBackend
from playbook.backends.cuda import CudaBackend
from playbook.backends.hip import HipBackend
from playbook.backends.metal import MetalBackend
from playbook.backends.mkl import MklBackend
from playbook.backends.openblas import OpenBlasBackend
from playbook.backends.prebuilt import PrebuiltBackend
from playbook.backends.sycl import SyclBackend
from playbook.backends.vulkan import VulkanBackend
from playbook.errors import ParameterError

AUTO = "auto"
FALLBACK_UNIT = CpuBackend()
UNITS: tuple[BackendUnit, ...] = (
    PrebuiltBackend(),
    CudaBackend(),
    HipBackend(),
    MetalBackend(),
    VulkanBackend(),
    SyclBackend(),
    OpenBlasBackend(),
    MklBackend(),
    FALLBACK_UNIT,
)
FALLBACK = FALLBACK_UNIT.name


def unit(name: str) -> BackendUnit:
    """The unit of a backend, by its name ("cuda")."""
    for candidate in UNITS:
        if candidate.name == str(name):
            return candidate
    raise ParameterError(f"backend {name!r} is not one the playbook knows; use one of {', '.join(names())}")


def fallback() -> CpuBackend:
    """What ``backend: auto`` builds when no accelerator is usable."""
    return FALLBACK_UNIT


def units() -> tuple[BackendUnit, ...]:
    return UNITS


def names() -> list[str]:
    """Every unit's name, in the registry's order."""
    return [u.name for u in UNITS]


def parameter_values() -> list[str]:
    """What the ``backend`` parameter accepts: auto, and every unit asked for by name."""
    return [AUTO] + [u.name for u in UNITS if u.asked_by_name]


def with_settings() -> list[BackendUnit]:
    """The units with a parameter section of their own (``cuda:``, ``hip:``, ``vulkan:``)."""
    return [u for u in UNITS if getattr(u.settings_type, "__dataclass_fields__", None)]


def settings_section(name: str) -> type[Any] | None:
    """The typed parameter section a unit owns under the key ``name``; None when no unit owns that key."""
    return next((u.settings_type for u in with_settings() if u.name == name), None)


def automatic() -> list[BackendUnit]:
    """The units ``backend: auto`` may choose, in its order of preference."""
    return sorted((u for u in UNITS if u.auto_rank is not None), key=lambda u: u.auto_rank or 0)


def native_to(platform: str) -> BackendUnit | None:
    """The unit that is ``platform``'s own choice (Metal on macOS), if any."""
    return next((u for u in UNITS if u.native_to == platform), None)


def offloading() -> list[BackendUnit]:
    """The units whose wheels offload layers to a device."""
    return [u for u in UNITS if u.offloads]


def device_log_names() -> list[str]:
    """The names llama.cpp gives device buffers in a load log, one per backend that has them."""
    return [u.device_log_name for u in UNITS if u.device_log_name]
