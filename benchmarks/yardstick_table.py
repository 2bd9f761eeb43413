"""Verify's measurements of one run folder as Markdown tables: the binding against llama-bench over interleaved
pairs of processes (throughput-attempt-N.csv, verify.llama_bench with verify.yardstick_pairs), or the tune's gains
at depth (tune-attempt-N.json, verify.tune).

    python benchmarks/yardstick_table.py RUN_DIR [ATTEMPT]
    python benchmarks/yardstick_table.py --tune RUN_DIR [ATTEMPT]
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def table(run: Path, attempt: int = 1) -> str:
    rows = list(csv.DictReader((run / f"throughput-attempt-{attempt}.csv").open()))
    lines = ["| layers offloaded | pairs | pp ratio (median) | pp pairs | tg ratio (median) | tg pairs | "
             "tg spread between processes |", "|---:|---:|---:|---|---:|---|---|"]
    for row in rows:
        lines.append(f"| {row['n_gpu_layers']} | {row['pairs']} | {float(row['pp_ratio']):.3f} | {row['pp_ratio_range']} "
                     f"| {float(row['tg_ratio']):.3f} | {row['tg_ratio_range']} | {row['tg_spread_between_processes']} |")
    return "\n".join(lines)


def tune_table(run: Path, attempt: int = 1) -> str:
    result = json.loads((run / f"tune-attempt-{attempt}.json").read_text())
    lines = ["| layers offloaded | depth | test | defaults t/s | tuned t/s | gain | changed |",
             "|---:|---:|---|---:|---:|---:|---|"]
    for target in result["targets"]:
        changed = ", ".join(f"{k}={target['best'][k]}" for k in target["best"] if target["best"][k] != target["defaults"][k])
        for row in target["gains"]:
            lines.append(f"| {target['n_gpu_layers']} | {row['depth']} | {row['test']} | {row['defaults']:.1f} | "
                         f"{row['tuned']:.1f} | {row['gain']:.3f}× | {changed or 'nothing'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    make = tune_table if args[:1] == ["--tune"] else table
    args = args[1:] if make is tune_table else args
    print(make(Path(args[0]), int(args[1]) if len(args) > 1 else 1))
