"""An advisory lock on a file, held by one process at a time (POSIX ``flock``, Windows ``msvcrt``).

Used where two processes must not do the same thing at once: drive one run folder, or fill one cache
entry. The lock is released when the process dies, so a kill never leaves it stuck.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from playbook.errors import PlaybookError

if TYPE_CHECKING:
    from typing_extensions import Self  # Python 3.10 has no typing.Self; annotations only


class LockTimeout(PlaybookError):
    """Another process held the lock for longer than we were willing to wait."""


class RunLock:
    """``with RunLock(path):`` holds an exclusive lock on ``path``; ``timeout_s`` 0 fails at once."""

    def __init__(self, path: Path, timeout_s: float = 0.0, poll_s: float = 0.2):
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._handle: int | None = None

    def __enter__(self) -> Self:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout_s
        while not _try_lock(handle):
            if time.monotonic() >= deadline:
                os.close(handle)
                raise LockTimeout(f"{self.path.parent} is in use by another playbook process (lock {self.path.name}); "
                                  "wait for it to end, or use another folder")
            time.sleep(self.poll_s)
        self._handle = handle
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._handle is not None:
            _unlock(self._handle)
            os.close(self._handle)
            self._handle = None


if sys.platform == "win32":  # os.name "nt": spelled so that type checkers follow it
    import msvcrt

    def _try_lock(handle: int) -> bool:
        try:
            msvcrt.locking(handle, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def _unlock(handle: int) -> None:
        msvcrt.locking(handle, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _try_lock(handle: int) -> bool:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(handle: int) -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)
