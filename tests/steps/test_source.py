from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from playbook.steps.source import SourceError, resolve_source


def make_sdist(folder, version="0.3.36"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"llama_cpp_python-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as sdist:
        data = b"[project]\nname = 'llama_cpp_python'\n"
        info = tarfile.TarInfo(f"llama_cpp_python-{version}/pyproject.toml")
        info.size = len(data)
        sdist.addfile(info, io.BytesIO(data))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def bundle_folder(tmp_path: Path, recorded_tree: str) -> tuple[Path, Path]:
    """An offline bundle as ``playbook bundle`` lays it out (source tree, wheels/, BUNDLE.json naming the
    tree as ``recorded_tree``); returns the bundle and its source tree."""
    bundle = tmp_path / "bundle"
    tree = bundle / "source" / "llama_cpp_python-0.3.36"
    (tree / "vendor" / "llama.cpp").mkdir(parents=True)
    (tree / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text("")
    (tree / "pyproject.toml").write_text("[project]\nname='llama_cpp_python'\n")
    (bundle / "wheels").mkdir()
    (bundle / "BUNDLE.json").write_text(json.dumps({"source_tree": recorded_tree}))
    return bundle, tree


def test_local_sdist_and_folder_are_checked_against_the_pin(tmp_path):
    path, digest = make_sdist(tmp_path / "offline")
    assert resolve_source("0.3.36", digest, tmp_path / "cache", str(path)).sha256 == digest
    assert resolve_source("0.3.36", digest, tmp_path / "cache", str(tmp_path / "offline")).path == str(path)
    with pytest.raises(SourceError, match="is not the pinned release"):
        resolve_source("0.3.36", "0" * 64, tmp_path / "cache", str(path))


def test_folder_without_that_version_lists_what_it_has(tmp_path):
    make_sdist(tmp_path / "offline", "0.3.35")
    with pytest.raises(SourceError, match="holds no llama_cpp_python-0.3.36.tar.gz; found: llama_cpp_python-0.3.35"):
        resolve_source("0.3.36", "", tmp_path / "cache", str(tmp_path / "offline"))


def test_checkout_without_submodule_says_how_to_fetch_it(tmp_path):
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / "pyproject.toml").write_text("[project]\nname='llama_cpp_python'\n")
    with pytest.raises(SourceError, match="git -C .* submodule update --init --recursive"):
        resolve_source("0.3.36", "", tmp_path / "cache", str(tmp_path / "checkout"))


def test_cached_download_is_rechecked(tmp_path):
    cache = tmp_path / "cache"
    make_sdist(cache / "sdists")
    with pytest.raises(SourceError, match="Delete it to download it again"):
        resolve_source("0.3.36", "f" * 64, cache)


def test_a_bundle_folder_is_source_and_index(this_machine, tmp_path):
    from playbook.params import load_params
    from playbook.steps.configure import configure

    bundle, tree = bundle_folder(tmp_path, "source/llama_cpp_python-0.3.36")
    assert resolve_source("0.3.36", "", tmp_path / "cache", str(bundle)).path == str(tree.resolve())
    plan = configure(this_machine, load_params(None, ["source.kind=path", f"source.path={bundle}", "backend=cpu"]))
    assert plan.find_links == str((bundle / "wheels").resolve())


def test_a_bundle_folder_is_a_source(tmp_path):
    bundle, tree = bundle_folder(tmp_path, "/elsewhere/source/llama_cpp_python-0.3.36")  # made on another machine
    info = resolve_source("0.3.36", "", tmp_path / "cache", str(bundle))
    assert info.kind == "tree" and Path(info.path) == tree and "offline bundle" in info.origin
