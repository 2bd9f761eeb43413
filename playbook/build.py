"""Build: run ``pip wheel`` on the checked source with the plan's environment, log everything.

A failed build is a recorded result (``ok=False``), not an exception: ``repair`` reads its log.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.cache import (
    CcacheStats,
    build_dir,
    cached_wheel,
    ccache_env,
    fingerprint,
    read_ccache_stats,
    remove_stale_libraries,
    stable_tree,
    store_wheel,
    zero_ccache_stats,
)
from playbook.plan import BuildPlan
from playbook.redact import redact_env, redact_known, secret_values
from playbook.source import SourceInfo, sha256_of

NINJA_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")
ProgressCallback = Callable[[int, int, str], None]


@dataclass
class Progress:
    done: int = 0
    total: int = 0


def last_progress(text: str) -> Progress:
    """ninja's last ``[n/N]`` line in a build log; zeros before CMake's build starts."""
    progress = Progress()
    for line in text.splitlines():
        if match := NINJA_PROGRESS.match(line):
            progress = Progress(int(match.group(1)), int(match.group(2)))
    return progress


@dataclass
class WheelInfo:
    name: str
    path: str
    size_bytes: int
    sha256: str


@dataclass
class BuildResult:
    attempt: int
    ok: bool
    exit_code: int | None
    duration_s: float
    log_file: str
    command: list[str]
    env: dict[str, str]
    source: SourceInfo
    wheel: WheelInfo | None = None
    timed_out: bool = False
    progress: Progress = field(default_factory=Progress)
    extra_packages_installed: list[str] = field(default_factory=list)
    fingerprint: str = ""
    reused_wheel: str = ""  # the wheel cache entry this result reused instead of building
    build_dir: str = ""
    ccache: CcacheStats | None = None


def pip_wheel_command(plan: BuildPlan, tree: Path, wheel_dir: Path, python: str) -> list[str]:
    args = [python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--verbose", "--wheel-dir", str(wheel_dir)]
    if not plan.build_isolation:
        args.append("--no-build-isolation")
    if plan.find_links:
        args += ["--no-index", "--find-links", plan.find_links]
    args.append(str(tree))
    return args


def install_extra_packages(plan: BuildPlan, python: str, log: Callable[[str], None]) -> list[str]:
    """Packages a remedy asked for, installed into the build's own environment."""
    if not plan.extra_packages:
        return []
    args = [python, "-m", "pip", "install", *plan.extra_packages]
    if plan.find_links:
        args[4:4] = ["--no-index", "--find-links", plan.find_links]
    log(f"playbook: installing {', '.join(plan.extra_packages)} for this attempt")
    proc = subprocess.run(args, capture_output=True, text=True)
    log(proc.stdout + proc.stderr)
    return plan.extra_packages if proc.returncode == 0 else []


def run_build(
    plan: BuildPlan,
    source: SourceInfo,
    run_dir: Path,
    cache_dir: Path,
    toolchain: dict[str, Any] | None = None,
    python: str = sys.executable,
    timeout_s: float = 3600,
    on_progress: ProgressCallback | None = None,
    environ: dict[str, str] | None = None,
) -> BuildResult:
    """Build the wheel into ``run_dir/wheelhouse`` (or reuse the one a build with the same
    fingerprint left in the wheel cache); the full log goes to ``build-attempt-N.log``."""
    base_env = dict(os.environ if environ is None else environ)
    secrets = secret_values(base_env)
    # One folder per attempt: every attempt builds a wheel of the same file name.
    wheel_dir = run_dir / "wheelhouse" / f"attempt-{plan.attempt}"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / f"build-attempt-{plan.attempt}.log"
    started = time.monotonic()
    key = fingerprint(source, plan.cmake_args, plan.env, toolchain or {})
    tree = stable_tree(source, cache_dir)
    build_env = {**plan.build_env(), "SKBUILD_BUILD_DIR": str(build_dir(cache_dir, key))}
    if plan.ccache:
        build_env.update(ccache_env(cache_dir))
    command = pip_wheel_command(plan, tree, wheel_dir, python)
    result = BuildResult(
        attempt=plan.attempt,
        ok=False,
        exit_code=None,
        duration_s=0.0,
        log_file=log_path.name,
        command=[redact_known(arg, secrets) for arg in command],
        env=redact_env(build_env),
        source=source,
        fingerprint=key,
        build_dir=build_env["SKBUILD_BUILD_DIR"],
    )

    with log_path.open("w", encoding="utf-8") as log:

        def write(text: str) -> None:
            log.write(redact_known(text, secrets).rstrip("\n") + "\n")
            log.flush()

        write(f"playbook: attempt {plan.attempt}, fingerprint {key}")
        for name, value in sorted(redact_env(build_env).items()):
            write(f"playbook: env {name}={value}")
        reusable = cached_wheel(cache_dir, key) if plan.wheel_cache else None
        if reusable is not None:
            write(f"playbook: wheel cache hit: {reusable} was built from the same source, CMake arguments, "
                  "toolchain and Python; reusing it (set build.wheel_cache=false to rebuild)")
            shutil.copy2(reusable, wheel_dir / reusable.name)
            result.ok, result.exit_code, result.reused_wheel = True, 0, str(reusable)
            result.wheel = _wheel_info(wheel_dir / reusable.name)
            result.duration_s = round(time.monotonic() - started, 2)
            return result

        for stale in remove_stale_libraries(tree):
            write(f"playbook: removed {stale}, left in the source tree by an earlier build")
        write(f"playbook: {' '.join(command)}")
        result.extra_packages_installed = install_extra_packages(plan, python, write)
        env = {**base_env, **build_env}
        if plan.ccache:
            zero_ccache_stats(plan.ccache, env)
        before = {p.name for p in wheel_dir.glob("*.whl")}
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1, cwd=run_dir)
        assert proc.stdout is not None
        deadline = started + timeout_s
        for line in proc.stdout:
            write(line)
            if match := NINJA_PROGRESS.match(line):
                result.progress.done, result.progress.total = int(match.group(1)), int(match.group(2))
                if on_progress:
                    on_progress(result.progress.done, result.progress.total, line.strip())
            if time.monotonic() > deadline:
                result.timed_out = True
                proc.kill()
                break
        result.exit_code = proc.wait()
        if result.timed_out:
            write(f"playbook: build stopped after {timeout_s:.0f} s (build.timeout_s)")
        if plan.ccache:
            result.ccache = read_ccache_stats(plan.ccache, env)
            write(f"playbook: ccache: {result.ccache.hits} hits, {result.ccache.misses} misses")
        write(f"playbook: pip exited with {result.exit_code} after {time.monotonic() - started:.1f} s")

    new_wheels = sorted({p.name for p in wheel_dir.glob("*.whl")} - before)
    if result.exit_code == 0 and new_wheels:
        result.wheel = _wheel_info(wheel_dir / new_wheels[-1])
        result.ok = True
        store_wheel(cache_dir, key, wheel_dir / new_wheels[-1])
    result.duration_s = round(time.monotonic() - started, 2)
    return result


def _wheel_info(path: Path) -> WheelInfo:
    return WheelInfo(path.name, str(path), path.stat().st_size, sha256_of(path))
