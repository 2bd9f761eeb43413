#!/usr/bin/env python3
"""Write playbook/knowledge/cuda_wheels.yaml: for each CUDA release line, the PyPI component wheels
(version, file, sha256) that `cuda.toolkit: pypi:<release>` installs.

The component versions come from NVIDIA's `cuda-toolkit` metapackage of that release (its extras
nvcc, cudart, cccl, cublas, ...); the files and hashes from pip's own resolver (`pip install
--dry-run --report`, which reads the index's hashes without downloading the wheels).

    python scripts/pin-cuda-wheels.py            # rewrites the table
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# The newest cuda-toolkit metapackage of each release line.
RELEASES = {
    "12.0": "12.0.1", "12.1": "12.1.1", "12.2": "12.2.2", "12.3": "12.3.2", "12.4": "12.4.1",
    "12.5": "12.5.1", "12.6": "12.6.3", "12.8": "12.8.1", "12.9": "12.9.1",
    "13.0": "13.0.2", "13.1": "13.1.1", "13.2": "13.2.1", "13.3": "13.3.1", "13.4": "13.4.3", "13.5": "13.5.0",
}
EXTRAS = ("nvcc", "crt", "nvvm", "cudart", "cccl", "cublas", "cuobjdump")
# The package each component is, whatever else its extra pulls in (13.2's "nvcc" extra also names
# nvidia-nvvm and nvidia-cuda-crt, its "cublas" extra nvidia-cuda-nvrtc).
PACKAGES = {"nvcc": "nvidia-cuda-nvcc", "crt": "nvidia-cuda-crt", "nvvm": "nvidia-nvvm", "cudart": "nvidia-cuda-runtime",
            "cccl": "nvidia-cuda-cccl", "cublas": "nvidia-cublas", "cuobjdump": "nvidia-cuda-cuobjdump",
            "nvrtc": "nvidia-cuda-nvrtc"}
NV_TARGET = "include/nv/target"  # libcu++'s header that cuda_fp16.h includes
REQUIREMENT = re.compile(r"^Requires-Dist: ([\w-]+)==([\w.]+?)(?:\.\*)?;.*extra == '(\w+)'", re.MULTILINE)
OUT = Path(__file__).resolve().parent.parent / "playbook" / "knowledge" / "cuda_wheels.yaml"


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, timeout=600,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def components(metapackage: str, folder: Path) -> dict[str, tuple[str, str]]:
    pip("download", "--no-deps", "-d", str(folder), f"cuda-toolkit=={metapackage}")
    wheel = next(folder.glob(f"cuda_toolkit-{metapackage}-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"cuda_toolkit-{metapackage}.dist-info/METADATA").decode()
    wanted = {name.lower(): version for name, version, extra in REQUIREMENT.findall(metadata) if extra in EXTRAS}
    found = {}
    for component, package in PACKAGES.items():
        for name in (package, package + "-cu12"):
            if name in wanted:
                found[component] = (name, wanted[name])
    return found


def has_nv_target(row: dict[str, str], folder: Path) -> bool:
    pip("download", "--no-deps", "-d", str(folder), f"{row['package']}=={row['version']}")
    with zipfile.ZipFile(folder / row["file"]) as archive:
        return any(name.endswith(NV_TARGET) for name in archive.namelist())


def pinned(requirements: list[str], folder: Path) -> list[dict[str, str]]:
    report = folder / "report.json"
    pip("install", "--dry-run", "--ignore-installed", "--no-deps", "--only-binary=:all:", "--quiet",
        "--report", str(report), *requirements)
    rows = []
    for item in json.loads(report.read_text())["install"]:
        info = item["download_info"]
        rows.append({"package": item["metadata"]["name"], "version": item["metadata"]["version"],
                     "file": info["url"].rsplit("/", 1)[1], "sha256": info["archive_info"]["hashes"]["sha256"]})
    return rows


def main() -> None:
    lines = [
        "# CUDA toolkit components as NVIDIA publishes them on PyPI, pinned for `cuda.toolkit: pypi:<release>`.",
        "# Written by scripts/pin-cuda-wheels.py from each release's cuda-toolkit metapackage (its extras name",
        "# the component versions) and pip's resolver (file and sha256 from the index). Linux x86_64 wheels.",
        "# has_compiler: false where the release's nvidia-cuda-nvcc wheel ships ptxas, libnvvm and the crt",
        "# headers but no nvcc driver, cicc, cudafe++, fatbinary or nvlink (every 12.x line): such a release",
        "# gives components to add to an installed toolkit of the same version, never a toolkit of its own.",
        "# A `note` marks a component taken from another release: PyPI's CCCL wheels of CUDA 12.0-12.4 lack",
        "# libcu++'s <nv/target> (which their cuda_fp16.h includes), so those releases get the oldest CCCL",
        "# wheel that has it (12.5's CCCL 2.4; CCCL supports every CUDA 12.x, github.com/NVIDIA/cccl README).",
        "# tests/toolkits/test_cuda_tables_network.py checks the wheels against cuda.yaml.",
        "version: 1",
        "source: https://pypi.org/project/cuda-toolkit/ (extras of each release), https://pypi.org/simple/",
        "releases:",
    ]
    n_header = len(lines)
    complete_cccl: dict[str, str] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for release, metapackage in reversed(RELEASES.items()):  # newest first: the CCCL to fall back on
            found = components(metapackage, Path(tmp))
            rows = pinned([f"{name}=={version}" for name, version in found.values()], Path(tmp))
            by_name = {row["package"].lower().replace("_", "-"): row for row in rows}
            block = [f"  \"{release}\":", f"    metapackage: cuda-toolkit=={metapackage}",
                     f"    has_compiler: {'true' if release.startswith('13.') else 'false'}", "    linux-x86_64:"]
            for component in PACKAGES:
                if component not in found:
                    continue
                row, note = by_name[found[component][0].lower()], ""
                if component == "cccl" and release.startswith("12."):
                    if has_nv_target(row, Path(tmp)):
                        complete_cccl = row
                    elif complete_cccl is not None:
                        note = (f", note: \"{row['package']} {row['version']} has no nv/target; "
                                f"CCCL of {complete_cccl['version']} instead\"")
                        row = complete_cccl
                block.append(f"      {component}: {{package: {row['package']}, version: \"{row['version']}\", "
                             f"file: {row['file']}, sha256: {row['sha256']}{note}}}")
            lines[n_header:n_header] = block
            print(release, ", ".join(found), file=sys.stderr)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
