from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playbook.errors import ExitCode
from playbook.interfaces.cli import main


def playbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "playbook", *args], capture_output=True, text=True, check=False)


def test_help_explains_each_command_once():
    """Issue 34: the description listed the commands and argparse listed them again."""
    from playbook.interfaces.cli import COMMANDS

    out = playbook("--help").stdout
    first_words = [line.split()[0] for line in out.splitlines() if line.strip()]
    for command in COMMANDS:
        assert first_words.count(command) == 1, out


@pytest.mark.long
def test_plan_prints_decisions_with_reasons():
    out = playbook("plan", "--params", "params/cpu.yaml")
    assert out.returncode == 0
    assert "CMAKE_ARGS=-DGGML_CUDA=off" in out.stdout and "because asked for in parameters" in out.stdout


@pytest.mark.long
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
    assert main(["diagnose", str(log), "--json"]) == ExitCode.UNRECOGNISED  # distinct from a named failure's 6
    (finding,) = json.loads(capsys.readouterr().out)
    assert (finding["id"], finding["stage"], finding["line_number"]) == ("unrecognised-failure", "link", 2)
    assert main(["diagnose", str(log)]) == ExitCode.UNRECOGNISED
    assert "[unrecognised-failure] link failed, and no known failure matches (link)" in capsys.readouterr().out


def test_diagnose_refuses_a_binary_file_with_its_own_status(tmp_path, capsys):
    program = tmp_path / "ls"
    program.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 64 + b"error: not a log line\n")
    assert main(["diagnose", str(program)]) == ExitCode.NOT_A_LOG
    captured = capsys.readouterr()
    assert "is a binary file, not a log" in captured.err and "no failure found" not in captured.out
    if Path("/bin/ls").is_file():
        assert main(["diagnose", "/bin/ls", "--json"]) == ExitCode.NOT_A_LOG


def test_diagnose_help_names_every_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for status, meaning in [(ExitCode.FOUND, "a known failure was named"), (ExitCode.UNRECOGNISED, "the text plainly failed"),
                            (ExitCode.OK, "no failure found"), (ExitCode.NOT_A_LOG, "the file is binary, not a log")]:
        assert f"{int(status)} {meaning}" in out


def test_diagnose_innocuous_lines_exit_0(tmp_path, capsys):
    log = tmp_path / "configure.log"
    log.write_text("-- Looking for pthread_create in pthreads - not found\n"
                   "ggml.c:12:5: warning: 'ggml_foo' is deprecated [-Wdeprecated-declarations]\n")
    assert main(["diagnose", str(log)]) == ExitCode.OK
    assert "no failure found" in capsys.readouterr().out


@pytest.mark.long
def test_a_version_that_does_not_exist_is_refused_before_any_run_folder(tmp_path):
    outputs = tmp_path / "outputs"
    out = playbook("run", "--set", "source.version=9.9.9", "--output", str(outputs))
    assert out.returncode == ExitCode.BAD_INPUT, out.stderr
    assert "source.version 9.9.9" in out.stderr and "Traceback" not in out.stderr
    assert "the newest are 0.3." in out.stderr or "cannot be checked" in out.stderr  # offline: says so
    assert out.stderr.count("0.3.36") <= 1  # the version list is not dumped
    assert not outputs.exists()


@pytest.mark.long
def test_a_plan_that_must_fail_is_refused_before_building_unless_forced(tmp_path, seeded_cache):
    outputs = tmp_path / "outputs"
    out = playbook("run", "--set", "backend=cuda", "--set", f"cuda.toolkit={tmp_path / 'no-toolkit'}",
                   "--set", f"build.cache_dir={seeded_cache}", "--output", str(outputs))
    assert out.returncode == ExitCode.REFUSED, out.stdout + out.stderr
    assert "no CUDA toolkit" in out.stderr and "--force" in out.stderr
    (run_dir,) = outputs.iterdir()
    assert not list(run_dir.glob("build-attempt-*")) and not (seeded_cache / "wheels").exists()
    assert json.loads((run_dir / "run.json").read_text())["outcome"] == "failed"


@pytest.mark.long
def test_cmake_args_in_the_environment_are_named_as_ignored():
    env = {**os.environ, "CMAKE_ARGS": "-DGGML_AVX2=off"}
    out = subprocess.run([sys.executable, "-m", "playbook", "plan", "--params", "params/cpu.yaml"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert "CMAKE_ARGS is set in your environment (-DGGML_AVX2=off) and is ignored" in out.stdout
    assert "build.cmake_args" in out.stdout
    assert "-DGGML_AVX2=off" not in out.stdout.split("CMAKE_ARGS=", 1)[1].splitlines()[0]


def test_ctrl_c_prints_the_exact_resume_command(tmp_path, capsys, monkeypatch):
    """Issue 34: after Ctrl-C only run.json said how to continue; the terminal must say it too."""
    from conftest import cmake_project

    import playbook.chain
    from playbook.runfolder.folder import Outcome, RunFolder

    def ctrl_c(run, call, *, verbose=False):  # what a KeyboardInterrupt in the first step's notebook looks like
        raise KeyboardInterrupt

    monkeypatch.setattr(playbook.chain, "execute_step", ctrl_c)
    outputs = tmp_path / "out puts"  # a space: the printed command must be one a shell takes as is
    status = main(["run", "--output", str(outputs), "--set", "backend=cpu", "--set", "source.kind=path",
                   "--set", f"source.path={cmake_project(tmp_path)}", "--set", f"build.cache_dir={tmp_path / 'cache'}"])
    assert status == ExitCode.INTERRUPTED
    (run_dir,) = outputs.iterdir()
    captured = capsys.readouterr()
    command = f"playbook resume '{run_dir.absolute()}'"
    assert f"\n  {command}\n" in captured.out, captured.out
    assert "playbook: interrupted" in captured.err
    record = RunFolder(run_dir).record()
    assert record.outcome is Outcome.INTERRUPTED and command in record.message


@pytest.mark.parametrize("content", ["", "\n \n\t\n"])
def test_diagnose_an_empty_file_says_it_is_empty(tmp_path, capsys, content):
    """Issue 34: an empty file got "no failure found", as if a healthy log had been read."""
    empty = tmp_path / "build.log"
    empty.write_text(content)
    for json_flag in ([], ["--json"]):
        assert main(["diagnose", str(empty), *json_flag]) == ExitCode.BAD_INPUT
        captured = capsys.readouterr()
        assert f"playbook: {empty} is empty" in captured.err and "no failure found" not in captured.out
        assert captured.out == ""
