"""Faults provoked for real: each ends as a named finding with the run folder intact.

A silent build, a broken wheel-cache entry, two runs at once on one cache, a full disk, `kill -9`
during the build and during verify (then `playbook resume`), a read-only output folder. The source
is a small CMake project with one C++ file, so each fault costs seconds, not a llama.cpp build."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import compiled_project, tree_source

from playbook.errors import ExitCode
from playbook.knowledge.failures import diagnose_file
from playbook.params import load_params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.integrity import check_run
from playbook.runfolder.layout import Layout, Step
from playbook.serialization import read_json
from playbook.steps.build import BuildResult, run_build
from playbook.steps.caches import cached_wheel
from playbook.steps.configure import configure


def sleeping_launcher(tmp_path: Path, marker: Path) -> Path:
    """A compiler launcher that goes silent while ``marker`` exists, as a hung compiler does."""
    launcher = tmp_path / "sleepy-launcher"
    launcher.write_text(f"#!/bin/sh\nwhile [ -e '{marker}' ]; do sleep 1; done\nexec \"$@\"\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IEXEC)
    return launcher


def playbook_run(tmp_path: Path, project: Path, outputs: Path, *extra: str, cache: Path | None = None,
                 **popen: object) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "playbook", "run", "--output", str(outputs), "--set", "backend=cpu",
            "--set", "source.kind=path", "--set", f"source.path={project}", "--set", "build.ccache=off",
            "--set", f"build.cache_dir={cache or tmp_path / 'cache'}", "--set", "verify.timeout_s=120", *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def wait_for_step(run_root: Path, step: Step, timeout_s: float = 240) -> RunFolder:
    """The run folder once ``step`` has begun in it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run_json in run_root.glob("*/run.json"):
            try:
                record = RunFolder(run_json.parent).record()
            except (ValueError, OSError):
                continue  # being replaced at this moment
            if any(s.step is step and s.outcome is Outcome.RUNNING for s in record.steps):
                return RunFolder(run_json.parent)
        time.sleep(0.2)
    raise AssertionError(f"{step} did not start within {timeout_s} s")


@pytest.mark.long
def test_a_build_that_goes_silent_is_stopped_and_named(this_machine, tmp_path):
    marker = tmp_path / "hang"
    marker.touch()
    launcher = sleeping_launcher(tmp_path, marker)
    params = load_params(None, ["backend=cpu", "build.ccache=off", f"build.cmake_args=['-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}']"])
    plan = configure(this_machine, params)
    layout = Layout(tmp_path / "run")
    started = time.monotonic()
    source = tree_source(compiled_project(tmp_path, with_vocabulary=True))
    result = run_build(plan, source, layout, tmp_path / "cache", timeout_s=600,
                       stall_timeout_s=8)
    assert time.monotonic() - started < 120  # stopped by the silence, not the 600 s deadline
    assert result.stalled and not result.ok and not result.timed_out
    findings = diagnose_file(layout.build_log(1))
    assert findings[0].id == "build-stalled", [f.id for f in findings]
    log_tail = layout.build_log(1).read_text().splitlines()[-6:]
    assert any("tiny.cpp" in line for line in log_tail)  # the last lines name what was compiling
    time.sleep(1)
    hung = subprocess.run(["pgrep", "-f", str(launcher)], capture_output=True, text=True, timeout=30, check=False).stdout
    assert hung.strip() == "", "the stopped build left its compiler running"


