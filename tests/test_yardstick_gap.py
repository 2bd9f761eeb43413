"""benchmarks/yardstick_gap.py: how a gap to llama-bench is split into what the nested variants measured, and the
archived run from a GPU machine read back (skipped only while none is archived)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
try:
    import yardstick_gap as gap
finally:
    sys.path.pop(0)

ARCHIVES = sorted((ROOT / "outputs" / "reference").glob("*.yardstick-gap.json"))


def entry(rate: float, spread: float = 0.0) -> dict:
    """Three round medians around ``rate`` tokens/s, ``spread`` apart."""
    return {"samples": [rate - spread, rate, rate + spread]}


def samples(**tg: float) -> dict:
    """tg rates by variant at 3 layers (ms per token given), pp fixed."""
    out: dict = {}
    for variant, ms_per_token in tg.items():
        name = variant.replace("_", "-").replace("Llama-", "Llama.").replace("-logits", "+logits")
        out.setdefault(name, {})["3"] = {"tg": entry(1000 / ms_per_token)}
    out["low-level"]["3"]["tg"]["python_ms_per_token"] = [0.25, 0.3, 0.35]  # per round: outside the C calls
    pp = {"llama-bench": 100.0, "verify": 104.0, "Llama() batches": 104.0, "Llama.eval": 106.0}  # ms per prompt
    for variant, ms_per_prompt in pp.items():
        out.setdefault(variant, {}).setdefault("3", {})["pp"] = entry(512 * 1000 / ms_per_prompt)
    return out


def test_a_generation_gap_is_split_into_the_python_side_the_high_level_steps_and_the_unexplained_rest():
    data = samples(llama_bench=10.0, low_level=10.5, verify=10.6, low_level_logits=10.9, Llama_eval=11.5,
                   Llama_generate=12.0)
    gaps = {(g.test, g.variant): g for g in gap.explain(data, 512)}
    lean = gaps["tg", "low-level"]
    assert round(lean.gap_ms, 3) == 0.5 and [round(c.ms, 3) for c in lean.components] == [0.3]
    assert round(lean.unexplained_ms, 3) == 0.2  # inside llama_decode beyond llama-bench's whole token
    generate = gaps["tg", "Llama.generate"]
    assert [round(c.ms, 3) for c in generate.components] == [0.3, 1.0, 0.5]  # Python side, eval, sampling
    assert round(generate.unexplained_ms, 3) == 0.2
    text = gap.describe(gaps["tg", "verify"])
    assert text.startswith("+0.600 ms/token; Python side of the lean loop") and "+0.300 (50%)" in text
    assert text.endswith("unexplained: +0.200 (33%)")
    assert round(gaps["pp", "verify"].unexplained_ms, 3) == 4.0 and gaps["pp", "verify"].components == []
    batches = gaps["pp", "Llama() batches"]
    assert [c.ms for c in batches.components] == [0.0]  # pp512 fits one batch of 512 as of 2048
    eval_pp = gaps["pp", "Llama.eval"]
    assert [round(c.ms, 3) for c in eval_pp.components] == [0.0, 2.0] and round(eval_pp.unexplained_ms, 3) == 4.0


def test_a_gap_within_the_spread_between_rounds_is_no_gap():
    data = samples(llama_bench=10.0, low_level=10.05, verify=10.1, low_level_logits=10.2, Llama_eval=10.3,
                   Llama_generate=10.4)
    data["llama-bench"]["3"]["tg"] = entry(100.0, spread=3.0)
    verify = next(g for g in gap.explain(data, 512) if (g.test, g.variant) == ("tg", "verify"))
    assert gap.describe(verify).endswith("no gap to explain")


def test_llama_bench_on_the_wheels_libraries_splits_a_gap_into_the_libraries_and_the_caller():
    data = samples(llama_bench=10.0, low_level=10.5, verify=10.6, low_level_logits=10.9, Llama_eval=11.5,
                   Llama_generate=12.0)
    data[gap.BENCH_ON_WHEEL] = {"3": {"tg": entry(1000 / 10.4), "pp": entry(512 * 1000 / 103.0)}}
    gaps = {(g.test, g.variant): g for g in gap.explain(data, 512)}
    lean = gaps["tg", "low-level"]
    assert [round(c.ms, 3) for c in lean.components] == [0.4, 0.3]  # the libraries, then the Python side
    assert round(lean.unexplained_ms, 3) == -0.2  # the lean loop is faster inside the C calls, same libraries
    assert gap.describe(lean).split(";")[1].strip().startswith("the libraries")
    pp = gaps["pp", "verify"]
    assert [round(c.ms, 3) for c in pp.components] == [3.0] and round(pp.unexplained_ms, 3) == 1.0


def test_the_wheels_folder_goes_first_on_the_library_path(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/elsewhere")
    env = gap.wheel_library_env(str(tmp_path))
    assert env["LD_LIBRARY_PATH"].split(":") == [str(tmp_path / "llama_cpp" / "lib"), "/elsewhere"]


def test_every_round_runs_every_variant_in_another_order():
    orders = [gap.variant_order(n) for n in range(3)]
    assert all(sorted(o) == sorted(orders[0]) for o in orders) and len({tuple(o) for o in orders}) == 3
    assert len(orders[0]) == len(gap.TG_VARIANTS) + len(gap.PP_VARIANTS)


@pytest.mark.skipif(not ARCHIVES, reason="no yardstick-gap run archived yet: run benchmarks/yardstick_gap.py on a GPU "
                                         "machine and put its JSON beside its run as outputs/reference/<run id>.yardstick-gap.json")
@pytest.mark.parametrize("path", ARCHIVES, ids=[p.name for p in ARCHIVES])
def test_the_archived_experiment_holds_every_variant_and_its_analysis_is_recomputed_from_its_samples(path):
    run = gap.read_archive(path)
    assert run.commit and run.commit != "unknown" and run.machine["gpu"] and run.rounds >= 2
    for variant in (gap.BENCH, *gap.TG_VARIANTS):
        for ngl in map(str, run.layers):
            tg = run.variants[variant][ngl]["tg"]
            assert len(tg["samples"]) == run.rounds and tg["median"] == statistics.median(tg["samples"])
    for variant in (gap.BENCH, *gap.PP_VARIANTS):
        assert {str(n) for n in run.layers} <= set(run.variants[variant])
    n_prompt = json.loads(path.read_text())["n_prompt"]
    recomputed = [(g.layers, g.test, g.variant, round(g.gap_ms, 9), round(g.unexplained_ms, 9))
                  for g in gap.explain(run.variants, n_prompt)]
    assert recomputed == [(g.layers, g.test, g.variant, round(g.gap_ms, 9), round(g.unexplained_ms, 9))
                          for g in run.gaps]
