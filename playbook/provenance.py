"""The run folder: the build's provenance archive, and its manifest.

``outputs/<run-id>/`` holds the executed notebooks, the facts each step wrote, the build
logs, the wheel, the plot, and ``manifest.json`` with the sha256 of every file. Nothing in
it is overwritten: a retried step writes a new attempt beside the old one.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from playbook.facts import read_facts, write_facts
from playbook.params import Params, params_from_dict
from playbook.redact import redact_text
from playbook.source import sha256_of

MANIFEST = "manifest.json"
PARAMS_FILE = "params.json"
RUN_FILE = "run.json"


@dataclass
class StepRecord:
    step: str
    notebook: str
    outcome: str  # "ok", "failed", "error" (the notebook itself raised)
    started: str
    duration_s: float
    attempt: int = 1
    message: str = ""


@dataclass
class RunRecord:
    run_id: str
    started: str
    params_source: str
    steps: list[StepRecord] = field(default_factory=list)
    outcome: str = "running"
    finished: str = ""
    message: str = ""


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(now: dt.datetime | None = None, host: str | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    host = re.sub(r"[^A-Za-z0-9.-]+", "-", host or socket.gethostname()).strip("-") or "host"
    return f"{now:%Y%m%dT%H%M%SZ}-{host}"


class RunFolder:
    """One run's folder; the only code that decides file names inside it."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, output_root: Path, params: Params, params_source: str) -> RunFolder:
        run_id = new_run_id()
        path = output_root / run_id
        suffix = 1
        while path.exists():
            suffix += 1
            path = output_root / f"{run_id}-{suffix}"
        path.mkdir(parents=True)
        folder = cls(path)
        folder.save_params(params)
        # The command line may carry a secret (--set build.env.X=...); params.json keeps the value
        # for the steps until the run ends (runner._finish redacts the folder).
        folder.save_record(RunRecord(run_id=path.name, started=utc_now(), params_source=redact_text(params_source)))
        return folder

    @property
    def run_id(self) -> str:
        return self.path.name

    def params(self) -> Params:
        return params_from_dict(json.loads((self.path / PARAMS_FILE).read_text()))

    def save_params(self, params: Params) -> None:
        (self.path / PARAMS_FILE).write_text(json.dumps(params.to_dict(), indent=2) + "\n")

    def record(self) -> RunRecord:
        return read_facts(RunRecord, self.path / RUN_FILE)

    def save_record(self, record: RunRecord) -> None:
        write_facts(record, self.path / RUN_FILE)

    def file(self, name: str) -> Path:
        return self.path / name

    def attempt_file(self, stem: str, attempt: int, suffix: str = ".json") -> Path:
        return self.path / f"{stem}-attempt-{attempt}{suffix}"

    def notebook(self, number: int, step: str, attempt: int | None = None) -> Path:
        name = f"{number:02d}-{step}" + (f"-attempt-{attempt}" if attempt else "") + ".ipynb"
        return self.path / name

    def latest_attempt(self, stem: str) -> int:
        attempts = [int(m.group(1)) for p in self.path.glob(f"{stem}-attempt-*.json")
                    if (m := re.search(r"-attempt-(\d+)\.json$", p.name))]
        return max(attempts, default=0)

    def write_manifest(self) -> Path:
        record = self.record()
        files = {
            str(p.relative_to(self.path)): {"sha256": sha256_of(p), "size_bytes": p.stat().st_size}
            for p in sorted(self.path.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        }
        manifest: dict[str, Any] = {
            "run_id": self.run_id,
            "started": record.started,
            "finished": record.finished,
            "outcome": record.outcome,
            "message": record.message,
            "params_source": record.params_source,
            "parameters": json.loads((self.path / PARAMS_FILE).read_text()),
            "steps": [asdict(step) for step in record.steps],
            "files": files,
        }
        path = self.path / MANIFEST
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        return path
