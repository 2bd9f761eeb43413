"""A source tree of a llama-cpp-python fork at one commit, its git submodules (vendor/llama.cpp) at the
commits the fork pins: what ``git clone --recursive`` gives, made from git folders that are already
here (mirrors, offline copies), with ``git archive``. The result is a ``source.kind: path`` tree.

    python scripts/assemble-fork-tree.py FORK_GIT DEST --submodule vendor/llama.cpp=LLAMA_CPP_GIT
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from playbook.errors import PlaybookError

RECORD = "FORK_TREE.json"


class ForkTreeError(PlaybookError):
    """The fork or a submodule commit is not in the git folders given; the message names what is missing."""


@dataclass
class Submodule:
    path: str  # vendor/llama.cpp
    commit: str  # what the fork pins (its gitlink)
    url: str = ""  # from .gitmodules
    source: str = ""  # the git folder it was taken from


@dataclass
class ForkTree:
    tree: str
    repository: str
    commit: str
    submodules: list[Submodule] = field(default_factory=list)


def git(repo: Path, *args: str) -> bytes:
    """``git`` in a checkout or a bare git folder; its standard output as bytes (archives are binary)."""
    where = ["--git-dir", str(repo)] if (repo / "HEAD").is_file() and not (repo / ".git").exists() else ["-C", str(repo)]
    try:
        proc = subprocess.run(["git", *where, *args], capture_output=True, timeout=1800, check=False)
    except subprocess.TimeoutExpired:
        raise ForkTreeError(f"git {' '.join(args)} in {repo} did not finish in 30 minutes") from None
    if proc.returncode != 0:
        raise ForkTreeError(f"git {' '.join(args)} in {repo}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def pinned_submodules(repo: Path, commit: str = "HEAD") -> list[Submodule]:
    """Every gitlink of ``commit`` with its URL from .gitmodules."""
    urls: dict[str, str] = {}
    try:
        modules = git(repo, "show", f"{commit}:.gitmodules").decode()
    except ForkTreeError:
        modules = ""
    current = ""
    for line in modules.splitlines():
        line = line.strip()
        if line.startswith("path"):
            current = line.split("=", 1)[1].strip()
        elif line.startswith("url") and current:
            urls[current] = line.split("=", 1)[1].strip()
    found = []
    for line in git(repo, "ls-tree", "-r", commit).decode().splitlines():
        meta, path = line.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "commit":
            found.append(Submodule(path, sha, urls.get(path, "")))
    return found


def _extract(archive: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def assemble(repo: Path, dest: Path, submodule_repos: dict[str, Path], commit: str = "HEAD") -> ForkTree:
    """``repo`` at ``commit`` written to ``dest``, each submodule from its git folder at the pinned commit."""
    if dest.exists() and any(dest.iterdir()):
        raise ForkTreeError(f"{dest} is not empty")
    sha = git(repo, "rev-parse", f"{commit}^{{commit}}").decode().strip()
    modules = pinned_submodules(repo, sha)
    for module in modules:  # every commit is checked before anything is written
        source = submodule_repos.get(module.path)
        if source is None:
            raise ForkTreeError(f"{module.path} is pinned at {module.commit} ({module.url or 'no URL'}): give a git "
                                f"folder holding that commit (--submodule {module.path}=PATH)")
        try:
            git(source, "cat-file", "-e", f"{module.commit}^{{commit}}")
        except ForkTreeError:
            raise ForkTreeError(f"{source} does not hold {module.path}'s pinned commit {module.commit}; fetch it "
                                f"there (git fetch {module.url or 'ORIGIN'} {module.commit})") from None
        module.source = str(source)
    dest.mkdir(parents=True, exist_ok=True)
    _extract(git(repo, "archive", "--format=tar", sha), dest)
    for module in modules:
        target = dest / module.path
        target.mkdir(parents=True, exist_ok=True)
        _extract(git(Path(module.source), "archive", "--format=tar", module.commit), target)
    result = ForkTree(str(dest), str(repo), sha, modules)
    (dest / RECORD).write_text(json.dumps({"repository": result.repository, "commit": sha, "submodules": [
        m.__dict__ for m in result.submodules]}, indent=1), encoding="utf-8")
    return result
