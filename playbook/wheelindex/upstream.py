"""Wheels from a plain PEP 503 index: one without the playbook's catalogue and records, as llama-cpp-python's own
index is published (``https://abetlen.github.io/llama-cpp-python/whl/<folder>``, written by its
``scripts/releases-to-pep-503.sh`` from the GitHub releases)::

    whl/<folder>/index.html                       <a href="llama-cpp-python/">
    whl/<folder>/llama-cpp-python/index.html      <a href="https://github.com/.../v0.3.16-cu124/WHEEL">, one per wheel

The folders upstream keeps are ``cpu``, ``cu118`` ... ``cu132`` (the CUDA release), ``rocm72``, ``hip-radeon``,
``vulkan`` and ``metal``. What is read of such an index:

- the wheels its project page lists (relative or absolute links), and the sha256 of each where the link carries a
  ``#sha256=`` fragment (upstream's carry none: the download is then checked against nothing but the check);
- the backend, from the folder's name, as the backend units say (:meth:`BackendUnit.upstream_requirements`), with
  what the name says beyond it (``cu124``: CUDA 12.4, which a driver must support);
- the version, Python, ABI and platform tags from the wheel's name, and glibc from a ``manylinux_X_Y`` tag.

What cannot be known before the wheel is checked on the machine is marked unknown in its record
(:attr:`WheelRecord.unknown`): the CPU features its code needs, its backend's GPU code (CUDA's machine code and PTX,
HIP's gfx targets), and glibc behind a bare ``linux_x86_64`` tag. The selection ranks such wheels below recorded
ones of the same backend and refuses them only for what is known; verify's check here decides the rest.

``upstream`` among the sources (``wheel_index.sources``, ``playbook install --from upstream``) names upstream's
folder for each backend this machine can run, preferred first, the CPU last (``wheel_index.upstream_url``; CUDA:
the newest release upstream publishes that the driver supports).
"""

from __future__ import annotations

import html
import re
import urllib.parse
from pathlib import Path

from playbook.backends import registry
from playbook.errors import PlaybookError
from playbook.files import sha256_of
from playbook.params import UPSTREAM_WORD, WheelIndexParams
from playbook.wheelindex import index as wheel_index
from playbook.wheelindex.metadata import CPU_FEATURES, PROJECT, CpuTarget, VerifiedFigures, WheelRecord, wheel_tags
from playbook.wheelindex.select import Candidate, MachineNeeds

