"""The GPU acceptance verdict, read from archived GPU runs: a CUDA run that built and verified on attempt 1 passes;
a run that needed a repair, or that planned another backend, does not, and the verdict says why."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from playbook.interfaces.acceptance import judge, main

REFERENCE = Path(__file__).resolve().parents[2] / "outputs" / "reference"
CUDA_FIRST_TIME = REFERENCE / "20261125T160940Z-vm"  # H100, CUDA sm_90, verify ok on attempt 1
REPAIRED = REFERENCE / "20261125T214733Z-vm"  # H100, a CPU+RPC wheel repaired for cxx-runtime-copies


def test_a_cuda_run_right_on_its_first_attempt_passes():
    verdict = judge(CUDA_FIRST_TIME, "abc123")
    assert verdict.passed and verdict.reasons == [] and verdict.commit == "abc123"
    assert verdict.backend == "cuda" and "H100" in verdict.gpu and verdict.build_attempts == 1
    assert verdict.build_s > 0 and verdict.verify_s > 0


def test_a_repaired_run_of_another_backend_fails_and_says_why():
    verdict = judge(REPAIRED, "abc123")
    assert not verdict.passed
    assert any("not a GPU backend the parameters ask for" in r for r in verdict.reasons)
    assert any(r.startswith("verify attempt 1 ended failed") for r in verdict.reasons)
    assert "repair ran: the first attempt was not right" in verdict.reasons


def test_the_command_exits_by_the_verdict_and_writes_it(tmp_path, capsys):
    assert main([str(REPAIRED), "--commit", "abc123", "--write", str(tmp_path / "v.json")]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert json.loads((tmp_path / "v.json").read_text())["passed"] is False
    assert main([str(CUDA_FIRST_TIME), "--commit", "abc123"]) == 0


LAST_GATE = REFERENCE / "gpu-acceptance.json"
# What the gate stands for: a change here is done only once the gate has passed on a GPU machine after it.
GATED = ["playbook/steps/configure", "playbook/steps/build.py", "playbook/steps/repair.py", "playbook/steps/caches.py",
         "playbook/steps/detect.py", "playbook/steps/detect", "playbook/facts.py", "playbook/probing.py", "playbook/verify",
         "playbook/backends", "playbook/toolkits", "playbook/child_scripts", "params/gpu-reference.yaml"]


def test_the_last_archived_gate_passed_and_its_run_says_so():
    archived = json.loads(LAST_GATE.read_text())
    run_dir = REFERENCE / archived["run_id"]
    verdict = judge(run_dir, archived["commit"])
    assert archived["passed"] and verdict.passed and verdict.backend == "cuda" and verdict.build_attempts == 1
    assert (verdict.gpu, verdict.build_s, verdict.verify_s) == (archived["gpu"], archived["build_s"], archived["verify_s"])
    # the environment named the copying compiler; the plan moved both the C++ and the CUDA host compiler off it
    assert any(d.startswith("C++ compiler: /usr/bin/c++") for d in archived["decisions"])
    assert any(d.startswith("CUDA host compiler: /usr/bin/c++") for d in archived["decisions"])


def test_no_gated_code_changed_since_the_commit_the_gate_passed_on():
    repo = REFERENCE.parents[1]
    if not (repo / ".git").exists():
        pytest.skip("no git history in this copy")
    commit = json.loads(LAST_GATE.read_text())["commit"]
    changed = subprocess.run(["git", "diff", "--name-only", commit, "HEAD", "--", *GATED], cwd=repo, check=True,
                             capture_output=True, text=True, timeout=60).stdout.split()
    assert not changed, (f"changed since the GPU gate passed on {commit}: {', '.join(changed)}; run "
                         "scripts/gpu-acceptance.sh on a fresh GPU machine and archive its run")
