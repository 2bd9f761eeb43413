"""CUDA's probe, beside its unit (:meth:`playbook.backends.cuda.CudaBackend.probe` is the entry): the toolkits
(nvcc, CCCL headers, cuBLAS), the NVIDIA driver and GPUs (NVML, else nvidia-smi), where the loader finds
libcuda.so.1, CUDA's stub folders on LD_LIBRARY_PATH and WSL's driver libraries; and the pure parsers of those
tools' output, tested against recorded banners."""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from playbook.facts import CCCL_HEADERS, CudaToolkit, Gpu, NvidiaDriver
from playbook.probing import CommandRunner, ProbeContext, parse_ldconfig
from playbook.toolkits.pypi import MARKER as PYPI_TOOLKIT_MARKER
from playbook.toolkits.pypi import toolkits_dir

WSL_DRIVER_LIBS = Path("/usr/lib/wsl/lib")


def probe(context: ProbeContext) -> dict[str, Any]:
    """The Facts fields CUDA owns."""
    environ = context.environ
    toolkit_dirs = [toolkits_dir(context.cache_dir)] if context.cache_dir is not None else []
    driver, gpus = detect_gpus(context.runner)
    return {
        "cuda_toolkits": detect_cuda_toolkits(environ, context.search_path, context.runner, toolkit_dirs),
        "driver": driver,
        "gpus": gpus,
        "wsl_driver_libs": sorted(str(p) for p in WSL_DRIVER_LIBS.glob("libcuda*")),
        "libcuda_paths": detect_libcuda_paths(context.runner),
        "stub_on_ld_library_path": stub_dirs(environ.get("LD_LIBRARY_PATH", ""), os.pathsep),
    }


# ---------------------------------------------------------------- parsers (pure)


def parse_nvcc_version(banner: str) -> str:
    """``Cuda compilation tools, release 12.4, V12.4.131`` -> ``12.4.131``."""
    match = re.search(r"release\s+[\d.]+,\s*V(\d+\.\d+(?:\.\d+)?)", banner) or re.search(
        r"release\s+(\d+\.\d+)", banner
    )
    return match.group(1) if match else ""


def parse_nvcc_gpu_list(text: str) -> list[str]:
    """``nvcc --list-gpu-arch`` prints ``compute_75`` ... one a line: the numbers, in its order."""
    return list(dict.fromkeys(re.findall(r"^(?:compute|sm)_(\d+)[af]?\s*$", text, re.MULTILINE)))


def parse_nvidia_smi_csv(text: str) -> tuple[NvidiaDriver, list[Gpu]]:
    """Output of ``nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version
    --format=csv,noheader,nounits``."""
    gpus: list[Gpu] = []
    driver_version = ""
    for line in text.strip().splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        index, name, memory, capability, driver_version = cells[:5]
        gpus.append(Gpu(int(index), name, int(float(memory)), capability))
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    driver = NvidiaDriver(bool(gpus), driver_version, cuda.group(1) if cuda else "", "nvidia-smi")
    return driver, gpus


def parse_nvidia_smi_xml(text: str) -> tuple[NvidiaDriver, list[Gpu]]:
    """Output of ``nvidia-smi -q -x``. It names no compute capability: that comes from the GPU table."""
    from xml.etree import ElementTree

    from playbook.knowledge.compatibility import gpu_model

    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as err:
        return NvidiaDriver(False, source="nvidia-smi", error=f"unreadable nvidia-smi -q -x output: {err}"), []
    gpus = []
    for index, node in enumerate(root.findall("gpu")):
        name = node.findtext("product_name", "").strip()
        memory = re.match(r"\d+", node.findtext("fb_memory_usage/total", "0").strip())
        model = gpu_model(name)
        gpus.append(Gpu(index, name, int(memory.group(0)) if memory else 0, model.compute if model else ""))
    driver = NvidiaDriver(bool(gpus), root.findtext("driver_version", "").strip(),
                          root.findtext("cuda_version", "").strip(), "nvidia-smi")
    return driver, gpus


def stub_dirs(library_path: str, separator: str = ":") -> list[str]:
    """Entries of LD_LIBRARY_PATH that are CUDA's stub folders: their libcuda.so only links, never runs."""
    return [entry for entry in library_path.split(separator) if entry and "stubs" in Path(entry).parts]


# ---------------------------------------------------------------- probes


def toolkit_candidates(environ: Mapping[str, str], search_path: str,
                       toolkit_dirs: Sequence[Path] = ()) -> list[tuple[Path, str]]:
    """(root, how it was found) for every place a CUDA toolkit may live, first found first."""
    candidates: list[tuple[Path, str]] = []
    if nvcc := shutil.which("nvcc", path=search_path):
        candidates.append((Path(nvcc).resolve().parent.parent, "PATH"))
    if environ.get("CUDACXX"):
        candidates.append((Path(environ["CUDACXX"]).parent.parent, "CUDACXX"))
    for var in sorted(environ):
        if var in ("CUDA_PATH", "CUDA_HOME", "CUDA_ROOT", "CUDAToolkit_ROOT") or var.startswith("CUDA_PATH_V"):
            candidates.append((Path(environ[var]), var))
    if Path("/usr/bin/nvcc").is_file():
        candidates.append((Path("/usr"), "distribution package"))
    for pattern in ("/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda", "/usr/lib/cuda"):
        candidates += [(Path(p), "standard location") for p in sorted(glob.glob(pattern))]
    if environ.get("CONDA_PREFIX"):
        candidates.append((Path(environ["CONDA_PREFIX"]), "conda"))
    for site in _site_packages():
        for sub in ("nvidia/cuda_nvcc", "nvidia/cu13", "nvidia/cu12"):
            candidates.append((site / sub, "pip nvidia-cuda-nvcc"))
    for folder in toolkit_dirs:
        for root in sorted(Path(folder).glob("cuda-*")):
            if (root / PYPI_TOOLKIT_MARKER).is_file():
                candidates.append((root, "playbook cache (CUDA from PyPI wheels)"))
    return candidates


