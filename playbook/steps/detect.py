"""Detect: what this machine has for building and running llama-cpp-python.

Every probe records what it found; a missing tool is a fact (``found=False``), never an
exception. Parsers are pure functions over the tools' real output so they can be tested
against recorded banners.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playbook.runfolder.redact import redact_env

if TYPE_CHECKING:
    from playbook.runfolder.folder import RunFolder

BUILD_ENV_NAMES = re.compile(
    r"^(CMAKE_.*|FORCE_CMAKE|CUDACXX|CUDAHOSTCXX|CUDA_.*|CUDNN_.*|NVCC_.*|GGML_.*|LLAMA_.*|CC|CXX|CPP|LD|AR"
    r"|CFLAGS|CXXFLAGS|CPPFLAGS|LDFLAGS|PATH|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|C_INCLUDE_PATH"
    r"|CPLUS_INCLUDE_PATH|PKG_CONFIG_PATH|VIRTUAL_ENV|CONDA_PREFIX|PIP_.*|SKBUILD_.*|SCB_.*|TMP|TEMP|TMPDIR"
    r"|VSINSTALLDIR|VCToolsVersion|VCINSTALLDIR|INCLUDE|LIB|DYLD_LIBRARY_PATH|MACOSX_DEPLOYMENT_TARGET"
    r"|CCACHE_.*|NINJA_.*|MAKEFLAGS|OMP_.*|NVIDIA_.*|HF_.*|.*TOKEN.*|.*SECRET.*|.*PASSWORD.*|.*_KEY)$",
    re.IGNORECASE,
)
PYPI_TOOLKIT_MARKER = "playbook-toolkit.json"  # playbook.toolkits.pypi.MARKER: an assembled root is complete
CCCL_HEADERS = {"nv/target": "nv/target", "cub/cub.cuh": "cub/cub.cuh", "thrust": "thrust/version.h"}


@dataclass
class CommandOutput:
    returncode: int | None  # None: the program could not be started
    stdout: str


CommandRunner = Callable[[list[str], float], CommandOutput]


def run_command(args: list[str], timeout: float = 20.0) -> CommandOutput:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as err:
        return CommandOutput(None, str(err))
    return CommandOutput(proc.returncode, proc.stdout + proc.stderr)


@dataclass
class Tool:
    name: str
    found: bool
    path: str = ""
    version: str = ""
    banner: str = ""


@dataclass
class OperatingSystem:
    system: str
    release: str
    pretty_name: str
    machine: str
    is_wsl: bool
    rosetta: bool = False  # an x86_64 Python translated by Rosetta 2 on Apple silicon
    apple_silicon: bool = False


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

    @property
    def best_gpu(self) -> Gpu | None:
        return max(self.gpus, key=lambda gpu: float(gpu.compute_capability or 0), default=None)


# ---------------------------------------------------------------- parsers (pure)


def parse_nvcc_version(banner: str) -> str:
    """``Cuda compilation tools, release 12.4, V12.4.131`` -> ``12.4.131``."""
    match = re.search(r"release\s+[\d.]+,\s*V(\d+\.\d+(?:\.\d+)?)", banner) or re.search(
        r"release\s+(\d+\.\d+)", banner
    )
    return match.group(1) if match else ""


def parse_first_version(banner: str) -> str:
    match = re.search(r"(\d+\.\d+(?:\.\d+)*)", banner)
    return match.group(1) if match else ""


def parse_compiler_version(banner: str) -> str:
    """gcc/clang/cl banners: the compiler's own version, not the distro's."""
    for pattern in (
        r"\(GCC\)\s+(\d+\.\d+\.\d+)",
        r"^\S*(?:gcc|g\+\+|cc|c\+\+)(?:-\d+)?\s+\([^)]*\)\s+(\d+\.\d+(?:\.\d+)?)",
        r"clang version\s+(\d+\.\d+(?:\.\d+)?)",
        r"Compiler Version\s+(\d+\.\d+\.\d+(?:\.\d+)?)",
    ):
        match = re.search(pattern, banner, re.MULTILINE)
        if match:
            return match.group(1)
    return parse_first_version(banner.splitlines()[0] if banner else "")


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
    import xml.etree.ElementTree as ElementTree

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


def parse_vswhere_json(text: str) -> list[VisualStudio]:
    """Output of ``vswhere -all -products * -format json``; folders are looked into by the probe."""
    try:
        entries = json.loads(text or "[]")
    except ValueError:
        return []
    return [
        VisualStudio(str(e.get("displayName", "")), str(e.get("installationVersion", "")), str(e.get("installationPath", "")))
        for e in entries
        if isinstance(e, dict)
    ]


def msvc_from_toolset(toolset: str) -> str:
    """MSVC toolset folder "14.40.33807" -> cl version "19.40" (Microsoft numbers both in step)."""
    parts = re.findall(r"\d+", toolset)
    return f"19.{parts[1]}" if len(parts) >= 2 and parts[0] == "14" else ""


def parse_ldconfig(text: str, library: str) -> list[str]:
    """Paths ``ldconfig -p`` lists for ``library`` (e.g. "libcuda.so.1"), in the loader's order."""
    pattern = re.compile(rf"^\s*{re.escape(library)}\s+\(.*\)\s+=>\s+(\S+)", re.MULTILINE)
    return pattern.findall(text)


