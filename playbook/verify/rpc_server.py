"""llama.cpp's ``rpc-server``: built from the wheel's own source tree with the plan's server arguments
(:class:`~playbook.backends.rpc.RpcPlan`), started on 127.0.0.1 for a bounded time, and read back from logs.

:class:`RpcServer` is a context manager: the server starts on a free port, a timer kills it when its
lifetime is over, and leaving the ``with`` block (normally, on an exception, on a timeout) kills it and
everything it started. What it held is what the client's load log says it allocated there
(``RPC0[127.0.0.1:PORT] model buffer size = ... MiB``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from playbook.backends.rpc import RpcPlan
from playbook.files import sha256_of
from playbook.localhost import free_port, wait_until_listening
from playbook.process import kill_group, run_streaming
from playbook.steps.caches import ccache_env
from playbook.verify.agreement import Agreement
from playbook.verify.sweep import SweepPoint

if TYPE_CHECKING:
    from typing_extensions import Self  # Python 3.10 has no typing.Self; annotations only

LOOPBACK = "127.0.0.1"
# The variable child_scripts/probe.py reads the servers to connect to from (it never imports playbook).
RPC_SERVERS_VARIABLE = "PLAYBOOK_RPC_SERVERS"
# The client's account of what it put on each RPC device: "RPC0[127.0.0.1:50052] model buffer size = 1.23 MiB".
RPC_BUFFER_LINE = re.compile(r"\bRPC\d+\[(?P<endpoint>[^\]]+)\] (?P<kind>model|KV|compute|output) buffer size =\s+"
                             r"(?P<mib>[\d.]+) MiB")


# rpc-server's own account of each device it serves: "  CUDA0: NVIDIA H100 80GB HBM3 (81079 MiB, 80555 MiB free)".
SERVER_DEVICE_LINE = re.compile(r"^  (\S+: .* \(\d+ MiB, \d+ MiB free\))$", re.MULTILINE)


@dataclass
class RpcServerBuild:
    """rpc-server built from the wheel's tree: where, from what, how long."""

    ok: bool
    binary: str = ""
    """The server's executable."""
    sha256: str = ""
    """The executable's sha256."""
    backend: str = ""
    """The backend it runs (the plan's ``rpc.server_backend``)."""
    cmake_args: list[str] = field(default_factory=list)
    """Its CMake configure arguments."""
    target: str = ""
    """The CMake target built (``ggml-rpc-server``)."""
    build_s: float = 0.0
    log_file: str = ""
    """The build's log, a file name in the run folder."""
    error: str = ""


@dataclass
class RpcServerRecord:
    """One server verify offloaded to: where it listened, what it is, what it held."""

    address: str
    """host:port, as the client was given it."""
    build: RpcServerBuild
    devices: list[str] = field(default_factory=list)
    """The devices it announced ("CPU: AMD EPYC ... (23975 MiB, 20111 MiB free)")."""
    held_mib_by_layers: dict[str, float] = field(default_factory=dict)
    """Layers sent to it -> peak MiB the client allocated there (weights, and the largest KV, compute and output
    buffer of its contexts)."""
    model_mib_by_layers: dict[str, float] = field(default_factory=dict)
    """Layers sent to it -> MiB of model weights among them."""
    log_file: str = ""
    """What it printed, a file name in the run folder."""
    exit_status: str = ""
    """How it ended: stopped by verify, exited with N, killed at the end of its lifetime."""


def server_command(binary: Path, port: int, threads: int, host: str = LOOPBACK) -> list[str]:
    """rpc-server on ``host:port`` with ``threads`` for its CPU device (rpc-server.cpp's -H, -p, -t)."""
    return [str(binary), "-H", host, "-p", str(port), "-t", str(threads)]


def build_rpc_server(tree: Path, plan: RpcPlan, env: dict[str, str], build_dir: Path, log_file: Path,
                     cache_dir: Path | None, timeout_s: float = 1800, ccache_remote: str = "") -> RpcServerBuild:
    """Configure ``plan.server_source_dir`` of ``tree`` with the plan's server arguments and build its target;
    ccache (the playbook's, as for the wheel) makes a rebuild of the same sources quick."""
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake") or "cmake"
    build_env = {**env, **plan.server_env, **(ccache_env(cache_dir, ccache_remote) if cache_dir else {})}
    record = RpcServerBuild(False, backend=plan.server_backend, cmake_args=list(plan.server_cmake_args),
                            target=plan.server_target, log_file=log_file.name)
    started = time.monotonic()
    with log_file.open("w") as log:
        def write(line: str) -> None:
            log.write(line)
            log.flush()

        for command in (
            [cmake, "-S", str(tree / plan.server_source_dir), "-B", str(build_dir), "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Release", *plan.server_cmake_args],
            [cmake, "--build", str(build_dir), "--target", plan.server_target],
        ):
            write(f"playbook: {' '.join(command)}\n")
            outcome = run_streaming(command, write, env=build_env, timeout_s=timeout_s, silence_timeout_s=timeout_s)
            if outcome.returncode != 0 or outcome.stopped:
                record.build_s = round(time.monotonic() - started, 1)
                how = f"stopped after {timeout_s:.0f} s" if outcome.stopped else f"exited with {outcome.returncode}"
                record.error = f"cmake {'--build' if '--build' in command else 'configure'} {how}; see {log_file.name}"
                return record
    record.build_s = round(time.monotonic() - started, 1)
    binary = find_server_binary(build_dir, plan.server_target)
    if binary is None:
        record.error = f"the build ended but no rpc-server executable is under {build_dir}"
        return record
    record.ok, record.binary, record.sha256 = True, str(binary), sha256_of(binary)
    return record


