from __future__ import annotations

import json
from pathlib import Path

import pytest

from playbook.facts import CudaToolkit, Facts, Gpu, NvidiaDriver
from playbook.serialization import from_dict
from playbook.steps.detect import detect
from playbook.steps.source import SourceInfo

DATA = Path(__file__).parent / "data"


VOCAB = DATA / "ggml-vocab-llama-spm.gguf"


def cmake_project(tmp_path: Path, with_vocabulary: bool = False) -> Path:
    """The smallest source tree the playbook accepts: scikit-build-core, CMake, a vendor/llama.cpp folder;
    ``with_vocabulary`` adds the llama.cpp vocabulary verify writes its synthetic model from."""
    import shutil

    project = tmp_path / "src"
    (project / "vendor" / "llama.cpp").mkdir(parents=True)
    if with_vocabulary:
        (project / "vendor" / "llama.cpp" / "models").mkdir()
        shutil.copy(VOCAB, project / "vendor" / "llama.cpp" / "models" / VOCAB.name)
    (project / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text("# stands in for llama.cpp\n")
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES CXX)\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
        '[project]\nname = "tiny"\nversion = "0.1"\n'
    )
    return project


def compiled_project(tmp_path: Path, source_text: str = "int tiny() { return 42; }\n",
                     with_vocabulary: bool = False) -> Path:
    """:func:`cmake_project` whose CMakeLists compiles one C++ source into a shared library and installs it."""
    project = cmake_project(tmp_path, with_vocabulary)
    (project / "tiny.cpp").write_text(source_text)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES CXX)\n"
        "add_library(tiny SHARED tiny.cpp)\ninstall(TARGETS tiny LIBRARY DESTINATION tiny)\n")
    return project


def tree_source(project: Path) -> SourceInfo:
    """A source tree as the build step takes it."""
    return SourceInfo("tree", str(project), "0.1", "", "test project")


@pytest.fixture(scope="session")
def this_machine() -> Facts:
    return detect()


def make_facts(base: Facts, *, gpus: list[Gpu] | None = None, toolkits: list[CudaToolkit] | None = None,
               driver: NvidiaDriver | None = None) -> Facts:
    """A copy of real facts with the GPU side replaced: a machine we cannot run here."""
    import dataclasses

    facts = from_dict(Facts, json.loads(json.dumps(dataclasses.asdict(base))))
    if gpus is not None:
        facts.gpus = gpus
    if toolkits is not None:
        facts.cuda_toolkits = toolkits
    if driver is not None:
        facts.driver = driver
    return facts


def toolkit(version: str, root: str = "/usr/local/cuda", cublas: bool = True, cccl: bool = True) -> CudaToolkit:
    headers = {"nv/target": cccl, "cub/cub.cuh": cccl, "thrust": cccl}
    return CudaToolkit(root, "standard location", f"{root}/bin/nvcc", version, headers, cublas)


H100 = Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "9.0", 5120, 2619)
RTX_4070 = Gpu(0, "NVIDIA GeForce RTX 4070", 12282, "8.9")


@pytest.fixture(scope="session")
def pinned_source(tmp_path_factory):
    """The pinned llama-cpp-python sdist and the playbook cache that the slow tier's builds share: its ccache
    holds every build's objects, so each later build compiles only what differs (ggml-cpu without
    -march=native, the RPC and Vulkan backends' own files). The cache is $PLAYBOOK_TEST_CACHE when set (kept
    between sessions: its wheel cache then answers the builds it already made), else a folder of this session.
    $PLAYBOOK_TEST_CCACHE, when set, is its ccache folder, kept between sessions (.ci/run keeps one in the
    playbook's cache): objects only, so every build still builds, only faster. The sdist is copied from this
    machine's playbook cache when a run put it there (resolve_source checks its sha256), else downloaded once."""
    import os
    import shutil

    from playbook.params import load_params
    from playbook.steps.source import SDIST_NAME, resolve_source

    kept_cache = os.environ.get("PLAYBOOK_TEST_CACHE")
    cache = Path(kept_cache) if kept_cache else tmp_path_factory.mktemp("playbook-cache")
    kept_ccache = os.environ.get("PLAYBOOK_TEST_CCACHE")
    if kept_ccache and not (cache / "ccache").exists():
        link_ccache(cache, Path(kept_ccache))
    params = load_params()
    name = SDIST_NAME.format(version=params.source.version)
    kept = params.cache_dir / "sdists" / name
    if kept.is_file() and not (cache / "sdists" / name).is_file():
        (cache / "sdists").mkdir(parents=True, exist_ok=True)
        shutil.copy2(kept, cache / "sdists" / name)
    return resolve_source(params.source.version, params.source.sha256, cache), cache


