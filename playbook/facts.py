"""What detect found on a machine, as typed data: the host (system, CPU, memory, Python, compilers, tools) and
what each backend's probe found (its toolkit, its devices).

These types sit below every step and every backend: detect (:mod:`playbook.steps.detect`) fills them, and the
backend units (:mod:`playbook.backends`), configure and verify read them. ``detect.json`` is a :class:`Facts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CCCL_HEADERS = {"nv/target": "nv/target", "cub/cub.cuh": "cub/cub.cuh", "thrust": "thrust/version.h"}


def msvc_from_toolset(toolset: str) -> str:
    """MSVC toolset folder "14.40.33807" -> cl version "19.40" (Microsoft numbers both in step)."""
    parts = re.findall(r"\d+", toolset)
    return f"19.{parts[1]}" if len(parts) >= 2 and parts[0] == "14" else ""


@dataclass(frozen=True)
class Device:
    """One device a backend can offload to, as that backend's probe found it: the generic list every message
    about devices reads ("no usable GPU for cuda", "vulkan device: llvmpipe (CPU type)")."""

    backend: str
    """The backend unit whose probe found it ("cuda", "vulkan")."""
    name: str
    """The device's own name ("NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)")."""
    kind: str = "gpu"
    """gpu, or cpu for a device that runs on the CPU (Mesa's lavapipe, a SYCL CPU device)."""
    detail: str = ""
    """What the backend knows of it beside the name ("compute 9.0", "gfx1100", "CPU type")."""

    def describe(self) -> str:
        return f"{self.name} ({self.backend}" + (f", {self.detail})" if self.detail else ")")


@dataclass
class Tool:
    name: str
    found: bool
    path: str = ""
    version: str = ""
    banner: str = ""
    # What the tool says it was built with (ccache's "Features:" line: redis-storage, http-storage, ...).
    features: list[str] = field(default_factory=list)
    # A C++ compiler's linkage of the C++ runtime, probed by linking one small library: True when it needs
    # libstdc++.so.6, False when the runtime is copied in (a relocated GCC, -static-libstdc++); None when not
    # probed (no C++ compiler, Windows) or when it could not link at all.
    links_cxx_runtime_shared: bool | None = None


@dataclass
class OperatingSystem:
    system: str
    release: str
    pretty_name: str
    machine: str
    is_wsl: bool
    rosetta: bool = False  # an x86_64 Python translated by Rosetta 2 on Apple silicon
    apple_silicon: bool = False
    glibc: str = ""  # the C library's version on Linux ("2.36" on Debian 12); "" elsewhere

    @property
    def platform(self) -> str:
        """The playbook's name for it, as a unit's ``platforms`` list it: linux, wsl, windows or macos."""
        system = self.system.lower()
        if system == "windows":
            return "windows"
        if system == "darwin":
            return "macos"
        return "wsl" if self.is_wsl else "linux"


@dataclass
class Cpu:
    model: str
    logical_cores: int
    flags: list[str] = field(default_factory=list)


@dataclass
class Memory:
    total_mib: int | None
    available_mib: int | None


@dataclass
class PythonInfo:
    version: str
    implementation: str
    bits: int
    executable: str
    pip_version: str
    platform_tag: str


@dataclass
class CudaToolkit:
    root: str
    found_by: str
    nvcc: str
    version: str
    cccl_headers: dict[str, bool] = field(default_factory=dict)
    has_cublas: bool = False
    # The architectures its nvcc compiles for ("75", "90"), from nvcc --list-gpu-arch; empty when not asked.
    gpu_architectures: list[str] = field(default_factory=list)

    @property
    def has_cccl(self) -> bool:
        return bool(self.cccl_headers) and all(self.cccl_headers.values())


@dataclass
class Gpu:
    index: int
    name: str
    memory_total_mib: int
    compute_capability: str  # "9.0"
    memory_bus_width_bits: int | None = None
    memory_clock_max_mhz: int | None = None

    @property
    def arch(self) -> str:
        """CMake's architecture number: "9.0" -> "90"."""
        return self.compute_capability.replace(".", "")


@dataclass
class NvidiaDriver:
    found: bool
    version: str = ""
    cuda_version: str = ""  # the newest CUDA runtime the driver supports, e.g. "13.0"
    source: str = ""  # "nvml" or "nvidia-smi"
    error: str = ""


@dataclass
class InstalledLlamaCpp:
    found: bool
    version: str = ""
    location: str = ""
    supports_gpu_offload: bool | None = None
    error: str = ""


