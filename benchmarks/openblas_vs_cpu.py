#!/usr/bin/env python3
"""Prompt processing of the OpenBLAS wheel against the plain CPU wheel, side by side in one run.

Takes two verified run folders (params/openblas.yaml and params/cpu-portable.yaml, built from the same sdist
with the same CPU flags), reuses each one's installed wheel, and measures both with verify's own child
(``bench``: pp and tg through the low-level API) on the same synthetic models and settings, alternating the two
wheels round by round so that the machine's load falls on both alike. Prints a table and the ratio
OpenBLAS / CPU of the medians per model, and writes every round and the table to ``--output`` (archived under
benchmarks/results/).

    python benchmarks/openblas_vs_cpu.py RUN_OPENBLAS RUN_CPU [--shapes tiny,1b] [--rounds 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playbook.params import ModelParams
from playbook.runfolder.folder import RunFolder
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan
from playbook.verify.settings import BenchSettings
from playbook.verify.step import VerifyResult
from playbook.verify.sweep import default_threads
from playbook.verify.units.model_file import prepare_model
from playbook.verify.units.offload_sweep import run_bench_child

PROMPT_TOKENS = 512  # the prompt length
GEN_TOKENS = 16  # generation is measured too, but only for context: BLAS serves large matrix products


def wheel_of(run_dir: Path) -> tuple[str, Path, Path, BuildPlan]:
    """(label, installed wheel folder, source tree, plan) of a run folder's last verified attempt."""
    run = RunFolder(run_dir)
    attempt = run.layout.latest_attempt("verify")
    if not attempt:
        raise SystemExit(f"{run_dir} has no verify result: run the playbook there first")
    verify = run.read(VerifyResult, run.layout.verify_result(attempt))
    build = run.read(BuildResult, run.layout.build_result(attempt))
    plan = run.read(BuildPlan, run.layout.plan(attempt))
    if not verify.ok:
        raise SystemExit(f"{run_dir}: verify of attempt {attempt} did not pass ({verify.summary})")
    return plan.backend.value, Path(verify.site_dir), Path(build.source.path), plan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("openblas_run", type=Path)
    parser.add_argument("cpu_run", type=Path)
    parser.add_argument("--shapes", default="tiny,1b", help="synthetic model shapes, comma-separated")
    parser.add_argument("--quant", default="Q8_0")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each measures both wheels once")
    parser.add_argument("--repetitions", type=int, default=2, help="repetitions per measurement (median kept)")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--cache", type=Path, default=None, help="the playbook's cache (default: its usual place)")
    parser.add_argument("--output", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()

    wheels = [wheel_of(args.openblas_run), wheel_of(args.cpu_run)]
    labels = [w[0] for w in wheels]
    if labels != ["openblas", "cpu"]:
        raise SystemExit(f"expected an openblas run and a cpu run, got {labels}")
    cache = args.cache or RunFolder(args.cpu_run).params().cache_dir
    settings = BenchSettings(threads=args.threads)
    lines = [f"# OpenBLAS wheel against the plain CPU wheel, pp{PROMPT_TOKENS} (and tg{GEN_TOKENS}), one run",
             (f"# machine: {platform.machine()}, {args.threads} threads; {args.rounds} rounds alternating the wheels, "
              f"{args.repetitions} repetitions each (median); settings {settings.csv_fields()}")]
    for label, _site, _tree, plan in wheels:  # the build's own arguments (not the compiler cache's launchers)
        own = [a for a in plan.cmake_args if "COMPILER_LAUNCHER" not in a and not a.startswith("-DGGML_CCACHE")]
        lines.append(f"# {label}: {' '.join(own)}")
    print("\n".join(lines), flush=True)
    rows = []
    for shape in [s for s in args.shapes.split(",") if s]:
        model = prepare_model(ModelParams(shape=shape, quant=args.quant), wheels[0][2], cache)  # type: ignore[arg-type]
        rates: dict[str, dict[str, list[float]]] = {label: {"pp": [], "tg": []} for label in labels}
        with tempfile.TemporaryDirectory(prefix="openblas-vs-cpu-") as tmp:
            for round_ in range(args.rounds):
                for label, site, _tree, _plan in (wheels if round_ % 2 == 0 else wheels[::-1]):
                    log = Path(tmp) / f"{label}-{shape}-{round_}.log"
                    started = time.monotonic()
                    outcome = run_bench_child(model, 0, settings, PROMPT_TOKENS, GEN_TOKENS, args.repetitions, site,
                                              log, timeout=1800)
                    if outcome.status != "ok":
                        print(log.read_text()[-3000:], file=sys.stderr)
                        raise SystemExit(f"{label} on {shape}: {outcome.status}")
                    for test in ("pp", "tg"):
                        rates[label][test].append(outcome.result[test]["tokens_per_s_median"])
                    lines.append(f"  {shape} round {round_ + 1} {label:>8}: pp{PROMPT_TOKENS} "
                                 f"{rates[label]['pp'][-1]:8.1f} t/s, tg{GEN_TOKENS} {rates[label]['tg'][-1]:7.1f} t/s "
                                 f"({time.monotonic() - started:.0f} s)")
                    print(lines[-1], flush=True)
        median = {label: {test: statistics.median(v) for test, v in by.items()} for label, by in rates.items()}
        rows.append((shape, median["openblas"]["pp"], median["cpu"]["pp"], median["openblas"]["pp"] / median["cpu"]["pp"],
                     median["openblas"]["tg"], median["cpu"]["tg"], median["openblas"]["tg"] / median["cpu"]["tg"]))
    table = [(f"{'model':<22} {'pp openblas':>12} {'pp cpu':>10} {'pp ratio':>9} {'tg openblas':>12} {'tg cpu':>10} "
              f"{'tg ratio':>9}")]
    for shape, pp_blas, pp_cpu, pp_ratio, tg_blas, tg_cpu, tg_ratio in rows:
        table.append(f"{shape + '-' + args.quant:<22} {pp_blas:12.1f} {pp_cpu:10.1f} {pp_ratio:9.3f} {tg_blas:12.1f} "
                     f"{tg_cpu:10.1f} {tg_ratio:9.3f}")
    print("\n".join(table))
    if args.output:
        args.output.write_text("\n".join(lines + table) + "\n")
        print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
