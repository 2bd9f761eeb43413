"""CUDA toolkits assembled from NVIDIA's PyPI wheels (``cuda.toolkit: pypi:<release>``).

NVIDIA publishes each CUDA release's components as wheels (nvidia-cuda-nvcc, nvidia-cuda-runtime,
nvidia-cublas, nvidia-cuda-cccl, ...; ``-cu12`` names for 12.x). The pins (version, file, sha256)
are data: ``playbook/knowledge/cuda_wheels.yaml``, written by ``scripts/pin-cuda-wheels.py``.
:func:`provision` downloads the pinned wheels with pip (``--require-hashes``) into the playbook's
cache and lays them out as ONE toolkit root (``bin/``, ``include/``, ``lib/`` and ``lib64``, ``nvvm/``,
``libcudart.so``-style links) that nvcc and CMake's FindCUDAToolkit accept. A root is never changed
once assembled: another set of components is another root, and the same set is reused.

Every 12.x nvcc wheel ships ptxas, libnvvm and the crt headers but no nvcc driver (nor cicc,
cudafe++, fatbinary, nvlink), so a 12.x release gives components to add to an installed toolkit of
the same version (``base``), never a compiler of its own; 13.x wheels hold the whole compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import stat
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from playbook.errors import PlaybookError
from playbook.files import atomic_write_text, sha256_of
from playbook.knowledge.compatibility import knowledge
from playbook.process import run_captured

SPEC_PREFIX = "pypi:"
PINS_FILE = "cuda_wheels.yaml"
# What a toolkit of its own needs to build llama.cpp's CUDA backend.
COMPILER_COMPONENTS = ("nvcc", "crt", "nvvm", "cudart", "cccl", "cublas", "nvrtc")
MARKER = "playbook-toolkit.json"  # written last: a root without it is incomplete (detect looks for it)
DOWNLOAD_TIMEOUT_S = 3600


class ToolkitError(PlaybookError):
    """A PyPI toolkit that cannot be named, downloaded or assembled; the message says what to do."""


@dataclass(frozen=True)
class PinnedWheel:
    component: str  # nvcc, crt, nvvm, cudart, cccl, cublas, cuobjdump
    package: str
    version: str
    file: str
    sha256: str
    note: str = ""  # why this component comes from another release than its neighbours

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Release:
    release: str  # "13.0"
    metapackage: str  # "cuda-toolkit==13.0.2", whose extras name the component versions
    has_compiler: bool
    wheels: dict[str, PinnedWheel]


@dataclass(frozen=True)
class ToolkitRequest:
    """Which components of which release go into one root, on top of ``base`` (an installed toolkit
    whose files are taken as they are) when given."""

    release: str
    components: tuple[str, ...]
    base: str = ""

    @property
    def spec(self) -> str:
        return SPEC_PREFIX + self.release


@dataclass
class ProvisionedToolkit:
    root: str
    release: str
    base: str
    wheels: list[PinnedWheel]
    reused: bool
    duration_s: float
    nvcc: str = ""
    notes: list[str] = field(default_factory=list)


def platform_key(system: str | None = None, machine: str | None = None) -> str:
    system = (system or platform.system()).lower()
    machine = (machine or platform.machine()).lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return f"{system}-{machine}"


def releases(key: str | None = None) -> dict[str, Release]:
    """Every pinned release for platform ``key`` (default: this machine), oldest first."""
    key = key or platform_key()
    found: dict[str, Release] = {}
    for name, row in knowledge(Path(PINS_FILE).stem)["releases"].items():
        wheels = {component: PinnedWheel(component, str(w["package"]), str(w["version"]), str(w["file"]),
                                         str(w["sha256"]), str(w.get("note", "")))
                  for component, w in (row.get(key) or {}).items()}
        if wheels:
            found[str(name)] = Release(str(name), str(row["metapackage"]), bool(row["has_compiler"]), wheels)
    return dict(sorted(found.items(), key=lambda item: _version(item[0])))


def is_pypi_spec(text: str) -> bool:
    return text.strip().lower().startswith(SPEC_PREFIX)


def release_of(spec: str) -> str:
    """``pypi:12.8`` -> ``12.8``; ``pypi:13.0.2`` -> ``13.0``."""
    match = re.fullmatch(r"pypi:(\d+)\.(\d+)(?:\.\d+)*", spec.strip().lower())
    if not match:
        raise ToolkitError(f"cuda.toolkit {spec!r}: write pypi:<major>.<minor>, e.g. pypi:13.0")
    return f"{match.group(1)}.{match.group(2)}"


def release(name: str, key: str | None = None) -> Release:
    known = releases(key)
    if name not in known:
        raise ToolkitError(f"CUDA {name} has no pinned PyPI wheels for {key or platform_key()}; pinned releases: "
                           f"{', '.join(known) or 'none'} (playbook/knowledge/{PINS_FILE})")
    return known[name]


def compiler_releases(key: str | None = None) -> list[str]:
    """Releases whose wheels make a toolkit of their own (nvcc driver included), oldest first."""
    return [name for name, r in releases(key).items() if r.has_compiler]


def check_spec(spec: str, key: str | None = None) -> Release:
    """The release a ``pypi:`` spec names, refused with the reason when it cannot build on its own."""
    found = release(release_of(spec), key)
    if not found.has_compiler:
        raise ToolkitError(
            f"cuda.toolkit {spec}: NVIDIA's PyPI wheels for CUDA {found.release} hold ptxas, libnvvm and headers "
            "but no nvcc driver, so they cannot compile on their own; use one of "
            f"{', '.join('pypi:' + r for r in compiler_releases(key))}, or an installed CUDA {found.release} "
            "(its missing cuBLAS or CCCL the playbook can add from PyPI)")
    return found


def full_request(spec: str, key: str | None = None) -> ToolkitRequest:
    found = check_spec(spec, key)
    return ToolkitRequest(found.release, tuple(c for c in COMPILER_COMPONENTS if c in found.wheels))


def component_request(version: str, components: list[str], base: str, key: str | None = None) -> ToolkitRequest | None:
    """``components`` of the release ``version`` belongs to, added to the installed toolkit at ``base``;
    None when PyPI has no such release or component."""
    name = ".".join(version.split(".")[:2])
    found = releases(key).get(name)
    if found is None or not all(c in found.wheels for c in components):
        return None
    return ToolkitRequest(name, tuple(components), base)


def with_components(request: ToolkitRequest, extra: list[str]) -> ToolkitRequest:
    return ToolkitRequest(request.release, tuple(dict.fromkeys([*request.components, *extra])), request.base)


def toolkits_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / "toolkits"


def root_for(request: ToolkitRequest, cache_dir: Path, key: str | None = None) -> Path:
    """Where ``request``'s root lives: the same components on the same base give the same folder."""
    wheels = _wheels(request, key)
    identity = json.dumps({"base": request.base, "wheels": sorted(w.sha256 for w in wheels)})
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return toolkits_dir(cache_dir) / f"cuda-{request.release}-{digest}"


