from __future__ import annotations

import json

from playbook.verify.step import VerifyResult
from playbook.verify.sweep import SweepPoint, compare_with_yardsticks, gpu_bandwidth_gb_per_s, plot_throughput
from playbook.verify.yardsticks import LlamaBench, parse_llama_bench_json

# The shape of `llama-bench -o json` (fields trimmed to those the playbook reads plus a few others).
LLAMA_BENCH_JSON = json.dumps([
    {"build_commit": "0c1e570", "model_type": "llama 1B Q8_0", "n_gpu_layers": 0, "n_prompt": 512, "n_gen": 0,
     "avg_ts": 3800.5, "stddev_ts": 40.1},
    {"build_commit": "0c1e570", "model_type": "llama 1B Q8_0", "n_gpu_layers": 0, "n_prompt": 0, "n_gen": 128,
     "avg_ts": 60.0, "stddev_ts": 0.5},
    {"build_commit": "0c1e570", "model_type": "llama 1B Q8_0", "n_gpu_layers": 17, "n_prompt": 512, "n_gen": 0,
     "avg_ts": 50000.0, "stddev_ts": 900.0},
    {"build_commit": "0c1e570", "model_type": "llama 1B Q8_0", "n_gpu_layers": 17, "n_prompt": 0, "n_gen": 128,
     "avg_ts": 1000.0, "stddev_ts": 5.0},
])


def png_and_svg(stem):
    return [stem.with_suffix(".png"), stem.with_suffix(".svg")]


def test_llama_bench_json_is_read():
    points = parse_llama_bench_json("ggml_cuda_init: found 1 CUDA devices\n" + LLAMA_BENCH_JSON)
    bench = LlamaBench(True, points=points)
    assert bench.rate("pp", 0) == 3800.5 and bench.rate("tg", 17) == 1000.0 and bench.rate("tg", 5) is None


def test_ratios_and_bandwidth_fraction(tmp_path):
    result = VerifyResult(True, "w.whl", "", None, "m.gguf", {"file_size_bytes": 1_174_163_072}, 16, [0, 17])
    result.points = [SweepPoint(0, "ok", 0, 3700.0, 1.0, 57.0, 1.0), SweepPoint(17, "ok", 17, 48000.0, 1.0, 940.0, 1.0)]
    result.llama_bench = LlamaBench(True, points=parse_llama_bench_json(LLAMA_BENCH_JSON))
    bandwidth = gpu_bandwidth_gb_per_s(6144, 3201)  # an H200 as NVML reports it
    assert 4900 < bandwidth < 4920
    result.tg_limit_tokens_per_s = bandwidth * 1e9 / result.model["file_size_bytes"]
    compare_with_yardsticks(result.points, result.llama_bench, result.tg_limit_tokens_per_s, full_offload=17)
    full = result.points[1]
    assert full.tg_ratio == 0.94 and round(full.pp_ratio, 2) == 0.96
    assert round(full.tg_overhead_ms_per_token, 4) == round(1000 / 940 - 1000 / 1000, 4)
    assert 0.2 < full.tg_bandwidth_fraction < 0.25
    assert result.points[0].tg_bandwidth_fraction is None  # the limit holds for full offload only
    paths = plot_throughput(result.points, "t", png_and_svg(tmp_path / "plot"), result.tg_limit_tokens_per_s)
    assert paths[0].stat().st_size > 1000
