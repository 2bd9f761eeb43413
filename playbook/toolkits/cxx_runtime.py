"""Copies of the C++ runtime inside a wheel's libraries, and a C++ compiler that links the runtime shared.

A compiler whose ``-lstdc++`` finds only ``libstdc++.a`` (a relocated GCC whose ``libstdc++.so`` link dangles,
or ``-static-libstdc++`` among its flags) links the C++ runtime into a shared library of the wheel and exports
it from there. The Python process loads the shared libstdc++.so.6 as well (numpy links it), so two C++
runtimes serve one process, and which one a call reaches depends on load order. When the two differ in
version, llama.cpp crashes at model load in print_info's first std::stringstream: a GPU machine's
CXX=/opt/gcc/bin/g++ (GCC 13.3's libstdc++.a in libggml-rpc.so, Ubuntu's libstdc++.so.6.0.33 loaded beside it)
did that to a CPU+RPC wheel on 2026-11-25 (scripts/gpu-cxx-runtime-check.sh). Where the versions match (g++ 12
with -static-libstdc++ here) the same wheel happens to run.

A library carries the runtime when its dynamic symbols define std::locale::classic(), which only the runtime
itself defines. ``readelf`` (binutils, there wherever GCC links) reads them.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from playbook.files import sha256_of
from playbook.process import run_captured

RUNTIME_SYMBOL = "_ZNSt6locale7classicEv"  # std::locale::classic()
PROBE_SOURCE = '#include <sstream>\nint probe() { std::ostringstream s; s << 1; return (int)s.str().size(); }\n'
# The C compiler that goes with a C++ compiler of the same folder, by the C++ compiler's name.
C_COMPILER_FOR = {"g++": "gcc", "c++": "cc", "clang++": "clang"}
CXX_COMPILER_NAME = re.compile(r"(c\+\+|g\+\+|clang\+\+)(-\d+)?")


@dataclass
class RuntimeCopies:
    """Which of a wheel's shared libraries carry their own copy of the C++ runtime, and the shared runtime the
    process loads beside them."""

    libraries: list[str] = field(default_factory=list)
    """File names of the libraries that define (and export) the runtime's symbols themselves."""
    checked: list[str] = field(default_factory=list)
    """Every shared library read."""
    shared_runtime: str = ""
    """The libstdc++.so the process mapped (the import probe's list); "" when it mapped none."""
    error: str = ""
    """Why a library could not be read ("" when all were)."""

    @property
    def clash(self) -> bool:
        """Two runtimes in one process: a library's own copy beside the shared one, or two libraries' copies."""
        return len(self.libraries) + bool(self.shared_runtime) >= 2


def defines_runtime(library: Path, timeout_s: float = 60) -> bool | None:
    """Whether the library's dynamic symbol table defines the C++ runtime; None when readelf cannot read it."""
    listed = run_captured(["readelf", "--dyn-syms", "--wide", str(library)], timeout_s=timeout_s)
    if listed.returncode != 0:
        return None
    for line in listed.stdout.splitlines():
        fields = line.split()  # Num: Value Size Type Bind Vis Ndx Name[@version]
        if len(fields) >= 8 and fields[7].split("@")[0] == RUNTIME_SYMBOL and fields[6] != "UND":
            return True
    return False


def shared_libraries(folder: Path) -> list[Path]:
    """The ELF shared libraries in a folder (``lib*.so``, ``lib*.so.0``), each once: symlinks are left out, and
    of identical files (pip installs a wheel's ``libggml.so``, ``.so.0`` and ``.so.0.25.3`` as three copies)
    the shortest name is kept."""
    files = sorted((p for p in folder.glob("*.so*") if p.is_file() and not p.is_symlink()),
                   key=lambda p: (len(p.name), p.name))
    unique: dict[str, Path] = {}
    for path in files:
        unique.setdefault(sha256_of(path), path)
    return sorted(unique.values())


def runtime_copies(folder: Path, mapped: list[str] | None = None) -> RuntimeCopies:
    """Read every shared library in ``folder`` (the installed wheel's ``llama_cpp/lib``); ``mapped`` is what the
    process mapped of the runtime libraries (the import probe's ``runtime_libraries``)."""
    copies = RuntimeCopies(shared_runtime=next((m for m in mapped or [] if "libstdc++.so" in Path(m).name), ""))
    for library in shared_libraries(folder):
        copies.checked.append(library.name)
        defined = defines_runtime(library)
        if defined is None:
            copies.error = f"readelf could not read {library.name}"
        elif defined:
            copies.libraries.append(library.name)
    return copies


def runtime_linkage(cxx: str, timeout_s: float = 120) -> bool | None:
    """Whether a shared library that ``cxx`` links leaves the C++ runtime to ``libstdc++.so`` (True) or copies
    it in (False), read from one probe library it compiles and links (a fraction of a second); None when
    ``cxx`` cannot link one or readelf cannot read it (no binutils: macOS)."""
    if shutil.which("readelf") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="playbook-cxx-") as work:
        source, library = Path(work) / "probe.cpp", Path(work) / "libprobe.so"
        source.write_text(PROBE_SOURCE, encoding="utf-8")
        built = run_captured([cxx, "-shared", "-fPIC", "-o", str(library), str(source)], timeout_s=timeout_s)
        if built.returncode != 0:
            return None
        defined = defines_runtime(library)
        return None if defined is None else not defined


def links_runtime_shared(cxx: str, timeout_s: float = 120) -> bool:
    """Whether a shared library that ``cxx`` links leaves the C++ runtime to ``libstdc++.so`` (compiles one)."""
    return runtime_linkage(cxx, timeout_s) is True


def is_cxx_compiler(name: str) -> bool:
    """Whether a compiler's name (or path) is a C++ compiler's: ``c++``, ``g++-13``, ``/opt/gcc/bin/clang++``."""
    return CXX_COMPILER_NAME.fullmatch(Path(name).name) is not None


@dataclass(frozen=True)
class Compilers:
    """A C and C++ compiler pair from one folder."""

    c: str
    cxx: str


def c_compiler_beside(cxx: Path) -> Path | None:
    """The C compiler of a C++ compiler's folder (``g++-13`` -> ``gcc-13``); None when ``cxx`` is no C++
    compiler's name."""
    family, _, version = cxx.name.partition("-")
    c_name = C_COMPILER_FOR.get(family)
    return cxx.with_name(c_name + (f"-{version}" if version else "")) if c_name else None


def compilers_with_shared_runtime(candidates: list[str], avoid: str = "") -> Compilers | None:
    """The first candidate C++ compiler (not ``avoid``, the one that copied the runtime) that links the runtime
    shared, with the C compiler of its folder; None when none does. Candidates that are no C++ compiler's
    name (gcc, cc) are passed over."""
    avoided = Path(avoid).resolve() if avoid else None
    for candidate in candidates:
        path = shutil.which(candidate)
        if path is None:
            continue
        c = c_compiler_beside(Path(path))
        if c is None or (avoided and Path(path).resolve() == avoided):
            continue
        if c.is_file() and links_runtime_shared(path):
            return Compilers(str(c), path)
    return None