def stub_dirs(library_path: str, separator: str = ":") -> list[str]:
    """Entries of LD_LIBRARY_PATH that are CUDA's stub folders: their libcuda.so only links, never runs."""
    return [entry for entry in library_path.split(separator) if entry and "stubs" in Path(entry).parts]


def parse_meminfo(text: str) -> Memory:
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            values[name] = int(rest.split()[0]) // 1024
    return Memory(values.get("MemTotal"), values.get("MemAvailable"))


# ---------------------------------------------------------------- probes


def detect(
    environ: Mapping[str, str] | None = None,
    runner: CommandRunner = run_command,
    python: str = sys.executable,
    toolkit_dirs: Sequence[Path] = (),
) -> Facts:
    """What this machine has; ``toolkit_dirs`` are folders of toolkits the playbook assembled (its cache)."""
    environ = dict(os.environ if environ is None else environ)
    search_path = _search_path(environ, python)
    return Facts(
        os=detect_os(runner),
        cpu=detect_cpu(),
        memory=detect_memory(),
        python=detect_python(python, runner),
        compilers=detect_compilers(environ, search_path, runner),
        cmake=detect_tool("cmake", ["--version"], search_path, runner),
        ninja=detect_tool("ninja", ["--version"], search_path, runner),
        ccache=detect_tool("ccache", ["--version"], search_path, runner),
        cuda_toolkits=detect_cuda_toolkits(environ, search_path, runner, toolkit_dirs),
        driver=(gpu_facts := detect_gpus(runner))[0],
        gpus=gpu_facts[1],
        llama_cpp=detect_installed_llama_cpp(python, runner),
        environment=build_environment(environ),
        vswhere=(visual_studio := detect_visual_studio(environ, runner))[0],
        visual_studio=visual_studio[1],
        wsl_driver_libs=sorted(str(p) for p in Path("/usr/lib/wsl/lib").glob("libcuda*")),
        libcuda_paths=detect_libcuda_paths(runner),
        stub_on_ld_library_path=stub_dirs(environ.get("LD_LIBRARY_PATH", ""), os.pathsep),
        temp_dir=environ.get("TEMP", environ.get("TMP", environ.get("TMPDIR", ""))),
    )


