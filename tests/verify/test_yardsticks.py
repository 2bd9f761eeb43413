from __future__ import annotations

import json

import pytest

from playbook.verify.settings import BenchSettings
from playbook.verify.sweep import SweepPoint, compare_with_yardsticks, gpu_bandwidth_gb_per_s, plot_throughput
from playbook.verify.units.llama_bench import LLAMA_BENCH
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
    points = [SweepPoint(0, "ok", 0, 3700.0, 1.0, 57.0, 1.0), SweepPoint(17, "ok", 17, 48000.0, 1.0, 940.0, 1.0)]
    bench = LlamaBench(True, points=parse_llama_bench_json(LLAMA_BENCH_JSON))
    bandwidth = gpu_bandwidth_gb_per_s(6144, 3201)  # an H200 as NVML reports it
    assert 4900 < bandwidth < 4920
    tg_limit = bandwidth * 1e9 / 1_174_163_072  # the model's bytes
    compare_with_yardsticks(points, bench, tg_limit, full_offload=17)
    full = points[1]
    assert full.tg_ratio == 0.94 and round(full.pp_ratio, 2) == 0.96
    assert round(full.tg_overhead_ms_per_token, 4) == round(1000 / 940 - 1000 / 1000, 4)
    assert 0.2 < full.tg_bandwidth_fraction < 0.25
    assert points[0].tg_bandwidth_fraction is None  # the limit holds for full offload only
    paths = plot_throughput(points, "t", png_and_svg(tmp_path / "plot"), tg_limit)
    assert paths[0].stat().st_size > 1000


def test_pairs_alternate_which_side_starts_and_collect_one_rate_per_process():
    from playbook.verify.yardsticks import interleaved_pairs

    order: list[str] = []
    rates = {"binding": iter([100.0, 110.0, 90.0]), "llama-bench": iter([100.0, 100.0, 100.0])}

    def side(name):
        def measure(counts):
            order.append(name)
            rate = next(rates[name])
            return {(ngl, test): rate for ngl in counts for test in ("pp", "tg")}
        return measure

    rows = interleaved_pairs([0, 17], 3, side("binding"), side("llama-bench"), log=lambda line: None)
    assert order == ["binding", "llama-bench", "llama-bench", "binding", "binding", "llama-bench"]
    row = next(r for r in rows if r.n_gpu_layers == 17 and r.test == "tg")
    assert row.binding == [100.0, 110.0, 90.0] and row.ratios == [1.0, 1.1, 0.9]
    assert row.median_ratio == 1.0 and row.ratio_range == (0.9, 1.1)
    assert row.binding_spread == 0.2 and row.bench_spread == 0.0


def test_a_paired_ratio_outside_the_band_is_named_never_called_agreement():
    from playbook.verify.sweep import SweepPoint, compare_with_yardsticks, explain_paired_ratio
    from playbook.verify.yardsticks import LlamaBench, PairedRatio

    settings = BenchSettings(16)
    bench = LlamaBench(True, settings=settings, pairs=[
        PairedRatio(14, "tg", binding=[280.0, 300.0, 230.0], bench=[250.0, 240.0, 250.0]),  # both sides of 1
        PairedRatio(14, "pp", binding=[1000.0, 1010.0, 990.0], bench=[1000.0, 1000.0, 1000.0]),  # inside the band
        PairedRatio(7, "tg", binding=[90.0, 92.0, 91.0], bench=[80.0, 81.0, 79.0]),  # every pair above
    ])
    partial, less = SweepPoint(14, "ok", 14), SweepPoint(7, "ok", 7)
    compare_with_yardsticks([partial, less], bench, None, 17, settings)
    assert partial.tg_ratio == 1.12 and partial.tg_ratio_range == "0.920-1.250" and partial.pairs == 3
    assert partial.bench_tg_tokens_per_s == 250.0 and partial.pp_ratio == 1.0
    assert "on both sides of 1" in partial.ratio_note and "pp" not in partial.ratio_note
    assert partial.tg_spread_between_processes == "binding 25.0%, llama-bench 4.0%"  # (300-230)/280, 10/250
    assert "every pair" in less.ratio_note and "not explained" in less.ratio_note
    assert explain_paired_ratio("tg", 1.01, 0.9, 1.1, 5, settings, settings) == ""
    differed = explain_paired_ratio("tg", 1.2, 1.1, 1.3, 5, settings, settings.replace(poll=0))
    assert differed == "tg 1.200: the settings differed (poll 50 vs 0)"


@pytest.mark.slow
def test_the_yardstick_pairs_a_real_wheel_with_a_real_llama_bench(tmp_path, pinned_source, cpu_wheel, tiny_f16_model):
    """verify.llama_bench on the CPU wheel: llama-bench built from the same tree with the plan's arguments, then
    interleaved pairs of processes (the binding's child over every layer count, llama-bench over the same), the
    ratios their medians, the CSV showing the pairs' range and each side's spread between processes."""
    import csv
    import os

    from conftest import detect

    from playbook.params import PARAMS_DIR, load_params
    from playbook.runfolder.layout import Layout
    from playbook.steps.caches import stable_tree
    from playbook.steps.configure import configure
    from playbook.verify.step import VerifyRequest, VerifyTarget, run_verify
    from playbook.verify.yardsticks import measure_with_llama_bench

    source, cache = pinned_source
    params = load_params(PARAMS_DIR / "cpu-portable.yaml", [
        f"model.path={tiny_f16_model}", "model.quant=F16", "verify.llama_bench=true", "verify.yardstick_pairs=2",
        "verify.n_gpu_layers=[0, 1]", "verify.prompt_tokens=16", "verify.gen_tokens=4", "verify.repetitions=1",
        "verify.threads=2", "verify.n_batch=64", "verify.n_ubatch=32", f"build.cache_dir={cache}"])
    plan = configure(detect(), params)
    layout = Layout(tmp_path / "run")
    layout.verify_logs(1).mkdir(parents=True)

    def yardstick(model, counts, settings):
        return measure_with_llama_bench(stable_tree(source, cache), plan.cmake_args, {**os.environ, **plan.build_env()},
                                        cache, "test-bench", model, counts, settings, 16, 4, 1,
                                        layout.unit_files(1, "llama-bench").beside(".log"), 600)

    result = run_verify(VerifyRequest(layout, cpu_wheel, params, VerifyTarget(expect_gpu=False), tmp_path, cache,
                                      yardstick=yardstick), log=lambda line: None)
    bench = result.measured(LLAMA_BENCH)
    assert bench is not None and bench.ok, (bench.error if bench else result.summary)
    assert "--poll" in layout.unit_files(1, "llama-bench").beside(".log").read_text()  # both sides got the pool's polling
    assert {(row.n_gpu_layers, row.test) for row in bench.pairs} == {(0, "pp"), (0, "tg")}  # a CPU wheel: 0 only
    assert all(len(row.binding) == len(row.bench) == 2 for row in bench.pairs)
    assert sorted(p.name for p in layout.verify_logs(1).glob("yardstick-pair-*.log")) == [
        "yardstick-pair-01.log", "yardstick-pair-02.log"]
    (row,) = csv.DictReader(layout.unit_files(1, "throughput").beside(".csv").open())
    assert row["pairs"] == "2" and row["tg_ratio_range"] and row["tg_spread_between_processes"].startswith("binding ")
    assert float(row["tg_ratio"]) > 0 and row["poll"] == "50"
