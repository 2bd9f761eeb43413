"""Files written whole or not at all, and their sha256.

Every file another process may read while it is written (facts, the wheel cache, the model cache) is
written to a temporary name in the same folder, flushed to disk, and renamed over the final name:
a reader sees the old file or the new one, never half of one, and a kill leaves at worst a
``*.tmp`` file behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def first_file(folder: Path, patterns: tuple[str, ...]) -> Path | None:
    """The first regular file (not a symlink) below ``folder`` that the first pattern with any match finds."""
    for pattern in patterns:
        found = sorted(p for p in folder.rglob(pattern) if p.is_file() and not p.is_symlink())
        if found:
            return found[0]
    return None


def temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_copy(source: Path, target: Path) -> Path:
    """Copy ``source`` to ``target`` through a temporary name and an fsync, then rename."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(target)
    try:
        with Path(source).open("rb") as reader, tmp.open("wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
            writer.flush()
            os.fsync(writer.fileno())
        shutil.copystat(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
