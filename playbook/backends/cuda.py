"""CUDA: which toolkit, which architectures, and the conflicts of toolkit, driver and host compiler.

Reads the NVIDIA GPUs and driver, the CUDA toolkits, the compilers (nvcc's host compiler) and Visual Studio
from detect; its tables are ``knowledge/cuda.yaml`` and ``knowledge/cuda_wheels.yaml`` (the toolkits on PyPI).
"""

from __future__ import annotations

import glob
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any

from playbook.backends import cuda_wheel
from playbook.backends.base import GIB_MIB, Assessment, BackendUnit, WheelFit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.errors import ParameterError
from playbook.facts import CCCL_HEADERS, CudaToolkit, Device, Facts, Tool
from playbook.knowledge import compatibility
from playbook.knowledge.compatibility import minimum_driver, toolkit_supports_arch, version_tuple
from playbook.knowledge.failures import Remedy
from playbook.probing import ProbeContext
from playbook.toolkits import pypi
from playbook.toolkits.cxx_runtime import is_cxx_compiler

PORTABLE_DEFAULT_ARCH = "75"
# CMake's CMAKE_CUDA_ARCHITECTURES: a compute capability's number, with an optional feature suffix (90a, 100f)
# and -real or -virtual; or one of CMake's words. "native" is the playbook's (the detected GPU).
CUDA_ARCHITECTURE_ENTRY = re.compile(r"\d{2,3}[af]?(-real|-virtual)?")
CUDA_ARCHITECTURE_WORDS = ("native", "all", "all-major")


@dataclass(frozen=True)
class CudaSettings:
    """The ``cuda:`` parameter section."""

    architectures: str = "native"
    """"native": the detected GPU's compute capability; otherwise a CMake list such as "86;89;120"."""
    toolkit: str = "auto"
    """"auto" picks a toolkit from detection; "pypi:<release>" (e.g. pypi:13.0) assembles that release from NVIDIA's
    PyPI wheels in the playbook's cache; otherwise the toolkit's root folder."""


def wanted_architectures(planner: PlanDraft) -> list[str]:
    gpu = planner.facts.best_gpu
    wanted = planner.settings.architectures
    if wanted == "native":
        return [gpu.arch] if gpu else []
    return [a for a in wanted.split(";") if a and a != "native"]


def choose_toolkit_for(planner: PlanDraft) -> CudaToolkit | None:
    spec = planner.settings.toolkit
    if pypi.is_pypi_spec(spec):
        request = pypi.full_request(spec)
        planner.toolkit_request = request
        toolkit = planned_toolkit(request, planner.inputs.cache_dir)
        wheels = ", ".join(f"{w.package}=={w.version}" for w in pypi.release(request.release).wheels.values()
                           if w.component in request.components)
        planner.decide("CUDA toolkit", spec,
                       f"CUDA {request.release} assembled from NVIDIA's PyPI wheels ({wheels}; sha256-pinned) at "
                       f"{toolkit.root}; build downloads and assembles it unless that root already exists")
        return toolkit
    return choose_toolkit(planner.facts, spec, wanted_architectures(planner))


def planned_toolkit(request: pypi.ToolkitRequest, cache_dir: Path, base: CudaToolkit | None = None) -> CudaToolkit:
    """The toolkit ``request`` will be once build has assembled it: what configure checks against."""
    root = pypi.root_for(request, cache_dir)
    wheels = pypi.release(request.release).wheels
    added = set(request.components)
    version = base.version if base else wheels["nvcc"].version
    cccl = {name: True for name in CCCL_HEADERS} if "cccl" in added else dict(base.cccl_headers if base else {})
    return CudaToolkit(
        root=str(root),
        found_by=f"{request.spec} (PyPI wheels" + (f" added to {base.root})" if base else ")"),
        nvcc=str(pypi.nvcc_of(root)),
        version=version,
        cccl_headers=cccl,
        has_cublas="cublas" in added or bool(base and base.has_cublas),
    )


def pypi_release_for(facts: Facts, architectures: list[str], host_gcc_major: int | None = None) -> str:
    """The newest CUDA release on PyPI that compiles on its own for every architecture, accepts the host
    gcc and runs on the driver (when one is present); "" when none does."""
    driver_cuda = driver_cuda_version(facts)
    fitting = []
    for release in pypi.compiler_releases():
        if driver_cuda and version_tuple(release)[:2] > version_tuple(driver_cuda)[:2]:
            continue
        if not all(toolkit_supports_arch(release, a)[0] for a in architectures):
            continue
        limits = compatibility.host_compiler_limits(release)
        if host_gcc_major is not None and limits is not None and host_gcc_major > limits.max_gcc:
            continue
        fitting.append(release)
    return max(fitting, key=version_tuple, default="")


