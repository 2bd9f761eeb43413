"""The run folder: the build's provenance archive, its records and its manifest.

``outputs/<run-id>/`` holds the executed notebooks, the facts each step wrote, the build logs, the
wheel, the plot, ``run.json`` (the steps and how each ended), ``params.json`` and ``manifest.json``
(sha256 of every file). Names come from :mod:`playbook.runfolder.layout`; JSON goes through
:mod:`playbook.serialization`. Nothing is overwritten: a retried step writes a new attempt beside the
old one, and a step run again moves its earlier files to ``history/``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import tempfile
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from playbook.errors import RunFolderError
from playbook.files import sha256_of
from playbook.params import Params, params_from_dict
from playbook.runfolder.layout import MANIFEST, RUN, Layout, Step
from playbook.runfolder.redact import redact_text
from playbook.serialization import read_json, write_json

T = TypeVar("T")


class Outcome(str, Enum):
    """How a step execution or a whole run ended, as the step's own facts say."""

    RUNNING = "running"
    OK = "ok"
    REUSED = "reused"  # build: the wheel came from the wheel cache, or a checked one from a wheel index
    FAILED = "failed"  # the step ran and found a failure (its findings name it)
    CRASHED = "crashed"  # a child process died by a signal
    TIMED_OUT = "timed out"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"  # the run was killed while the step ran
    ERROR = "error"  # the step's notebook itself raised

    def __str__(self) -> str:
        return self.value


@dataclass
class StepRecord:
    step: Step
    notebook: str
    outcome: Outcome
    started: str
    duration_s: float
    attempt: int = 1
    message: str = ""
    findings: list[str] = field(default_factory=list)  # knowledge-base ids the step named
    earlier_kept: str = ""  # history/NNN-<step>: where this step's earlier execution's files went


