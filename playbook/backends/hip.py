"""ROCm/HIP: ``-DGGML_HIP=on`` for the detected gfx targets, built by ROCm's clang.

llama.cpp's ggml-hip compiles ggml-cuda's sources as HIP; its CMakeLists forwards ``AMDGPU_TARGETS`` or
``GPU_TARGETS`` to ``CMAKE_HIP_ARCHITECTURES`` and finds hip, hipblas and rocblas under ``ROCM_PATH``.
Reads detect's ``rocm`` (hipconfig, rocminfo's gfx targets, ROCm's clang, hipBLAS/rocBLAS); its table is
``knowledge/rocm.yaml``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playbook.backends.base import GIB_MIB, Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft, defined_value
from playbook.errors import ParameterError
from playbook.facts import Device, Facts, HipGpu, Rocm, Tool
from playbook.knowledge import compatibility
from playbook.probing import CommandRunner, ProbeContext, detect_tool, parse_first_version

# Where the linker looks without being told: a ROCm library folder elsewhere needs -L.
SYSTEM_LIB_DIRS = ("/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64")


@dataclass(frozen=True)
class HipSettings:
    """The ``hip:`` parameter section."""

    targets: str = "native"
    """"native": the detected GPUs' gfx targets; otherwise a list such as "gfx1100;gfx1030"."""
    rocm_path: str = ""
    """The ROCm folder to build with (the one holding bin/hipconfig), before $ROCM_PATH, /opt/rocm* and /usr; e.g.
    Debian's ROCm unpacked by scripts/rocm-debian.sh. Empty: detect's search alone."""


def usable(rocm: Rocm) -> bool:
    return rocm.found and bool(rocm.gpus) and bool(rocm.hip_clang)


def configure(planner: PlanDraft) -> None:
    rocm, wanted = planner.facts.rocm, planner.settings.targets
    planner.add_cmake_arg(HipBackend.cmake_switch)
    if not rocm.found:
        planner.block("rocm-missing", "backend hip asked for, but no ROCm (hipconfig, /opt/rocm) was found: the build "
                      "will fail; install ROCm (https://rocm.docs.amd.com/projects/install-on-linux/) or set ROCM_PATH")
    _targets(planner, rocm, wanted)
    _compiler(planner, rocm)
    _libraries(planner, rocm)


def _targets(planner: PlanDraft, rocm: Rocm, wanted: str) -> None:
    if wanted == "native":
        targets = rocm.gfx_targets
        why = "the detected GPUs (rocminfo): " + ", ".join(f"{g.name or '?'} {g.gfx}" for g in rocm.gpus)
    else:
        targets = [t for t in wanted.replace(",", ";").split(";") if t]
        why = "given in parameters hip.targets"
    if not targets:
        planner.block("hip-no-gfx-target", "no gfx target: rocminfo lists no GPU agent; set hip.targets (e.g. gfx1100) "
                      "or check that this user can open /dev/kfd (groups render and video)")
        return
    planner.gpu_targets = ";".join(targets)
    planner.add_cmake_arg(f"-DAMDGPU_TARGETS={planner.gpu_targets}")
    planner.add_cmake_arg(f"-DGPU_TARGETS={planner.gpu_targets}")
    planner.decide("gfx targets", planner.gpu_targets, why)
    for gfx in targets:
        supported, reason = compatibility.rocm_supports_gfx(rocm.version, gfx)
        if supported is False:
            planner.warn("rocm-gfx-unsupported", reason)
        elif supported is None:
            planner.warn("rocm-gfx-unknown", f"{reason}: the playbook cannot say whether ROCm {rocm.version} supports it")