def propose_pypi_toolkit(planner: PlanDraft, reason: str) -> None:
    """With cuda.toolkit: auto, name the PyPI toolkit that avoids ``reason``."""
    if planner.settings.toolkit != "auto":
        return
    host = host_compiler(planner.facts, planner.env)
    major = version_tuple(host.version)[:1] if host and "clang" not in host.banner.lower() else ()
    release = pypi_release_for(planner.facts, wanted_architectures(planner) or [planner.architectures],
                               major[0] if major else None)
    if release:
        planner.warn("pypi-toolkit-proposed",
                     f"{reason}: set cuda.toolkit: pypi:{release} (--set cuda.toolkit=pypi:{release}) and the playbook "
                     f"downloads CUDA {release}'s nvcc, runtime, CCCL and cuBLAS from NVIDIA's PyPI wheels into its "
                     "cache and builds with them; no sudo, no installer")


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
    usable = [t for t in usable if t.has_cublas and t.has_cccl] or usable
    return max(usable, key=lambda t: version_tuple(t.version), default=None)


def passed_over(planner: PlanDraft, toolkit: CudaToolkit) -> list[str]:
    """The toolkits found here that choose_toolkit passed over for a missing component, in words ("CUDA 13.0.88
    at /usr/local/cuda, which has no cuBLAS"), so that a plan built with another toolkit says why."""
    if planner.toolkit_request is not None or planner.settings.toolkit != "auto":
        return []  # asked for by name or from PyPI: nothing was passed over
    if not (toolkit.has_cublas and toolkit.has_cccl):
        return []  # the choice fell back to toolkits without them: the component warnings say so
    missing = {t.root: [name for name, ok in (("cuBLAS", t.has_cublas), ("CCCL headers", t.has_cccl)) if not ok]
               for t in planner.facts.cuda_toolkits if t.root != toolkit.root}
    return [f"CUDA {t.version} at {t.root}, which has no {' and no '.join(missing[t.root])}"
            for t in planner.facts.cuda_toolkits if missing.get(t.root)]


def driver_cuda_version(facts: Facts) -> str:
    """The newest CUDA the driver runs: as the driver reports it, else from its branch."""
    if not facts.driver.found:
        return ""
    return facts.driver.cuda_version or compatibility.driver_max_cuda(facts.driver.version)


def configure(planner: PlanDraft) -> None:
    planner.architectures = planner.gpu_targets = choose_architectures(planner)
    planner.add_cmake_arg(CudaBackend.cmake_switch)
    planner.add_cmake_arg(f"-DCMAKE_CUDA_ARCHITECTURES={planner.architectures}")
    toolkit = planner.toolkit
    if toolkit is None:
        return
    planner.env["CUDACXX"] = cudacxx_path(planner, toolkit.nvcc)
    planner.decide("CUDACXX", planner.env["CUDACXX"], f"nvcc of the chosen toolkit (found by {toolkit.found_by})"
                   + "".join(f"; passed over: {'; '.join(passed)}" for passed in [passed_over(planner, toolkit)] if passed))
    check_driver(planner, toolkit)
    check_components(planner, toolkit)
    if planner.platform in ("linux", "wsl"):
        check_driver_library(planner, toolkit)
    from_pypi = planner.toolkit_request is not None or (Path(toolkit.root) / pypi.MARKER).is_file()
    if from_pypi and planner.platform != "windows":
        use_toolkit_libraries(planner.runtime_env, toolkit.root)
        planner.decide("LD_LIBRARY_PATH", planner.runtime_env["LD_LIBRARY_PATH"],
                       "the wheel loads libcudart and libcublas from the assembled toolkit, not from a system CUDA; "
                       "elsewhere install the same nvidia-* wheels or a CUDA of the same major version")
    if planner.platform == "windows":
        check_msvc(planner, toolkit)
        planner.dll_directories.append(str(PureWindowsPath(toolkit.root) / "bin"))
        planner.decide("DLL directories", ";".join(planner.dll_directories),
                       "llama.dll loads cudart, cublas and cublasLt from the toolkit's bin folder")
    else:
        check_gcc(planner, toolkit)
        check_host_runtime(planner, toolkit)


# A build expected to take longer than this on a machine without a GPU (built for another) is a warning too.
LONG_BUILD_S = 15 * 60


def expected_build_time(planner: PlanDraft) -> None:
    """How long this CUDA build takes here, from the measured build in cuda.yaml's build_time: its seconds per
    CUDA object and architecture on one compile job, times this plan's objects and architectures, over its jobs."""
    measured = compatibility.measured_cuda_build()
    architectures = architecture_count(planner)
    seconds = measured.cuda_objects * architectures * measured.seconds_per_object / max(1, planner.inputs.jobs)
    reason = (f"{measured.cuda_objects} CUDA objects × {architectures} architecture(s) × "
              f"{measured.seconds_per_object:.0f} s per object and architecture on one compile job, over "
              f"{planner.inputs.jobs} job(s); measured in {measured.source.split(' ')[0]} ({measured.steps} steps in "
              f"{measured.wall_s:.0f} s on a 2-core VM without a GPU, other builds beside it; the C++ steps "
              "included): a rough guide")
    planner.decide("expected build time", f"about {seconds / 60:.0f} min", reason)
    if seconds > LONG_BUILD_S and not planner.facts.gpus:  # a forced build on a machine without a GPU
        planner.warn("cuda-build-long", f"this CUDA build takes about {seconds / 60:.0f} min here ({reason}); fewer "
                     "architectures, more cores, or a warm or remote compiler cache (build.ccache_remote) shorten it")


