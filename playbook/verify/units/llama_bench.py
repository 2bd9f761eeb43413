"""The llama-bench yardstick: llama.cpp's own benchmark, built from the wheel's source tree with its
CMake arguments, measuring the sweep's layer counts with the sweep's settings (verify.llama_bench)."""

from __future__ import annotations

from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.result import VerifyResult
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP
from playbook.verify.yardsticks import LlamaBench


class LlamaBenchYardstick:
    name = "llama-bench"

    def skip_reason(self, ctx: VerifyContext) -> str:
        if ctx.request.yardstick is None:
            return "verify.llama_bench is false"
        sweep = ctx.value(OFFLOAD_SWEEP)
        return "" if sweep is not None and sweep.measured else "the sweep measured nothing to compare with"

    def measure(self, ctx: VerifyContext) -> Measured[LlamaBench]:
        assert ctx.request.yardstick is not None
        sweep = ctx.require(OFFLOAD_SWEEP)
        ctx.log("building llama-bench from the same tree and CMake arguments, then measuring the same points")
        try:
            bench = ctx.request.yardstick(ctx.require(MODEL_FILE).path, sweep.layer_counts, sweep.settings)
        except Exception as error:  # the yardstick is optional: verify's own results must survive it
            bench = LlamaBench(False, error=f"{type(error).__name__}: {error}")
        ctx.log(f"  llama-bench: {'ok' if bench.ok else bench.error}, built in {bench.build_s:.0f} s, "
                f"ran in {bench.run_s:.0f} s")
        return Measured(bench, files=[ctx.layout.llama_bench_log(ctx.attempt)])

    def record(self, value: LlamaBench, result: VerifyResult) -> None:
        result.llama_bench = value


LLAMA_BENCH = LlamaBenchYardstick()
