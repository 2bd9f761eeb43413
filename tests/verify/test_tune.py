"""verify.tune: the search, the offload levels, the side-by-side gain and the report; on CPU with the real wheel."""

from __future__ import annotations

import json

import pytest

from playbook.verify.settings import BenchSettings, llama_class_defaults
from playbook.verify.tune import (
    CUDA_GRAPHS_OFF,
    Budget,
    TuneTrial,
    alternatives,
    build_hints,
    layers_within,
    offload_targets,
    report_markdown,
    search,
    side_by_side,
    tune,
)
from playbook.verify.yardsticks import BenchPoint

DEPTHS = ("0", "4096")


def synthetic_speed(settings: BenchSettings, ngl: int, label: str) -> TuneTrial:
    """A made-up machine: flash attention pays at depth, a larger micro-batch speeds prompts, CUDA graphs help
    generation, a q8_0 KV cache changes nothing, fewer threads are slower."""
    rates = {}
    for depth in DEPTHS:
        pp, tg = 1000.0, 100.0
        if settings.flash_attn == "on":
            pp, tg = pp * (1.05 if depth == "0" else 1.25), tg * (1.0 if depth == "0" else 1.15)
        pp *= {256: 0.9, 512: 1.0, 1024: 1.08, 2048: 1.09}[settings.n_ubatch]
        tg *= 0.97 if CUDA_GRAPHS_OFF in settings.env else 1.0
        pp, tg = pp * settings.threads / 8, tg * settings.threads / 8
        rates[depth] = {"pp": pp, "tg": tg}
    return TuneTrial(label, ngl, settings, "ok", rates)


def test_the_search_keeps_what_is_faster_for_each_workload():
    defaults = llama_class_defaults(8)
    found = search(defaults, 33, synthetic_speed, gpu=True, layers_on_cpu=False, cores=8)
    assert not found.stopped
    trials = found.trials
    assert trials[0].label == "defaults (Llama())" and trials[0].score == 1.0
    prompts, generation = found.best["pp"], found.best["tg"]
    assert prompts.flash_attn == "on" and (prompts.n_batch, prompts.n_ubatch) == (2048, 1024)  # the micro-batch
    assert generation.flash_attn == "on" and generation.n_ubatch == 512  # helps prompts only: not kept for tg
    assert generation.env == () and generation.threads == 8  # graphs stay on; threads not searched at full offload
    assert generation.type_k == "f16"  # q8_0 was tried (flash attention on by then) and gained nothing
    labels = [t.label for t in trials]
    assert "type_k=q8_0 type_v=q8_0" in labels  # before the paths parted: one trial serves both workloads
    # after the batch sizes the two bests differ: each gets its own CUDA graphs trial, named by whose best it is
    assert {"CUDA graphs off (on the pp best)", "CUDA graphs off (on the tg best)"} <= set(labels)
    assert len(labels) == len(set(labels))
    assert not any(label.startswith(("threads=", "thread pool")) for label in labels)


def flash_attention_slows_generation_at_depth(settings: BenchSettings, ngl: int, label: str) -> TuneTrial:
    """The H100's 24-layer tune (outputs/reference/20261125T160940Z-vm): flash attention speeds prompts 1.46x at
    both depths and generation 1.11x at depth 0, but generation at depth 4096 falls to 0.82x."""
    rates = {}
    for depth in DEPTHS:
        pp, tg = 1400.0, 40.0
        if settings.flash_attn == "on":
            pp, tg = pp * 1.46, tg * (1.11 if depth == "0" else 0.82)
        rates[depth] = {"pp": pp, "tg": tg}
    return TuneTrial(label, ngl, settings, "ok", rates)