def architecture_count(planner: PlanDraft) -> int:
    """How many architectures nvcc compiles each CUDA object for: the entries of cuda.architectures, or
    what native, all and all-major stand for here."""
    value = str(planner.architectures)
    known = planner.toolkit.gpu_architectures if planner.toolkit else []
    if value == "native":
        return max(1, len({gpu.arch for gpu in planner.facts.gpus}))
    if value == "all":
        return max(1, len(known))
    if value == "all-major":
        return max(1, len([a for a in known if a.endswith("0")]))
    return max(1, len([entry for entry in value.split(";") if entry]))


def check_driver_library(planner: PlanDraft, toolkit: CudaToolkit) -> None:
    """No driver and no stub libcuda (a builder without a GPU; PyPI's wheels ship no stub): ggml-cuda links
    libcuda only for its virtual-memory pool, so build without it rather than fail at CMake (libcuda-stub-link)."""
    facts = planner.facts
    stubs = [Path(toolkit.root) / d / "stubs" / "libcuda.so" for d in ("lib64", "lib")]
    stubs += [Path(p) for p in glob.glob(str(Path(toolkit.root) / "targets" / "*" / "lib" / "stubs" / "libcuda.so"))]
    if facts.driver.found or facts.libcuda_paths or any(p.is_file() for p in stubs):
        return
    planner.add_cmake_arg("-DGGML_CUDA_NO_VMM=ON")
    planner.decide("CUDA driver API", "not linked (-DGGML_CUDA_NO_VMM=ON)",
                   f"no NVIDIA driver here and no stub libcuda.so in {toolkit.root}: ggml-cuda links libcuda only for its "
                   "virtual-memory pool and uses its plain pool without it (otherwise CMake stops: libcuda-stub-link)")


def use_toolkit_libraries(runtime_env: dict[str, str], root: str) -> None:
    runtime_env["LD_LIBRARY_PATH"] = str(Path(root) / "lib")


def check_components(planner: PlanDraft, toolkit: CudaToolkit) -> None:
    """CCCL headers and cuBLAS: a toolkit without them fails the build for certain. When PyPI has the
    component of the same release, repair adds it (an automatic remedy), so the plan only warns."""
    if not toolkit.has_cccl:
        missing = [name for name, ok in toolkit.cccl_headers.items() if not ok]
        _missing_component(planner, toolkit, "cccl", "cccl-headers-missing",
                           f"CUDA {toolkit.version} at {toolkit.root} lacks CCCL headers {missing}: the build will "
                           "fail with 'nv/target' or 'cub/cub.cuh' not found")
    if not toolkit.has_cublas:
        _missing_component(planner, toolkit, "cublas", "cublas-missing",
                           f"CUDA {toolkit.version} at {toolkit.root} has no cuBLAS: CMake will fail with "
                           "'CUDA::cublas target was not found'")


def _missing_component(planner: PlanDraft, toolkit: CudaToolkit, component: str, code: str, problem: str) -> None:
    request = pypi.component_request(toolkit.version, [component], toolkit.root)
    if request is not None and not pypi.is_pypi_spec(planner.settings.toolkit):
        wheel = pypi.release(request.release).wheels[component]
        origin = f"; {wheel.note}" if wheel.note else ""
        planner.warn(code, f"{problem}; repair then adds {wheel.package}=={wheel.version} (CUDA {request.release}{origin}) from "
                     f"PyPI to a copy of this toolkit and builds again; to skip the failed attempt, "
                     f"{component_fix(toolkit, component)}")
        return
    planner.block(code, f"{problem}; {component_fix(toolkit, component)}")
    propose_pypi_toolkit(planner, f"CUDA {toolkit.version} lacks {component}")


def component_fix(toolkit: CudaToolkit, component: str) -> str:
    """What to install for a missing toolkit component, named for this toolkit's version."""
    major_minor = ".".join(toolkit.version.split(".")[:2])
    dash = major_minor.replace(".", "-")
    debian = {"cccl": f"cuda-cccl-{dash}", "cublas": f"libcublas-dev-{dash}"}[component]
    text = f"install {debian} (NVIDIA's apt repository for CUDA {major_minor})"
    if pypi.component_request(toolkit.version, [component], toolkit.root) is not None:
        wheel = pypi.release(major_minor).wheels[component]
        text += f" or pip's {wheel.package}=={wheel.version} into the toolkit"
    if major_minor in pypi.compiler_releases():
        text += f", or set cuda.toolkit: pypi:{major_minor} (a whole CUDA {major_minor} from NVIDIA's PyPI wheels)"
    return text


