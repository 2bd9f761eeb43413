"""Every backend is one unit: registered once, naming facts, knowledge and a profile that exist; the
configure package and the backends import without a cycle."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import H100, make_facts
from machines import DETECT

from playbook import resources
from playbook.backends import registry
from playbook.backends.vulkan import parse_vulkaninfo_summary
from playbook.facts import Facts, HipGpu
from playbook.knowledge.failures import FAMILIES
from playbook.params import load_params

PACKAGE = Path(__file__).resolve().parents[2] / "playbook"
KNOWLEDGE = PACKAGE / "knowledge"


def test_every_backend_value_has_exactly_one_unit():
    names = [u.name for u in registry.units()]
    assert len(set(names)) == len(names)
    for name in registry.parameter_values()[1:]:
        assert load_params(None, [f"backend={name}"]).backend == name
    with pytest.raises(Exception, match="is not one the playbook knows; use one of"):
        registry.unit("opencl")


@pytest.mark.parametrize("unit", registry.units(), ids=lambda u: u.name)
def test_a_unit_names_what_exists(unit):
    fields = {f.name for f in dataclasses.fields(Facts)}
    assert set(unit.facts_read) <= fields, f"{unit.name}: {set(unit.facts_read) - fields} are not Facts fields"
    for name in unit.knowledge:
        assert (KNOWLEDGE / name).is_file(), f"{unit.name}: knowledge/{name} missing"
    assert (resources.params_dir() / f"{unit.profile}.yaml").is_file(), f"{unit.name}: params/{unit.profile}.yaml"
    assert not unit.failure_family or unit.failure_family in FAMILIES
    assert unit.status in ("runs here", "runs here (lavapipe) and on the GPU machine", "runs on the GPU machine",
                           "compiled only", "planned only")


def test_auto_order_is_the_documented_preference():
    assert [u.name for u in registry.automatic()] == ["cuda", "hip", "metal", "vulkan"]
    assert registry.unit(registry.FALLBACK).name == "cpu"
    assert set(registry.parameter_values()) == {"auto"} | {u.name for u in registry.units()} - {"prebuilt"}


def test_the_device_a_backend_would_use(this_machine):
    """Verify asks this before it calls a GPU wheel's run on the CPU: a lavapipe-only machine has a Vulkan
    device (configure makes CPU-type devices visible) but no NVIDIA GPU."""
    def device(backend: str, facts: Facts) -> str:
        return registry.unit(backend).device(facts)

    lavapipe_only = make_facts(this_machine, gpus=[])
    _, lavapipe_only.vulkan.devices = parse_vulkaninfo_summary((DETECT / "vulkaninfo-summary-lavapipe.txt").read_text())
    lavapipe_only.rocm.gpus, lavapipe_only.apple.chip = [], ""
    assert device("vulkan", lavapipe_only) == "llvmpipe (LLVM 15.0.6, 256 bits)"
    assert device("cuda", lavapipe_only) == device("hip", lavapipe_only) == device("metal", lavapipe_only) == ""
    assert device("cpu", lavapipe_only) == ""

    nvidia = make_facts(lavapipe_only, gpus=[H100])
    nvidia.vulkan.devices = []
    nvidia.rocm.gpus = [HipGpu("Radeon RX 7900 XTX", "gfx1100")]
    nvidia.apple.chip = "Apple M3 Pro"
    assert device("cuda", nvidia) == H100.name and device("vulkan", nvidia) == ""
    assert device("hip", nvidia) == "Radeon RX 7900 XTX" and device("metal", nvidia) == "Apple M3 Pro"


def test_verify_reads_every_backend_s_buffers():
    from playbook.verify.launcher import gpu_memory_mib

    log = "\n".join(f"load_tensors: {name}0 model buffer size =   100.00 MiB" for name in registry.device_log_names())
    assert gpu_memory_mib(log) == 100.0 * len(registry.device_log_names())
    assert {"CUDA", "Vulkan", "ROCm", "Metal"} <= set(registry.device_log_names())
