"""Vulkan: ``-DGGML_VULKAN=on``, and what ggml-vulkan needs to build and to find a device.

ggml-vulkan's CMakeLists runs ``find_package(Vulkan COMPONENTS glslc REQUIRED)`` and
``find_package(SPIRV-Headers CONFIG REQUIRED)``, then compiles ggml-vulkan.cpp against the Vulkan-Hpp
headers, whose version the pinned llama.cpp needs to be recent (``knowledge/vulkan.yaml``). Reads detect's
``vulkan`` (loader, devices, glslc, headers, SPIR-V headers).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playbook.backends.base import GIB_MIB, Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.errors import ParameterError
from playbook.facts import VULKAN_DEVICE_TYPES, Device, Facts, Tool, Vulkan, VulkanDevice, VulkanHeaders
from playbook.knowledge import compatibility
from playbook.probing import CommandRunner, ProbeContext, detect_tool, parse_ldconfig

VISIBLE_DEVICES = "GGML_VK_VISIBLE_DEVICES"
# Where compilers and CMake's FindVulkan look without being told.
DEFAULT_INCLUDE_DIRS = ("/usr/include", "/usr/local/include")


@dataclass(frozen=True)
class VulkanSettings:
    """The ``vulkan:`` parameter section."""

    include_dir: str = ""
    """The folder holding vulkan/vulkan_core.h; empty: the newest of $VULKAN_SDK/include and the system's."""


def usable(vulkan: Vulkan) -> bool:
    """A device to run on and what building needs: what ``backend: auto`` asks before choosing Vulkan."""
    return bool(vulkan.gpus) and not missing(vulkan)


def missing(vulkan: Vulkan) -> list[str]:
    minimum, _, _ = compatibility.vulkan_min_headers()
    what = []
    headers = vulkan.headers[0] if vulkan.headers else None
    if headers is None:
        what.append("Vulkan headers")
    elif compatibility.version_tuple(headers.version) < compatibility.version_tuple(minimum):
        what.append(f"Vulkan headers {minimum}+ (found {headers.version})")
    if not vulkan.glslc.found:
        what.append("glslc")
    if not vulkan.spirv_headers:
        what.append("SPIR-V headers")
    return what


def describe(vulkan: Vulkan) -> str:
    return ", ".join(f"{d.name} ({d.device_type}, {d.driver_name or 'driver ?'})" for d in vulkan.devices)


def configure(planner: PlanDraft) -> None:
    vulkan = planner.facts.vulkan
    planner.add_cmake_arg(VulkanBackend.cmake_switch)
    _headers(planner, vulkan)
    _shader_compiler(planner, vulkan)
    _spirv_headers(planner, vulkan)
    _devices(planner, vulkan)


def _headers(planner: PlanDraft, vulkan: Vulkan) -> None:
    minimum, source, newer = compatibility.vulkan_min_headers()
    if not vulkan.headers:
        planner.block("vulkan-headers-missing",
                      "no Vulkan headers (vulkan/vulkan_core.h) found: CMake's find_package(Vulkan) will fail; install "
                      f"{newer}, or set vulkan.include_dir")
        return
    chosen = vulkan.headers[0]
    if compatibility.version_tuple(chosen.version) < compatibility.version_tuple(minimum):
        planner.block("vulkan-headers-too-old",
                      f"Vulkan headers {chosen.version} in {chosen.include_dir} are older than {minimum}, the oldest the "
                      f"pinned llama.cpp compiles with (vk::LayerSettingEXT is undeclared before it: {source}); "
                      f"install {newer} and set vulkan.include_dir or VULKAN_SDK")
    if str(Path(chosen.include_dir)) not in DEFAULT_INCLUDE_DIRS:
        planner.add_cmake_arg(f"-DVulkan_INCLUDE_DIR={Path(chosen.include_dir).as_posix()}")
    planner.decide("Vulkan headers", f"{chosen.version} in {chosen.include_dir}",
                   f"found by {chosen.found_by}" + (f"; newest of {len(vulkan.headers)} found" if len(vulkan.headers) > 1
                                                    else ""))


