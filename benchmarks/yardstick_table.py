"""Verify's measurements of one run folder as Markdown tables: the binding against llama-bench over interleaved
pairs of processes (throughput-attempt-N.csv, verify.llama_bench with verify.yardstick_pairs), or the tune's gains
at depth (tune-attempt-N.json, verify.tune), or the pairs' repetitions one by one (--by-repetition: the binding's
child logs, packed beside a big run as RUN_DIR.verify-logs.tar.xz, and llama-bench's log, which holds every pair).

    python benchmarks/yardstick_table.py RUN_DIR [ATTEMPT]
    python benchmarks/yardstick_table.py --tune RUN_DIR [ATTEMPT]
    python benchmarks/yardstick_table.py --by-repetition RUN_DIR [ATTEMPT]
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
import tarfile
from pathlib import Path


def table(run: Path, attempt: int = 1) -> str:
    rows = list(csv.DictReader((run / f"throughput-attempt-{attempt}.csv").open()))
    lines = [("| layers offloaded | pairs | pp ratio (median) | pp pairs | tg ratio (median) | tg pairs | "
              "tg spread between processes |"), "|---:|---:|---:|---|---:|---|---|"]
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


def _binding_repetitions(run: Path, attempt: int) -> list[dict[tuple[int, str], list[float]]]:
    """Per pair: the binding child's tokens/s of each repetition, by (n_gpu_layers, test)."""
    pairs = []
    with tarfile.open(run.parent / f"{run.name}.verify-logs.tar.xz") as packed:
        names = sorted(n for n in packed.getnames() if re.search(rf"attempt-{attempt}/yardstick-pair-\d+\.log$", n))
        for name in names:
            text = packed.extractfile(name).read().decode(errors="replace")
            result = json.loads(re.search(r"^PLAYBOOK_RESULT (.*)$", text, re.MULTILINE).group(1))
            pairs.append({(point["n_gpu_layers"], test): [measured["n_tokens"] / s for s in measured["samples_s"]]
                          for point in result["points"] for test, measured in point["depths"]["0"].items()})
    return pairs


def _bench_repetitions(run: Path, attempt: int, pairs: int) -> list[dict[tuple[int, str], list[float]]]:
    """Per pair: llama-bench's samples_ts, by (n_gpu_layers, test); its log holds the pairs one after another."""
    text = (run / f"llama-bench-attempt-{attempt}.log").read_text(errors="replace")
    rows = [json.loads(m.group(0)) for m in re.finditer(r'\{[^{}]*"samples_ts"[^{}]*\}', text, re.DOTALL)]
    per_pair = len(rows) // pairs
    return [{(row["n_gpu_layers"], "pp" if row["n_prompt"] else "tg"): row["samples_ts"]
             for row in rows[k * per_pair:(k + 1) * per_pair]} for k in range(pairs)]


def repetition_table(run: Path, attempt: int = 1) -> str:
    """Each repetition compared on its own, medians over the pairs: is the gap in the first repetition after the
    warm-up (each side's first against its second), or in every one?"""
    binding = _binding_repetitions(run, attempt)
    bench = _bench_repetitions(run, attempt, len(binding))
    lines = [("| layers offloaded | test | ratio, 1st repetition | ratio, 2nd repetition | "
              "1st / 2nd, binding | 1st / 2nd, llama-bench |"), "|---:|---|---:|---:|---:|---:|"]
    for key in sorted(binding[0], key=lambda k: (k[1], k[0])):
        def median(values: list[float]) -> str:
            return f"{statistics.median(values):.3f}"
        ours, theirs = [pair[key] for pair in binding], [pair[key] for pair in bench]
        lines.append(f"| {key[0]} | {key[1]} | {median([o[0] / t[0] for o, t in zip(ours, theirs)])} | "
                     f"{median([o[1] / t[1] for o, t in zip(ours, theirs)])} | {median([o[0] / o[1] for o in ours])} | "
                     f"{median([t[0] / t[1] for t in theirs])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    views = {"--tune": tune_table, "--by-repetition": repetition_table}
    make = views.get(args[0], table)
    args = args[1:] if args[0] in views else args
    print(make(Path(args[0]), int(args[1]) if len(args) > 1 else 1))
