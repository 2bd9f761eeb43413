"""How detect's probes ask a machine: one command with a timeout, its output as text, a missing program a fact
(``returncode`` None), never an exception; and what every backend's probe is given (:class:`ProbeContext`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    cache_dir: Path = Path()
    """The playbook's cache (toolkits assembled from PyPI wheels live there)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """What a caller adds for one probe (a recorded device list in a test)."""
