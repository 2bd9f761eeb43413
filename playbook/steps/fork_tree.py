"""A source tree of a llama-cpp-python fork at one commit, its git submodules (vendor/llama.cpp) at the
commits the fork pins: what ``git clone --recursive`` gives, made from git folders that are already
here (mirrors, offline copies), with ``git archive``. The result is a ``source.kind: path`` tree.

    python scripts/assemble-fork-tree.py FORK_GIT DEST --submodule vendor/llama.cpp=LLAMA_CPP_GIT

A mirror may lack the contents of its largest files (llama.cpp's test vocabularies, models/*.gguf):
``allow_absent`` names the paths that may be missing; they are left out of the tree and listed in
its record. Any other missing file stops the assembly before anything is written.
"""

from __future__ import annotations

import fnmatch
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from playbook.errors import PlaybookError
from playbook.serialization import read_json, write_json

RECORD = "FORK_TREE.json"  # in the tree: what it was assembled from (playbook/steps/source.py reads it)
GIT_TIMEOUT_S = 1800


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
    left_out: list[str] = field(default_factory=list)  # paths in the tree whose contents the git folders lacked

    def commits(self) -> dict[str, str]:
        """The fork's commit under ".", each submodule's under its path."""
        return {".": self.commit, **{m.path: m.commit for m in self.submodules}}


def git(repo: Path, *args: str, env: Mapping[str, str] | None = None, stdin: bytes | None = None) -> bytes:
    """``git`` in a checkout or a bare git folder; its standard output as bytes (archives are binary)."""
    where = ["--git-dir", str(repo)] if (repo / "HEAD").is_file() and not (repo / ".git").exists() else ["-C", str(repo)]
    try:
        proc = subprocess.run(["git", *where, *args], input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S,
                              check=False, env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        raise ForkTreeError(f"git {' '.join(args)} in {repo} did not finish in {GIT_TIMEOUT_S // 60} minutes") from None
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
    return [Submodule(path, sha, urls.get(path, "")) for mode, kind, sha, path in _entries(repo, commit)
            if kind == "commit"]


def absent_files(repo: Path, commit: str) -> list[str]:
    """Paths of ``commit`` whose contents ``repo`` does not hold (a mirror without its largest blobs)."""
    blobs = [(sha, path) for _mode, kind, sha, path in _entries(repo, commit) if kind == "blob"]
    if not blobs:
        return []
    answers = git(repo, "cat-file", "--batch-check", stdin="".join(f"{sha}\n" for sha, _ in blobs).encode())
    return [path for (_sha, path), answer in zip(blobs, answers.decode().splitlines(), strict=True)
            if answer.endswith(" missing")]


def _entries(repo: Path, commit: str) -> list[tuple[str, str, str, str]]:
    """(mode, kind, sha, path) of every entry of ``commit``'s tree, recursively; -z keeps odd names intact."""
    entries = []
    for record in git(repo, "ls-tree", "-r", "-z", commit).decode().split("\0"):
        if record:
            meta, path = record.split("\t", 1)
            mode, kind, sha = meta.split()
            entries.append((mode, kind, sha, path))
    return entries


@dataclass
class _Part:
    """One ``git archive`` to unpack: the fork itself (prefix "") or a submodule (prefix its path)."""
    repo: Path
    commit: str
    prefix: str
    absent: list[str]  # relative to the part's own root


def assemble(repo: Path, dest: Path, submodule_repos: Mapping[str, Path], commit: str = "HEAD",
             allow_absent: Sequence[str] = ()) -> ForkTree:
    """``repo`` at ``commit`` written to ``dest``, each submodule from its git folder at the pinned commit.

    ``allow_absent``: shell patterns of tree paths (``vendor/llama.cpp/models/*.gguf``) that may be missing
    from the git folders; every such file is left out and recorded. The tree appears at ``dest`` whole or
    not at all."""
    if dest.exists() and any(dest.iterdir()):
        raise ForkTreeError(f"{dest} is not empty")
    sha = git(repo, "rev-parse", f"{commit}^{{commit}}").decode().strip()
    modules = pinned_submodules(repo, sha)
    parts = [_Part(repo, sha, "", absent_files(repo, sha))]
    for module in modules:  # every commit and file is checked before anything is written
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
        parts.append(_Part(source, module.commit, module.path, absent_files(source, module.commit)))
    left_out = [_join(part.prefix, path) for part in parts for path in part.absent]
    if refused := [path for path in left_out if not any(fnmatch.fnmatchcase(path, p) for p in allow_absent)]:
        shown = ", ".join(refused[:8]) + (f" and {len(refused) - 8} more" if len(refused) > 8 else "")
        raise ForkTreeError(f"the git folders lack the contents of {len(refused)} file(s) of the tree: {shown}. "
                            f"Fetch them, or, where the build does not need them, leave them out with "
                            f"--allow-absent PATTERN (e.g. --allow-absent '{_pattern_hint(refused[0])}')")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent if dest.parent.is_dir() else None))
    try:
        for part in parts:
            target = staging / part.prefix
            target.mkdir(parents=True, exist_ok=True)
            _extract(_archive(part), target)
        result = ForkTree(str(dest), str(repo), sha, modules, left_out)
        write_json(result, staging / RECORD)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(dest))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def read_record(tree: Path) -> ForkTree | None:
    """The record of a tree this module assembled; None for any other tree."""
    record = tree / RECORD
    return read_json(ForkTree, record) if record.is_file() else None


def _archive(part: _Part) -> bytes:
    """``git archive`` of the part's commit; with files absent, of a tree without them, written to a
    temporary object folder so that the git folder itself is only read."""
    if not part.absent:
        return git(part.repo, "archive", "--format=tar", part.commit)
    with tempfile.TemporaryDirectory(prefix="fork-tree-index.") as scratch:
        objects, work_tree = Path(scratch) / "objects", Path(scratch) / "empty"  # update-index wants a work tree
        objects.mkdir()
        work_tree.mkdir()
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index"), "GIT_OBJECT_DIRECTORY": str(objects),
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(_object_folder(part.repo)), "GIT_WORK_TREE": str(work_tree)}
        git(part.repo, "read-tree", part.commit, env=env)
        git(part.repo, "update-index", "--force-remove", "-z", "--stdin", env=env,
            stdin="".join(f"{path}\0" for path in part.absent).encode())
        tree = git(part.repo, "write-tree", env=env).decode().strip()
        return git(part.repo, "archive", "--format=tar", tree, env=env)


def _object_folder(repo: Path) -> Path:
    found = git(repo, "rev-parse", "--git-path", "objects").decode().strip()
    path = Path(found)
    return path if path.is_absolute() else repo / path


def _extract(archive: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def _join(prefix: str, path: str) -> str:
    return f"{prefix}/{path}" if prefix else path


def _pattern_hint(path: str) -> str:
    folder, _, name = path.rpartition("/")
    suffix = name.rpartition(".")[2] if "." in name else ""
    return f"{folder}/*.{suffix}" if folder and suffix else path