def test_a_setting_slower_on_a_metric_at_any_depth_is_never_recommended_for_it():
    result = tune("/models/m.gguf", 32, True, 8, 16, [0, 4096], 512, 128, 3, flash_attention_slows_generation_at_depth,
                  log=lambda line: None)
    (target,) = result.targets
    prompts, generation = target.recommendations
    assert prompts.workload == "pp" and prompts.settings.flash_attn == "on" and not prompts.kept_defaults
    assert [round(r.gain, 2) for r in prompts.gains] == [1.46, 1.46] and {r.test for r in prompts.gains} == {"pp"}
    assert generation.workload == "tg" and generation.settings == target.defaults
    assert generation.kept_defaults.startswith("keep the defaults: no setting was faster in tg at every depth")
    assert target.best == target.defaults and target.llama_kwargs["flash_attn"] == "False"
    assert result.best_gain(4096) == 1.46  # the recommended metric only: tg's 0.82 is no recommendation
    text = report_markdown(result)
    assert "### generation-heavy (chat, long answers): tg" in text and "Goal 1.10× at depth 4096 in pp: met" in text
    assert "in tg: met" not in text


def test_a_gain_the_side_by_side_does_not_confirm_keeps_the_defaults():
    def noisy(settings, ngl, label):
        trial = synthetic_speed(settings, ngl, label)
        if label.endswith(": tuned"):  # measured again, the tuned settings lose in generation at depth
            trial.rates["4096"]["tg"] *= 0.8
        return trial

    result = tune("/models/m.gguf", 32, True, 8, 16, [0, 4096], 512, 128, 3, noisy, log=lambda line: None)
    prompts, generation = result.targets[0].recommendations
    assert not prompts.kept_defaults  # pp was confirmed
    assert generation.settings == result.targets[0].defaults
    assert "measured again beside them was slower in tg at depth 4096 (0.920×)" in generation.kept_defaults


def test_kv_cache_pairs_follow_the_flash_attention_kernels_the_build_has():
    fa_on = llama_class_defaults(8).replace(flash_attn="on")
    default_build = [label for label, _ in alternatives("kv_cache", fa_on, gpu=True, layers_on_cpu=False, cores=8)]
    assert default_build == ["type_k=q8_0 type_v=q8_0", "type_k=q4_0 type_v=q4_0"]  # no q8_0/f16 kernel
    all_quants = [label for label, _ in alternatives("kv_cache", fa_on, gpu=True, layers_on_cpu=False, cores=8,
                                                     fa_all_quants=True)]
    assert "type_k=q8_0 type_v=f16" in all_quants
    on_the_cpu = [label for label, _ in alternatives("kv_cache", fa_on, gpu=False, layers_on_cpu=True, cores=8)]
    assert "type_k=q8_0 type_v=f16" in on_the_cpu  # the CPU's kernels take every pair
    (hint,) = build_hints(gpu=True, all_quants=False)
    # the pinned llama.cpp's option, with the one pair added to its default list
    assert "type_k=q8_0 type_v=f16" in hint
    assert "-DGGML_CUDA_FA_QUANTS=q4_0-q4_0,q8_0-q8_0,f16-f16,bf16-bf16,q8_0-f16 builds one" in hint
    assert build_hints(gpu=True, all_quants=True) == [] and build_hints(gpu=False, all_quants=False) == []
    result = tune("/models/m.gguf", 32, True, 8, 16, [0], 512, 128, 3, synthetic_speed, log=lambda line: None)
    assert "Build: type_k=q8_0 type_v=f16 with flash attention" in report_markdown(result)


class FakeClock:
    """Seconds that pass only when a trial runs: each trial takes ``trial_s``."""

    def __init__(self, trial_s: float):
        self.now, self.trial_s = 0.0, trial_s

    def __call__(self) -> float:
        return self.now

    def measure(self, settings, ngl, label):
        self.now += self.trial_s
        return synthetic_speed(settings, ngl, label)