@dataclass
class VisualStudio:
    """One Visual Studio installation as vswhere lists it, with what its folders hold."""

    name: str
    version: str  # installationVersion, e.g. "17.10.35004.147"
    path: str
    msvc_toolsets: list[str] = field(default_factory=list)  # VC/Tools/MSVC folders, e.g. "14.40.33807"
    vcvarsall: str = ""
    dev_shell: str = ""  # Common7/Tools/Launch-VsDevShell.ps1
    cuda_integration: list[str] = field(default_factory=list)  # CUDA versions with MSBuild .props installed

    @property
    def newest_msvc(self) -> str:
        """cl version of the newest toolset: MSVC 14.40.x ships cl 19.40."""
        newest = max(self.msvc_toolsets, key=lambda v: tuple(int(p) for p in re.findall(r"\d+", v)), default="")
        return msvc_from_toolset(newest)


# ---------------------------------------------------------------- Vulkan, ROCm/HIP, macOS (Metal)

VULKAN_DEVICE_TYPES = {
    "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU": "discrete",
    "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU": "integrated",
    "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU": "virtual",
    "PHYSICAL_DEVICE_TYPE_CPU": "cpu",
    "PHYSICAL_DEVICE_TYPE_OTHER": "other",
}


@dataclass
class VulkanDevice:
    """One physical device as the Vulkan loader reports it (``vulkaninfo --summary``)."""

    index: int
    name: str
    device_type: str  # discrete, integrated, virtual, cpu, other
    driver_name: str = ""
    driver_info: str = ""
    api_version: str = ""
    vendor_id: str = ""


@dataclass
class VulkanHeaders:
    include_dir: str  # the folder holding vulkan/vulkan_core.h
    version: str  # "1.4.309": VK_HEADER_VERSION_COMPLETE's 1.x and VK_HEADER_VERSION
    found_by: str  # "vulkan.include_dir", "VULKAN_SDK", "system"

    @property
    def patch(self) -> int:
        return int(self.version.rsplit(".", 1)[-1]) if self.version else 0


@dataclass
class Vulkan:
    loader: list[str] = field(default_factory=list)  # libvulkan.so.1 / vulkan-1.dll / libvulkan.1.dylib found
    vulkaninfo: Tool = field(default_factory=lambda: Tool("vulkaninfo", found=False))
    instance_version: str = ""  # the loader's own version ("Vulkan Instance Version")
    devices: list[VulkanDevice] = field(default_factory=list)
    glslc: Tool = field(default_factory=lambda: Tool("glslc", found=False))
    headers: list[VulkanHeaders] = field(default_factory=list)  # every vulkan_core.h found, chosen one first
    spirv_headers: str = ""  # SPIRV-HeadersConfig.cmake, which llama.cpp's find_package needs
    error: str = ""  # why the device list is empty, when the loader said so
    source: str = ""  # "vulkaninfo --summary" or "Vulkan API" (the loader asked directly, without vulkan-tools)

    @property
    def gpus(self) -> list[VulkanDevice]:
        return [d for d in self.devices if d.device_type in ("discrete", "integrated", "virtual")]


@dataclass
class HipGpu:
    name: str  # marketing name, e.g. "Radeon RX 7900 XTX"
    gfx: str  # "gfx1100"


@dataclass
class Rocm:
    found: bool = False
    root: str = ""
    version: str = ""  # "6.2.4" from hipconfig --version or .info/version
    hipconfig: Tool = field(default_factory=lambda: Tool("hipconfig", found=False))
    rocminfo: Tool = field(default_factory=lambda: Tool("rocminfo", found=False))
    hip_clang: str = ""  # ROCm's clang (llvm/bin/clang; Debian's: lib/llvm-17/bin/clang), the HIP compiler
    gpus: list[HipGpu] = field(default_factory=list)
    has_hipblas: bool = False
    has_rocblas: bool = False
    layout: str = ""  # "rocm": AMD's (lib/, llvm/); "debian": Debian's packages (lib/x86_64-linux-gnu/, lib/llvm-N/)
    lib_dir: str = ""  # the folder holding libamdhip64.so
    glibc_needed: str = ""  # the newest GLIBC_x.y that libamdhip64.so asks for ("2.38" in Debian 13's)
    found_by: str = ""  # "hip.rocm_path", "ROCM_PATH", "HIP_PATH", "/opt/rocm*", "/usr"

    @property
    def gfx_targets(self) -> list[str]:
        return list(dict.fromkeys(g.gfx for g in self.gpus))


@dataclass
class SyclDevice:
    """One device as ``sycl-ls`` lists it."""

    backend: str  # "level_zero:gpu", "opencl:cpu": the SYCL backend and the device type
    name: str  # "Intel(R) Arc(TM) A770 Graphics"

    @property
    def is_gpu(self) -> bool:
        return self.backend.endswith(":gpu")


