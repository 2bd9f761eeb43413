"""CUDA toolkits from PyPI wheels: the pins, the spec, and the assembly of one root (with handmade wheels,
no network): the links nvcc and CMake expect, reuse, components added to an installed toolkit."""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import zipfile
from pathlib import Path

import pytest

from playbook.backends.cuda_probe import detect_cuda_toolkits
from playbook.errors import ParameterError
from playbook.params import load_params
from playbook.probing import CommandOutput
from playbook.toolkits import pypi

pytestmark = pytest.mark.skipif(os.name == "nt", reason="the assembled root's links are POSIX links")


def test_every_release_line_is_pinned_with_its_components():
    releases = pypi.releases("linux-x86_64")
    assert next(iter(releases)) == "12.0" and "13.0" in releases
    for name, release in releases.items():
        assert {"nvcc", "cudart", "cccl", "cublas"} <= set(release.wheels), name
        assert release.has_compiler == name.startswith("13."), name
        if release.has_compiler:
            assert {"crt", "nvvm"} <= set(release.wheels)
        for wheel in release.wheels.values():
            assert re.fullmatch(r"[0-9a-f]{64}", wheel.sha256)
            assert wheel.file.startswith(wheel.package.replace("-", "_") + "-" + wheel.version + "-")
            suffix = "-cu12" if name.startswith("12.") else ""
            assert wheel.package.endswith(suffix) and wheel.version.startswith(name.split(".")[0] + ".")


def test_spec_names_a_release():
    assert pypi.release_of("pypi:13.0") == "13.0"
    assert pypi.release_of("pypi:12.8.1") == "12.8"
    with pytest.raises(pypi.ToolkitError, match="pypi:<major>.<minor>"):
        pypi.release_of("pypi:latest")


def test_a_12x_release_cannot_compile_on_its_own_and_the_parameter_says_so():
    with pytest.raises(ParameterError, match="no nvcc driver.*pypi:13.0"):
        load_params(None, ["cuda.toolkit=pypi:12.8"])
    with pytest.raises(ParameterError, match="no pinned PyPI wheels"):
        load_params(None, ["cuda.toolkit=pypi:11.8"])
    assert load_params(None, ["cuda.toolkit=pypi:13.0"]).settings("cuda").toolkit == "pypi:13.0"


def test_components_of_an_installed_release():
    request = pypi.component_request("12.1.105", ["cccl"], "/opt/cuda-12.1")
    assert request == pypi.ToolkitRequest("12.1", ("cccl",), "/opt/cuda-12.1")
    assert pypi.release("12.1").wheels["cccl"].package == "nvidia-cuda-cccl-cu12"
    assert pypi.component_request("11.8.89", ["cublas"], "/usr/local/cuda-11.8") is None


# ----------------------------------------------------------------------------- assembly, handmade wheels

def _wheel(folder: Path, name: str, members: dict[str, bytes], executable: tuple[str, ...] = ()) -> Path:
    path = folder / f"{name}-1.0-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("nvidia/__init__.py", b"")
        archive.writestr(f"{name}-1.0.dist-info/METADATA", b"Name: x\n")
        for member, data in members.items():
            info = zipfile.ZipInfo(member)
            info.external_attr = ((0o755 if member in executable else 0o644) | stat.S_IFREG) << 16
            archive.writestr(info, data)
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture()
def fake_release(tmp_path, monkeypatch):
    """A release "13.0" made of handmade wheels, already in the cache's wheel folder."""
    wheels_dir = tmp_path / "cache" / "toolkits" / "wheels"
    wheels_dir.mkdir(parents=True)
    p = "nvidia/cu13/"
    made = {
        "nvcc": _wheel(wheels_dir, "nvidia_cuda_nvcc", {p + "bin/nvcc": b"#!/bin/sh\necho 'release 13.0, V13.0.88'\n",
                                                     p + "bin/nvcc.profile": b"TOP = $(_HERE_)/..\n"},
                       executable=(p + "bin/nvcc",)),
        "cudart": _wheel(wheels_dir, "nvidia_cuda_runtime", {p + "include/cuda_runtime.h": b"",
                                                            p + "lib/libcudart.so.13": b"ELF"}),
        "cccl": _wheel(wheels_dir, "nvidia_cuda_cccl", {p + "include/cccl/cub/cub.cuh": b"",
                                                       p + "include/cccl/nv/target": b"",
                                                       p + "include/cccl/thrust/version.h": b"",
                                                       p + ".metadata/provenance.txt": b""}),
        "cublas": _wheel(wheels_dir, "nvidia_cublas", {p + "include/cublas_v2.h": b"",
                                                      p + "lib/libcublas.so.13": b"ELF",
                                                      p + "lib/libcublasLt.so.13": b"ELF"}),
    }
    pins = {c: pypi.PinnedWheel(c, f"nvidia-{c}", "13.0.88", path.name, hashlib.sha256(path.read_bytes()).hexdigest())
            for c, path in made.items()}
    release = pypi.Release("13.0", "cuda-toolkit==13.0.2", True, pins)
    monkeypatch.setattr(pypi, "releases", lambda key=None: {"13.0": release})
    monkeypatch.setattr(pypi, "run_captured", lambda *a, **k: pytest.fail("pip must not run: the wheels are cached"))
    return tmp_path / "cache"


