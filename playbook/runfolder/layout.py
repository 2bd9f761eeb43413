"""The run folder's layout: every file name in it, which step owns it, and the way back from a name.

This module is the only place that spells a file name of a run folder. Steps ask :class:`Layout`
for the path they write; :func:`owner_of` reads a name back (for ``history/`` and the chain).

    params.json  run.json  manifest.json  provenance.json            the run's own records
    01-detect.ipynb  detect.json                                     detect
    02-configure.ipynb  plan-attempt-1.json                          configure
    03-build-attempt-N.ipynb  build-attempt-N.json/.log              build
    wheel-choice-attempt-N.json                                      wheel_index.sources: every published wheel's verdict
    wheelhouse/attempt-N/*.whl
    04-repair-attempt-N.ipynb  diagnosis-attempt-N.json              repair (also plan-attempt-N+1.json)
    05-verify-attempt-N.ipynb  verify-attempt-N.json                 verify
    verify-logs/attempt-N/  throughput-attempt-N.csv/.png/.svg
    llama-bench-attempt-N.log  tune-attempt-N.json/.md  rpc-attempt-N.png/.svg  rpc-server-build-attempt-N.log
    tune-build-attempt-N.log  tune-wheelhouse/attempt-N/*.whl        verify.tune_build_flags: the rebuilt wheel
    verify-logs/attempt-N/: install.log, then each verify unit's files under its namespace
                            (Layout.unit_files): probe.log symbols.log cuobjdump.log logits-cpu.log
                            bench-ngl-L.log server.log tune-ngl-L-NNN.log yardstick-pair-NN.log
                            rpc-server.log rpc-logits-cpu.log rpc-bench-ngl-L.log ...
    history/NNN-<step>[-attempt-N]/                                  earlier executions, moved aside
    report/                                                          derived HTML (playbook report)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath


class Step(str, Enum):
    """The five steps, in the order of their notebooks' numbers."""

    DETECT = "detect"
    CONFIGURE = "configure"
    BUILD = "build"
    REPAIR = "repair"
    VERIFY = "verify"

    @property
    def number(self) -> int:
        return list(Step).index(self) + 1

    @property
    def per_attempt(self) -> bool:
        """detect and configure run once per run folder; the others once per build attempt."""
        return self in (Step.BUILD, Step.REPAIR, Step.VERIFY)

    def __str__(self) -> str:
        return self.value

    def label(self, attempt: int) -> str:
        return f"{self.value} (attempt {attempt})" if self.per_attempt else self.value

    def file_stem(self, attempt: int) -> str:
        """``build-attempt-2``, ``detect``: the step's notebook name without its number, and its history folder's."""
        return f"{self.value}-attempt-{attempt}" if self.per_attempt else self.value


# Within an attempt, repair follows a failed build or a failed verify.
CHAIN_ORDER = {Step.DETECT: 1, Step.CONFIGURE: 2, Step.BUILD: 3, Step.VERIFY: 4, Step.REPAIR: 5}

PARAMS = "params.json"
RUN = "run.json"
MANIFEST = "manifest.json"
ATTESTATION = "provenance.json"
HISTORY = "history"
REPORT = "report"
REPORT_INDEX = "index.html"  # in REPORT, or wherever `playbook report --output` writes
LOCK = ".run.lock"

DETECT_FACTS = "detect.json"
WHEELHOUSE = "wheelhouse"
TUNE_WHEELHOUSE = "tune-wheelhouse"  # verify.tune_build_flags: wheels rebuilt with a candidate flag, never the verified
VERIFY_LOGS = "verify-logs"

# The step that writes each per-attempt file stem; plan-attempt-N (N > 1) is repair's, of attempt N-1.
# Verify's units' files beside the notebooks, kept under the names they had; a new unit's go in verify-logs/attempt-N/.
BESIDE_NOTEBOOKS = ("throughput", "llama-bench", "tune", "rpc", "rpc-server-build")
STEM_OWNER = {"plan": Step.CONFIGURE, "build": Step.BUILD, "wheel-choice": Step.BUILD, "diagnosis": Step.REPAIR, "verify": Step.VERIFY,
              "tune-build": Step.VERIFY, **{stem: Step.VERIFY for stem in BESIDE_NOTEBOOKS}}
FOLDER_OWNER = {WHEELHOUSE: Step.BUILD, VERIFY_LOGS: Step.VERIFY, TUNE_WHEELHOUSE: Step.VERIFY}
# Copies of the newest attempt's facts that playbooks before the run-folder layout wrote; read, never written.
LEGACY_LATEST = {"plan.json": Step.CONFIGURE, "build.json": Step.BUILD, "diagnosis.json": Step.REPAIR,
                 "verify.json": Step.VERIFY}

