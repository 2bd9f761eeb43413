"""The 7B tune on a fresh H200 (issue 35's goals), read from its archived run: both offloads at depths 0 and 4096,
verify within 8 minutes with the wheel cached, and no recommendation slower than the defaults on its own metric."""

from __future__ import annotations

import json
from pathlib import Path

from playbook.serialization import from_dict
from playbook.verify.tune import WORKLOADS, TuneResult

RUN = Path(__file__).resolve().parents[2] / "outputs" / "reference" / "20261129T035051Z-vm"


def archived_tune() -> TuneResult:
    return from_dict(TuneResult, json.loads((RUN / "tune-attempt-1.json").read_text()))


def test_the_tune_covered_both_offloads_at_both_depths_within_eight_minutes_with_the_wheel_cached():
    steps = {s["step"]: s for s in json.loads((RUN / "run.json").read_text())["steps"]}
    assert steps["build"]["outcome"] == "reused" and steps["verify"]["outcome"] == "ok"
    assert steps["verify"]["duration_s"] <= 8 * 60
    tuned = archived_tune()
    assert tuned.depths == [0, 4096]
    assert [t.n_gpu_layers for t in tuned.targets] == [33, 24]  # full offload, and the most within 3 GiB


def test_no_recommendation_is_slower_than_the_defaults_on_the_metric_it_names():
    for target in archived_tune().targets:
        assert [r.workload for r in target.recommendations] == list(WORKLOADS)
        for recommendation in target.recommendations:
            if recommendation.kept_defaults:
                continue
            assert {row.test for row in recommendation.gains} == {recommendation.workload}
            assert {row.depth for row in recommendation.gains} == {0, 4096}
            assert all(row.gain >= 1.0 for row in recommendation.gains), (target.n_gpu_layers, recommendation)


def test_flash_attention_that_slows_generation_at_depth_is_recommended_for_prompts_only():
    partial = archived_tune().targets[1]
    flash = next(t for t in partial.trials if t.label == "flash_attn=on")
    defaults = partial.trials[0]
    assert flash.rates["4096"]["tg"] < defaults.rates["4096"]["tg"]  # as on the H100: slower generation at depth
    prompts, generation = partial.recommendations
    assert prompts.settings.flash_attn == "on" and generation.settings.flash_attn == "off"