def choose_architectures(planner: PlanDraft) -> str:
    facts, toolkit = planner.facts, planner.toolkit
    wanted = planner.settings.architectures
    gpu = facts.best_gpu
    if wanted == "native":
        if gpu:
            planner.decide("CUDA architectures", gpu.arch, f"{gpu.name} has compute {gpu.compute_capability}")
            wanted = gpu.arch
        else:
            # CMake's "native" needs a visible GPU; without one pick what the toolkit's default would be.
            wanted = PORTABLE_DEFAULT_ARCH
            planner.warn("no-gpu-for-native", f"no GPU visible to detect its architecture: building for "
                         f"sm_{PORTABLE_DEFAULT_ARCH}; set cuda.architectures")
            planner.decide("CUDA architectures", wanted, "no GPU visible; a portable default")
    else:
        planner.decide("CUDA architectures", wanted, "given in parameters cuda.architectures")
    for arch in wanted.split(";"):
        number = arch_number(arch)
        if toolkit is None or not number or number not in known_architectures(toolkit):
            continue  # not an architecture at all: check_architectures blocked it already
        ok, why = toolkit_supports_arch(toolkit.version, arch)
        if ok and toolkit.gpu_architectures and number not in toolkit.gpu_architectures:
            ok, why = False, (f"CUDA {toolkit.version}'s nvcc does not compile sm_{number} (nvcc --list-gpu-arch: "
                              f"{', '.join(toolkit.gpu_architectures)})")
        if not ok:
            planner.block("cuda-arch-unsupported", why)
            propose_pypi_toolkit(planner, f"CUDA {toolkit.version} cannot compile sm_{arch}")
    numbers = [m.group(0) for a in wanted.split(";") if (m := re.match(r"\d+", a))]
    if gpu and gpu.arch not in numbers:
        planner.warn("gpu-arch-not-built", f"the wheel will not contain sm_{gpu.arch} for this machine's {gpu.name}: "
                     "expect 'no kernel image is available' here")
    return wanted


def arch_number(entry: str) -> str:
    """``90`` of ``90a-real``; empty for CMake's words (all, all-major) and for native."""
    match = re.match(r"\d+", entry)
    return match.group(0) if match else ""


def accepted_architectures(toolkit: CudaToolkit | None) -> tuple[list[str], str]:
    """What ``toolkit`` compiles for, and where that is known from: its nvcc's own list where nvcc ran (detect
    asked ``nvcc --list-gpu-arch``), else the table (``knowledge/cuda.yaml``) for its release, else any release's."""
    if toolkit and toolkit.gpu_architectures:
        return list(toolkit.gpu_architectures), f"CUDA {toolkit.version}'s nvcc --list-gpu-arch"
    table = list(compatibility.arch_support())
    if toolkit and toolkit.version:
        return ([a for a in table if toolkit_supports_arch(toolkit.version, a)[0]],
                f"knowledge/cuda.yaml for CUDA {toolkit.version}")
    return table, "knowledge/cuda.yaml (every CUDA release)"


def known_architectures(toolkit: CudaToolkit | None) -> set[str]:
    """Every architecture some CUDA release compiles for, as far as the table and this toolkit's nvcc know."""
    return set(compatibility.arch_support()) | set(toolkit.gpu_architectures if toolkit else [])


def check_architectures(planner: PlanDraft) -> None:
    """An architecture no CUDA knows (``999``) is refused before anything is built, whichever backend is chosen:
    with backend cuda CMake would stop on it, and with another one it would pass unnoticed."""
    value, toolkit = planner.settings.architectures, planner.toolkit
    known = known_architectures(toolkit)
    unknown = [e for e in wanted_architectures(planner) if arch_number(e) and arch_number(e) not in known]
    if unknown:
        accepted, source = accepted_architectures(toolkit)
        planner.block("cuda-arch-unknown",
                      f"cuda.architectures = {value!r}: {', '.join(unknown)} is no CUDA architecture ({source} and "
                      f"the table know none such); accepted: {', '.join(accepted)}, or native for this machine's GPU; "
                      f"set cuda.architectures to one of them (--set cuda.architectures={accepted[-1] if accepted else 90})")


def check_driver(planner: PlanDraft, toolkit: CudaToolkit) -> None:
    facts = planner.facts
    if not facts.driver.found or not toolkit.version:
        return
    driver_cuda = driver_cuda_version(facts)
    if driver_cuda and version_tuple(driver_cuda)[:2] < version_tuple(toolkit.version)[:2]:
        same_major = version_tuple(driver_cuda)[0] == version_tuple(toolkit.version)[0]
        fix = (" (minor version compatibility runs it, but PTX built for newer CUDA will not JIT)" if same_major
               else f", or build with a CUDA {version_tuple(driver_cuda)[0]}.x toolkit up to {driver_cuda}")
        planner.warn("driver-older-than-toolkit",
                     f"driver {facts.driver.version} supports CUDA up to {driver_cuda}, older than the toolkit "
                     f"{toolkit.version}: update the driver to {minimum_driver(toolkit.version, facts.os.system)} "
                     f"or newer{fix}")


