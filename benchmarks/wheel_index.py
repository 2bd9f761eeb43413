"""A second machine of the same kind: a verified wheel from the team's index against a cold build, in one run.

  (a) the playbook, cold: `playbook run` into an empty cache folder (only the pinned sdist copied in), then
      `playbook publish` of its verified wheel into a folder index served on 127.0.0.1 by http.server;
  (b) the second machine: an empty cache folder, a new virtual environment, an empty pip cache, only the index:
      `playbook install --from http://127.0.0.1:PORT --into VENV --no-build` (choose, download with sha256,
      verify's check on the wheel, pip install) and a verified import from the new environment.

    nice python benchmarks/wheel_index.py [--params params/cpu.yaml] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params/cpu.yaml")
    parser.add_argument("--work", type=Path, default=None, help="folder for both machines' caches (default: temporary)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="wheel-index-bench-"))
    params = load_params(ROOT / args.params)
    sdist = params.cache_dir / "sdists" / SDIST_NAME.format(version=params.source.version)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    first_cache, outputs, index = work / "first-cache", work / "outputs", work / "index"
    if sdist.is_file():
        (first_cache / "sdists").mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist, first_cache / "sdists" / sdist.name)
    build_s, built = playbook("run", "--params", args.params, "--set", f"build.cache_dir={first_cache}",
                              "--output", str(outputs), env=env)
    runs = sorted(p.parent for p in outputs.glob("*/run.json"))
    if built.returncode != 0 or not runs:
        print(built.stdout[-3000:], built.stderr[-3000:])
        return 1
    publish_s, published = playbook("publish", str(runs[-1]), "--to", str(index), env=env)
    if published.returncode != 0:
        print(published.stderr)
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
        _, installed = playbook("install", "--params", args.params, "--from", f"http://127.0.0.1:{port}",
                                "--into", str(venv), "--no-build", "--set", f"build.cache_dir={second_cache}",
                                env=second_env)
        imported = subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import llama_cpp; print(llama_cpp.__version__)"],
                                  check=False, capture_output=True, text=True, timeout=300)
        install_s = time.monotonic() - started
    finally:
        server.kill()
        server.wait()
    ok = installed.returncode == 0 and imported.returncode == 0
    check_line = next((line for line in installed.stderr.splitlines() if line.startswith("check ")), "")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; params {args.params}; "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    print(f"{'case':58s} {'wall s':>8s} {'ratio':>7s}  ok")
    print(f"{'(a) playbook, cold build (detect, configure, build, verify)':58s} {build_s:8.1f} {1.0:7.3f}  yes")
    print(f"{'    publish into the folder index':58s} {publish_s:8.1f}")
    print(f"{'(b) second machine: new venv, empty caches, index only':58s} {install_s:8.1f} "
          f"{install_s / build_s:7.3f}  {'yes' if ok else 'no'}")
    print(f"    {check_line}")
    print(f"    imported llama_cpp {imported.stdout.strip()} from the new environment")
    print(f"goal (b) <= {GOAL_S:.0f} s: {'met' if ok and install_s <= GOAL_S else 'NOT met'}; "
          f"(b) / (a) = {install_s / build_s:.3f} ({build_s / install_s:.0f}x faster)")
    if not ok:
        print(installed.stderr[-3000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