def test_wheels_become_one_root_that_detect_sees(fake_release):
    request = pypi.ToolkitRequest("13.0", ("nvcc", "cudart", "cccl", "cublas"))
    made = pypi.provision(request, fake_release)
    root = Path(made.root)
    assert root == pypi.root_for(request, fake_release) and not made.reused
    assert os.access(root / "bin" / "nvcc", os.X_OK)
    assert (root / "lib64").is_symlink() and os.readlink(root / "lib64") == "lib"
    assert os.readlink(root / "lib" / "libcudart.so") == "libcudart.so.13"
    assert os.readlink(root / "lib" / "libcublas.so") == "libcublas.so.13"
    assert not (root / ".metadata").exists() and not (root / "include" / "cccl" / ".metadata").exists()
    assert not list(root.rglob("__init__.py"))
    assert [w["sha256"] for w in pypi.provenance(made)["wheels"]] == [w.sha256 for w in made.wheels]

    def runner(args, timeout):
        return CommandOutput(0, "Cuda compilation tools, release 13.0, V13.0.88\n")

    found = detect_cuda_toolkits({}, "", runner, [pypi.toolkits_dir(fake_release)])
    mine = [t for t in found if Path(t.root) == root]
    assert len(mine) == 1 and mine[0].version == "13.0.88" and mine[0].has_cublas and mine[0].has_cccl
    assert "PyPI" in mine[0].found_by

    again = pypi.provision(request, fake_release)
    assert again.reused and again.root == made.root


def test_a_missing_component_is_added_to_a_copy_of_the_installed_toolkit(fake_release, tmp_path):
    base = tmp_path / "cuda-13.0"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (base / "include").mkdir()
    (base / "include" / "cuda_runtime.h").write_text("")
    (base / "lib").mkdir()
    (base / "lib" / "libcudart.so.13").write_text("ELF")
    (base / "lib64").symlink_to("lib")
    request = pypi.component_request("13.0.88", ["cublas"], str(base))
    root = Path(pypi.provision(request, fake_release).root)
    assert (root / "bin" / "nvcc").is_file() and (root / "include" / "cublas_v2.h").is_file()
    assert (root / "lib64" / "libcublas.so").exists()
    assert not (base / "include" / "cublas_v2.h").exists(), "the installed toolkit is never written to"
    assert root != pypi.root_for(pypi.ToolkitRequest("13.0", ("cublas",), "/elsewhere"), fake_release)


def test_a_wheel_whose_sha256_differs_is_downloaded_again_and_refused(fake_release, monkeypatch):
    wheel = pypi.releases()["13.0"].wheels["cudart"]
    (pypi.toolkits_dir(fake_release) / "wheels" / wheel.file).write_bytes(b"tampered")
    calls = []

    def pip(command, **kwargs):
        calls.append(command)
        import subprocess
        return subprocess.CompletedProcess(command, 1, "", "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES")

    monkeypatch.setattr(pypi, "run_captured", pip)
    with pytest.raises(pypi.ToolkitError, match="DO NOT MATCH"):
        pypi.provision(pypi.ToolkitRequest("13.0", ("cudart",)), fake_release)
    assert "--require-hashes" in calls[0] and calls[0][calls[0].index("-r") + 1].endswith(".txt")
