"""Parsers for the Windows, WSL, macOS and NVIDIA tools, against recorded outputs (tests/data/detect/README.md)."""

from __future__ import annotations

import json
import types

from conftest import DATA

from playbook.backends.cuda_probe import gpus_from_nvml, parse_nvidia_smi_xml, stub_dirs
from playbook.facts import VisualStudio, msvc_from_toolset
from playbook.steps.detect import (
    CommandOutput,
    detect_apple_silicon,
    detect_visual_studio,
    parse_ldconfig,
    parse_vswhere_json,
)

DETECT = DATA / "detect"


def test_nvidia_smi_xml_of_the_gpu_machine():
    driver, gpus = parse_nvidia_smi_xml((DETECT / "nvidia-smi-q-x-h200.xml").read_text())
    assert (driver.found, driver.version, driver.cuda_version) == (True, "580.159.04", "13.0")
    assert [(g.name, g.memory_total_mib, g.compute_capability) for g in gpus] == [("NVIDIA H200", 143771, "9.0")]
    assert parse_nvidia_smi_xml("NVIDIA-SMI has failed")[1] == []


def test_nvml_answers_of_the_gpu_machine():
    answers = json.loads((DETECT / "nvml-h200.json").read_text())
    device = answers["devices"][0]
    fake = types.SimpleNamespace(
        NVML_CLOCK_MEM=2,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: answers["nvmlSystemGetDriverVersion"],
        nvmlSystemGetCudaDriverVersion_v2=lambda: answers["nvmlSystemGetCudaDriverVersion_v2"],
        nvmlDeviceGetCount=lambda: answers["nvmlDeviceGetCount"],
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda handle: device["nvmlDeviceGetName"],
        nvmlDeviceGetCudaComputeCapability=lambda handle: tuple(device["nvmlDeviceGetCudaComputeCapability"]),
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=device["nvmlDeviceGetMemoryInfo.total"]),
        nvmlDeviceGetMemoryBusWidth=lambda handle: device["nvmlDeviceGetMemoryBusWidth"],
        nvmlDeviceGetMaxClockInfo=lambda handle, clock: device["nvmlDeviceGetMaxClockInfo"],
    )
    driver, gpus = gpus_from_nvml(fake)
    assert (driver.version, driver.cuda_version, driver.source) == ("580.159.04", "13.0", "nvml")
    assert [(g.name, g.arch, g.memory_total_mib, g.memory_bus_width_bits) for g in gpus] == [("NVIDIA H200", "90", 143771, 6016)]


def test_vswhere_json():
    studios = parse_vswhere_json((DETECT / "vswhere-vs2022-17.10.json").read_text())
    assert [(s.name, s.version) for s in studios] == [("Visual Studio Community 2022", "17.10.34916.146"),
                                                      ("Visual Studio Build Tools 2019", "16.11.35026.282")]
    assert studios[0].path == "C:\\Program Files\\Microsoft Visual Studio\\2022\\Community"
    assert parse_vswhere_json("not json") == []
    assert msvc_from_toolset("14.40.33807") == "19.40"
    assert VisualStudio("x", "17.10", "p", ["14.39.33519", "14.40.33807"]).newest_msvc == "19.40"


def test_vswhere_is_a_recorded_absence_off_windows(tmp_path):
    tool, studios = detect_visual_studio({"PATH": str(tmp_path), "ProgramFiles(x86)": str(tmp_path)},
                                         lambda args, timeout: CommandOutput(None, ""))
    assert (tool.name, tool.found, studios) == ("vswhere", False, [])


def test_vswhere_probe_reads_the_installation_folders(tmp_path):
    root = tmp_path / "VS2022"
    (root / "VC" / "Tools" / "MSVC" / "14.40.33807").mkdir(parents=True)
    (root / "VC" / "Auxiliary" / "Build").mkdir(parents=True)
    (root / "VC" / "Auxiliary" / "Build" / "vcvarsall.bat").write_text("")
    (root / "MSBuild" / "Microsoft" / "VC" / "v170" / "BuildCustomizations").mkdir(parents=True)
    (root / "MSBuild" / "Microsoft" / "VC" / "v170" / "BuildCustomizations" / "CUDA 12.4.props").write_text("")
    installer = tmp_path / "Microsoft Visual Studio" / "Installer"
    installer.mkdir(parents=True)
    (installer / "vswhere.exe").write_text("")
    answer = json.dumps([{"displayName": "VS", "installationVersion": "17.10.1", "installationPath": str(root)}])
    tool, studios = detect_visual_studio({"ProgramFiles(x86)": str(tmp_path)}, lambda args, timeout: CommandOutput(0, answer))
    assert tool.found and studios[0].msvc_toolsets == ["14.40.33807"] and studios[0].cuda_integration == ["12.4"]
    assert studios[0].vcvarsall.endswith("vcvarsall.bat") and studios[0].dev_shell == ""


def test_ldconfig_and_stub_folders():
    assert parse_ldconfig((DETECT / "ldconfig-wsl.txt").read_text(), "libcuda.so.1") == ["/usr/lib/wsl/lib/libcuda.so.1"]
    assert parse_ldconfig((DETECT / "ldconfig-gpu-machine.txt").read_text(), "libcuda.so.1") == [
        "/usr/local/nvidia/lib64/libcuda.so.1", "/lib/libcuda.so.1"]
    assert stub_dirs("/usr/local/cuda/lib64/stubs:/usr/lib/wsl/lib") == ["/usr/local/cuda/lib64/stubs"]
    assert stub_dirs("/usr/local/nvidia/lib64:/usr/local/nvidia/lib") == []  # the GPU machine's real value


def test_rosetta_and_apple_silicon_from_sysctl():
    def sysctl(answers):
        return lambda args, timeout: CommandOutput(0, answers[args[-1]])

    assert detect_apple_silicon(sysctl({"sysctl.proc_translated": "1\n", "hw.optional.arm64": "1\n"})) == (True, True)
    assert detect_apple_silicon(sysctl({"sysctl.proc_translated": "0\n", "hw.optional.arm64": "1\n"})) == (False, True)
    intel = lambda args, timeout: CommandOutput(1, "unknown oid")
    assert detect_apple_silicon(intel) == (False, False)


def test_old_detect_json_still_loads():
    """A detect.json written before these fields existed loads with their defaults."""
    from conftest import DATA as data

    from playbook.facts import Facts
    from playbook.serialization import from_dict

    document = json.loads((data / "machines" / "gpu-machine-h200.json").read_text())
    document["os"].pop("rosetta", None)
    for key in ("vswhere", "visual_studio", "wsl_driver_libs", "libcuda_paths", "stub_on_ld_library_path", "temp_dir"):
        document.pop(key, None)
    facts = from_dict(Facts, document)
    assert facts.visual_studio == [] and facts.os.rosetta is False and not facts.vswhere.found
