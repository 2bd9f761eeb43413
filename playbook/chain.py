"""The chain detect → configure → build ⇄ repair → verify: one state machine, one driver.

:func:`next_step` reads a run folder and says which step runs next (and at which attempt), or that
the chain has ended. Everything that runs steps asks it: :func:`drive` (``playbook run`` and
``playbook resume``), the walkthrough's "run next step" button, and a step notebook opened by hand
(:func:`open_step`), which refuses to run before its predecessor with one sentence saying which.

Each step runs as its own notebook through papermill (:func:`execute_step`); the step function inside
the notebook records how it ended in ``run.json`` (:meth:`RunFolder.begin_step` and
:meth:`RunFolder.end_step`), so a notebook executed with papermill's own CLI leaves the same records.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import papermill

from playbook import resources
from playbook.errors import MissingPredecessor, PlanRefused, RunFolderError, StepFailed
from playbook.kernels import papermill_options
from playbook.locks import RunLock
from playbook.params import Params, flatten_groups, load_params, with_changes
from playbook.runfolder.attestation import write_attestation
from playbook.runfolder.folder import Outcome, RunFolder, StepRecord, run_folders, utc_now
from playbook.runfolder.history import archive_rerun, keep_file
from playbook.runfolder.layout import PARAMS, RUN, Step
from playbook.runfolder.redact import redact_file, redact_folder, run_secrets
from playbook.serialization import read_json

log = logging.getLogger("playbook")


@dataclass(frozen=True)
class StepCall:
    """One execution of a step: which, and for which build attempt."""

    step: Step
    attempt: int = 1

    @property
    def label(self) -> str:
        return self.step.label(self.attempt)


@dataclass
class Verdict:
    """The one field of a build or verify result the chain steers by (read without the step's modules)."""

    ok: bool = False


def next_step(run: RunFolder) -> StepCall | None:
    """The step the chain runs next in this folder; None when the chain has ended (verified, or
    failed with no remedy left: repair wrote no next plan)."""
    layout = run.layout
    if not layout.detect_facts.is_file():
        return StepCall(Step.DETECT)
    if not layout.plan(1).is_file():
        return StepCall(Step.CONFIGURE)
    attempt = layout.latest_attempt("plan")
    if not layout.build_result(attempt).is_file():
        return StepCall(Step.BUILD, attempt)
    if read_json(Verdict, layout.build_result(attempt)).ok:
        if not layout.verify_result(attempt).is_file():
            return StepCall(Step.VERIFY, attempt)
        if read_json(Verdict, layout.verify_result(attempt)).ok:
            return None
    if not layout.diagnosis(attempt).is_file():
        return StepCall(Step.REPAIR, attempt)
    return None


# What a step needs before it can run, in the words a person reads when it is missing.
def check_predecessor(run: RunFolder, call: StepCall) -> None:
    layout = run.layout
    first = {
        Step.CONFIGURE: (layout.detect_facts, Step.DETECT),
        Step.BUILD: (layout.plan(call.attempt), Step.CONFIGURE if call.attempt == 1 else Step.REPAIR),
        Step.REPAIR: (layout.build_result(call.attempt), Step.BUILD),
        Step.VERIFY: (layout.build_result(call.attempt), Step.BUILD),
    }
    if call.step not in first:
        return
    needed, step = first[call.step]
    if not needed.is_file():
        attempt = call.attempt - 1 if step is Step.REPAIR else call.attempt
        raise MissingPredecessor(
            f"{call.label} needs {needed.name}, which {step.label(attempt)} writes: run notebooks/{step.value}.ipynb "
            f"with run_dir {run.path} first")
    if call.step is Step.VERIFY and not read_json(Verdict, needed).ok:
        raise MissingPredecessor(f"verify (attempt {call.attempt}) needs a built wheel, but build attempt "
                                 f"{call.attempt} failed: run notebooks/repair.ipynb with run_dir {run.path} first")


def open_step(step: str | Step, run_dir: str | Path = "", attempt: int = 0, interactive: bool = False,
              params_file: str = "", parameters: dict[str, Any] | None = None,
              output_root: Path | None = None) -> tuple[RunFolder, StepCall]:
    """The run folder and the step call for a step notebook, checked before anything runs.

    ``run_dir`` empty: detect starts a new run under ``output_root``; a later step continues the
    newest run there. A ``run_dir`` that does not exist yet is created (papermill's ``-p run_dir``).
    ``params_file`` and ``parameters`` (the notebook's parameter groups: ``backend``, ``source``, ...,
    None where not given) set the run's parameters when it starts, and change them (the old
    ``params.json`` kept under ``history/``) when they differ from an existing run's. Run by a
    person (``interactive``), a step that ran before first moves its earlier files to ``history/``."""
    step = Step(step)
    changes = flatten_groups(parameters or {})
    run = _run_folder(step, run_dir, params_file, changes, output_root or resources.default_output_root())
    if changes or params_file:
        _change_params(run, params_file, changes)
    call = StepCall(step, attempt or _default_attempt(run, step))
    check_predecessor(run, call)
    executing = notebook_being_executed(run, step)
    kept = archive_rerun(run.path, step, call.attempt, keep=[executing] if executing else []) if interactive else None
    if kept is not None:
        print(f"{step.value} ran before in this run: its earlier files are kept in {kept.relative_to(run.path)}")
    run.begin_step(call.step, call.attempt, earlier_kept=kept.relative_to(run.path).as_posix() if kept else "",
                   notebook=executing.name if executing else "")
    return run, call


def notebook_being_executed(run: RunFolder, step: Step) -> Path | None:
    """The notebook in the run folder that papermill is executing for ``step`` right now: papermill writes
    its output notebook before the first cell runs, marked started and not ended, with its input path and
    parameters (``papermill notebooks/detect.ipynb outputs/mine/01-detect.ipynb -p run_dir outputs/mine``).
    Its name goes into run.json, and an interactive step does not take it for an earlier run's file."""
    found: list[tuple[str, Path]] = []
    for path in run.path.glob("*.ipynb"):
        try:
            meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("papermill", {})
        except (OSError, ValueError):
            continue
        run_dir = str(meta.get("parameters", {}).get("run_dir") or "")
        if (meta.get("start_time") and meta.get("end_time") is None
                and Path(str(meta.get("input_path", ""))).stem == step.value
                and (not run_dir or Path(run_dir).expanduser().absolute() == run.path)):
            found.append((str(meta["start_time"]), path))
    return max(found)[1] if found else None


def _run_folder(step: Step, run_dir: str | Path, params_file: str, changes: dict[str, Any],
                output_root: Path) -> RunFolder:
    if run_dir:
        run = RunFolder(Path(run_dir).expanduser())
        if run.exists():
            return run
        params = with_changes(load_params(resources.resolve_params_file(params_file) if params_file else None), changes)
        created = RunFolder.create_at(run.path, params, _source_text(params_file, changes))
        print(f"new run folder: {created.path}")
        return created
    if step is Step.DETECT:
        params = with_changes(load_params(resources.resolve_params_file(params_file) if params_file else None), changes)
        created = RunFolder.create(output_root, params, _source_text(params_file, changes))
        print(f"new run folder: {created.path}")
        return created
    runs = run_folders(output_root)
    if not runs:
        raise MissingPredecessor(f"{step.value} needs a run folder, and {output_root} has none: run "
                                 "notebooks/detect.ipynb first, or set run_dir")
    print(f"continuing the newest run: {runs[-1]}")
    return RunFolder(runs[-1])


def _change_params(run: RunFolder, params_file: str, changes: dict[str, Any]) -> None:
    """Apply a notebook's parameters to an existing run; the earlier params.json goes to history/."""
    current = run.params()
    base = load_params(resources.resolve_params_file(params_file)) if params_file else current
    wanted = with_changes(base, changes)
    if wanted == current:
        return
    keep_file(run.path, PARAMS, "params")
    run.save_params(wanted)
    record = run.record()
    record.params_source += " + " + _source_text(params_file, changes)
    run.save_record(record)


def _source_text(params_file: str, changes: dict[str, Any]) -> str:
    return " ".join([params_file or "params/default.yaml", *(f"--set {k}={v}" for k, v in changes.items())])


def _default_attempt(run: RunFolder, step: Step) -> int:
    """The attempt a step notebook opened without one works on: the newest plan's for build, the
    newest build's for repair and verify."""
    if step is Step.BUILD:
        return max(1, run.layout.latest_attempt("plan"))
    if step in (Step.REPAIR, Step.VERIFY):
        return max(1, run.layout.latest_attempt("build"))
    return 1


def execute_step(run: RunFolder, call: StepCall, *, verbose: bool = False) -> StepRecord:
    """Execute one step notebook into the run folder. The step records its own outcome; a notebook
    that raised is recorded as ``error`` and raised as :class:`StepFailed`."""
    output = run.layout.notebook(call.step, call.attempt)
    earlier = archive_rerun(run.path, call.step, call.attempt)
    if earlier is not None:
        log.debug("%s ran before: its earlier files are kept in %s", call.label, earlier.relative_to(run.path))
    parameters = {"run_dir": str(run.path), "interactive": False, "attempt": call.attempt}
    clock = time.monotonic()
    error = ""
    try:
        papermill.execute_notebook(
            str(resources.notebook(call.step.value)), str(output), parameters=parameters, cwd=str(run.path),
            log_output=verbose, **papermill_options(verbose=verbose),
        )
    except papermill.PapermillExecutionError as err:
        error = f"{err.ename}: {err.evalue}"
    finally:
        # The executed notebook is for reading only (facts travel in JSON files): redact it now.
        if output.is_file():
            redact_file(output, _secrets(run))
    record = run.end_step(call.step, call.attempt, notebook=output.name, error=error,
                          duration_s=round(time.monotonic() - clock, 2),
                          earlier_kept=earlier.relative_to(run.path).as_posix() if earlier else "")
    run.write_manifest()
    if error:
        raise StepFailed(f"{call.label} raised {error}; see {output}")
    return record


EventCallback = Callable[[str, Any], None]


def run_chain(params: Params, params_source: str, output_root: Path, *, force: bool = False,
              verbose: bool = False, on_event: EventCallback | None = None) -> RunFolder:
    """The whole pipeline in a new run folder. Returns the folder, whose run.json says how it ended."""
    run = RunFolder.create(output_root, params, params_source)
    return drive(run, force=force, verbose=verbose, on_event=on_event)


def resume(run_dir: Path, *, force: bool = False, verbose: bool = False,
           on_event: EventCallback | None = None) -> RunFolder:
    """Continue a run that was killed: the step it was in is recorded as interrupted, its partial files
    move to ``history/``, and the chain goes on from the last completed step."""
    run = RunFolder(run_dir)
    if not run.exists():
        raise RunFolderError(f"{run_dir} is not a run folder (no {RUN}): give the folder `playbook run` printed")
    record = run.record()
    if record.outcome not in (Outcome.RUNNING, Outcome.INTERRUPTED):
        raise RunFolderError(f"{run_dir} already ended ({record.outcome.value}): nothing to resume; "
                             "start a new run with `playbook run`")
    with RunLock(run.layout.lock):
        for step in record.steps:
            if step.outcome is Outcome.RUNNING:
                step.outcome, step.message = Outcome.INTERRUPTED, "the run was killed while this step ran"
                kept = archive_rerun(run.path, step.step, step.attempt)
                if kept is not None:
                    step.message += f"; its partial files are in {kept.relative_to(run.path).as_posix()}"
        record.resumed.append(utc_now())
        record.outcome = Outcome.RUNNING
        run.save_record(record)
    return drive(run, force=force, verbose=verbose, on_event=on_event)


def drive(run: RunFolder, *, force: bool = False, verbose: bool = False,
          on_event: EventCallback | None = None) -> RunFolder:
    """Run every next step until the chain ends; then seal the folder (redact, attest, manifest)."""
    from playbook.steps.configure import BuildPlan

    emit = on_event or (lambda kind, value: None)
    emit("run", run)
    try:
        with RunLock(run.layout.lock):
            while (call := next_step(run)) is not None:
                emit("start", call)
                try:
                    record = execute_step(run, call, verbose=verbose)
                except StepFailed:
                    emit("end", run.record().steps[-1])  # recorded as error by execute_step
                    raise
                emit("end", record)
                if call.step is Step.CONFIGURE:
                    plan = read_json(BuildPlan, run.layout.plan(1))
                    if plan.blockers and not force:
                        raise PlanRefused("the plan says this build must fail:\n  - " + "\n  - ".join(
                            b.message for b in plan.blockers) + "\nfix the above, or pass --force to build anyway")
            outcome, message = conclusion(run)
            _finish(run, outcome, message)
    except PlanRefused as refused:
        _finish(run, Outcome.FAILED, str(refused))
        raise
    except StepFailed as failure:
        _finish(run, Outcome.FAILED, str(failure))
    except KeyboardInterrupt:
        _finish(run, Outcome.INTERRUPTED, f"interrupted; `{resume_command(run)}` continues it", seal=False)
        emit("interrupted", run)
        raise
    except BaseException as error:
        _finish(run, Outcome.FAILED, f"{type(error).__name__}: {error}")
        raise
    emit("finished", run)
    return run


def resume_command(run: RunFolder) -> str:
    """The command that continues ``run`` after an interrupt, as a shell takes it from any folder."""
    return f"playbook resume {shlex.quote(str(run.path.absolute()))}"


def conclusion(run: RunFolder) -> tuple[Outcome, str]:
    """How the chain ended, from the files: the last attempt's verify, or its diagnosis."""
    from playbook.steps.build import BuildResult
    from playbook.steps.repair import Diagnosis
    from playbook.verify.step import VerifyResult

    layout = run.layout
    attempt = layout.latest_attempt("build")
    if not attempt:
        return Outcome.FAILED, "no build ran"
    build = read_json(BuildResult, layout.build_result(attempt))
    if build.ok and layout.verify_result(attempt).is_file():
        verify = read_json(VerifyResult, layout.verify_result(attempt))
        if verify.ok:
            return Outcome.OK, verify.summary
    if layout.diagnosis(attempt).is_file():
        return Outcome.FAILED, read_json(Diagnosis, layout.diagnosis(attempt)).message
    return Outcome.FAILED, f"attempt {attempt} failed"


def _secrets(run: RunFolder) -> list[str]:
    from playbook.steps.caches import url_secret

    build = run.params().build
    return sorted({*run_secrets(os.environ, build.env), *filter(None, [url_secret(build.ccache_remote)])},
                  key=len, reverse=True)


def _finish(run: RunFolder, outcome: Outcome, message: str, seal: bool = True) -> None:
    record = run.record()
    record.outcome, record.message, record.finished = outcome, message, utc_now()
    run.save_record(record)
    if seal:
        # Facts files carry the parameters' values from step to step while the run lasts; once it
        # ends the folder is an archive, and nothing in it may hold a secret.
        redact_folder(run.path, _secrets(run))
        write_attestation(run)
    run.write_manifest()
    log.debug("run %s: %s", outcome.value, message)
