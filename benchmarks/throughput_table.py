"""Print a run folder's throughput sweep beside llama-bench's, with ratios and the bandwidth limit.

    python benchmarks/throughput_table.py outputs/reference/20261122T012240Z-vm
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(run_dir: Path) -> str:
    verify = json.loads((run_dir / "verify.json").read_text())
    limit = verify.get("tg_limit_tokens_per_s")
    lines = [
        f"{run_dir.name}: {verify['model_path'].rsplit('/', 1)[-1]}, {verify['threads']} threads"
        + (f", bandwidth {verify['gpu_bandwidth_gb_per_s']:.0f} GB/s → tg limit {limit:.0f} t/s" if limit else ""),
        f"{'ngl':>4} {'pp t/s':>10} {'tg t/s':>9} {'bench pp':>10} {'bench tg':>9} {'pp ratio':>9} {'tg ratio':>9} "
        f"{'% of limit':>10}",
    ]
    for p in verify["points"]:
        def num(value, fmt):
            return format(value, fmt) if value is not None else "-".rjust(int(fmt.split(".")[0]))

        share = p.get("tg_bandwidth_fraction")
        lines.append(
            f"{p['n_gpu_layers']:>4} {num(p['pp_tokens_per_s'], '10.1f')} {num(p['tg_tokens_per_s'], '9.1f')} "
            f"{num(p.get('bench_pp_tokens_per_s'), '10.1f')} {num(p.get('bench_tg_tokens_per_s'), '9.1f')} "
            f"{num(p.get('pp_ratio'), '9.3f')} {num(p.get('tg_ratio'), '9.3f')} "
            f"{num(share * 100 if share else None, '9.1f')}{'%' if share else ''}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        print(table(Path(folder)))
        print()
