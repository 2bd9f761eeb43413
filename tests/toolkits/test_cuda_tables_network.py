"""playbook/knowledge/cuda.yaml checked against the real toolkits: for every CUDA release line pinned in
cuda_wheels.yaml (12.0 through the newest 13.x), NVIDIA's own wheels are downloaded (into the playbook's
cache, reused by later runs and by CI) and asked:

- which GPU architectures they compile for: ``nvcc --list-gpu-code`` (13.x), ``ptxas --help``'s
  ``--gpu-name`` values (12.x, whose wheels ship ptxas but no nvcc driver);
- which host compilers they accept: the ``__GNUC__`` and ``_MSC_VER`` checks of ``crt/host_config.h``;
- whether their CCCL component holds the headers ggml-cuda includes.

Run with PLAYBOOK_NETWORK_TESTS=1 (CI sets it)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from playbook.knowledge import compatibility
from playbook.params import Params
from playbook.process import run_captured
from playbook.toolkits import pypi

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(os.environ.get("PLAYBOOK_NETWORK_TESTS") != "1",
                       reason="downloads NVIDIA's wheels; set PLAYBOOK_NETWORK_TESTS=1"),
    pytest.mark.skipif(pypi.platform_key() != "linux-x86_64", reason="the pinned wheels are Linux x86_64"),
]

RELEASES = list(pypi.releases("linux-x86_64"))


def provisioned(release: str, components: tuple[str, ...]) -> Path:
    request = pypi.ToolkitRequest(release, components)
    return Path(pypi.provision(request, Params().cache_dir).root)


def compiler_root(release: str) -> Path:
    found = pypi.release(release)
    return provisioned(release, ("nvcc", "crt", "nvvm") if found.has_compiler else ("nvcc",))


def real_architectures(release: str) -> set[str]:
    """The SASS targets the release compiles: "86", "90a", "120f"."""
    root = compiler_root(release)
    if pypi.release(release).has_compiler:
        out = run_captured([str(root / "bin" / "nvcc"), "--list-gpu-code"], timeout_s=60)
        codes = out.stdout.split()
    else:
        out = run_captured([str(root / "bin" / "ptxas"), "--help"], timeout_s=60)
        allowed = out.stdout.split("--gpu-name", 1)[1].split("Allowed values for this option:", 1)[1]
        codes = re.findall(r"'(\w+)'", allowed.split("\n\n", 1)[0])
    assert out.returncode == 0, out.stderr
    return {c.removeprefix("sm_") for c in codes if c.startswith("sm_")}


def host_config_limits(release: str) -> tuple[int, str]:
    """(largest accepted __GNUC__, largest accepted cl version "19.xx") read from crt/host_config.h."""
    text = (compiler_root(release) / "include" / "crt" / "host_config.h").read_text(encoding="utf-8", errors="replace")
    gcc = int(re.search(r"#if __GNUC__ > (\d+)", text).group(1))
    msvc_limit = int(re.search(r"_MSC_VER < \d+ \|\| _MSC_VER >= (\d+)", text).group(1))
    return gcc, f"19.{msvc_limit % 100 - 1:02d}"


def nvcc_version(release: str) -> str:
    return pypi.release(release).wheels["nvcc"].version


@pytest.mark.parametrize("release", RELEASES)
def test_architecture_table_matches_the_compiler(release: str):
    real = real_architectures(release)
    version = nvcc_version(release)
    table = compatibility.arch_support()
    wrong = {arch: ok for arch in table if (ok := compatibility.toolkit_supports_arch(version, arch)[0]) != (arch in real)}
    assert not wrong, f"CUDA {version}: the table says {wrong}, the compiler lists {sorted(real, key=int_key)}"
    plain = {a for a in real if a.isdigit()}
    assert plain <= set(table), f"CUDA {version} compiles {sorted(plain - set(table), key=int)}, absent from the table"


@pytest.mark.parametrize("release", RELEASES)
def test_host_compiler_limits_match_host_config(release: str):
    gcc, msvc = host_config_limits(release)
    limits = compatibility.host_compiler_limits(nvcc_version(release))
    assert limits is not None
    assert (limits.max_gcc, limits.max_msvc) == (gcc, msvc), f"CUDA {nvcc_version(release)} host_config.h"


@pytest.mark.parametrize("release", RELEASES)
def test_cccl_component_holds_the_headers_ggml_cuda_includes(release: str):
    root = provisioned(release, ("cccl",))
    include = root / "include" / "cccl" if (root / "include" / "cccl").is_dir() else root / "include"
    for header in ("cub/cub.cuh", "nv/target", "thrust/version.h", "cuda/std/type_traits"):
        assert (include / header).is_file(), f"CUDA {release} CCCL lacks {header}"
    minimum = compatibility.cccl_min_cuda()
    assert all(compatibility.version_tuple(nvcc_version(release)) >= compatibility.version_tuple(v)
               for v in minimum.values())


def int_key(arch: str) -> tuple[int, str]:
    digits = re.match(r"\d+", arch)
    return (int(digits.group(0)) if digits else 0, arch)
