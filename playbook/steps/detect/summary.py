"""Detect's devices in words, for every backend alike: the line detect's step ends with, the tables, the repair
memory's machine ("cuda device: NVIDIA H200 (compute 9.0)"; "no usable GPU for cuda, hip, vulkan, sycl; vulkan
device: llvmpipe (LLVM 15.0.6, 256 bits) (CPU type)")."""

from __future__ import annotations

from playbook.backends import registry
from playbook.facts import Device, Facts


def devices_of(facts: Facts) -> list[Device]:
    """Every device a backend's probe found: ``facts.devices``, or for facts detected before detect listed them
    (an archived detect.json), what each unit sees in them."""
    return facts.devices or [device for unit in registry.units() for device in unit.devices(facts)]


def offload_devices(facts: Facts) -> list[Device]:
    """The devices a backend that offloads could use (the CPU's own entry left out), in the registry's order."""
    offloading = {unit.name for unit in registry.offloading()}
    return [device for device in devices_of(facts) if device.backend in offloading]


def describe_devices(facts: Facts) -> str:
    """The devices by backend, and which backends found no GPU when none did."""
    devices = offload_devices(facts)
    parts = []
    for unit in registry.offloading():
        found = [device for device in devices if device.backend == unit.name]
        if found:
            parts.append(f"{unit.name} device{'s' if len(found) > 1 else ''}: " + ", ".join(map(_named, found)))
    if not any(device.kind == "gpu" for device in devices):
        looked = [unit.name for unit in registry.offloading() if facts.os.platform in unit.platforms]
        parts.insert(0, "no usable GPU for " + ", ".join(looked))
    return "; ".join(parts)


def _named(device: Device) -> str:
    return f"{device.name} ({device.detail})" if device.detail else device.name
