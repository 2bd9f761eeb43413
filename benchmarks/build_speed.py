"""How long a wheel takes: a plain `pip wheel` as the guides do it, against the playbook's builds.

Runs, one after another on this machine, from a cleared state:
  (a) plain pip: `CMAKE_ARGS=... FORCE_CMAKE=1 pip wheel --no-cache-dir --no-deps <sdist>` (build isolation on;
      offline, `--no-index --find-links` the plan's wheel folder, which must hold scikit-build-core)
  (b) the playbook, cold: empty cache folder (no ccache objects, no cached wheel)
  (c) the playbook after a one-flag change: a new fingerprint, ccache warm
  (d) the playbook with nothing changed: the wheel cache
  (e) with --ccache-remote URL or --start-redis: a second machine's cold build against the remote cache
      (build.ccache_remote) that (b) filled: an empty local cache folder, another build folder, no wheel cache

    python benchmarks/build_speed.py [--params params/cpu.yaml] [--set KEY=VALUE ...] [--work DIR]
                                     [--ccache-remote redis://HOST:PORT | --start-redis] [--skip-plain-pip]

Prints a table of wall time and the ratio to (a); GOALS below are the ratios each case should stay within.
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

from playbook.localhost import free_port, wait_until_listening
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.steps.build import ccache_summary, last_progress, run_build, toolchain
from playbook.steps.configure import configure
from playbook.steps.detect import detect
from playbook.steps.source import resolve_source

ONE_FLAG = "-DLLAMA_FATAL_WARNINGS=OFF"  # changes the fingerprint, not the objects
GOALS = {"b": 1.0, "c": 0.25, "d": 0.02, "e": 0.15}  # case -> the largest ratio to (a) it should reach


def plain_pip(sdist: str, cmake_args: str, out: Path, find_links: str = "", isolation: bool = True) -> tuple[float, bool]:
    """pip as the guides run it; on an offline machine the build requirements come from ``find_links``."""
    env = {**os.environ, "CMAKE_ARGS": cmake_args, "FORCE_CMAKE": "1"}
    index = ["--no-index", "--find-links", find_links] if find_links else []
    index += [] if isolation else ["--no-build-isolation"]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", *index, "-w", str(out),
                           sdist], env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    (out / "plain-pip.log").write_text(proc.stdout + proc.stderr)
    return seconds, proc.returncode == 0


def start_redis(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server on a free localhost port, standing in for a fleet's shared cache."""
    server = shutil.which("redis-server")
    if not server:
        raise SystemExit("--start-redis needs redis-server (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(work)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    if not wait_until_listening(port, proc, timeout_s=30):
        proc.kill()
        raise SystemExit(f"redis-server did not listen on port {port}")
    return proc, f"redis://127.0.0.1:{port}"


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
    parser.add_argument("--ccache-remote", default="", metavar="URL",
                        help="build.ccache_remote for (b)-(d), and case (e): a second machine against it")
    parser.add_argument("--start-redis", action="store_true",
                        help="start a redis-server on a free localhost port as the remote cache (case (e))")
    parser.add_argument("--skip-plain-pip", type=float, default=None, metavar="SECONDS",
                        help="do not run (a); use this earlier measurement of it for the ratios (say so when quoting)")
    parser.add_argument("--only-plain-pip", action="store_true",
                        help="run (a) alone: where one command may not hold all cases, the next command on the same "
                             "machine runs (b)-(e) with --skip-plain-pip")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="build-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    cache, second_cache = work / "cache", work / "cache-second-machine"
    for stale in (cache, second_cache):
        if stale.exists():
            shutil.rmtree(stale)
    redis, remote = start_redis(work) if args.start_redis else (None, args.ccache_remote)
    try:
        measure(args, work, cache, second_cache, remote)
    finally:
        if redis is not None:
            redis.terminate()
            redis.wait(timeout=30)


def measure(args: argparse.Namespace, work: Path, cache: Path, second_cache: Path, remote: str) -> None:
    overrides = [*args.overrides, f"build.cache_dir={cache}", "build.ccache=auto"]
    params = load_params(args.params, [*overrides, *([f"build.ccache_remote={remote}"] if remote else [])])
    facts = detect()
    plan = configure(facts, params)
    source = resolve_source(params.source.version, params.source.sha256, cache, params.source.path,
                            params.source.find_links)
    tools = toolchain(facts, plan)
    plain_args = " ".join(a for a in plan.cmake_args if "_COMPILER_LAUNCHER=" not in a and "GGML_CCACHE" not in a)

    if remote and not plan.ccache_remote:
        raise SystemExit(f"the plan does not use the remote cache: {'; '.join(map(str, plan.warnings))}")

    rows = []
    (work / "a").mkdir(parents=True, exist_ok=True)
    plain_label = "(a) plain pip wheel" + (" --no-build-isolation" if args.plain_no_build_isolation else "")
    if args.skip_plain_pip is not None:
        rows.append((plain_label + " (earlier run)", args.skip_plain_pip, True, "not run here"))
    else:
        seconds, ok = plain_pip(source.path, plain_args, work / "a", plan.find_links, not args.plain_no_build_isolation)
        rows.append((plain_label, seconds, ok, ninja_steps((work / "a" / "plain-pip.log").read_text())))
        print(f"{plain_label}: {seconds:.1f} s, {'ok' if ok else 'FAILED'}", file=sys.stderr, flush=True)
    if args.only_plain_pip:
        print(f"{facts.cpu.model}, {facts.cpu.logical_cores} cores; CMAKE_ARGS={plain_args}")
        print(f"{rows[0][0]:56} {rows[0][1]:8.1f}  {'yes' if rows[0][2] else 'NO'}  {rows[0][3]}")
        return
    changed = dataclasses.replace(plan, cmake_args=[*plan.cmake_args, ONE_FLAG])
    cases = [("(b) playbook, cold", plan, "b", cache), ("(c) playbook, one flag changed", changed, "c", cache),
             ("(d) playbook, nothing changed", changed, "d", cache)]
    if plan.ccache_remote:
        cases.append(("(e) second machine, cold, remote cache", plan, "e", second_cache))
    for label, case_plan, folder, case_cache in cases:
        if case_cache == second_cache and source.kind == "sdist":  # its own copy of the sdist, nothing else
            (second_cache / "sdists").mkdir(parents=True, exist_ok=True)
            shutil.copy2(source.path, second_cache / "sdists" / Path(source.path).name)
            source = resolve_source(params.source.version, params.source.sha256, second_cache)
        started = time.monotonic()
        result = run_build(case_plan, source, Layout(work / folder), case_cache, tools, timeout_s=7200)
        seconds = time.monotonic() - started
        detail = "wheel cache" if result.reused_wheel else ", ".join(filter(None, [
            f"{result.progress.total} ninja steps" if result.progress.total else "",
            f"ccache {ccache_summary(result.ccache)}" if result.ccache else ""]))
        rows.append((label, seconds, result.ok, detail))
        print(f"{label}: {seconds:.1f} s, {'ok' if result.ok else 'FAILED'}; {detail}", file=sys.stderr, flush=True)

    base = rows[0][1]
    print(f"{facts.cpu.model}, {facts.cpu.logical_cores} cores; CMAKE_ARGS={plain_args}")
    print(f"{'case':56} {'wall s':>8} {'ratio':>7}  ok   detail")
    for label, seconds, ok, detail in rows:
        print(f"{label:56} {seconds:8.1f} {seconds / base:7.3f}  {'yes' if ok else 'NO ':3}  {detail}")


if __name__ == "__main__":
    main()
