"""What ``playbook run`` shows in a terminal: one line per step, a progress bar while a step works,
failures stated plainly, and a summary that says what to do next. Everything else is in the run folder.

The step notebooks run in a kernel; their progress is read from the files they write (ninja's
``[n/N]`` in the build log, one ``bench-ngl-*.log`` per sweep point), drawn with tqdm.
"""

from __future__ import annotations

import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from playbook.chain import StepCall, resume_command
from playbook.runfolder.folder import Outcome, RunFolder, StepRecord
from playbook.runfolder.layout import RUN, Step
from playbook.serialization import read_json

POLL_S = 0.5
# Where stderr is not a terminal (a log file, CI, nohup) tqdm draws nothing: a plain line this often instead.
PLAIN_PROGRESS_S = 30.0


class ConsoleReporter:
    """The ``on_event`` callback of :func:`playbook.chain.drive` for a person at a terminal. Where
    stderr is no terminal, progress is a plain line on ``stream`` every ``plain_every_s`` seconds."""

    def __init__(self, stream: TextIO | None = None, progress: bool = True, plain_every_s: float = PLAIN_PROGRESS_S,
                 terminal: bool | None = None, uploaded_to: str = ""):
        self.stream = stream or sys.stdout  # the stdout of now, not of when this module was imported
        # s3://bucket/prefix the finished run folder is uploaded to: its temporary local copy is deleted then,
        # so the summary names the files there.
        self.uploaded_to = uploaded_to
        self.progress = progress
        self.plain_every_s = plain_every_s
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self.run: RunFolder | None = None
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def __call__(self, kind: str, value: Any) -> None:
        getattr(self, f"on_{kind}")(value)

    def say(self, line: str = "") -> None:
        print(line, file=self.stream, flush=True)

    def on_run(self, run: RunFolder) -> None:
        self.run = run
        self.say(f"run folder: {run.path}")

    def on_start(self, call: StepCall) -> None:
        if not self.progress or call.step not in (Step.BUILD, Step.VERIFY):
            return
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll, args=(call,), daemon=True)
        self._poller.start()

    def on_end(self, record: StepRecord) -> None:
        self._stop_progress()
        self.say(step_line(record))
        if record.step is Step.REPAIR and self.run is not None:
            for line in repair_lines(self.run, record.attempt):
                self.say(f"    {line}")

    def on_finished(self, run: RunFolder) -> None:
        self.say()
        for line in summary_lines(run, self.uploaded_to):
            self.say(line)

    def on_interrupted(self, run: RunFolder) -> None:
        """Ctrl-C: stop the progress bar and say the command that continues the run."""
        self._stop_progress()
        self.say()
        if self.uploaded_to:  # the run ran in a temporary folder, which is uploaded and then deleted
            self.say(f"interrupted: the run folder goes to {remote_run(self.uploaded_to, run)}; "
                     "a run uploaded there cannot be resumed: start it again")
            return
        self.say(f"interrupted: to continue from the last completed step, run\n  {resume_command(run)}")

    def _stop_progress(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None

    def _poll(self, call: StepCall) -> None:
        from playbook.steps.build import last_progress_of

        assert self.run is not None
        layout = self.run.layout
        started = time.monotonic()
        next_line = started + self.plain_every_s
        if call.step is Step.BUILD:
            bar = tqdm(total=None, desc="  configuring", unit="step", file=sys.stderr, leave=False,
                       disable=not self.terminal)
            while not self._stop.wait(POLL_S):
                progress = last_progress_of(layout.build_log(call.attempt))
                if progress.total and (progress.done, progress.total) != (bar.n, bar.total):
                    bar.set_description("  compiling", refresh=False)
                    bar.total, bar.n = progress.total, progress.done
                    bar.refresh()
                if not self.terminal and time.monotonic() >= next_line:
                    next_line += self.plain_every_s
                    done = (f"compiling [{progress.done}/{progress.total}] {100 * progress.done // progress.total}%"
                            if progress.total else "configuring")
                    self.say(f"  {call.label}: {done}, {time.monotonic() - started:.0f} s")
        else:
            from playbook.verify.units.offload_sweep import point_logs

            expected = expected_sweep_points(self.run)
            bar = tqdm(total=expected or None, desc="  measuring", unit="point", file=sys.stderr, leave=False,
                       disable=not self.terminal)
            while not self._stop.wait(POLL_S):
                points = len(point_logs(layout, call.attempt))
                if points != bar.n:
                    bar.n = points
                    bar.refresh()
                if not self.terminal and time.monotonic() >= next_line:
                    next_line += self.plain_every_s
                    self.say(f"  {call.label}: measured {points}" + (f" of {expected}" if expected else "")
                             + f" sweep points, {time.monotonic() - started:.0f} s")
        bar.close()


def expected_sweep_points(run: RunFolder) -> int:
    params = run.params()
    if params.verify.n_gpu_layers:
        return len(set(params.verify.n_gpu_layers))
    return params.verify.sweep_points


def step_line(record: StepRecord) -> str:
    mark = {Outcome.OK: "✓", Outcome.REUSED: "✓"}.get(record.outcome, "✗")
    label = record.step.label(record.attempt)
    findings = f" [{', '.join(record.findings)}]" if record.findings and record.outcome is not Outcome.OK else ""
    message = f"  {record.message}" if record.message else ""
    if record.step is Step.REPAIR:
        message = ""  # repair_lines says it in full
    return f"{mark} {label:<22} {record.outcome.value:<11} {record.duration_s:7.1f} s{findings}{message}"[:220]


def repair_lines(run: RunFolder, attempt: int) -> list[str]:
    """Each finding as "what happened → the known failure → what the playbook does"."""
    from playbook.steps.configure import BuildPlan
    from playbook.steps.repair import Diagnosis

    layout = run.layout
    if not layout.diagnosis(attempt).is_file():
        return []
    diagnosis = read_json(Diagnosis, layout.diagnosis(attempt))
    next_plan = read_json(BuildPlan, layout.plan(attempt + 1)) if diagnosis.next_plan else None
    lines = []
    for finding in diagnosis.findings:
        if next_plan is not None and finding.id in next_plan.remedies_applied:
            action = "rebuilding with " + (changed_arguments(run, attempt) or "the remedy")
        elif finding.automatic:
            action = "a remedy exists, but no attempt is left (build.max_attempts)"
        else:
            action = "needs you: " + finding.fix.splitlines()[0][:160]
        lines.append(f"{plain_evidence(finding)} → {finding.id} → {action}")
    if not diagnosis.findings:
        lines.append(diagnosis.message)
    return lines


def plain_evidence(finding: Any) -> str:
    evidence = " ".join(finding.evidence.split())
    if finding.id in ("process-crash", "cpu-amx-fault") and "SIG" in evidence:
        return "the wheel crashed (" + evidence[:120] + ")"
    return evidence[:140]


def changed_arguments(run: RunFolder, attempt: int) -> str:
    from playbook.steps.configure import BuildPlan

    before = read_json(BuildPlan, run.layout.plan(attempt))
    after = read_json(BuildPlan, run.layout.plan(attempt + 1))
    added = [a for a in after.cmake_args if a not in before.cmake_args]
    env = [f"{k}={v}" for k, v in after.env.items() if before.env.get(k) != v]
    return " ".join(added + env)


def summary_lines(run: RunFolder, uploaded_to: str = "") -> list[str]:
    """The end of a run: where the wheel is and how to install it, what it is, what was repaired, how
    fast it ran, and where the report is. ``uploaded_to``: the s3:// prefix the run folder goes to, where
    its files are once the local copy is gone."""
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.verify.step import VerifyResult
    from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

    record = run.record()
    layout = run.layout
    lines = [f"outcome: {record.outcome.value}" + (f": {record.message}" if record.message else "")]
    attempt = layout.latest_attempt("build")
    if attempt:
        build = read_json(BuildResult, layout.build_result(attempt))
        plan = read_json(BuildPlan, layout.plan(attempt))
        verify = read_json(VerifyResult, layout.verify_result(attempt)) if layout.verify_result(attempt).is_file() else None
        if build.ok and build.wheel:
            wheel = Path(build.wheel.path)
            if build.reused_wheel:
                how = "reused from the wheel cache" + (f", built by run {build.reused_from_run}"
                                                       if build.reused_from_run else "")
            elif build.published is not None:
                how = f"installed from the index {build.published.source}, checked in {build.published.check_s:.0f} s"
            else:
                how = f"built in {build.duration_s:.0f} s"
            if verify is None or not verify.ok:
                how += "; it did not pass verify"
            if uploaded_to:
                inside = wheel.relative_to(run.path) if wheel.is_absolute() else wheel
                url = f"{remote_run(uploaded_to, run)}/{inside.as_posix()}"
                lines.append(f"wheel: {url} ({how})")
                lines.append(f"  install it: download it (aws s3 cp {shlex.quote(url)} .), then "
                             f"pip install {shlex.quote(wheel.name)}")
            else:
                lines.append(f"wheel: {wheel} ({how})")
                lines.append(f"  install it: pip install {shlex.quote(str(wheel))}")
        lines.append(f"backend: {plan.backend}" + (f", CUDA architectures {plan.cuda_architectures}"
                                                        if plan.cuda_architectures else ""))
        if plan.remembered_repairs:
            lines.append(f"started from repairs that worked on this machine before: "
                         f"{', '.join(plan.remembered_repairs)} (--set build.forget_repairs=true to build without)")
        if plan.remedies_applied:
            lines.append(f"repaired: {', '.join(plan.remedies_applied)} (attempt {attempt} built with "
                         f"{plan.cmake_args_string})")
        if verify is not None:
            sweep = verify.measured(OFFLOAD_SWEEP)
            ok = sweep.measured if sweep else []
            if ok:
                full = max(ok, key=lambda p: p.n_gpu_layers)
                where = f"with {full.n_gpu_layers} layers on the GPU" if full.n_gpu_layers else "on the CPU"
                lines.append(f"throughput {where}: token generation {full.tg_tokens_per_s:.1f} t/s, "
                             f"prompt processing {full.pp_tokens_per_s:.1f} t/s")
    if uploaded_to:
        lines.append(f"details: {remote_run(uploaded_to, run)} ({RUN}, the executed notebooks, logs)")
        lines.append(f"  check it there: playbook check {shlex.quote(remote_run(uploaded_to, run))}")
        return lines
    lines.append(f"details: {run.path} ({RUN}, the executed notebooks, logs)")
    lines.append(f"  report: playbook report {shlex.quote(str(run.path))}   "
                 f"(writes {run.layout.report_index})")
    return lines


def remote_run(uploaded_to: str, run: RunFolder) -> str:
    from playbook.runfolder.remote import S3Location

    return S3Location.parse(uploaded_to).child(run.path.name).url