@dataclass
class RunRecord:
    run_id: str
    started: str
    params_source: str
    steps: list[StepRecord] = field(default_factory=list)
    outcome: Outcome = Outcome.RUNNING
    finished: str = ""
    message: str = ""
    resumed: list[str] = field(default_factory=list)  # when `playbook resume` continued the run


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def new_run_id(now: dt.datetime | None = None, host: str | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    host = re.sub(r"[^A-Za-z0-9.-]+", "-", host or socket.gethostname()).strip("-") or "host"
    return f"{now:%Y%m%dT%H%M%SZ}-{host}"


def check_writable(folder: Path) -> None:
    """Refuse, before anything is built, an output folder the run could not write its archive into."""
    folder = Path(folder)
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        raise RunFolderError(f"output folder {folder}: {existing or folder} is not a folder; pass --output with a "
                             "folder you can write to")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise RunFolderError(f"output folder {folder} is not writable ({error.strerror or error}); pass --output with "
                             "a folder you can write to, or set LLAMA_PLAYBOOK_OUTPUTS") from None


def run_folders(output_root: Path) -> list[Path]:
    """The run folders directly under ``output_root``, oldest first (their names begin with the UTC time)."""
    root = Path(output_root)
    return sorted(p.parent for p in root.glob(f"*/{RUN}")) if root.is_dir() else []


class RunFolder:
    """One run's folder: where its files are (:attr:`layout`), and its records."""

    def __init__(self, path: Path | str):
        # Absolute: the step notebooks run with the run folder as their working directory.
        self.path = Path(path).expanduser().absolute()
        self.layout = Layout(self.path)

    @classmethod
    def create(cls, output_root: Path, params: Params, params_source: str) -> RunFolder:
        """A new run folder ``<output_root>/<UTC time>-<host>``."""
        check_writable(output_root)
        run_id = new_run_id()
        path = Path(output_root) / run_id
        suffix = 1
        while path.exists():
            suffix += 1
            path = Path(output_root) / f"{run_id}-{suffix}"
        return cls.create_at(path, params, params_source)

    @classmethod
    def create_at(cls, path: Path, params: Params, params_source: str) -> RunFolder:
        """A new run folder at ``path`` (a papermill user's ``-p run_dir``)."""
        check_writable(path.parent)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise RunFolderError(f"cannot create run folder {path}: {error.strerror or error}") from None
        folder = cls(path)
        folder.save_params(params)
        # The command line may carry a secret (--set build.env.X=...); params.json keeps the value
        # for the steps until the run ends (the chain then redacts the folder).
        folder.save_record(RunRecord(run_id=path.name, started=utc_now(), params_source=redact_text(params_source)))
        return folder

    @property
    def run_id(self) -> str:
        return self.path.name

    def exists(self) -> bool:
        return self.layout.run_record.is_file()

    def params(self) -> Params:
        if not self.layout.params.is_file():
            raise RunFolderError(f"{self.path} has no {self.layout.params.name}: not a run folder; give run_dir of a "
                                 "run that detect started, or leave it empty to start one")
        return params_from_dict(json.loads(self.layout.params.read_text(encoding="utf-8")))

    def save_params(self, params: Params) -> None:
        """params.json holds the parameters as a parameter file does: each backend's section at the top level."""
        write_json(params.to_dict(), self.layout.params)

    def record(self) -> RunRecord:
        return read_json(RunRecord, self.layout.run_record)

    def save_record(self, record: RunRecord) -> None:
        write_json(record, self.layout.run_record)

    # ---- run.json's step records: the step opens its record, the step function ends it with
    # what it found, and the chain adds the notebook's name (or records the notebook's error).
    def begin_step(self, step: Step, attempt: int, earlier_kept: str = "", notebook: str = "") -> None:
        """``notebook``: the executed notebook's name where it is known already (papermill writes it first)."""
        record = self.record()
        record.steps.append(StepRecord(step, notebook, Outcome.RUNNING, utc_now(), 0.0, attempt,
                                       earlier_kept=earlier_kept))
        self.save_record(record)

    def finish_step(self, step: Step, attempt: int, outcome: Outcome, message: str = "",
                    findings: list[str] | None = None) -> StepRecord:
        """The step function's account of how it ended (``ok``, ``reused``, ``failed`` with finding ids...)."""
        record = self.record()
        entry = _open_entry(record, step, attempt)
        if entry is None:
            entry = StepRecord(step, "", Outcome.RUNNING, utc_now(), 0.0, attempt)
            record.steps.append(entry)
        entry.outcome, entry.message, entry.findings = outcome, message, list(findings or [])
        entry.duration_s = _seconds_since(entry.started)
        self.save_record(record)
        return entry

    def end_step(self, step: Step, attempt: int, notebook: str, error: str, duration_s: float,
                 earlier_kept: str = "") -> StepRecord:
        """After the notebook ran: its name, its duration, and ``error`` when it raised."""
        record = self.record()
        entry = next((s for s in reversed(record.steps) if s.step == step and s.attempt == attempt
                      and s.notebook in ("", notebook)), None)
        if entry is None:
            entry = StepRecord(step, "", Outcome.RUNNING, utc_now(), 0.0, attempt)
            record.steps.append(entry)
        entry.notebook, entry.duration_s = notebook, duration_s
        entry.earlier_kept = earlier_kept or entry.earlier_kept
        if error:
            entry.outcome = Outcome.ERROR
            entry.message = "; ".join(filter(None, [error, entry.message]))
        elif entry.outcome is Outcome.RUNNING:
            entry.outcome, entry.message = Outcome.ERROR, "the notebook ended without recording an outcome"
        self.save_record(record)
        return entry

    def read(self, cls: type[T], path: Path) -> T:
        """A step's facts file as its dataclass; a missing file says which step writes it."""
        if not path.is_file():
            raise RunFolderError(f"{path.name} is not in {self.path}")
        return read_json(cls, path)

    def write(self, obj: Any, path: Path) -> Path:
        return write_json(obj, path)

    def write_manifest(self) -> Path:
        record = self.record()
        files = {
            p.relative_to(self.path).as_posix(): {"sha256": sha256_of(p), "size_bytes": p.stat().st_size}
            for p in sorted(self.path.rglob("*"))
            if p.is_file() and p.name not in (MANIFEST, self.layout.lock.name)
        }
        manifest: dict[str, Any] = {
            "run_id": self.run_id,
            "started": record.started,
            "finished": record.finished,
            "outcome": record.outcome.value,
            "message": record.message,
            "params_source": record.params_source,
            "parameters": json.loads(self.layout.params.read_text(encoding="utf-8")),
            "steps": [json.loads(json.dumps(asdict(step), default=_enum_value)) for step in record.steps],
            "files": files,
        }
        previous = self.layout.manifest
        excluded = json.loads(previous.read_text()).get("excluded") if previous.is_file() else None
        if excluded:
            manifest["excluded"] = excluded
        tmp = previous.with_name(previous.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        tmp.replace(previous)
        return previous


def _open_entry(record: RunRecord, step: Step, attempt: int) -> StepRecord | None:
    return next((s for s in reversed(record.steps)
                 if s.step == step and s.attempt == attempt and s.outcome is Outcome.RUNNING), None)


def _seconds_since(started: str) -> float:
    try:
        return round((dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(started)).total_seconds(), 2)
    except ValueError:
        return 0.0


def _enum_value(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else str(value)