def test_the_time_budget_stops_the_search_in_time_to_measure_what_it_found():
    clock = FakeClock(trial_s=10.0)
    budget = Budget(120, clock)
    found = search(llama_class_defaults(8), 33, clock.measure, gpu=True, layers_on_cpu=True, cores=8,
                   budget=budget, deadline=budget.target_deadline([10.0]))
    # 120 s: the defaults' trial, then candidates while one more and the seven trials after the search (each
    # workload's settings beside the defaults, one round; llama-bench with the three) still fit: 10 + 4 x 10 s
    assert budget.trials_after_search == 7
    assert len(found.trials) == 5 and clock.now == 50.0
    assert "verify.tune_budget_s (120 s) stopped the search after 5 trials" in found.stopped
    # the dimension it stopped in had one of its candidates measured: named as begun, not among those not tried
    assert found.stopped.endswith(", during kv_cache (1 of its 2 candidates measured); not tried: batch, threads, "
                                  "cuda_graphs, offload_kqv"), found.stopped
    assert found.best["tg"].flash_attn == "on"  # the first dimension was tried
    at_a_boundary = Budget(90, FakeClock(10.0))  # stops after flash_attn, before any poll candidate
    stopped = search(llama_class_defaults(8), 33, at_a_boundary.clock.measure, gpu=True, layers_on_cpu=True, cores=8,
                     budget=at_a_boundary, deadline=at_a_boundary.target_deadline([10.0])).stopped
    assert stopped.endswith("(20 s); not tried: poll, kv_cache, batch, threads, cuda_graphs, offload_kqv"), stopped
    unbounded = search(llama_class_defaults(8), 33, FakeClock(10.0).measure, gpu=True, layers_on_cpu=True, cores=8)
    assert not unbounded.stopped and len(unbounded.trials) > len(found.trials)


class SlowOnTheCpu(FakeClock):
    """A trial takes 10 s at full offload (33) and 40 s with layers left on the CPU."""

    def measure(self, settings, ngl, label):
        self.now += 10.0 if ngl == 33 else 40.0
        return synthetic_speed(settings, ngl, label)


def test_the_budget_goes_where_trials_are_slow():
    clock = SlowOnTheCpu(trial_s=0)
    result = tune("/models/m.gguf", 32, True, 8, 16, [0, 4096], 512, 128, 3, clock.measure, 2000,
                  {0: 200.0, 13: 1600.0, 33: 4000.0}, log=lambda line: None, budget=Budget(600, clock))
    full, partial = result.targets
    # 550 s left after both defaults: 110 s for the 10 s trials, 440 s for the 40 s ones; each search stops while
    # one more trial and the seven after it fit (both workloads' side by side, llama-bench's three runs). At full
    # offload both workloads found the same settings, so one side-by-side pair ran and the partial search had 40 s more
    assert len(full.trials) == 5 and len(partial.trials) == 6
    assert full.recommendations[0].settings == full.recommendations[1].settings
    assert partial.trials[2].label == "thread pool poll=0"  # after flash attention, polling first where layers stay on the CPU
    assert clock.now <= 600


def test_the_tune_shares_its_budget_between_offloads_and_says_when_it_stopped():
    clock = FakeClock(trial_s=10.0)
    result = tune("/models/m.gguf", 32, True, 8, 16, [0, 4096], 512, 128, 3, clock.measure, 2000,
                  {0: 200.0, 13: 1600.0, 33: 4000.0}, log=lambda line: None, budget=Budget(250, clock))
    assert [t.n_gpu_layers for t in result.targets] == [33, 15]  # 116 MiB per layer beyond 162 MiB
    # 10 + 14 candidates, 2 defaults and 4 side-by-side trials of 10 s would take 300 s: both searches stop
    assert all(t.stopped for t in result.targets) and all(t.gains for t in result.targets)
    assert clock.now <= 250
    assert "The search did not finish: verify.tune_budget_s" in report_markdown(result)


def test_what_is_tried_depends_on_the_machine():
    fa_off = BenchSettings(4, flash_attn="off")
    kv = [label for label, _ in alternatives("kv_cache", fa_off, gpu=False, layers_on_cpu=True, cores=4)]
    assert kv == ["type_k=q8_0 type_v=f16"]  # a quantized V cache needs flash attention
    assert alternatives("cuda_graphs", fa_off, gpu=False, layers_on_cpu=True, cores=4) == []
    assert alternatives("offload_kqv", fa_off, gpu=False, layers_on_cpu=True, cores=4) == []
    threads = [s.threads for _, s in alternatives("threads", fa_off, gpu=False, layers_on_cpu=True, cores=4)]
    assert threads == [2, 3]  # 4 is the current count
    polls = [s.poll for _, s in alternatives("poll", llama_class_defaults(4), gpu=True, layers_on_cpu=True, cores=4)]
    assert polls == [0, 50]  # Llama() attaches no pool (None); llama-bench's pool polls at 50
    assert alternatives("poll", fa_off, gpu=True, layers_on_cpu=False, cores=4) == []  # nothing on the CPU


