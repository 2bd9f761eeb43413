"""The llama-bench yardstick: llama.cpp's own benchmark, built from the wheel's source tree with its
CMake arguments, measuring the sweep's layer counts with the sweep's settings (verify.llama_bench).

Both sides are measured the same way, in pairs of processes: one binding child over every layer count (as
llama-bench runs them, one process, one model load and one warm-up per count), then one llama-bench process,
the side that starts alternating from pair to pair (verify.yardstick_pairs). Partial-offload rates vary far more
between processes than within one, so the ratio is the median over pairs, reported with the pairs' range and
each side's spread between processes."""

from __future__ import annotations

from pathlib import Path

from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP, run_bench_child
from playbook.verify.yardsticks import LlamaBench, interleaved_pairs, run_llama_bench

TESTS = ("pp", "tg")


class LlamaBenchYardstick:
    name = "llama-bench"
    value_type = LlamaBench

    def skip_reason(self, ctx: VerifyContext) -> str:
        if ctx.request.yardstick is None:
            return "verify.llama_bench is false"
        sweep = ctx.value(OFFLOAD_SWEEP)
        return "" if sweep is not None and sweep.measured else "the sweep measured nothing to compare with"

    def measure(self, ctx: VerifyContext) -> Measured[LlamaBench]:
        assert ctx.request.yardstick is not None
        verify = ctx.params.verify
        sweep, model = ctx.require(OFFLOAD_SWEEP), ctx.require(MODEL_FILE)
        counts = [p.n_gpu_layers for p in sweep.measured]
        ctx.log("building llama-bench from the same tree and CMake arguments")
        try:
            bench = ctx.request.yardstick(model.path, [], sweep.settings)
        except Exception as error:  # noqa: BLE001 the yardstick is optional: verify's own results must survive it
            bench = LlamaBench(False, error=f"{type(error).__name__}: {error}")
        files = [ctx.files("llama-bench").beside(".log")]
        if not bench.ok:
            ctx.log(f"  llama-bench: {bench.error}")
            return Measured(bench, files=files)
        ctx.log(f"  built in {bench.build_s:.0f} s; measuring {verify.yardstick_pairs} interleaved pairs of processes "
                f"at n_gpu_layers {', '.join(map(str, counts))}")
        binary = Path(bench.binary)
        timeout = ctx.timeout_s * len(counts)

        def binding(layer_counts: list[int]) -> dict[tuple[int, str], float]:
            log_file = ctx.files("yardstick").log(f"pair-{len(files):02d}")
            files.append(log_file)
            outcome = run_bench_child(model.path, layer_counts, sweep.settings, verify.prompt_tokens,
                                      verify.gen_tokens, verify.repetitions, ctx.wheel.site_dir, log_file, timeout,
                                      ctx.request.python, ctx.wheel.child_env)
            points = (outcome.result or {}).get("points") or ([outcome.result] if outcome.result else [])
            return {(point["n_gpu_layers"], test): point[test]["tokens_per_s_mean"]
                    for point in points for test in TESTS}

        def llama_bench(layer_counts: list[int]) -> dict[tuple[int, str], float]:
            points, run_s, error = run_llama_bench(binary, model.path, layer_counts, sweep.settings,
                                                   verify.prompt_tokens, verify.gen_tokens, verify.repetitions,
                                                   files[0], timeout)
            bench.run_s += run_s
            if error:
                bench.error = error
            bench.points = bench.points or points  # the first pair's run, kept in verify-attempt-N.json
            return {(p.n_gpu_layers, p.test): p.tokens_per_s for p in points}

        bench.pairs = interleaved_pairs(counts, verify.yardstick_pairs, binding, llama_bench, ctx.log)
        bench.ok = bool(bench.pairs)
        for row in bench.pairs:
            low, high = row.ratio_range or (0, 0)
            ctx.log(f"  n_gpu_layers={row.n_gpu_layers} {row.test}: median ratio {row.median_ratio:.3f} "
                    f"(pairs {low:.3f}-{high:.3f})")
        return Measured(bench, files=files)



LLAMA_BENCH = LlamaBenchYardstick()