@pytest.mark.long
def test_a_corrupt_wheel_cache_entry_is_moved_aside_and_rebuilt(this_machine, tmp_path):
    plan = configure(this_machine, load_params(None, ["backend=cpu", "build.ccache=off"]))
    source, cache = tree_source(compiled_project(tmp_path, with_vocabulary=True)), tmp_path / "cache"
    first = run_build(plan, source, Layout(tmp_path / "run1"), cache, run_id="run1")
    assert first.ok and not first.reused_wheel
    entry = cached_wheel(cache, first.fingerprint)
    assert entry.path is not None and entry.entry.sha256 == first.wheel.sha256

    entry.path.write_bytes(entry.path.read_bytes()[:100])  # truncated
    again = run_build(plan, source, Layout(tmp_path / "run2"), cache, run_id="run2")
    assert again.cache_rejected, again
    assert again.ok and not again.reused_wheel
    assert cached_wheel(cache, first.fingerprint).entry.sha256 == again.wheel.sha256  # the rebuilt one, whole
    assert list((cache / "wheels").glob("*.rejected-*")), "the bad entry is kept aside, not deleted"
    assert "wheel cache entry rejected" in Layout(tmp_path / "run2").build_log(1).read_text()

    stored = cached_wheel(cache, first.fingerprint).path
    stored.write_bytes(bytes(b ^ 0xFF for b in stored.read_bytes()))  # same size, other bytes
    third = run_build(plan, source, Layout(tmp_path / "run3"), cache, run_id="run3")
    assert third.cache_rejected and third.ok and not third.reused_wheel


@pytest.mark.long
def test_two_runs_at_once_on_one_cache_each_end_with_a_whole_entry(tmp_path):
    project = compiled_project(tmp_path, with_vocabulary=True)
    cache = tmp_path / "cache"
    runs = [playbook_run(tmp_path, project, tmp_path / f"outputs-{n}", cache=cache) for n in (1, 2)]
    shown = [proc.communicate(timeout=600)[0] for proc in runs]
    builds = []
    for n in (1, 2):
        (run_dir,) = (tmp_path / f"outputs-{n}").iterdir()
        run = RunFolder(run_dir)
        build_records = [s for s in run.record().steps if s.step is Step.BUILD]
        assert build_records[0].outcome in (Outcome.OK, Outcome.REUSED), (build_records, shown[n - 1])
        builds.append(read_json(BuildResult, run.layout.build_result(1)))
        assert check_run(run_dir).ok, (check_run(run_dir), shown[n - 1])
    # built once, reused once
    assert sorted(bool(b.reused_wheel) for b in builds) == [False, True], (builds, shown)
    entries = list((cache / "wheels").glob("*/entry.json"))
    assert len(entries) == 1
    assert json.loads(entries[0].read_text())["sha256"] == builds[0].wheel.sha256 == builds[1].wheel.sha256

    # different parameters at once: two entries, each whole
    different = [playbook_run(tmp_path, project, tmp_path / f"outputs-d{n}", "--set",
                              f"build.cmake_args=['-DTINY_OPTION={n}']", cache=cache) for n in (1, 2)]
    for proc in different:
        proc.communicate(timeout=600)
    entries = list((cache / "wheels").glob("*/entry.json"))
    assert len(entries) == 3
    for entry in entries:
        recorded = json.loads(entry.read_text())
        wheel = entry.parent / recorded["wheel"]
        assert wheel.stat().st_size == recorded["size_bytes"]


