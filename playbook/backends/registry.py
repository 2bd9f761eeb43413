"""Every backend, registered once. A new backend is one module with a :class:`BackendUnit` subclass and one
line in :data:`UNITS`, plus its value in :class:`playbook.params.Backend`, its knowledge, its profile and its
tests (``tests/backends/test_registry.py`` checks that each names what exists)."""

from __future__ import annotations

from playbook.backends.base import BackendUnit
from playbook.backends.cpu import CpuBackend
from playbook.backends.cuda import CudaBackend
from playbook.backends.hip import HipBackend
from playbook.backends.metal import MetalBackend
from playbook.backends.openblas import OpenBlasBackend
from playbook.backends.prebuilt import PrebuiltBackend
from playbook.backends.sycl import SyclBackend
from playbook.backends.vulkan import VulkanBackend
from playbook.errors import ParameterError
from playbook.params import Backend

FALLBACK_UNIT = CpuBackend()
UNITS: tuple[BackendUnit, ...] = (
    PrebuiltBackend(),
    CudaBackend(),
    HipBackend(),
    MetalBackend(),
    VulkanBackend(),
    SyclBackend(),
    OpenBlasBackend(),
    FALLBACK_UNIT,
)
FALLBACK = FALLBACK_UNIT.name


def unit(name: Backend | str) -> BackendUnit:
    """The unit of a backend, by its value ("cuda") or its :class:`Backend`."""
    value = name.value if isinstance(name, Backend) else str(name)
    for candidate in UNITS:
        if candidate.name.value == value:
            return candidate
    raise ParameterError(f"backend {value!r} is not one the playbook knows; use one of "
                         f"{', '.join(u.name.value for u in UNITS)}")


def fallback() -> CpuBackend:
    """What ``backend: auto`` builds when no accelerator is usable."""
    return FALLBACK_UNIT


def units() -> tuple[BackendUnit, ...]:
    return UNITS


def automatic() -> list[BackendUnit]:
    """The units ``backend: auto`` may choose, in its order of preference."""
    return sorted((u for u in UNITS if u.auto_rank is not None), key=lambda u: u.auto_rank or 0)


def device_log_names() -> list[str]:
    """The names llama.cpp gives device buffers in a load log, one per backend that has them."""
    return [u.device_log_name for u in UNITS if u.device_log_name]
