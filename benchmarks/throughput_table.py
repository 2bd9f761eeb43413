"""Print a run folder's throughput sweep beside llama-bench's: ratios, the binding's overhead per
generated token, llama.cpp's GPU memory and the share of the memory-bandwidth limit.

    python benchmarks/throughput_table.py outputs/reference/20261122T012240Z-vm
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from playbook.verify.launcher import gpu_memory_mib

COLUMNS = ("ngl", "pp t/s", "tg t/s", "bench pp", "bench tg", "pp ratio", "tg ratio", "+ms/token", "GPU MiB",
           "% of limit")


def rows(run_dir: Path) -> list[tuple[object, ...]]:
    verify = json.loads((run_dir / "verify.json").read_text())
    logs = run_dir / "verify-logs" / f"attempt-{json.loads((run_dir / 'build.json').read_text())['attempt']}"
    table = []
    for p in verify["points"]:
        tg, bench_tg = p["tg_tokens_per_s"], p.get("bench_tg_tokens_per_s")
        log = logs / f"bench-ngl-{p['n_gpu_layers']}.log"
        share = p.get("tg_bandwidth_fraction")
        table.append((
            p["n_gpu_layers"], p["pp_tokens_per_s"], tg, p.get("bench_pp_tokens_per_s"), bench_tg,
            p.get("pp_ratio"), p.get("tg_ratio"),
            1000 / tg - 1000 / bench_tg if tg and bench_tg else None,
            gpu_memory_mib(log.read_text(errors="replace")) if log.is_file() else None,
            100 * share if share else None,
        ))
    return table


def table(run_dir: Path) -> str:
    verify = json.loads((run_dir / "verify.json").read_text())
    limit = verify.get("tg_limit_tokens_per_s")
    header = f"{run_dir.name}: {verify['model_path'].rsplit('/', 1)[-1]}, {verify['threads']} threads"
    if limit:
        header += f", bandwidth {verify['gpu_bandwidth_gb_per_s']:.0f} GB/s → tg limit {limit:.0f} t/s"
    lines = [header, " ".join(f"{c:>10}" for c in COLUMNS)]
    for row in rows(run_dir):
        cells = [f"{v:>10.3f}" if isinstance(v, float) and abs(v) < 10 else f"{v:>10.1f}" if isinstance(v, float)
                 else f"{v:>10}" if v is not None else f"{'-':>10}" for v in row]
        lines.append(" ".join(cells))
    settings = verify.get("settings")
    if settings:  # runs since issue 18: the binding and llama-bench got these, identically
        lines.append("settings (both): " + ", ".join(f"{k}={v}" for k, v in settings.items() if v not in ((), [])))
    lines += [f"ngl {p['n_gpu_layers']}: {p['ratio_note']}" for p in verify["points"] if p.get("ratio_note")]
    return "\n".join(lines)


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        print(table(Path(folder)))
        print()
