"""The OpenBLAS and RPC figures docs/backends.md quotes, read from the archived files they come from: the OpenBLAS run
(BLAS in the wheel, loaded, used), the side-by-side benchmark (benchmarks/results/openblas-vs-cpu-vm.txt) and the
RPC run (the server, what it held, throughput by layers sent, logits against the CPU)."""

from __future__ import annotations

import re
from pathlib import Path

from playbook.serialization import read_json
from playbook.steps.configure import BuildPlan
from playbook.verify.step import VerifyResult
from playbook.verify.units.backend_library import BACKEND_LIBRARY
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP
from playbook.verify.units.rpc_offload import RPC_OFFLOAD

ROOT = Path(__file__).resolve().parent.parent
OPENBLAS_RUN = ROOT / "outputs" / "reference" / "20261125T144256Z-vm"
RPC_RUN = ROOT / "outputs" / "reference" / "20261125T155256Z-vm"
BENCHMARK = ROOT / "benchmarks" / "results" / "openblas-vs-cpu-vm.txt"
SECTION = "## OpenBLAS and RPC, measured here"


def readme_section() -> str:
    text = (ROOT / "docs" / "backends.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end if end > 0 else None]


def benchmark_rows() -> dict[str, list[float]]:
    """openblas_vs_cpu.py's table: model -> pp openblas, pp cpu, pp ratio, tg openblas, tg cpu, tg ratio."""
    rows = {}
    for line in BENCHMARK.read_text().splitlines():
        if re.match(r"^\S+-Q8_0\s+[\d.]+", line):
            name, *numbers = line.split()
            rows[name] = [float(n) for n in numbers]
    return rows


def test_the_openblas_run_has_blas_in_the_wheel_loaded_and_used():
    verify = read_json(VerifyResult, OPENBLAS_RUN / "verify-attempt-1.json")
    plan = read_json(BuildPlan, OPENBLAS_RUN / "plan-attempt-1.json")
    assert verify.ok and {"-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"} <= set(plan.cmake_args)
    [blas] = verify.measured(BACKEND_LIBRARY).checks
    assert blas.library == "ggml-blas" and blas.file == "lib/libggml-blas.so" and blas.loaded and not blas.problems
    assert blas.device == "BLAS: OpenBLAS" and blas.prompt_graph_splits > 1
    assert f"split {blas.prompt_graph_splits} ways" in readme_section()


def test_the_openblas_ratio_quoted_is_the_archived_benchmark_s():
    rows = benchmark_rows()
    assert set(rows) == {"tiny-Q8_0", "1b-Q8_0"}
    section = readme_section()
    for name, (pp_blas, pp_cpu, pp_ratio, *_tg) in rows.items():
        assert abs(pp_blas / pp_cpu - pp_ratio) < 0.002  # the file's ratio is its own medians'
        assert f"{pp_blas:.1f} against {pp_cpu:.1f} t/s" in section and f"ratio {pp_ratio:.2f}" in section, name


def test_the_rpc_figures_quoted_are_the_archived_run_s():
    verify = read_json(VerifyResult, RPC_RUN / "verify-attempt-1.json")
    assert verify.ok
    rpc = verify.measured(RPC_OFFLOAD)
    [server] = rpc.servers
    assert server.address.startswith("127.0.0.1:") and server.exit_status == "stopped by verify"
    assert server.build.backend == "cpu" and len(server.build.sha256) == 64
    section = readme_section()
    full = max(rpc.layer_counts)
    assert f"{server.model_mib_by_layers[str(full)]:.1f} MiB of weights" in section
    for point in rpc.points:
        assert point.status == "ok" and f"{point.tg_tokens_per_s:.1f}" in section, point.n_gpu_layers
    local = verify.measured(OFFLOAD_SWEEP).points[0]
    assert f"{local.tg_tokens_per_s:.1f} t/s" in section
    assert rpc.agreement.ok and f"relative error {rpc.agreement.relative_error:.1g}" in section
