"""Earlier executions of a step that runs again: kept under ``history/``, never overwritten.

A person re-runs a step after changing a choice, or ``playbook resume`` re-runs the step a kill
interrupted. Its earlier notebook and facts, and those of every step after it (they describe the
old plan), move to ``history/NNN-<step>[-attempt-N]/``; the run folder then reads as if the step ran
for the first time, and the manifest still lists (and hashes) everything that ever ran. Which step
wrote a file is :func:`playbook.runfolder.layout.owner_of`'s to say.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from playbook.runfolder.layout import FOLDER_OWNER, HISTORY, Position, Step, owner_of


def outputs_from(run_dir: Path, step: Step, attempt: int = 1) -> list[Path]:
    """The files (and per-attempt folders) written by ``step`` at ``attempt`` and by every step after it."""
    start = Position.of(step, attempt)
    candidates = [p for p in run_dir.iterdir() if p.is_file()]
    candidates += [sub for folder in FOLDER_OWNER if (run_dir / folder).is_dir()
                   for sub in (run_dir / folder).iterdir() if sub.is_dir()]
    found = []
    for path in candidates:
        owner = owner_of(path.relative_to(run_dir))
        if owner is not None and owner.position >= start:
            found.append(path)
    return sorted(found)


def archive_rerun(run_dir: Path, step: Step, attempt: int = 1, keep: Sequence[Path] = ()) -> Path | None:
    """Move what an earlier execution of ``step`` (and every later step) wrote to a new
    ``history/`` folder; None when the step has not run before at this attempt. ``keep``: files of this
    execution already there (the notebook papermill is writing), left in place."""
    run_dir = Path(run_dir)
    step = Step(step)
    earlier = [path for path in outputs_from(run_dir, step, attempt) if path not in keep]
    if not earlier:
        return None
    target = _new_history_folder(run_dir, step.file_stem(attempt))
    for path in earlier:
        destination = target / path.relative_to(run_dir)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), destination)
    for folder in FOLDER_OWNER:
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
    history = run_dir / HISTORY
    number = 1 + max((int(p.name[:3]) for p in history.glob("[0-9][0-9][0-9]-*")), default=0)
    return history / f"{number:03d}-{label}"