def link_ccache(cache: Path, ccache_dir: Path) -> None:
    """Make ``ccache_dir`` the compiler cache of the playbook cache ``cache`` (its ``ccache`` folder, where the
    build step points CCACHE_DIR, becomes a link): a build there still runs every compile step, and takes from
    ccache the objects that other builds left. Paths are hashed relative to each cache (CCACHE_BASEDIR), so the
    same source file under two caches is one entry."""
    ccache_dir = ccache_dir.resolve()
    ccache_dir.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "ccache").symlink_to(ccache_dir, target_is_directory=True)


@pytest.fixture
def seeded_cache(tmp_path, pinned_source) -> Path:
    """A fresh playbook cache (``tmp_path/cache``) that already holds the pinned sdist: a run that fetches its
    source finds it there instead of calling ``pip download``, which can stall for minutes. Fresh: no wheel,
    build folder or remembered repair; only its compiler cache is the session's (:func:`link_ccache`)."""
    import shutil

    _, session_cache = pinned_source
    shutil.copytree(session_cache / "sdists", tmp_path / "cache" / "sdists")
    link_ccache(tmp_path / "cache", session_cache / "ccache")
    return tmp_path / "cache"


# A CPU build of the pinned llama-cpp-python that this project's development VM keeps between sessions.
DEV_WHEEL = Path("/tmp/cpubuild/wheelhouse/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl")


@pytest.fixture(scope="session")
def cpu_wheel(pinned_source, tmp_path_factory) -> Path:
    """A real wheel of the pinned llama-cpp-python, CPU-only: $PLAYBOOK_TEST_WHEEL, else the development
    VM's wheel, else built here once per session through ``run_build`` (-DGGML_NATIVE=OFF, and no
    libmtmd, which the plan leaves out by default: minutes on 2 cores; PLAYBOOK_TEST_BUILD_WHEEL=1 forces this).
    Skips where nothing can compile it."""
    import os
    import shutil
    import sys

    build_anyway = os.environ.get("PLAYBOOK_TEST_BUILD_WHEEL") == "1"  # as CI does, on a machine that has one
    for candidate in filter(None, [os.environ.get("PLAYBOOK_TEST_WHEEL"), None if build_anyway else str(DEV_WHEEL)]):
        if Path(candidate).is_file():
            return Path(candidate)
    if not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        pytest.skip("no llama-cpp-python wheel found and no C++ compiler to build one")
    from playbook.params import PARAMS_DIR, load_params
    from playbook.runfolder.layout import Layout
    from playbook.steps.build import run_build
    from playbook.steps.configure import configure

    source, cache = pinned_source
    params = load_params(PARAMS_DIR / "cpu-portable.yaml", [f"build.cache_dir={cache}"])
    plan = configure(detect(), params)
    run_dir = tmp_path_factory.mktemp("cpu-wheel")
    result = run_build(plan, source, Layout(run_dir), cache, {}, sys.executable, timeout_s=1800)
    if not result.ok or result.wheel is None:
        tail = "\n".join((run_dir / result.log_file).read_text(errors="replace").splitlines()[-30:])
        pytest.fail(f"building the CPU wheel failed:\n{tail}")
    return Path(result.wheel.path)


@pytest.fixture(scope="session")
def built_rpc_server(pinned_source) -> Path:
    """A real rpc-server (llama.cpp's ggml-rpc-server, CPU) built from the pinned sdist's tree with the server
    arguments of params/rpc.yaml's plan, through the playbook's own ``build_rpc_server``, in the session's shared
    cache (:func:`pinned_source`: its ccache holds the other builds' ggml objects). Its build folder is the one
    verify builds rpc-server in for the RPC chain's wheel (tests/test_rpc_end_to_end.py: the same plan), so
    whichever of the two runs second finds the build done and only re-checks it (CMake's configure and a ninja
    with nothing to do), as does a second session with the same $PLAYBOOK_TEST_CACHE. Compiles ggml (minutes
    when cold)."""
    import os

    from playbook.steps.caches import stable_tree
    from playbook.verify.rpc_server import build_rpc_server

    source, cache = pinned_source
    params, plan, build_dir = rpc_chain_server(source, cache)
    build_dir.mkdir(parents=True, exist_ok=True)
    log = build_dir.parent / f"test-{build_dir.name}.log"
    build = build_rpc_server(stable_tree(source, cache), plan.rpc, dict(os.environ), build_dir, log, cache,
                             params.build.timeout_s)
    if not build.ok:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        pytest.fail(f"building rpc-server failed: {build.error}\n{tail}")
    return Path(build.binary)


