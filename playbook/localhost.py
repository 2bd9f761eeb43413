"""Servers on this machine's loopback interface: a free port to start one on, and waiting until it listens."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_listening(port: int, server: subprocess.Popen, timeout_s: float, interval_s: float = 0.2) -> bool:
    """True once 127.0.0.1:``port`` accepts a connection; False when ``server`` exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                return False
            time.sleep(interval_s)
