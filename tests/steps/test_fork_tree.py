"""A fork's tree with its submodule at the pinned commit, from local git folders (guide 002's fork vendors
llama.cpp as a submodule). Made here with two small real repositories, a real ``git submodule add``, and
bare mirrors of both (what a mirror of the fork and of llama.cpp is)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from playbook.steps.fork_tree import RECORD, ForkTreeError, absent_files, assemble, pinned_submodules
from playbook.steps.source import resolve_source

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
LLAMA_URL = "https://github.com/ggml-org/llama.cpp.git"
VOCAB = "models/ggml-vocab-test.gguf"


def run(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "protocol.file.allow=always", "-C", str(repo), *args], check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    run(repo, "add", "-A")
    run(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", message)
    return run(repo, "rev-parse", "HEAD")


@pytest.fixture()
def repos(tmp_path):
    """(fork mirror, llama.cpp mirror, the pinned commit): the fork pins llama.cpp's first commit, and
    llama.cpp has moved on since."""
    llama = tmp_path / "work" / "llama.cpp"
    (llama / "models").mkdir(parents=True)
    run(llama, "init", "-q")
    (llama / "CMakeLists.txt").write_text("# pinned\n")
    (llama / VOCAB).write_bytes(b"GGUF" + bytes(range(256)))
    (llama / "convert.py").write_text("#!/usr/bin/env python3\n")
    (llama / "convert.py").chmod(0o755)
    pinned = commit_all(llama, "pinned")
    (llama / "CMakeLists.txt").write_text("# newer\n")
    commit_all(llama, "newer")
    fork = tmp_path / "work" / "fork"
    (fork / "llama_cpp").mkdir(parents=True)
    run(fork, "init", "-q")
    (fork / "pyproject.toml").write_text("[project]\nname = 'llama_cpp_python'\n")
    (fork / "llama_cpp" / "__init__.py").write_text('__version__ = "0.3.48"\n')
    run(fork, "submodule", "add", "-q", str(llama), "vendor/llama.cpp")
    run(fork / "vendor" / "llama.cpp", "checkout", "-q", pinned)
    run(fork, "config", "-f", ".gitmodules", "submodule.vendor/llama.cpp.url", LLAMA_URL)  # as the real fork has it
    commit_all(fork, "fork")
    mirrors = tmp_path / "mirrors"
    for repo in (fork, llama):
        subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(mirrors / repo.name)], check=True,
                       capture_output=True, timeout=60)
    return mirrors / "fork", mirrors / "llama.cpp", pinned


def drop_blob(mirror: Path, path: str, commit: str) -> None:
    """Remove one file's contents from a mirror, as a snapshot without its largest files has it."""
    sha = run(mirror, "rev-parse", f"{commit}:{path}")
    (mirror / "objects" / sha[:2] / sha[2:]).unlink()


def test_submodule_pins_are_read_from_the_fork(repos):
    fork, _llama, pinned = repos
    (module,) = pinned_submodules(fork)
    assert (module.path, module.commit, module.url) == ("vendor/llama.cpp", pinned, LLAMA_URL)


def test_the_tree_holds_the_submodule_at_its_pinned_commit(repos, tmp_path):
    fork, llama, pinned = repos
    tree = assemble(fork, tmp_path / "tree", {"vendor/llama.cpp": llama})
    root = Path(tree.tree)
    assert (root / "vendor" / "llama.cpp" / "CMakeLists.txt").read_text() == "# pinned\n"
    assert (root / "vendor" / "llama.cpp" / "convert.py").stat().st_mode & 0o111
    assert (root / "llama_cpp" / "__init__.py").is_file()
    record = json.loads((root / RECORD).read_text())
    assert record["submodules"][0]["commit"] == pinned and record["commit"] == tree.commit
    assert record["commit"] == run(fork, "rev-parse", "HEAD") and record["left_out"] == []


def test_the_source_step_records_the_pins_of_an_assembled_tree(repos, tmp_path):
    fork, llama, pinned = repos
    assemble(fork, tmp_path / "tree", {"vendor/llama.cpp": llama})
    info = resolve_source("", "", tmp_path / "cache", str(tmp_path / "tree"))
    assert (info.kind, info.version) == ("tree", "0.3.48")
    assert info.commits == {".": run(fork, "rev-parse", "HEAD"), "vendor/llama.cpp": pinned}
    assert pinned in info.origin


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


def test_a_file_the_mirror_lacks_stops_the_assembly_unless_allowed(repos, tmp_path):
    fork, llama, pinned = repos
    drop_blob(llama, VOCAB, pinned)
    assert absent_files(llama, pinned) == [VOCAB]
    with pytest.raises(ForkTreeError, match=r"vendor/llama\.cpp/models/ggml-vocab-test\.gguf.*--allow-absent "
                                            r"'vendor/llama\.cpp/models/\*\.gguf'"):
        assemble(fork, tmp_path / "tree", {"vendor/llama.cpp": llama})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirrors", "work"]  # nothing written, no staging left
    objects_before = sorted(str(p) for p in (llama / "objects").rglob("*"))
    tree = assemble(fork, tmp_path / "tree", {"vendor/llama.cpp": llama},
                    allow_absent=["vendor/llama.cpp/models/*.gguf"])
    root = Path(tree.tree)
    assert not (root / "vendor" / "llama.cpp" / VOCAB).exists()
    assert (root / "vendor" / "llama.cpp" / "CMakeLists.txt").read_text() == "# pinned\n"
    assert json.loads((root / RECORD).read_text())["left_out"] == [f"vendor/llama.cpp/{VOCAB}"]
    assert sorted(str(p) for p in (llama / "objects").rglob("*")) == objects_before  # the mirror was only read


def test_a_tree_is_not_written_over_a_non_empty_folder(repos, tmp_path):
    fork, llama, _pinned = repos
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "mine.txt").write_text("keep")
    with pytest.raises(ForkTreeError, match="not empty"):
        assemble(fork, tmp_path / "tree", {"vendor/llama.cpp": llama})
    assert [p.name for p in (tmp_path / "tree").iterdir()] == ["mine.txt"]