def build_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that affect a build, secrets redacted."""
    return redact_env({k: v for k, v in environ.items() if BUILD_ENV_NAMES.match(k)})


def detect_os(runner: CommandRunner = run_command) -> OperatingSystem:
    pretty = platform.platform()
    os_release = Path("/etc/os-release")
    if os_release.is_file():
        match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', os_release.read_text(), re.MULTILINE)
        pretty = match.group(1) if match else pretty
    proc_version = Path("/proc/version")
    is_wsl = proc_version.is_file() and "microsoft" in proc_version.read_text().lower()
    rosetta, apple_silicon = detect_apple_silicon(runner) if platform.system() == "Darwin" else (False, False)
    return OperatingSystem(platform.system(), platform.release(), pretty, platform.machine(), is_wsl,
                           rosetta, apple_silicon)


def detect_apple_silicon(runner: CommandRunner) -> tuple[bool, bool]:
    """(this process runs under Rosetta, the Mac has Apple silicon), from sysctl."""
    translated = runner(["sysctl", "-n", "sysctl.proc_translated"], 10)
    arm64 = runner(["sysctl", "-n", "hw.optional.arm64"], 10)
    rosetta = translated.returncode == 0 and translated.stdout.strip() == "1"
    return rosetta, rosetta or (arm64.returncode == 0 and arm64.stdout.strip() == "1")


def detect_visual_studio(environ: Mapping[str, str], runner: CommandRunner) -> tuple[Tool, list[VisualStudio]]:
    """Visual Studio installations through vswhere; on Linux and macOS vswhere is simply not found."""
    installer = Path(environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")) / "Microsoft Visual Studio" / "Installer"
    vswhere = installer / "vswhere.exe"
    path = str(vswhere) if vswhere.is_file() else shutil.which("vswhere", path=environ.get("PATH", ""))
    if not path:
        return Tool("vswhere", found=False), []
    out = runner([path, "-all", "-products", "*", "-format", "json", "-utf8"], 30)
    installations = parse_vswhere_json(out.stdout) if out.returncode == 0 else []
    for vs in installations:
        describe_visual_studio(vs)
    return Tool("vswhere", out.returncode == 0, path), installations


def describe_visual_studio(vs: VisualStudio) -> None:
    root = Path(vs.path)
    vs.msvc_toolsets = sorted(p.name for p in (root / "VC" / "Tools" / "MSVC").glob("14.*") if p.is_dir())
    vcvarsall = root / "VC" / "Auxiliary" / "Build" / "vcvarsall.bat"
    vs.vcvarsall = str(vcvarsall) if vcvarsall.is_file() else ""
    dev_shell = root / "Common7" / "Tools" / "Launch-VsDevShell.ps1"
    vs.dev_shell = str(dev_shell) if dev_shell.is_file() else ""
    props = (root / "MSBuild" / "Microsoft" / "VC").glob("*/BuildCustomizations/CUDA *.props")
    vs.cuda_integration = sorted({p.stem.removeprefix("CUDA ") for p in props})


def detect_libcuda_paths(runner: CommandRunner) -> list[str]:
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").is_file() else "")
    if not ldconfig or platform.system() != "Linux":
        return []
    out = runner([ldconfig, "-p"], 20)
    return parse_ldconfig(out.stdout, "libcuda.so.1") if out.returncode == 0 else []


def detect_cpu() -> Cpu:
    model, flags = platform.processor() or platform.machine(), []
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        text = cpuinfo.read_text(errors="replace")
        if found := re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE):
            model = found.group(1).strip()
        if found := re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE):
            interesting = {"avx", "avx2", "avx512f", "avx512bw", "avx512_vnni", "fma", "f16c", "amx_tile"}
            flags = sorted(interesting & set(found.group(1).split()))
    return Cpu(model, os.cpu_count() or 1, flags)


def detect_memory() -> Memory:
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        return parse_meminfo(meminfo.read_text())
    try:
        import psutil  # optional, for Windows and macOS

        vm = psutil.virtual_memory()
        return Memory(vm.total // 2**20, vm.available // 2**20)
    except ImportError:
        return Memory(None, None)


def detect_python(python: str, runner: CommandRunner) -> PythonInfo:
    script = (
        "import json, platform, struct, sys, sysconfig; "
        "print(json.dumps([platform.python_version(), platform.python_implementation(), "
        "struct.calcsize('P') * 8, sys.executable, sysconfig.get_platform()]))"
    )
    probe = runner([python, "-c", script], 30)
    try:
        version, implementation, bits, executable, plat = json.loads(probe.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        version, implementation = platform.python_version(), platform.python_implementation()
        bits, executable, plat = struct.calcsize("P") * 8, python, ""
    pip = runner([python, "-m", "pip", "--version"], 30)
    pip_version = parse_first_version(pip.stdout) if pip.returncode == 0 else ""
    return PythonInfo(version, implementation, bits, executable, pip_version, plat)


def detect_tool(name: str, version_args: list[str], search_path: str, runner: CommandRunner) -> Tool:
    path = shutil.which(name, path=search_path)
    if not path:
        return Tool(name, found=False)
    out = runner([path, *version_args], 20)
    banner = out.stdout.strip()
    return Tool(name, out.returncode == 0, path, parse_first_version(banner), banner.splitlines()[0] if banner else "")


def detect_compilers(environ: Mapping[str, str], search_path: str, runner: CommandRunner) -> list[Tool]:
    names = [environ[var] for var in ("CC", "CXX", "CUDAHOSTCXX") if environ.get(var)]
    names += ["cl"] if platform.system() == "Windows" else ["cc", "c++", "gcc", "g++", "clang", "clang++"]
    names += versioned_gxx(search_path)
    tools = []
    for name in dict.fromkeys(names):
        path = shutil.which(name, path=search_path)
        if not path:
            tools.append(Tool(name, found=False))
            continue
        out = runner([path] if name == "cl" else [path, "--version"], 20)
        banner = out.stdout.strip()
        tools.append(Tool(name, True, path, parse_compiler_version(banner), banner.splitlines()[0] if banner else ""))
    return tools


def versioned_gxx(search_path: str) -> list[str]:
    """``g++-12``, ``g++-13``... on PATH: older host compilers nvcc may need as CUDAHOSTCXX."""
    found = set()
    for folder in filter(None, search_path.split(os.pathsep)):
        found.update(p.name for p in Path(folder).glob("g++-[0-9]*") if re.fullmatch(r"g\+\+-\d+", p.name))
    return sorted(found, key=lambda name: int(name.split("-")[1]))


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
        toolkits[real_root] = CudaToolkit(
            root=str(root),
            found_by=found_by,
            nvcc=str(nvcc),
            version=parse_nvcc_version(out.stdout),
            cccl_headers=cccl_headers_present(root),
            has_cublas=has_cublas(root),
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
    except Exception as nvml_error:  # pynvml raises its own NVMLError subclasses or ImportError
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


def detect_installed_llama_cpp(python: str, runner: CommandRunner) -> InstalledLlamaCpp:
    """Imported in a child process: a broken install must not take detection down."""
    script = (
        "import json, llama_cpp; print(json.dumps([llama_cpp.__version__, llama_cpp.__file__, "
        "bool(llama_cpp.llama_supports_gpu_offload())]))"
    )
    out = runner([python, "-c", script], 60)
    if out.returncode == 0:
        try:
            version, location, offload = json.loads(out.stdout.strip().splitlines()[-1])
            return InstalledLlamaCpp(True, version, location, offload)
        except (ValueError, IndexError):
            pass
    if "No module named 'llama_cpp'" in out.stdout:
        return InstalledLlamaCpp(False)
    return InstalledLlamaCpp(False, error=out.stdout.strip()[-1000:])


def _search_path(environ: Mapping[str, str], python: str) -> str:
    """PATH with the interpreter's own scripts folder first, where pip puts cmake and ninja."""
    scripts = str(Path(python).parent)
    return os.pathsep.join([scripts, environ.get("PATH", "")])


def _site_packages() -> list[Path]:
    import site

    return [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _optional(function: Callable[..., int], *args: object) -> int | None:
    try:
        return int(function(*args))
    except Exception:
        return None


def detect_step(run: RunFolder) -> Facts:
    """The detect notebook's work: what this machine has, written to detect.json."""
    from playbook.runfolder.folder import Outcome
    from playbook.runfolder.layout import Step

    from playbook.toolkits.pypi import toolkits_dir

    facts = detect(toolkit_dirs=[toolkits_dir(run.params().cache_dir)])
    run.write(facts, run.layout.detect_facts)
    gpus = ", ".join(g.name for g in facts.gpus) or "no NVIDIA GPU"
    run.finish_step(Step.DETECT, 1, Outcome.OK, f"{facts.os.pretty_name}; {gpus}")
    return facts
