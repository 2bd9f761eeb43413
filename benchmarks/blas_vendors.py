#!/usr/bin/env python3
"""Prompt processing of 512 tokens with three wheels of the same sdist, side by side in one run: ggml-blas on Intel
oneMKL (params/mkl.yaml), ggml-blas on OpenBLAS (params/openblas.yaml) and the plain CPU build
(params/cpu-portable.yaml), all three with -DGGML_NATIVE=OFF.

Each wheel comes from a verified run folder: the newest under outputs/ whose plan is that profile's backend with
GGML_NATIVE=OFF, or, when there is none, a playbook run of the profile made here (its build reuses the wheel cache
and ccache when the same wheel or objects were built before). The three are measured with verify's own child
(``bench``: pp and tg through the low-level API, each wheel's runtime environment given: MKL's LD_LIBRARY_PATH) on
the same synthetic models and settings, round by round in an order that rotates, so that the machine's load falls
on all alike. Prints and writes (``--output``, archived under benchmarks/results/) every round and a table of the
medians, with the commit measured.

    python benchmarks/blas_vendors.py [--shapes tiny:3,1b:2] [--output benchmarks/results/blas-vendors-cpu-vm.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playbook.backends.plan import defined_value
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
GEN_TOKENS = 4  # generation only for context (BLAS serves large matrix products); kept short for the 1B shape
# label -> the profile that builds it and the backend its plan must name
WHEELS = {"mkl": ("mkl", "mkl"), "openblas": ("openblas", "openblas"), "cpu": ("cpu-portable", "cpu")}


@dataclass
class Wheel:
    label: str
    run_dir: Path
    site: Path
    tree: Path
    plan: BuildPlan
    wheel_sha256: str
    checked: str  # what verify's backend-library unit found


def verified(run_dir: Path) -> Wheel | None:
    """The run folder's last verified attempt, or None when it has none that passed."""
    run = RunFolder(run_dir)
    attempt = run.layout.latest_attempt("verify")
    if not attempt:
        return None
    try:
        verify = run.read(VerifyResult, run.layout.verify_result(attempt))
        build = run.read(BuildResult, run.layout.build_result(attempt))
        plan = run.read(BuildPlan, run.layout.plan(attempt))
    except (OSError, TypeError, ValueError, KeyError):
        return None  # written by another version of the playbook
    if not verify.ok or not build.wheel:
        return None
    checked = "; ".join(f"{c.library} {c.file}, loaded, device {c.device!r}, prompt graph in {c.prompt_graph_splits} "
                        f"splits" if not c.problems else f"{c.library}: {', '.join(c.problems)}"
                        for c in verify.backend_libraries) or "no ggml backend library of its own"
    return Wheel(str(plan.backend), run_dir, Path(verify.site_dir), Path(build.source.path), plan, build.wheel.sha256,
                 checked)


