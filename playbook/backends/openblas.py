"""OpenBLAS: the CPU build with llama.cpp's BLAS backend (``-DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS``), which
hands large matrix products (prompt processing) to OpenBLAS. Offloads nothing.

Reads detect's ``openblas`` (the library a link uses, cblas.h, pkg-config) and ``os``; its table is
``knowledge/blas.yaml`` (the CMake arguments, how ggml-blas finds OpenBLAS, the install line per package manager).
"""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from playbook.backends.base import Assessment, BackendUnit, WheelFit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.facts import Facts, OpenBlas
from playbook.knowledge import compatibility
from playbook.probing import CommandRunner, ProbeContext, detect_tool

# Folders CMake's find_library and pkg-config search without being told.
STANDARD_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib")


def table() -> dict[str, Any]:
    return compatibility.knowledge("blas")


def install_line(platform: str) -> str:
    """The install commands for this platform's package managers, as one sentence."""
    managers = {"macos": ("brew", "conda"), "windows": ("conda",)}.get(platform, ("apt", "dnf", "conda"))
    rows = [row for row in table()["install"] if row["manager"] in managers]
    return "; ".join(f"{row['manager']}: `{row['command']}`" for row in rows)


def missing(openblas: OpenBlas) -> list[str]:
    what = []
    if not openblas.library:
        what.append("the OpenBLAS library (libopenblas.so)")
    if not openblas.cblas_header:
        what.append("cblas.h")
    if not openblas.pkg_config.found:
        what.append("pkg-config")
    return what


class OpenBlasBackend(BackendUnit):
    name = "openblas"
    cmake_switch = "-DGGML_BLAS=ON"
    facts_read = ("openblas", "os")
    knowledge = ("blas.yaml",)
    profile = "openblas"
    offloads = False
    planned_on_macos = True  # Homebrew's openblas
    ggml_library = "ggml-blas"
    ggml_device = "BLAS"
    status = "runs here"

    def assess(self, inputs: BackendInputs) -> Assessment:
        lacking = missing(inputs.facts.openblas)
        if lacking:
            return Assessment(blocked_because=f"missing {', '.join(lacking)}")
        return Assessment(f"OpenBLAS {inputs.facts.openblas.library} and its cblas.h found")

    def requested(self, inputs: BackendInputs) -> Choice:
        draft = PlanDraft(inputs)
        draft.include(super().requested(inputs).plan)
        draft.warn("cpu-only", "CPU-only build with OpenBLAS: the wheel will not offload any layer to a GPU")
        return Choice(self.name, draft.result())

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        self._plan(draft)
        return draft.result()

    def _plan(self, planner: PlanDraft) -> None:
        openblas, cmake = planner.facts.openblas, table()["cmake"]
        for arg in cmake["args"]:
            planner.add_cmake_arg(arg)
        planner.decide("BLAS", "OpenBLAS (" + " ".join(cmake["args"]) + ")", cmake["source"])
        if not openblas.library or not openblas.cblas_header:
            lacking = " and ".join(w for w in missing(openblas) if w != "pkg-config")
            planner.block("openblas-missing", f"backend openblas asked for, but {lacking} was not found: CMake's "
                          f"find_package(BLAS) stops with 'BLAS not found'; install it ({install_line(planner.platform)})")
        else:
            planner.decide("OpenBLAS", f"{openblas.library}; {openblas.cblas_header}",
                           f"pkg-config module {openblas.pkg_config_module}" if openblas.pkg_config_module
                           else "found in the folders ggml-blas's CMakeLists searches")
            self._prefix(planner, openblas)
        if not openblas.pkg_config.found:
            planner.block("pkg-config-missing", "no pkg-config found: ggml-blas's CMakeLists runs "
                          f"find_package(PkgConfig REQUIRED) to find cblas.h ({cmake['pkg_config_source']}); install "
                          f"it ({install_line(planner.platform)})")

    def _prefix(self, planner: PlanDraft, openblas: OpenBlas) -> None:
        """An OpenBLAS outside the standard folders (Homebrew's keg-only one, a conda environment) is found only
        through CMAKE_PREFIX_PATH (the library) and PKG_CONFIG_PATH (its openblas.pc)."""
        folder = Path(openblas.library).parent
        if str(folder) in STANDARD_LIB_DIRS or folder.parent == Path("/usr/lib"):
            return
        prefix = folder.parent
        planner.add_cmake_arg(f"-DCMAKE_PREFIX_PATH={prefix.as_posix()}")
        planner.env["PKG_CONFIG_PATH"] = (folder / "pkgconfig").as_posix()
        planner.decide("OpenBLAS prefix", prefix.as_posix(), "outside the folders CMake and pkg-config search by "
                       "themselves: CMAKE_PREFIX_PATH and PKG_CONFIG_PATH point at it")

    def wheel_fit(self, requirements: Mapping[str, Any], facts: Facts) -> WheelFit:
        """Its ggml-blas links the OpenBLAS library: a machine without one cannot load the wheel."""
        if not facts.openblas.library:
            return WheelFit(False, "no OpenBLAS library was detected (its ggml-blas links libopenblas)")
        return WheelFit(True, f"runs on the CPU with OpenBLAS {facts.openblas.library}")

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        """The OpenBLAS library a link would use, its cblas.h and pkg-config."""
        return {"openblas": detect_openblas(context.environ, context.search_path, context.runner)}


# ---------------------------------------------------------------- detecting: probes


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