def _compiler(planner: PlanDraft, rocm: Rocm) -> None:
    _minimum(planner, rocm)
    if not rocm.hip_clang:
        if rocm.found:
            planner.block("hip-compiler-missing", f"no HIP compiler (llvm/bin/clang, or Debian's lib/llvm-N/bin/clang "
                          f"with rocm-device-libs-N) under {rocm.root}: CMake's enable_language(HIP) will fail; install "
                          "the rocm-llvm (hip-dev) package, or Debian's clang-N and rocm-device-libs-N")
        return
    planner.env["HIPCXX"] = rocm.hip_clang
    planner.env["HIP_PATH"] = rocm.root
    # hipconfig --platform answers "nvidia" where it finds no AMD GPU, and hip-config.cmake then defines
    # hip::device twice (failures.yaml: hip-platform-nvidia).
    planner.env["HIP_PLATFORM"] = "amd"
    prefix = [rocm.root, *filter(None, [planner.facts.environment.get("CMAKE_PREFIX_PATH", "")])]
    planner.env["CMAKE_PREFIX_PATH"] = os.pathsep.join(prefix)
    if rocm.layout == "debian":
        # clang looks for the device libraries under $ROCM_PATH when it is set, and Debian's are beside clang
        # (lib/llvm-N/lib/clang/N/amdgcn): ROCM_PATH stays unset (failures.yaml: hip-rocm-path-device-libs).
        _debian_layout(planner, rocm)
    else:
        planner.env["ROCM_PATH"] = rocm.root
    planner.decide("HIP compiler", rocm.hip_clang,
                   f"ROCm {rocm.version or '?'}'s clang (HIPCXX), as llama.cpp's build guide sets it; HIP_PATH={rocm.root}"
                   + (", Debian's layout (ROCM_PATH left unset)" if rocm.layout == "debian" else ""))


def _minimum(planner: PlanDraft, rocm: Rocm) -> None:
    """Refuse a ROCm older than the llama.cpp of the asked release accepts, naming the newest release that builds."""
    release = planner.inputs.source_release
    row = compatibility.llama_cpp_min_rocm(release)
    if not (row and rocm.version):
        return
    minimum, why = row
    if compatibility.version_tuple(rocm.version) >= compatibility.version_tuple(minimum):
        return
    fix = f"install ROCm {minimum} or newer"
    older = compatibility.newest_llama_cpp_python_for_rocm(rocm.version)
    if older:
        fix += (f", or build llama-cpp-python {older[0]}, the newest release whose llama.cpp accepts ROCm {rocm.version} "
                f"(--set source.version={older[0]} --set source.sha256={older[1]})")
    planner.block("rocm-too-old", f"ROCm {rocm.version} is older than {minimum}, the oldest that llama-cpp-python "
                  f"{release or '(this source)'}'s llama.cpp accepts ({why}): {fix}")


def _debian_layout(planner: PlanDraft, rocm: Rocm) -> None:
    """Debian's ROCm packages: CMake new enough for lib/<multiarch>/cmake, the libraries' folder for the linker,
    and a glibc the libraries can load with."""
    cmake = planner.facts.cmake
    minimum, why = compatibility.cmake_for_multiarch_hip()
    if cmake.found and compatibility.version_tuple(cmake.version) < compatibility.version_tuple(minimum):
        planner.block("hip-cmake-multiarch", f"CMake {cmake.version} ({cmake.path}) looks for hip-lang only in "
                      f"{rocm.root}/lib/cmake, and Debian's ROCm keeps it in lib/<multiarch>/cmake ({why}): put CMake "
                      f"{minimum} or newer first on PATH (pip install 'cmake>={minimum}' into an active venv)")
    ldflags = [planner.facts.environment.get("LDFLAGS", "")]
    if rocm.lib_dir and rocm.lib_dir not in SYSTEM_LIB_DIRS:
        ldflags.append(f"-L{rocm.lib_dir}")  # clang --hip-link adds -lamdhip64 for CMake's test program
    system, needed = planner.facts.os.glibc, rocm.glibc_needed
    if system and needed and compatibility.version_tuple(system) < compatibility.version_tuple(needed):
        # The test program links libamdhip64, whose glibc symbols this glibc lacks; the libraries themselves link.
        ldflags.append("-Wl,--allow-shlib-undefined")
        planner.warn("rocm-needs-newer-glibc", f"ROCm's libamdhip64 in {rocm.lib_dir} needs glibc {needed} and this "
                     f"system has {system}: the build compiles, but the wheel cannot load its HIP library here (compiled "
                     f"only); run it on a system with glibc {needed} or newer (the ROCm's own distribution)")
    if any(ldflags):
        planner.env["LDFLAGS"] = " ".join(filter(None, ldflags))


