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
    return {extra: (name, version) for name, version, extra in REQUIREMENT.findall(metadata) if extra in EXTRAS}


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
        "# tests/toolkits/test_pypi_network.py checks this table against the index and the wheels.",
        "version: 1",
        "source: https://pypi.org/project/cuda-toolkit/ (extras of each release), https://pypi.org/simple/",
        "releases:",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for release, metapackage in RELEASES.items():
            found = components(metapackage, Path(tmp))
            rows = pinned([f"{name}=={version}" for name, version in found.values()], Path(tmp))
            by_name = {row["package"].lower().replace("_", "-"): row for row in rows}
            lines.append(f"  \"{release}\":")
            lines.append(f"    metapackage: cuda-toolkit=={metapackage}")
            lines.append(f"    has_compiler: {'true' if release.startswith('13.') else 'false'}")
            lines.append("    linux-x86_64:")
            for extra in EXTRAS:
                if extra not in found:
                    continue
                row = by_name[found[extra][0].lower()]
                lines.append(f"      {extra}: {{package: {row['package']}, version: \"{row['version']}\", "
                             f"file: {row['file']}, sha256: {row['sha256']}}}")
            print(release, ", ".join(found), file=sys.stderr)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
