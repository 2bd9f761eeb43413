"""The diagnosis corpus: real logs from public threads, split into ``train`` and ``test`` by a fixed rule.

Every log in ``tests/data/corpus/<part>/<family>/<name>.txt`` starts with a header::

    # source: https://github.com/owner/repo/issues/123
    # expected: failure-id[, another-id]     (``none`` for a clean log)
    <the lines that matter, as the user pasted them>

The part is decided by the thread a log comes from, never by its content: :func:`part_of` hashes the
thread's key (``owner/repo#number`` for a GitHub issue, pull request or discussion, else the address
without its fragment and query), and about three threads in ten go to ``test``. Logs of one thread therefore
never straddle the parts. Patterns are written from ``train`` only; ``test`` measures them. A log added
later goes where this rule says (``tests/knowledge/test_corpus.py`` checks every file's folder).
"""

from __future__ import annotations

import hashlib
import re
import sys
from urllib.parse import urlsplit

PARTS = ("train", "test")
# The families of the corpus, as the diagnosis goal counts them (not failures.yaml's families).
CORPUS_FAMILIES = (
    "cuda-toolkit",  # CUDA toolkit, architecture and driver
    "cublas-cccl",  # cuBLAS and the CCCL (CUB, Thrust, libcu++) headers
    "host-compiler",  # host compiler and MSVC
    "build-tooling",  # CMake, ninja, pip and build isolation
    "vulkan",  # loader, headers, glslc and SPIR-V tools, shader generation, devices
    "rocm-hip",  # renamed flags, hipcc and clang, gfx targets, rocBLAS/hipBLAS
    "metal-macos",  # compiler, library loading, GPU families, memory
    "cpu",  # illegal instruction, AVX/AMX
    "runtime",  # library not found, C++ runtime mismatches, segfaults, out of memory
    "windows-env",  # paths, DLL search, stale variables
    "clean",  # successful builds and runs: must yield no finding
)
TEST_SHARE_IN_TENTHS = 3

_GITHUB_THREAD = re.compile(r"^/([^/]+)/([^/]+)/(?:issues|pull|discussions)/(\d+)")
_GITHUB_REPO = re.compile(r"^/([^/]+)/([^/]+)")


def thread_key(source: str) -> str:
    """The thread a source address belongs to: ``owner/repo#123`` on GitHub, else host and path."""
    parts = urlsplit(source.strip())
    host = parts.netloc.lower().removeprefix("www.")
    match = _GITHUB_THREAD.match(parts.path)
    if host == "github.com" and match:
        owner, repo, number = match.groups()
        return f"{owner.lower()}/{repo.lower()}#{number}"
    return f"{host}{parts.path.rstrip('/')}"


def project_key(source: str) -> str:
    """The project a source address belongs to: ``owner/repo`` on GitHub (all its issues, pull requests and
    discussions), else the host; ``local`` for a log that is no address (one made on this project's machines).
    Leaving one project out at a time measures how diagnosis does on a project it has no example from."""
    parts = urlsplit(source.strip())
    if parts.scheme not in ("http", "https"):
        return "local"
    host = parts.netloc.lower().removeprefix("www.")
    match = _GITHUB_THREAD.match(parts.path) or _GITHUB_REPO.match(parts.path)
    if host == "github.com" and match:
        return f"{match.group(1).lower()}/{match.group(2).lower()}"
    return host


def part_of(source: str) -> str:
    """``test`` for about three threads in ten, chosen by the hash of the thread's key; else ``train``."""
    digest = hashlib.sha256(thread_key(source).encode()).hexdigest()
    return "test" if int(digest[:8], 16) % 10 < TEST_SHARE_IN_TENTHS else "train"


def main(argv: list[str]) -> int:
    """``python -m playbook.knowledge.corpus URL...``: print each address's part and thread."""
    for source in argv:
        print(f"{part_of(source)}\t{thread_key(source)}\t{source}")
    return 0 if argv else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
