"""A second machine of the same kind: a verified wheel from the team's index against a cold build, in one run.

  (a) the playbook, cold: `playbook run` into an empty cache folder (only the pinned sdist copied in), then
      `playbook publish` of its verified wheel into a folder index served on 127.0.0.1 by http.server;
  (b) the second machine: an empty cache folder, a new virtual environment, an empty pip cache, only the index:
      `playbook install --from http://127.0.0.1:PORT --into VENV --no-build` (choose, download with sha256,
      verify's check on the wheel, pip install) and a verified import from the new environment.

    nice python benchmarks/wheel_index.py [--params params/cpu.yaml] [--work DIR] [--output FILE]

The machine's load average (``uptime``) is printed before (a) and after (b): on a shared machine other work slows
both. Where (b)'s time went is printed from the install's own lines, each with the seconds since (b) started.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playbook.localhost import free_port, wait_until_listening
from playbook.params import load_params
from playbook.steps.source import SDIST_NAME

GOAL_S = 60.0


def playbook(*args: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "playbook", *args], env=env, check=False, capture_output=True, text=True,
                          timeout=7200, cwd=ROOT)
    return time.monotonic() - started, done


def timed_lines(args: list[str], env: dict[str, str], started: float, timeout_s: float) -> tuple[int, list[str]]:
    """Run ``args`` (stdout and stderr together); each line it prints as ``  12.3 s  line``, the seconds since
    ``started``. Killed after ``timeout_s``."""
    process = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout_s, process.kill)
    timer.start()
    lines = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(f"{time.monotonic() - started:6.1f} s  {line.rstrip()[:160]}")
        return process.wait(), lines
    finally:
        timer.cancel()


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, timeout=30, check=False).stdout.strip()


def step_times(run_dir: Path) -> str:
    """``detect 3.1 s, configure 2.0 s, build 251.0 s, verify 40.2 s``: from the run's run.json."""
    steps = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["steps"]
    return ", ".join(f"{step['step']} {step['duration_s']:.1f} s" for step in steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params/cpu.yaml")
    parser.add_argument("--work", type=Path, default=None, help="folder for both machines' caches (default: temporary)")
    parser.add_argument("--output", type=Path, default=None, help="also write what is printed to this file")
    args = parser.parse_args(argv)
    printed: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        printed.append(text)

    work = args.work or Path(tempfile.mkdtemp(prefix="wheel-index-bench-"))
    params = load_params(ROOT / args.params)
    sdist = params.cache_dir / "sdists" / SDIST_NAME.format(version=params.source.version)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=False).stdout.strip()
    say(f"# second machine from the index against a cold build, one run; commit {commit}")
    say(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; params {args.params}")
    say(f"# before (a): {uptime()}")

    first_cache, outputs, index = work / "first-cache", work / "outputs", work / "index"
    if sdist.is_file():  # the pinned sdist only: no wheel, build folder, ccache or toolkit
        (first_cache / "sdists").mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist, first_cache / "sdists" / sdist.name)
    build_s, built = playbook("run", "--params", args.params, "--set", f"build.cache_dir={first_cache}",
                              "--output", str(outputs), env=env)
    runs = sorted(p.parent for p in outputs.glob("*/run.json"))
    if built.returncode != 0 or not runs:
        say(built.stdout[-3000:] + built.stderr[-3000:])
        return 1
    publish_s, published = playbook("publish", str(runs[-1]), "--to", str(index), env=env)
    if published.returncode != 0:
        say(published.stderr)
        return 1

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(index)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_listening(port, server, 30)
        second_cache, venv = work / "second-cache", work / "second-venv"
        second_env = {**env, "PIP_CACHE_DIR": str(work / "second-pip-cache")}
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        venv_s = time.monotonic() - started
        returncode, timeline = timed_lines(
            [sys.executable, "-m", "playbook", "install", "--params", args.params, "--from", f"http://127.0.0.1:{port}",
             "--into", str(venv), "--no-build", "--set", f"build.cache_dir={second_cache}"],
            second_env, started, 1800)
        install_done = time.monotonic() - started
        imported = subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import llama_cpp; print(llama_cpp.__version__)"],
                                  check=False, capture_output=True, text=True, timeout=300)
        install_s = time.monotonic() - started
    finally:
        server.kill()
        server.wait()
    ok = returncode == 0 and imported.returncode == 0
    check_line = next((line for line in timeline if " s  check " in line), "")
    say(f"# after (b): {uptime()}")
    say(f"{'case':58s} {'wall s':>8s} {'ratio':>7s}  ok")
    say(f"{'(a) playbook, cold build (detect, configure, build, verify)':58s} {build_s:8.1f} {1.0:7.3f}  yes")
    say(f"    its steps: {step_times(runs[-1])}")
    say(f"{'    publish into the folder index':58s} {publish_s:8.1f}")
    say(f"{'(b) second machine: new venv, empty caches, index only':58s} {install_s:8.1f} "
        f"{install_s / build_s:7.3f}  {'yes' if ok else 'no'}")
    say(f"    new venv {venv_s:.1f} s; playbook install {install_done - venv_s:.1f} s; "
        f"import from the new venv {install_s - install_done:.1f} s")
    say(f"    {check_line.split(' s  ', 1)[-1]}")
    say(f"    imported llama_cpp {imported.stdout.strip()} from the new environment")
    say("    where (b)'s time went (seconds since (b) started, the install's own lines):")
    for line in timeline:
        say(f"      {line}")
    say(f"goal (b) <= {GOAL_S:.0f} s: {'met' if ok and install_s <= GOAL_S else 'NOT met'}; "
        f"(b) / (a) = {install_s / build_s:.3f} ({build_s / install_s:.0f}x faster)")
    if not ok:
        say(imported.stderr[-3000:])
    if args.output:
        args.output.write_text("\n".join(printed) + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
