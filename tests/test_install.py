"""`pip install .` makes a real wheel that carries the notebooks, the parameter sets and the knowledge,
and the installed playbook works from a folder that is not the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out),
                           str(ROOT)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = out.glob("llama_cpp_playbook-*.whl")
    return found


@pytest.mark.long
def test_the_wheel_carries_notebooks_params_knowledge_and_child_scripts(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for step in ("detect", "configure", "build", "repair", "verify", "compare", "00-walkthrough"):
        assert f"playbook/_bundled/notebooks/{step}.ipynb" in names
    assert {"playbook/_bundled/params/default.yaml", "playbook/_bundled/params/cpu.yaml"} <= names
    assert {"playbook/knowledge/failures.yaml", "playbook/knowledge/cuda.yaml"} <= names
    assert {"playbook/child_scripts/probe.py", "playbook/child_scripts/symbols.py"} <= names


@pytest.mark.long
def test_installed_wheel_plans_and_runs_a_step_outside_the_checkout(wheel, tmp_path):
    venv = tmp_path / "fresh venv"  # a space in the path, as on many Windows machines
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # The dependencies come from this test's environment; the playbook itself only from the wheel
    # (a path in a .pth file is not a site folder, so the checkout's editable install stays out).
    fresh_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     capture_output=True, text=True, check=True).stdout.strip())
    (fresh_site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600, cwd=work, check=False)

    where = run("-c", "import playbook, playbook.resources as r; print(playbook.__file__); "
                      "print(r.notebooks_dir()); print(r.default_output_root())")
    module, notebooks, outputs = where.stdout.split("\n")[:3]
    assert Path(module).is_relative_to(venv) and Path(notebooks).is_relative_to(venv)
    assert Path(outputs) == work / "outputs"

    plan = run("-m", "playbook", "plan", "--params", "params/cpu.yaml")
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "backend cpu" in plan.stdout and "CMAKE_ARGS=" in plan.stdout

    step = run("-m", "papermill", "--no-progress-bar", str(Path(notebooks) / "detect.ipynb"), "detect-out.ipynb",
               "-p", "run_dir", "runs/first", "-p", "backend", "cpu")
    assert step.returncode == 0, step.stderr[-3000:]
    assert (work / "runs" / "first" / "detect.json").is_file()
    assert (work / "runs" / "first" / "run.json").is_file()


@pytest.mark.long
def test_the_project_builds_without_build_isolation_in_its_own_venv(tmp_path):
    """`pip install --no-build-isolation .` uses the venv's setuptools, which must read pyproject.toml's
    PEP 639 license (setuptools >= 77: scripts/setup-venv.sh installs it; Python 3.11's venv brings 65)."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "outputs", "tests", "build",
                                                                 "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
                           str(tmp_path / "wheels"), str(source)], check=False, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (built,) = (tmp_path / "wheels").glob("llama_cpp_playbook-*.whl")
    assert "playbook/_bundled/params/cpu.yaml" in zipfile.ZipFile(built).namelist()