UPSTREAM_URL = WheelIndexParams().upstream_url
LINK = re.compile(r"""<a\s[^>]*?href\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
WHEEL_NAME = re.compile(r"llama_cpp_python-[^/]+\.whl", re.IGNORECASE)
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_")
LEGACY_MANYLINUX = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
NOT_VERIFIED = "listed by a plain index: not verified by the playbook"


def expand(sources: list[str], needs: MachineNeeds, base: str = UPSTREAM_URL) -> list[str]:
    """``sources`` with the word ``upstream`` replaced by upstream's folder for each backend in ``needs``
    (preferred first; a backend upstream publishes nothing for adds nothing)."""
    expanded: list[str] = []
    for source in sources:
        if source.strip() != UPSTREAM_WORD:
            expanded.append(source)
            continue
        for name in needs.backends:
            folder = registry.unit(name).upstream_variant(needs.facts)
            if folder:
                expanded.append(f"{base.rstrip('/')}/{folder}")
    return list(dict.fromkeys(expanded))


def folder_of(source: str) -> str:
    """The index's last folder ("cu124" of https://host/whl/cu124/)."""
    path = urllib.parse.urlsplit(source).path if "://" in source else source
    return path.rstrip("/").rsplit("/", 1)[-1]


def backend_of(folder: str) -> tuple[str, dict, list[str]] | None:
    """(backend, what the folder says it needs, what it cannot say) from the first unit that owns the folder."""
    for unit in registry.units():
        said = unit.upstream_requirements(folder)
        if said is not None:
            return unit.name, said[0], said[1]
    return None


def glibc_of(platform_tag: str) -> tuple[str, bool]:
    """(glibc, whether it is known): "2.17" of manylinux_2_17_x86_64 or manylinux2014; ("", False) for a bare
    linux_* tag; ("", True) for a platform without glibc (macOS, Windows, any)."""
    for tag in platform_tag.split("."):
        if match := MANYLINUX.match(tag):
            return f"{match[1]}.{match[2]}", True
        for legacy, glibc in LEGACY_MANYLINUX.items():
            if tag.startswith(legacy + "_"):
                return glibc, True
    return "", not any(tag.startswith("linux_") for tag in platform_tag.split("."))


def project_page(store: wheel_index.Store) -> tuple[str, str] | None:
    """(the project page's text, its URL) as pip reads it (``llama-cpp-python/``), else its ``index.html`` (a
    folder, a server without directory pages); None when the index lists no such project."""
    for path in (f"{PROJECT}/", f"{PROJECT}/index.html"):
        page = store.read(path)
        if page is not None:
            return page.decode(errors="replace"), store.url(path)
    return None


def listed(page: str, page_url: str) -> list[tuple[str, str, str]]:
    """(wheel file name, its absolute URL, its sha256 or "") of every llama-cpp-python wheel the page links."""
    found = []
    for match in LINK.finditer(page):
        href, _, fragment = html.unescape(match[1]).partition("#")
        url = urllib.parse.urljoin(page_url, href)
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        if not WHEEL_NAME.fullmatch(name):
            continue
        digest = dict(part.split("=", 1) for part in fragment.split("&") if "=" in part).get("sha256", "").lower()
        found.append((name, url, digest if re.fullmatch(r"[0-9a-f]{64}", digest) else ""))
    return list(dict.fromkeys(found))


def candidates(store: wheel_index.Store, source: str) -> list[Candidate]:
    """Every llama-cpp-python wheel a plain index lists, as a candidate whose record holds what its folder and its
    name say and marks the rest unknown. [] when it lists no such project; :class:`~.index.IndexError_` when it
    does but its folder names no backend (the backend cannot be guessed)."""
    page = project_page(store)
    if page is None:
        return []
    wheels = listed(*page)
    folder = folder_of(source)
    said = backend_of(folder)
    if said is None:
        if not wheels:
            return []
        known = ", ".join(v for unit in registry.units() for v in unit.upstream_variants)
        raise wheel_index.IndexError_(
            f"a plain PEP 503 index (no {wheel_index.CATALOGUE}) whose folder {folder!r} names no backend as "
            f"upstream's folders do ({known}, cuXYZ); give the backend's folder, or publish the wheels with "
            "`playbook publish` so they carry records")
    backend, requirements, backend_unknown = said
    found = []
    for name, url, digest in wheels:
        try:
            version, python_tag, abi_tag, platform_tag = wheel_tags(name)
        except PlaybookError:
            continue
        glibc, glibc_known = glibc_of(platform_tag)
        unknown = [CPU_FEATURES, *backend_unknown] + ([] if glibc_known else ["glibc"])
        record = WheelRecord(name, digest, 0, version, "", backend, python_tag, abi_tag, platform_tag, glibc,
                             CpuTarget(native=False), [], dict(requirements), VerifiedFigures(NOT_VERIFIED),
                             unknown=unknown)
        found.append(Candidate(source, record, url))
    return found


def fetch(candidate: Candidate, folder: Path) -> tuple[Path, str]:
    """The wheel downloaded to a temporary name in ``folder``, checked against the sha256 its link gave (when it
    gave one: :class:`~.index.DigestMismatch` otherwise), then renamed to its own name. Returns (its path, its
    sha256)."""
    record = candidate.record
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / record.wheel
    if record.sha256 and target.is_file() and sha256_of(target) == record.sha256:
        return target, record.sha256
    where, _, name = candidate.url.rpartition("/")
    got = wheel_index.download_whole(
        wheel_index.open_store(where), urllib.parse.unquote(name), target,
        lambda got: f"{candidate.url}: sha256 {got}, its index entry says {record.sha256}"
        if record.sha256 and got != record.sha256 else "")
    return target, got
