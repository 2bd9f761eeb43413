from __future__ import annotations

import json
import subprocess
import sys

from playbook.errors import ExitCode
from playbook.interfaces.cli import main


def playbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "playbook", *args], capture_output=True, text=True)


def test_help_explains_each_command():
    out = playbook("--help").stdout
    for command in ("run", "plan", "detect", "diagnose"):
        assert f"\n  {command}" in out


def test_plan_prints_decisions_with_reasons():
    out = playbook("plan", "--params", "params/cpu.yaml")
    assert out.returncode == 0
    assert "CMAKE_ARGS=-DGGML_CUDA=off" in out.stdout and "because asked for in parameters" in out.stdout


def test_bad_parameter_stops_with_exit_2():
    out = playbook("run", "--set", "model.shape=huge")
    assert out.returncode == 2
    assert "parameter model.shape = 'huge'; accepted values: tiny, 1b, 7b" in out.stderr


def test_diagnose_a_users_log(tmp_path, capsys):
    log = tmp_path / "user.log"
    log.write_text("CMake Warning:\n  LLAMA_CUBLAS is deprecated and will be removed in the future.\n"
                   "  Use GGML_CUDA instead\n")
    assert main(["diagnose", str(log), "--json"]) == ExitCode.FOUND  # distinct from a clean log's 0
    findings = json.loads(capsys.readouterr().out)
    assert findings[0]["id"] == "deprecated-cuda-flag"
    assert set(findings[0]) >= {"id", "title", "evidence", "fix", "automatic"}
    assert main(["diagnose", str(log)]) == ExitCode.FOUND
    assert "[deprecated-cuda-flag]" in capsys.readouterr().out


def test_diagnose_clean_log_and_unreadable_file(tmp_path, capsys):
    clean = tmp_path / "clean.log"
    clean.write_text("Successfully built llama-cpp-python\n")
    assert main(["diagnose", str(clean), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["diagnose", str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_diagnose_names_an_unrecognised_failure_with_its_stage(tmp_path, capsys):
    log = tmp_path / "link.log"
    log.write_text("[99/100] Linking CXX shared library bin/libllama.so\n"
                   "/usr/bin/ld: bin/libllama.so: undefined reference to `llama_frobnicate'\n"
                   "collect2: error: ld returned 1 exit status\n")
    assert main(["diagnose", str(log), "--json"]) == ExitCode.FOUND
    (finding,) = json.loads(capsys.readouterr().out)
    assert (finding["id"], finding["stage"], finding["line_number"]) == ("unrecognised-failure", "link", 2)
    assert main(["diagnose", str(log)]) == ExitCode.FOUND
    assert "[unrecognised-failure] link failed, and no known failure matches (link)" in capsys.readouterr().out


def test_diagnose_innocuous_lines_exit_0(tmp_path, capsys):
    log = tmp_path / "configure.log"
    log.write_text("-- Looking for pthread_create in pthreads - not found\n"
                   "ggml.c:12:5: warning: 'ggml_foo' is deprecated [-Wdeprecated-declarations]\n")
    assert main(["diagnose", str(log)]) == ExitCode.OK
    assert "no failure found" in capsys.readouterr().out