def test_the_partial_offload_comes_from_memory_per_layer_not_from_the_sweeps_points():
    # issue 23: a 3.8 GB, 33-layer model swept at 0 and 33 layers only; 3072 MiB fit about 20 layers
    measured = {0: 300.0, 33: 4200.0}
    fit = layers_within(3072, 32, measured)
    assert fit is not None and fit.layers == 23 and round(fit.per_layer_mib) == 118
    targets = offload_targets(32, True, 3072, measured)
    assert targets[1][0] == 23 and "partial offload" in targets[1][1] and "118 MiB per layer" in targets[1][1]
    # one measured point: the model's bytes per layer
    one = layers_within(3072, 32, {0: 300.0}, model_bytes=3_800_000_000)
    assert one is not None and one.layers == 25 and "size per layer" in one.source
    # nothing fits: 0 layers is named a CPU tune, never a partial offload
    (_, why) = offload_targets(32, True, 100, measured)[1]
    assert why.startswith("not one layer fits") and "a CPU tune" in why
    # everything fits: only full offload
    assert offload_targets(32, True, 8000, measured) == [(33, "full offload")]


def test_offload_levels_follow_the_memory_budget():
    measured = {0: 200.0, 7: 900.0, 13: 1600.0, 33: 4000.0}
    assert offload_targets(32, True, 0, measured) == [(33, "full offload")]
    targets = offload_targets(32, True, 2000, measured)
    assert targets[0] == (33, "full offload") and targets[1][0] == 16 and "2000 MiB" in targets[1][1]
    assert offload_targets(32, False, 2000, measured) == [(0, "no GPU offload: a CPU-only build, tuned on the CPU")]


def test_side_by_side_measures_both_alternately():
    order = []

    def measure(settings, ngl, label):
        order.append(label)
        return synthetic_speed(settings, ngl, label)

    rows = side_by_side(llama_class_defaults(8), llama_class_defaults(8).replace(flash_attn="on"), 33, measure)
    assert order == ["side by side 1: defaults", "side by side 1: tuned", "side by side 2: defaults",
                     "side by side 2: tuned"]
    deep_pp = next(r for r in rows if r.depth == 4096 and r.test == "pp")
    assert deep_pp.gain == 1.25


def test_the_report_gives_kwargs_environment_gain_and_llama_bench():
    def bench(settings, ngl, depths):
        fast = 1.2 if settings.flash_attn == "on" else 1.0
        return [BenchPoint(ngl, test, 512, rate * fast, 1.0, depth) for depth in depths
                for test, rate in (("pp", 900.0), ("tg", 90.0))]

    result = tune("/models/m.gguf", 32, True, 8, 16, [0, 4096], 512, 128, 3, synthetic_speed, 2000,
                  {13: 1600.0, 33: 4000.0}, bench, log=lambda line: None)
    assert [t.n_gpu_layers for t in result.targets] == [33, 16]
    full = result.targets[0]
    assert full.llama_kwargs["flash_attn"] == "True" and full.llama_kwargs["n_gpu_layers"] == "33"
    assert result.best_gain(4096) >= 1.10
    text = report_markdown(result)
    assert "llm = llama_cpp.Llama(model_path='/models/m.gguf', n_gpu_layers=33, " in text
    assert "flash_attn=True" in text and "Goal 1.10× at depth 4096 in tg: met (1.150×)" in text
    assert "| 4096 | tg | 115.0 |" not in text  # defaults first: 100.0, tuned 115.0
    assert "| 4096 | tg | 100.0 | 115.0 | 1.150× | 90.0 | 108.0 | 1.200× |" in text
    assert "## n_gpu_layers=16: partial offload: the most layers within verify.gpu_memory_budget" in text
    assert "Environment: nothing to set." in text


