"""RPC: not a backend of its own but an option of every backend (``build.rpc: true``).

llama.cpp's RPC backend is a client beside the local one: the wheel gets ``-DGGML_RPC=ON`` on top of the
chosen backend's arguments (CPU, CUDA, Vulkan, ...) and offloads layers to ``rpc-server`` processes, each of
which runs a backend of its own. So RPC composes with a backend rather than replacing it: ``params/rpc.yaml``
is the CPU client of a small fleet, and a CUDA client with ``build.rpc: true`` is as valid. The server is
built from the same llama.cpp tree as a standalone CMake project; the plan carries how (:class:`RpcPlan`),
for the build and verify steps that start one. Reads no detected facts beyond the backend's own; its table is
``knowledge/rpc.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from playbook.backends.plan import BackendPlan, Decision, PlanWarning, cmake_define
from playbook.knowledge import compatibility

# The client's ggml backend library, which the wheel holds and loads beside the CPU's.
CLIENT_LIBRARY = "ggml-rpc"


@dataclass
class RpcPlan:
    """What ``build.rpc`` adds to a plan beyond the client's CMake argument: how to build the server."""

    server_target: str
    """The CMake target of the server in the pinned llama.cpp ("ggml-rpc-server")."""
    server_source_dir: str
    """Where in the source tree the server's CMake project is ("vendor/llama.cpp")."""
    server_cmake_args: list[str] = field(default_factory=list)
    """The server's configure arguments: the plan's backend arguments, GGML_RPC and the tools on, the rest off."""
    server_backend: str = ""
    """The backend the server runs ("cuda"); the client's own unless ``build.rpc_server_backend`` names another."""
    server_env: dict[str, str] = field(default_factory=dict)
    """The server's build and run environment beyond the inherited one (CUDACXX, the toolkit's libraries)."""


def table() -> dict[str, Any]:
    return compatibility.knowledge("rpc")


def client_plan(backend: str, builds_llama_cpp: bool) -> BackendPlan:
    """``-DGGML_RPC=ON`` on the chosen backend's arguments (the planner adds it after the backend's plan)."""
    client = table()["client"]
    if not builds_llama_cpp:
        return BackendPlan(warnings=(PlanWarning("rpc-needs-a-build", "build.rpc is set, but a prebuilt library "
                                                 "compiles no llama.cpp: RPC is whatever the library was built with"),))
    return BackendPlan(cmake_args=tuple(client["args"]), decisions=(Decision(
        "RPC", " ".join(client["args"]),
        f"build.rpc: the wheel also offloads to rpc-server processes, beside {backend} ({client['source']})"),))


def server_plan(cmake_args: list[str], backend: str = "", env: dict[str, str] | None = None) -> RpcPlan:
    """How to build ``rpc-server`` from the same tree for ``backend``: that backend's plan arguments less
    those of llama-cpp-python's own build, plus the server's standalone options."""
    server = table()["server"]
    names = {arg.split("=", 1)[0] for arg in server["args"]}
    dropped = {f"-D{name}" for name in server["binding_only"]} | names
    kept = [a for a in cmake_args if not ((define := cmake_define(a)) and f"-D{define[0]}" in dropped)]
    return RpcPlan(server["target"], server["source_dir"], kept + list(server["args"]), backend, dict(env or {}))