def _file_size_limit(limit_bytes: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


@pytest.mark.long
def test_a_disk_that_fills_during_the_build_is_named_and_nothing_recorded_is_damaged(tmp_path):
    big = 'extern "C" const char blob[] = {' + ",".join(["1"] * 3_000_000) + "};\n"  # an object file of 3 MB
    project = compiled_project(tmp_path, big, with_vocabulary=True)
    outputs = tmp_path / "outputs"
    proc = playbook_run(tmp_path, project, outputs, "--set", "build.max_attempts=1",
                        preexec_fn=_file_size_limit(2_000_000))
    shown, _ = proc.communicate(timeout=600)
    assert proc.returncode == ExitCode.RUN_FAILED, shown
    (run_dir,) = outputs.iterdir()
    run = RunFolder(run_dir)
    record = run.record()
    assert record.outcome is Outcome.FAILED
    repair = [s for s in record.steps if s.step is Step.REPAIR]
    assert repair and "disk-full" in repair[0].findings, shown
    assert "disk-full" in shown
    assert check_run(run_dir).ok  # every file written before is whole and listed


def _processes_working_in(folder: Path) -> list[str]:
    """Processes whose working folder is in ``folder`` or whose environment names it (Linux)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
            environ = (proc / "environ").read_bytes()
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended meanwhile, or not ours to read
        if cwd.startswith(str(folder)) or str(folder).encode() in environ:
            found.append(f"{proc.name}: {args}")
    return found


@pytest.mark.long
def test_kill_9_during_the_build_and_during_verify_then_resume(tmp_path):
    marker = tmp_path / "hang"
    marker.touch()
    launcher = sleeping_launcher(tmp_path, marker)
    project = compiled_project(tmp_path, with_vocabulary=True)
    # The wheel's llama_cpp waits while this marker exists: verify is surely still running when it is killed (the
    # stand-in's verify otherwise ends within a second, and a kill that came later found no step to interrupt).
    verify_marker = tmp_path / "verify-hangs"
    verify_marker.touch()
    (project / "llama_cpp").mkdir()
    (project / "llama_cpp" / "__init__.py").write_text(
        f"import os, time\nwhile os.path.exists({str(verify_marker)!r}):\n    time.sleep(0.2)\n"
        "raise ImportError('a stand-in for llama_cpp')\n")
    with (project / "CMakeLists.txt").open("a") as cmake:
        cmake.write("install(FILES llama_cpp/__init__.py DESTINATION llama_cpp)\n")
    outputs = tmp_path / "outputs"
    proc = playbook_run(tmp_path, project, outputs, "--set", f"build.cmake_args=['-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}']",
                        "--set", "build.max_attempts=1", start_new_session=True)
    run = wait_for_step(outputs, Step.BUILD)
    deadline = time.monotonic() + 120
    while "Build files have been written" not in (run.layout.build_log(1).read_text()
                                                 if run.layout.build_log(1).is_file() else ""):
        assert time.monotonic() < deadline, "the build did not reach the compiler"
        time.sleep(0.2)
    time.sleep(2)  # the compiler (its launcher) now hangs
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert run.record().outcome is Outcome.RUNNING  # what a killed run leaves behind

    marker.unlink()  # the compiler no longer hangs
    resumed = subprocess.Popen([sys.executable, "-m", "playbook", "resume", str(run.path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_for_step(outputs, Step.VERIFY)
    if sys.platform == "linux":  # kill it while the child that loads the wheel waits on the marker
        deadline = time.monotonic() + 120
        while not any("probe.py" in p for p in _processes_working_in(tmp_path)):
            assert time.monotonic() < deadline, "verify did not start its child"
            time.sleep(0.2)
    os.killpg(resumed.pid, signal.SIGKILL)
    resumed.wait(timeout=60)
    if sys.platform == "linux":  # the kernel and the probe have sessions of their own: they die with the run
        deadline = time.monotonic() + 10
        while (left := _processes_working_in(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"still running after kill -9 of the run: {left}"
    verify_marker.unlink()

    finished = subprocess.run([sys.executable, "-m", "playbook", "resume", str(run.path)], capture_output=True,
                              text=True, timeout=600, check=False)
    record = run.record()
    interrupted = [s for s in record.steps if s.outcome is Outcome.INTERRUPTED]
    assert [s.step for s in interrupted] == [Step.BUILD, Step.VERIFY], finished.stdout
    assert "partial files are in history/" in interrupted[0].message
    kept = run.path / interrupted[0].message.split("partial files are in ")[1]
    assert "Build files have been written" in (kept / "build-attempt-1.log").read_text()
    assert len(record.resumed) == 2 and record.outcome is not Outcome.RUNNING
    assert read_json(BuildResult, run.layout.build_result(1)).ok  # built on resume
    assert check_run(run.path).ok, check_run(run.path).lines()


@pytest.fixture
def read_only_folder(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() == 0:  # root writes through file modes: mount a read-only file system instead
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                                 capture_output=True, text=True, timeout=60, check=False)
        assert mounted.returncode == 0, mounted.stderr
        yield folder
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=60, check=False)
    else:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


@pytest.mark.long
def test_a_read_only_output_folder_is_refused_before_anything_runs(tmp_path, read_only_folder):
    proc = playbook_run(tmp_path, compiled_project(tmp_path, with_vocabulary=True), read_only_folder / "outputs")
    shown, _ = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.RUN_FOLDER, shown
    assert "not writable" in shown and "--output" in shown and str(read_only_folder) in shown
    assert "Traceback" not in shown
    assert not (tmp_path / "cache" / "wheels").exists()  # nothing was built


@pytest.mark.long
def test_paths_with_spaces_and_non_ascii_characters_work(tmp_path):
    home = tmp_path / "my builds ü ñ"
    home.mkdir()
    project = compiled_project(home, with_vocabulary=True)
    proc = playbook_run(home, project, home / "run outputs é", "--set", "build.max_attempts=1")
    shown, _ = proc.communicate(timeout=600)
    (run_dir,) = (home / "run outputs é").iterdir()
    record = RunFolder(run_dir).record()
    build = next(s for s in record.steps if s.step is Step.BUILD)
    assert build.outcome is Outcome.OK, shown
    assert check_run(run_dir).ok
    shutil.rmtree(home / "cache", ignore_errors=True)


# A compile that takes minutes: GCC evaluates a constexpr loop of 3e8 steps (no launcher, no sleep).
SLOW_SOURCE = """
constexpr unsigned long spin(unsigned long n) { unsigned long s = 0; for (unsigned long i = 0; i < n; ++i) s += i % 7; return s; }
constexpr unsigned long value = spin(300000000UL);
unsigned long tiny() { return value; }
"""


def _compilers_of(project: Path) -> list[str]:
    listed = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, timeout=30, check=False)
    return [line for line in listed.stdout.splitlines() if "cc1plus" in line and str(project) in line]


@pytest.mark.long
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs GCC: the slow compile is GCC's constexpr evaluation")
def test_ctrl_c_stops_pip_ninja_and_the_compiler_at_once(tmp_path):
    """Issue 25: after Ctrl-C, pip and ninja kept compiling for about 20 s. The build runs in a session of
    its own (so that a limit can kill it whole); an interrupt must kill that session too, at once."""
    project = compiled_project(tmp_path, source_text=SLOW_SOURCE)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.15)\nproject(tiny LANGUAGES CXX)\nadd_library(tiny SHARED tiny.cpp)\n"
        "target_compile_options(tiny PRIVATE -std=c++17 -fconstexpr-loop-limit=2000000000 "
        "-fconstexpr-ops-limit=4000000000000)\ninstall(TARGETS tiny LIBRARY DESTINATION tiny)\n")
    outputs = tmp_path / "outputs"
    # A shell runs a background job with SIGINT ignored, and a child inherits that: give the run SIGINT's
    # default, as a terminal's foreground process has it (Python then raises KeyboardInterrupt on it).
    proc = playbook_run(tmp_path, project, outputs, "--set", "build.max_attempts=1",
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for_step(outputs, Step.BUILD)
    deadline = time.monotonic() + 240
    while not _compilers_of(project):
        assert time.monotonic() < deadline and proc.poll() is None, "the build did not reach the compiler"
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the terminal's foreground process
    interrupted = time.monotonic()
    while _compilers_of(project) and time.monotonic() - interrupted < 60:
        time.sleep(0.2)
    stopped_after_s = time.monotonic() - interrupted
    try:
        shown = proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
    assert stopped_after_s < 8, f"the compiler ran on for {stopped_after_s:.0f} s after SIGINT\n{shown[-2000:]}"
    (run_dir,) = outputs.iterdir()
    assert RunFolder(run_dir).record().outcome is Outcome.INTERRUPTED, shown[-2000:]
    [problem] = check_run(run_dir).problems  # what happened and what to run, not "written before attestation"
    assert "the run was interrupted or killed during build (attempt 1)" in problem and "playbook resume" in problem
