"""How long a wheel takes: a plain `pip wheel` as the guides do it, against the playbook's builds.

Runs, one after another on this machine, from a cleared state:
  (a) plain pip: `CMAKE_ARGS=... FORCE_CMAKE=1 pip wheel --no-cache-dir --no-deps <sdist>` (build isolation on;
      offline, `--no-index --find-links` the plan's wheel folder, which must hold scikit-build-core)
  (b) the playbook, cold: empty cache folder (no ccache objects, no cached wheel)
  (c) the playbook after a one-flag change: a new fingerprint, ccache warm
  (d) the playbook with nothing changed: the wheel cache

    python benchmarks/build_speed.py [--params params/cpu.yaml] [--set KEY=VALUE ...] [--work DIR]

Prints a table of wall time and the ratio to (a). Goals: (b) <= 1.0x, (c) <= 0.25x, (d) <= 0.02x.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.steps.build import last_progress, run_build, toolchain
from playbook.steps.configure import configure
from playbook.steps.detect import detect
from playbook.steps.source import resolve_source

ONE_FLAG = "-DLLAMA_FATAL_WARNINGS=OFF"  # changes the fingerprint, not the objects


def plain_pip(sdist: str, cmake_args: str, out: Path, find_links: str = "", isolation: bool = True) -> tuple[float, bool]:
    """pip as the guides run it; on an offline machine the build requirements come from ``find_links``."""
    env = {**os.environ, "CMAKE_ARGS": cmake_args, "FORCE_CMAKE": "1"}
    index = ["--no-index", "--find-links", find_links] if find_links else []
    index += [] if isolation else ["--no-build-isolation"]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", *index, "-w", str(out),
                           sdist], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    (out / "plain-pip.log").write_text(proc.stdout + proc.stderr)
    return seconds, proc.returncode == 0


def ninja_steps(log: str) -> str:
    total = last_progress(log).total
    return f"{total} ninja steps" if total else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=Path, default=Path("params/cpu.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--plain-no-build-isolation", action="store_true",
                        help="(a) builds against the installed scikit-build-core, CMake and ninja, as offline guides "
                             "do where no index serves the isolated build environment its CMake")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="build-speed-"))
    cache = work / "cache"
    if cache.exists():
        shutil.rmtree(cache)
    params = load_params(args.params, [*args.overrides, f"build.cache_dir={cache}", "build.ccache=auto"])
    facts = detect()
    plan = configure(facts, params)
    source = resolve_source(params.source.version, params.source.sha256, cache, params.source.path,
                            params.source.find_links)
    tools = toolchain(facts, plan)
    plain_args = " ".join(a for a in plan.cmake_args if "_COMPILER_LAUNCHER=" not in a and "GGML_CCACHE" not in a)

    rows = []
    (work / "a").mkdir(parents=True, exist_ok=True)
    seconds, ok = plain_pip(source.path, plain_args, work / "a", plan.find_links, not args.plain_no_build_isolation)
    rows.append(("(a) plain pip wheel" + (" --no-build-isolation" if args.plain_no_build_isolation else ""), seconds, ok, ninja_steps((work / "a" / "plain-pip.log").read_text())))
    for label, case_plan, folder in (
        ("(b) playbook, cold", plan, "b"),
        ("(c) playbook, one flag changed", dataclasses.replace(plan, cmake_args=[*plan.cmake_args, ONE_FLAG]), "c"),
        ("(d) playbook, nothing changed", dataclasses.replace(plan, cmake_args=[*plan.cmake_args, ONE_FLAG]), "d"),
    ):
        started = time.monotonic()
        result = run_build(case_plan, source, Layout(work / folder), cache, tools, timeout_s=7200)
        seconds = time.monotonic() - started
        detail = "wheel cache" if result.reused_wheel else ", ".join(filter(None, [
            f"{result.progress.total} ninja steps" if result.progress.total else "",
            f"ccache {result.ccache.hits} hits / {result.ccache.misses} misses" if result.ccache else ""]))
        rows.append((label, seconds, result.ok, detail))

    base = rows[0][1]
    print(f"{facts.cpu.model}, {facts.cpu.logical_cores} cores; CMAKE_ARGS={plain_args}")
    print(f"{'case':56} {'wall s':>8} {'ratio':>7}  ok   detail")
    for label, seconds, ok, detail in rows:
        print(f"{label:56} {seconds:8.1f} {seconds / base:7.3f}  {'yes' if ok else 'NO ':3}  {detail}")


if __name__ == "__main__":
    main()
