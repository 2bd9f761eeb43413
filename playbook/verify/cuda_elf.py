"""Which GPU architectures a CUDA wheel holds machine code for: ``cuobjdump --list-elf`` on its ggml-cuda
library. It needs no GPU, so a wheel built on a machine without one (a CI or Docker builder) is checked
too. cuobjdump comes from the plan's toolkit, else from NVIDIA's PyPI wheel (``nvidia-cuda-cuobjdump``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from playbook.files import first_file
from playbook.process import run_captured
from playbook.toolkits import pypi

ELF_LINE = re.compile(r"^ELF file\s+\d+:\s+(\S+)", re.MULTILINE)
SM = re.compile(r"\.sm_(\d+[a-z]?)\.")
LIBRARY_GLOBS = ("libggml-cuda.so*", "ggml-cuda.dll", "libggml-cuda.dylib")


@dataclass
class CudaElf:
    library: str = ""
    cuobjdump: str = ""
    architectures: list[str] = field(default_factory=list)  # "sm_86", "sm_120a"
    elf_files: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)  # from the plan's CMAKE_CUDA_ARCHITECTURES
    missing: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.architectures) and not self.missing


def parse_list_elf(text: str) -> tuple[list[str], list[str]]:
    """(architectures, ELF file names) from ``cuobjdump --list-elf`` output, each architecture once."""
    files = ELF_LINE.findall(text)
    archs = [f"sm_{m.group(1)}" for name in files if (m := SM.search(name))]
    return list(dict.fromkeys(archs)), files


def expected_architectures(cmake_architectures: str) -> list[str]:
    """The SASS a CMAKE_CUDA_ARCHITECTURES list asks for: ``86;120a-real;90-virtual`` -> sm_86, sm_120a."""
    wanted = []
    for item in filter(None, cmake_architectures.split(";")):
        number, _, kind = item.partition("-")
        if kind != "virtual" and re.fullmatch(r"\d+[a-z]?", number):
            wanted.append(f"sm_{number}")
    return wanted


def find_library(site_dir: Path) -> Path | None:
    return first_file(site_dir, LIBRARY_GLOBS)


def find_cuobjdump(toolkit_root: str, cache_dir: Path) -> Path:
    """The toolkit's own cuobjdump, else the newest one on PyPI (any release reads older architectures)."""
    name = "cuobjdump.exe" if os.name == "nt" else "cuobjdump"
    if toolkit_root and (Path(toolkit_root) / "bin" / name).is_file():
        return Path(toolkit_root) / "bin" / name
    having = [r for r in pypi.releases().values() if "cuobjdump" in r.wheels]
    if not having:
        raise pypi.ToolkitError("no cuobjdump: the toolkit has none and PyPI has none pinned for this platform")
    newest = having[-1]
    tool = pypi.provision(pypi.ToolkitRequest(newest.release, ("cuobjdump",)), cache_dir)
    return Path(tool.root) / "bin" / name


def list_elf(site_dir: Path, cmake_architectures: str, toolkit_root: str, cache_dir: Path,
             log_file: Path | None = None) -> CudaElf:
    result = CudaElf(expected=expected_architectures(cmake_architectures))
    library = find_library(site_dir)
    if library is None:
        result.error = f"no ggml-cuda library under {site_dir}"
        return result
    result.library = str(library)
    try:
        tool = find_cuobjdump(toolkit_root, cache_dir)
    except pypi.ToolkitError as err:
        result.error = str(err)
        return result
    result.cuobjdump = str(tool)
    done = run_captured([str(tool), "--list-elf", str(library)], timeout_s=300)
    if log_file is not None:
        log_file.write_text(f"$ {tool} --list-elf {library}\n{done.stdout}{done.stderr}", encoding="utf-8")
    if done.returncode != 0:
        result.error = f"cuobjdump exited with {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}"
        return result
    result.architectures, result.elf_files = parse_list_elf(done.stdout)
    result.missing = missing_architectures(result.expected, result.architectures)
    return result


def missing_architectures(expected: list[str], have: list[str]) -> list[str]:
    """What ``expected`` asks for and ``have`` lacks; sm_120a (arch-specific) counts for sm_120."""
    return [a for a in expected if not any(h.rstrip("af") == a.rstrip("af") for h in have)]
