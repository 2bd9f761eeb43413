"""What `playbook run` shows in a terminal: one line per step, findings stated plainly, one summary."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cmake_project

from playbook.errors import ExitCode
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step

STEP_LINE = re.compile(r"^[✓✗] (detect|configure|build|repair|verify)\b")


def deprecated_flag_project(tmp_path: Path) -> Path:
    """A source tree that fails as llama.cpp does when given the old LLAMA_CUBLAS, and builds without it."""
    project = cmake_project(tmp_path, with_vocabulary=True)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES CXX)\n"
        "if(LLAMA_CUBLAS)\n"
        '  message(WARNING "LLAMA_CUBLAS is deprecated and will be removed in the future.\\nUse GGML_CUDA instead")\n'
        '  message(FATAL_ERROR "stopping, as the old flag asks for a CUDA build this tree cannot make")\n'
        "endif()\n"
    )
    return project


@pytest.mark.long
def test_a_run_shows_one_line_per_step_the_repair_and_one_summary(tmp_path):
    project = deprecated_flag_project(tmp_path)
    outputs = tmp_path / "outputs"
    done = subprocess.run(
        [sys.executable, "-m", "playbook", "run", "--output", str(outputs), "--set", "backend=cpu",
         "--set", "source.kind=path", "--set", f"source.path={project}", "--set", "build.max_attempts=2",
         "--set", "build.ccache=off", "--set", f"build.cache_dir={tmp_path / 'cache'}",
         "--set", "build.cmake_args=['-DLLAMA_CUBLAS=on']", "--set", "verify.timeout_s=120"],
        capture_output=True, text=True, timeout=900, check=False)
    shown = done.stdout + done.stderr
    assert done.returncode == ExitCode.RUN_FAILED, shown  # the tiny wheel is not llama_cpp: verify fails

    for noise in ("Executing Cell", "Ending Cell", "Kernel is running over TCP", "Input Notebook", "Output Notebook",
                  "Working directory", "KeyboardInterrupt", "IPython.core.display", "Empty DataFrame"):
        assert noise not in shown, noise
    step_lines = [line for line in done.stdout.splitlines() if STEP_LINE.match(line)]
    (run_dir,) = outputs.iterdir()
    record = RunFolder(run_dir).record()
    assert len(step_lines) == len(record.steps) >= 6  # detect configure build repair build verify ...
    assert [line.split()[1] for line in step_lines] == [s.step.value for s in record.steps]
    assert [s.outcome for s in record.steps][:4] == [Outcome.OK, Outcome.OK, Outcome.FAILED, Outcome.OK]
    assert record.steps[3].step is Step.REPAIR and record.steps[3].findings == ["deprecated-cuda-flag"]
    assert "→ deprecated-cuda-flag → rebuilding with -DGGML_CUDA=on" in done.stdout

    assert done.stdout.count("outcome: failed") == 1  # the summary, once
    summary = done.stdout[done.stdout.index("outcome: failed"):]
    assert "wheel: " in summary and "install it: pip install" in summary
    assert f"report: playbook report {run_dir}" in summary
    verify = [s for s in record.steps if s.step is Step.VERIFY]
    assert verify and verify[0].outcome is Outcome.FAILED and verify[0].findings


@pytest.mark.long
def test_progress_prints_plain_lines_where_stderr_is_no_terminal(tmp_path):
    """Issue 25: a long build printed nothing on a non-terminal output (tqdm draws only on a terminal).
    There, the build's ninja progress is a plain line every plain_every_s seconds."""
    import io
    import time

    from playbook.chain import StepCall
    from playbook.interfaces.terminal import ConsoleReporter
    from playbook.params import load_params
    from playbook.runfolder.folder import StepRecord

    run = RunFolder.create(tmp_path, load_params(), "params/default.yaml")
    shown = io.StringIO()
    reporter = ConsoleReporter(shown, plain_every_s=1.0, terminal=False)
    reporter.on_run(run)
    reporter.on_start(StepCall(Step.BUILD, 1))
    log = run.layout.build_log(1)
    log.write_text("-- Configuring done\n")
    time.sleep(1.6)
    log.write_text("-- Configuring done\n[12/240] Building CXX object ggml.o\n")
    time.sleep(1.4)
    reporter.on_end(StepRecord(Step.BUILD, "", Outcome.OK, "", 3.0, 1))
    lines = shown.getvalue().splitlines()
    assert any(re.fullmatch(r"  build \(attempt 1\): configuring, [12] s", line) for line in lines), lines
    assert any(re.fullmatch(r"  build \(attempt 1\): compiling \[12/240\] 5%, [23] s", line) for line in lines), lines