def check_gcc(planner: PlanDraft, toolkit: CudaToolkit) -> None:
    facts, env = planner.facts, planner.env
    limits = compatibility.host_compiler_limits(toolkit.version)
    host = host_compiler(facts, env)
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
        planner.decide("CUDAHOSTCXX", chosen.path,
                       f"gcc {host.version} is newer than CUDA {toolkit.version} accepts (up to gcc {limits.max_gcc}); "
                       f"{chosen.name} {chosen.version} compiles the host side ({limits.source})")
        return
    newer = compatibility.oldest_nvcc_accepting(gcc_major=major[0])
    planner.block("host-compiler-unsupported",
                  f"gcc {host.version} is newer than CUDA {toolkit.version}'s nvcc accepts (up to gcc {limits.max_gcc}): "
                  f"nvcc stops with 'unsupported GNU version'; install g++-{limits.max_gcc} "
                  f"(apt install g++-{limits.max_gcc}) and the playbook sets CUDAHOSTCXX to it"
                  + (f", or install CUDA {newer} or newer" if newer else ""))
    propose_pypi_toolkit(planner, f"gcc {host.version} is too new for CUDA {toolkit.version}")


def host_compiler(facts: Facts, env: dict[str, str]) -> Tool | None:
    """The compiler nvcc compiles host code with and CMake links the CUDA library with: CUDAHOSTCXX (the plan's,
    else the environment's, which wins over -DCMAKE_CUDA_HOST_COMPILER in CMake), else the C++ compiler."""
    found = {t.name: t for t in facts.compilers if t.found}
    for name in (env.get("CUDAHOSTCXX"), facts.environment.get("CUDAHOSTCXX"), env.get("CXX"),
                 facts.environment.get("CXX"), "c++", "g++"):
        if name and name in found:
            return found[name]
    return None


def check_host_runtime(planner: PlanDraft, toolkit: CudaToolkit) -> None:
    """Name the CUDA host compiler in CUDAHOSTCXX and -DCMAKE_CUDA_HOST_COMPILER alike when it must differ from
    the environment's: when the host compiler copies the C++ runtime into libggml-cuda.so (which it links), or
    when the plan moved CXX away from the environment's (CUDAHOSTCXX would otherwise keep the old one)."""
    facts, env = planner.facts, planner.env
    host = host_compiler(facts, env)
    if host is None:
        return
    inherited = facts.environment.get("CUDAHOSTCXX", "")
    moved_cxx = env.get("CXX") and not env.get("CUDAHOSTCXX") and inherited and inherited != env["CXX"]
    if host.links_cxx_runtime_shared is not False and not moved_cxx:
        return
    limits = compatibility.host_compiler_limits(toolkit.version)
    accepted = [t for t in facts.compilers if t.found and t.links_cxx_runtime_shared and is_cxx_compiler(t.path)
                and (limits is None or "clang" in t.banner.lower() or not version_tuple(t.version)[:1]
                     or version_tuple(t.version)[0] <= limits.max_gcc)]
    if not accepted:
        planner.warn("cuda-host-runtime-static",
                     f"{host.path}, nvcc's host compiler, copies the C++ runtime into libggml-cuda.so, and no g++ found "
                     f"here that CUDA {toolkit.version} accepts links it shared: install the distribution's g++ and "
                     "set CUDAHOSTCXX to it")
        return
    chosen = next((t for t in accepted if t.path == env.get("CXX")), accepted[0])
    env["CUDAHOSTCXX"] = chosen.path
    planner.add_cmake_arg(f"-DCMAKE_CUDA_HOST_COMPILER={chosen.path}")
    why = (f"{host.path} copies the C++ runtime into the libraries it links, libggml-cuda.so among them"
           if host.links_cxx_runtime_shared is False else f"the plan's CXX is {env['CXX']}")
    planner.decide("CUDA host compiler", chosen.path,
                   f"{why}; {chosen.path} links libstdc++.so.6 shared: CUDAHOSTCXX and -DCMAKE_CUDA_HOST_COMPILER "
                   "both name it, since CUDAHOSTCXX from the environment overrides CMake's argument")


