"""rpc-server: its build from a tree (CMake, ccache, the binary found and hashed), its start on a free loopback port
and its stop (also at the end of its lifetime and when the block raises), and what the logs say it held."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from playbook.backends.rpc import RpcPlan
from playbook.verify.rpc_server import (
    RPC_SERVERS_VARIABLE,
    RpcServer,
    RpcServerError,
    announced_devices,
    build_rpc_server,
    held_mib,
    server_command,
)

CHILD_SCRIPT = Path(__file__).resolve().parents[2] / "playbook" / "child_scripts" / "probe.py"
# What rpc-server prints when it starts (ggml-rpc.cpp's ggml_backend_rpc_start_server), and what a client's load log
# says it allocated there (llama-model.cpp, llama-kv-cache.cpp, llama-context.cpp).
SERVER_LOG = """playbook: rpc-server -H 127.0.0.1 -p 41234 -t 2
Starting RPC server v7.0.0
  endpoint       : 127.0.0.1:41234
  local cache    : n/a
Devices:
  CPU: AMD EPYC 9V74 80-Core Processor (23975 MiB, 20111 MiB free)
  transport      : TCP
"""
CLIENT_LOG = """load_tensors: offloaded 5/5 layers to GPU
load_tensors: RPC0[127.0.0.1:41234] model buffer size =     4.61 MiB
load_tensors:   CPU_Mapped model buffer size =     8.20 MiB
llama_kv_cache: RPC0[127.0.0.1:41234] KV buffer size =     0.50 MiB
llama_context: RPC0[127.0.0.1:41234] compute buffer size =    16.03 MiB
~llama_context: RPC0[127.0.0.1:41234] compute buffer size is  16.0300 MiB, matches expectation of  16.0300 MiB
sched_reserve: RPC0[127.0.0.1:41234] compute buffer size =    12.00 MiB
llama_context: RPC0[127.0.0.1:9999] compute buffer size =    99.00 MiB
llama_context:        CPU compute buffer size =     1.01 MiB
"""


def test_the_child_script_reads_the_variable_the_parent_sets():
    assert f'RPC_SERVERS_VARIABLE = "{RPC_SERVERS_VARIABLE}"' in CHILD_SCRIPT.read_text()


def test_the_server_listens_on_loopback_only():
    assert server_command(Path("/x/rpc-server"), 4321, 3) == ["/x/rpc-server", "-H", "127.0.0.1", "-p", "4321",
                                                               "-t", "3"]


def test_what_the_server_announced_and_what_the_client_put_there():
    assert announced_devices(SERVER_LOG) == ["CPU: AMD EPYC 9V74 80-Core Processor (23975 MiB, 20111 MiB free)"]
    assert announced_devices("rpc-server: error\n") == []
    # weights, plus the largest KV and compute buffer of the child's contexts; another server's are not counted
    assert held_mib(CLIENT_LOG, "127.0.0.1:41234") == (21.14, 4.61)
    assert held_mib(CLIENT_LOG, "127.0.0.1:1") == (0.0, 0.0)


def stand_in_tree(tmp_path: Path, compiles: bool = True) -> Path:
    """A tree whose vendor/llama.cpp is a CMake project with the server's target (its executable is named after it)."""
    project = tmp_path / "tree" / "vendor" / "llama.cpp"
    project.mkdir(parents=True)
    (project / "main.c").write_text("int main(void) { return 0; }\n" if compiles else "int main(void) { oops }\n")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.15)\nproject(standin C)\noption(GGML_RPC \"\" OFF)\n"
        "if(NOT GGML_RPC)\n  message(FATAL_ERROR \"GGML_RPC not given\")\nendif()\n"
        "add_executable(ggml-rpc-server main.c)\n"
        "set_target_properties(ggml-rpc-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY bin)\n")
    return tmp_path / "tree"


def test_the_server_is_built_from_the_tree_with_the_plan_s_arguments(tmp_path):
    plan = RpcPlan("ggml-rpc-server", "vendor/llama.cpp", ["-DGGML_RPC=ON"], "cpu", {"PLAYBOOK_TEST_VAR": "1"})
    log = tmp_path / "rpc-server-build-attempt-1.log"
    build = build_rpc_server(stand_in_tree(tmp_path), plan, dict(os.environ), tmp_path / "build", log, None, 300)
    assert build.ok, log.read_text()
    assert Path(build.binary).name == "ggml-rpc-server" and len(build.sha256) == 64
    assert build.backend == "cpu" and build.cmake_args == ["-DGGML_RPC=ON"] and build.log_file == log.name
    assert "--target ggml-rpc-server" in log.read_text()


