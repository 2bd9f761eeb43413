"""playbook.locks: one holder at a time, released on exit and when the holder dies."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from playbook.locks import LockTimeout, RunLock


def test_a_second_holder_waits_then_fails_and_gets_it_once_released(tmp_path):
    path = tmp_path / "folder" / "run.lock"
    with RunLock(path) as held:
        assert held._handle is not None
        started = time.monotonic()
        with pytest.raises(LockTimeout, match="in use by another playbook process"), \
                RunLock(path, timeout_s=0.3, poll_s=0.05):
            pass
        assert time.monotonic() - started >= 0.3
    with RunLock(path, timeout_s=0):  # released on exit
        pass


def test_the_lock_goes_with_a_killed_process(tmp_path):
    path = tmp_path / "run.lock"
    script = ("import time\nfrom playbook.locks import RunLock\n"
              f"with RunLock({str(path)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout), RunLock(path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with RunLock(path, timeout_s=5):
        pass
