"""Which ggml libraries verify expects of a wheel (the backend's own, the RPC client's), where it finds them in
the installed wheel, and how it reads that another backend took work; and when the RPC unit runs."""

from __future__ import annotations

from pathlib import Path

from playbook.backends.rpc import server_plan
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.verify.backend_libraries import library_files, prompt_graph_splits
from playbook.verify.measurement import InstalledWheel, VerifyContext, VerifyRequest, VerifyTarget
from playbook.verify.rpc_server import RpcServerBuild
from playbook.verify.settings import BenchSettings
from playbook.verify.units.backend_library import expected_libraries
from playbook.verify.units.rpc_offload import RPC_OFFLOAD

# The first sched_reserve line of a prompt's context: OpenBLAS took the matrix products (42 splits for the prompt;
# copied from this machine's OpenBLAS verify log, bench-ngl-0.log), and a plain CPU wheel's (one split).
BLAS_LOG = ("sched_reserve:        CPU compute buffer size =    63.50 MiB\n"
            "sched_reserve: graph (pp bs=512, tg bs=1): nodes = 130 / 130, splits = 42 / 1, input objects = 4 / 4, "
            "input tensors = 6 / 6\n")
CPU_LOG = "sched_reserve: graph: nodes = 147, splits = 1, input objects = 4, input tensors = 5\n"


def context(tmp_path: Path, backend: str, rpc: bool = False, server: bool = True) -> VerifyContext:
    target = VerifyTarget(expect_gpu=False, backend=backend, rpc=server_plan(["-DGGML_RPC=ON"], backend) if rpc
                          else None)
    request = VerifyRequest(Layout(tmp_path), tmp_path / "x.whl", load_params(), target, tmp_path, tmp_path,
                            rpc_server=(lambda log: RpcServerBuild(False)) if server else None)
    return VerifyContext(request, InstalledWheel(tmp_path / "site", {}, 0), BenchSettings(threads=1))


def test_the_backend_s_library_and_the_rpc_client_s_are_expected(tmp_path):
    assert expected_libraries(context(tmp_path, "openblas")) == [("ggml-blas", "BLAS", True)]
    assert expected_libraries(context(tmp_path, "cpu", rpc=True)) == [("ggml-rpc", "", False)]
    assert expected_libraries(context(tmp_path, "openblas", rpc=True)) == [("ggml-blas", "BLAS", True),
                                                                          ("ggml-rpc", "", False)]
    assert expected_libraries(context(tmp_path, "cpu")) == []
    assert expected_libraries(context(tmp_path, "cuda")) == []  # its machine code is checked instead


def test_the_library_is_found_wherever_the_wheel_puts_it(tmp_path):
    lib = tmp_path / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    for name in ("libggml-blas.so", "libggml-base.so", "libggml-blas.so.0"):
        (lib / name).write_bytes(b"")
    assert [p.name for p in library_files(tmp_path, "ggml-blas")] == ["libggml-blas.so", "libggml-blas.so.0"]
    assert library_files(tmp_path, "ggml-rpc") == []


def test_the_prompt_graph_s_splits_show_whether_another_backend_took_work():
    assert prompt_graph_splits(BLAS_LOG) == 42
    assert prompt_graph_splits(CPU_LOG) == 1
    assert prompt_graph_splits("load_tensors: CPU_Mapped model buffer size = 1 MiB\n") is None


def test_the_rpc_unit_runs_only_when_the_plan_built_the_client_and_a_server_can_be_built(tmp_path):
    assert "build.rpc is false" in RPC_OFFLOAD.skip_reason(context(tmp_path, "cpu"))
    assert "no rpc-server build" in RPC_OFFLOAD.skip_reason(context(tmp_path, "cpu", rpc=True, server=False))
    assert RPC_OFFLOAD.skip_reason(context(tmp_path, "cpu", rpc=True)) == ""