_NOTEBOOK = re.compile(r"^0(?P<number>\d)-(?P<step>[a-z]+)(?:-attempt-(?P<attempt>\d+))?\.ipynb$")
_ATTEMPT_FILE = re.compile(r"^(?P<stem>[a-z-]+?)-attempt-(?P<attempt>\d+)\.(?:json|log|csv|png|svg|md)$")
_ATTEMPT_FOLDER = re.compile(r"^attempt-(?P<attempt>\d+)$")


@dataclass(frozen=True, order=True)
class Position:
    """Where an execution sits in the chain: attempt 0 holds detect and configure."""

    attempt: int
    order: int

    @classmethod
    def of(cls, step: Step, attempt: int) -> Position:
        return cls(attempt if step.per_attempt else 0, CHAIN_ORDER[step])


@dataclass(frozen=True)
class Owner:
    step: Step
    attempt: int

    @property
    def position(self) -> Position:
        return Position.of(self.step, self.attempt)


class Layout:
    """The paths of one run folder."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    # ---- the run's own records
    @property
    def params(self) -> Path:
        return self.root / PARAMS

    @property
    def run_record(self) -> Path:
        return self.root / RUN

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def attestation(self) -> Path:
        return self.root / ATTESTATION

    @property
    def history(self) -> Path:
        return self.root / HISTORY

    @property
    def report(self) -> Path:
        return self.root / REPORT

    @property
    def report_index(self) -> Path:
        return self.report / REPORT_INDEX

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    def in_run(self, path: Path) -> str:
        """``path`` as the run folder's records name it: relative, with forward slashes."""
        return Path(path).relative_to(self.root).as_posix()

    # ---- the steps' files
    def notebook(self, step: Step, attempt: int = 1) -> Path:
        return self.root / f"{step.number:02d}-{step.file_stem(attempt)}.ipynb"

    def notebooks(self) -> list[Path]:
        """The executed notebooks in the run folder, by name."""
        return sorted(self.root.glob("*.ipynb"))

    @property
    def detect_facts(self) -> Path:
        return self.root / DETECT_FACTS

    def plan(self, attempt: int) -> Path:
        return self._attempt_file("plan", attempt, ".json")

    def build_result(self, attempt: int) -> Path:
        return self._attempt_file("build", attempt, ".json")

    def build_log(self, attempt: int) -> Path:
        return self._attempt_file("build", attempt, ".log")

    def wheel_dir(self, attempt: int) -> Path:
        return self.root / WHEELHOUSE / f"attempt-{attempt}"

    def wheel_choice(self, attempt: int) -> Path:
        """With wheel_index.sources: what the build step found in the indexes before building (every wheel's verdict
        with its reason, the check of the one taken, or the one line saying why it built)."""
        return self._attempt_file("wheel-choice", attempt, ".json")

    def diagnosis(self, attempt: int) -> Path:
        return self._attempt_file("diagnosis", attempt, ".json")

    def verify_result(self, attempt: int) -> Path:
        return self._attempt_file("verify", attempt, ".json")

    def verify_logs(self, attempt: int) -> Path:
        return self.root / VERIFY_LOGS / f"attempt-{attempt}"

    # ---- verify's units: each unit's files under its namespace (verify-logs/attempt-N/<namespace>-*.log)
    def install_log(self, attempt: int) -> Path:
        """pip's output installing the wheel alone (verify's own, before any unit)."""
        return self.verify_logs(attempt) / "install.log"

    def unit_files(self, attempt: int, namespace: str) -> UnitFiles:
        """The files of a verify unit in ``attempt``, named under ``namespace`` (``bench``, ``yardstick``, ``tune``):
        a unit asks here for every name it writes, so a new unit adds no method to this module."""
        return UnitFiles(self, attempt, namespace)

    def tune_wheel_dir(self, attempt: int) -> Path:
        """verify.tune_build_flags: the wheels rebuilt with a candidate build flag (never the verified wheel's folder)."""
        return self.root / TUNE_WHEELHOUSE / f"attempt-{attempt}"

    def tune_build_log(self, attempt: int) -> Path:
        """verify.tune_build_flags: the rebuilds' build output."""
        return self._attempt_file("tune-build", attempt, ".log")

    def tune_install_log(self, attempt: int) -> Path:
        """verify.tune_build_flags: pip's output installing a rebuilt wheel alone."""
        return self.verify_logs(attempt) / "tune-install.log"

    def for_tune_build(self) -> Layout:
        """This run folder as the build sees it when the tune rebuilds: its wheel and log under the tune's names."""
        return TuneBuildLayout(self.root)

    def attempts(self, stem: str) -> list[int]:
        """The attempt numbers of ``<stem>-attempt-N.json`` in the folder, in order."""
        return sorted(int(m["attempt"]) for p in self.root.glob(f"{stem}-attempt-*.json")
                      if (m := _ATTEMPT_FILE.match(p.name)) and m["stem"] == stem)

    def latest_attempt(self, stem: str) -> int:
        """The highest attempt number of ``<stem>-attempt-N.json`` in the folder; 0 when none."""
        return max(self.attempts(stem), default=0)

    def _attempt_file(self, stem: str, attempt: int, suffix: str) -> Path:
        return self.root / f"{stem}-attempt-{attempt}{suffix}"


