"""Detect as a package: the host's facts, then each backend unit's probe with its own settings, then one list of
devices; the line detect's step ends with, the same for every backend."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

from machines import machine

import playbook.steps.detect as detect_package
from playbook.backends import registry
from playbook.backends.hip import HipSettings
from playbook.backends.vulkan import VulkanSettings
from playbook.facts import Device, Facts
from playbook.params import Params
from playbook.probing import CommandOutput, ProbeContext
from playbook.serialization import from_dict
from playbook.steps.detect import describe_devices, detect, detect_step, devices_of
from playbook.steps.detect.host import host_facts
from playbook.steps.detect.summary import offload_devices


def nothing_runs(args, timeout):
    return CommandOutput(None, "No such file or directory")


def test_host_and_units_together_fill_every_field_once(tmp_path):
    """Every Facts field but ``devices`` comes from the host or from exactly one unit's probe."""
    environ = {"PATH": str(tmp_path)}
    host = set(host_facts(environ, str(tmp_path), nothing_runs, str(tmp_path / "python"), []))
    owners: dict[str, list[str]] = {name: ["host"] for name in host}
    for unit in registry.units():
        context = ProbeContext(environ, str(tmp_path), nothing_runs, str(tmp_path / "python"), unit.settings_type())
        for name in unit.probe(context):
            owners.setdefault(name, []).append(unit.name)
    fields = {f.name for f in dataclasses.fields(Facts)} - {"devices"}
    assert {name for name, who in owners.items() if len(who) > 1} == set()
    # apple is Metal's, probed on macOS only: elsewhere its default stays
    assert fields - set(owners) <= {"apple"} and set(owners) <= fields


def test_devices_are_every_units_own(tmp_path):
    facts = detect(environ={"PATH": str(tmp_path)}, runner=nothing_runs, python=str(tmp_path / "python"))
    assert facts.devices == [d for unit in registry.units() for d in unit.devices(facts)]
    assert [d.kind for d in facts.devices if d.backend == registry.fallback().name] == ["cpu"]
    again = from_dict(Facts, json.loads(json.dumps(dataclasses.asdict(facts))))
    assert again.devices == facts.devices and isinstance(again.devices[0], Device)


def test_each_probe_gets_its_own_settings(tmp_path):
    """vulkan.include_dir and hip.rocm_path are where their probes look first; detect names neither."""
    headers = tmp_path / "headers"
    (headers / "vulkan").mkdir(parents=True)
    (headers / "vulkan" / "vulkan_core.h").write_text(
        "#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 4, VK_HEADER_VERSION)\n"
        "#define VK_HEADER_VERSION 309\n")
    rocm = tmp_path / "rocm"
    (rocm / "bin").mkdir(parents=True)
    (rocm / "bin" / "hipconfig").write_text("")
    facts = detect(environ={"PATH": str(tmp_path)}, runner=nothing_runs, python=str(tmp_path / "python"),
                   settings={"vulkan": VulkanSettings(include_dir=str(headers)), "hip": HipSettings(rocm_path=str(rocm))})
    assert (facts.vulkan.headers[0].include_dir, facts.vulkan.headers[0].found_by) == (str(headers), "vulkan.include_dir")
    assert (facts.rocm.root, facts.rocm.found_by) == (str(rocm), "hip.rocm_path")


def test_detect_for_passes_each_unit_its_section_and_the_cache(monkeypatch, tmp_path):
    given = {}
    monkeypatch.setattr(detect_package, "detect", lambda **kwargs: given.update(kwargs))
    params = dataclasses.replace(Params(), backend_settings={"vulkan": VulkanSettings(include_dir="/opt/vk")})
    detect_package.detect_for(params)
    assert given["cache_dir"] == params.cache_dir
    assert given["settings"]["vulkan"] == VulkanSettings(include_dir="/opt/vk")
    assert set(given["settings"]) == set(registry.names())
    assert all(isinstance(given["settings"][u.name], u.settings_type) for u in registry.units())


def test_a_vulkan_only_machine_says_its_device_and_no_gpu():
    facts = machine("debian12-lavapipe")
    assert describe_devices(facts) == ("no usable GPU for cuda, hip, vulkan, sycl; "
                                       "vulkan device: llvmpipe (LLVM 15.0.6, 256 bits) (CPU type)")
    assert "NVIDIA" not in describe_devices(facts)


def test_an_nvidia_machine_names_its_gpus_for_cuda():
    assert describe_devices(machine("gpu-machine-h200")) == "cuda device: NVIDIA H200 (compute 9.0)"
    assert describe_devices(machine("driver535-cuda13")) == \
        "cuda devices: NVIDIA GeForce RTX 3090 (compute 8.6), NVIDIA GeForce RTX 4090 (compute 8.9)"


def test_other_backends_and_platforms_in_the_same_words():
    assert describe_devices(machine("rx7900xtx-rocm6.2")) == "hip device: Radeon RX 7900 XTX (gfx1100)"
    assert describe_devices(machine("m3-mac-metal")) == "metal device: Apple M3 (Apple silicon GPU)"
    assert describe_devices(machine("no-gpu")) == "no usable GPU for cuda, hip, vulkan, sycl"
    assert describe_devices(machine("radeon-780m-vulkan")).startswith("vulkan devices: AMD Radeon 780M")


def test_archived_facts_without_devices_still_describe_them():
    """A detect.json written before ``devices`` existed reads with none; each unit names them from its facts."""
    facts = machine("gpu-machine-h200")
    facts.devices = []
    assert [d.name for d in offload_devices(facts)] == ["NVIDIA H200"]
    assert devices_of(facts)[-1].kind == "cpu"


def test_detect_step_ends_with_the_devices_line(monkeypatch, tmp_path):
    facts = machine("debian12-lavapipe")
    monkeypatch.setattr(detect_package, "detect_for", lambda params: facts)
    said = {}
    run = SimpleNamespace(params=Params, layout=SimpleNamespace(detect_facts=tmp_path / "detect.json"),
                          write=lambda value, path: Path(path).write_text("{}"),
                          finish_step=lambda step, attempt, outcome, message: said.update(message=message))
    assert detect_step(run) is facts  # type: ignore[arg-type]
    assert said["message"] == f"{facts.os.pretty_name}; {describe_devices(facts)}"
    assert "vulkan device: llvmpipe" in said["message"] and "NVIDIA" not in said["message"]


def test_the_devices_table_and_the_repair_memory_say_the_same():
    from playbook.interfaces.tables import devices_table
    from playbook.steps.repair_memory import describe_machine

    lavapipe, bare = machine("debian12-lavapipe"), machine("no-gpu")
    table = devices_table(lavapipe)
    assert list(table.columns) == ["backend", "device", "kind", "detail"]
    assert table.to_dict("records") == [{"backend": "vulkan", "device": "llvmpipe (LLVM 15.0.6, 256 bits)",
                                         "kind": "cpu", "detail": "CPU type"}]
    assert devices_table(bare).iloc[0, 0] == "no usable GPU for cuda, hip, vulkan, sycl"
    assert describe_devices(lavapipe) in describe_machine(lavapipe)
