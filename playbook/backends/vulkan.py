"""Vulkan: ``-DGGML_VULKAN=on``, and what ggml-vulkan needs to build and to find a device.

ggml-vulkan's CMakeLists runs ``find_package(Vulkan COMPONENTS glslc REQUIRED)`` and
``find_package(SPIRV-Headers CONFIG REQUIRED)``, then compiles ggml-vulkan.cpp against the Vulkan-Hpp
headers, whose version the pinned llama.cpp needs to be recent (``knowledge/vulkan.yaml``). Reads detect's
``vulkan`` (loader, devices, glslc, headers, SPIR-V headers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from playbook.backends.base import GIB_MIB, Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.errors import ParameterError
from playbook.facts import Device, Facts, Vulkan
from playbook.knowledge import compatibility

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
