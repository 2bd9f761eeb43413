"""Each step notebook executed by papermill on prepared inputs, and the runner's chain around them."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from playbook.errors import StepFailed
from playbook.facts import read_facts
from playbook.params import load_params
from playbook.plan import BuildPlan
from playbook.provenance import RunFolder
from playbook.runner import NOTEBOOKS, execute_step
from playbook.steps import Diagnosis

STEPS = ("detect", "configure", "build", "repair", "verify", "00-walkthrough")


def cmake_project(tmp_path: Path) -> Path:
    """The smallest source tree the playbook accepts: scikit-build-core, CMake, a vendor/llama.cpp folder."""
    project = tmp_path / "src"
    (project / "vendor" / "llama.cpp").mkdir(parents=True)
    (project / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text("# stands in for llama.cpp\n")
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES CXX)\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
        '[project]\nname = "tiny"\nversion = "0.1"\n'
    )
    return project


def new_run(tmp_path: Path, *overrides: str) -> RunFolder:
    params = load_params(None, [f"source.path={cmake_project(tmp_path)}", "source.kind=path", "backend=cpu", *overrides])
    return RunFolder.create(tmp_path / "outputs", params, "test")


@pytest.mark.parametrize("step", STEPS)
def test_step_notebooks_are_clean_and_parameterized(step):
    notebook = nbformat.read(NOTEBOOKS / f"{step}.ipynb", as_version=4)
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "run_dir" in tagged[0].source
    assert all(not c.get("outputs") and not c.get("execution_count") for c in notebook.cells if c.cell_type == "code")


def test_detect_and_configure_hand_facts_over_files(tmp_path):
    run = new_run(tmp_path)
    execute_step(run, "detect")
    execute_step(run, "configure")
    detect = json.loads(run.file("detect.json").read_text())
    assert detect["python"]["executable"] and "environment" in detect
    plan = read_facts(BuildPlan, run.file("plan-attempt-1.json"))
    assert plan.backend == "cpu" and plan.attempt == 1
    executed = nbformat.read(run.file("02-configure.ipynb"), as_version=4)
    text = json.dumps([c.get("outputs") for c in executed.cells])
    assert "CMAKE_ARGS=-DGGML_CUDA=off" in text
    assert [s.step for s in run.record().steps] == ["detect", "configure"]
    assert set(json.loads(run.file("manifest.json").read_text())["files"]) >= {"01-detect.ipynb", "detect.json"}


def test_failed_build_is_recorded_then_repaired_in_a_new_attempt(tmp_path):
    run = new_run(tmp_path, "build.cmake_args=['-DCMAKE_CXX_COMPILER=/nonexistent/bin/g++']")
    for step in ("detect", "configure"):
        execute_step(run, step)
    execute_step(run, "build", 1)
    build = json.loads(run.file("build-attempt-1.json").read_text())
    assert build["ok"] is False and build["exit_code"] != 0
    assert "/nonexistent/bin/g++" in run.file("build-attempt-1.log").read_text()
    execute_step(run, "repair", 1)
    diagnosis = read_facts(Diagnosis, run.file("diagnosis-attempt-1.json"))
    assert "cxx-compiler-missing" in [f["id"] for f in diagnosis.findings]
    assert run.file("03-build-attempt-1.ipynb").is_file() and run.file("04-repair-attempt-1.ipynb").is_file()


def test_a_notebook_that_raises_is_kept_and_reported(tmp_path):
    run = new_run(tmp_path)
    with pytest.raises(StepFailed, match="step verify raised"):
        execute_step(run, "verify")  # nothing was built in this run
    assert run.file("05-verify.ipynb").is_file()
    assert run.record().steps[-1].outcome == "error"


def test_opened_by_hand_detect_starts_a_run_and_later_steps_continue_it(tmp_path, monkeypatch):
    import playbook.runner as runner

    monkeypatch.setattr(runner, "OUTPUT_ROOT", tmp_path / "outputs")
    with pytest.raises(StepFailed, match="run the detect notebook first"):
        runner.open_run()
    started = runner.open_run(new=True)
    assert runner.open_run().path == started.path
    assert runner.open_run(started.path).path == started.path


def test_a_step_run_again_by_hand_keeps_the_earlier_one(tmp_path):
    """A person re-runs the configure notebook on a run folder (interactive, as in JupyterLab)."""
    import papermill

    run = new_run(tmp_path)
    execute_step(run, "detect")
    execute_step(run, "configure")
    first_plan = run.file("plan-attempt-1.json").read_text()
    papermill.execute_notebook(str(NOTEBOOKS / "configure.ipynb"), str(tmp_path / "by-hand.ipynb"),
                               parameters={"run_dir": str(run.path), "interactive": True},
                               kernel_name="python3", progress_bar=False)
    kept = run.path / "history" / "001-configure"
    assert (kept / "02-configure.ipynb").is_file() and (kept / "plan-attempt-1.json").read_text() == first_plan
    assert run.file("plan-attempt-1.json").is_file() and run.file("01-detect.ipynb").is_file()
    assert "its earlier files are kept in history/001-configure" in (tmp_path / "by-hand.ipynb").read_text()
