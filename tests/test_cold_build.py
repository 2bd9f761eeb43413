"""The README's cold-build recipes (issue 34: `build.wheel_cache=false` still reuses the build folder and
ccache, and how to force a cold build was not written down). Each recipe's `--set`s are read from the README
and planned; the test checks that they turn off what the README says they turn off."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shlex
from pathlib import Path

import pytest

from playbook.facts import Tool
from playbook.params import load_params
from playbook.steps.caches import build_dir, cached_wheel, ccache_env
from playbook.steps.configure import configure

ROOT = Path(__file__).resolve().parent.parent
KEY = "0123456789abcdef" * 4  # a fingerprint


def recipes() -> list[list[str]]:
    """The command lines of the fenced blocks in the README's cold-build paragraph."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("**A cold build.**")
    paragraph = readme[start:re.search(r"\n#{2,3} ", readme[start:]).start() + start]
    blocks = re.findall(r"```bash\n(.*?)```", paragraph, re.DOTALL)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines() if line.strip()]


def overrides(command: list[str], cache: Path) -> list[str]:
    assert command[0] == "./run", command
    sets = [value for flag, value in itertools.pairwise(command) if flag == "--set"]
    assert len(sets) == command.count("--set") >= 1
    return [value.replace("$(mktemp -d)", str(cache)) for value in sets]


@pytest.fixture
def with_ccache(this_machine):
    """This machine as the README's reader may have it: with ccache installed."""
    return dataclasses.replace(this_machine, ccache=Tool("ccache", True, "/usr/bin/ccache", "4.9.1"))


def test_an_empty_cache_folder_leaves_no_build_folder_ccache_object_or_wheel_to_reuse(tmp_path, with_ccache):
    fresh, _, _ = recipes()
    cache = tmp_path / "cold"
    cache.mkdir()
    params = load_params(None, ["backend=cpu", *overrides(fresh, cache)])
    assert params.cache_dir == cache
    assert build_dir(params.cache_dir, KEY).is_relative_to(cache)
    assert Path(ccache_env(params.cache_dir)["CCACHE_DIR"]).is_relative_to(cache)
    assert cached_wheel(params.cache_dir, KEY).path is None
    assert not any(cache.iterdir())


def test_keeping_the_cache_folder_removes_its_build_folders_and_turns_off_both_caches(with_ccache, monkeypatch):
    _, remove, keep = recipes()
    monkeypatch.delenv("LLAMA_PLAYBOOK_CACHE", raising=False)
    assert remove[:2] == ["rm", "-rf"]
    assert Path(remove[2]).expanduser() == build_dir(load_params(None).cache_dir, KEY).parent
    params = load_params(None, ["backend=cpu", *overrides(keep, Path("/unused"))])
    assert not params.build.wheel_cache
    plan = configure(with_ccache, params)
    assert not plan.wheel_cache and not plan.ccache
    assert not [arg for arg in plan.cmake_args if "_COMPILER_LAUNCHER=" in arg]
    assert "-DGGML_CCACHE=OFF" in plan.cmake_args


def test_ccache_off_alone_leaves_llama_cpps_own_ccache_on(with_ccache):
    """What the README says -DGGML_CCACHE=OFF is for: build.ccache=off passes nothing that stops llama.cpp's
    CMake (GGML_CCACHE, on by default) from using a ccache on the PATH. Should the plan pass it one day, this
    fails, and the README's recipe can lose the argument."""
    plan = configure(with_ccache, load_params(None, ["backend=cpu", "build.ccache=off"]))
    assert not plan.ccache and not [arg for arg in plan.cmake_args if "GGML_CCACHE" in arg]
