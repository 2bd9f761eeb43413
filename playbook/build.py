"""Build: run ``pip wheel`` on the checked source with the plan's environment, log everything.

A failed build is a recorded result (``ok=False``), not an exception: ``repair`` reads its log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from playbook.plan import BuildPlan
from playbook.redact import redact_env, redact_known, secret_values
from playbook.source import SourceInfo, sha256_of

NINJA_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")
ProgressCallback = Callable[[int, int, str], None]


@dataclass
class Progress:
    done: int = 0
    total: int = 0


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


def pip_wheel_command(plan: BuildPlan, source: SourceInfo, wheel_dir: Path, python: str) -> list[str]:
    args = [python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--verbose", "--wheel-dir", str(wheel_dir)]
    if not plan.build_isolation:
        args.append("--no-build-isolation")
    if plan.find_links:
        args += ["--no-index", "--find-links", plan.find_links]
    args.append(source.path)
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
    python: str = sys.executable,
    timeout_s: float = 3600,
    on_progress: ProgressCallback | None = None,
    environ: dict[str, str] | None = None,
) -> BuildResult:
    """Build the wheel into ``run_dir/wheelhouse``; the full log goes to ``build-attempt-N.log``."""
    base_env = dict(os.environ if environ is None else environ)
    env = {**base_env, **plan.build_env()}
    secrets = secret_values(base_env)
    wheel_dir = run_dir / "wheelhouse"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in wheel_dir.glob("*.whl")}
    log_path = run_dir / f"build-attempt-{plan.attempt}.log"
    command = pip_wheel_command(plan, source, wheel_dir, python)
    progress = Progress()
    started = time.monotonic()
    exit_code: int | None = None
    timed_out = False

    with log_path.open("w", encoding="utf-8") as log:

        def write(text: str) -> None:
            log.write(redact_known(text, secrets).rstrip("\n") + "\n")
            log.flush()

        write(f"playbook: attempt {plan.attempt}: {' '.join(command)}")
        for name, value in sorted(redact_env(plan.build_env()).items()):
            write(f"playbook: env {name}={value}")
        installed = install_extra_packages(plan, python, write)
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            cwd=run_dir,
        )
        assert proc.stdout is not None
        deadline = started + timeout_s
        for line in proc.stdout:
            write(line)
            if match := NINJA_PROGRESS.match(line):
                progress.done, progress.total = int(match.group(1)), int(match.group(2))
                if on_progress:
                    on_progress(progress.done, progress.total, line.strip())
            if time.monotonic() > deadline:
                timed_out = True
                proc.kill()
                break
        exit_code = proc.wait()
        if timed_out:
            write(f"playbook: build stopped after {timeout_s:.0f} s (build.timeout_s)")
        write(f"playbook: pip exited with {exit_code} after {time.monotonic() - started:.1f} s")

    new_wheels = sorted({p.name for p in wheel_dir.glob("*.whl")} - before)
    wheel = None
    if exit_code == 0 and new_wheels:
        path = wheel_dir / new_wheels[-1]
        wheel = WheelInfo(path.name, str(path), path.stat().st_size, sha256_of(path))
    return BuildResult(
        attempt=plan.attempt,
        ok=exit_code == 0 and wheel is not None,
        exit_code=exit_code,
        duration_s=round(time.monotonic() - started, 2),
        log_file=log_path.name,
        command=[redact_known(arg, secrets) for arg in command],
        env=redact_env(plan.build_env()),
        source=source,
        wheel=wheel,
        timed_out=timed_out,
        progress=progress,
        extra_packages_installed=installed,
    )
