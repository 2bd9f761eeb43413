"""Tests for playbook.offline.bundle: source trimming, the present-packages filter, the Requires-Dist
closure check on handmade wheels. Nothing here uses the network unless marked ``network``."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from playbook.offline import bundle
from playbook.offline.bundle import (
    HEADLESS_REQUIREMENTS,
    SOURCE_REMOVE,
    Resolved,
    canonical,
    check_closure,
    drop_present,
    headless_requirements,
    pyproject_dependencies,
    read_present,
    removal_pattern,
    select_needed,
    target_environment,
    trim_source,
    wheel_metadata,
)

network = pytest.mark.skipif(
    os.environ.get("PLAYBOOK_NETWORK_TESTS") != "1", reason="needs a package index; set PLAYBOOK_NETWORK_TESTS=1"
)

ROOT = "llama_cpp_python-9.9.9"
FAKE_TREE = {
    "pyproject.toml": "[project]\nname='llama_cpp_python'\n",
    "CMakeLists.txt": "add_subdirectory(vendor/llama.cpp)\n",
    "README.md": "readme\n",
    "llama_cpp/__init__.py": "__version__ = '9.9.9'\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    ".git/modules/vendor/llama.cpp/HEAD": "0c1e57098bba43ac29e6e3b677cdceebdd22334f\n",
    ".github/workflows/ci.yaml": "x",
    "docs/index.md": "docs",
    "examples/high_level_api/x.py": "x",
    "tests/test_llama.py": "x",
    "vendor/llama.cpp/.git": "gitdir: ../../.git/modules/vendor/llama.cpp\n",
    "vendor/llama.cpp/CMakeLists.txt": "add_subdirectory(ggml)\nadd_subdirectory(tools)\n",
    "vendor/llama.cpp/cmake/build-info.cmake": "set(BUILD_NUMBER 0)\n",
    "vendor/llama.cpp/docs/build.md": "docs",
    "vendor/llama.cpp/media/logo.png": "png" * 100,
    "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf": "GGUF-spm",
    "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf.inp": "inp",
    "vendor/llama.cpp/models/ggml-vocab-gpt-2.gguf": "GGUF-gpt2" * 50,
    "vendor/llama.cpp/models/templates/chatml.jinja": "{{x}}",
    "vendor/llama.cpp/ggml/CMakeLists.txt": "add_subdirectory(src)\n",
    "vendor/llama.cpp/ggml/src/CMakeLists.txt": "ggml_add_backend(CPU)\n",
    "vendor/llama.cpp/ggml/src/ggml-backend.cpp": "int x;",
    "vendor/llama.cpp/ggml/src/ggml-cpu/CMakeLists.txt": "cpu",
    "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt": "cuda",
    "vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu": "cuda",
    "vendor/llama.cpp/ggml/src/ggml-vulkan/CMakeLists.txt": "vulkan",
    "vendor/llama.cpp/ggml/src/ggml-metal/ggml-metal.m": "metal",
    "vendor/llama.cpp/tools/CMakeLists.txt": "add_subdirectory(llama-bench)\nadd_subdirectory(mtmd)\n",
    "vendor/llama.cpp/tools/llama-bench/CMakeLists.txt": "add_executable(llama-bench llama-bench.cpp)\n",
    "vendor/llama.cpp/tools/llama-bench/llama-bench.cpp": "int main(){}",
    "vendor/llama.cpp/tools/mtmd/CMakeLists.txt": "add_library(mtmd mtmd.cpp)\n",
    "vendor/llama.cpp/tools/mtmd/test-1.jpeg": "jpeg",
    "vendor/llama.cpp/tools/mtmd/tests/run.sh": "sh",
    "vendor/llama.cpp/tools/ui/CMakeLists.txt": "ui",
    "vendor/llama.cpp/tools/ui/src/app.svelte": "svelte",
    "vendor/llama.cpp/tests/CMakeLists.txt": "tests",
    "vendor/llama.cpp/tests/test-chat.cpp": "int main(){}",
    "vendor/llama.cpp/tests/snapshots/a.schema": "{}",
    "vendor/llama.cpp/gguf-py/gguf/__init__.py": "x",
}
KEPT = {
    "pyproject.toml",
    "CMakeLists.txt",
    "README.md",
    "llama_cpp/__init__.py",
    "vendor/llama.cpp/CMakeLists.txt",
    "vendor/llama.cpp/cmake/build-info.cmake",
    "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf",
    "vendor/llama.cpp/ggml/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-backend.cpp",
    "vendor/llama.cpp/ggml/src/ggml-cpu/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-vulkan/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu",
    "vendor/llama.cpp/tools/CMakeLists.txt",
    "vendor/llama.cpp/tools/llama-bench/CMakeLists.txt",
    "vendor/llama.cpp/tools/llama-bench/llama-bench.cpp",
    "vendor/llama.cpp/tools/mtmd/CMakeLists.txt",
    "vendor/llama.cpp/tools/mtmd/tests/run.sh",
}


def _write_tree(base: Path) -> Path:
    root = base / ROOT
    for rel, text in FAKE_TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def fake_sdist(tmp_path: Path) -> Path:
    tree = _write_tree(tmp_path / "tree")
    sdist = tmp_path / f"{ROOT}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(tree, arcname=ROOT)
    return sdist


# ----------------------------------------------------------------------------- source


def test_removal_pattern_keeps_the_spm_vocab_and_build_files():
    assert removal_pattern("vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf") == ""
    assert removal_pattern("vendor/llama.cpp/models") == ""
    assert removal_pattern("vendor/llama.cpp/models/ggml-vocab-gpt-2.gguf") == "vendor/llama.cpp/models/*"
    assert removal_pattern(".git/objects/pack/x.pack") == ".git"
    assert removal_pattern("vendor/llama.cpp/docs/build.md") == "vendor/llama.cpp/docs"
    assert removal_pattern("vendor/llama.cpp/ggml/src/ggml-metal/x.m") == "vendor/llama.cpp/ggml/src/ggml-metal"
    assert removal_pattern("tests/test_llama.py") == "tests"
    # llama.cpp's own tests and examples go too: read only with LLAMA_BUILD_TESTS/EXAMPLES, never on here
    assert removal_pattern("vendor/llama.cpp/tests/test-chat.cpp") == "vendor/llama.cpp/tests"
    assert removal_pattern("vendor/llama.cpp/examples/simple/CMakeLists.txt") == "vendor/llama.cpp/examples"
    for kept in ("CMakeLists.txt", "vendor/llama.cpp/tools/llama-bench/llama-bench.cpp",
                 "vendor/llama.cpp/tools/mtmd/CMakeLists.txt", "vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu",
                 "vendor/llama.cpp/ggml/src/ggml-vulkan/CMakeLists.txt",  # the Vulkan backend builds from a bundle
                 "vendor/llama.cpp/ggml/src/ggml-backend.cpp", "vendor/llama.cpp/tools/mtmd/tests/run.sh"):
        assert removal_pattern(kept) == "", kept


def test_trim_source_from_sdist(fake_sdist: Path, tmp_path: Path):
    result = trim_source(fake_sdist, tmp_path / "out")
    assert result.root == tmp_path / "out" / ROOT
    assert _files(result.root) == KEPT
    assert (result.root / "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf").read_text() == "GGUF-spm"
    assert not (result.root / "vendor/llama.cpp/ggml/src/ggml-metal").exists()
    assert (result.root / "vendor/llama.cpp/ggml/src/ggml-vulkan/CMakeLists.txt").is_file()
    assert not (result.root / ".git").exists()
    assert result.kept_bytes == sum((result.root / f).stat().st_size for f in KEPT)
    removed = {r["pattern"]: r for r in result.removed}
    assert removed["vendor/llama.cpp/models/*"]["files"] == 3  # gpt-2 vocab, spm .inp, template
    assert removed[".git"]["files"] == 2
    assert set(removed) <= set(SOURCE_REMOVE)
    assert result.llama_cpp_commit == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def test_trim_source_from_tree_matches_sdist(fake_sdist: Path, tmp_path: Path):
    tree = tmp_path / "tree" / ROOT
    from_tree = trim_source(tree, tmp_path / "a")
    from_sdist = trim_source(fake_sdist, tmp_path / "b")
    assert _files(from_tree.root) == _files(from_sdist.root) == KEPT
    assert from_tree.kept_bytes == from_sdist.kept_bytes
    assert sorted((r["pattern"], r["files"]) for r in from_tree.removed) == sorted(
        (r["pattern"], r["files"]) for r in from_sdist.removed
    )
    assert from_tree.llama_cpp_commit == from_sdist.llama_cpp_commit


def test_trim_source_replaces_an_old_tree(fake_sdist: Path, tmp_path: Path):
    stale = tmp_path / "out" / ROOT / "stale.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    trim_source(fake_sdist, tmp_path / "out")
    assert not stale.exists()


# ----------------------------------------------------------------------------- requirements


def test_headless_requirements_are_pyproject_dependencies():
    listed = {canonical(Requirement(d).name) for d in pyproject_dependencies()}
    missing = {canonical(n) for n in HEADLESS_REQUIREMENTS} - listed
    assert not missing, f"HEADLESS_REQUIREMENTS not in pyproject's dependencies: {missing}"
    chosen = headless_requirements()
    assert {canonical(Requirement(r).name) for r in chosen} == {canonical(n) for n in HEADLESS_REQUIREMENTS}
    assert all(r in pyproject_dependencies() for r in chosen)  # with pyproject's version bounds
    interactive = {"jupyterlab", "ipywidgets", "nbconvert"}
    assert not interactive & {canonical(n) for n in HEADLESS_REQUIREMENTS}


def test_read_present_accepts_names_freeze_and_list_output(tmp_path: Path):
    listing = tmp_path / "present.txt"
    listing.write_text(
        "# comment\nnumpy\nPyYAML==6.0.3\ntyping_extensions @ file:///x.whl\n"
        "Package    Version\n---------- -------\nJinja2     3.1.6\n\n-e git+https://x#egg=y\n"
    )
    assert read_present(listing) == {"numpy", "pyyaml", "typing-extensions", "jinja2"}
    assert read_present(None) == set()


def test_gpu_machine_present_list():
    present = read_present(bundle.GPU_MACHINE_PRESENT)
    assert {"numpy", "pandas", "matplotlib", "pyyaml", "jinja2", "nvidia-ml-py", "scikit-build-core"} <= present
    assert not {"papermill", "nbclient", "ipykernel", "gguf", "diskcache", "platformdirs", "traitlets"} & present


def test_drop_present_filters_requirements():
    reqs = ["papermill>=2.6", "numpy>=1.26", "PyYAML>=6.0", "gguf>=0.17"]
    assert drop_present(reqs, {"numpy", "pyyaml"}) == ["papermill>=2.6", "gguf>=0.17"]


def _resolved(name: str, version: str, *requires: str) -> Resolved:
    return Resolved(canonical(name), version, f"{name}-{version}-py3-none-any.whl", "", "", list(requires))


def test_select_needed_does_not_descend_into_present_packages():
    resolved = {r.name: r for r in (
        _resolved("papermill", "2.7.0", "nbclient>=0.2", "requests", "pyyaml"),
        _resolved("nbclient", "0.11.0", "traitlets>=5.4", "pywin32; sys_platform == 'win32'"),
        _resolved("traitlets", "5.16.1", "pytest; extra == 'test'"),
        _resolved("requests", "2.34.2", "urllib3<3", "idna"),  # present: its deps are not needed
        _resolved("urllib3", "2.8.0"),
        _resolved("idna", "3.20"),
        _resolved("pyyaml", "6.0.3"),
        _resolved("jsonschema", "4.26.0", "rpds-py; extra == 'fast'"),
        _resolved("rpds-py", "1.0"),
    )}
    env = target_environment("3.12")
    needed, present = select_needed(resolved, ["papermill>=2.6", "jsonschema[fast]"], {"requests", "pyyaml"}, env)
    assert [r.name for r in needed] == ["jsonschema", "nbclient", "papermill", "rpds-py", "traitlets"]
    assert present == {"requests", "pyyaml"}


def test_select_needed_reports_what_the_resolution_lacks():
    with pytest.raises(bundle.BundleError, match="nbclient"):
        select_needed({"papermill": _resolved("papermill", "2.7", "nbclient")}, ["papermill"], set(),
                      target_environment())


def test_target_environment_markers():
    env = target_environment("3.12")
    assert Requirement("x; python_version >= '3.12' and sys_platform == 'linux'").marker.evaluate(env)
    assert not Requirement("x; python_version < '3.12'").marker.evaluate(env)
    assert not Requirement("x; platform_system == 'Windows'").marker.evaluate(env)


# ----------------------------------------------------------------------------- wheels


def _wheel(directory: Path, name: str, version: str, requires=(), tag: str = "py3-none-any") -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-{tag}.whl"
    metadata = io.StringIO()
    metadata.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for requirement in requires:
        metadata.write(f"Requires-Dist: {requirement}\n")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{dist}.dist-info/METADATA", metadata.getvalue())
        archive.writestr(f"{dist}.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
        archive.writestr(f"{name.replace('-', '_')}/__init__.py", "")
    return path


def test_wheel_metadata(tmp_path: Path):
    wheel = _wheel(tmp_path, "Jupyter_Client", "8.10.0", ["pyzmq>=25", "pytest; extra == 'test'"])
    assert wheel_metadata(wheel) == ("jupyter-client", "8.10.0", ["pyzmq>=25", "pytest; extra == 'test'"])


def test_check_closure_complete(tmp_path: Path):
    wheels = [
        _wheel(tmp_path, "papermill", "2.7.0", ["nbclient>=0.2", "requests", "black; extra == 'black'",
                                                 "pywin32; sys_platform == 'win32'",
                                                 "tomli; python_version < '3.11'"]),
        _wheel(tmp_path, "nbclient", "0.11.0", ["traitlets>=5.4"]),
        _wheel(tmp_path, "traitlets", "5.16.1"),
        _wheel(tmp_path, "pyzmq", "27.3.0", tag="cp312-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64"),
    ]
    assert check_closure(wheels, {"requests"}, "3.12", requirements=["papermill>=2.6"]) == []


def test_check_closure_finds_missing_versions_duplicates_and_tags(tmp_path: Path):
    wheels = [
        _wheel(tmp_path, "papermill", "2.7.0", ["nbclient>=0.2", "tenacity>=5"]),
        _wheel(tmp_path, "nbclient", "0.1.0"),  # too old for papermill
        _wheel(tmp_path, "jsonschema", "4.26.0", ["rpds-py; extra == 'fast'"]),
        _wheel(tmp_path, "traitlets", "5.16.1"),
        _wheel(tmp_path, "traitlets", "5.14.0", tag="py2.py3-none-any"),
        _wheel(tmp_path, "winthing", "1.0", tag="cp312-cp312-win_amd64"),
        _wheel(tmp_path, "oldabi", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64"),
    ]
    problems = check_closure(wheels, set(), "3.12", requirements=["papermill", "jsonschema[fast]", "numpy"])
    text = "\n".join(problems)
    assert "tenacity>=5, which is neither bundled nor present" in text
    assert "requires nbclient>=0.2, but the bundle has nbclient 0.1.0" in text
    assert "two versions of traitlets" in text
    assert "winthing-1.0-cp312-cp312-win_amd64.whl: no tag" in text
    assert "oldabi-1.0-cp311-cp311-manylinux_2_17_x86_64.whl: no tag" in text
    assert "rpds-py" in text  # asked for through jsonschema[fast]
    assert "the requirements requires numpy, which is neither bundled nor present" in text
    assert "numpy" not in "\n".join(check_closure(wheels, {"numpy"}, "3.12", requirements=["numpy"]))


def test_target_commands():
    set_bundle, install, run = bundle.target_commands('"$PWD/.carry"', ROOT)
    assert set_bundle == 'BUNDLE="$PWD/.carry"'
    assert "--no-index --no-deps" in install and '"$BUNDLE"/wheels/*.whl' in install
    assert '"$BUNDLE"/site ' in install and 'PYTHONPATH="$BUNDLE"/site:"$PWD"' in install
    assert f'--set source.path="$BUNDLE"/source/{ROOT}' in run


def _pure_wheel(folder: Path, name: str = "bundled_hello") -> Path:
    """A pure wheel of one module, ``bundled_hello``, as pip --target installs it."""
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}.py", "GREETING = 'hello'\n")
        archive.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        archive.writestr(f"{name}-1.0.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return wheel


def test_readme_lines_work_after_the_bundle_is_moved(tmp_path: Path, fake_sdist: Path):
    """The README's lines name the bundle through $BUNDLE, set by the first line relative to the checkout:
    no path of the machine that made it. Made in one folder, moved into another checkout, its lines run as
    written there: the wheels install into the moved bundle and the run line names the moved source."""
    import shutil
    import subprocess
    import sys

    made = bundle.make_bundle(tmp_path / "made" / "offline-bundle", fake_sdist, "3.12", requirements=[],
                              pip_python=sys.executable, log=lambda *_: None)
    (tmp_path / "made" / "offline-bundle" / "wheels").mkdir(exist_ok=True)  # nothing to download here: one wheel
    _pure_wheel(tmp_path / "made" / "offline-bundle" / "wheels")
    readme = (tmp_path / "made" / "offline-bundle" / "README.txt").read_text()
    record = (tmp_path / "made" / "offline-bundle" / "BUNDLE.json").read_text()
    for text in (readme, record, made.summary(), made.command):
        assert str(tmp_path) not in text
    lines = made.command.splitlines()
    assert lines[0] == 'BUNDLE="$PWD/offline-bundle"' and all(f"  {line}" in readme for line in lines)

    checkout = tmp_path / "elsewhere" / "checkout"
    checkout.mkdir(parents=True)
    moved = checkout / "offline-bundle"
    shutil.move(tmp_path / "made" / "offline-bundle", moved)
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "python3").symlink_to(sys.executable)  # the lines say python3: this test's interpreter
    script = "\n".join(["set -e", lines[0], lines[1], 'printf "%s\\n" "$PYTHONPATH"', "printf '%s\\n' " + lines[2]])
    done = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert (moved / "site" / "bundled_hello.py").is_file()
    python_path, *run_args = done.stdout.splitlines()
    assert python_path == f"{moved}/site:{checkout}"
    source = run_args[run_args.index("source.kind=path") + 2].removeprefix("source.path=")
    assert Path(source) == moved / "source" / ROOT and (Path(source) / "pyproject.toml").is_file()
    # and the chain finds the tree in the moved bundle through BUNDLE.json
    from playbook.steps.source import bundle_tree

    assert bundle_tree(moved) == moved / "source" / ROOT


# ----------------------------------------------------------------------------- network


@pytest.mark.network
@network
def test_make_bundle_small(tmp_path: Path, fake_sdist: Path):
    """Resolves and downloads one small pure wheel; the present numpy is neither resolved nor downloaded."""
    present = tmp_path / "present.txt"
    present.write_text("numpy\n")
    made = bundle.make_bundle(tmp_path / "bundle", fake_sdist, "3.12",
                              requirements=["diskcache>=5.6", "numpy"], exclude_present=present, log=lambda *_: None)
    assert [w.split("-")[0] for w in made.wheels] == ["diskcache"]
    assert made.problems == []
    record = json.loads((tmp_path / "bundle" / "BUNDLE.json").read_text())
    assert record["wheels"] == made.wheels and record["removed"]
    assert (tmp_path / "bundle" / "README.txt").read_text().count("--no-index") == 1
    assert made.total_bytes == made.source_bytes + made.wheels_bytes
