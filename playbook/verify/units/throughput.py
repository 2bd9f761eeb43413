"""The throughput table and plot: the sweep's points read against its yardsticks (llama-bench on the
same build, the memory-bandwidth limit), written as ``throughput-attempt-N.csv`` and its plot. It runs
after every unit that measures the sweep's layer counts, so the files show them all."""

from __future__ import annotations

from dataclasses import dataclass, field

from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.sweep import compare_with_yardsticks, plot_throughput, write_sweep_csv
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.llama_bench import LLAMA_BENCH
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP


@dataclass
class Throughput:
    """The files, and the yardstick that only the GPU gives."""

    csv_file: str
    """The table's file name in the run folder."""
    plot_files: list[str] = field(default_factory=list)
    """The plot's file names (PNG, SVG)."""
    gpu_bandwidth_gb_per_s: float | None = None
    """The GPU's peak memory bandwidth, where it offloads."""
    tg_limit_tokens_per_s: float | None = None
    """Bandwidth over the model's bytes: no decoder generates faster."""


class ThroughputTable:
    name = "throughput"
    value_type = Throughput

    def skip_reason(self, ctx: VerifyContext) -> str:
        return "" if ctx.value(OFFLOAD_SWEEP) is not None else "no sweep"

    def measure(self, ctx: VerifyContext) -> Measured[Throughput]:
        sweep, model, probe = ctx.require(OFFLOAD_SWEEP), ctx.require(MODEL_FILE), ctx.require(IMPORT_PROBE)
        bandwidth = ctx.target.gpu_bandwidth_gb_per_s if probe.gpu_offload else None
        tg_limit = bandwidth * 1e9 / int(model.description["file_size_bytes"]) if bandwidth else None
        compare_with_yardsticks(sweep.points, ctx.value(LLAMA_BENCH), tg_limit, model.n_layer + 1, sweep.settings)
        for point in sweep.points:
            if point.ratio_note:
                ctx.log(f"  n_gpu_layers={point.n_gpu_layers} against llama-bench: {point.ratio_note}")
        csv = write_sweep_csv(sweep.points, ctx.files("throughput").beside(".csv"))
        probe_result = probe.outcome.result
        assert probe_result is not None, "the sweep ran: the probe child's status was ok, with its result line"
        title = (f"{model.path.name} · llama-cpp-python {probe_result['version']} · "
                 f"{sweep.settings.threads} threads")
        plots = plot_throughput(sweep.points, title, [ctx.files("throughput").beside(s) for s in (".png", ".svg")], tg_limit,
                                gpu_offload=probe.gpu_offload, scale=ctx.params.verify.plot_scale)
        return Measured(Throughput(csv.name, [p.name for p in plots], bandwidth, tg_limit), files=[csv, *plots])



THROUGHPUT = ThroughputTable()
