"""The chain: its state machine, each step notebook executed by papermill, and papermill's own CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import cmake_project

from playbook import resources
from playbook.backends import registry
from playbook.chain import StepCall, execute_step, next_step, open_step
from playbook.errors import MissingPredecessor, StepFailed
from playbook.params import BACKEND_SETTINGS, PARAMETER_GROUPS, load_params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.serialization import read_json
from playbook.steps.configure import BuildPlan
from playbook.steps.repair import Diagnosis

STEPS = ("detect", "configure", "build", "repair", "verify")
PAPERMILL = [sys.executable, "-m", "papermill", "--no-progress-bar"]
DETECT, CONFIGURE = StepCall(Step.DETECT), StepCall(Step.CONFIGURE)


def new_run(tmp_path: Path, *overrides: str) -> RunFolder:
    params = load_params(None, [f"source.path={cmake_project(tmp_path)}", "source.kind=path", "backend=cpu", *overrides])
    return RunFolder.create(tmp_path / "outputs", params, "test")


def facts_file(path: Path, **fields: object) -> None:
    path.write_text(json.dumps(fields))


# ---------------------------------------------------------------- the state machine


def test_next_step_follows_the_files_through_a_repaired_attempt(tmp_path):
    run = RunFolder(tmp_path)
    layout = run.layout
    assert next_step(run) == DETECT
    facts_file(layout.detect_facts)
    assert next_step(run) == CONFIGURE
    facts_file(layout.plan(1))
    assert next_step(run) == StepCall(Step.BUILD, 1)
    facts_file(layout.build_result(1), ok=False)
    assert next_step(run) == StepCall(Step.REPAIR, 1)
    facts_file(layout.diagnosis(1))
    assert next_step(run) is None  # repair wrote no next plan: the chain has ended
    facts_file(layout.plan(2))
    assert next_step(run) == StepCall(Step.BUILD, 2)
    facts_file(layout.build_result(2), ok=True)
    assert next_step(run) == StepCall(Step.VERIFY, 2)
    facts_file(layout.verify_result(2), ok=False)
    assert next_step(run) == StepCall(Step.REPAIR, 2)
    facts_file(layout.verify_result(2), ok=True)
    assert next_step(run) is None


# ---------------------------------------------------------------- the notebooks, run by the chain


@pytest.mark.parametrize("step", STEPS)
def test_step_notebooks_are_clean_and_take_the_playbooks_parameters(step):
    notebook = nbformat.read(resources.notebook(step), as_version=4)
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for name in ("run_dir", "params_file", *PARAMETER_GROUPS, BACKEND_SETTINGS):
        assert f"\n{name} = " in "\n" + tagged[0].source
    assert not any(f"\n{unit.name} = " in "\n" + tagged[0].source for unit in registry.units())  # names no backend
    assert all(not c.get("outputs") and not c.get("execution_count") for c in notebook.cells if c.cell_type == "code")


@pytest.mark.long
def test_detect_and_configure_hand_facts_over_files(tmp_path):
    run = new_run(tmp_path)
    execute_step(run, DETECT)
    execute_step(run, CONFIGURE)
    detect = json.loads(run.layout.detect_facts.read_text())
    assert detect["python"]["executable"] and "environment" in detect
    plan = read_json(BuildPlan, run.layout.plan(1))
    assert plan.backend == "cpu" and plan.attempt == 1
    executed = nbformat.read(run.layout.notebook(Step.CONFIGURE), as_version=4)
    assert "CMAKE_ARGS=-DGGML_CUDA=off" in json.dumps([c.get("outputs") for c in executed.cells])
    steps = run.record().steps
    assert [(s.step, s.outcome, s.notebook) for s in steps] == [
        (Step.DETECT, Outcome.OK, "01-detect.ipynb"), (Step.CONFIGURE, Outcome.OK, "02-configure.ipynb")]
    assert set(json.loads(run.layout.manifest.read_text())["files"]) >= {"01-detect.ipynb", "detect.json"}


@pytest.mark.long
def test_failed_build_is_recorded_then_repaired_in_a_new_attempt(tmp_path):
    run = new_run(tmp_path, "build.cmake_args=['-DCMAKE_CXX_COMPILER=/nonexistent/bin/g++']")
    for call in (DETECT, CONFIGURE, StepCall(Step.BUILD, 1)):
        execute_step(run, call)
    build = json.loads(run.layout.build_result(1).read_text())
    assert build["ok"] is False and build["exit_code"] != 0
    assert "/nonexistent/bin/g++" in run.layout.build_log(1).read_text()
    execute_step(run, StepCall(Step.REPAIR, 1))
    diagnosis = read_json(Diagnosis, run.layout.diagnosis(1))
    assert "cxx-compiler-missing" in [f.id for f in diagnosis.findings]
    build_record = next(s for s in run.record().steps if s.step is Step.BUILD)
    assert build_record.outcome is Outcome.FAILED  # what the step found, not "the notebook ran"


@pytest.mark.long
def test_a_step_before_its_predecessor_is_refused_and_recorded(tmp_path):
    run = new_run(tmp_path)
    with pytest.raises(StepFailed, match="needs build-attempt-1.json, which build .attempt 1. writes"):
        execute_step(run, StepCall(Step.VERIFY, 1))  # nothing was built in this run
    assert run.layout.notebook(Step.VERIFY, 1).is_file()
    assert run.record().steps[-1].outcome is Outcome.ERROR


def test_opened_by_hand_detect_starts_a_run_and_later_steps_continue_it(tmp_path):
    outputs = tmp_path / "outputs"
    with pytest.raises(MissingPredecessor, match="run notebooks/detect.ipynb first"):
        open_step("configure", output_root=outputs)
    started, call = open_step("detect", output_root=outputs)
    assert call == DETECT and started.path.parent == outputs
    with pytest.raises(MissingPredecessor, match="configure needs detect.json"):
        open_step("configure", output_root=outputs)
    (started.layout.detect_facts).write_text("{}")
    assert open_step("configure", output_root=outputs)[0].path == started.path


@pytest.mark.long
def test_a_step_run_again_by_hand_keeps_the_earlier_one(tmp_path):
    """A person re-runs the configure notebook on a run folder (interactive, as in JupyterLab)."""
    import papermill

    run = new_run(tmp_path)
    execute_step(run, DETECT)
    execute_step(run, CONFIGURE)
    first_plan = run.layout.plan(1).read_text()
    papermill.execute_notebook(str(resources.notebook("configure")), str(tmp_path / "by-hand.ipynb"),
                               parameters={"run_dir": str(run.path), "interactive": True},
                               kernel_name="python3", progress_bar=False)
    kept = run.path / "history" / "001-configure"
    assert (kept / "02-configure.ipynb").is_file() and (kept / "plan-attempt-1.json").read_text() == first_plan
    assert run.layout.plan(1).is_file() and run.layout.notebook(Step.DETECT).is_file()
    assert "its earlier files are kept in history/001-configure" in (tmp_path / "by-hand.ipynb").read_text()


# ---------------------------------------------------------------- papermill's own CLI


def papermill_cli(tmp_path: Path, step: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PAPERMILL, str(resources.notebook(step)), str(tmp_path / f"out-{step}.ipynb"), *args],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)


@pytest.mark.long
def test_papermill_cli_starts_a_run_in_a_new_folder_and_takes_a_parameter_file(tmp_path):
    project = cmake_project(tmp_path)
    run_dir = tmp_path / "runs" / "x"
    done = papermill_cli(tmp_path, "detect", "-p", "run_dir", str(run_dir), "-p", "source",
                         json.dumps({"kind": "path", "path": str(project)}), "-p", "build", '{"ccache": "off"}')
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run_dir / "detect.json").is_file() and RunFolder(run_dir).params().source.path == str(project)
    done = papermill_cli(tmp_path, "configure", "-f", str(resources.params_dir() / "cpu.yaml"),
                         "-p", "run_dir", str(run_dir), "-y", f"source: {{kind: path, path: '{project}'}}")
    assert done.returncode == 0, done.stderr[-2000:]
    plan = read_json(BuildPlan, RunFolder(run_dir).layout.plan(1))
    assert plan.backend == "cpu"
    assert (run_dir / "history" / "001-params" / "params.json").is_file()  # the parameters changed: kept
    done = papermill_cli(tmp_path, "configure", "-p", "run_dir", str(run_dir), "-p", "backend", "auto")
    assert done.returncode == 0 and RunFolder(run_dir).params().backend == "auto"


@pytest.mark.long
def test_papermill_cli_step_without_its_predecessor_says_which_to_run_first(tmp_path):
    run_dir = tmp_path / "fresh"
    done = papermill_cli(tmp_path, "configure", "-p", "run_dir", str(run_dir))
    assert done.returncode != 0
    error = [line for line in done.stderr.splitlines() if "MissingPredecessor" in line]
    assert error and "configure needs detect.json, which detect writes: run notebooks/detect.ipynb" in error[0]
    assert "Traceback" not in (tmp_path / "out-configure.ipynb").read_text()  # one sentence, no traceback


@pytest.mark.long
def test_playbook_chain_and_papermill_cli_write_the_same_run_folder(tmp_path):
    by_chain = new_run(tmp_path / "a", "build.ccache=off")
    for call in (DETECT, CONFIGURE, StepCall(Step.BUILD, 1)):
        execute_step(by_chain, call)
    by_hand = tmp_path / "b" / "run"
    source = json.dumps({"kind": "path", "path": str(cmake_project(tmp_path / "b"))})
    for step in ("detect", "configure", "build"):
        done = papermill_cli(tmp_path, step, "-p", "run_dir", str(by_hand), "-p", "backend", "cpu",
                             "-p", "source", source, "-p", "build", '{"ccache": "off"}', "-p", "interactive", "False")
        assert done.returncode == 0, done.stderr[-2000:]

    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.suffix != ".ipynb"
                and not p.name.startswith(".")}

    assert files(by_chain.path) - {"manifest.json"} == files(by_hand) - {"manifest.json"}
    chain_steps = [(s.step, s.attempt, s.outcome) for s in by_chain.record().steps]
    hand_steps = [(s.step, s.attempt, s.outcome) for s in RunFolder(by_hand).record().steps]
    assert chain_steps == hand_steps and len(chain_steps) == 3


@pytest.mark.long
def test_a_folder_made_step_by_step_names_its_notebooks_and_check_says_to_resume(tmp_path):
    """Issue 25: the README's papermill lines (interactive left at its default, each output notebook in the run
    folder) filed an empty copy of each notebook under history/, recorded "notebook": "" in run.json, and
    `playbook check` failed with "no manifest.json". The notebook papermill is writing is this step's own; the
    unended run says what happened and what to run; resumed, the folder is sealed and checks whole."""
    from playbook.interfaces.cli import main
    from playbook.runfolder.integrity import check_run

    run_dir = tmp_path / "outputs" / "mine"
    run_dir.mkdir(parents=True)
    run = RunFolder(run_dir)
    source = json.dumps({"kind": "path", "path": str(cmake_project(tmp_path))})
    for call in (DETECT, CONFIGURE, StepCall(Step.BUILD, 1)):
        done = subprocess.run([*PAPERMILL, str(resources.notebook(call.step.value)),
                               str(run.layout.notebook(call.step, call.attempt)), "-p", "run_dir", str(run_dir),
                               "-p", "backend", "cpu", "-p", "source", source, "-p", "build", '{"ccache": "off"}'],
                              capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    assert not (run_dir / "history").exists()
    steps = run.record().steps
    assert [s.notebook for s in steps] == ["01-detect.ipynb", "02-configure.ipynb", "03-build-attempt-1.ipynb"]
    assert all(s.outcome is Outcome.OK for s in steps) and all((run_dir / s.notebook).is_file() for s in steps)
    [problem] = check_run(run_dir).problems
    assert "the run stopped after build (attempt 1) (ok) without ending" in problem
    assert f"`playbook resume {run_dir}` runs the steps left and seals it" in problem
    assert check_run(run_dir).lines()[0] == f"{run_dir}: FAILED (no manifest to check files against)"  # not "()"

    main(["resume", str(run_dir)])  # verify fails (the tiny wheel is no llama_cpp): the run ends, sealed
    assert run.record().outcome is Outcome.FAILED
    assert check_run(run_dir).ok, check_run(run_dir).lines()
    assert [s.notebook for s in run.record().steps][:3] == [s.notebook for s in steps]


def readme_block(heading: str) -> list[str]:
    """The command lines of the first ```bash block under a heading of docs/steps.md (README.md's until issue 34)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "steps.md").read_text()
    section = text.split(heading, 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.long
def test_the_readmes_papermill_steps_work_as_written(tmp_path):
    """A new user copies these lines into a shell in a fresh clone: each one must work as it stands."""
    import shlex

    root = Path(__file__).resolve().parent.parent
    for folder in ("notebooks", "params"):
        (tmp_path / folder).symlink_to(root / folder)
    lines = readme_block("## One step at a time, with papermill's own CLI")
    commands = [shlex.split(line, comments=True) for line in lines]
    assert [c[0] for c in commands].count(".venv/bin/papermill") == 2
    assert commands[-1][:2] == [".venv/bin/playbook", "resume"]
    for line, command in zip(lines[:-1], commands[:-1]):  # playbook resume builds llama.cpp: the chain tests cover it
        if command[:2] == ["mkdir", "-p"]:
            (tmp_path / command[-1]).mkdir(parents=True)
            continue
        done = subprocess.run([*PAPERMILL, *command[1:]], capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
    run = RunFolder(tmp_path / "outputs" / "mine")
    # the names the chain gives these notebooks
    assert run.layout.notebook(Step.DETECT).is_file() and run.layout.notebook(Step.CONFIGURE).is_file()
    assert run.params().build.jobs == 2 and read_json(BuildPlan, run.layout.plan(1)).backend == "cpu"
