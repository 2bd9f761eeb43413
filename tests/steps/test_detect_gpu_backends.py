"""Detect's Vulkan, ROCm and macOS probes: the parsers over recorded outputs, the header search over files."""

from __future__ import annotations

from pathlib import Path

from machines import DETECT

from playbook.backends.hip import parse_hipconfig_version, parse_rocminfo
from playbook.backends.metal import detect_apple
from playbook.backends.vulkan import (
    detect_vulkan,
    parse_vulkan_header_version,
    parse_vulkaninfo_summary,
    vulkan_headers,
)
from playbook.steps.detect import CommandOutput


def test_vulkaninfo_summary_of_lavapipe():
    instance, devices = parse_vulkaninfo_summary((DETECT / "vulkaninfo-summary-lavapipe.txt").read_text())
    assert instance == "1.3.239"
    assert len(devices) == 1
    device = devices[0]
    assert (device.index, device.device_type, device.driver_name) == (0, "cpu", "llvmpipe")
    assert device.name == "llvmpipe (LLVM 15.0.6, 256 bits)" and device.driver_info == "Mesa 22.3.6 (LLVM 15.0.6)"
    assert device.api_version == "1.3.230" and device.vendor_id == "0x10005"


def test_vulkaninfo_summary_with_a_gpu_and_lavapipe():
    _, devices = parse_vulkaninfo_summary((DETECT / "vulkaninfo-summary-780m.txt").read_text())
    assert [(d.index, d.device_type, d.driver_name) for d in devices] == [(0, "integrated", "radv"), (1, "cpu", "llvmpipe")]
    assert parse_vulkaninfo_summary("ERROR: [Loader Message] vkCreateInstance: Found no drivers!\n") == ("", [])


def test_vulkan_header_version():
    text = ("#define VK_HEADER_VERSION 309\n"
            "#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 4, VK_HEADER_VERSION)\n")
    assert parse_vulkan_header_version(text) == "1.4.309"
    assert parse_vulkan_header_version(text.replace("1, 4", "1, 3").replace("309", "239")) == "1.3.239"
    assert parse_vulkan_header_version("nothing here") == ""


def _header(folder: Path, patch: int, minor: int = 3) -> Path:
    (folder / "vulkan").mkdir(parents=True)
    (folder / "vulkan" / "vulkan_core.h").write_text(
        f"#define VK_HEADER_VERSION {patch}\n"
        f"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, {minor}, VK_HEADER_VERSION)\n")
    return folder


def test_vulkan_headers_the_parameter_first_then_the_newest(tmp_path):
    sdk = tmp_path / "sdk"
    _header(sdk / "include", 309, 4)
    given = _header(tmp_path / "given", 280)
    found = vulkan_headers("", str(sdk))
    assert found[0].version == "1.4.309" and found[0].found_by == "VULKAN_SDK"
    found = vulkan_headers(str(given), str(sdk))
    assert [h.found_by for h in found[:2]] == ["vulkan.include_dir", "VULKAN_SDK"] and found[0].version == "1.3.280"


def test_detect_vulkan_without_vulkaninfo_asks_the_api(tmp_path):
    answer = ('{"instance_version": "1.4.309", "devices": [{"name": "NVIDIA H200", "type": "discrete", '
              '"api_version": "1.4.312", "driver_version": 1, "vendor_id": "0x10de", "driver_name": "NVIDIA", '
              '"driver_info": "580.159.04"}]}')
    calls = []

    def runner(args: list[str], timeout: float) -> CommandOutput:
        calls.append(args)
        return CommandOutput(0, answer if args[-1].endswith("vulkan_devices.py") else "")

    vulkan = detect_vulkan({"PATH": str(tmp_path)}, str(tmp_path), runner)
    assert not vulkan.vulkaninfo.found and vulkan.source == "Vulkan API" and vulkan.instance_version == "1.4.309"
    assert [(d.name, d.device_type, d.driver_name, d.driver_info) for d in vulkan.devices] == [
        ("NVIDIA H200", "discrete", "NVIDIA", "580.159.04")]
    vulkan = detect_vulkan({"PATH": str(tmp_path)}, str(tmp_path),
                           lambda args, timeout: CommandOutput(0, '{"error": "no Vulkan loader: libvulkan.so.1"}'))
    assert vulkan.devices == [] and vulkan.error == "no Vulkan loader: libvulkan.so.1"


def test_the_api_probe_agrees_with_vulkaninfo_here():
    import shutil
    import subprocess
    import sys

    from playbook.probing import run_command
    if not shutil.which("vulkaninfo"):
        import pytest
        pytest.skip("no vulkaninfo here (vulkan-tools)")
    script = Path(__file__).parents[2] / "playbook" / "child_scripts" / "vulkan_devices.py"
    api = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=60).stdout
    via_api = detect_vulkan({"PATH": ""}, "", lambda args, timeout: CommandOutput(0, api))
    via_tool = detect_vulkan({}, str(Path(shutil.which("vulkaninfo")).parent), run_command)
    assert [(d.name, d.device_type, d.driver_name) for d in via_api.devices] == [
        (d.name, d.device_type, d.driver_name) for d in via_tool.devices]
    assert via_api.instance_version == via_tool.instance_version


def test_rocminfo_gpu_agents_only():
    gpus = parse_rocminfo((DETECT / "rocminfo-7900xtx.txt").read_text())
    assert [(g.name, g.gfx) for g in gpus] == [("Radeon RX 7900 XTX", "gfx1100")]
    assert parse_hipconfig_version((DETECT / "hipconfig-6.2.4.txt").read_text()) == "6.2"


def test_detect_apple_without_the_metal_compiler():
    answers = {
        "sysctl": CommandOutput(0, "Apple M3\n"),
        "xcrun": CommandOutput(72, 'xcrun: error: unable to find utility "metal", not a developer tool or in PATH\n'),
        "xcode-select": CommandOutput(0, "/Library/Developer/CommandLineTools\n"),
        "sw_vers": CommandOutput(0, "15.1\n"),
    }
    apple = detect_apple(lambda args, timeout: answers[args[0]])
    assert apple.chip == "Apple M3" and apple.metal_compiler == ""
    assert 'unable to find utility "metal"' in apple.metal_error
    assert apple.command_line_tools == "/Library/Developer/CommandLineTools" and apple.macos_version == "15.1"