def check_msvc(planner: PlanDraft, toolkit: CudaToolkit) -> None:
    facts = planner.facts
    studio = facts.newest_visual_studio
    cl = next((t for t in facts.compilers if t.found and t.name == "cl"), None)
    msvc = cl.version if cl else (studio.newest_msvc if studio else "")
    if not msvc:
        planner.warn("msvc-missing", "no Visual Studio C++ compiler found (vswhere lists none with MSVC): install "
                     "Visual Studio 2022 Build Tools with 'Desktop development with C++'")
        return
    vs_release = compatibility.visual_studio_for_msvc(msvc)
    named = f"MSVC {'.'.join(msvc.split('.')[:2])}" + (f" (Visual Studio {vs_release})" if vs_release else "")
    planner.decide("host compiler", named, f"cl {msvc}" + (f" from {studio.path}" if studio else ""))
    limits = compatibility.host_compiler_limits(toolkit.version)
    if limits and version_tuple(msvc)[:2] > version_tuple(limits.max_msvc):
        newer = compatibility.oldest_nvcc_accepting(msvc=msvc)
        older_toolsets = [t for t in (studio.msvc_toolsets if studio else [])
                          if version_tuple(t)[:2] <= (14, version_tuple(limits.max_msvc)[1])]
        fix = f"install CUDA {newer} or newer" if newer else "install a newer CUDA toolkit"
        if older_toolsets:
            fix += f", or open the developer prompt with `vcvarsall.bat x64 -vcvars_ver={older_toolsets[-1]}`"
        planner.block("host-compiler-unsupported",
                      f"{named} is newer than CUDA {toolkit.version}'s nvcc accepts (up to {limits.max_msvc}): nvcc "
                      f"stops with 'unsupported Microsoft Visual Studio version'; {fix} ({limits.source})")
    min_cuda, source = compatibility.msvc_stl_min_cuda(msvc)
    if min_cuda and version_tuple(toolkit.version)[:2] < version_tuple(min_cuda):
        planner.block("msvc-stl-needs-newer-cuda",
                      f"{named}'s standard library needs CUDA {min_cuda} or newer (error STL1002); CUDA "
                      f"{toolkit.version} is older: install CUDA {min_cuda} or newer ({source})")


def check_driver_libraries(planner: PlanDraft) -> None:
    facts = planner.facts
    for folder in facts.stub_on_ld_library_path:
        planner.warn("cuda-stub-on-ld-library-path",
                     f"LD_LIBRARY_PATH holds CUDA's stub folder {folder}: its libcuda.so only links, and at run "
                     "time CUDA reports no device or 'CUDA driver version is insufficient'; remove it from "
                     "LD_LIBRARY_PATH (LIBRARY_PATH is where stubs belong)")
    if planner.platform != "wsl" or not facts.gpus:
        return
    if not facts.wsl_driver_libs:
        planner.warn("wsl-driver-missing", "WSL without /usr/lib/wsl/lib/libcuda.so: the GPU driver comes from the "
                     "Windows NVIDIA driver; update it on Windows and never install a Linux NVIDIA driver inside WSL")
    elif facts.libcuda_paths and not facts.libcuda_paths[0].startswith("/usr/lib/wsl/lib/"):
        planner.warn("wsl-libcuda-shadowed",
                     f"the loader finds libcuda.so.1 at {facts.libcuda_paths[0]} before /usr/lib/wsl/lib: a Linux "
                     "driver or a stub shadows WSL's; remove it (apt remove the nvidia driver packages, or the "
                     "stub's folder from /etc/ld.so.conf.d) and run `sudo ldconfig`")


def cudacxx_path(planner: PlanDraft, nvcc: str) -> str:
    """Windows: nvcc's path with forward slashes when it has spaces (CMake splits backslashed ones)."""
    if planner.platform != "windows" or " " not in nvcc:
        return nvcc
    forward = PureWindowsPath(nvcc).as_posix()
    planner.decide("CUDACXX path", forward, "the path has spaces: CMake reads forward slashes whole, backslashes with "
                   "spaces break (guide: 'CMAKE_CUDA_COMPILER: c:PERSONAL')")
    return forward


def check_architectures_syntax(value: str) -> None:
    """Each entry is a CMake architecture: ``sm_90`` is nvcc's spelling, which CMake rejects."""
    entries = [e.strip() for e in value.split(";")]
    for entry in entries:
        if (entry in CUDA_ARCHITECTURE_WORDS and len(entries) == 1) or CUDA_ARCHITECTURE_ENTRY.fullmatch(entry):
            continue
        digits = re.sub(r"\D", "", entry)
        hint = f" (for {entry} write {digits})" if digits and entry.lower().startswith(("sm_", "compute_")) else ""
        raise ParameterError(
            f"cuda.architectures = {value!r}: {entry!r} is not a CUDA architecture CMake accepts{hint}; give "
            "compute capabilities as numbers separated by ';' (e.g. 90, or 86;89;120, or 90a, 80-real), "
            "or one of native, all, all-major")


def plan_cuda_version(inputs: BackendInputs) -> str:
    """The CUDA release a plan builds with ("" for none or unknown)."""
    root, request = inputs.toolkit_root, inputs.toolkit_request
    if request is not None:
        if not request.base:
            return request.release
        root = request.base
    return next((t.version for t in inputs.facts.cuda_toolkits if t.root == root), "")


