"""Real pip builds that fail fast, diagnosed and repaired by the playbook."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from playbook.knowledge.failures import diagnose_file
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.steps.build import pip_wheel_command, run_build
from playbook.steps.configure import configure
from playbook.steps.repair import apply_remedies
from playbook.steps.source import SourceInfo


def tiny_source(tmp_path: Path) -> SourceInfo:
    """A project that asks for the same build backend as llama-cpp-python."""
    project = tmp_path / "project"
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
        '[project]\nname = "tiny"\nversion = "0.1"\n[tool.scikit-build]\nwheel.packages = []\n'
    )
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES NONE)\n")
    return SourceInfo("tree", str(project), "0.1", "", "test project")


@pytest.fixture(scope="module")
def python_without_backend(tmp_path_factory) -> str:
    """A fresh virtual environment with pip but without scikit-build-core."""
    venv = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import scikit_build_core"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("the base interpreter has scikit-build-core installed")
    return str(python)


def test_command_is_an_argument_list(this_machine, tmp_path):
    plan = configure(this_machine, load_params(None, ["backend=cpu"]))
    source = tiny_source(tmp_path)
    command = pip_wheel_command(plan, Path(source.path), tmp_path / "wheels", "python3")
    assert command[:4] == ["python3", "-m", "pip", "wheel"]
    assert "--no-build-isolation" in command and command[-1] == source.path


@pytest.mark.long
def test_missing_backend_is_recorded_diagnosed_and_repaired(this_machine, tmp_path, python_without_backend):
    plan = configure(this_machine, load_params(None, ["backend=cpu"]))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = run_build(plan, tiny_source(tmp_path), Layout(run_dir), tmp_path / "cache", python=python_without_backend,
                       timeout_s=300)
    assert not result.ok and result.exit_code != 0 and result.wheel is None
    log = run_dir / result.log_file
    assert "CMAKE_ARGS=-DGGML_CUDA=off" in log.read_text()
    findings = diagnose_file(log)
    assert findings and findings[0].id == "build-backend-missing"
    fixed = apply_remedies(plan, findings, this_machine)
    assert fixed is not None and fixed.build_isolation is True

    # the retry: pip fetches the backend into an isolated build environment from the index
    retried = run_build(dataclasses.replace(fixed, extra_packages=[]), tiny_source(tmp_path / "again"), Layout(run_dir),
                        tmp_path / "cache", python=python_without_backend, timeout_s=600)
    assert retried.ok, (run_dir / retried.log_file).read_text()[-2000:]
    assert retried.wheel.name.startswith("tiny-0.1-")
