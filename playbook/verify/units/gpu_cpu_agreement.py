"""GPU/CPU agreement: the same GGUF and tokens with every layer on the GPU and with none; their logits
must agree within the quantization's tolerance (:mod:`playbook.verify.agreement`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from playbook.knowledge.failures import Finding, finding_for
from playbook.verify.agreement import Agreement, compare_logits
from playbook.verify.launcher import ChildOutcome, run_child
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.model_file import MODEL_FILE


class GpuCpuAgreement:
    name = "gpu-cpu-agreement"
    value_type = Agreement

    def skip_reason(self, ctx: VerifyContext) -> str:
        probe = ctx.require(IMPORT_PROBE)
        if probe.gpu_skipped:
            return probe.gpu_skipped
        return "" if probe.gpu_offload else "no GPU offload: nothing to compare"

    def measure(self, ctx: VerifyContext) -> Measured[Agreement]:
        model = ctx.require(MODEL_FILE)
        positions = ctx.params.verify.compare_positions
        findings: list[Finding] = []
        logs = {side: ctx.files("logits").log(side) for side in ("cpu", "gpu")}
        with tempfile.TemporaryDirectory(prefix="playbook-logits-") as tmp:
            outcomes: dict[str, ChildOutcome] = {}
            for side, ngl, op_offload in (("cpu", 0, "0"), ("gpu", model.n_layer + 1, "1")):
                out = Path(tmp) / f"{side}.f32"
                args = ["logits", str(model.path), str(ngl), str(ctx.settings.threads), str(positions), str(out),
                        op_offload]
                expected = ("cpu-only-build",) if ngl == 0 else ()
                outcomes[side] = run_child(args, ctx.wheel.site_dir, logs[side], ctx.timeout_s, ctx.request.python,
                                           expected=expected, extra_env=ctx.wheel.child_env)
                findings += outcomes[side].findings
            if any(o.status != "ok" for o in outcomes.values()):
                ctx.log("logits comparison skipped: a child failed (see findings)")
                return Measured(None, findings, list(logs.values()))
            gpu_result = outcomes["gpu"].result
            assert gpu_result is not None, "a child whose status is ok wrote its result line"
            n_vocab = int(gpu_result["n_vocab"])
            agreement = compare_logits(Path(tmp) / "cpu.f32", Path(tmp) / "gpu.f32", n_vocab, ctx.params.model.quant)
        ctx.log(f"GPU vs CPU over {agreement.positions} positions: relative error {agreement.relative_error:.2e} "
                f"(max {agreement.max_relative_error}), top-1 agreement {agreement.top1_agreement:.1%} "
                f"(min {agreement.min_top1_agreement:.0%})")
        if not agreement.ok:
            line = (f"playbook: numeric mismatch: relative error {agreement.relative_error:.3g} "
                    f"(at most {agreement.max_relative_error} for {ctx.params.model.quant}), top-1 agreement "
                    f"{agreement.top1_agreement:.3f} (at least {agreement.min_top1_agreement}) over "
                    f"{agreement.positions} positions")
            with logs["gpu"].open("a") as log:
                log.write(line + "\n")
            findings.append(finding_for("numeric-mismatch", line, stage="run"))
        return Measured(agreement, findings, list(logs.values()), passed=agreement.ok)



GPU_CPU_AGREEMENT = GpuCpuAgreement()