def add_toolkit_components(planner: PlanDraft, components: list[str]) -> None:
    """Components of the plan's own CUDA release from PyPI, added to (a copy of) its toolkit."""
    inputs = planner.inputs
    request = inputs.toolkit_request
    if request is not None:
        missing = [c for c in components if c not in request.components]
        if missing and request.release in pypi.releases():
            use_pypi_toolkit(planner, pypi.with_components(request, missing),
                             f"adds {', '.join(missing)} of CUDA {request.release} from PyPI")
        return
    version = plan_cuda_version(inputs)
    root = inputs.toolkit_root
    request = pypi.component_request(version, components, root) if version and root else None
    if request is not None:
        wheels = pypi.release(request.release).wheels
        use_pypi_toolkit(planner, request, "a copy of " + root + " with " +
                         ", ".join(f"{wheels[c].package}=={wheels[c].version}" for c in components) + " from PyPI")


def move_to_pypi_toolkit(planner: PlanDraft) -> None:
    """A whole CUDA release from PyPI that compiles every architecture of the plan and accepts the host gcc,
    when the current toolkit does not."""
    inputs, facts = planner.inputs, planner.facts
    architectures = [a for a in inputs.architectures.split(";") if a]
    version = plan_cuda_version(inputs)
    host = host_compiler(facts, planner.env)
    gcc = version_tuple(host.version)[:1] if host and "clang" not in host.banner.lower() else ()
    release = pypi_release_for(facts, architectures, gcc[0] if gcc else None)
    current = inputs.toolkit_request
    if not release or (current is not None and current.release == release and not current.base):
        return
    fits_now = version and all(toolkit_supports_arch(version, a)[0] for a in architectures)
    limits = compatibility.host_compiler_limits(version) if version else None
    if fits_now and (not gcc or limits is None or gcc[0] <= limits.max_gcc):
        return
    use_pypi_toolkit(planner, pypi.full_request(f"pypi:{release}"),
                     f"CUDA {release} from PyPI compiles {';'.join(architectures)} and accepts the host compiler")


def use_pypi_toolkit(planner: PlanDraft, request: pypi.ToolkitRequest, why: str) -> None:
    root = pypi.root_for(request, planner.inputs.cache_dir)
    planner.toolkit_request = request
    planner.toolkit = planned_toolkit(request, planner.inputs.cache_dir)
    planner.env["CUDACXX"] = str(pypi.nvcc_of(root))
    planner.decide("CUDA toolkit", str(root), why + "; build assembles it unless it exists")
    if planner.platform != "windows":
        use_toolkit_libraries(planner.runtime_env, str(root))


def planning(inputs: BackendInputs) -> PlanDraft:
    """A draft with the toolkit this plan builds with: the one cuda.toolkit names, else the one detect found that
    fits the driver and the architectures best."""
    draft = PlanDraft(inputs)
    draft.toolkit = choose_toolkit_for(draft)
    return draft


