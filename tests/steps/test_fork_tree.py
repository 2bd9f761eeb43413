"""A fork's tree with its submodule at the pinned commit, from local git folders (guide 002's fork vendors
llama.cpp as a submodule); made here with two small repositories."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from playbook.steps.fork_tree import RECORD, ForkTreeError, assemble, pinned_submodules

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def run(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def commit_all(repo: Path, message: str, add: bool = True) -> str:
    if add:
        run(repo, "add", "-A")
    run(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", message)
    return run(repo, "rev-parse", "HEAD")


@pytest.fixture()
def repos(tmp_path):
    llama = tmp_path / "llama.cpp"
    llama.mkdir()
    run(llama, "init", "-q")
    (llama / "CMakeLists.txt").write_text("# pinned\n")
    pinned = commit_all(llama, "pinned")
    (llama / "CMakeLists.txt").write_text("# newer\n")
    commit_all(llama, "newer")
    fork = tmp_path / "fork"
    (fork / "llama_cpp").mkdir(parents=True)
    run(fork, "init", "-q")
    (fork / "pyproject.toml").write_text("[project]\nname = 'llama_cpp_python'\n")
    (fork / "llama_cpp" / "__init__.py").write_text('__version__ = "0.3.48"\n')
    (fork / ".gitmodules").write_text('[submodule "vendor/llama.cpp"]\n\tpath = vendor/llama.cpp\n'
                                      "\turl = https://github.com/ggml-org/llama.cpp.git\n")
    run(fork, "add", "-A")
    run(fork, "update-index", "--add", "--cacheinfo", f"160000,{pinned},vendor/llama.cpp")  # what a submodule is
    commit_all(fork, "fork", add=False)
    return fork, llama, pinned


def test_submodule_pins_are_read_from_the_fork(repos):
    fork, _llama, pinned = repos
    (module,) = pinned_submodules(fork)
    assert (module.path, module.commit, module.url) == ("vendor/llama.cpp", pinned,
                                                        "https://github.com/ggml-org/llama.cpp.git")


def test_the_tree_holds_the_submodule_at_its_pinned_commit(repos, tmp_path):
    fork, llama, pinned = repos
    tree = assemble(fork, tmp_path / "tree", {"vendor/llama.cpp": llama})
    root = Path(tree.tree)
    assert (root / "vendor" / "llama.cpp" / "CMakeLists.txt").read_text() == "# pinned\n"
    assert (root / "llama_cpp" / "__init__.py").is_file()
    record = json.loads((root / RECORD).read_text())
    assert record["submodules"][0]["commit"] == pinned and record["commit"] == tree.commit


def test_a_missing_submodule_commit_is_named_before_anything_is_written(repos, tmp_path):
    fork, _llama, pinned = repos
    empty = tmp_path / "empty"
    empty.mkdir()
    run(empty, "init", "-q")
    with pytest.raises(ForkTreeError, match=pinned):
        assemble(fork, tmp_path / "tree", {"vendor/llama.cpp": empty})
    with pytest.raises(ForkTreeError, match="--submodule vendor/llama.cpp=PATH"):
        assemble(fork, tmp_path / "tree", {})
    assert not (tmp_path / "tree").exists()
