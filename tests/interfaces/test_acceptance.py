"""The GPU acceptance verdict, read from archived GPU runs: a CUDA run that built and verified on attempt 1 passes;
a run that needed a repair, or that planned another backend, does not, and the verdict says why."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert any("not cuda" in r for r in verdict.reasons)
    assert any(r.startswith("verify attempt 1 ended failed") for r in verdict.reasons)
    assert "repair ran: the first attempt was not right" in verdict.reasons


def test_the_command_exits_by_the_verdict_and_writes_it(tmp_path, capsys):
    assert main([str(REPAIRED), "--commit", "abc123", "--write", str(tmp_path / "v.json")]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert json.loads((tmp_path / "v.json").read_text())["passed"] is False
    assert main([str(CUDA_FIRST_TIME), "--commit", "abc123"]) == 0
