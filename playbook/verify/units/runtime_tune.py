"""The tune (verify.tune): the search of :mod:`playbook.verify.tune` for runtime settings faster than
``Llama()``'s defaults, each trial a child like the sweep's points; its result and its report in the
run folder."""

from __future__ import annotations

from itertools import count
from pathlib import Path

from playbook.serialization import write_json
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.settings import BenchSettings
from playbook.verify.sweep import default_threads
from playbook.verify.tune import (
    FA_ALL_QUANTS,
    Budget,
    TuneResult,
    TuneTrial,
    report_markdown,
    trial_from_child,
    tune,
)
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.llama_bench import LLAMA_BENCH
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP, run_bench_child
from playbook.verify.yardsticks import BenchPoint, run_llama_bench


class RuntimeTune:
    name = "tune"
    value_type = TuneResult

    def skip_reason(self, ctx: VerifyContext) -> str:
        if not ctx.params.verify.tune:
            return "verify.tune is false"
        sweep = ctx.value(OFFLOAD_SWEEP)
        return "" if sweep is not None and sweep.measured else "the sweep measured nothing to start from"

    def measure(self, ctx: VerifyContext) -> Measured[TuneResult]:
        verify = ctx.params.verify
        model, sweep = ctx.require(MODEL_FILE), ctx.require(OFFLOAD_SWEEP)
        depths = list(verify.tune_depths)
        numbers = count(1)
        trial_logs: list[Path] = []

        def measure(candidate: BenchSettings, ngl: int, label: str) -> TuneTrial:
            log_file = ctx.files("tune").log(f"ngl-{ngl}-{next(numbers):03d}")
            trial_logs.append(log_file)
            outcome = run_bench_child(model.path, ngl, candidate, verify.prompt_tokens, verify.gen_tokens,
                                      verify.repetitions, ctx.wheel.site_dir, log_file, ctx.timeout_s * len(depths),
                                      ctx.request.python, ctx.wheel.child_env, depths)
            trial = trial_from_child(label, ngl, candidate, outcome.status, outcome.result, log_file.name)
            ctx.log(f"  trial {len(trial_logs)} {label}: {outcome.status} " + " ".join(
                f"d{d} pp {r['pp']:.1f} tg {r['tg']:.1f}" for d, r in trial.rates.items()))
            return trial

        bench = None
        built = ctx.value(LLAMA_BENCH)
        if built is not None and built.ok and built.binary:
            binary = Path(built.binary)

            def bench(candidate: BenchSettings, ngl: int, bench_depths: list[int]) -> list[BenchPoint]:
                points, _, error = run_llama_bench(binary, model.path, [ngl], candidate, verify.prompt_tokens,
                                                   verify.gen_tokens, verify.repetitions,
                                                   ctx.files("llama-bench").beside(".log"), ctx.timeout_s * len(bench_depths),
                                                   bench_depths)
                if error:
                    raise RuntimeError(error)
                return points

        tuned = tune(str(model.path), model.n_layer, ctx.require(IMPORT_PROBE).gpu_offload, ctx.settings.threads,
                     default_threads(), depths, verify.prompt_tokens, verify.gen_tokens, verify.repetitions, measure,
                     verify.gpu_memory_budget, {p.n_gpu_layers: p.gpu_memory_mib for p in sweep.measured}, bench,
                     ctx.log, int(model.description.get("file_size_bytes") or 0),
                     Budget(verify.tune_budget_s, with_llama_bench=bench is not None),
                     fa_all_quants=f"-D{FA_ALL_QUANTS}=ON" in (a.upper() for a in ctx.target.cmake_args))
        report = ctx.files("tune").beside(".md")
        report.write_text(report_markdown(tuned), encoding="utf-8")
        tuned.report_file = report.name
        write_json(tuned, ctx.files("tune").beside(".json"))
        return Measured(tuned, files=[ctx.files("tune").beside(".json"), report, *trial_logs])



TUNE = RuntimeTune()