def rpc_chain_server(source: SourceInfo, cache: Path):
    """params/rpc.yaml as the RPC chain test plans it here (portable, in ``cache``), its plan, and the folder
    verify builds that chain's rpc-server in: the wheel's fingerprint as the build step computes it."""
    from playbook.params import load_params
    from playbook.resources import params_dir
    from playbook.steps.build import toolchain
    from playbook.steps.caches import fingerprint
    from playbook.steps.configure import configure

    params = load_params(params_dir() / "rpc.yaml", ["build.native=false", f"build.cache_dir={cache}"])
    facts = detect()
    plan = configure(facts, params)
    assert plan.rpc is not None, "params/rpc.yaml plans no rpc-server"
    wheel_key = fingerprint(source, plan.cmake_args, plan.env, toolchain(facts, plan))
    return params, plan, rpc_server_build_dir(cache, wheel_key, plan.rpc.server_backend)


def rpc_server_build_dir(cache: Path, wheel_fingerprint: str, server_backend: str) -> Path:
    """Where verify builds rpc-server for the wheel of ``wheel_fingerprint`` (``rpc_server_builder`` in
    playbook/verify/step.py; tests/verify/test_rpc_server.py checks that the two agree)."""
    return cache / "rpc-server-build" / f"{wheel_fingerprint[:16]}-{server_backend}"


# Fixtures that compile llama.cpp (minutes on this VM). A test that requests one, itself or through another
# fixture, must be marked slow, so that `./test -m "not slow"` compiles nothing (issue 34): checked at collection.
COMPILING_FIXTURES = frozenset({"cpu_wheel", "built_rpc_server"})


def unmarked_compiling_tests(items) -> list[str]:
    """The node ids of ``items`` that use a compiling fixture (pytest's own closure of their fixtures) and are
    not marked slow."""
    return [item.nodeid for item in items
            if COMPILING_FIXTURES & set(getattr(item, "fixturenames", ()))
            and item.get_closest_marker("slow") is None]


def mark_long_tests_slow(items) -> None:
    """A test marked long (whole chains of notebooks, servers, a browser, large inputs: compiles nothing, but takes
    seconds to minutes) is slow too, so that `./test -m "not slow"` stays the minutes-fast tier (issue 34); CI runs
    it beside the builds (`-m "slow and not long"` picks the builds alone)."""
    for item in items:
        if item.get_closest_marker("long") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(config, items) -> None:
    mark_long_tests_slow(items)
    unmarked = unmarked_compiling_tests(items)
    if unmarked:
        raise pytest.UsageError(
            f"these tests compile llama.cpp through {', '.join(sorted(COMPILING_FIXTURES))} but are not marked "
            "slow (@pytest.mark.slow), so `-m 'not slow'` would build:\n  " + "\n  ".join(unmarked))


@pytest.fixture(scope="session")
def tiny_f16_model(tmp_path_factory) -> Path:
    """The tiny synthetic llama in F16: the quantized CPU kernels fault on this VM's AMX (cpu-amx-fault)."""
    from playbook.verify.synthetic_gguf import ModelSpec, write_synthetic_gguf

    path = tmp_path_factory.mktemp("model") / "synthetic-llama-tiny-F16.gguf"
    write_synthetic_gguf(path, ModelSpec("tiny", "F16"), DATA / "ggml-vocab-llama-spm.gguf")
    return path


# ------------------------------------------------------------------ the diagnosis corpus's score in CI's output

DIAGNOSIS_TABLES = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def diagnosis_tables(request) -> list[str]:
    """Where tests/knowledge/test_evaluation.py puts the corpus tables; printed after the run."""
    return request.config.stash.setdefault(DIAGNOSIS_TABLES, [])


def pytest_terminal_summary(terminalreporter) -> None:
    tables = terminalreporter.config.stash.get(DIAGNOSIS_TABLES, [])
    if tables:
        terminalreporter.write_sep("=", "diagnosis: the corpus, per family (playbook.knowledge.evaluation)")
        for table in tables:
            terminalreporter.write_line(table + "\n")
