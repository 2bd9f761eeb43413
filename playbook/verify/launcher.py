"""Child processes: everything that touches ``llama_cpp`` runs in one, with a watchdog.

The wheel is installed alone into a folder; each child (``child.py``, ``symbols_child.py``) runs
from an empty working folder with that folder first on its path and the plan's runtime variables.
A crash or a hang becomes a status and, through the knowledge base, findings; never an exception.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.backends import registry
from playbook.child_scripts.dll_directories import DLL_DIRECTORIES_VARIABLE  # read by the children before llama_cpp
from playbook.knowledge.failures import Finding, diagnose_text
from playbook.process import dies_with_this_thread, run_captured

CHILD_SCRIPTS = Path(__file__).resolve().parent.parent / "child_scripts"  # run as scripts, never imported
CHILD_SCRIPT = CHILD_SCRIPTS / "probe.py"
SYMBOLS_SCRIPT = CHILD_SCRIPTS / "symbols.py"
RESULT_PREFIX = "PLAYBOOK_RESULT "
OFFLOAD_LINE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# llama.cpp's own account of device memory: model weights, KV cache, compute and output buffers, under each
# backend's buffer name.
GPU_BUFFER_LINE = re.compile(rf"\b(?:{'|'.join(registry.device_log_names())})\d* (?:model|KV|compute|output) "
                             r"buffer size =\s+([\d.]+) MiB")


@dataclass
class ChildOutcome:
    """What one child process did: ``status`` is ok, error, crash or hang."""

    status: str
    returncode: int | None
    duration_s: float
    log_file: str
    result: dict[str, Any] | None = None
    signal_name: str = ""
    error_tail: str = ""
    findings: list[Finding] = field(default_factory=list)
    offloaded_layers: int | None = None
    offloadable_layers: int | None = None
    gpu_memory_mib: float | None = None


def install_wheel(wheel: Path, site_dir: Path, python: str = sys.executable, extras: list[str] | None = None,
                  find_links: str = "") -> subprocess.CompletedProcess[str]:
    """Install the wheel alone into ``site_dir`` (its dependencies come from the playbook's environment).
    With ``extras`` it is installed as ``wheel[extras]`` with its dependencies, from the package index
    (or only from ``find_links`` when given): the extras' packages are not in the playbook's environment."""
    if site_dir.exists():
        shutil.rmtree(site_dir)
    args = [python, "-m", "pip", "install", "--no-compile", "--target", str(site_dir)]
    if not extras:
        args += ["--no-deps", "--no-index", str(wheel)]
    else:
        if find_links:
            args += ["--no-index", "--find-links", find_links]
        args.append(f"{wheel.resolve()}[{','.join(extras)}]")
    return run_captured(args, timeout_s=1800)


def plan_child_env(runtime_env: dict[str, str] | None = None, dll_directories: list[str] | None = None) -> dict[str, str]:
    """The variables the plan says the built package needs when imported (``runtime_env``, e.g.
    LLAMA_CPP_LIB_PATH), and its DLL folders for child.py's ``os.add_dll_directory``."""
    env = dict(runtime_env or {})
    if dll_directories:
        env[DLL_DIRECTORIES_VARIABLE] = os.pathsep.join(dll_directories)
    return env


def child_env(site_dir: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The wheel's folder first; an inherited PYTHONPATH after it, since the wheel's own
    dependencies (numpy, diskcache, jinja2) may live there on an offline machine. ``extra_env``
    (from :func:`plan_child_env`) goes on top."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site_dir), os.environ.get("PYTHONPATH", "")]))
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault prints the Python stack to the archived log
    return env


def run_child(
    args: list[str],
    site_dir: Path,
    log_file: Path,
    timeout_s: float,
    python: str = sys.executable,
    script: Path = CHILD_SCRIPT,
    expected: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> ChildOutcome:
    """Run ``script args`` from an empty folder; a crash or a hang becomes a finding.
    ``expected`` names findings that are no fault here (``offloaded 0/N`` when asked for 0 layers)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="playbook-child-") as clean_dir, log_file.open("w") as log:
        log.write(f"playbook: {python} {script.name} {' '.join(args)}\n")
        log.flush()
        proc = subprocess.Popen(
            [python, str(script), *args],
            cwd=clean_dir,
            env=child_env(site_dir, extra_env),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            preexec_fn=dies_with_this_thread(),  # noqa: PLW1509 only a prctl through a library loaded before the fork
        )
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
            hung = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            hung = True
        duration = time.monotonic() - started
        log.write(stdout)
        log.write("\n")  # a crashing child leaves its last stderr line unterminated
        if hung:
            log.write(f"playbook: watchdog: no result within {timeout_s:.0f} s; the child was killed\n")
        elif proc.returncode < 0:
            log.write(f"playbook: child died by signal {signal.Signals(-proc.returncode).name}\n")
    text = log_file.read_text(errors="replace")
    result = _result_line(stdout)
    offload = OFFLOAD_LINE.findall(text)
    if hung:
        status = "hang"
    elif proc.returncode < 0:
        status = "crash"
    elif proc.returncode != 0 or result is None:
        status = "error"
    else:
        status = "ok"
    found = diagnose_text(text, stage="any") if status != "ok" else []
    findings = [f for f in found if f.id not in expected]
    return ChildOutcome(
        status=status,
        returncode=proc.returncode,
        duration_s=round(duration, 2),
        log_file=log_file.name,
        result=result,
        signal_name=signal.Signals(-proc.returncode).name if proc.returncode and proc.returncode < 0 else "",
        error_tail="\n".join(text.strip().splitlines()[-15:]) if status != "ok" else "",
        findings=findings,
        offloaded_layers=int(offload[-1][0]) if offload else None,
        offloadable_layers=int(offload[-1][1]) if offload else None,
        gpu_memory_mib=gpu_memory_mib(text),
    )


def gpu_memory_mib(log_text: str) -> float | None:
    """Device memory llama.cpp reports allocating in a child's log; None when it used no GPU."""
    sizes = [float(size) for size in GPU_BUFFER_LINE.findall(log_text)]
    return round(sum(sizes), 2) if sizes else None


def _result_line(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    return None