def _shader_compiler(planner: PlanDraft, vulkan: Vulkan) -> None:
    if not vulkan.glslc.found:
        planner.block("glslc-missing",
                      "no glslc (the GLSL to SPIR-V compiler) found: ggml-vulkan's find_package(Vulkan COMPONENTS glslc) "
                      "will fail; install glslc (Debian/Ubuntu: apt install glslc) or the Vulkan SDK (set VULKAN_SDK)")
        return
    planner.decide("shader compiler", f"glslc {vulkan.glslc.version} ({vulkan.glslc.path})",
                   "compiles ggml-vulkan's compute shaders to SPIR-V during the build")


def _spirv_headers(planner: PlanDraft, vulkan: Vulkan) -> None:
    if not vulkan.spirv_headers:
        planner.block("spirv-headers-missing",
                      "no SPIRV-HeadersConfig.cmake found: ggml-vulkan's find_package(SPIRV-Headers CONFIG REQUIRED) "
                      "will fail; install spirv-headers (Debian/Ubuntu: apt install spirv-headers) or the Vulkan SDK")
        return
    config_dir = Path(vulkan.spirv_headers).parent
    if not config_dir.as_posix().startswith(("/usr/share/", "/usr/lib/", "/usr/local/")):
        planner.add_cmake_arg(f"-DSPIRV-Headers_DIR={config_dir.as_posix()}")
    planner.decide("SPIR-V headers", str(config_dir), "ggml-vulkan's find_package(SPIRV-Headers CONFIG) reads them")


def _devices(planner: PlanDraft, vulkan: Vulkan) -> None:
    if not vulkan.loader:
        planner.warn("vulkan-loader-missing",
                     "no Vulkan loader (libvulkan.so.1 / vulkan-1.dll) found: the wheel will build but not load; install "
                     "the loader (Debian/Ubuntu: libvulkan1) and a Vulkan driver")
    if not vulkan.devices:
        why = vulkan.error.splitlines()[-1] if vulkan.error else "vulkaninfo (vulkan-tools) not found"
        planner.warn("vulkan-no-device",
                     f"no Vulkan device seen ({why}): the wheel builds, but verify will offload nothing unless a Vulkan "
                     "driver is present where it runs")
        return
    if vulkan.gpus:
        planner.decide("Vulkan devices", describe(vulkan), "the Vulkan loader's own report (vulkaninfo --summary)")
        return
    indices = ",".join(str(d.index) for d in vulkan.devices if d.device_type == "cpu")
    if indices:
        planner.runtime_env[VISIBLE_DEVICES] = indices
        planner.decide("Vulkan devices", f"{describe(vulkan)}; {VISIBLE_DEVICES}={indices}",
                       "llama.cpp skips CPU-type Vulkan devices unless GGML_VK_VISIBLE_DEVICES names them; the only "
                       "devices here are CPU-type (a software rasterizer such as lavapipe)")
        planner.warn("vulkan-cpu-device-only",
                     f"the only Vulkan device is CPU-type ({describe(vulkan)}): offloading runs on the CPU through Vulkan, "
                     f"useful to test the backend, not to speed it up; verify sets {VISIBLE_DEVICES}={indices}")