class CudaBackend(BackendUnit):
    name = "cuda"
    cmake_switch = "-DGGML_CUDA=on"
    settings_type = CudaSettings
    facts_read = ("gpus", "driver", "cuda_toolkits", "compilers", "visual_studio", "libcuda_paths",
                  "stub_on_ld_library_path", "wsl_driver_libs")
    knowledge = ("cuda.yaml", "cuda_wheels.yaml", "gpus.yaml")
    failure_family = "cuda-toolchain"
    profile = "cuda-native"
    auto_rank = 10
    mib_per_compile_job = 3 * GIB_MIB
    device_log_name = "CUDA"
    machine_code = "cuobjdump"
    tune_build_flags = "flash-attention-kernels"
    platforms = ("linux", "wsl", "windows")
    status = "runs on the GPU machine"

    def check_settings(self, settings: CudaSettings) -> None:
        check_architectures_syntax(settings.architectures)
        if settings.toolkit.lower().startswith("pypi:"):
            try:
                pypi.check_spec(settings.toolkit)
            except pypi.ToolkitError as err:
                raise ParameterError(str(err)) from None

    def whichever_built(self, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        draft.toolkit = choose_toolkit_for(PlanDraft(inputs))  # its decision belongs to a CUDA plan only
        check_architectures(draft)
        return BackendPlan(blockers=tuple(draft.blockers), warnings=tuple(draft.warnings))

    def assess(self, inputs: BackendInputs) -> Assessment:
        gpu, toolkit = inputs.facts.best_gpu, planning(inputs).toolkit
        if gpu and toolkit:
            return Assessment(f"{gpu.name} (compute {gpu.compute_capability}) and CUDA {toolkit.version} found")
        return Assessment(blocked_because="no NVIDIA GPU visible" if not gpu else "no CUDA toolkit (nvcc) found")

    def requested(self, inputs: BackendInputs) -> Choice:
        planner = planning(inputs)
        toolkit = planner.toolkit
        planner.decisions.clear()  # the toolkit's own decision is the plan's, below the backend's
        if toolkit is None:
            spec = planner.settings.toolkit
            where = "" if spec == "auto" else f" at {spec}"
            planner.block("cuda-toolkit-missing", f"backend cuda asked for, but no CUDA toolkit{where} was found: the "
                          "build will fail; install one, or set cuda.toolkit")
            propose_pypi_toolkit(planner, "no CUDA toolkit found")
            planner.decide("backend", self.name, "asked for in parameters; no toolkit found")
        else:
            planner.decide("backend", self.name, f"asked for in parameters; CUDA {toolkit.version}")
        return Choice(self.name, planner.result())

    def fallback_hint(self, inputs: BackendInputs) -> BackendPlan:
        planner = planning(inputs)
        planner.decisions.clear()
        gpu = inputs.facts.best_gpu
        if gpu:
            propose_pypi_toolkit(planner, f"{gpu.name} found but no CUDA toolkit; for a CUDA build set backend: cuda")
        return planner.result()

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        planner = planning(inputs)
        configure(planner)
        if planner.platform in ("linux", "wsl"):
            check_driver_libraries(planner)
        return planner.result()

    def expected_build_time(self, inputs: BackendInputs, planned: BackendPlan) -> BackendPlan:
        planner = PlanDraft(inputs)
        planner.toolkit, planner.architectures = planned.toolkit, planned.architectures
        expected_build_time(planner)
        return planner.result()

    def remedy(self, remedy: Remedy, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        gpu = inputs.facts.best_gpu
        if remedy.use_detected_arch and gpu:
            draft.architectures = draft.gpu_targets = gpu.arch
            draft.add_cmake_arg(f"-DCMAKE_CUDA_ARCHITECTURES={gpu.arch}")
        if remedy.toolkit_add:
            add_toolkit_components(draft, list(remedy.toolkit_add))
        if remedy.pypi_toolkit:
            move_to_pypi_toolkit(draft)
        if remedy.shared_cxx_runtime and draft.env.get("CXX"):
            # CUDAHOSTCXX in the build's environment wins over -DCMAKE_CUDA_HOST_COMPILER: both must name it
            draft.env["CUDAHOSTCXX"] = draft.env["CXX"]
            draft.add_cmake_arg(f"-DCMAKE_CUDA_HOST_COMPILER={draft.env['CXX']}")
            draft.decide("CUDA host compiler", draft.env["CXX"], "the C++ compiler the remedy chose: CUDAHOSTCXX and "
                         "-DCMAKE_CUDA_HOST_COMPILER both name it, since CUDAHOSTCXX overrides CMake's argument")
        return draft.result()

    def toolkit_release(self, inputs: BackendInputs) -> str:
        return plan_cuda_version(inputs)

    def wheel_requirements(self, cmake_args: Sequence[str], toolkit_release: str,
                           machine_code: Sequence[str]) -> dict[str, Any]:
        """The CUDA release, the machine code (``sass``) and the PTX the wheel holds (:mod:`.cuda_wheel`)."""
        return cuda_wheel.requirements(cmake_args, toolkit_release, machine_code)

    def wheel_fit(self, requirements: Mapping[str, Any], facts: Facts) -> WheelFit:
        """The best NVIDIA GPU runs its machine code or PTX, and the driver supports its CUDA release."""
        gpu = facts.best_gpu
        if gpu is None or not facts.driver.found:
            return WheelFit(False, "no NVIDIA GPU with a working driver was detected")
        return cuda_wheel.fit(requirements, gpu.arch, gpu.name, driver_cuda_version(facts))

    def upstream_requirements(self, variant: str) -> tuple[dict[str, Any], list[str]] | None:
        """``cuXYZ``: wheels compiled with CUDA X.Y (``cu124``: 12.4), for GPU architectures the folder does not
        say (:func:`.cuda_wheel.upstream_requirements`)."""
        return cuda_wheel.upstream_requirements(variant)

    def upstream_variant(self, facts: Facts) -> str:
        """The newest CUDA release upstream publishes wheels for that the driver supports (:data:`.cuda_wheel.UPSTREAM_RELEASES`)."""
        return cuda_wheel.upstream_variant(driver_cuda_version(facts)) if facts.gpus else ""

    def devices(self, facts: Facts) -> list[Device]:
        return [Device(self.name, gpu.name, detail=f"compute {gpu.compute_capability}") for gpu in facts.gpus]

    def device(self, facts: Facts) -> str:
        best = facts.best_gpu
        return best.name if best else ""

    # ------------------------------------------------------------------ detecting

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        """The toolkits (the playbook's own under ``context.cache_dir`` too), the driver and GPUs, libcuda.so.1's
        paths, stub folders on LD_LIBRARY_PATH and WSL's driver libraries: :mod:`playbook.backends.cuda_probe`."""
        from playbook.backends import cuda_probe

        return cuda_probe.probe(context)
