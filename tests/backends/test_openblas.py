"""OpenBLAS: detect finds the library, cblas.h and pkg-config as ggml-blas's CMakeLists looks for them; the plan
sets the vendor, refuses with the install line when something is missing, and points CMake at a prefix."""

from __future__ import annotations

import dataclasses

from machines import machine

from playbook.backends import registry
from playbook.backends.openblas import detect_openblas
from playbook.facts import OpenBlas, Tool
from playbook.params import PARAMS_DIR, load_params
from playbook.probing import CommandOutput
from playbook.steps.configure import configure

OPENBLAS = PARAMS_DIR / "openblas.yaml"


def debian_layout(root):
    """Debian 12's libopenblas-dev: the link name in the multiarch folder, cblas.h in openblas-pthread/."""
    lib = root / "usr/lib/x86_64-linux-gnu"
    include = root / "usr/include/x86_64-linux-gnu/openblas-pthread"
    lib.mkdir(parents=True)
    include.mkdir(parents=True)
    (lib / "libopenblas.so").write_text("")
    (include / "cblas.h").write_text("")
    return lib, include


def test_detect_asks_pkg_config_as_ggml_blas_does(tmp_path):
    lib, include = debian_layout(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pkg-config").write_text("#!/bin/sh\n")
    (bin_dir / "pkg-config").chmod(0o755)
    asked = []

    def pkg_config(args: list[str], timeout: float) -> CommandOutput:
        asked.append(args[1:])
        if args[1:] == ["--cflags-only-I", "openblas"]:
            return CommandOutput(0, f"-I{include}/\n")
        return CommandOutput(1 if "--cflags-only-I" in args else 0, "1.8.1\n")

    found = detect_openblas({}, str(bin_dir), pkg_config, lib_dirs=[str(tmp_path / "usr/lib/*-linux-gnu")],
                            include_dirs=[])
    assert found.library == str(lib / "libopenblas.so") and found.cblas_header == str(include / "cblas.h")
    assert found.pkg_config_module == "openblas" and found.found
    assert asked[1:] == [["--cflags-only-I", "openblas64"], ["--cflags-only-I", "openblas"]]  # openblas64 first

    no_dev_package = detect_openblas({}, str(tmp_path / "nothing"), pkg_config, lib_dirs=[str(tmp_path / "none")],
                                     include_dirs=[str(include)])
    assert not no_dev_package.found and no_dev_package.cblas_header and not no_dev_package.pkg_config.found


def test_a_prefix_outside_the_standard_folders_is_given_to_cmake():
    facts = machine("debian12-openblas")
    facts.openblas = dataclasses.replace(facts.openblas, library="/opt/homebrew/opt/openblas/lib/libopenblas.dylib",
                                         cblas_header="/opt/homebrew/opt/openblas/include/cblas.h")
    plan = configure(facts, load_params(OPENBLAS))
    assert "-DCMAKE_PREFIX_PATH=/opt/homebrew/opt/openblas" in plan.cmake_args
    assert plan.env["PKG_CONFIG_PATH"] == "/opt/homebrew/opt/openblas/lib/pkgconfig"
    debian = configure(machine("debian12-openblas"), load_params(OPENBLAS))
    assert not any(a.startswith("-DCMAKE_PREFIX_PATH") for a in debian.cmake_args) and "PKG_CONFIG_PATH" not in debian.env


def test_pkg_config_missing_is_refused_even_with_openblas():
    facts = machine("debian12-openblas")
    facts.openblas = dataclasses.replace(facts.openblas, pkg_config=Tool("pkg-config", found=False))
    plan = configure(facts, load_params(OPENBLAS))
    assert [b.code for b in plan.blockers] == ["pkg-config-missing"]
    assert "find_package(PkgConfig REQUIRED)" in plan.blockers[0].message


def test_homebrew_s_openblas_is_planned_on_a_mac():
    mac = machine("m2-mac")
    mac.openblas = dataclasses.replace(machine("debian12-openblas").openblas,
                                       library="/opt/homebrew/opt/openblas/lib/libopenblas.dylib",
                                       cblas_header="/opt/homebrew/opt/openblas/include/cblas.h")
    plan = configure(mac, load_params(OPENBLAS))
    assert plan.backend == "openblas" and "-DCMAKE_PREFIX_PATH=/opt/homebrew/opt/openblas" in plan.cmake_args
    assert configure(mac, load_params()).backend == "metal"  # auto on the Mac is still the Mac's choice


def test_openblas_offloads_nothing_and_auto_keeps_the_plain_cpu():
    unit = registry.unit("openblas")
    assert unit.offloads is False and unit.device(machine("debian12-openblas")) == ""
    auto = configure(machine("debian12-openblas"), load_params())
    rejected = {d.value: d.reason for d in auto.decisions if d.what == "backend rejected"}
    assert auto.backend == "cpu" and "chosen only when asked for (backend: openblas)" in rejected["openblas"]
    assert rejected["openblas"].startswith("OpenBLAS /usr/lib/x86_64-linux-gnu/libopenblas.so")
    empty = configure(machine("no-gpu"), load_params())
    assert {d.value: d.reason for d in empty.decisions if d.what == "backend rejected"}["openblas"] == \
        "missing the OpenBLAS library (libopenblas.so), cblas.h, pkg-config"
    assert OpenBlas().found is False
