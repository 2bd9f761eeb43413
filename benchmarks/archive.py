"""What each archived result in benchmarks/results/ was measured on, so that an archive cannot go stale unseen.

Every results file starts with one line

    # measured-on: commit=<sha> digest=<sha256> inputs=<path>,<path>,...

``inputs`` are the benchmark's script and the playbook code and data it exercises (INPUTS below: files, or
folders standing for the files git tracks under them); ``digest`` is :func:`digest` of those inputs as they
were at ``commit``. When the inputs have changed since, the archive no longer says what today's code does:
``tests/test_archives.py`` fails and names the benchmark to re-run, unless the file says so itself in a second
line ``# stale: <reason>`` (a measurement that cannot be repeated here, e.g. one that needs a GPU machine).

    python benchmarks/archive.py check                      # each archive: current, or which inputs changed
    python benchmarks/archive.py stamp NAME                 # after re-running: measured on HEAD's inputs
    python benchmarks/archive.py stamp NAME --commit SHA [--stale REASON]   # an archive measured at SHA
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

# The knowledge base and the examples diagnosis compares with: the knowledge package's code and the three files
# diagnosis reads, not the backends' tables beside them (a new backend's knowledge YAML changes no diagnosis).
_DIAGNOSIS = (*(f"playbook/knowledge/{name}" for name in (
    "__init__.py", "compatibility.py", "corpus.py", "evaluation.py", "failures.py", "logtext.py", "normalise.py",
    "signatures.py", "similarity.py", "failures.yaml", "message_locales.yaml", "similarity_index.json")),
    "tests/data/failures/", "tests/data/corpus/train/", "tests/data/clean/")
_BUILD = ("benchmarks/build_speed.py", "playbook/steps/", "playbook/backends/", "playbook/process.py")

# results file -> (the command that writes it, its inputs)
INPUTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "diagnose-speed-cpu-vm.txt": (
        "python benchmarks/diagnose_speed.py", ("benchmarks/diagnose_speed.py", *_DIAGNOSIS)),
    # read once, at the end of a round (issue 33): never re-run per round; a new round freezes a new part
    "diagnosis-frozen-cpu-vm.txt": (
        "python -m playbook.knowledge.evaluation --part frozen",
        (*_DIAGNOSIS, "tests/data/corpus/frozen/")),
    "similarity-loto-cpu-vm.txt": (
        "python benchmarks/similarity_loto.py", ("benchmarks/similarity_loto.py", *_DIAGNOSIS)),
    "pypi-toolkit-cpu-vm.txt": (
        "PIP_NO_CACHE_DIR=1 python benchmarks/pypi_toolkit.py 13.0", ("benchmarks/pypi_toolkit.py", "playbook/toolkits/pypi.py",
                                                                 "playbook/knowledge/cuda_wheels.yaml")),
    "build-speed-remote-cache-cpu-vm.txt": (
        "python benchmarks/build_speed.py --params params/cpu.yaml --start-redis", (*_BUILD, "params/cpu.yaml")),
    "build-speed-gpu-machine-h100.txt": (
        "python benchmarks/build_speed.py --params params/gpu-reference.yaml ... on a GPU machine (see the file)",
        (*_BUILD, "playbook/toolkits/", "params/gpu-reference.yaml")),
    "openblas-vs-cpu-vm.txt": (
        "python benchmarks/openblas_vs_cpu.py RUN_OPENBLAS RUN_CPU",
        ("benchmarks/openblas_vs_cpu.py", "playbook/verify/", "playbook/child_scripts/", "params/openblas.yaml")),
    "slow-tier-builds-cpu-vm.txt": (
        "python benchmarks/slow_tier_builds.py BASETEMP, after pytest of the three chain tests (see the file)",
        ("benchmarks/slow_tier_builds.py", "tests/test_end_to_end.py", "tests/test_rpc_end_to_end.py",
         "tests/test_vulkan_end_to_end.py", "playbook/steps/build.py", "playbook/steps/caches.py")),
    "blas-vendors-cpu-vm.txt": (
        "python benchmarks/blas_vendors.py --output benchmarks/results/blas-vendors-cpu-vm.txt",
        ("benchmarks/blas_vendors.py", "playbook/backends/mkl.py", "playbook/knowledge/mkl.yaml", "playbook/verify/",
         "playbook/child_scripts/", "params/mkl.yaml", "params/openblas.yaml", "params/cpu-portable.yaml")),
    "wheel-index-cpu-vm.txt": (
        "nice python benchmarks/wheel_index.py --output benchmarks/results/wheel-index-cpu-vm.txt",
        ("benchmarks/wheel_index.py", "playbook/wheelindex/", "playbook/steps/", "playbook/backends/",
         "playbook/verify/", "playbook/child_scripts/", "playbook/process.py", "params/cpu.yaml")),
    "ci-time-cpu-vm.txt": (
        "pytest --durations over the fast tier's parts, timed with /usr/bin/time, and the estimate (see the file)",
        (".ci/run", "tests/conftest.py")),
    "cxx-runtime-check-gpu-machine.txt": (
        "scripts/gpu-cxx-runtime-check.sh on a GPU machine", ("scripts/gpu-cxx-runtime-check.sh",)),
}

HEADER = re.compile(r"^# measured-on: commit=(?P<commit>[0-9a-f]{40}|unknown) digest=(?P<digest>[0-9a-f]{64}) "
                    r"inputs=(?P<inputs>\S+)$")
STALE = re.compile(r"^# stale: (?P<reason>\S.*)$")


@dataclass
class Provenance:
    commit: str
    digest: str
    inputs: tuple[str, ...]
    stale: str = ""  # the reason, when the file says it is stale

    def lines(self) -> list[str]:
        header = f"# measured-on: commit={self.commit} digest={self.digest} inputs={','.join(self.inputs)}"
        return [header, *([f"# stale: {self.stale}"] if self.stale else [])]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120).stdout


def _blob_id(data: bytes) -> str:
    """git's object id of a file's content (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def blobs(inputs: tuple[str, ...], commit: str = "") -> dict[str, str]:
    """path -> git object id of every tracked file under ``inputs``: in the working tree, or at ``commit``."""
    if commit:
        listed = _git("ls-tree", "-r", "-z", commit, "--", *inputs)
        entries = (entry.split("\t", 1) for entry in listed.split("\0") if entry)
        return {path: meta.split()[2] for meta, path in entries if meta.split()[1] == "blob"}
    paths = [p for p in _git("ls-files", "-z", "--", *inputs).split("\0") if p]
    return {p: _blob_id((ROOT / p).read_bytes()) for p in paths if (ROOT / p).is_file()}


def digest(inputs: tuple[str, ...], commit: str = "") -> str:
    """sha256 over the sorted paths and contents (by git object id) of the files under ``inputs``."""
    files = blobs(inputs, commit)
    return hashlib.sha256("".join(f"{p}\0{files[p]}\n" for p in sorted(files)).encode()).hexdigest()


def changed(inputs: tuple[str, ...], commit: str) -> list[str]:
    """The input files that differ between ``commit`` and the working tree (added, removed or edited)."""
    then, now = blobs(inputs, commit), blobs(inputs)
    return sorted(p for p in then.keys() | now.keys() if then.get(p) != now.get(p))


def read(path: Path) -> Provenance | None:
    """The provenance lines at the top of a results file, or None when it has none."""
    lines = path.read_text(encoding="utf-8").splitlines()
    match = HEADER.match(lines[0]) if lines else None
    if match is None:
        return None
    stale = STALE.match(lines[1]) if len(lines) > 1 else None
    return Provenance(match["commit"], match["digest"], tuple(match["inputs"].split(",")),
                      stale["reason"] if stale else "")


def body(text: str) -> str:
    """A results file's text without its provenance lines: what the benchmark printed."""
    lines = text.split("\n")
    while lines and (HEADER.match(lines[0]) or STALE.match(lines[0])):
        lines.pop(0)
    return "\n".join(lines)


def stamp(name: str, commit: str = "", stale: str = "") -> Provenance:
    """Write the provenance lines of ``benchmarks/results/NAME``: measured at ``commit`` (default: HEAD, whose
    inputs must be the working tree's, i.e. the benchmark just ran on committed code)."""
    _, inputs = INPUTS[name]
    if not commit:
        commit = _git("rev-parse", "HEAD").strip()
        if dirty := changed(inputs, commit):
            raise SystemExit(f"inputs differ from HEAD ({', '.join(dirty[:5])}): commit them, re-run, then stamp")
    provenance = Provenance(commit, digest(inputs, commit), inputs, stale)
    path = RESULTS / name
    path.write_text("\n".join([*provenance.lines(), body(path.read_text(encoding="utf-8"))]), encoding="utf-8")
    return provenance


def check(name: str) -> str:
    """'' when the archive's inputs are as they were measured, else what changed and what to re-run."""
    recorded = read(RESULTS / name)
    command, inputs = INPUTS[name]
    if recorded is None:
        return f"benchmarks/results/{name} has no '# measured-on:' line: run {command}, then archive.py stamp {name}"
    if recorded.digest == digest(inputs):
        return ""
    files = changed(inputs, recorded.commit) if recorded.commit != "unknown" else []
    return (f"benchmarks/results/{name} is stale: its inputs changed since commit {recorded.commit[:12]}"
            + (f" ({', '.join(files[:8])}{' ...' if len(files) > 8 else ''})" if files else "")
            + f"; re-run {command}, then archive.py stamp {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="say which archives are stale")
    stamping = commands.add_parser("stamp", help="write a results file's provenance lines")
    stamping.add_argument("name", choices=sorted(INPUTS))
    stamping.add_argument("--commit", default="", help="the commit it was measured at (default: HEAD)")
    stamping.add_argument("--stale", default="", metavar="REASON", help="why it is kept though its inputs changed")
    args = parser.parse_args(argv)
    if args.command == "stamp":
        print("\n".join(stamp(args.name, args.commit, args.stale).lines()))
        return 0
    problems, marked = [], []
    for name in sorted(INPUTS):
        if problem := check(name):
            recorded = read(RESULTS / name)
            (marked if recorded and recorded.stale else problems).append(problem)
    print("\n".join([*problems, *(f"marked stale: {line}" for line in marked)]) or "every archive is current")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