def test_a_failed_server_build_says_which_command_and_where_the_log_is(tmp_path):
    plan = RpcPlan("ggml-rpc-server", "vendor/llama.cpp", ["-DGGML_RPC=ON"])
    log = tmp_path / "build.log"
    build = build_rpc_server(stand_in_tree(tmp_path, compiles=False), plan, dict(os.environ), tmp_path / "b", log,
                             None, 300)
    assert not build.ok and "cmake --build exited with" in build.error and "build.log" in build.error
    unconfigured = build_rpc_server(stand_in_tree(tmp_path / "2"), RpcPlan("ggml-rpc-server", "vendor/llama.cpp"),
                                    dict(os.environ), tmp_path / "c", log, None, 300)
    assert not unconfigured.ok and "cmake configure exited with" in unconfigured.error


def session_alive(pid: int) -> bool:
    listed = subprocess.run(["ps", "-eo", "sess=,pid="], capture_output=True, text=True, check=True).stdout.split()
    return str(pid) in listed[0::2]


@pytest.mark.slow  # built_rpc_server compiles ggml and rpc-server from the pinned sdist (conftest)
def test_a_real_rpc_server_starts_on_a_free_loopback_port_and_is_stopped(tmp_path, built_rpc_server):
    log = tmp_path / "rpc-server.log"
    with RpcServer(built_rpc_server, log, threads=1, lifetime_s=120) as server:
        host, port = server.address.split(":")
        assert host == "127.0.0.1"
        socket.create_connection((host, int(port)), timeout=5).close()
        pid = server.process.pid
    assert not server.running() and not session_alive(pid)
    text = log.read_text()
    assert "Starting RPC server" in text and "playbook: rpc-server stopped by verify" in text
    assert announced_devices(text) and announced_devices(text)[0].startswith("CPU")


@pytest.mark.slow  # built_rpc_server compiles ggml and rpc-server from the pinned sdist (conftest)
def test_a_real_rpc_server_dies_at_the_end_of_its_lifetime_and_when_the_block_raises(tmp_path, built_rpc_server):
    with RpcServer(built_rpc_server, tmp_path / "a.log", threads=1, lifetime_s=2) as server:
        server.process.wait(timeout=30)
        assert server.exit_status().startswith("killed at the end of its lifetime")
    with pytest.raises(KeyError), RpcServer(built_rpc_server, tmp_path / "b.log", threads=1, lifetime_s=300) as other:
        raise KeyError("a child failed")
    assert not other.running() and not session_alive(other.process.pid)


def test_a_server_that_never_listens_is_an_error_and_leaves_nothing_behind(tmp_path):
    quits = tmp_path / "rpc-server"
    quits.write_text(f"#!{shutil.which('sh')}\necho 'Failed to create server socket' >&2\nexit 1\n")
    quits.chmod(0o755)
    server = RpcServer(quits, tmp_path / "rpc-server.log", threads=1, lifetime_s=60, start_timeout_s=10)
    with pytest.raises(RpcServerError, match="on 127.0.0.1:[0-9]+ exited with 1 before it listened"), server:
        pass
    assert not server.running() and "Failed to create server socket" in (tmp_path / "rpc-server.log").read_text()


def test_verify_builds_rpc_server_where_the_fixture_looks_for_it(tmp_path, monkeypatch):
    """conftest's built_rpc_server shares the RPC chain's rpc-server build through rpc_server_build_dir: it must
    name the folder verify's rpc_server_builder builds in, or the slow tier builds rpc-server twice."""
    from types import SimpleNamespace

    from conftest import rpc_server_build_dir

    from playbook.steps import caches
    from playbook.verify import rpc_server
    from playbook.verify.step import rpc_server_builder

    called = {}

    def build(tree, plan, env, build_dir, log_file, cache_dir, *rest):
        called.update(tree=tree, build_dir=build_dir, cache_dir=cache_dir)
        return "built"

    monkeypatch.setattr(rpc_server, "build_rpc_server", build)
    monkeypatch.setattr(caches, "stable_tree", lambda source, cache: tmp_path / "tree")
    params = SimpleNamespace(cache_dir=tmp_path / "cache", build=SimpleNamespace(timeout_s=60))
    run = SimpleNamespace(params=lambda: params)
    wheel = SimpleNamespace(source="the sdist", fingerprint="0123456789abcdef" * 4)
    plan = SimpleNamespace(rpc=SimpleNamespace(server_backend="cpu"))
    assert rpc_server_builder(run, wheel, plan)(tmp_path / "server.log") == "built"
    assert called["build_dir"] == rpc_server_build_dir(tmp_path / "cache", wheel.fingerprint, "cpu")
    assert called["cache_dir"] == tmp_path / "cache" and called["tree"] == tmp_path / "tree"
