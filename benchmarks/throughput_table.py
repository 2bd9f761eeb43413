"""Print a run folder's throughput sweep beside llama-bench's: ratios, the binding's overhead per
generated token, llama.cpp's GPU memory and the share of the memory-bandwidth limit.

    python benchmarks/throughput_table.py outputs/reference/20261122T012240Z-vm
"""

from __future__ import annotations

import sys
from pathlib import Path

from playbook.runfolder.layout import Layout
from playbook.serialization import read_json
from playbook.verify.launcher import gpu_memory_mib
from playbook.verify.result import VerifyResult
from playbook.verify.sweep import SweepPoint
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import FILES, OFFLOAD_SWEEP
from playbook.verify.units.throughput import THROUGHPUT

COLUMNS = ("ngl", "pp t/s", "tg t/s", "bench pp", "bench tg", "pp ratio", "tg ratio", "+ms/token", "GPU MiB",
           "% of limit")


def latest_verify(run_dir: Path) -> tuple[int, VerifyResult]:
    """The run's last verify attempt and its result (either shape of verify-attempt-N.json)."""
    layout = Layout(run_dir)
    attempt = layout.latest_attempt("verify")
    return attempt, read_json(VerifyResult, layout.verify_result(attempt))


def points_of(verify: VerifyResult) -> list[SweepPoint]:
    sweep = verify.measured(OFFLOAD_SWEEP)
    return sweep.points if sweep else []


def rows(run_dir: Path) -> list[tuple[object, ...]]:
    attempt, verify = latest_verify(run_dir)
    files = Layout(run_dir).unit_files(attempt, FILES)
    table = []
    for p in points_of(verify):
        tg, bench_tg = p.tg_tokens_per_s, p.bench_tg_tokens_per_s
        log = files.log(f"ngl-{p.n_gpu_layers}")
        share = p.tg_bandwidth_fraction
        table.append((
            p.n_gpu_layers, p.pp_tokens_per_s, tg, p.bench_pp_tokens_per_s, bench_tg,
            p.pp_ratio, p.tg_ratio,
            1000 / tg - 1000 / bench_tg if tg and bench_tg else None,
            gpu_memory_mib(log.read_text(errors="replace")) if log.is_file() else None,
            100 * share if share else None,
        ))
    return table


def table(run_dir: Path) -> str:
    _, verify = latest_verify(run_dir)
    model, throughput = verify.measured(MODEL_FILE), verify.measured(THROUGHPUT)
    limit = throughput.tg_limit_tokens_per_s if throughput else None
    header = f"{run_dir.name}: {model.path.name if model else '?'}, {verify.threads} threads"
    if throughput and limit and throughput.gpu_bandwidth_gb_per_s:
        header += f", bandwidth {throughput.gpu_bandwidth_gb_per_s:.0f} GB/s → tg limit {limit:.0f} t/s"
    lines = [header, " ".join(f"{c:>10}" for c in COLUMNS)]
    for row in rows(run_dir):
        cells = [f"{v:>10.3f}" if isinstance(v, float) and abs(v) < 10 else f"{v:>10.1f}" if isinstance(v, float)
                 else f"{v:>10}" if v is not None else f"{'-':>10}" for v in row]
        lines.append(" ".join(cells))
    if verify.settings:  # runs since issue 18: the binding and llama-bench got these, identically
        lines.append("settings (both): " + ", ".join(f"{k}={v}" for k, v in vars(verify.settings).items()
                                                     if v not in ((), [])))
    lines += [f"ngl {p.n_gpu_layers}: {p.ratio_note}" for p in points_of(verify) if p.ratio_note]
    return "\n".join(lines)


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        print(table(Path(folder)))
        print()
