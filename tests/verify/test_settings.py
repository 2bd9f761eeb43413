"""A fair yardstick: the binding's child and llama-bench get identical settings, and the CSV records them."""

from __future__ import annotations

import csv
import json
import stat
import sys
from pathlib import Path

import pytest

from playbook.verify.launcher import ChildOutcome, install_wheel
from playbook.verify.settings import BenchSettings, differences, llama_class_defaults, threadpool_lines
from playbook.verify.sweep import SweepPoint, compare_with_yardsticks, explain_ratio, sweep_point, write_sweep_csv
from playbook.verify.yardsticks import LlamaBench, parse_llama_bench_json, run_llama_bench

SETTINGS = BenchSettings(threads=3, n_batch=1024, n_ubatch=256, flash_attn="on", type_k="q8_0", type_v="q8_0",
                         offload_kqv=False, load_mode="none", env=(("GGML_CUDA_DISABLE_GRAPHS", "1"),))


def fake_llama_bench(tmp_path: Path) -> Path:
    """A llama-bench that records its arguments and environment and answers as the real one does (-o json)."""
    script = tmp_path / "llama-bench"
    script.write_text(f"""#!{sys.executable}
import json, os, sys
open({str(tmp_path / 'argv.json')!r}, "w").write(json.dumps({{"argv": sys.argv[1:],
    "graphs": os.environ.get("GGML_CUDA_DISABLE_GRAPHS")}}))
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
rows = []
for ngl in args["-ngl"].split(","):
    for depth in args["-d"].split(","):
        rows.append({{"n_gpu_layers": int(ngl), "n_prompt": int(args["-p"]), "n_gen": 0, "n_depth": int(depth),
                     "avg_ts": 100.0, "stddev_ts": 1.0}})
        rows.append({{"n_gpu_layers": int(ngl), "n_prompt": 0, "n_gen": int(args["-n"]), "n_depth": int(depth),
                     "avg_ts": 10.0, "stddev_ts": 0.1}})
print(json.dumps(rows))
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_llama_bench_gets_every_setting(tmp_path):
    binary = fake_llama_bench(tmp_path)
    points, _, error = run_llama_bench(binary, tmp_path / "m.gguf", [0, 33], SETTINGS, 512, 128, 3,
                                       tmp_path / "bench.log", 60, depths=[0, 4096])
    assert not error
    seen = json.loads((tmp_path / "argv.json").read_text())
    args = dict(zip(seen["argv"][::2], seen["argv"][1::2]))
    assert args == {"-m": str(tmp_path / "m.gguf"), "-ngl": "0,33", "-p": "512", "-n": "128", "-r": "3", "-t": "3",
                    "-b": "1024", "-ub": "256", "-fa": "on", "-ctk": "q8_0", "-ctv": "q8_0", "-nkvo": "1",
                    "-lm": "none", "--poll": "50", "-d": "0,4096", "-o": "json"}
    assert seen["graphs"] == "1"  # the settings' environment reaches llama-bench as it reaches the child
    assert {(p.n_gpu_layers, p.test, p.depth) for p in points} >= {(33, "tg", 4096), (0, "pp", 0)}


def test_the_csv_records_the_settings_of_each_point(tmp_path):
    outcome = ChildOutcome("ok", 0, 1.0, "bench.log", result={
        "load_s": 0.1, "pp": {"tokens_per_s_median": 100.0, "tokens_per_s_mean": 99.0, "tokens_per_s_stdev": 1.0,
                              "n_ctx": 512},
        "tg": {"tokens_per_s_median": 10.0, "tokens_per_s_mean": 10.1, "tokens_per_s_stdev": 0.1, "n_ctx": 128}})
    point = sweep_point(outcome, 33, SETTINGS)
    path = write_sweep_csv([point], tmp_path / "throughput.csv")
    (row,) = csv.DictReader(path.open())
    assert (row["threads"], row["n_batch"], row["n_ubatch"], row["flash_attn"]) == ("3", "1024", "256", "on")
    assert (row["type_k"], row["type_v"], row["offload_kqv"], row["load_mode"]) == ("q8_0", "q8_0", "False", "none")
    assert row["env"] == "GGML_CUDA_DISABLE_GRAPHS=1" and (row["pp_n_ctx"], row["tg_n_ctx"]) == ("512", "128")


def test_ratios_compare_means_and_explain_what_lies_outside_the_band():
    bench = LlamaBench(True, points=parse_llama_bench_json(json.dumps([
        {"n_gpu_layers": 33, "n_prompt": 512, "n_gen": 0, "avg_ts": 1000.0, "stddev_ts": 2.0},
        {"n_gpu_layers": 33, "n_prompt": 0, "n_gen": 128, "avg_ts": 100.0, "stddev_ts": 0.2},
        {"n_gpu_layers": 7, "n_prompt": 0, "n_gen": 128, "avg_ts": 20.0, "stddev_ts": 2.0},
    ])), settings=SETTINGS)
    full = SweepPoint(33, "ok", 33, pp_tokens_per_s=990.0, pp_stdev=3.0, tg_tokens_per_s=104.0, tg_stdev=0.3,
                      pp_mean=1005.0, tg_mean=104.5)
    partial = SweepPoint(7, "ok", 7, tg_tokens_per_s=21.0, tg_stdev=1.5, tg_mean=21.4)
    compare_with_yardsticks([full, partial], bench, None, 33, SETTINGS)
    assert full.pp_ratio == 1.005 and full.tg_ratio == 1.045  # means against llama-bench's avg_ts
    assert full.ratio_note.startswith("tg 1.045: identical settings") and "pp" not in full.ratio_note
    assert "within the two measurements' spread" in partial.ratio_note  # 7 % apart, ±18 % spread
    assert explain_ratio("pp", 1.0, 1.0, 0, 1.0, 0, SETTINGS, SETTINGS) == ""
    other = explain_ratio("tg", 1.10, 110.0, 0.1, 100.0, 0.1, SETTINGS, SETTINGS.replace(flash_attn="auto"))
    assert other == "tg 1.100: the settings differed (flash_attn on vs auto)"


def test_llama_class_defaults_are_what_llama_uses():
    defaults = llama_class_defaults(8)
    assert differences(defaults, BenchSettings(8)) == {"n_batch": (512, 2048), "flash_attn": ("off", "auto"),
                                                       "load_mode": ("mmap", "auto"), "poll": (None, 50)}
    assert defaults.llama_kwargs(33)["flash_attn"] == "False"
    assert SETTINGS.llama_kwargs(33)["type_k"] == "llama_cpp.GGML_TYPE_Q8_0"
    assert BenchSettings.from_json(SETTINGS.to_json()) == SETTINGS


def test_llama_bench_always_polls_so_no_pool_is_recorded_as_its_default():
    unpooled = SETTINGS.replace(poll=None)
    args = unpooled.llama_bench_args()
    assert args[args.index("--poll") + 1] == "50"
    assert unpooled.as_llama_bench_runs_it().poll == 50
    assert differences(unpooled, unpooled.as_llama_bench_runs_it()) == {"poll": (None, 50)}
    pooled = SETTINGS.replace(poll=0)
    assert pooled.llama_bench_args()[-1] == "0" and pooled.csv_fields()["poll"] == 0
    assert unpooled.csv_fields()["poll"] == "none"
    assert threadpool_lines(unpooled) == []
    lines = threadpool_lines(pooled)
    assert "params = ThreadpoolParams(n_threads=3, poll=0)" in lines and lines[-1].endswith("(llm._ctx.ctx, pool, pool)")


@pytest.mark.slow  # cpu_wheel: builds llama-cpp-python where no wheel is given
def test_the_child_runs_with_the_settings_it_is_given(tmp_path, cpu_wheel, tiny_f16_model):
    """The real wheel: every setting reaches llama.cpp, and each test's context is sized as llama-bench sizes it."""
    from playbook.verify.units.offload_sweep import run_bench_child

    site = tmp_path / "site"
    assert install_wheel(cpu_wheel, site).returncode == 0
    settings = BenchSettings(threads=2, n_batch=64, n_ubatch=32, flash_attn="on", type_k="f16", type_v="f16",
                             offload_kqv=True, load_mode="none")
    outcome = run_bench_child(tiny_f16_model, 0, settings, 32, 8, 2, site, tmp_path / "bench.log", 300,
                              depths=[0, 48])
    assert outcome.status == "ok", outcome.error_tail
    result = outcome.result
    assert result["settings"]["n_ubatch"] == 32 and result["settings"]["flash_attn"] == "on"
    assert result["depths"]["48"]["pp"]["n_ctx"] == 32 + 48 and result["depths"]["48"]["tg"]["n_ctx"] == 8 + 48
    assert result["depths"]["0"]["tg"]["n_ctx"] == 8 and result["tg"] == result["depths"]["0"]["tg"]
    log = " ".join((tmp_path / "bench.log").read_text().split())
    assert "n_ubatch = 32" in log and "flash_attn = enabled" in log  # llama.cpp's own account of the context
    assert result["threadpool"] == {"threads": 2, "poll": 50}  # llama-bench's pool, attached through llama.cpp's API


@pytest.mark.slow  # cpu_wheel: builds llama-cpp-python where no wheel is given
def test_the_child_measures_every_layer_count_in_one_process_with_the_pool_it_is_given(tmp_path, cpu_wheel,
                                                                                       tiny_f16_model):
    """The yardstick's binding side: one process over several layer counts, as llama-bench runs them; no pool
    (Llama()'s way) and a pool that never polls both run."""
    from playbook.verify.units.offload_sweep import run_bench_child

    site = tmp_path / "site"
    assert install_wheel(cpu_wheel, site).returncode == 0
    for poll, pool in ((None, None), (0, {"threads": 2, "poll": 0})):
        settings = BenchSettings(threads=2, n_batch=64, n_ubatch=32, poll=poll)
        outcome = run_bench_child(tiny_f16_model, [0, 1], settings, 16, 4, 1, site, tmp_path / "pair.log", 300)
        assert outcome.status == "ok", outcome.error_tail
        points = outcome.result["points"]
        assert [p["n_gpu_layers"] for p in points] == [0, 1] and all(p["threadpool"] == pool for p in points)
        assert all(p["tg"]["tokens_per_s_mean"] > 0 for p in points)