@dataclass
class Sycl:
    """Intel oneAPI, for llama.cpp's SYCL backend: its compilers, its environment script, its devices."""

    root: str = ""  # the oneAPI folder: ONEAPI_ROOT, /opt/intel/oneapi, C:\Program Files (x86)\Intel\oneAPI
    setvars: str = ""  # setvars.sh (setvars.bat on Windows), which puts the compilers and libraries on the paths
    environment_set: bool = False  # setvars has run in the shell detect ran in (SETVARS_COMPLETED, icpx on PATH)
    icpx: Tool = field(default_factory=lambda: Tool("icpx", found=False))  # the SYCL C++ compiler (Linux)
    icx: Tool = field(default_factory=lambda: Tool("icx", found=False))  # C, and C++ on Windows
    sycl_ls: Tool = field(default_factory=lambda: Tool("sycl-ls", found=False))
    devices: list[SyclDevice] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.root or self.icpx.found or self.icx.found)

    @property
    def gpus(self) -> list[SyclDevice]:
        return [d for d in self.devices if d.is_gpu]


@dataclass
class OpenBlas:
    """OpenBLAS, for llama.cpp's BLAS backend (``-DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS``)."""

    library: str = ""  # the library to link (libopenblas.so, libopenblas.dylib, openblas.lib); "" when absent
    cblas_header: str = ""  # the cblas.h ggml-blas includes
    pkg_config: Tool = field(default_factory=lambda: Tool("pkg-config", found=False))  # ggml-blas's CMake requires it
    pkg_config_module: str = ""  # "openblas64" or "openblas" when pkg-config knows OpenBLAS

    @property
    def found(self) -> bool:
        return bool(self.library and self.cblas_header)


@dataclass
class Mkl:
    """Intel oneMKL, for llama.cpp's BLAS backend (``-DGGML_BLAS_VENDOR=Intel10_64lp``): one root holding lib/ and
    include/ (an installed oneAPI MKL, a conda prefix, or the one the playbook assembled from PyPI's wheels)."""

    root: str = ""  # "" when no MKL was found
    origin: str = ""  # where the root was named: mkl.root, MKLROOT, or assembled (the playbook's cache)
    version: str = ""  # from mkl_version.h ("2026.2.0")
    libraries: list[str] = field(default_factory=list)  # the link names FindBLAS asks for that the root holds
    missing: list[str] = field(default_factory=list)  # those it lacks ("libiomp5.so")
    header: str = ""  # the root's mkl.h, which ggml-blas includes

    @property
    def found(self) -> bool:
        return bool(self.root and self.header and not self.missing)


@dataclass
class Apple:
    chip: str = ""  # "Apple M3 Pro" (sysctl machdep.cpu.brand_string)
    metal_compiler: str = ""  # xcrun -f metal; empty when the toolchain lacks it
    metal_error: str = ""  # what xcrun said instead
    command_line_tools: str = ""  # xcode-select -p
    macos_version: str = ""


@dataclass
class Facts:
    os: OperatingSystem
    cpu: Cpu
    memory: Memory
    python: PythonInfo
    compilers: list[Tool]
    cmake: Tool
    ninja: Tool
    ccache: Tool
    cuda_toolkits: list[CudaToolkit]
    driver: NvidiaDriver
    gpus: list[Gpu]
    llama_cpp: InstalledLlamaCpp
    environment: dict[str, str]
    vswhere: Tool = field(default_factory=lambda: Tool("vswhere", found=False))
    visual_studio: list[VisualStudio] = field(default_factory=list)
    wsl_driver_libs: list[str] = field(default_factory=list)  # libcuda* in /usr/lib/wsl/lib
    libcuda_paths: list[str] = field(default_factory=list)  # where the loader finds libcuda.so.1, first first
    stub_on_ld_library_path: list[str] = field(default_factory=list)
    temp_dir: str = ""
    vulkan: Vulkan = field(default_factory=Vulkan)
    rocm: Rocm = field(default_factory=Rocm)
    apple: Apple = field(default_factory=Apple)
    sycl: Sycl = field(default_factory=Sycl)
    openblas: OpenBlas = field(default_factory=OpenBlas)
    mkl: Mkl = field(default_factory=Mkl)
    # Every device a backend's probe found, in the backends' order: the generic list messages read.
    devices: list[Device] = field(default_factory=list)

    @property
    def newest_visual_studio(self) -> VisualStudio | None:
        return max(self.visual_studio, key=lambda vs: tuple(int(p) for p in re.findall(r"\d+", vs.version)),
                   default=None)

    @property
    def best_gpu(self) -> Gpu | None:
        return max(self.gpus, key=lambda gpu: float(gpu.compute_capability or 0), default=None)
