"""Which gfx targets a HIP wheel holds code objects for, read from its ggml-hip library's ``.hip_fatbin``
section: each compiled source file puts one clang offload bundle there, whose entries are named
``hipv4-amdgcn-amd-amdhsa--gfx1100`` (one per target) beside the host's empty entry. Plain Python, no ROCm
tool and no GPU: a wheel built where no AMD GPU is (a CI builder, this playbook's compile-only runs) is checked
too, and so is one object file of a build that has not finished.

The bundle format (clang's ClangOffloadBundler.cpp): the magic ``__CLANG_OFFLOAD_BUNDLE__``, the entry
count (uint64), then per entry its offset, size and id length (uint64 each) and the id. A compressed bundle
(``CCOB``, clang's --offload-compress) hides its entries; it is reported, not guessed at.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from playbook.files import first_file

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
SECTION = ".hip_fatbin"
LIBRARY_GLOBS = ("libggml-hip.so*", "ggml-hip.dll")
HIP_ENTRY_PREFIX = "hipv4-amdgcn-amd-amdhsa--"


@dataclass
class HipBundles:
    library: str = ""
    architectures: list[str] = field(default_factory=list)  # "gfx1030", "gfx1100": the targets code objects exist for
    entries: list[str] = field(default_factory=list)  # the bundle ids, each once: "hipv4-amdgcn-amd-amdhsa--gfx1100"
    bundles: int = 0  # how many offload bundles (one per compiled HIP source file)
    expected: list[str] = field(default_factory=list)  # from the plan's gfx targets
    missing: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.architectures) and not self.missing


def elf_section(data: bytes, name: str) -> bytes | None:
    """The contents of the named section of a 64-bit little-endian ELF file (an object or a shared library)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    for sh_name, sh_type, _flags, _addr, offset, size in headers:
        end = data.index(b"\x00", names_offset + sh_name)
        if data[names_offset + sh_name:end].decode() == name:
            return b"" if sh_type == 8 else data[offset:offset + size]  # SHT_NOBITS holds nothing
    return None


def bundle_ids(section: bytes) -> tuple[list[list[str]], int]:
    """The entry ids of every uncompressed offload bundle in a ``.hip_fatbin`` section, and how many compressed
    bundles it also holds."""
    bundles, start = [], section.find(MAGIC)
    while start != -1:
        count, = struct.unpack_from("<Q", section, start + len(MAGIC))
        position, ids = start + len(MAGIC) + 8, []
        for _ in range(count):
            _offset, _size, id_length = struct.unpack_from("<QQQ", section, position)
            position += 24
            ids.append(section[position:position + id_length].decode())
            position += id_length
        bundles.append(ids)
        start = section.find(MAGIC, position)
    return bundles, section.count(COMPRESSED_MAGIC)


def gfx_of(entry_id: str) -> str:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` -> ``gfx90a``; "" for the host entry."""
    if not entry_id.startswith(HIP_ENTRY_PREFIX):
        return ""
    return entry_id.removeprefix(HIP_ENTRY_PREFIX).split(":", 1)[0]


def expected_targets(gpu_targets: str) -> list[str]:
    return [t.split(":", 1)[0] for t in gpu_targets.replace(",", ";").split(";") if t.strip()]


def read_bundles(path: Path, gpu_targets: str = "") -> HipBundles:
    """The gfx targets in one ELF file's ``.hip_fatbin`` (a ggml-hip library or one compiled .o)."""
    result = HipBundles(library=str(path), expected=expected_targets(gpu_targets))
    try:
        section = elf_section(path.read_bytes(), SECTION)
    except (OSError, ValueError, struct.error) as err:
        result.error = f"cannot read {path.name}: {err}"
        return result
    if section is None:
        result.error = f"{path.name} has no {SECTION} section: no HIP code objects"
        return result
    bundles, compressed = bundle_ids(section)
    result.bundles = len(bundles)
    result.entries = list(dict.fromkeys(i for ids in bundles for i in ids))
    result.architectures = sorted({g for i in result.entries if (g := gfx_of(i))}, key=lambda g: (len(g), g))
    if compressed and not bundles:
        result.error = (f"{compressed} compressed offload bundle(s) (clang --offload-compress): list them with "
                        f"clang-offload-bundler --list --type=o --input={path}")
    result.missing = [t for t in result.expected if t not in result.architectures]
    return result


def find_library(site_dir: Path) -> Path | None:
    return first_file(site_dir, LIBRARY_GLOBS)


def list_bundles(site_dir: Path, gpu_targets: str, toolkit_root: str, cache_dir: Path,
                 log_file: Path | None = None) -> HipBundles:
    """The machine-code lister for HIP wheels (verify's machine-code unit)."""
    library = find_library(site_dir)
    if library is None:
        return HipBundles(expected=expected_targets(gpu_targets), error=f"no ggml-hip library under {site_dir}")
    result = read_bundles(library, gpu_targets)
    if log_file is not None:
        log_file.write_text(listing_text(result), encoding="utf-8")
    return result


def listing_text(result: HipBundles) -> str:
    lines = [f"{result.library}: {SECTION}, {result.bundles} offload bundle(s)"]
    lines += [f"  {entry}" for entry in result.entries]
    lines.append(f"gfx targets: {', '.join(result.architectures) or 'none'}"
                 + (f"; missing {', '.join(result.missing)}" if result.missing else ""))
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines) + "\n"


def list_objects(folder: Path, gpu_targets: str = "") -> list[HipBundles]:
    """Every compiled HIP object (``*.o`` with a .hip_fatbin section) under a build folder: what a build that
    did not finish has already compiled, for each of the plan's targets."""
    found = [read_bundles(path, gpu_targets) for path in sorted(folder.rglob("*.o"))]
    return [b for b in found if not b.error.endswith("no HIP code objects")]


def objects_text(folder: Path, objects: list[HipBundles]) -> str:
    """One line per object (its path under ``folder`` and its gfx targets), then the totals."""
    lines = [f"{Path(b.library).relative_to(folder).as_posix()}: {', '.join(b.architectures) or 'none'}"
             + (f" (missing {', '.join(b.missing)})" if b.missing else "") for b in objects]
    targets = sorted({a for b in objects for a in b.architectures}, key=lambda g: (len(g), g))
    complete = sum(1 for b in objects if b.ok)
    lines.append(f"{len(objects)} HIP objects; {complete} hold code for every target asked for; "
                 f"targets seen: {', '.join(targets) or 'none'}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    # python -m playbook.verify.hip_bundles BUILD_DIR "gfx1100;gfx1030": the objects a (partial) build compiled
    build = Path(sys.argv[1])
    print(objects_text(build, list_objects(build, sys.argv[2] if len(sys.argv) > 2 else "")), end="")