class VulkanBackend(BackendUnit):
    name = "vulkan"
    cmake_switch = "-DGGML_VULKAN=on"
    settings_type = VulkanSettings
    facts_read = ("vulkan",)
    knowledge = ("vulkan.yaml",)
    failure_family = "vulkan"
    profile = "vulkan"
    auto_rank = 40
    upstream_variants = ("vulkan",)
    mib_per_compile_job = 2 * GIB_MIB
    device_log_name = "Vulkan"
    status = "runs here (lavapipe) and on the GPU machine"

    def check_settings(self, settings: VulkanSettings) -> None:
        folder = settings.include_dir
        if folder and not (Path(folder).expanduser() / "vulkan" / "vulkan_core.h").is_file():
            raise ParameterError(f"vulkan.include_dir {folder!r} holds no vulkan/vulkan_core.h; give the folder "
                                 "above vulkan/ (e.g. /usr/include), or leave it empty to use the newest found")

    def assess(self, inputs: BackendInputs) -> Assessment:
        vk = inputs.facts.vulkan
        if usable(vk):
            return Assessment(f"Vulkan GPU {describe(vk)}; headers, glslc and SPIR-V headers found")
        if not vk.devices:
            return Assessment(blocked_because="no Vulkan device seen (loader, driver or vulkaninfo missing)")
        if not vk.gpus:
            return Assessment(blocked_because=f"the only Vulkan devices are CPU-type ({describe(vk)}): no faster than "
                              "the CPU backend; set backend: vulkan to build for it anyway")
        return Assessment(blocked_because=f"Vulkan GPU {describe(vk)}, but missing {', '.join(missing(vk))}")

    def requested(self, inputs: BackendInputs) -> Choice:
        devices = describe(inputs.facts.vulkan) or "no Vulkan device seen"
        where = " (MoltenVK on macOS)" if inputs.platform == "macos" else ""
        draft = PlanDraft(inputs)
        draft.decide("backend", self.name, f"asked for in parameters{where}; {devices}")
        return Choice(self.name, draft.result())

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        configure(draft)
        return draft.result()

    def devices(self, facts: Facts) -> list[Device]:
        """CPU-type devices count too: configure makes them visible (GGML_VK_VISIBLE_DEVICES)."""
        return [Device(self.name, d.name, kind="cpu" if d.device_type == "cpu" else "gpu",
                       detail="CPU type" if d.device_type == "cpu" else d.device_type)
                for d in facts.vulkan.devices]

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        """The loader, the devices (vulkaninfo, else the Vulkan API), glslc, the headers (``vulkan.include_dir``
        first) and the SPIR-V headers."""
        settings = context.settings or self.settings_type()
        return {"vulkan": detect_vulkan(context.environ, context.search_path, context.runner, settings.include_dir,
                                        context.python or sys.executable)}


# ---------------------------------------------------------------- detecting: parsers (pure)


def parse_vulkaninfo_summary(text: str) -> tuple[str, list[VulkanDevice]]:
    """``vulkaninfo --summary``: the instance (loader) version and each device's GPUn block."""
    instance = re.search(r"Vulkan Instance Version:\s*([\d.]+)", text)
    devices = []
    for index, block in re.findall(r"^GPU(\d+):\s*\n((?:[ \t]+\S.*\n?)+)", text, re.MULTILINE):
        values = dict(re.findall(r"^\s+(\w+)\s*=\s*(.*?)\s*$", block, re.MULTILINE))
        devices.append(VulkanDevice(
            int(index), values.get("deviceName", ""),
            VULKAN_DEVICE_TYPES.get(values.get("deviceType", ""), values.get("deviceType", "").lower()),
            values.get("driverName", ""), values.get("driverInfo", ""), values.get("apiVersion", ""),
            values.get("vendorID", "")))
    return instance.group(1) if instance else "", devices


def parse_vulkan_header_version(text: str) -> str:
    """vulkan_core.h: ``VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 4, VK_HEADER_VERSION)`` and
    ``#define VK_HEADER_VERSION 309`` -> ``1.4.309``."""
    patch = re.search(r"^#define\s+VK_HEADER_VERSION\s+(\d+)", text, re.MULTILINE)
    complete = re.search(r"VK_HEADER_VERSION_COMPLETE\s+VK_MAKE_(?:API_)?VERSION\((?:\d+,\s*)?(\d+),\s*(\d+),", text)
    if not patch:
        return ""
    major, minor = complete.groups() if complete else ("1", "0")
    return f"{major}.{minor}.{patch.group(1)}"


# ---------------------------------------------------------------- detecting: probes


def detect_vulkan(environ: Mapping[str, str], search_path: str, runner: CommandRunner,
                  include_dir: str = "", python: str = sys.executable) -> Vulkan:
    sdk = environ.get("VULKAN_SDK", "")
    vulkan = Vulkan(loader=vulkan_loader_paths(runner, environ))
    if path := shutil.which("vulkaninfo", path=search_path):
        out = runner([path, "--summary"], 60)
        vulkan.instance_version, vulkan.devices = parse_vulkaninfo_summary(out.stdout)
        vulkan.vulkaninfo = Tool("vulkaninfo", out.returncode == 0, path, vulkan.instance_version,
                                 f"Vulkan Instance Version: {vulkan.instance_version}" if vulkan.instance_version else "")
        vulkan.source = "vulkaninfo --summary"
        if not vulkan.devices:
            vulkan.error = out.stdout.strip()[-500:] or f"vulkaninfo exited with {out.returncode}"
    if not vulkan.devices and (vulkan.loader or not vulkan.vulkaninfo.found):
        ask_api(vulkan, runner, python)
    glslc_path = search_path if not sdk else os.pathsep.join([str(Path(sdk) / "bin"), search_path])
    vulkan.glslc = detect_tool("glslc", ["--version"], glslc_path, runner)
    vulkan.headers = vulkan_headers(include_dir, sdk)
    vulkan.spirv_headers = spirv_headers_config(sdk)
    return vulkan