def detect_cuda_toolkits(environ: Mapping[str, str], search_path: str, runner: CommandRunner,
                         toolkit_dirs: Sequence[Path] = ()) -> list[CudaToolkit]:
    toolkits: dict[Path, CudaToolkit] = {}
    for root, found_by in toolkit_candidates(environ, search_path, toolkit_dirs):
        nvcc = root / "bin" / ("nvcc.exe" if platform.system() == "Windows" else "nvcc")
        if not nvcc.is_file() or not is_toolkit_root(root):
            continue
        real_root = root.resolve()
        if real_root in toolkits:
            continue
        out = runner([str(nvcc), "--version"], 30)
        architectures = runner([str(nvcc), "--list-gpu-arch"], 30)  # CUDA 11.0 and newer
        toolkits[real_root] = CudaToolkit(
            root=str(root),
            found_by=found_by,
            nvcc=str(nvcc),
            version=parse_nvcc_version(out.stdout),
            cccl_headers=cccl_headers_present(root),
            has_cublas=has_cublas(root),
            gpu_architectures=parse_nvcc_gpu_list(architectures.stdout) if architectures.returncode == 0 else [],
        )
    return list(toolkits.values())


def is_toolkit_root(root: Path) -> bool:
    """A wrapper script such as ``/usr/local/bin/nvcc`` sits beside no headers: not a toolkit root."""
    return (root / "include" / "cuda_runtime.h").is_file() or bool(
        glob.glob(str(root / "targets" / "*" / "include" / "cuda_runtime.h"))
    )


def cccl_headers_present(root: Path) -> dict[str, bool]:
    include_dirs = [root / "include", root / "include" / "cccl"]
    include_dirs += [Path(p) for p in glob.glob(str(root / "targets" / "*" / "include"))]
    include_dirs += [d / "cccl" for d in include_dirs[2:]]
    return {
        name: any((d / relative).exists() for d in include_dirs) for name, relative in CCCL_HEADERS.items()
    }


def has_cublas(root: Path) -> bool:
    patterns = ["lib64/libcublas.so*", "lib/libcublas.so*", "lib/x64/cublas.lib", "targets/*/lib/libcublas.so*"]
    patterns += ["lib/libcublas*.dylib", "bin/cublas64_*.dll"]
    return any(glob.glob(str(root / pattern)) for pattern in patterns)


def detect_gpus(runner: CommandRunner) -> tuple[NvidiaDriver, list[Gpu]]:
    try:
        return _gpus_from_nvml()
    except Exception as nvml_error:  # noqa: BLE001  (pynvml raises its own NVMLError subclasses or ImportError)
        smi = shutil.which("nvidia-smi")
        if not smi:
            return NvidiaDriver(False, error=f"NVML: {nvml_error}; nvidia-smi not found"), []
        query = "--query-gpu=index,name,memory.total,compute_cap,driver_version"
        out = runner([smi, query, "--format=csv,noheader,nounits"], 30)
        if out.returncode != 0:
            return NvidiaDriver(False, error=out.stdout.strip()[:500], source="nvidia-smi"), []
        driver, gpus = parse_nvidia_smi_csv(out.stdout)
        header = runner([smi], 30)
        if cuda := re.search(r"CUDA Version:\s*([\d.]+)", header.stdout):
            driver.cuda_version = cuda.group(1)
        return driver, gpus


def _gpus_from_nvml() -> tuple[NvidiaDriver, list[Gpu]]:
    import pynvml

    return gpus_from_nvml(pynvml)


def gpus_from_nvml(pynvml: Any) -> tuple[NvidiaDriver, list[Gpu]]:
    """The driver and GPUs as NVML answers them; ``pynvml`` is the module (a recorded fake in tests)."""
    pynvml.nvmlInit()
    try:
        driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                Gpu(
                    index=index,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_total_mib=pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
                    compute_capability=f"{major}.{minor}",
                    memory_bus_width_bits=_optional(pynvml.nvmlDeviceGetMemoryBusWidth, handle),
                    memory_clock_max_mhz=_optional(
                        pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM
                    ),
                )
            )
        driver = NvidiaDriver(True, driver_version, f"{cuda // 1000}.{cuda % 1000 // 10}", "nvml")
        return driver, gpus
    finally:
        pynvml.nvmlShutdown()


def detect_libcuda_paths(runner: CommandRunner) -> list[str]:
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").is_file() else "")
    if not ldconfig or platform.system() != "Linux":
        return []
    out = runner([ldconfig, "-p"], 20)
    return parse_ldconfig(out.stdout, "libcuda.so.1") if out.returncode == 0 else []


def _site_packages() -> list[Path]:
    import site

    return [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _optional(function: Callable[..., int], *args: object) -> int | None:
    try:
        return int(function(*args))
    except Exception:  # noqa: BLE001  (NVML's answer to a query a GPU does not support)
        return None
