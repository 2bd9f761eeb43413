"""Intel oneMKL: the CPU build with llama.cpp's BLAS backend on MKL (``-DGGML_BLAS=ON
-DGGML_BLAS_VENDOR=Intel10_64lp``), which hands large matrix products (prompt processing) to MKL. Offloads nothing.

MKL comes from Intel's PyPI wheels, pinned with their sha256 in ``knowledge/mkl.yaml`` (mkl, mkl-include, mkl-devel
and intel-openmp, whose libiomp5 is the Intel threading layer's runtime), and is laid out like the CUDA toolkits
assembled from PyPI: build downloads the pinned wheels (pip checks every sha256) and assembles ONE root,
``<cache>/toolkits/mkl-<version>/`` (``lib/``, ``include/``, a marker file written last), adding the unversioned
links a link needs (``libmkl_core.so`` -> ``libmkl_core.so.3``: the wheels ship versioned names only). CMake's
FindBLAS finds the libraries through ``MKLROOT``; ``BLAS_INCLUDE_DIRS`` gives ggml-blas the folder of ``mkl.h``;
the built wheel finds MKL at run time through ``LD_LIBRARY_PATH``. ``mkl.root`` names an installed oneMKL instead.

Reads detect's ``mkl`` (what :meth:`MklBackend.probe` found: ``mkl.root``, ``$MKLROOT`` or an assembled root) and
``os`` (MKL exists for x86_64 only).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from playbook.backends.base import Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.errors import ParameterError
from playbook.facts import Mkl
from playbook.files import atomic_write_text
from playbook.knowledge import compatibility
from playbook.probing import ProbeContext
from playbook.toolkits.pypi import (
    MARKER,
    PinnedWheel,
    ProvisionedToolkit,
    ToolkitError,
    ToolkitRequest,
    download,
    platform_key,
    toolkits_dir,
)

ROOT_PREFIX = "mkl-"  # <cache>/toolkits/mkl-<version>
# Where a root keeps its libraries: the wheels' and conda's lib/, oneAPI's older lib/intel64.
LIB_SUBDIRS = ("lib", "lib/intel64")
# What a root takes from the wheels: shared libraries, headers, CMake and pkg-config files; not the static
# libraries nor the debug symbols (most of the wheels' size, never linked here).
SKIPPED_SUFFIXES = (".a", ".dbg")


@dataclass(frozen=True)
class MklSettings:
    """The ``mkl:`` parameter section."""

    root: str = ""
    """An installed oneMKL to build with (oneAPI's /opt/intel/oneapi/mkl/latest, a conda prefix): the folder holding
    lib/ and include/. Empty: Intel's PyPI wheels pinned in knowledge/mkl.yaml, assembled in the playbook's cache."""
    version: str = ""
    """Which pinned PyPI release to assemble; empty: knowledge/mkl.yaml's default."""


def table() -> dict[str, Any]:
    return compatibility.knowledge("mkl")


def pinned_versions(key: str | None = None) -> list[str]:
    """The releases pinned for platform ``key`` (default: this machine)."""
    key = key or platform_key()
    return [str(v) for v, rows in table()["wheels"].items() if rows.get(key)]


def pinned_wheels(version: str, key: str | None = None) -> list[PinnedWheel]:
    key = key or platform_key()
    rows = (table()["wheels"].get(version) or {}).get(key) or {}
    if not rows:
        raise ToolkitError(f"oneMKL {version} has no pinned PyPI wheels for {key}; pinned: "
                           f"{', '.join(pinned_versions(key)) or 'none'} (playbook/knowledge/mkl.yaml)")
    return [PinnedWheel(str(part), str(w["package"]), str(w["version"]), str(w["file"]), str(w["sha256"]))
            for part, w in rows.items()]


def wanted_version(settings: MklSettings) -> str:
    return settings.version or str(table()["default_version"])


def root_for(version: str, cache_dir: Path) -> Path:
    return toolkits_dir(cache_dir) / f"{ROOT_PREFIX}{version}"


def lib_dir(root: Path) -> Path:
    """The folder of a root's libraries (lib/ of the wheels and conda, lib/intel64 of older oneAPI releases)."""
    return next((root / sub for sub in LIB_SUBDIRS[::-1] if (root / sub / "libmkl_core.so").exists()), root / "lib")


# ---------------------------------------------------------------------------------------- detecting

def inspect_root(root: Path, origin: str) -> Mkl:
    """What a candidate root holds: the link names FindBLAS asks for, mkl.h, the version mkl_version.h states."""
    cmake = table()["cmake"]
    libs = lib_dir(root)
    found = [name for name in cmake["libraries"] if (libs / f"lib{name}.so").exists()]
    header = root / "include" / cmake["header"]
    return Mkl(root=str(root), origin=origin, version=header_version(root / "include" / "mkl_version.h"),
               libraries=found, missing=[f"lib{n}.so" for n in cmake["libraries"] if n not in found],
               header=str(header) if header.is_file() else "")


def header_version(path: Path) -> str:
    """``2026.2.0`` from mkl_version.h's INTEL_MKL_VERSION (20260200: year, update, patch, as the packages are
    numbered; its __INTEL_MKL_MINOR__ stays 0)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    match = re.search(r"#define\s+INTEL_MKL_VERSION\s+(\d{4})(\d{2})(\d{2})\b", text)
    return ".".join(str(int(part)) for part in match.groups()) if match else ""


def find_mkl(root_setting: str, environ: Mapping[str, str], cache_dir: Path | None) -> Mkl:
    """The oneMKL a build would use: ``mkl.root`` when set, else ``$MKLROOT``, else the newest root the playbook
    assembled in its cache; an empty :class:`Mkl` when there is none (the plan then assembles one)."""
    if root_setting:
        return inspect_root(Path(root_setting), "mkl.root")
    if environ.get("MKLROOT"):
        return inspect_root(Path(environ["MKLROOT"]), "MKLROOT")
    if cache_dir is None:  # detect asked to look in no cache
        return Mkl()
    assembled = sorted((p for p in toolkits_dir(cache_dir).glob(f"{ROOT_PREFIX}*") if (p / MARKER).is_file()),
                       key=lambda p: [int(n) for n in re.findall(r"\d+", p.name)])
    return inspect_root(assembled[-1], "assembled") if assembled else Mkl()


# ---------------------------------------------------------------------------------------- assembling

def member_target(name: str) -> PurePosixPath | None:
    """Where a wheel member goes in the root: ``mkl-2026.2.0.data/data/lib/libmkl_core.so.3`` ->
    ``lib/libmkl_core.so.3`` (the wheels install into the environment's prefix); None for what a root leaves out."""
    parts = PurePosixPath(name).parts
    if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data" or name.endswith("/"):
        return None
    inner = PurePosixPath(*parts[2:])
    if inner.parts[0] not in ("lib", "include") or inner.name.endswith(SKIPPED_SUFFIXES):
        return None
    return inner


def unpack(wheel: Path, root: Path) -> int:
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            inner = member_target(info.filename)
            if inner is None:
                continue
            target = root.joinpath(*inner.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
            if (info.external_attr >> 16) & stat.S_IXUSR:
                target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            count += 1
    return count


def link_names(root: Path) -> list[str]:
    """``libX.so`` -> ``libX.so.N`` for every versioned library without its link name (FindBLAS's find_library
    looks for ``libmkl_core.so``; the wheels ship ``libmkl_core.so.3`` only)."""
    notes = []
    lib = root / "lib"
    for versioned in sorted(lib.glob("lib*.so.*")):
        plain = versioned.with_name(versioned.name.split(".so.")[0] + ".so")
        if not plain.exists() and not plain.is_symlink():
            plain.symlink_to(versioned.name)
            notes.append(f"{plain.name} -> {versioned.name}")
    return notes


def assemble_root(version: str, cache_dir: Path, *, python: str, log: Callable[[str], None] | None = None,
             key: str | None = None) -> ProvisionedToolkit:
    """The assembled root of oneMKL ``version``, downloading and assembling it unless it exists."""
    started = time.monotonic()
    say = log or (lambda _line: None)
    wheels = pinned_wheels(version, key)
    root = root_for(version, cache_dir)
    if (root / MARKER).is_file():
        say(f"reusing oneMKL {version} at {root}")
        return ProvisionedToolkit(str(root), version, "", wheels, True, time.monotonic() - started)
    files = download(wheels, toolkits_dir(cache_dir) / "wheels", python=python, log=say)
    partial = root.with_name(root.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for wheel in wheels:
        say(f"unpacking {wheel.file}")
        unpack(files[wheel.component], partial)
    notes = link_names(partial)
    atomic_write_text(partial / MARKER, json.dumps({"toolkit": "oneMKL", "release": version,
                                                    "wheels": [w.__dict__ for w in wheels], "links": notes}, indent=1))
    if root.exists():  # an incomplete root of an interrupted run
        shutil.rmtree(root)
    partial.rename(root)
    say(f"assembled oneMKL {version} at {root}")
    return ProvisionedToolkit(str(root), version, "", wheels, False, time.monotonic() - started, "", notes)


# ---------------------------------------------------------------------------------------- the unit

class MklBackend(BackendUnit):
    name = "mkl"
    cmake_switch = "-DGGML_BLAS=ON"
    settings_type = MklSettings
    facts_read = ("mkl", "os")
    knowledge = ("mkl.yaml",)
    profile = "mkl"
    offloads = False
    ggml_library = "ggml-blas"
    ggml_device = "BLAS"
    platforms = ("linux", "wsl")
    status = "runs here"

    def assemble(self, request: ToolkitRequest, cache_dir: Path, *, python: str,
                 log: Callable[[str], None] | None = None) -> ProvisionedToolkit:
        return assemble_root(request.release, cache_dir, python=python, log=log)

    def check_settings(self, settings: MklSettings) -> None:
        if settings.version and settings.version not in pinned_versions():
            raise ParameterError(f"mkl.version {settings.version!r} has no pinned wheels; use one of "
                                 f"{', '.join(pinned_versions()) or 'none'} (playbook/knowledge/mkl.yaml), or empty")

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        settings = context.settings if isinstance(context.settings, MklSettings) else MklSettings()
        return {"mkl": find_mkl(settings.root, context.environ, context.cache_dir)}

    def assess(self, inputs: BackendInputs) -> Assessment:
        machine = inputs.facts.os.machine
        if machine.lower() not in table()["machines"]:
            return Assessment(blocked_because=f"oneMKL exists for x86_64 only, this machine is {machine}")
        if inputs.settings.root:
            mkl = inputs.facts.mkl
            if mkl.root == inputs.settings.root and not mkl.found:
                return Assessment(blocked_because=f"mkl.root {mkl.root} lacks {', '.join(lacking(mkl))}")
            return Assessment(f"oneMKL at {inputs.settings.root}")
        return Assessment(f"oneMKL {wanted_version(inputs.settings)} from Intel's PyPI wheels (assembled at build)")

    def requested(self, inputs: BackendInputs) -> Choice:
        draft = PlanDraft(inputs)
        draft.include(super().requested(inputs).plan)
        draft.warn("cpu-only", "CPU-only build with oneMKL: the wheel will not offload any layer to a GPU")
        return Choice(self.name, draft.result())

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        draft = PlanDraft(inputs)
        cmake = table()["cmake"]
        for arg in cmake["args"]:
            draft.add_cmake_arg(arg)
        draft.decide("BLAS", "Intel oneMKL (" + " ".join(cmake["args"]) + ")", cmake["source"])
        machine = inputs.facts.os.machine
        if machine.lower() not in table()["machines"]:
            draft.block("mkl-unsupported-machine", f"oneMKL exists for x86_64 only, this machine is {machine} "
                        f"({table()['machines_source']}); use backend: openblas")
        root = self._installed(draft) if inputs.settings.root else self._from_pypi(draft)
        draft.env["MKLROOT"] = root.as_posix()
        draft.add_cmake_arg(f"-DBLAS_INCLUDE_DIRS={(root / 'include').as_posix()}")
        draft.runtime_env["LD_LIBRARY_PATH"] = lib_dir(root).as_posix()
        draft.decide("MKL at build and run time", root.as_posix(),
                     f"FindBLAS finds {', '.join('lib' + n for n in cmake['libraries'])} through MKLROOT "
                     f"({cmake['find_blas_source']}); BLAS_INCLUDE_DIRS gives ggml-blas mkl.h "
                     f"({cmake['include_source']}); the wheel finds MKL through LD_LIBRARY_PATH")
        return draft.result()

    def _from_pypi(self, draft: PlanDraft) -> Path:
        version = wanted_version(draft.settings)
        root = root_for(version, draft.inputs.cache_dir)
        wheels = pinned_wheels(version) if version in pinned_versions() else []
        draft.toolkit_request = ToolkitRequest(version, tuple(w.component for w in wheels))
        mkl = draft.facts.mkl
        reused = mkl.origin == "assembled" and Path(mkl.root) == root and mkl.found
        draft.decide("oneMKL", f"{version} from PyPI: " + ", ".join(f"{w.package}=={w.version}" for w in wheels),
                     ("assembled already at " if reused else "build downloads them (sha256 pinned in "
                      "knowledge/mkl.yaml) and assembles them at ") + root.as_posix())
        if mkl.origin == "MKLROOT" and mkl.found:
            draft.decide("installed oneMKL not used", mkl.root, "MKLROOT names it; set mkl.root to build with it "
                         "instead of the pinned wheels")
        return root

    def _installed(self, draft: PlanDraft) -> Path:
        root, mkl = Path(draft.settings.root), draft.facts.mkl
        if mkl.root == draft.settings.root and not mkl.found:
            draft.block("mkl-missing", f"mkl.root {mkl.root} lacks {', '.join(lacking(mkl))}: CMake's "
                        "find_package(BLAS) stops with 'BLAS not found'; point mkl.root at the folder holding "
                        "lib/ and include/ (oneAPI: /opt/intel/oneapi/mkl/latest), or leave it empty for the "
                        "pinned PyPI wheels")
        draft.decide("oneMKL", f"{mkl.version or 'installed'} at {root.as_posix()}", "mkl.root")
        return root


def lacking(mkl: Mkl) -> list[str]:
    return [*mkl.missing, *([] if mkl.header else [table()["cmake"]["header"]])]