def ask_api(vulkan: Vulkan, runner: CommandRunner, python: str) -> None:
    """The loader's own answer through the Vulkan API (child_scripts/vulkan_devices.py), where vulkaninfo is absent."""
    script = Path(__file__).resolve().parent.parent / "child_scripts" / "vulkan_devices.py"
    out = runner([python, str(script)], 60)
    try:
        answer = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        vulkan.error = vulkan.error or out.stdout.strip()[-500:]
        return
    devices = [VulkanDevice(i, d["name"], d["type"], d["driver_name"], d["driver_info"], d["api_version"], d["vendor_id"])
               for i, d in enumerate(answer.get("devices", []))]
    if devices or not vulkan.source:
        vulkan.devices, vulkan.source = devices, "Vulkan API"
        vulkan.instance_version = answer.get("instance_version", vulkan.instance_version)
    if not devices:
        vulkan.error = answer.get("error") or vulkan.error or "the Vulkan loader lists no physical device"


def vulkan_loader_paths(runner: CommandRunner, environ: Mapping[str, str] | None = None) -> list[str]:
    system = platform.system()
    environ = environ or {}
    if system == "Windows":
        dll = Path(os.environ.get("SystemRoot", r"C:\Windows")) / "System32" / "vulkan-1.dll"
        return [str(dll)] if dll.is_file() else []
    if system == "Darwin":
        return [p for p in ("/usr/local/lib/libvulkan.1.dylib", "/opt/homebrew/lib/libvulkan.1.dylib") if Path(p).is_file()]
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").is_file() else "")
    folders = [f for f in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if f]
    if environ.get("VULKAN_SDK"):
        folders.append(str(Path(environ["VULKAN_SDK"]) / "lib"))
    found = [str(Path(f) / "libvulkan.so.1") for f in folders if (Path(f) / "libvulkan.so.1").is_file()]
    if ldconfig:
        out = runner([ldconfig, "-p"], 20)
        found += parse_ldconfig(out.stdout, "libvulkan.so.1") if out.returncode == 0 else []
    return list(dict.fromkeys(found))


def vulkan_headers(include_dir: str, sdk: str) -> list[VulkanHeaders]:
    """Every vulkan_core.h in the places CMake's FindVulkan looks, the one to build with first: the
    parameter's, else the newest."""
    candidates: list[tuple[Path, str]] = []
    if include_dir:
        candidates.append((Path(include_dir).expanduser(), "vulkan.include_dir"))
    if sdk:
        candidates += [(Path(sdk) / "include", "VULKAN_SDK"), (Path(sdk) / "Include", "VULKAN_SDK")]
    candidates += [(Path(p), "system") for p in ("/usr/include", "/usr/local/include", "/opt/homebrew/include")]
    found: dict[Path, VulkanHeaders] = {}
    for folder, how in candidates:
        header = folder / "vulkan" / "vulkan_core.h"
        if header.is_file() and folder.resolve() not in found:
            version = parse_vulkan_header_version(header.read_text(encoding="utf-8", errors="replace"))
            found[folder.resolve()] = VulkanHeaders(str(folder), version, how)
    headers = list(found.values())
    given = [h for h in headers if h.found_by == "vulkan.include_dir"]
    rest = sorted((h for h in headers if h not in given), key=lambda h: h.patch, reverse=True)
    return given + rest


def spirv_headers_config(sdk: str) -> str:
    roots = [Path(sdk)] if sdk else []
    roots += [Path(p) for p in ("/usr", "/usr/local", "/opt/homebrew")]
    for root in roots:
        for sub in ("share/cmake/SPIRV-Headers", "lib/cmake/SPIRV-Headers", "share/SPIRV-Headers/cmake"):
            config = root / sub / "SPIRV-HeadersConfig.cmake"
            if config.is_file():
                return str(config)
    return ""