@pytest.mark.slow  # cpu_wheel: builds llama-cpp-python where no wheel is given
def test_tuning_a_real_wheel_on_cpu(tmp_path, cpu_wheel, tiny_f16_model):
    """verify.tune: true on the CPU wheel and the tiny model: every trial a child, the report in the run folder."""
    from playbook.params import PARAMS_DIR, load_params
    from playbook.runfolder.layout import Layout
    from playbook.verify.step import VerifyRequest, VerifyTarget, run_verify
    from playbook.verify.units.runtime_tune import TUNE

    params = load_params(PARAMS_DIR / "cpu.yaml", [
        f"model.path={tiny_f16_model}", "model.quant=F16", "verify.tune=true", "verify.tune_depths=[0, 32]",
        "verify.prompt_tokens=32", "verify.gen_tokens=8", "verify.repetitions=2", "verify.threads=2"])
    layout = Layout(tmp_path / "run")
    result = run_verify(VerifyRequest(layout, cpu_wheel, params, VerifyTarget(expect_gpu=False), tmp_path,
                                      tmp_path / "cache"), log=lambda line: None)
    tuned = result.measured(TUNE)
    assert tuned is not None, result.summary
    (target,) = tuned.targets
    assert target.n_gpu_layers == 0 and not target.error
    assert all(t.status == "ok" for t in target.trials), [(t.label, t.status) for t in target.trials]
    assert {t.label.split(" (on the")[0] for t in target.trials} >= {"defaults (Llama())", "flash_attn=on", "threads=1"}
    for recommendation in target.recommendations:  # confirmed at every depth on its own test, or the defaults kept
        assert recommendation.kept_defaults or {(r.depth, r.test) for r in recommendation.gains} == {
            (0, recommendation.workload), (32, recommendation.workload)}
    assert [r.workload for r in target.recommendations] == ["pp", "tg"]
    report = layout.unit_files(1, "tune").beside(".md").read_text()
    assert "## n_gpu_layers=0: no GPU offload" in report
    # a line to paste for each workload whose tuned settings were confirmed; where the side-by-side remeasurement
    # found them slower (on two shared cores that happens), the defaults stay and the report says why instead
    for recommendation in target.recommendations:
        assert (recommendation.kept_defaults in report) if recommendation.kept_defaults else (
            f"n_gpu_layers=0, n_threads={recommendation.settings.threads}" in report)
    assert ("llm = llama_cpp.Llama(" in report) == any(not r.kept_defaults for r in target.recommendations)
    saved = json.loads(layout.unit_files(1, "tune").beside(".json").read_text())
    assert saved["targets"][0]["llama_kwargs"]["n_gpu_layers"] == "0"
    assert (layout.verify_logs(1) / target.trials[0].log_file).is_file()
    tune_unit = next(u for u in result.units if u.name == "tune")
    owned = [layout.unit_files(1, "tune").beside(".json"), layout.unit_files(1, "tune").beside(".md"), layout.verify_logs(1) / target.trials[0].log_file]
    assert tune_unit.status == "measured" and {layout.in_run(path) for path in owned} <= set(tune_unit.files)


def test_playbook_report_shows_the_tuning_report(tmp_path):
    import shutil
    from pathlib import Path

    from playbook.interfaces.report import write_report
    from playbook.runfolder.layout import Layout

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[2] / "outputs" / "reference" / "20261122T031414Z-vm", run)
    result = tune("/models/m.gguf", 32, True, 8, 16, [0, 4096], 512, 128, 3, synthetic_speed, log=lambda line: None)
    Layout(run).unit_files(1, "tune").beside(".md").write_text(report_markdown(result))
    Layout(run).unit_files(1, "tune").beside(".json").write_text("{}")
    index = Path(write_report(run, str(tmp_path / "report")))
    html = index.read_text()
    assert "<h2>Runtime tuning</h2>" in html and "llm = llama_cpp.Llama(model_path=&#39;/models/m.gguf&#39;" in html
