"""Machines we cannot run, built from a spec in tests/data/machines/<name>.yaml.

A spec names the recorded tool outputs under tests/data/detect/ (nvcc, gcc and cl banners, vswhere JSON,
nvidia-smi output, ldconfig -p) and the few facts no tool prints; the real parsers turn them into Facts.
A <name>.json is a whole detect.json recorded on a real machine and is read as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from playbook.backends.cuda_probe import parse_nvcc_version, parse_nvidia_smi_csv
from playbook.backends.hip import parse_hipconfig_version, parse_rocminfo
from playbook.backends.sycl import parse_sycl_ls
from playbook.backends.vulkan import parse_vulkaninfo_summary
from playbook.facts import (
    Apple,
    Cpu,
    CudaToolkit,
    Facts,
    Gpu,
    InstalledLlamaCpp,
    Memory,
    NvidiaDriver,
    OpenBlas,
    OperatingSystem,
    PythonInfo,
    Rocm,
    Sycl,
    Tool,
    VisualStudio,
    Vulkan,
    VulkanHeaders,
)
from playbook.knowledge.compatibility import gpu_model
from playbook.serialization import from_dict
from playbook.steps.detect import parse_compiler_version, parse_first_version, parse_ldconfig, parse_vswhere_json

DATA = Path(__file__).parent / "data"
MACHINES = DATA / "machines"
DETECT = DATA / "detect"


def machine(name: str) -> Facts:
    recorded = MACHINES / f"{name}.json"
    if recorded.is_file():
        return from_dict(Facts, json.loads(recorded.read_text()))
    return facts_from_spec(yaml.safe_load((MACHINES / f"{name}.yaml").read_text()))


def facts_from_spec(spec: dict[str, Any]) -> Facts:
    os_spec = spec["os"]
    driver, gpus = _gpus(spec)
    facts = Facts(
        os=OperatingSystem(os_spec["system"], str(os_spec.get("release", "")), os_spec["pretty_name"],
                           os_spec["machine"], os_spec.get("is_wsl", False), os_spec.get("rosetta", False),
                           os_spec.get("apple_silicon", False)),
        cpu=Cpu(spec.get("cpu", "x86_64"), spec.get("cores", 8)),
        memory=Memory(spec.get("memory_mib", 32768), spec.get("available_mib", 24576)),
        python=PythonInfo("3.12.4", "CPython", 64, spec.get("python", "python"), "24.0", spec.get("platform_tag", "")),
        compilers=[_compiler(c) for c in spec.get("compilers", [])],
        cmake=Tool("cmake", True, "cmake", "3.31.0"),
        ninja=Tool("ninja", True, "ninja", "1.11.1") if spec.get("ninja", True) else Tool("ninja", False),
        ccache=Tool("ccache", False),
        cuda_toolkits=[_toolkit(t) for t in spec.get("toolkits", [])],
        driver=driver,
        gpus=gpus,
        llama_cpp=InstalledLlamaCpp(False),
        environment=dict(spec.get("environment", {})),
        temp_dir=spec.get("temp_dir", ""),
        wsl_driver_libs=list(spec.get("wsl_driver_libs", [])),
        stub_on_ld_library_path=list(spec.get("stub_on_ld_library_path", [])),
    )
    if "ldconfig" in spec:
        facts.libcuda_paths = parse_ldconfig((DETECT / spec["ldconfig"]).read_text(), "libcuda.so.1")
    if "vswhere" in spec:
        facts.vswhere = Tool("vswhere", True, r"C:\Program Files (x86)\Microsoft Visual Studio\Installer\vswhere.exe")
        facts.visual_studio = parse_vswhere_json((DETECT / spec["vswhere"]).read_text())
        for studio in facts.visual_studio:
            _describe(studio, spec.get("visual_studio", {}).get(studio.path, {}))
    if "vulkan" in spec:
        facts.vulkan = _vulkan(spec["vulkan"])
    if "rocm" in spec:
        facts.rocm = _rocm(spec["rocm"])
    if "apple" in spec:
        facts.apple = Apple(**spec["apple"])
    if "sycl" in spec:
        facts.sycl = _sycl(spec["sycl"])
    if "openblas" in spec:
        blas = spec["openblas"]
        facts.openblas = OpenBlas(blas.get("library", ""), blas.get("cblas_header", ""),
                                  Tool("pkg-config", blas.get("pkg_config", True), "/usr/bin/pkg-config", "1.8.1"),
                                  blas.get("pkg_config_module", ""))
    return facts


def _sycl(spec: dict[str, Any]) -> Sycl:
    """What detect_sycl reads: the setvars script it finds, icpx --version and sycl-ls as recorded."""
    root = spec.get("root", "")
    sycl = Sycl(root, f"{root}/setvars.sh" if root else "", spec.get("environment_set", True))
    for name in ("icpx", "icx"):
        if name in spec:
            banner = (DETECT / spec[name]).read_text()
            setattr(sycl, name, Tool(name, True, f"{root}/compiler/latest/bin/{name}", parse_first_version(banner),
                                     banner.splitlines()[0]))
    if "sycl_ls" in spec:
        sycl.sycl_ls = Tool("sycl-ls", True, f"{root}/compiler/latest/bin/sycl-ls")
        sycl.devices = parse_sycl_ls((DETECT / spec["sycl_ls"]).read_text())
    return sycl


def _vulkan(spec: dict[str, Any]) -> Vulkan:
    """What detect_vulkan reads: vulkaninfo --summary and glslc --version as recorded, the files it looks for."""
    vulkan = Vulkan(loader=list(spec.get("loader", [])), spirv_headers=spec.get("spirv_headers", ""))
    if "vulkaninfo" in spec:
        vulkan.instance_version, vulkan.devices = parse_vulkaninfo_summary((DETECT / spec["vulkaninfo"]).read_text())
        vulkan.vulkaninfo = Tool("vulkaninfo", True, "/usr/bin/vulkaninfo", vulkan.instance_version)
    if "glslc" in spec:
        banner = (DETECT / spec["glslc"]).read_text()
        vulkan.glslc = Tool("glslc", True, "/usr/bin/glslc", parse_first_version(banner), banner.splitlines()[0])
    vulkan.headers = [VulkanHeaders(h["include_dir"], str(h["version"]), h.get("found_by", "system"))
                      for h in spec.get("headers", [])]
    return vulkan


def _rocm(spec: dict[str, Any]) -> Rocm:
    root = spec["root"]
    return Rocm(True, root, parse_hipconfig_version((DETECT / spec["hipconfig"]).read_text()),
                Tool("hipconfig", True, f"{root}/bin/hipconfig"), Tool("rocminfo", True, f"{root}/bin/rocminfo"),
                f"{root}/llvm/bin/clang" if spec.get("hip_clang", True) else "",
                parse_rocminfo((DETECT / spec["rocminfo"]).read_text()),
                spec.get("hipblas", True), spec.get("rocblas", True))


def _gpus(spec: dict[str, Any]) -> tuple[NvidiaDriver, list[Gpu]]:
    if "nvidia_smi_csv" in spec:
        driver, gpus = parse_nvidia_smi_csv((DETECT / spec["nvidia_smi_csv"]).read_text())
    else:
        gpus = []
        for index, gpu in enumerate(spec.get("gpus", [])):
            model = gpu_model(gpu["name"])
            gpus.append(Gpu(index, gpu["name"], gpu["memory_mib"], model.compute if model else ""))
        driver = NvidiaDriver(bool(gpus), source="nvml")
    if "driver" in spec:
        driver.version = str(spec["driver"].get("version", driver.version))
        driver.cuda_version = str(spec["driver"].get("cuda_version", driver.cuda_version))
    return driver, gpus


def _compiler(spec: dict[str, Any]) -> Tool:
    banner = (DETECT / spec["banner"]).read_text()
    return Tool(spec["name"], True, spec.get("path", spec["name"]), parse_compiler_version(banner), banner.splitlines()[0])


def _toolkit(spec: dict[str, Any]) -> CudaToolkit:
    windows = "\\" in spec["root"]
    nvcc = spec["root"] + ("\\bin\\nvcc.exe" if windows else "/bin/nvcc")
    cccl = spec.get("cccl", True)
    return CudaToolkit(spec["root"], spec.get("found_by", "standard location"), nvcc,
                       parse_nvcc_version((DETECT / spec["nvcc_banner"]).read_text()),
                       {"nv/target": cccl, "cub/cub.cuh": cccl, "thrust": cccl}, spec.get("cublas", True))


def _describe(studio: VisualStudio, folders: dict[str, Any]) -> None:
    """What the probe would read from the installation's folders, as the spec records it."""
    studio.msvc_toolsets = list(folders.get("msvc_toolsets", []))
    studio.vcvarsall = studio.path + r"\VC\Auxiliary\Build\vcvarsall.bat" if studio.msvc_toolsets else ""
    studio.dev_shell = studio.path + r"\Common7\Tools\Launch-VsDevShell.ps1" if studio.msvc_toolsets else ""
    studio.cuda_integration = list(folders.get("cuda_integration", []))
