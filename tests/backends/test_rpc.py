"""RPC composes with a backend: -DGGML_RPC=ON on top of it, and the plan says how to build rpc-server."""

from __future__ import annotations

from machines import machine

from playbook.backends.rpc import server_plan
from playbook.params import load_params
from playbook.steps.configure import configure


def test_the_server_is_built_without_the_binding_s_own_options():
    plan = server_plan(["-DGGML_VULKAN=on", "-DLLAVA_BUILD=OFF", "-DGGML_RPC=ON", "-DGGML_NATIVE=OFF",
                        "-DLLAMA_BUILD_TESTS=ON"])
    assert plan.server_target == "ggml-rpc-server" and plan.server_source_dir == "vendor/llama.cpp"
    assert plan.server_cmake_args[:2] == ["-DGGML_VULKAN=on", "-DGGML_NATIVE=OFF"]
    assert "-DLLAVA_BUILD=OFF" not in plan.server_cmake_args
    assert plan.server_cmake_args.count("-DGGML_RPC=ON") == 1 and "-DLLAMA_BUILD_TESTS=OFF" in plan.server_cmake_args
    assert "-DLLAMA_BUILD_TESTS=ON" not in plan.server_cmake_args


def test_rpc_off_adds_nothing():
    plan = configure(machine("no-gpu"), load_params(None, ["backend=cpu"]))
    assert plan.rpc is None and not any("GGML_RPC" in a for a in plan.cmake_args)


def test_rpc_rides_on_any_backend_and_not_on_a_prebuilt_library(tmp_path):
    vulkan = configure(machine("radeon-780m-vulkan"), load_params(None, ["backend=vulkan", "build.rpc=true"]))
    assert {"-DGGML_VULKAN=on", "-DGGML_RPC=ON"} <= set(vulkan.cmake_args) and "-DGGML_VULKAN=on" in \
        vulkan.rpc.server_cmake_args
    assert any(d.what == "RPC" and "beside vulkan" in d.reason for d in vulkan.decisions)
    library = tmp_path / "libllama.so"
    library.write_bytes(b"")
    prebuilt = configure(machine("no-gpu"), load_params(None, [f"build.prebuilt_lib={library}", "build.rpc=true"]))
    assert prebuilt.rpc is None and "rpc-needs-a-build" in prebuilt.warning_codes()
    assert "-DGGML_RPC=ON" not in prebuilt.cmake_args


def test_a_cpu_client_of_a_cuda_server_plans_the_server_for_the_gpu():
    plan = configure(machine("gpu-machine-h200"), load_params(None, ["backend=cpu", "build.rpc=true",
                                                                     "build.rpc_server_backend=cuda"]))
    assert plan.backend == "cpu" and "-DGGML_RPC=ON" in plan.cmake_args
    assert not any("GGML_CUDA=on" in a for a in plan.cmake_args)  # the client stays CPU-only
    server = plan.rpc
    assert server.server_backend == "cuda" and "-DGGML_CUDA=on" in server.server_cmake_args
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in server.server_cmake_args  # the H200's own
    assert server.server_env["CUDACXX"].endswith("nvcc") and not plan.blockers
    assert any(d.what == "rpc-server backend" and d.value == "cuda" for d in plan.decisions)


def test_a_server_backend_this_machine_cannot_build_blocks_the_plan():
    plan = configure(machine("no-gpu"), load_params(None, ["backend=cpu", "build.rpc=true",
                                                           "build.rpc_server_backend=vulkan"]))
    assert plan.blockers and any("rpc-server" in b.message or "rpc_server_backend" in b.message
                                 for b in plan.blockers)


def test_the_server_backend_defaults_to_the_wheel_s_own():
    plan = configure(machine("no-gpu"), load_params(None, ["backend=cpu", "build.rpc=true"]))
    assert plan.rpc.server_backend == "cpu" and "-DGGML_CUDA=off" in plan.rpc.server_cmake_args


def test_an_unknown_server_backend_is_refused_before_anything_is_built():
    import pytest

    from playbook.errors import ParameterError

    with pytest.raises(ParameterError, match="build.rpc_server_backend"):
        load_params(None, ["build.rpc=true", "build.rpc_server_backend=tpu"])


def test_a_cuda_server_needs_a_toolkit_on_the_machine_not_one_from_pypi():
    plan = configure(machine("no-gpu"), load_params(None, ["backend=cpu", "build.rpc=true", "build.rpc_server_backend=cuda",
                                                           "cuda.toolkit=pypi:13.0"]))
    assert "rpc-server-toolkit-from-pypi" in [b.code for b in plan.blockers]