def _libraries(planner: PlanDraft, rocm: Rocm) -> None:
    if rocm.found and not (rocm.has_hipblas and rocm.has_rocblas):
        missing = " and ".join(n for n, ok in (("hipBLAS", rocm.has_hipblas), ("rocBLAS", rocm.has_rocblas)) if not ok)
        planner.block("hipblas-missing", f"{missing} not found under {rocm.root}/lib: ggml-hip's find_package(hipblas) "
                      "and find_package(rocblas) will fail; install hipblas-dev and rocblas-dev (Debian: libhipblas-dev "
                      "and librocblas-dev)")


class HipBackend(BackendUnit):
    name = "hip"
    cmake_switch = "-DGGML_HIP=on"
    settings_type = HipSettings
    platforms = ("linux", "wsl", "windows")
    facts_read = ("rocm",)
    knowledge = ("rocm.yaml",)
    failure_family = "hip"
    profile = "hip"
    auto_rank = 20
    upstream_variants = ("rocm72", "hip-radeon")  # ROCm 7.2 for Linux, HIP Radeon for Windows
    mib_per_compile_job = 3 * GIB_MIB
    device_log_name = "ROCm"
    machine_code = "hip-fatbin"
    status = "compiled only"

    def check_settings(self, settings: HipSettings) -> None:
        folder = settings.rocm_path
        if folder and not (Path(folder).expanduser() / "bin" / "hipconfig").is_file():
            raise ParameterError(f"hip.rocm_path {folder!r} holds no bin/hipconfig; give the ROCm folder above bin/ "
                                 "(/opt/rocm-6.2.4, or what scripts/rocm-debian.sh prints), or leave it empty")

    def assess(self, inputs: BackendInputs) -> Assessment:
        rocm = inputs.facts.rocm
        if usable(rocm):
            gpus = ", ".join(g.name or g.gfx for g in rocm.gpus)
            return Assessment(f"{gpus} ({', '.join(rocm.gfx_targets)}) and ROCm {rocm.version or '?'} found")
        return Assessment(blocked_because="no ROCm (hipconfig) found" if not rocm.found
                          else "rocminfo lists no AMD GPU" if not rocm.gpus
                          else "no HIP compiler (ROCm's llvm/bin/clang)")

    def requested(self, inputs: BackendInputs) -> Choice:
        draft = PlanDraft(inputs)
        draft.decide("backend", self.name, f"asked for in parameters; ROCm {inputs.facts.rocm.version or 'not found'}")
        return Choice(self.name, draft.result())

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        configure(draft)
        return draft.result()

    def wheel_requirements(self, cmake_args: Sequence[str], toolkit_release: str,
                           machine_code: Sequence[str]) -> dict[str, Any]:
        """``gpu_targets``: the gfx targets its code objects are for ("gfx1100;gfx1030"), as verify listed them,
        else as the plan's GPU_TARGETS gave them."""
        targets = ";".join(machine_code) or defined_value(tuple(cmake_args), "GPU_TARGETS") or \
            defined_value(tuple(cmake_args), "AMDGPU_TARGETS") or ""
        return {"gpu_targets": targets} if targets else {}

    def upstream_requirements(self, variant: str) -> tuple[dict[str, Any], list[str]] | None:
        """``rocmXY`` and ``hip-radeon``: HIP wheels whose gfx targets the folder does not say."""
        if re.fullmatch(r"rocm\d+", variant) or variant in self.upstream_variants:
            return {}, ["GPU targets (gfx)"]
        return None

    def upstream_variant(self, facts: Facts) -> str:
        return self.upstream_variants[1] if facts.os.platform == "windows" else self.upstream_variants[0]

    def devices(self, facts: Facts) -> list[Device]:
        return [Device(self.name, g.name or g.gfx, detail=g.gfx) for g in facts.rocm.gpus]

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        """ROCm (``hip.rocm_path`` first): its version, layout, HIP compiler, libraries and rocminfo's GPUs."""
        settings = context.settings or self.settings_type()
        return {"rocm": detect_rocm(context.environ, context.search_path, context.runner, settings.rocm_path)}


# ---------------------------------------------------------------- detecting: parsers (pure)


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


def parse_hipconfig_version(text: str) -> str:
    """``hipconfig --version`` prints ``6.2.41134-65d174c3e``: the ROCm release is 6.2 (HIP's version
    is the ROCm version with a build number as the patch)."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else ""


# ---------------------------------------------------------------- detecting: probes


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