@dataclass(frozen=True)
class UnitFiles:
    """One verify unit's files in one attempt: ``<namespace>[-part].log`` and ``<namespace>-<name>`` in
    ``verify-logs/attempt-N/``; and, for the namespaces in :data:`BESIDE_NOTEBOOKS` only, the older names beside the
    notebooks (``throughput-attempt-N.csv``). A new unit writes into ``verify-logs/attempt-N/``: that folder is
    verify's, so history and the chain know the files' owner without a line here."""

    layout: Layout
    attempt: int
    namespace: str

    @property
    def folder(self) -> Path:
        """``verify-logs/attempt-N/``, where every unit's children log."""
        return self.layout.verify_logs(self.attempt)

    def log(self, part: str = "") -> Path:
        """``<namespace>.log``, or ``<namespace>-<part>.log`` (``bench-ngl-17.log``)."""
        return self.folder / f"{self.namespace}{'-' + part if part else ''}.log"

    def file(self, name: str) -> Path:
        """``<namespace>-<name>``, any other file of the unit (``size-wheel.json``)."""
        return self.folder / f"{self.namespace}-{name}"

    def logs(self, pattern: str = "*") -> list[Path]:
        """The unit's logs written so far whose part matches ``pattern`` (``ngl-*``), by name."""
        return sorted(self.folder.glob(f"{self.namespace}-{pattern}.log"))

    def beside(self, suffix: str, part: str = "") -> Path:
        """``<namespace>[-part]-attempt-N<suffix>`` in the run folder, beside the notebooks: the names verify's
        first units kept there (the throughput table and plot, tune's report); no new namespace may."""
        stem = f"{self.namespace}{'-' + part if part else ''}"
        if stem not in BESIDE_NOTEBOOKS:
            raise ValueError(f"{stem}-attempt-N{suffix}: a verify unit's new files go in {VERIFY_LOGS}/attempt-N/ "
                             f"(unit_files(...).file or .log), not beside the notebooks")
        return self.layout.root / f"{stem}-attempt-{self.attempt}{suffix}"


class TuneBuildLayout(Layout):
    """The layout :func:`playbook.steps.build.run_build` writes through when verify.tune_build_flags rebuilds: the
    wheel goes to the tune's wheelhouse and the output to the tune's build log, so the verified wheel and its build
    log stay as they are."""

    def wheel_dir(self, attempt: int) -> Path:
        return self.tune_wheel_dir(attempt)

    def build_log(self, attempt: int) -> Path:
        return self.tune_build_log(attempt)


def owner_of(relative: Path | str) -> Owner | None:
    """The step execution that wrote a file or per-attempt folder of a run; None for the run's own records."""
    parts = PurePosixPath(Path(relative).as_posix()).parts
    if len(parts) == 2 and parts[0] in FOLDER_OWNER and (m := _ATTEMPT_FOLDER.match(parts[1])):
        return Owner(FOLDER_OWNER[parts[0]], int(m["attempt"]))
    if len(parts) != 1:
        return None
    name = parts[0]
    if (m := _NOTEBOOK.match(name)) and m["step"] in Step._value2member_map_:
        return Owner(Step(m["step"]), int(m["attempt"] or 1))
    if name == DETECT_FACTS:
        return Owner(Step.DETECT, 1)
    if (m := _ATTEMPT_FILE.match(name)) and m["stem"] in STEM_OWNER:
        attempt = int(m["attempt"])
        if m["stem"] == "plan" and attempt > 1:
            return Owner(Step.REPAIR, attempt - 1)
        return Owner(STEM_OWNER[m["stem"]], attempt)
    if name in LEGACY_LATEST:
        return Owner(LEGACY_LATEST[name], 1)
    return None
