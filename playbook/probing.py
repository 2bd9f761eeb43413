"""How detect's probes ask a machine: one command with a timeout, its output as text, a missing program a fact
(``returncode`` None), never an exception; what every backend's probe is given (:class:`ProbeContext`); and the
helpers host and backend probes share (a tool's version banner, the loader's cache)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.facts import Tool


@dataclass
class CommandOutput:
    returncode: int | None  # None: the program could not be started
    stdout: str


CommandRunner = Callable[[list[str], float], CommandOutput]


def run_command(args: list[str], timeout: float = 20.0) -> CommandOutput:
    try:
        proc = subprocess.run(args, check=False, capture_output=True, text=True, timeout=timeout, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as err:
        return CommandOutput(None, str(err))
    return CommandOutput(proc.returncode, proc.stdout + proc.stderr)


@dataclass(frozen=True)
class ProbeContext:
    """What a backend's probe is given: where to look, how to ask, and its own parameter section."""

    environ: Mapping[str, str]
    """The environment detect runs in."""
    search_path: str
    """PATH, with the playbook's own tool folders first."""
    runner: CommandRunner = run_command
    """Runs one command (tests give recorded output)."""
    python: str = ""
    """The interpreter the wheel is built for."""
    settings: Any = None
    """The unit's own parameter section (where to look first: ``vulkan.include_dir``, ``hip.rocm_path``)."""
    cache_dir: Path | None = None
    """The playbook's cache (toolkits assembled from PyPI wheels live there); None: look in no cache."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """What a caller adds for one probe (a recorded device list in a test)."""


def parse_first_version(banner: str) -> str:
    match = re.search(r"(\d+\.\d+(?:\.\d+)*)", banner)
    return match.group(1) if match else ""


def parse_ldconfig(text: str, library: str) -> list[str]:
    """Paths ``ldconfig -p`` lists for ``library`` (e.g. "libcuda.so.1"), in the loader's order."""
    pattern = re.compile(rf"^\s*{re.escape(library)}\s+\(.*\)\s+=>\s+(\S+)", re.MULTILINE)
    return pattern.findall(text)


def detect_tool(name: str, version_args: list[str], search_path: str, runner: CommandRunner) -> Tool:
    path = shutil.which(name, path=search_path)
    if not path:
        return Tool(name, found=False)
    out = runner([path, *version_args], 20)
    banner = out.stdout.strip()
    return Tool(name, out.returncode == 0, path, parse_first_version(banner), banner.splitlines()[0] if banner else "")
