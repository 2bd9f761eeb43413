"""RPC for real on this machine: the pinned sdist built CPU-only with the RPC client (params/rpc.yaml, portable),
rpc-server built from the same tree, and verify through the real server on 127.0.0.1 with the tiny synthetic
model: logits against the CPU, throughput by layers sent, what the server held, the server gone afterwards.
Takes minutes (it compiles llama.cpp and rpc-server; ccache shares their objects)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import rpc_chain_server

from playbook.chain import run_chain
from playbook.interfaces.report import write_report
from playbook.params import load_params
from playbook.resources import params_dir
from playbook.runfolder.folder import Outcome
from playbook.serialization import read_json
from playbook.verify.step import VerifyResult
from playbook.verify.units.backend_library import BACKEND_LIBRARY
from playbook.verify.units.rpc_offload import RPC_OFFLOAD


def processes_running(binary: str) -> list[str]:
    listed = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True).stdout
    return [line for line in listed.splitlines() if line.startswith(binary)]


@pytest.mark.slow
def test_a_cpu_rpc_wheel_offloads_to_a_real_rpc_server_on_localhost(tmp_path, pinned_source):
    # The session's shared cache (conftest's pinned_source): ccache shares the objects of the other builds.
    cache = pinned_source[1]
    params = load_params(params_dir() / "rpc.yaml", [
        "build.native=false", "verify.repetitions=1", "verify.prompt_tokens=32", "verify.gen_tokens=8",
        "verify.sweep_points=3", f"build.cache_dir={cache}"])
    run = run_chain(params, "params/rpc.yaml (test)", tmp_path)
    record = run.record()
    assert record.outcome == Outcome.OK, record.message
    layout = run.layout
    attempt = layout.latest_attempt("verify")
    verify = read_json(VerifyResult, layout.verify_result(attempt))
    units = {u.name: u for u in verify.units}
    assert units["rpc-offload"].status == "measured" and units["rpc-offload"].passed
    assert units["backend-library"].status == "measured" and units["backend-library"].passed

    rpc = verify.measured(RPC_OFFLOAD)
    [server] = rpc.servers
    assert server.address.startswith("127.0.0.1:") and server.exit_status == "stopped by verify"
    assert server.build.ok and len(server.build.sha256) == 64 and "-DGGML_RPC=ON" in server.build.cmake_args
    assert server.build.backend == "cpu" and server.devices and server.devices[0].startswith("CPU")
    # built where conftest's built_rpc_server builds it, so that fixture finds this build done (or this one that's)
    assert Path(server.build.binary).is_relative_to(rpc_chain_server(pinned_source[0], cache)[2])
    assert rpc.layer_counts == [0, 2, 5]  # tiny: 4 layers, and the output layer with all of them
    points = {p.n_gpu_layers: p for p in rpc.points}
    assert all(p.status == "ok" and p.tg_tokens_per_s > 0 and p.pp_tokens_per_s > 0 for p in rpc.points)
    assert points[5].offloaded_layers == 5 and points[0].offloaded_layers == 0
    held = {int(k): v for k, v in server.model_mib_by_layers.items()}
    assert held[0] == 0 and 0 < held[2] < held[5]  # more layers sent, more weights held there
    assert rpc.agreement is not None and rpc.agreement.ok and rpc.agreement.positions > 0
    assert "RPC0[" + server.address + "]" in layout.unit_files(attempt, "rpc").log("bench-ngl-5").read_text()
    assert "Starting RPC server" in layout.unit_files(attempt, "rpc").log("server").read_text()
    assert not processes_running(server.build.binary)  # stopped, nothing stray
    assert layout.unit_files(attempt, "rpc").beside(".png").stat().st_size > 1000

    [library] = verify.measured(BACKEND_LIBRARY).checks
    assert library.library == "ggml-rpc" and library.loaded and ".so" in library.file and not library.problems
    index = write_report(run.path)
    html = Path(index).read_text()
    assert "RPC: local against layers sent to rpc-server" in html and server.address in html