def find_server_binary(build_dir: Path, target: str = "ggml-rpc-server") -> Path | None:
    """The server's executable: named after its target (``bin/ggml-rpc-server`` in llama.cpp's tools/rpc), or
    ``rpc-server`` as older llama.cpp named it (examples/rpc)."""
    for name in (target, f"{target}.exe", "rpc-server", "rpc-server.exe"):
        found = sorted(p for p in build_dir.rglob(name) if p.is_file() and os.access(p, os.X_OK))
        if found:
            return found[0]
    return None


class RpcServer:
    """One rpc-server on 127.0.0.1, alive at most ``lifetime_s`` and never beyond the ``with`` block."""

    def __init__(self, binary: Path, log_file: Path, threads: int, lifetime_s: float, start_timeout_s: float = 60,
                 env: dict[str, str] | None = None) -> None:
        self.binary, self.log_file, self.threads = binary, log_file, threads
        self.lifetime_s, self.start_timeout_s, self.env = lifetime_s, start_timeout_s, env
        self.port = 0
        self.process: subprocess.Popen[str] | None = None
        self.expired = threading.Event()
        self._timer: threading.Timer | None = None
        self._log: TextIO | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def __enter__(self) -> Self:
        self.port = free_port()
        command = server_command(self.binary, self.port, self.threads)
        self._log = log = self.log_file.open("w")
        log.write(f"playbook: {' '.join(command)}\n")
        log.flush()
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True, env={**os.environ, **(self.env or {})})
        self._timer = threading.Timer(self.lifetime_s, self._expire)
        self._timer.daemon = True
        self._timer.start()
        if not wait_until_listening(self.port, self.process, self.start_timeout_s):
            exited = self.process.poll() is not None
            self.stop()
            when = f"{self.exit_status()} before it listened" if exited else \
                f"did not listen within {self.start_timeout_s:.0f} s"
            raise RpcServerError(f"rpc-server on {self.address} {when}; see {self.log_file.name}")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def _expire(self) -> None:
        self.expired.set()
        if self.process is not None and self.process.poll() is None:
            kill_group(self.process)

    def stop(self) -> None:
        """Kill the server and its session (idempotent); the log says how it ended."""
        if self._timer is not None:
            self._timer.cancel()
        if self.process is not None:
            running = self.process.poll() is None
            if running:
                kill_group(self.process)
            self.process.wait(timeout=30)
            if self._log is not None and not self._log.closed:
                self._log.write(f"\nplaybook: rpc-server {'stopped by verify' if running else self.exit_status()}\n")
        if self._log is not None and not self._log.closed:
            self._log.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_status(self) -> str:
        if self.process is None or self.process.poll() is None:
            return "running" if self.process is not None else "not started"
        if self.expired.is_set():
            return f"killed at the end of its lifetime ({self.lifetime_s:.0f} s)"
        return f"exited with {self.process.returncode}"


class RpcServerError(RuntimeError):
    """The server did not start (or did not listen) on 127.0.0.1."""


def announced_devices(server_log: str) -> list[str]:
    """The devices rpc-server lists under ``Devices:`` when it starts ("CPU: <description> (N MiB, M MiB free)")."""
    return [m[1] for m in SERVER_DEVICE_LINE.finditer(server_log)]


def held_mib(client_log: str, address: str) -> tuple[float, float]:
    """(peak, model weights) in MiB that a client's load log says it allocated on the server at ``address``: the
    weights, plus the largest KV, compute and output buffer (a child makes one context after another)."""
    model, largest = 0.0, {"KV": 0.0, "compute": 0.0, "output": 0.0}
    for match in RPC_BUFFER_LINE.finditer(client_log):
        if match["endpoint"] != address:
            continue
        if match["kind"] == "model":
            model += float(match["mib"])
        else:
            largest[match["kind"]] = max(largest[match["kind"]], float(match["mib"]))
    return round(model + sum(largest.values()), 2), round(model, 2)


@dataclass
class RpcOffload:
    """Verify through rpc-server: the servers, the logits against the CPU, throughput by layers sent."""

    servers: list[RpcServerRecord] = field(default_factory=list)
    layer_counts: list[int] = field(default_factory=list)
    """Layers sent to the server, one sweep point each (0: all on the client)."""
    points: list[SweepPoint] = field(default_factory=list)
    """The sweep through the server, one point per layer count (the offload sweep's code and fields)."""
    agreement: Agreement | None = None
    """All layers on the server against none, the same tokens: within the quantization's tolerance."""
    plot_files: list[str] = field(default_factory=list)
    """Local against RPC throughput by layers (PNG, SVG), file names in the run folder."""
    error: str = ""
    """Why nothing was measured through a server ("" when it was)."""
