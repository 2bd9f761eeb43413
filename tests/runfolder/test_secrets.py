"""Secrets planted in the environment, the parameters and the build log never reach a run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cmake_project

from playbook.chain import run_chain
from playbook.params import load_params
from playbook.runfolder.folder import Outcome
from playbook.runfolder.integrity import check_run
from playbook.runfolder.layout import Step

PLANTED = {
    "MY_API_TOKEN": "planted-token-0123456789",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIplantedSECRETbPxRfiCYEXAMPLE",
    "PIP_INDEX_URL": "https://alice:planted-pass-5678@pypi.example.invalid/simple",
    "HF_TOKEN": "hf_plantedHuggingFaceToken0123456789",
}
PARAM_SECRET = "planted-parameter-secret-42"
SECRET_VALUES = [*PLANTED.values(), "planted-pass-5678", PARAM_SECRET]


def leaky_project(tmp_path: Path) -> Path:
    """A tiny project whose configure step prints secrets from its environment, then fails."""
    project = cmake_project(tmp_path)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES CXX)\n"
        'message(STATUS "token is $ENV{MY_API_TOKEN}")\n'
        'message(STATUS "index is $ENV{PIP_INDEX_URL}")\n'
        'string(REGEX REPLACE "^.*://[^:]*:([^@]*)@.*$" "\\\\1" password "$ENV{PIP_INDEX_URL}")\n'
        'message(STATUS "password alone: ${password}")\n'
        'message(STATUS "aws ${AWS}" "$ENV{AWS_SECRET_ACCESS_KEY}")\n'
        'message(STATUS "from parameters: $ENV{MY_BUILD_PASSWORD}")\n'
        'message(FATAL_ERROR "the tiny project stops here")\n'
    )
    return project


@pytest.mark.long
def test_no_planted_secret_reaches_any_file_of_a_run(tmp_path, monkeypatch):
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    project = leaky_project(tmp_path)
    overrides = [f"source.path={project}", "source.kind=path", "backend=cpu", "build.max_attempts=2",
                 "build.ccache=off", f'build.env={{"MY_BUILD_PASSWORD": "{PARAM_SECRET}"}}']
    params = load_params(None, overrides)
    run = run_chain(params, "test " + " ".join(f"--set {o}" for o in overrides), tmp_path / "outputs")

    log = run.layout.build_log(1).read_text()
    assert "token is <redacted>" in log and "password alone: <redacted>" in log  # the build did print them
    assert run.layout.notebook(Step.REPAIR, 1).is_file() and run.record().outcome == Outcome.FAILED
    files = [p for p in run.path.rglob("*") if p.is_file()]
    assert len(files) > 10
    leaks = [(p.relative_to(run.path).as_posix(), secret) for p in files for secret in SECRET_VALUES
             if secret.encode() in p.read_bytes()]
    assert leaks == []
    for notebook in run.path.glob("*.ipynb"):
        json.loads(notebook.read_text())  # redaction kept every notebook valid
    assert check_run(run.path).ok
