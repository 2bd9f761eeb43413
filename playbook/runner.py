"""Chain the step notebooks with papermill: detect → configure → build ⇄ repair → verify."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import papermill

from playbook.attest import write_attestation
from playbook.build import BuildResult
from playbook.errors import StepFailed
from playbook.facts import read_facts
from playbook.history import archive_rerun
from playbook.params import Params, load_params
from playbook.provenance import RunFolder, RunRecord, StepRecord, utc_now
from playbook.redact import redact_file, redact_folder, run_secrets
from playbook.steps import DETECT_FILE, PLAN_FILE, Diagnosis, fetch_source
from playbook.verify import VerifyResult

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
STEP_NUMBERS = {"detect": 1, "configure": 2, "build": 3, "repair": 4, "verify": 5}
OUTPUT_ROOT = Path(__file__).resolve().parent.parent / "outputs"
OUTPUT_ROOT_VARIABLE = "LLAMA_PLAYBOOK_OUTPUTS"  # where notebooks opened by hand put new run folders

log = logging.getLogger("playbook")


def default_output_root() -> Path:
    """``$LLAMA_PLAYBOOK_OUTPUTS`` when set, else ``outputs/`` of this checkout."""
    return Path(os.environ.get(OUTPUT_ROOT_VARIABLE) or OUTPUT_ROOT)


def open_run(run_dir: str | Path = "", params_file: str | Path | None = None, new: bool = False,
             output_root: Path | None = None) -> RunFolder:
    """The run folder a notebook works in. Opened by hand with ``run_dir`` empty: the detect
    notebook (``new=True``) starts a new run with ``params_file`` (default parameters); the
    later steps continue the newest run under ``output_root`` (default: :func:`default_output_root`)."""
    if run_dir:
        return RunFolder(Path(run_dir))
    output_root = output_root or default_output_root()
    if not new:
        runs = sorted(p for p in output_root.glob("*/run.json") if p.parent.name != "reference")
        if not runs:
            raise StepFailed("no run folder under outputs/ yet: run the detect notebook first, or set run_dir")
        print(f"continuing the newest run: {runs[-1].parent}")
        return RunFolder(runs[-1].parent)
    params = load_params(Path(params_file) if params_file else None)
    run = RunFolder.create(output_root, params, str(params_file or "params/default.yaml"))
    print(f"new run folder: {run.path}")
    return run


def open_step(run_dir: str | Path, step: str, attempt: int = 1, interactive: bool = False) -> RunFolder:
    """The run folder for a step notebook (see :func:`open_run`). Run by a person (``interactive``),
    a step that ran before first moves its earlier files, and those of the steps after it, to
    ``history/`` (:func:`playbook.history.archive_rerun`); papermill runs leave that to :func:`execute_step`."""
    run = open_run(run_dir, new=step == "detect")
    if interactive:
        kept = archive_rerun(run.path, step, attempt or max(1, run.latest_attempt("build")))
        if kept is not None:
            print(f"{step} ran before in this run: its earlier files are kept in {kept.relative_to(run.path)}")
    return run


def next_step(run: RunFolder) -> tuple[str, int] | None:
    """The step the chain runs next in this folder and its attempt; None when the chain has ended
    (verified, or failed with no remedy left)."""
    if not run.file(DETECT_FILE).is_file():
        return "detect", 1
    if not run.file(PLAN_FILE).is_file():
        return "configure", 1
    attempt = max(1, run.latest_attempt("plan"))
    if not run.attempt_file("build", attempt).is_file():
        return "build", attempt
    if read_facts(BuildResult, run.attempt_file("build", attempt)).ok:
        if not run.attempt_file("verify", attempt).is_file():
            return "verify", attempt
        if read_facts(VerifyResult, run.attempt_file("verify", attempt)).ok:
            return None
    if not run.attempt_file("diagnosis", attempt).is_file():
        return "repair", attempt
    return None


def execute_step(run: RunFolder, step: str, attempt: int | None = None, **parameters: Any) -> StepRecord:
    """Execute one step notebook into the run folder; a failing notebook is recorded, then raised."""
    output = run.notebook(STEP_NUMBERS[step], step, attempt)
    earlier = archive_rerun(run.path, step, attempt or 1)
    if earlier is not None:
        log.info("%s ran before: its earlier files and those of the steps after it are kept in %s",
                 step, earlier.relative_to(run.path))
    parameters = {"run_dir": str(run.path), "interactive": False, **({"attempt": attempt} if attempt else {}), **parameters}
    started, clock = utc_now(), time.monotonic()
    log.info("▶ %s%s → %s", step, f" (attempt {attempt})" if attempt else "", output.name)
    record = StepRecord(step, output.name, "ok", started, 0.0, attempt or 1,
                        f"ran again; the earlier run is in {earlier.relative_to(run.path)}" if earlier else "")
    try:
        papermill.execute_notebook(
            str(NOTEBOOKS / f"{step}.ipynb"),
            str(output),
            parameters=parameters,
            kernel_name="python3",
            cwd=str(run.path),
            log_output=True,
            progress_bar=False,
        )
    except papermill.PapermillExecutionError as err:
        record.outcome = "error"
        record.message = "; ".join(filter(None, [f"{err.ename}: {err.evalue}", record.message]))
    finally:
        # The executed notebook is for reading only (facts travel in JSON files): redact it now.
        if output.is_file():
            redact_file(output, _secrets(run))
    record.duration_s = round(time.monotonic() - clock, 2)
    _append_step(run, record)
    if record.outcome == "error":
        raise StepFailed(f"step {step} raised {record.message}; see {output}")
    return record


def run_chain(params: Params, params_source: str, output_root: Path = OUTPUT_ROOT) -> RunFolder:
    """The whole pipeline. Returns the run folder, whose run.json says how it ended."""
    run = RunFolder.create(output_root, params, params_source)
    log.info("run folder: %s", run.path)
    try:
        source = fetch_source(run)
        log.info("source: %s (sha256 %s)", source.origin, source.sha256[:16] or "tree")
        execute_step(run, "detect")
        execute_step(run, "configure")
        outcome, message = _attempts(run, params.build.max_attempts)
        _finish(run, outcome, message)
    except StepFailed as failure:
        _finish(run, "failed", str(failure))
    except BaseException as error:
        _finish(run, "failed", f"{type(error).__name__}: {error}")
        raise
    return run


def _attempts(run: RunFolder, max_attempts: int) -> tuple[str, str]:
    """Build and verify; after a failure, repair and try again while a remedy applies."""
    for attempt in range(1, max_attempts + 1):
        execute_step(run, "build", attempt)
        build = read_facts(BuildResult, run.attempt_file("build", attempt))
        if build.ok:
            execute_step(run, "verify", attempt)
            verify = read_facts(VerifyResult, run.attempt_file("verify", attempt))
            if verify.ok:
                return "ok", f"{verify.summary}; wheel {build.wheel.name if build.wheel else ''}"
            failed = f"verify of attempt {attempt} failed: {_findings_line(verify.findings, verify.summary)}"
        else:
            failed = f"build attempt {attempt} failed"
        if attempt == max_attempts:
            return "failed", f"{failed}; build.max_attempts ({max_attempts}) spent"
        execute_step(run, "repair", attempt)
        diagnosis = read_facts(Diagnosis, run.attempt_file("diagnosis", attempt))
        if not diagnosis.next_plan:
            return "failed", f"{failed}: {diagnosis.message}"
        log.info("repair: %s", diagnosis.message)
    raise AssertionError("unreachable: the loop returns on its last attempt")


def _findings_line(findings: list[dict[str, Any]], summary: str) -> str:
    if not findings:
        return summary
    return "; ".join(f"{f['id']}: {f['fix'] or f['evidence']}" for f in findings)


def _append_step(run: RunFolder, step: StepRecord) -> None:
    record = run.record()
    record.steps.append(step)
    run.save_record(record)
    run.write_manifest()


def _secrets(run: RunFolder) -> list[str]:
    return run_secrets(os.environ, run.params().build.env)


def _finish(run: RunFolder, outcome: str, message: str) -> None:
    record: RunRecord = run.record()
    record.outcome, record.message, record.finished = outcome, message, utc_now()
    run.save_record(record)
    # Facts files carry the parameters' values from step to step while the run lasts; once it
    # ends the folder is an archive, and nothing in it may hold a secret.
    redact_folder(run.path, _secrets(run))
    write_attestation(run)
    run.write_manifest()
    log.info("run %s: %s", outcome, message)
