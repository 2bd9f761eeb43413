"""The offload sweep: prompt processing and token generation through the binding, one child per number
of layers offloaded to the GPU (a single point, 0, for a wheel that does not offload here)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from playbook.knowledge.failures import Finding, finding_for
from playbook.runfolder.layout import Layout
from playbook.verify.launcher import ChildOutcome, run_child
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.settings import BenchSettings
from playbook.verify.sweep import SweepPoint, layer_counts, sweep_point
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.model_file import MODEL_FILE


@dataclass
class Sweep:
    """The layer counts asked for and what each measured."""

    layer_counts: list[int]
    """0, a few steps between, and every layer (n_layer + 1 moves the output layer too); [0] without offload."""
    settings: BenchSettings
    """The runtime settings of every point."""
    points: list[SweepPoint] = field(default_factory=list)
    """One per layer count, in order; a crash or a hang is a point with that status."""

    @property
    def measured(self) -> list[SweepPoint]:
        return [p for p in self.points if p.status == "ok"]


FILES = "bench"  # its files' namespace: verify-logs/attempt-N/bench-ngl-L.log


def point_logs(layout: Layout, attempt: int) -> list[Path]:
    """The sweep points measured so far (or being measured) in an attempt: what a progress bar counts."""
    return layout.unit_files(attempt, FILES).logs("ngl-*")


class OffloadSweep:
    name = "offload-sweep"
    value_type = Sweep

    def skip_reason(self, ctx: VerifyContext) -> str:
        return ""

    def measure(self, ctx: VerifyContext) -> Measured[Sweep]:
        verify, probe, model = ctx.params.verify, ctx.require(IMPORT_PROBE), ctx.require(MODEL_FILE)
        settings = ctx.settings
        counts = layer_counts(model.n_layer, verify.n_gpu_layers, probe.gpu_offload, verify.sweep_points)
        sweep = Sweep(counts, settings)
        findings: list[Finding] = []
        ctx.log(f"measurement settings (llama-bench gets the same): {settings.csv_fields()}")
        for ngl in sweep.layer_counts:
            ctx.log(f"measuring n_gpu_layers={ngl}: pp{verify.prompt_tokens}, tg{verify.gen_tokens}, "
                    f"{verify.repetitions} repetitions, {settings.threads} threads")
            outcome = run_bench_child(model.path, ngl, settings, verify.prompt_tokens, verify.gen_tokens,
                                      verify.repetitions, ctx.wheel.site_dir, ctx.files(FILES).log(f"ngl-{ngl}"),
                                      ctx.timeout_s, ctx.request.python, ctx.wheel.child_env,
                                      expected=probe.expected_here)
            point = sweep_point(outcome, ngl, settings)
            sweep.points.append(point)
            findings += outcome.findings
            ctx.log(f"  {point.status}: pp {point.pp_tokens_per_s or 0:.1f} t/s, "
                    f"tg {point.tg_tokens_per_s or 0:.1f} t/s, offloaded {point.offloaded_layers}")
            if (ngl == max(sweep.layer_counts) and ctx.target.expect_gpu and ngl > 0 and outcome.status == "ok"
                    and not point.offloaded_layers):
                findings.append(finding_for("cpu-only-build", f"offloaded {point.offloaded_layers or 0}/"
                                            f"{model.n_layer + 1} layers", stage="load"))
        files = [ctx.files(FILES).log(f"ngl-{ngl}") for ngl in sweep.layer_counts]
        return Measured(sweep, findings, files, summary=summary(sweep, probe.gpu_offload, bool(probe.gpu_skipped)))



def summary(sweep: Sweep, gpu_offload: bool, gpu_skipped: bool) -> str:
    """The sweep in one sentence: the best token generation, and prompt processing there."""
    if not sweep.measured:
        return "no layer count could be measured: see findings"
    best = max(sweep.measured, key=lambda p: p.tg_tokens_per_s or 0)
    where = "GPU build" if gpu_offload else ("GPU build run on the CPU" if gpu_skipped else "CPU-only build")
    return (f"{where}: best token generation {best.tg_tokens_per_s:.1f} t/s at n_gpu_layers={best.n_gpu_layers}; "
            f"prompt processing {best.pp_tokens_per_s:.1f} t/s there")


def run_bench_child(model_path: Path, ngl: int | list[int], settings: BenchSettings, n_prompt: int, n_gen: int,
                    repetitions: int, site_dir: Path, log_file: Path, timeout: float, python: str = sys.executable,
                    extra_env: dict[str, str] | None = None, depths: list[int] | None = None,
                    expected: tuple[str, ...] = ()) -> ChildOutcome:
    """One throughput measurement in a child: ``settings`` go to it as JSON, their variables into its environment.
    A list of layer counts is measured in that one child, one after the other (its result's ``points``).
    ``expected``: finding ids that are no failure here (a GPU-less machine's 'no device')."""
    counts = ngl if isinstance(ngl, list) else [ngl]
    args = ["bench", str(model_path), ",".join(map(str, counts)), str(settings.threads), str(n_prompt), str(n_gen),
            str(repetitions), settings.to_json(), ",".join(map(str, depths or [0]))]
    expected = (("cpu-only-build",) if 0 in counts else ()) + tuple(expected)
    return run_child(args, site_dir, log_file, timeout, python, expected=expected,
                     extra_env={**(extra_env or {}), **dict(settings.env)})


OFFLOAD_SWEEP = OffloadSweep()