def nvcc_of(root: Path) -> Path:
    return Path(root) / "bin" / ("nvcc.exe" if os.name == "nt" else "nvcc")


def provision(request: ToolkitRequest, cache_dir: Path, *, python: str = sys.executable,
              key: str | None = None, log: Any = None) -> ProvisionedToolkit:
    """The assembled root for ``request``, downloading and assembling it unless it exists."""
    started = time.monotonic()
    wheels = _wheels(request, key)
    root = root_for(request, cache_dir, key)
    say = log or (lambda _line: None)
    if (root / MARKER).is_file():
        say(f"reusing CUDA {request.release} toolkit at {root}")
        return ProvisionedToolkit(str(root), request.release, request.base, wheels, True,
                                  time.monotonic() - started, _nvcc_text(root))
    files = download(wheels, toolkits_dir(cache_dir) / "wheels", python=python, log=say)
    partial = root.with_name(root.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    notes: list[str] = []
    if request.base:
        _copy_base(Path(request.base), partial)
        notes.append(f"files of the installed toolkit {request.base}")
    for wheel in wheels:
        say(f"unpacking {wheel.file}")
        _unpack(files[wheel.component], partial)
    notes += _links(partial)
    atomic_write_text(partial / MARKER, json.dumps({
        "release": request.release, "base": request.base,
        "wheels": [w.__dict__ for w in wheels]}, indent=1))
    if root.exists():  # an incomplete root of an interrupted run
        shutil.rmtree(root)
    partial.rename(root)
    say(f"assembled CUDA {request.release} toolkit at {root}")
    return ProvisionedToolkit(str(root), request.release, request.base, wheels, False,
                              time.monotonic() - started, _nvcc_text(root), notes)


def download(wheels: list[PinnedWheel], folder: Path, *, python: str = sys.executable,
             log: Any = None) -> dict[str, Path]:
    """Each pinned wheel in ``folder`` (pip checks every sha256; a file already there is checked again)."""
    folder.mkdir(parents=True, exist_ok=True)
    say = log or (lambda _line: None)
    missing = [w for w in wheels if not _good(folder / w.file, w.sha256)]
    if missing:
        requirements = folder / f"requirements-{os.getpid()}.txt"
        requirements.write_text("".join(f"{w.requirement}\n" for w in missing), encoding="utf-8")
        say("downloading " + ", ".join(f"{w.package}=={w.version}" for w in missing))
        try:
            done = run_captured([python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                 "--require-hashes", "--progress-bar", "off", "-r", str(requirements),
                                 "-d", str(folder)], timeout_s=DOWNLOAD_TIMEOUT_S)
        finally:
            requirements.unlink(missing_ok=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            raise ToolkitError(f"pip could not download the CUDA wheels ({', '.join(w.package for w in missing)}):\n"
                               f"{tail}\nan offline machine needs them in {folder} (same file names)")
    for wheel in missing:  # the others were checked above
        if not _good(folder / wheel.file, wheel.sha256):
            raise ToolkitError(f"{folder / wheel.file} is missing or its sha256 is not the pinned {wheel.sha256}")
    return {w.component: folder / w.file for w in wheels}


def provenance(toolkit: ProvisionedToolkit) -> dict[str, Any]:
    """What a run folder records about a provisioned toolkit."""
    return {"root": toolkit.root, "release": toolkit.release, "base": toolkit.base, "reused": toolkit.reused,
            "nvcc": toolkit.nvcc, "duration_s": round(toolkit.duration_s, 1),
            "wheels": [{"package": w.package, "version": w.version, "file": w.file, "sha256": w.sha256,
                        "uri": f"pkg:pypi/{w.package}@{w.version}"} for w in toolkit.wheels]}


# ---------------------------------------------------------------------------------------- internals

def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _wheels(request: ToolkitRequest, key: str | None) -> list[PinnedWheel]:
    found = release(request.release, key)
    absent = [c for c in request.components if c not in found.wheels]
    if absent:
        raise ToolkitError(f"CUDA {request.release} on PyPI has no {', '.join(absent)} wheel "
                           f"(pinned: {', '.join(found.wheels)})")
    return [found.wheels[c] for c in request.components]


def _good(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_of(path) == sha256


def _nvcc_text(root: Path) -> str:
    return str(nvcc_of(root)) if nvcc_of(root).is_file() else ""


def _copy_base(base: Path, target: Path) -> None:
    """The installed toolkit's files, hard-linked where the file system allows (else copied); its links
    stay links. nvcc finds its own tools next to itself, so bin/ must hold files, not links to base."""
    if not (base / "bin").is_dir() and not (base / "include").is_dir():
        raise ToolkitError(f"{base} is not a CUDA toolkit root (no bin/ or include/)")
    shutil.copytree(base, target, symlinks=True, dirs_exist_ok=True, copy_function=_link_or_copy)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _member_target(name: str) -> PurePosixPath | None:
    """Where a wheel member goes in the root: ``nvidia/cu13/bin/nvcc`` -> ``bin/nvcc`` and
    ``nvidia/cuda_runtime/lib/libcudart.so.12`` -> ``lib/libcudart.so.12``; None for packaging files."""
    parts = PurePosixPath(name).parts
    if len(parts) < 3 or parts[0] != "nvidia" or name.endswith("/"):
        return None
    inner = PurePosixPath(*parts[2:])
    if inner.name == "__init__.py" or inner.parts[0] in (".metadata", "__pycache__"):
        return None
    return inner


def _unpack(wheel: Path, root: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            inner = _member_target(info.filename)
            if inner is None:
                continue
            target = root.joinpath(*inner.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()  # a hard link into the base toolkit: never write through it
            with archive.open(info) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
            mode = (info.external_attr >> 16) & 0o777
            if mode & stat.S_IXUSR or inner.parts[0] in ("bin",) or "/bin/" in inner.as_posix():
                target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _links(root: Path) -> list[str]:
    """The links an installer makes and wheels lack: ``lib64`` beside ``lib``, ``libX.so`` -> ``libX.so.N``."""
    notes: list[str] = []
    if os.name == "nt":
        return notes
    lib, lib64 = root / "lib", root / "lib64"
    if lib.is_dir() and not lib64.exists() and not lib64.is_symlink():
        lib64.symlink_to("lib", target_is_directory=True)
        notes.append("lib64 -> lib")
    elif lib.is_dir() and lib64.is_dir() and not lib64.is_symlink():
        for item in lib.iterdir():  # a base toolkit with two real folders: wheel libraries go to both
            twin = lib64 / item.name
            if item.is_file() and not twin.exists():
                _link_or_copy(str(item), str(twin))
    for folder in {p.resolve() for p in (lib, lib64, root / "nvvm" / "lib64") if p.is_dir()}:
        for versioned in sorted(folder.glob("lib*.so.*")):
            plain = versioned.with_name(versioned.name.split(".so.")[0] + ".so")
            if not plain.exists() and not plain.is_symlink():
                plain.symlink_to(versioned.name)
                notes.append(f"{plain.name} -> {versioned.name}")
    return notes
