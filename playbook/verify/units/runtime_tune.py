"""The tune (verify.tune): the search of :mod:`playbook.verify.tune` for runtime settings faster than
``Llama()``'s defaults, each trial a child like the sweep's points; its result and its report in the
run folder."""

from __future__ import annotations

from itertools import count
from pathlib import Path

from playbook.serialization import write_json
from playbook.verify.launcher import install_wheel
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.settings import BenchSettings
from playbook.verify.sweep import default_threads
from playbook.verify.tune import (
    Budget,
    BuildFlag,
    FlagBuild,
    Measure,
    TuneResult,
    TuneTrial,
    build_flag_candidates,
    builds_every_fa_pair,
    report_markdown,
    trial_from_child,
    tune,
    tune_build_flags,
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
        trials = Trials(ctx)
        measure = trials.on(ctx.wheel.site_dir)

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
                     fa_all_quants=builds_every_fa_pair(ctx.target.cmake_args), cmake_args=ctx.target.cmake_args)
        files = tune_build_flags_of(ctx, tuned, trials)
        report = ctx.files("tune").beside(".md")
        report.write_text(report_markdown(tuned), encoding="utf-8")
        tuned.report_file = report.name
        write_json(tuned, ctx.files("tune").beside(".json"))
        return Measured(tuned, files=[ctx.files("tune").beside(".json"), report, *trials.logs, *files])



class Trials:
    """Each trial a child of the wheel installed in a site folder, its log numbered in the order they ran."""

    def __init__(self, ctx: VerifyContext):
        self.ctx, self.numbers, self.logs = ctx, count(1), list[Path]()

    def on(self, site_dir: Path) -> Measure:
        ctx, verify = self.ctx, self.ctx.params.verify
        depths = list(verify.tune_depths)
        model = ctx.require(MODEL_FILE)

        def measure(candidate: BenchSettings, ngl: int, label: str) -> TuneTrial:
            log_file = ctx.files("tune").log(f"ngl-{ngl}-{next(self.numbers):03d}")
            self.logs.append(log_file)
            outcome = run_bench_child(model.path, ngl, candidate, verify.prompt_tokens, verify.gen_tokens,
                                      verify.repetitions, site_dir, log_file, ctx.timeout_s * len(depths),
                                      ctx.request.python, ctx.wheel.child_env, depths)
            trial = trial_from_child(label, ngl, candidate, outcome.status, outcome.result, log_file.name)
            ctx.log(f"  trial {len(self.logs)} {label}: {outcome.status} " + " ".join(
                f"d{d} pp {r['pp']:.1f} tg {r['tg']:.1f}" for d, r in trial.rates.items()))
            return trial

        return measure


def tune_build_flags_of(ctx: VerifyContext, tuned: TuneResult, trials: Trials) -> list[Path]:
    """verify.tune_build_flags: rebuild with the backend's candidate flags, install each rebuilt wheel alone, measure
    what needs it beside the defaults (:func:`playbook.verify.tune.tune_build_flags`); the files it wrote."""
    if not ctx.params.verify.tune_build_flags:
        return []
    builder = ctx.request.tune_rebuild
    flags = build_flag_candidates(ctx.target.tune_build_flags, ctx.target.cmake_args)
    if builder is None or not flags:
        ctx.log("verify.tune_build_flags: " + ("no build to repeat here" if builder is None
                                               else f"no build flag to try for backend {ctx.target.backend!r}"))
        return []
    layout, attempt = ctx.layout, ctx.attempt

    def rebuild(flag: BuildFlag) -> tuple[FlagBuild, Measure | None]:
        built = builder(flag.cmake_args)
        if not built.ok:
            return built, None
        site_dir = ctx.request.cache_dir / "site" / built.sha256[:16]
        installed = install_wheel(Path(built.wheel), site_dir, ctx.request.python, list(ctx.target.extras),
                                  ctx.target.find_links)
        with layout.tune_install_log(attempt).open("a") as log:
            log.write(installed.stdout + installed.stderr)
        if installed.returncode != 0:
            built.error = f"pip could not install the rebuilt wheel; see {layout.in_run(layout.tune_install_log(attempt))}"
            return built, None
        return built, trials.on(site_dir)

    rounds = Budget(ctx.params.verify.tune_budget_s).side_by_side_rounds
    tune_build_flags(tuned, flags, rebuild, trials.on(ctx.wheel.site_dir), rounds, ctx.log)
    built_wheels = [Path(b.wheel) for b in tuned.flag_builds if b.wheel]
    return [layout.tune_build_log(attempt), layout.tune_install_log(attempt), *built_wheels]


TUNE = RuntimeTune()
