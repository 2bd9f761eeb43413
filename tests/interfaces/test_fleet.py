"""``playbook compare --overlay``: several runs' sweeps in one figure, read from archived reference runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from playbook.errors import PlaybookError
from playbook.interfaces.cli import main
from playbook.interfaces.fleet import overlay_series, write_overlay

REFERENCE = Path(__file__).parents[2] / "outputs" / "reference"
CUDA_1B = REFERENCE / "20261122T010438Z-vm"  # 1B Q8_0, CUDA, 6 sweep points
CUDA_1B_BENCH = REFERENCE / "20261122T012240Z-vm"  # the same model and build, 3 points, with llama-bench
CUDA_7B = REFERENCE / "20261122T031414Z-vm"


def _as_vulkan(run: Path, dest: Path) -> Path:
    """A copy of a reference run whose plan says vulkan: stands in for the GPU machine's Vulkan run."""
    copy = dest / (run.name[:-3] + "-vk")
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report", "verify-logs", "*.ipynb"))
    plan_file = copy / "plan-attempt-1.json"
    plan = json.loads(plan_file.read_text())
    plan["backend"] = "vulkan"
    plan_file.write_text(json.dumps(plan))
    run_file = copy / "run.json"
    record = json.loads(run_file.read_text())
    record["run_id"] = copy.name
    run_file.write_text(json.dumps(record))
    return copy


def test_overlay_series_reads_a_reference_run():
    series = overlay_series(CUDA_1B)
    assert series.backend == "cuda" and series.gpu == "NVIDIA H200"
    assert series.model == "playbook synthetic 1b Q8_0 seed 0" and series.model_bytes == 1174163072
    assert round(series.tg_limit) == 4100
    assert series.points[0].n_gpu_layers == 0 and series.points[-1].n_gpu_layers == 17


@pytest.mark.long
def test_overlay_of_cuda_and_vulkan_runs_is_one_figure(tmp_path):
    vulkan = _as_vulkan(CUDA_1B_BENCH, tmp_path)
    files = write_overlay([CUDA_1B, vulkan], tmp_path / "out")
    assert [f.name for f in files] == ["overlay.csv", "overlay.png", "overlay.svg"]
    assert all(f.stat().st_size > 10_000 for f in files[1:])
    rows = files[0].read_text().splitlines()
    assert rows[0].startswith("run_id,backend,gpu,n_gpu_layers")
    backends = [row.split(",")[1] for row in rows[1:]]
    assert backends.count("cuda") == len(overlay_series(CUDA_1B).points) and backends.count("vulkan") >= 2
    assert all(row.endswith(",4100.2") for row in rows[1:])
    svg = files[2].read_text()
    for text in ("cuda · NVIDIA H200", "vulkan · NVIDIA H200", "memory-bandwidth limit (4100 t/s)",
                 "prompt processing", "token generation", "cuda vs vulkan"):
        assert text in svg, text


def test_overlay_tells_runs_of_one_backend_apart_and_refuses_two_models(tmp_path):
    write_overlay([CUDA_1B, CUDA_1B_BENCH], tmp_path)
    assert "cuda · NVIDIA H200 (20261122T010438Z-vm)" in (tmp_path / "overlay.svg").read_text()
    with pytest.raises(PlaybookError, match="an overlay compares runs of one model"):
        write_overlay([CUDA_1B, CUDA_7B], tmp_path)


@pytest.mark.long
def test_compare_overlay_command(tmp_path, capfd):
    assert main(["compare", str(CUDA_1B), str(_as_vulkan(CUDA_1B_BENCH, tmp_path)), "--overlay",
                 "--output", str(tmp_path / "cmp")]) == 0
    printed, errors = capfd.readouterr()
    assert "Kernel is running over TCP" not in errors and "WARNING" not in errors, errors  # as `run` is quiet
    assert "overlay.png" in printed and "compare.csv" in printed
    assert (tmp_path / "cmp" / "overlay.png").is_file() and (tmp_path / "cmp" / "compare.png").is_file()
