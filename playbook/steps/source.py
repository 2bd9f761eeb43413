"""Fetch and check the llama-cpp-python source: the pinned PyPI sdist, or a local checkout."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from playbook.errors import PlaybookError
from playbook.files import sha256_of
from playbook.params import Params
from playbook.process import run_captured
from playbook.steps.fork_tree import RECORD as FORK_TREE_RECORD
from playbook.steps.fork_tree import read_record

SDIST_NAME = "llama_cpp_python-{version}.tar.gz"
BUNDLE_FILE = "BUNDLE.json"  # marks a folder written by ``playbook bundle``


class SourceError(PlaybookError):
    """The source cannot be fetched, or is not what the parameters pin."""


@dataclass
class SourceInfo:
    kind: str  # "sdist" or "tree"
    path: str
    version: str
    sha256: str  # of the sdist file; "" for a source tree
    origin: str  # where it came from, in words
    # A tree assembled by steps/fork_tree.py: the fork's commit under ".", each submodule's under its path.
    commits: dict[str, str] = field(default_factory=dict)


def resolve_source(
    version: str,
    sha256: str,
    cache_dir: Path,
    path: str = "",
    find_links: str = "",
    python: str = sys.executable,
) -> SourceInfo:
    """A checked source ready for ``pip wheel``; downloads the sdist into ``cache_dir`` if needed."""
    if path:
        return _local_source(Path(path).expanduser().resolve(), version, sha256)
    cached = cache_dir / "sdists" / SDIST_NAME.format(version=version)
    if not cached.is_file():
        _download_sdist(version, cached.parent, find_links, python)
    return _checked_sdist(cached, version, sha256, origin=f"PyPI llama-cpp-python=={version}, cached at {cached}")


def bundle_wheels(path: str) -> str:
    """The wheels folder of an offline bundle given as ``source.path``: pip's index there."""
    folder = Path(path).expanduser()
    wheels = folder / "wheels"
    return str(wheels.resolve()) if (folder / BUNDLE_FILE).is_file() and wheels.is_dir() else ""


def _local_source(path: Path, version: str, sha256: str) -> SourceInfo:
    if path.is_dir() and (path / BUNDLE_FILE).is_file():
        tree = bundle_tree(path)
        info = _local_source(tree, version, sha256)
        info.origin = f"offline bundle {path} (playbook bundle): trimmed source tree {tree}"
        return info
    if path.is_dir() and (path / "pyproject.toml").is_file():
        vendored = path / "vendor" / "llama.cpp" / "CMakeLists.txt"
        if not vendored.is_file():
            raise SourceError(
                f"{path} has no vendor/llama.cpp sources: a git checkout needs its submodule; run "
                f"`git -C {path} submodule update --init --recursive`"
            )
        info = SourceInfo("tree", str(path), _tree_version(path), "", f"local source tree {path}")
        if fork := read_record(path):
            info.commits = fork.commits()
            info.origin += (f", assembled ({FORK_TREE_RECORD}) from {fork.repository} at {fork.commit}" +
                            "".join(f", {m.path} at {m.commit}" for m in fork.submodules) +
                            (f"; {len(fork.left_out)} file(s) the git folders lacked left out" if fork.left_out
                             else ""))
        return info
    if path.is_dir():
        sdist = path / SDIST_NAME.format(version=version)
        if not sdist.is_file():
            found = sorted(p.name for p in path.glob("llama_cpp_python-*.tar.gz"))
            raise SourceError(
                f"{path} holds no {sdist.name}; found: {', '.join(found) or 'no sdist'}. "
                "Set source.version to one of them or put the sdist there"
            )
        return _checked_sdist(sdist, version, sha256, origin=f"local folder {path}")
    if path.is_file() and path.name.endswith(".tar.gz"):
        return _checked_sdist(path, version, sha256 if sha256 else "", origin=f"local sdist {path}")
    raise SourceError(f"source.path {path} is neither a source tree, an sdist, nor a folder holding one")


def bundle_tree(bundle: Path) -> Path:
    """The source tree inside an offline bundle folder (``source/<tree>``, named in BUNDLE.json)."""
    named = json.loads((bundle / BUNDLE_FILE).read_text(encoding="utf-8")).get("source_tree", "")
    candidates = [bundle / "source" / Path(named).name] if named else sorted((bundle / "source").glob("*/"))
    tree = next((c for c in candidates if (c / "pyproject.toml").is_file()), None)
    if tree is None:
        raise SourceError(f"offline bundle {bundle} holds no source tree under source/; make it again with `playbook bundle`")
    return tree


def _checked_sdist(sdist: Path, version: str, sha256: str, origin: str) -> SourceInfo:
    actual = sha256_of(sdist)
    if sha256 and actual != sha256.lower():
        raise SourceError(
            f"sha256 of {sdist} is {actual}, but the parameters pin {sha256}: the file is not the pinned "
            "release. Delete it to download it again, or correct source.sha256 if you meant another release"
        )
    return SourceInfo("sdist", str(sdist), version, actual, origin)


def _download_sdist(version: str, dest: Path, find_links: str, python: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    args = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--dest", str(dest)]
    if find_links:
        args += ["--no-index", "--find-links", find_links]
    args.append(f"llama-cpp-python=={version}")
    proc = run_captured(args, timeout_s=600)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        if match := re.search(r"\(from versions: ([^)]*)\)", output):
            published = [v.strip() for v in match.group(1).split(",") if v.strip() and v.strip() != "none"]
            newest = ", ".join(published[-5:][::-1]) or "none found there"
            raise SourceError(f"source.version {version}: llama-cpp-python has no such release; the newest are "
                              f"{newest}. Set source.version to one of them, with its source.sha256")
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
        raise SourceError(f"source.version {version} could not be checked or downloaded: the package index did not "
                          f"answer ({last}). Offline, put the sdist in a folder and set source.path to it")


def multimodal_switch(path: str, default: str, names: tuple[str, ...]) -> str:
    """Which of ``names`` (libmtmd's CMake switch) a local source tree's CMakeLists.txt declares; ``default`` for
    an sdist, or a tree that declares none of them."""
    cmakelists = Path(path).expanduser() / "CMakeLists.txt" if path else None
    if cmakelists is None or not cmakelists.is_file():
        return default
    declared = set(re.findall(r"^\s*option\(\s*(\w+)", cmakelists.read_text(errors="replace"), re.MULTILINE))
    return next((name for name in names if name in declared), default)


def _tree_version(path: Path) -> str:
    init = path / "llama_cpp" / "__init__.py"
    if init.is_file():
        for line in init.read_text().splitlines():
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("\"'")
    return "unknown"


def resolve_params_source(params: Params) -> SourceInfo:
    """The source a parameter set names, fetched into its cache folder and checked."""
    source = params.source
    return resolve_source(source.version, source.sha256, params.cache_dir, source.path, source.find_links)