def find_or_build(label: str, outputs: Path, build: bool) -> Wheel:
    profile, backend = WHEELS[label]
    for run_dir in sorted(outputs.glob("*-*"), reverse=True):
        found = verified(run_dir) if (run_dir / "run.json").is_file() else None
        if found and found.label == backend and defined_value(found.plan.cmake_args, "GGML_NATIVE") == "OFF":
            return found
    if not build:
        raise SystemExit(f"no verified {backend} run with GGML_NATIVE=OFF under {outputs}; drop --no-build")
    print(f"building {label}: playbook run --params params/{profile}.yaml --set build.native=false", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run(["nice", sys.executable, "-m", "playbook", "run", "--params", str(ROOT / "params" / f"{profile}.yaml"),
                    "--set", "build.native=false"], cwd=ROOT, env=env, check=True, timeout=4 * 3600)
    return find_or_build(label, outputs, build=False)


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True, check=False).stdout.strip()
    return head.strip() + (" (with uncommitted changes)" if dirty else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="tiny:3,1b:2", help="synthetic model shapes and their rounds")
    parser.add_argument("--quant", default="Q8_0")
    parser.add_argument("--repetitions", type=int, default=1, help="repetitions per measurement (median kept)")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs", help="where run folders are")
    parser.add_argument("--no-build", action="store_true", help="only reuse verified run folders")
    parser.add_argument("--output", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()

    wheels = [find_or_build(label, args.outputs, not args.no_build) for label in WHEELS]
    labels = list(WHEELS)
    cache = RunFolder(wheels[0].run_dir).params().cache_dir
    settings = BenchSettings(threads=args.threads)
    lines = [f"# BLAS vendors: oneMKL, OpenBLAS and the plain CPU wheel, pp{PROMPT_TOKENS} (and tg{GEN_TOKENS}), one run",
             f"# commit: {commit()}",
             (f"# machine: {platform.machine()}, {platform.processor() or 'cpu'}, {args.threads} threads; rounds rotate "
              f"the order of the wheels, {args.repetitions} repetition(s) each (median); settings {settings.csv_fields()}")]
    for wheel in wheels:  # the build's own arguments (not the compiler cache's launchers)
        own = [a for a in wheel.plan.cmake_args if "COMPILER_LAUNCHER" not in a and not a.startswith("-DGGML_CCACHE")]
        lines.append(f"# {wheel.label}: {' '.join(own)} (run {wheel.run_dir.name}, wheel sha256 {wheel.wheel_sha256[:12]}; "
                     f"verify: {wheel.checked})")
    print("\n".join(lines), flush=True)
    rows = []
    for spec in [s for s in args.shapes.split(",") if s]:
        shape, _, rounds = spec.partition(":")
        model = prepare_model(ModelParams(shape=shape, quant=args.quant), wheels[0].tree, cache)  # type: ignore[arg-type]
        rates: dict[str, dict[str, list[float]]] = {label: {"pp": [], "tg": []} for label in labels}
        with tempfile.TemporaryDirectory(prefix="blas-vendors-") as tmp:
            for round_ in range(int(rounds or 3)):
                order = wheels[round_ % 3:] + wheels[:round_ % 3]
                for wheel in order:
                    log = Path(tmp) / f"{wheel.label}-{shape}-{round_}.log"
                    started = time.monotonic()
                    outcome = run_bench_child(model, 0, settings, PROMPT_TOKENS, GEN_TOKENS, args.repetitions,
                                              wheel.site, log, timeout=3600, extra_env=dict(wheel.plan.runtime_env))
                    if outcome.status != "ok" or outcome.result is None:
                        print(log.read_text()[-3000:], file=sys.stderr)
                        raise SystemExit(f"{wheel.label} on {shape}: {outcome.status}")
                    for test in ("pp", "tg"):
                        rates[wheel.label][test].append(outcome.result[test]["tokens_per_s_median"])
                    lines.append(f"  {shape} round {round_ + 1} {wheel.label:>8}: pp{PROMPT_TOKENS} "
                                 f"{rates[wheel.label]['pp'][-1]:8.1f} t/s, tg{GEN_TOKENS} "
                                 f"{rates[wheel.label]['tg'][-1]:7.1f} t/s ({time.monotonic() - started:.0f} s)")
                    print(lines[-1], flush=True)
        median = {label: statistics.median(rates[label]["pp"]) for label in labels}
        rows.append((f"{shape}-{args.quant}", median["mkl"], median["openblas"], median["cpu"]))
    table = [(f"{'model':<12} {'pp mkl':>9} {'pp openblas':>12} {'pp cpu':>9} {'mkl/cpu':>8} {'openblas/cpu':>13} "
              f"{'mkl/openblas':>13}")]
    for model_name, mkl, openblas, cpu in rows:
        table.append(f"{model_name:<12} {mkl:9.1f} {openblas:12.1f} {cpu:9.1f} {mkl / cpu:8.3f} {openblas / cpu:13.3f} "
                     f"{mkl / openblas:13.3f}")
    print("\n".join(table))
    if args.output:
        args.output.write_text("\n".join(lines + table) + "\n")
        print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
