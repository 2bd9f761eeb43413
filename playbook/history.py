"""Earlier executions of a step that runs again: kept under ``history/``, never overwritten.

A person in JupyterLab re-runs a step after changing a choice. Its earlier notebook and facts,
and those of every step after it (they describe the old plan), move to
``history/NNN-<step>[-attempt-N]/``; the run folder then reads as if the step ran for the first
time, and the manifest still lists (and hashes) everything that ever ran.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

HISTORY_DIR = "history"
# The order steps run in: within an attempt, repair follows a failed build or a failed verify.
CHAIN_ORDER = {"detect": 1, "configure": 2, "build": 3, "verify": 4, "repair": 5}
PER_ATTEMPT_STEPS = ("build", "verify", "repair")  # detect and configure run once per run folder
# Which step wrote a file, by the file's stem; the attempt comes from "-attempt-N" in its name.
STEM_STEP = {
    "detect": "detect",
    "plan": "configure",
    "build": "build",
    "llama-bench": "verify",
    "diagnosis": "repair",
    "verify": "verify",
    "throughput": "verify",
}
PER_ATTEMPT_FOLDERS = {"wheelhouse": "build", "verify-logs": "verify"}  # <folder>/attempt-N
NOTEBOOK = re.compile(r"^0\d-(?P<step>[a-z]+)(?:-attempt-(?P<attempt>\d+))?\.ipynb$")
FACTS = re.compile(r"^(?P<stem>[a-z-]+?)(?:-attempt-(?P<attempt>\d+))?\.(?:json|log|csv|png|svg)$")
ATTEMPT_FOLDER = re.compile(r"^attempt-(?P<attempt>\d+)$")


def chain_position(step: str, attempt: int) -> tuple[int, int]:
    """Where a step's execution sits in the chain: detect and configure before every attempt."""
    return (attempt if step in PER_ATTEMPT_STEPS else 0), CHAIN_ORDER[step]


def position_of(relative: Path) -> tuple[int, int] | None:
    """The chain position of a file or attempt folder of a run, or None for the run's own records."""
    parts = relative.parts
    if len(parts) == 2 and parts[0] in PER_ATTEMPT_FOLDERS and (m := ATTEMPT_FOLDER.match(parts[1])):
        return chain_position(PER_ATTEMPT_FOLDERS[parts[0]], int(m["attempt"]))
    if len(parts) != 1:
        return None
    if m := NOTEBOOK.match(parts[0]):
        if m["step"] in CHAIN_ORDER:
            return chain_position(m["step"], int(m["attempt"] or 1))
        return None
    if (m := FACTS.match(parts[0])) and m["stem"] in STEM_STEP:
        attempt = int(m["attempt"] or 1)
        if m["stem"] == "plan" and attempt > 1:  # repair of the attempt before wrote it
            return chain_position("repair", attempt - 1)
        return chain_position(STEM_STEP[m["stem"]], attempt)
    return None


def outputs_from(run_dir: Path, step: str, attempt: int = 1) -> list[Path]:
    """The files (and per-attempt folders) written by ``step`` at ``attempt`` and by every step after it."""
    start = chain_position(step, attempt)
    candidates = [p for p in run_dir.iterdir() if p.is_file()]
    candidates += [sub for folder in PER_ATTEMPT_FOLDERS if (run_dir / folder).is_dir()
                   for sub in (run_dir / folder).iterdir() if sub.is_dir()]
    found = []
    for path in candidates:
        position = position_of(path.relative_to(run_dir))
        if position is not None and position >= start:
            found.append(path)
    return sorted(found)


def archive_rerun(run_dir: Path, step: str, attempt: int = 1) -> Path | None:
    """Move what an earlier execution of ``step`` (and every later step) wrote to a new
    ``history/`` folder; None when the step has not run before at this attempt."""
    run_dir = Path(run_dir)
    earlier = outputs_from(run_dir, step, attempt)
    if not earlier:
        return None
    suffix = f"-attempt-{attempt}" if step in PER_ATTEMPT_STEPS else ""
    target = _new_history_folder(run_dir, step + suffix)
    for path in earlier:
        destination = target / path.relative_to(run_dir)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), destination)
    for folder in PER_ATTEMPT_FOLDERS:
        if (run_dir / folder).is_dir() and not any((run_dir / folder).iterdir()):
            (run_dir / folder).rmdir()
    return target


def keep_file(run_dir: Path, name: str, label: str) -> Path | None:
    """Copy one file of the run (e.g. ``params.json`` before a person changes a choice) to a new
    ``history/NNN-<label>/`` folder; None when there is no such file."""
    run_dir = Path(run_dir)
    if not (run_dir / name).is_file():
        return None
    target = _new_history_folder(run_dir, label)
    target.mkdir(parents=True)
    shutil.copy2(run_dir / name, target / name)
    return target


def _new_history_folder(run_dir: Path, label: str) -> Path:
    history = run_dir / HISTORY_DIR
    number = 1 + max((int(p.name[:3]) for p in history.glob("[0-9][0-9][0-9]-*")), default=0)
    return history / f"{number:03d}-{label}"
