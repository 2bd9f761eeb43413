"""Every measured figure in the READMEs and the docs/ pages, read from the archived file it comes from.

A *figure* is a number followed by a unit (s, t/s, k, ×, %, MB, MiB, GB, GB/s, hits, remote hits, misses, steps,
ninja steps) or a number with three or more decimals (ratios, relative errors), anywhere in README.md, the
pages under docs/, benchmarks/README.md, outputs/reference/README.md and outputs/README.md, fenced blocks
included. Other numbers (versions, core
counts, layer counts, settings) are not figures.

Each figure must be claimed, or `test_every_figure_in_a_readme_is_claimed` fails:
* by a row of FIGURES: the README's words around it with `{}` where the figure goes, the reader that takes the
  number from its file, and the format the README prints it with. The test formats the file's number and
  looks for the whole phrase in the README, so a README figure that differs from its file in any digit fails
  (whitespace and line breaks do not matter). To add a figure: one row.
* or by a row of EXCERPTS: a stretch of the README (a fenced block, a table) that must equal text made from a
  file (a results file's lines, a script's output, a table rebuilt from a report); every figure inside is claimed.
"""

from __future__ import annotations

import csv
import functools
import inspect
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from playbook.serialization import read_json
from playbook.verify.result import Unit, VerifyResult
from playbook.verify.units.gpu_cpu_agreement import GPU_CPU_AGREEMENT
from playbook.verify.units.llama_bench import LLAMA_BENCH
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.rpc_offload import RPC_OFFLOAD
from playbook.verify.units.throughput import THROUGHPUT

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "outputs" / "reference"
RESULTS = ROOT / "benchmarks" / "results"

README = "README.md"
BENCH = "benchmarks/README.md"
RUNS = "outputs/reference/README.md"
# The pages README.md's reference text moved to (issue 34): each figure is checked where it now lives.
BACKENDS = "docs/backends.md"
CUDA_PYPI_PAGE = "docs/cuda-from-pypi.md"
FLEET = "docs/fleet.md"
KB = "docs/knowledge-base.md"
MEASURE = "docs/measurements.md"
FORK_PAGE = "docs/reference-runs.md"
STEPS = "docs/steps.md"
TESTING = "docs/testing.md"
WHEEL_INDEX_PAGE = "docs/wheel-index.md"
DOCS = tuple(sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")))
READMES = (README, BENCH, RUNS, "outputs/README.md", *DOCS)

H100 = "build-speed-gpu-machine-h100.txt"
CPU_VM = "build-speed-remote-cache-cpu-vm.txt"
PYPI = "pypi-toolkit-cpu-vm.txt"
DIAGNOSE = "diagnose-speed-cpu-vm.txt"
SLOW_TIER = "slow-tier-builds-cpu-vm.txt"
CI_TIME = "ci-time-cpu-vm.txt"
SIMILARITY = "similarity-loto-cpu-vm.txt"
WHEEL_INDEX = "wheel-index-cpu-vm.txt"

GPU_1B = "20261122T010438Z-vm"  # H200, 1B-shaped Q8_0, 6 sweep points
WRONG_ARCH = "20261122T011010Z-vm"  # 80-real, repaired to 90
WITH_BENCH = "20261122T012240Z-vm"  # llama-bench beside the sweep
GPU_7B = "20261122T031414Z-vm"  # 7B-shaped Q4_0
MTMD = "20261122T040220Z-vm"  # built without libmtmd, repaired
LAVAPIPE = "20261123T170144Z-vm"  # Vulkan on the CPU-only VM
CUDA_PYPI = "20261123T170441Z-vm"  # CUDA from PyPI on the CPU-only VM
CUDA = "20261123T174631Z-vm"  # CUDA beside Vulkan on one H200
VULKAN = "20261123T175713Z-vm"
TUNE = "20261123T180048Z-vm"
YARDSTICK = "20261125T153700Z-vm"  # H100, 1B, llama-bench in 5 interleaved pairs
TUNE_7B = "20261125T160940Z-vm"  # H100, the 7B tune within verify.tune_budget_s
FORK = "20261125T144314Z-vm"  # guide 002's fork, CPU-only
OPENBLAS = "20261125T144256Z-vm"  # OpenBLAS on the CPU-only VM
RPC = "20261125T155256Z-vm"  # RPC client and server on the CPU-only VM
RPC_GPU = "20261125T214733Z-vm"  # H100: CPU+RPC client (repaired: cxx-runtime-copies), CUDA rpc-server
OPENBLAS_VS_CPU = "openblas-vs-cpu-vm.txt"
HIP = "20261125T145359Z-vm"  # HIP compiled with Debian 13's ROCm on the CPU-only VM
GATE = "20261129T030438Z-vm"  # H200, the GPU acceptance gate's first run
LAST_GATE = "20261129T034250Z-vm"  # H200, the gate's last run before the backend redesign
REDESIGN_GATE = "20261129T080312Z-vm"  # H200, the gate after the backend redesign (be57af5)
PLAN_NOTES_GATE = "20261129T082430Z-vm"  # H200, the gate at 63da654
SWAP_GATE = "20261129T100051Z-vm"  # H200, the gate at 07ee148, before the yardstick experiment with libraries swapped
INDEX_GATE = "20261129T105031Z-vm"  # H200, the gate at dd78ca3, whose wheel the index run installed
NEWEST_GATE = "20261129T112149Z-vm"  # H200, the newest gate (outputs/reference/gpu-acceptance.json), d0150ed
INDEX_RUN = REF / "20261129T105031Z-vm.wheel-index-run.log"  # playbook run installing INDEX_GATE's wheel
GAP = REF / "20261129T080312Z-vm.yardstick-gap.json"  # benchmarks/yardstick_gap.py on REDESIGN_GATE's wheel
BENCH_SWAP = "llama-bench on the wheel's libraries"
SWAP_GAP = REF / "20261129T100051Z-vm.yardstick-gap.json"  # the same, with llama-bench on the wheel's libraries
FLAG_TUNE = "20261129T081443Z-vm"  # H200, the 1B tune with verify.tune_build_flags
TUNE_H200 = "20261129T035051Z-vm"  # H200, the 7B tune per workload right after the last gate


def openblas_vs_cpu(model: str, column: int) -> Callable[[], float]:
    """openblas_vs_cpu.py's final table: a model's row, its N-th number (pp openblas, pp cpu, pp ratio, tg ...)."""
    def read() -> float:
        line = next(x for x in _text(RESULTS / OPENBLAS_VS_CPU).splitlines() if x.startswith(f"{model}-Q8_0 "))
        return float(line.split()[1 + column])
    return read


def gap_ratio(variant: str, layers: str, test: str, archive: Path = GAP) -> Callable[[], float]:
    """yardstick_gap.py's median of a variant against llama-bench's, at a layer count and test."""
    def read() -> float:
        medians = json.loads(archive.read_text())["medians"]
        return medians[variant][layers][test] / medians["llama-bench"][layers][test]
    return read


def gap_share(variant: str, layers: int, test: str, component: int) -> Callable[[], float]:
    """The share (per cent) of a variant's gap that one of its named components explains."""
    def read() -> float:
        gap = next(g for g in json.loads(GAP.read_text())["gaps"]
                   if g["variant"] == variant and g["layers"] == layers and g["test"] == test)
        return 100 * gap["components"][component]["ms"] / gap["gap_ms"]
    return read


def gap_spread(variant: str, layers: str, test: str, archive: Path = SWAP_GAP) -> Callable[[], float]:
    """The spread of a variant's round medians in a yardstick_gap run: (highest - lowest) / median, per cent."""
    def read() -> float:
        rates = sorted(json.loads(archive.read_text())["variants"][variant][layers][test]["samples"])
        return 100 * (rates[-1] - rates[0]) / rates[len(rates) // 2]
    return read


def index_run(pattern: str) -> Callable[[], float]:
    """A number in the terminal of the run that installed the newest gate's wheel from an index."""
    return lambda: float(re.search(pattern, INDEX_RUN.read_text()).group(1))


def gate_log_number(run: str, pattern: str) -> Callable[[], float]:
    """A number in a gate's terminal (outputs/reference/<run>.gate.log)."""
    return lambda: float(re.search(pattern, (REF / f"{run}.gate.log").read_text()).group(1))


def old_test_part_total(column: int) -> Callable[[], float]:
    """The old test part's "all failures" row in docs/knowledge-base.md's corpus tables (that excerpt is itself
    checked against the evaluation, EXCERPTS below): its N-th cell."""
    def read() -> float:
        text = (ROOT / KB).read_text()
        row = next(line for line in text[text.index("| family (test)"):].splitlines() if "**all failures**" in line)
        return float(row.split("|")[1 + column].strip())
    return read


def frozen_reading(family: str, column: int) -> Callable[[], float]:
    """The frozen part's one archived reading: a family's row (or "all failures"), its N-th cell as a number."""
    def read() -> float:
        row = next(line for line in printed("diagnosis-frozen-cpu-vm.txt").splitlines()
                   if line.startswith("|") and family in line.split("|")[1])
        return float(row.split("|")[1 + column].strip().rstrip("%"))
    return read


def tune_flag_build(key: str) -> Callable[[], float]:
    def read() -> float:
        return float(json.loads((REF / FLAG_TUNE / "tune-attempt-1.json").read_text())["flag_builds"][0][key])
    return read


def tune_flag_gain(which: str) -> Callable[[], float]:
    """The tune report's sentence on the flag: the gain with the rebuilt wheel, or the runtime settings' alone."""
    def read() -> float:
        text = (REF / FLAG_TUNE / "tune-attempt-1.md").read_text()
        match = re.search(r"not recommended: ([\d.]+)× the defaults in tg, not 2% more than the runtime settings alone "
                          r"on the verified wheel \(([\d.]+)×\)", text)
        return float(match.group(1 if which == "rebuilt" else 2))
    return read


def blas_vendors(model: str, column: int) -> Callable[[], float]:
    """blas_vendors.py's table: a model's row, its N-th number (pp mkl, pp openblas, pp cpu, ratios)."""
    def read() -> float:
        line = next(x for x in _text(RESULTS / "blas-vendors-cpu-vm.txt").splitlines() if x.startswith(f"{model}-Q8_0 "))
        return float(line.split()[1 + column])
    return read


def openblas_round(model: str, number: int, wheel: str, test: str) -> Callable[[], float]:
    """One round's rate in openblas_vs_cpu.py's log lines."""
    def read() -> float:
        pattern = rf"^\s*{model} round {number}\s+{wheel}: .*?{test}\d+\s+([\d.]+) t/s"
        return float(re.search(pattern, _text(RESULTS / OPENBLAS_VS_CPU), re.MULTILINE).group(1))
    return read


def rpc_point(ngl: int, run: str = RPC, attempt: int = 1) -> Callable[[], float]:
    return lambda: next(p.tg_tokens_per_s for p in _verify(run, attempt).measured(RPC_OFFLOAD).points
                        if p.n_gpu_layers == ngl)


# ---------------------------------------------------------------- reading the archived files


@functools.cache
def _text(path: Path) -> str:
    return path.read_text()


@functools.cache
def _json(path: Path) -> dict:
    return json.loads(_text(path))


def _dig(data, dotted: str):
    """A dotted path into JSON or into a dataclass: list indexes, dict keys and attributes."""
    for key in dotted.split("."):
        if isinstance(data, list):
            data = data[int(key)]
        elif isinstance(data, dict):
            data = data[key]
        else:
            data = getattr(data, key)
    return data


@functools.cache
def _verify(run: str, attempt: int) -> VerifyResult:
    """A run's verify-attempt-N.json, read as the playbook reads it (the archived runs' flat shape too)."""
    return read_json(VerifyResult, REF / run / f"verify-attempt-{attempt}.json")


def build(run: str, attempt: int, key: str) -> Callable[[], float]:
    """A field of a run's build-attempt-N.json (dotted for nested: "ccache.misses")."""
    return lambda: _dig(_json(REF / run / f"build-attempt-{attempt}.json"), key)


def verify(run: str, attempt: int, unit: Unit[Any], key: str) -> Callable[[], float]:
    """A field of one unit's value in a run's verify-attempt-N.json (dotted for nested: "servers.0.build.build_s")."""
    return lambda: _dig(_verify(run, attempt).measured(unit), key)


def step_s(run: str, step: str, attempt: int = 1) -> Callable[[], float]:
    """How long a step ran, from run.json."""
    def read() -> float:
        steps = _json(REF / run / "run.json")["steps"]
        return next(s["duration_s"] for s in steps if s["step"] == step and s["attempt"] == attempt)
    return read


@functools.cache
def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(_text(path).splitlines()))


def point(run: str, attempt: int, ngl: int, column: str) -> Callable[[], float]:
    """One sweep point's column in throughput-attempt-N.csv."""
    def read() -> float:
        rows = _rows(REF / run / f"throughput-attempt-{attempt}.csv")
        return float(next(r[column] for r in rows if int(r["n_gpu_layers"]) == ngl))
    return read


def ninja_total(path: Path) -> Callable[[], int]:
    """N of the last `[n/N]` ninja printed in a build log."""
    return lambda: int(re.findall(r"\[\d+/(\d+)\]", _text(path))[-1])


def vulkan_steps(what: str) -> Callable[[], int]:
    """In the lavapipe run's build log, the ninja steps that compile a shader source ggml-vulkan generated
    (`<shader>.comp.cpp`), or those that run its shader generator (`vulkan-shaders-gen`)."""
    def read() -> int:
        steps = re.findall(r"^\s*\[\d+/\d+\] (.*)$", _text(REF / LAVAPIPE / "build-attempt-1.log"), re.MULTILINE)
        if what == "shader sources":
            return sum(1 for s in steps if "ccache" in s and re.search(r"-c \S+\.comp\.cpp\b", s))
        return sum(1 for s in steps if "vulkan-shaders-gen " in s)
    return read


def cell(run: str, attempt: int, ngl: int, column: str) -> Callable[[], str]:
    """One sweep point's column in throughput-attempt-N.csv, as written (a range such as 0.877-1.182)."""
    return lambda: next(r[column] for r in _rows(REF / run / f"throughput-attempt-{attempt}.csv")
                        if int(r["n_gpu_layers"]) == ngl)


def spread_between_processes(run: str, ngl: int, side: str, test: str = "tg") -> Callable[[], float]:
    """A sweep point's spread between one side's processes (per cent), as throughput-attempt-1.csv writes it
    ("binding 34.3%, llama-bench 19.2%")."""
    def read() -> float:
        text = cell(run, 1, ngl, f"{test}_spread_between_processes")()
        return float(re.search(rf"{re.escape(side)} ([\d.]+)%", text).group(1))
    return read


def _tune_target(run: str, target: int) -> dict:
    """One offload target of a run's tune (tune-attempt-1.json)."""
    return _json(REF / run / "tune-attempt-1.json")["targets"][target]


def recommended_gain(run: str, target: int, workload: str, depth: int) -> Callable[[], float]:
    """The side-by-side gain of a tune's recommendation for one workload at one depth."""
    def read() -> float:
        recommendation = next(r for r in _tune_target(run, target)["recommendations"] if r["workload"] == workload)
        return next(row["gain"] for row in recommendation["gains"] if row["depth"] == depth)
    return read


def target_gain(run: str, target: int, depth: int, test: str) -> Callable[[], float]:
    """A tune target's side-by-side gain (its ``gains``, as tunes before per-workload ones wrote)."""
    return lambda: next(row["gain"] for row in _tune_target(run, target)["gains"]
                        if row["depth"] == depth and row["test"] == test)


def profile_value(name: str, dotted: str) -> Callable[[], object]:
    """A value of a profile in params/ (``verify.tune_budget_s``)."""
    return lambda: _dig(yaml.safe_load((ROOT / "params" / name).read_text()), dotted)


def tune_trial(run: str, target: int, label: str, depth: int, test: str) -> Callable[[], float]:
    """One trial's rate in a tune."""
    return lambda: next(t["rates"][str(depth)][test] for t in _tune_target(run, target)["trials"] if t["label"] == label)


def medians(run: str, test: str) -> Callable[[], str]:
    """A run's yardstick medians (pp or tg) at every layer count, as outputs/reference/README.md lists them."""
    return lambda: ", ".join(format(float(r[f"{test}_ratio"]), ".3f")
                             for r in _rows(REF / run / "throughput-attempt-1.csv"))


def build_speed_rows(text: str) -> dict[str, tuple[float, float, str]]:
    """build_speed.py's final table: case letter -> (wall seconds, ratio to (a), detail)."""
    rows = {}
    for match in re.finditer(r"^\((\w)\) .*?\s(\d+\.\d)\s+(\d\.\d{3})\s+yes[ \t]*(.*)$", text, re.MULTILINE):
        rows[match.group(1)] = (float(match.group(2)), float(match.group(3)), match.group(4).strip())
    return rows


def case(name: str, letter: str, what: str = "seconds") -> Callable[[], float]:
    """A build_speed.py case in benchmarks/results/NAME: its seconds, ratio, or a count from its detail
    ("hits", "misses", "remote", "ninja steps")."""
    def read() -> float:
        seconds, ratio, detail = build_speed_rows(_text(RESULTS / name))[letter]
        if what == "seconds":
            return seconds
        if what == "ratio":
            return ratio
        return int(re.search(rf"(\d+) {what}", detail).group(1))
    return read


def pypi_toolkit(pattern: str) -> Callable[[], float]:
    """A number from benchmarks/results/pypi-toolkit-cpu-vm.txt (pypi_toolkit.py's output)."""
    return lambda: float(re.search(pattern, _text(RESULTS / PYPI)).group(1))


def overlay_ratios(column: str) -> dict[int, float]:
    """Vulkan's speed over CUDA's per layer count, from cuda-vs-vulkan-h200/overlay.csv."""
    rows = _rows(REF / "cuda-vs-vulkan-h200" / "overlay.csv")
    by = {(r["backend"], int(r["n_gpu_layers"])): float(r[column]) for r in rows}
    return {ngl: by["vulkan", ngl] / by["cuda", ngl] for (backend, ngl) in by if backend == "cuda"}


def overlay(backend: str, ngl: int, column: str) -> Callable[[], float]:
    def read() -> float:
        rows = _rows(REF / "cuda-vs-vulkan-h200" / "overlay.csv")
        return float(next(r[column] for r in rows if r["backend"] == backend and int(r["n_gpu_layers"]) == ngl))
    return read


def partial_offload(column: str) -> dict[int, float]:
    """overlay_ratios at every layer count short of full offload."""
    ratios = overlay_ratios(column)
    return {ngl: ratio for ngl, ratio in ratios.items() if ngl < max(ratios)}


def tune_gains() -> list[list[str]]:
    """The side-by-side table of tune-attempt-1.md: depth, test, defaults, tuned, gain, bench defaults,
    bench tuned, bench gain."""
    table = _text(REF / TUNE / "tune-attempt-1.md").split("| depth | test |")[1].split("\n\n")[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def tune_gain(depth: int, test: str, bench: bool = False) -> Callable[[], float]:
    def read() -> float:
        row = next(r for r in tune_gains() if r[0] == str(depth) and r[1] == test)
        return float((row[7] if bench else row[4]).rstrip("×"))
    return read


def sweep_notes(run: str) -> list[tuple[str, int, float, str]]:
    """Every ratio of a run's sweep outside playbook.verify.sweep.FAIR_RATIO with its note: (test, layers,
    ratio, the note's sentence about it)."""
    from playbook.verify.sweep import FAIR_RATIO

    outside = []
    for row in _rows(REF / run / "throughput-attempt-1.csv"):
        notes = {part.split(" ", 1)[0]: part for part in row["ratio_note"].split("; ") if part}
        for test in ("pp", "tg"):
            ratio = float(row[f"{test}_ratio"])
            if not FAIR_RATIO[0] <= ratio <= FAIR_RATIO[1]:
                note = next(text for key, text in notes.items() if key == test and text.startswith(f"{test} "))
                outside.append((test, int(row["n_gpu_layers"]), ratio, note))
    return outside


def _sweep_ratios(run: str, below_full: bool = False) -> list[float]:
    rows = _rows(REF / run / "throughput-attempt-1.csv")
    top = max(int(r["n_gpu_layers"]) for r in rows)
    return [float(r[f"{t}_ratio"]) for r in rows for t in ("pp", "tg")
            if not below_full or int(r["n_gpu_layers"]) < top]


def _not_explained(run: str) -> list[tuple[str, int, float, str]]:
    return [n for n in sweep_notes(run) if "not explained" in n[3]]


def _within_spread(run: str) -> list[tuple[str, int, float, str]]:
    return [n for n in sweep_notes(run) if "within the two measurements' spread" in n[3]]


def _spreads(run: str) -> list[float]:
    return [float(re.search(r"±(\d+\.\d)%", note).group(1)) for *_, note in _within_spread(run)]


def not_explained_words(run: str) -> str:
    """"one, generation at 0 layers (1.099)": how many ratios the run's notes leave unexplained, and which."""
    named = [f"{'generation' if test == 'tg' else 'prompt processing'} at {ngl} layers ({ratio:.3f})"
             for test, ngl, ratio, _ in _not_explained(run)]
    return f"{_words(len(named))}, {_and(named)}"


def fair_ratio(end: int) -> Callable[[], float]:
    """playbook.verify.sweep.FAIR_RATIO: a ratio outside it gets a note."""
    def read() -> float:
        from playbook.verify.sweep import FAIR_RATIO

        return FAIR_RATIO[end]
    return read


def build_speed_goal(letter: str) -> Callable[[], float]:
    def read() -> float:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        try:
            import build_speed
        finally:
            sys.path.pop(0)
        return build_speed.GOALS[letter]
    return read


def tune_goal() -> float:
    from playbook.verify.tune import report_markdown

    return inspect.signature(report_markdown).parameters["goal_gain"].default


def _words(n: int) -> str:
    return ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"][n]


def _and(items: list) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def per_cent(read: Callable[[], float]) -> Callable[[], float]:
    return lambda: 100 * read()


def thousands(read: Callable[[], float]) -> Callable[[], float]:
    return lambda: read() / 1000


def mega(read: Callable[[], float]) -> Callable[[], float]:
    return lambda: read() / 1e6


def giga(read: Callable[[], float]) -> Callable[[], float]:
    return lambda: read() / 1e9


def _cpu_build_log() -> Path:
    return ROOT / "tests" / "data" / "clean" / "cpu-build.txt"


# ---------------------------------------------------------------- the claims


@dataclass(frozen=True)
class Figure:
    readme: str
    template: str  # the README's words, `{}` where the figure goes
    read: Callable[[], object]
    spec: str = ""  # format() spec the README prints the file's number with

    def value(self) -> str:
        return format(self.read(), self.spec)

    def text(self) -> str:
        return self.template.replace("{}", self.value())


@dataclass(frozen=True)
class Excerpt:
    readme: str
    what: str  # says where the text comes from
    text: Callable[[], str]


def printed(name: str) -> str:
    """A results file without its provenance lines (benchmarks/archive.py): what the benchmark printed."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import archive
    finally:
        sys.path.pop(0)
    return archive.body(_text(RESULTS / name))


def results_table(name: str, first_line: str) -> Callable[[], str]:
    """A results file from its last line starting with `first_line` to its end."""
    def read() -> str:
        lines = _text(RESULTS / name).splitlines()
        start = max(i for i, line in enumerate(lines) if line.startswith(first_line))
        return "\n".join(lines[start:])
    return read


def throughput_table(run: str) -> Callable[[], str]:
    """benchmarks/throughput_table.py's table for a run, from its column header on."""
    def read() -> str:
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput_table.py"), str(REF / run)],
                             capture_output=True, text=True, check=True, timeout=120).stdout
        return out[out.index("ngl"):]
    return read


def tune_table() -> str:
    """benchmarks/README.md's tuning table, rebuilt from tune-attempt-1.md."""
    return "\n".join(f"| {r[0]} | {r[1]}{512 if r[1] == 'pp' else 128} | {r[2]} | {r[3]} | {r[4]} | {r[7]} |"
                     for r in tune_gains())


def diagnose_speed(pattern: str) -> Callable[[], float]:
    """The number a regex's group finds in the last matching line of results/diagnose-speed-cpu-vm.txt."""
    return lambda: float(re.findall(pattern, _text(RESULTS / DIAGNOSE), re.MULTILINE)[-1])


def similarity_stage(group: int) -> Callable[[], int]:
    """A number of the whole-train-logs line of results/similarity-loto-cpu-vm.txt: 1 named rightly, 2 logs,
    3 of them only seeming failed, 4 named wrongly."""
    line = r"whole train logs, every pattern set aside: (\d+) of (\d+) named rightly \((\d+) of them only seem failed\), (\d+) named wrongly"
    return lambda: int(re.findall(line, _text(RESULTS / SIMILARITY))[-1][group - 1])


def wheel_index_case(case: str, column: str = "wall") -> Callable[[], float]:
    """benchmarks/wheel_index.py's table: case a (the cold build) or b (the second machine), its wall seconds or
    its ratio to (a)."""
    def read() -> float:
        line = next(x for x in _text(RESULTS / WHEEL_INDEX).splitlines() if x.startswith(f"({case}) "))
        wall, ratio = line.split()[-3:-1]
        return float(wall if column == "wall" else ratio)
    return read


def wheel_index_number(pattern: str) -> Callable[[], float]:
    """The number a regex's group finds in benchmarks/wheel_index.py's archived output."""
    return lambda: float(re.search(pattern, _text(RESULTS / WHEEL_INDEX), re.MULTILINE)[1])


@functools.cache
def corpus_tables() -> str:
    """README.md's corpus tables, as the evaluation of tests/data/corpus prints them."""
    from playbook.knowledge.evaluation import default_corpus, evaluate, readme_block

    return readme_block(evaluate(default_corpus(), "train"), evaluate(default_corpus(), "test"))


F = Figure
FIGURES = [
    # docs/reference-runs.md, docs/backends.md and outputs/reference/README.md: the fork, OpenBLAS and RPC on the
    # CPU-only VM
    F(FORK_PAGE, "The cold build took {} s (311 ninja steps)", build(FORK, 1, "duration_s"), ".0f"),
    F(FORK_PAGE, "The cold build took 2755 s ({} ninja steps)", ninja_total(REF / FORK / "build-attempt-1.log")),
    F(RUNS, "built cold in {} s (311 ninja steps, libmtmd", build(FORK, 1, "duration_s"), ".0f"),
    F(RUNS, "built cold in 2755 s ({} ninja steps, libmtmd", ninja_total(REF / FORK / "build-attempt-1.log")),
    F(BACKENDS, "the 1B-shaped model 8.8 against {} t/s", openblas_vs_cpu("1b", 1), ".1f"),
    F(BACKENDS, "1b-Q8_0: oneMKL {}, OpenBLAS", blas_vendors("1b", 0), ".1f"),
    F(BACKENDS, "1b-Q8_0: oneMKL 8.0, OpenBLAS {}, CPU", blas_vendors("1b", 1), ".1f"),
    F(BACKENDS, "OpenBLAS 14.3, CPU {} t/s", blas_vendors("1b", 2), ".1f"),
    F(BACKENDS, "tiny-Q8_0: oneMKL {}, OpenBLAS", blas_vendors("tiny", 0), ".1f"),
    F(BACKENDS, "oneMKL 444.8, OpenBLAS {}, CPU", blas_vendors("tiny", 1), ".1f"),
    F(BACKENDS, "OpenBLAS 407.1, CPU {} t/s", blas_vendors("tiny", 2), ".1f"),
    F(BACKENDS, "184.1 against {} t/s (ratio 0.56", openblas_vs_cpu("tiny", 1), ".1f"),
    F(BACKENDS, "(the tiny model's: 5.4 to {} t/s)", openblas_round("tiny", 3, "openblas", "tg"), ".1f"),
    F(BACKENDS, "from the same tree ({} s: an earlier run", verify(RPC, 1, RPC_OFFLOAD, "servers.0.build.build_s"), ".1f"),
    F(RUNS, "from the same tree ({} s: an earlier run", verify(RPC, 1, RPC_OFFLOAD, "servers.0.build.build_s"), ".1f"),
    F(BACKENDS, "(top-1 agreement {} %; both sides", per_cent(verify(RPC, 1, RPC_OFFLOAD, "agreement.top1_agreement")), ".0f"),
    F(BACKENDS, "token generation {} t/s with 0, 0.8 with 2", rpc_point(0), ".1f"),
    F(BACKENDS, "the server then holding {} MiB of weights", verify(RPC, 1, RPC_OFFLOAD, "servers.0.model_mib_by_layers.5"),
      ".1f"),
    F(BACKENDS, "MiB of weights ({} MiB with 2)", verify(RPC, 1, RPC_OFFLOAD, "servers.0.model_mib_by_layers.2"), ".1f"),
    F(BACKENDS, "without a server, locally: {} t/s", point(RPC, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "built cold in {} s; verify ok", build(OPENBLAS, 1, "duration_s"), ".0f"),
    F(RUNS, "pp512 {} t/s, tg32", point(OPENBLAS, 1, 0, "pp_tokens_per_s"), ".1f"),
    F(RUNS, "t/s, tg32 {} t/s (tiny model)", point(OPENBLAS, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "tg 4.1 / 0.8 / {} t/s with 0 / 2 / 5", rpc_point(5), ".1f"),
    # docs/measurements.md and outputs/reference/README.md: RPC on the H100, after repair named the second C++ runtime
    F(MEASURE, "rebuilt with `-DCMAKE_CXX_COMPILER=/usr/bin/c++` in {} s", build(RPC_GPU, 2, "duration_s"), ".1f"),
    F(MEASURE, "token generation {} t/s with 0 layers sent, 97.4", rpc_point(0, RPC_GPU, 2), ".1f"),
    F(MEASURE, "t/s with 0 layers sent, {} with 8", rpc_point(8, RPC_GPU, 2), ".1f"),
    F(MEASURE, "with 8 and {} with all 17", rpc_point(17, RPC_GPU, 2), ".1f"),
    F(MEASURE, "server then holding {} MiB), against", verify(RPC_GPU, 2, RPC_OFFLOAD, "servers.0.held_mib_by_layers.17"),
      ".1f"),
    F(MEASURE, "against {} t/s locally without a server", point(RPC_GPU, 2, 0, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "relative error {}, top-1 agreement 85.5", verify(RPC_GPU, 2, RPC_OFFLOAD, "agreement.relative_error"), ".3f"),
    F(MEASURE, "top-1 agreement {} % (the limits", per_cent(verify(RPC_GPU, 2, RPC_OFFLOAD, "agreement.top1_agreement")), ".1f"),
    F(MEASURE, "(the limits: {} and 75 %)", verify(RPC_GPU, 2, RPC_OFFLOAD, "agreement.max_relative_error"), ".1f"),
    F(MEASURE, "(the limits: 0.1 and {} %)", per_cent(verify(RPC_GPU, 2, RPC_OFFLOAD, "agreement.min_top1_agreement")), ".0f"),
    F(RUNS, "tg {} / 97.4 / 663.6 t/s with 0 / 8 / 17", rpc_point(0, RPC_GPU, 2), ".1f"),
    F(RUNS, "tg 65.8 / {} / 663.6 t/s with 0 / 8 / 17", rpc_point(8, RPC_GPU, 2), ".1f"),
    F(RUNS, "tg 65.8 / 97.4 / {} t/s with 0 / 8 / 17", rpc_point(17, RPC_GPU, 2), ".1f"),
    F(RUNS, "layers sent to the CUDA server, {} t/s locally", point(RPC_GPU, 2, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "layers sent, {} t/s locally", point(RPC, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "t/s locally; {} MiB of weights", verify(RPC, 1, RPC_OFFLOAD, "servers.0.model_mib_by_layers.5"), ".1f"),
    F(BACKENDS, "all 167 of 167 build steps in {} s", build(HIP, 1, "duration_s"), ".0f"),
    F(CUDA_PYPI_PAGE, "on 2 jobs in {} s, run", build(CUDA_PYPI, 2, "duration_s"), ".0f"),
    # docs/measurements.md: Verify against llama-bench, and the tune, on an H100
    F(MEASURE, "verify with the tune took {} s in", step_s(TUNE_7B, "verify"), ".1f"),
    # README.md: Use it
    F(README, "one cold CPU build took {} s on a 2-core VM", case(CPU_VM, "b"), ".1f"),
    # docs/steps.md
    F(STEPS, "`-DLLAVA_BUILD=OFF`, {} instead of 193 ninja steps", case(CPU_VM, "b", "ninja steps")),
    F(STEPS, "140 instead of {} ninja steps for a CPU wheel", ninja_total(_cpu_build_log())),
    F(STEPS, "(on a GPU machine: {} instead of 339 ninja steps", ninja_total(REF / MTMD / "build-attempt-1.log")),
    F(STEPS, "286 instead of {} ninja steps for sm_90", ninja_total(REF / MTMD / "build-attempt-2.log")),
    F(STEPS, "the repair's rebuild with ccache warm took {} s", build(MTMD, 2, "duration_s"), ".0f"),
    # docs/backends.md: Vulkan on a machine without a GPU
    F(BACKENDS, "pinned sdist took {} s on the shared 2-core VM", build(LAVAPIPE, 1, "duration_s"), ".0f"),
    F(BACKENDS, "on the shared 2-core VM ({} ninja steps", ninja_total(REF / LAVAPIPE / "build-attempt-1.log")),
    F(BACKENDS, "for a CPU wheel: {} C and C++ compiles, ccache's misses", build(LAVAPIPE, 1, "ccache.misses")),
    F(BACKENDS, "ccache's misses, {} of them the shader sources ggml-vulkan generates", vulkan_steps("shader sources")),
    F(BACKENDS, "generates, and {} runs of its shader generator", vulkan_steps("generator runs")),
    F(BACKENDS, "(465 ninja steps against {} for a CPU wheel", case(CPU_VM, "b", "ninja steps")),
    F(BACKENDS, "the wheel is {} MB. Verify", mega(build(LAVAPIPE, 1, "wheel.size_bytes")), ".0f"),
    F(BACKENDS, "MB. Verify ({} s) found", step_s(LAVAPIPE, "verify"), ".0f"),
    F(BACKENDS, "CPU's (relative error {}, top-1 agreement", verify(LAVAPIPE, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(BACKENDS, "top-1 agreement {} %). Its speeds", per_cent(verify(LAVAPIPE, 1, GPU_CPU_AGREEMENT, "top1_agreement")), ".1f"),
    F(BACKENDS, "token generation {} t/s on the CPU backend", point(LAVAPIPE, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(BACKENDS, "and {} t/s with every layer on lavapipe", point(LAVAPIPE, 1, 5, "tg_tokens_per_s"), ".1f"),
    # docs/backends.md: CUDA against Vulkan on one GPU (overlay.csv)
    F(BACKENDS, "(CUDA, built in {} s)", build(CUDA, 1, "duration_s"), ".0f"),
    F(BACKENDS, "(Vulkan, built in {} s)", build(VULKAN, 1, "duration_s"), ".0f"),
    F(BACKENDS, "CUDA generates {} t/s and Vulkan", overlay("cuda", 17, "tg_tokens_per_s"), ".1f"),
    F(BACKENDS, "and Vulkan {} t/s (0.85×)", overlay("vulkan", 17, "tg_tokens_per_s"), ".1f"),
    F(BACKENDS, "Vulkan 749.9 t/s ({}×)", lambda: overlay_ratios("tg_tokens_per_s")[17], ".2f"),
    F(BACKENDS, "slightly faster, {}k t/s against", thousands(overlay("vulkan", 17, "pp_tokens_per_s")), ".1f"),
    F(BACKENDS, "t/s against {}k t/s (1.06×)", thousands(overlay("cuda", 17, "pp_tokens_per_s")), ".1f"),
    F(BACKENDS, "against 48.3k t/s ({}×)", lambda: overlay_ratios("pp_tokens_per_s")[17], ".2f"),
    F(BACKENDS, "on the CPU (0 to {} layers)", lambda: max(partial_offload("pp_tokens_per_s"))),
    F(BACKENDS, "Vulkan processes prompts faster at {}",
      lambda: "every layer count" if min(partial_offload("pp_tokens_per_s").values()) > 1 else "some layer counts"),
    F(BACKENDS, "layer count ({}× to", lambda: min(partial_offload("pp_tokens_per_s").values()), ".2f"),
    F(BACKENDS, "× to {}× CUDA's speed)", lambda: max(partial_offload("pp_tokens_per_s").values()), ".2f"),
    F(BACKENDS, "in generation CUDA is ahead at {} layers",
      lambda: _and([n for n, r in sorted(partial_offload("tg_tokens_per_s").items()) if r < 1])),
    F(BACKENDS, "layers (Vulkan {}×)", lambda: "× and ".join(
        format(r, ".2f") for _, r in sorted(partial_offload("tg_tokens_per_s").items()) if r < 1)),
    F(BACKENDS, "and Vulkan at {} (",
      lambda: _and([n for n, r in sorted(partial_offload("tg_tokens_per_s").items()) if r > 1])),
    F(BACKENDS, "and 14 ({}× to", lambda: min(r for r in partial_offload("tg_tokens_per_s").values() if r > 1), ".2f"),
    F(BACKENDS, "× to {}×).", lambda: max(r for r in partial_offload("tg_tokens_per_s").values() if r > 1), ".2f"),
    # docs/measurements.md: Measured on a GPU machine
    F(MEASURE, "built the wheel in {} s, found GPU", build(GPU_1B, 1, "duration_s"), ".0f"),
    F(MEASURE, "(relative error {} over 256 positions", verify(GPU_1B, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(MEASURE, "rising from {} t/s with no layer", point(GPU_1B, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "on the GPU to {} t/s with all 17", point(GPU_1B, 1, 17, "tg_tokens_per_s"), ".0f"),
    F(MEASURE, "low-level API is {} t/s for token generation", point(WITH_BENCH, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "against llama-bench's {} (ratio", point(WITH_BENCH, 1, 17, "bench_tg_tokens_per_s"), ".1f"),
    F(MEASURE, "llama-bench's 932.1 (ratio {}) and", point(WITH_BENCH, 1, 17, "tg_ratio"), ".3f"),
    F(MEASURE, "and {}k t/s for prompt processing", thousands(point(WITH_BENCH, 1, 17, "pp_tokens_per_s")), ".1f"),
    F(MEASURE, "for prompt processing (ratio {});", point(WITH_BENCH, 1, 17, "pp_ratio"), ".3f"),
    F(MEASURE, "GPU ({} GB/s ÷", verify(WITH_BENCH, 1, THROUGHPUT, "gpu_bandwidth_gb_per_s"), ".0f"),
    F(MEASURE, "GB/s ÷ {} GB) is", giga(verify(WITH_BENCH, 1, MODEL_FILE, "description.file_size_bytes")), ".2f"),
    F(MEASURE, "GB) is {} t/s, so generation", verify(WITH_BENCH, 1, THROUGHPUT, "tg_limit_tokens_per_s"), ".0f"),
    F(MEASURE, "generation reaches {} % of it", per_cent(point(WITH_BENCH, 1, 17, "tg_bandwidth_fraction")), ".1f"),
    F(MEASURE, "Q4_0 model ({} GB)", giga(verify(GPU_7B, 1, MODEL_FILE, "description.file_size_bytes")), ".1f"),
    F(MEASURE, "token generation {} t/s with no layer on the GPU, 362.9", point(GPU_7B, 1, 0, "tg_tokens_per_s"),
      ".1f"),
    F(MEASURE, "on the GPU, {} t/s with all 33", point(GPU_7B, 1, 33, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "with all 33 (llama-bench {},", point(GPU_7B, 1, 33, "bench_tg_tokens_per_s"), ".1f"),
    F(MEASURE, "348.6, ratio {}; 28.6", point(GPU_7B, 1, 33, "tg_ratio"), ".3f"),
    F(MEASURE, "1.041; {} % of the 1270", per_cent(point(GPU_7B, 1, 33, "tg_bandwidth_fraction")), ".1f"),
    F(MEASURE, "% of the {} t/s bandwidth limit), logits", verify(GPU_7B, 1, THROUGHPUT, "tg_limit_tokens_per_s"), ".0f"),
    F(MEASURE, "logits relative error {} and top-1", verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(MEASURE, "top-1 agreement {} % against the CPU", per_cent(verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "top1_agreement")), ".1f"),
    F(MEASURE, "libmtmd left out, {} ninja steps), measured", case(H100, "b", "ninja steps")),
    F(MEASURE, "took {} s cold against 385.2 s for a plain", case(H100, "b"), ".1f"),
    F(MEASURE, "cold against {} s for a plain `pip wheel` with the same", case(H100, "a"), ".1f"),
    F(MEASURE, "`CMAKE_ARGS`, {} s after a one-flag change", case(H100, "c"), ".1f"),
    F(MEASURE, "one-flag change (ccache: {} hits)", case(H100, "c", "hits")),
    F(MEASURE, "hits) and {} s unchanged (wheel cache)", case(H100, "d"), ".1f"),
    F(MEASURE, "from the wheel cache in {} s. Found there", build(WRONG_ARCH, 2, "duration_s"), ".1f"),
    # docs/fleet.md: the shared compiler cache
    F(FLEET, "second machine's cold CPU build took {} s", case(CPU_VM, "e"), ".1f"),
    F(FLEET, "CPU build took 49.1 s ({} remote hits, 10", case(CPU_VM, "e", "remote")),
    F(FLEET, "117 remote hits, {} misses) against", case(CPU_VM, "e", "misses")),
    F(FLEET, "10 misses) against {} s cold; on one GPU machine", case(CPU_VM, "b"), ".1f"),
    F(FLEET, "sm_90 build took {} s (271 remote hits", case(H100, "e"), ".1f"),
    F(FLEET, "sm_90 build took 37.6 s ({} remote hits, no misses)", case(H100, "e", "remote")),
    F(FLEET, "271 remote hits, {} misses) against 394.2",
      lambda: "no" if case(H100, "e", "misses")() == 0 else case(H100, "e", "misses")()),
    F(FLEET, "no misses) against {} s cold in the same command", case(H100, "b"), ".1f"),
    F(FLEET, "cold in the same command, {}× ([`benchmarks/README.md`]", lambda: case(H100, "e")() / case(H100, "b")(),
      ".3f"),
    F(FLEET, "against the {} s of a plain `pip wheel` timed by", case(H100, "a"), ".1f"),
    F(FLEET, "timed by the sitting's first command, {}×.", case(H100, "e", "ratio"), ".3f"),

    # benchmarks/README.md: Throughput
    F(BENCH, "llama-bench (ratio {} for generation,", point(WITH_BENCH, 1, 17, "tg_ratio"), ".3f"),
    F(BENCH, "for generation, {} for prompt processing)", point(WITH_BENCH, 1, 17, "pp_ratio"), ".3f"),
    F(BENCH, "The limit is {} GB/s (NVML", verify(WITH_BENCH, 1, THROUGHPUT, "gpu_bandwidth_gb_per_s"), ".0f"),
    F(BENCH, "bus width) ÷ {} GB of weights", giga(verify(WITH_BENCH, 1, MODEL_FILE, "description.file_size_bytes")), ".2f"),
    F(BENCH, "GB of weights = {} t/s.", verify(WITH_BENCH, 1, THROUGHPUT, "tg_limit_tokens_per_s"), ".0f"),
    F(BENCH, "synthetic model ({} GB; the wheel", giga(verify(GPU_7B, 1, MODEL_FILE, "description.file_size_bytes")), ".1f"),
    F(BENCH, "from the wheel cache in {} s, verify took", build(GPU_7B, 1, "duration_s"), ".1f"),
    F(BENCH, "verify took {} s):", step_s(GPU_7B, "verify"), ".0f"),
    F(BENCH, "Full offload: {} t/s generation", point(GPU_7B, 1, 33, "tg_tokens_per_s"), ".1f"),
    F(BENCH, "generation against llama-bench's {} (1.041)", point(GPU_7B, 1, 33, "bench_tg_tokens_per_s"), ".1f"),
    F(BENCH, "llama-bench's 348.6 ({}), 28.6", point(GPU_7B, 1, 33, "tg_ratio"), ".3f"),
    F(BENCH, "(1.041), {} % of the", per_cent(point(GPU_7B, 1, 33, "tg_bandwidth_fraction")), ".1f"),
    F(BENCH, "% of the {} t/s bandwidth limit. GPU", verify(GPU_7B, 1, THROUGHPUT, "tg_limit_tokens_per_s"), ".0f"),
    F(BENCH, "logits: relative error {} (Q4_0", verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(BENCH, "(Q4_0 allows {}), top-1", verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "max_relative_error"), ".2f"),
    F(BENCH, "top-1 agreement {} %, the GPU's", per_cent(verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "top1_agreement")), ".1f"),
    F(BENCH, "CPU's top 5 at {} % of the 256", per_cent(verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "top1_in_cpu_top5")), ".1f"),
    F(BENCH, "explain the {}–1.12 ratios at partial offload", lambda: min(_sweep_ratios(GPU_7B, True)), ".2f"),
    F(BENCH, "explain the 0.91–{} ratios at partial offload", lambda: max(_sweep_ratios(GPU_7B, True)), ".2f"),
    # benchmarks/README.md: Runtime tuning (tune-attempt-1.md, throughput-attempt-1.csv)
    F(BENCH, "The goal, {}× at depth 4096", tune_goal, ".2f"),
    F(BENCH, "is met in both ({}× prompt processing", tune_gain(4096, "pp"), ".3f"),
    F(BENCH, "prompt processing, {}× generation)", tune_gain(4096, "tg"), ".3f"),
    F(BENCH, "`ratio_note` column) gives ratios {}–", lambda: min(_sweep_ratios(TUNE)), ".2f"),
    F(BENCH, "gives ratios 0.94–{}. Five", lambda: max(_sweep_ratios(TUNE)), ".2f"),
    F(BENCH, "{} are outside 0.97–1.03", lambda: _words(len(sweep_notes(TUNE))).capitalize()),
    F(BENCH, "are outside {}–1.03", fair_ratio(0), ".2f"),
    F(BENCH, "are outside 0.97–{}:", fair_ratio(1), ".2f"),
    F(BENCH, "0.97–1.03: {} are noted as within the spread", lambda: _words(len(_within_spread(TUNE)))),
    F(BENCH, "(±{} % to ±63 % at two standard deviations)", lambda: min(_spreads(TUNE)), ".0f"),
    F(BENCH, "(±7 % to ±{} % at two standard deviations)", lambda: max(_spreads(TUNE)), ".0f"),
    F(BENCH, "and {}, as not explained by this run's numbers", lambda: not_explained_words(TUNE)),
    F(BENCH, "(identical settings, {} % beyond two standard deviations)",
      lambda: float(re.search(r"(\d+\.\d)% beyond", _not_explained(TUNE)[0][3]).group(1)), ".1f"),
    # benchmarks/README.md: Build speed
    F(BENCH, "PyPI wheels: {} ninja steps in 4305 s", ninja_total(REF / CUDA_PYPI / "build-attempt-2.log")),
    F(BENCH, "286 ninja steps in {} s while other builds", build(CUDA_PYPI, 2, "duration_s"), ".0f"),
    F(BENCH, "`20261122T010438Z-vm` | cold, {} ninja steps", ninja_total(REF / GPU_1B / "build-attempt-1.log")),
    F(BENCH, "(libmtmd built) | {} s | 322", build(GPU_1B, 1, "duration_s"), ".0f"),
    F(BENCH, "(libmtmd built) | 271 s | {} misses", build(GPU_1B, 1, "ccache.misses")),
    F(BENCH, "of the same kind | {} s |", build(WITH_BENCH, 1, "duration_s"), ".0f"),
    F(BENCH, "of the same kind | 265 s | {} misses", build(WITH_BENCH, 1, "ccache.misses")),
    F(BENCH, "after an sm_90 build | {} s |", build(WRONG_ARCH, 1, "duration_s"), ".0f"),
    F(BENCH, "after an sm_90 build | 241 s | {} hits", build(WRONG_ARCH, 1, "ccache.hits")),
    F(BENCH, "| 241 s | 178 hits, {} misses (the CUDA objects)", build(WRONG_ARCH, 1, "ccache.misses")),
    F(BENCH, "retry with the sm_90 fingerprint | {} s | wheel cache", build(WRONG_ARCH, 2, "duration_s"), ".1f"),
    F(BENCH, "llama-bench from the same tree | {} s | warm", verify(WITH_BENCH, 1, LLAMA_BENCH, "build_s"), ".0f"),
    F(BENCH, "`20261122T040220Z-vm` | cold, {} ninja steps", ninja_total(REF / MTMD / "build-attempt-1.log")),
    F(BENCH, "(libmtmd left out) | {} s |", build(MTMD, 1, "duration_s"), ".0f"),
    F(BENCH, "(libmtmd left out) | 204 s | {} misses", build(MTMD, 1, "ccache.misses")),
    F(BENCH, "`20261123T174631Z-vm` | cold, {} ninja steps", ninja_total(REF / CUDA / "build-attempt-1.log")),
    F(BENCH, "`20261123T174631Z-vm` | cold, 286 ninja steps | {} s", build(CUDA, 1, "duration_s"), ".0f"),
    F(BENCH, "286 ninja steps | 240 s | {} misses", build(CUDA, 1, "ccache.misses")),
    F(BENCH, "first command's (a), {} s, given", case(H100, "a"), ".1f"),
    F(BENCH, "Goals: (c) ≤ {}×", build_speed_goal("c"), ".2f"),
    F(BENCH, "(d) ≤ {}× and (e) ≤ 0.15× are met", build_speed_goal("d"), ".2f"),
    F(BENCH, "and (e) ≤ {}× are met", build_speed_goal("e"), ".2f"),
    F(BENCH, "(b) ≤ {}× is not", build_speed_goal("b"), ".1f"),
    F(BENCH, "the cold build took {}× the plain", case(H100, "b", "ratio"), ".3f"),
    F(BENCH, "`pip wheel`, {} s more.", lambda: case(H100, "b")() - case(H100, "a")(), ".1f"),
    F(BENCH, "stored {} objects locally and in Redis", case(H100, "b", "misses")),
    F(BENCH, "explains the {} s is not known", lambda: case(H100, "b")() - case(H100, "a")(), ".1f"),
    F(BENCH, "in the same command, (e) took {} / 394.2", case(H100, "e"), ".1f"),
    F(BENCH, "(e) took 37.6 / {} =", case(H100, "b"), ".1f"),
    F(BENCH, "37.6 / 394.2 = {}×", lambda: case(H100, "e")() / case(H100, "b")(), ".3f"),
    F(BENCH, "(the same {} steps cold", case(H100, "b", "ninja steps")),
    F(BENCH, "286 steps cold: {} s against", case(H100, "b"), ".1f"),
    F(BENCH, "s against {} s and 240 s)", build(MTMD, 1, "duration_s"), ".0f"),
    F(BENCH, "s against 204 s and {} s)", build(CUDA, 1, "duration_s"), ".0f"),
    F(BENCH, "in the same run, (e) took {} / 912.0", case(CPU_VM, "e"), ".1f"),
    F(BENCH, "(e) took 49.1 / {} =", case(CPU_VM, "b"), ".1f"),
    F(BENCH, "49.1 / 912.0 = {}×", lambda: case(CPU_VM, "e")() / case(CPU_VM, "b")(), ".3f"),
    F(BENCH, "the goal, (e) ≤ {}×, holds against either", build_speed_goal("e"), ".2f"),
    F(BENCH, "The {} misses are the ten unity-build sources", case(CPU_VM, "e", "misses")),
    # benchmarks/README.md: CUDA from PyPI
    F(BENCH, "cuBLAS), {} MB downloaded", pypi_toolkit(r"(\d+) MB downloaded"), ".0f"),
    F(BENCH, "an {} MB root", pypi_toolkit(r"root (\d+) MB"), ".0f"),
    F(BENCH, "root; {} s into an empty cache", pypi_toolkit(r"empty cache: (\d+\.\d) s"), ".1f"),
    F(BENCH, "empty cache, {} s the second time", pypi_toolkit(r"second run: +(\d+\.\d+) s"), ".2f"),

    # outputs/reference/README.md
    F(RUNS, "(`wheelhouse/`, {} MB;", mega(build(GPU_1B, 1, "wheel.size_bytes")), ".0f"),
    F(RUNS, "-DCMAKE_CUDA_ARCHITECTURES=90`; built in {} s (339", build(GPU_1B, 1, "duration_s"), ".0f"),
    F(RUNS, "built in 271 s ({} ninja steps, ccache cold", ninja_total(REF / GPU_1B / "build-attempt-1.log")),
    F(RUNS, "ccache cold: {} misses); verify", build(GPU_1B, 1, "ccache.misses")),
    F(RUNS, "256 positions, relative error {}, top-1 agreement 85", verify(GPU_1B, 1, GPU_CPU_AGREEMENT, "relative_error"),
      ".3f"),
    F(RUNS, "top-1 agreement {} % (the GPU's top-1", per_cent(verify(GPU_1B, 1, GPU_CPU_AGREEMENT, "top1_agreement")), ".0f"),
    F(RUNS, "token generation {} t/s with no layer on the GPU → 940", point(GPU_1B, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "on the GPU → {} t/s with all 17", point(GPU_1B, 1, 17, "tg_tokens_per_s"), ".0f"),
    F(RUNS, "(512 tokens) {}k → 48.7k t/s", thousands(point(GPU_1B, 1, 0, "pp_tokens_per_s")), ".1f"),
    F(RUNS, "(512 tokens) 3.7k → {}k t/s", thousands(point(GPU_1B, 1, 17, "pp_tokens_per_s")), ".1f"),
    F(RUNS, "built for sm_80 only ({} s;", build(WRONG_ARCH, 1, "duration_s"), ".0f"),
    F(RUNS, "only (241 s; ccache {} hits", build(WRONG_ARCH, 1, "ccache.hits")),
    F(RUNS, "ccache 178 hits, {} misses); verify found", build(WRONG_ARCH, 1, "ccache.misses")),
    F(RUNS, "reused its wheel from the wheel cache in {} s; verify passed", build(WRONG_ARCH, 2, "duration_s"), ".1f"),
    F(RUNS, "the same build (cold machine: {} s)", build(WITH_BENCH, 1, "duration_s"), ".0f"),
    F(RUNS, "CMake arguments ({} s, ccache warm", verify(WITH_BENCH, 1, LLAMA_BENCH, "build_s"), ".0f"),
    F(RUNS, "token generation {} / 932.1 t/s", point(WITH_BENCH, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "933.4 / {} t/s = 1.001", point(WITH_BENCH, 1, 17, "bench_tg_tokens_per_s"), ".1f"),
    F(RUNS, "932.1 t/s = {}, prompt", point(WITH_BENCH, 1, 17, "tg_ratio"), ".3f"),
    F(RUNS, "prompt processing {} / 47711 t/s", point(WITH_BENCH, 1, 17, "pp_tokens_per_s"), ".0f"),
    F(RUNS, "47702 / {} t/s = 1.000", point(WITH_BENCH, 1, 17, "bench_pp_tokens_per_s"), ".0f"),
    F(RUNS, "47711 t/s = {}; at 0 layers", point(WITH_BENCH, 1, 17, "pp_ratio"), ".3f"),
    F(RUNS, "at 0 layers {} (tg)", point(WITH_BENCH, 1, 0, "tg_ratio"), ".3f"),
    F(RUNS, "bus width give {} GB/s", verify(WITH_BENCH, 1, THROUGHPUT, "gpu_bandwidth_gb_per_s"), ".0f"),
    F(RUNS, "cannot exceed {} t/s for this", verify(WITH_BENCH, 1, THROUGHPUT, "tg_limit_tokens_per_s"), ".0f"),
    F(RUNS, "for this {} GB model", giga(verify(WITH_BENCH, 1, MODEL_FILE, "description.file_size_bytes")), ".2f"),
    F(RUNS, "GB model; {} t/s is 22.8", point(WITH_BENCH, 1, 17, "tg_tokens_per_s"), ".0f"),
    F(RUNS, "t/s is {} % of that limit", per_cent(point(WITH_BENCH, 1, 17, "tg_bandwidth_fraction")), ".1f"),
    F(RUNS, "the wheel came from the wheel cache ({} s)", build(GPU_7B, 1, "duration_s"), ".1f"),
    F(RUNS, "(0.6 s); verify {} s on the", step_s(GPU_7B, "verify"), ".0f"),
    F(RUNS, "verify 224 s on the {} GB model", giga(verify(GPU_7B, 1, MODEL_FILE, "description.file_size_bytes")), ".1f"),
    F(RUNS, "model: token generation {} t/s with no layer", point(GPU_7B, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "on the GPU → {} t/s with all 33", point(GPU_7B, 1, 33, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "(llama-bench {} → 348.6", point(GPU_7B, 1, 0, "bench_tg_tokens_per_s"), ".1f"),
    F(RUNS, "(llama-bench 15.2 → {}, ratio", point(GPU_7B, 1, 33, "bench_tg_tokens_per_s"), ".1f"),
    F(RUNS, "348.6, ratio {} at full offload", point(GPU_7B, 1, 33, "tg_ratio"), ".3f"),
    F(RUNS, "prompt processing {} → 11.9k t/s", point(GPU_7B, 1, 0, "pp_tokens_per_s"), ".0f"),
    F(RUNS, "prompt processing 740 → {}k t/s", thousands(point(GPU_7B, 1, 33, "pp_tokens_per_s")), ".1f"),
    F(RUNS, "k t/s; {} % of the 1270", per_cent(point(GPU_7B, 1, 33, "tg_bandwidth_fraction")), ".1f"),
    F(RUNS, "% of the {} t/s bandwidth limit; GPU", verify(GPU_7B, 1, THROUGHPUT, "tg_limit_tokens_per_s"), ".0f"),
    F(RUNS, "GPU vs CPU logits relative error {}, top-1", verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(RUNS, "top-1 agreement {} %, top-1 in", per_cent(verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "top1_agreement")), ".1f"),
    F(RUNS, "CPU's top 5 at {} % of positions", per_cent(verify(GPU_7B, 1, GPU_CPU_AGREEMENT, "top1_in_cpu_top5")), ".1f"),
    F(RUNS, "positions; {} MiB of GPU memory", point(GPU_7B, 1, 33, "gpu_memory_mib"), ".0f"),
    F(RUNS, "built without libmtmd in {} s cold", build(MTMD, 1, "duration_s"), ".0f"),
    F(RUNS, "s cold ({} ninja steps); verify", ninja_total(REF / MTMD / "build-attempt-1.log")),
    F(RUNS, "attempt 2 rebuilt in {} s (339", build(MTMD, 2, "duration_s"), ".1f"),
    F(RUNS, "rebuilt in 37.4 s ({} steps: ccache", ninja_total(REF / MTMD / "build-attempt-2.log")),
    F(RUNS, "steps: ccache {} hits, 51 misses", build(MTMD, 2, "ccache.hits")),
    F(RUNS, "ccache 271 hits, {} misses, the libmtmd objects", build(MTMD, 2, "ccache.misses")),
    F(RUNS, "agree with the CPU's, {} t/s token generation", point(MTMD, 2, 5, "tg_tokens_per_s"), ".0f"),
    F(RUNS, "built cold in {} s (465 ninja steps", build(LAVAPIPE, 1, "duration_s"), ".0f"),
    F(RUNS, "built cold in 2502 s ({} ninja steps", ninja_total(REF / LAVAPIPE / "build-attempt-1.log")),
    F(RUNS, "465 ninja steps, ccache {} hits / 285", build(LAVAPIPE, 1, "ccache.hits")),
    F(RUNS, "ccache 0 hits / {} misses, while", build(LAVAPIPE, 1, "ccache.misses")),
    F(RUNS, "builds ran); verify {} s on lavapipe", step_s(LAVAPIPE, "verify"), ".0f"),
    F(RUNS, "on lavapipe: logits relative error {}, top-1", verify(LAVAPIPE, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(RUNS, "top-1 agreement {} %; token generation", per_cent(verify(LAVAPIPE, 1, GPU_CPU_AGREEMENT, "top1_agreement")),
      ".1f"),
    F(RUNS, "token generation {} t/s with no layer on the device", point(LAVAPIPE, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "on the device → {} t/s with all 5", point(LAVAPIPE, 1, 5, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "attempt 2 compiled all {} ninja steps", ninja_total(REF / CUDA_PYPI / "build-attempt-2.log")),
    F(RUNS, "all 286 ninja steps in {} s (a busy machine)", build(CUDA_PYPI, 2, "duration_s"), ".0f"),
    F(RUNS, "on the CPU (tg {} t/s, tiny model)", point(CUDA_PYPI, 2, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "from the offline bundle | built in {} s; tg", build(CUDA, 1, "duration_s"), ".0f"),
    F(RUNS, "built in 240 s; tg {} t/s and pp", point(CUDA, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "tg 877.9 t/s and pp {}k t/s", thousands(point(CUDA, 1, 17, "pp_tokens_per_s")), ".1f"),
    F(RUNS, "Vulkan driver) | built in {} s; tg", build(VULKAN, 1, "duration_s"), ".0f"),
    F(RUNS, "built in 113 s; tg {} t/s and pp", point(VULKAN, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "tg 749.9 t/s and pp {}k t/s", thousands(point(VULKAN, 1, 17, "pp_tokens_per_s")), ".1f"),
    F(RUNS, "`n_batch=2048`: {}× prompt processing", tune_gain(4096, "pp"), ".2f"),
    F(RUNS, "prompt processing and {}× generation at depth 4096", tune_gain(4096, "tg"), ".2f"),
    F(BENCH, "`playbook diagnose` on a {} MB log: a long build log", diagnose_speed("diagnose on a ([\\d.]+) MB"), ".0f"),
    # docs/measurements.md: the GPU acceptance gate (its last run, outputs/reference/gpu-acceptance.json)
    F(TESTING, "compiles nothing and took {} s here", lambda: float(re.search(r"\(the fast tier\) took\s+(\d+) s",
                                                                            printed(CI_TIME)).group(1)), ".0f"),
    # the gate at d0150ed, the round's last
    F(MEASURE, "[`20261129T112149Z-vm.gate.log`](../outputs/reference/20261129T112149Z-vm.gate.log)): built on attempt 1 in {} s",
      build(NEWEST_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "verify ok in {} s, token generation 830.5", step_s(NEWEST_GATE, "verify"), ".0f"),
    F(MEASURE, "token generation {} t/s with all 17 layers. The chain", point(NEWEST_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "The chain took {} s of the gate's", gate_log_number(NEWEST_GATE, r"playbook run: exit status 0 after (\d+) s"), ".0f"),
    F(MEASURE, "(build {}–", build(SWAP_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "(build 268–{} s, verify", build(NEWEST_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "of the gate's {} s limit", lambda: float(re.search(r'ACCEPTANCE_LIMIT_S:-(\d+)', (ROOT / "scripts" / "gpu-acceptance.sh").read_text()).group(1)), ".0f"),
    F(MEASURE, "s, verify {}–184 s between", step_s(SWAP_GATE, "verify"), ".0f"),
    F(MEASURE, "s, verify 161–{} s between", step_s(NEWEST_GATE, "verify"), ".0f"),
    # the gate at dd78ca3, and the index run on its wheel
    F(MEASURE, "[`20261129T105031Z-vm.gate.log`](../outputs/reference/20261129T105031Z-vm.gate.log)): built on attempt 1 in {} s",
      build(INDEX_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "269 s,\nverify ok in {} s, token generation 919.9", step_s(INDEX_GATE, "verify"), ".0f"),
    F(MEASURE, "token generation {} t/s with all 17 layers. Its wheel", point(INDEX_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(WHEEL_INDEX_PAGE, "its check passed in {} s, the step", index_run(r"its check passed in (\d+) s"), ".0f"),
    F(WHEEL_INDEX_PAGE, "the step took {} s,\nverify", index_run(r"build \(attempt 1\)\s+reused\s+([\d.]+) s"), ".1f"),
    F(WHEEL_INDEX_PAGE, "verify passed in {} s with token", index_run(r"verify \(attempt 1\)\s+ok\s+([\d.]+) s"), ".1f"),
    F(WHEEL_INDEX_PAGE, "token generation at {} t/s with all 17", index_run(r"token generation ([\d.]+) t/s at n_gpu_layers=17"), ".1f"),
    F(WHEEL_INDEX_PAGE, "the whole run took {} s", index_run(r"run exit 0 after (\d+) s"), ".0f"),
    F(WHEEL_INDEX_PAGE, "needs the wheel ({} MB)", lambda: _json(REF / INDEX_GATE / "build-attempt-1.json")["wheel"]["size_bytes"] / 1e6, ".1f"),
    # the gate at 07ee148 and the experiment with the libraries swapped
    F(MEASURE, "[`20261129T100051Z-vm.gate.log`](../outputs/reference/20261129T100051Z-vm.gate.log)): built on attempt 1 in {} s",
      build(SWAP_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "268 s,\nverify ok in {} s, token generation 910.8", step_s(SWAP_GATE, "verify"), ".0f"),
    F(MEASURE, "token generation {} t/s with all 17 layers.\n\nRight", point(SWAP_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "The earlier run's {} was", gap_ratio("verify", "17", "tg"), ".3f"),
    F(MEASURE, "llama-bench samples ranged {}–928.2 t/s", lambda: min(_json(GAP)["variants"]["llama-bench"]["17"]["tg"]["samples"]), ".1f"),
    F(MEASURE, "llama-bench samples ranged 880.6–{} t/s", lambda: max(_json(GAP)["variants"]["llama-bench"]["17"]["tg"]["samples"]), ".1f"),
    F(MEASURE, "generation {} % for verify and", gap_spread("verify", "10", "tg"), ".1f"),
    F(MEASURE, "for verify and\n  {} % for llama-bench", gap_spread("llama-bench", "10", "tg"), ".1f"),
    F(MEASURE, "prompts {} % and 25.5 %", gap_spread("verify", "10", "pp"), ".1f"),
    F(MEASURE, "prompts 26.8 % and {} %", gap_spread("llama-bench", "10", "pp"), ".1f"),
    F(MEASURE, "the same spreads are {} % and 3.6 %", gap_spread("verify", "17", "tg"), ".1f"),
    F(MEASURE, "the same spreads are 6.0 % and {} %", gap_spread("llama-bench", "17", "tg"), ".1f"),
    F(MEASURE, "ran at {} of llama-bench on its own", gap_ratio(BENCH_SWAP, "17", "tg", SWAP_GAP), ".3f"),
    F(MEASURE, "in generation and {} in prompts at full offload", gap_ratio(BENCH_SWAP, "17", "pp", SWAP_GAP), ".3f"),
    F(MEASURE, "(1.001 and {} at 10 layers)", gap_ratio(BENCH_SWAP, "10", "pp", SWAP_GAP), ".3f"),
    F(MEASURE, "({} and 1.016 at 10 layers)", gap_ratio(BENCH_SWAP, "10", "tg", SWAP_GAP), ".3f"),
    F(MEASURE, "verify's generation is {} of llama-bench's and its prompts", gap_ratio("verify", "17", "tg", SWAP_GAP), ".3f"),
    F(MEASURE, "of llama-bench's and its prompts {}; the lean", gap_ratio("verify", "17", "pp", SWAP_GAP), ".3f"),
    F(MEASURE, "`llama_decode` loop is at {}. Every", gap_ratio("low-level", "17", "tg", SWAP_GAP), ".3f"),
    F(MEASURE, "verify's medians were {} (tg)", gap_ratio("verify", "10", "tg", SWAP_GAP), ".3f"),
    F(MEASURE, "(tg) and {} (pp),", gap_ratio("verify", "10", "pp", SWAP_GAP), ".3f"),
    F(MEASURE, "reached {} % for the binding", spread_between_processes(SWAP_GATE, 0, "binding"), ".1f"),
    F(MEASURE, "for the binding and {} % for llama-bench at\n0 layers", spread_between_processes(SWAP_GATE, 0, "llama-bench"), ".1f"),
    F(MEASURE, "against {} % and 4.9 % at full offload", spread_between_processes(SWAP_GATE, 17, "binding"), ".1f"),
    F(MEASURE, "against 5.6 % and {} % at full offload", spread_between_processes(SWAP_GATE, 17, "llama-bench"), ".1f"),
    F(MEASURE, "wheel was built on attempt 1 in {} s, and verify", build(GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "with no repair, ok in {} s: token generation", step_s(GATE, "verify"), ".0f"),
    F(MEASURE, "ok in 159 s: token generation {} t/s with all 17 layers", point(GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "not met** at 3 layers (pp {})", point(GATE, 1, 3, "pp_ratio"), ".3f"),
    F(MEASURE, "at 10 layers (pp {}, tg", point(GATE, 1, 10, "pp_ratio"), ".3f"),
    F(MEASURE, "(pp 0.942, tg {}). At 10 layers", point(GATE, 1, 10, "tg_ratio"), ".3f"),
    F(MEASURE, "on both sides of 1 (pp {}, tg", cell(GATE, 1, 10, "pp_ratio_range")),
    F(MEASURE, "(pp 0.877-1.182, tg {}): the variation", cell(GATE, 1, 10, "tg_ratio_range")),
    F(MEASURE, "ahead in prompt processing ({}), which", cell(GATE, 1, 3, "pp_ratio_range")),
    F(MEASURE, "did not reappear: tg {}, 1.008 and", point(GATE, 1, 3, "tg_ratio"), ".3f"),
    F(MEASURE, "did not reappear: tg 0.983, {} and", point(GATE, 1, 7, "tg_ratio"), ".3f"),
    F(MEASURE, "tg 0.983, 1.008 and {} here.", point(GATE, 1, 10, "tg_ratio"), ".3f"),
    # docs/measurements.md: the gate's last run and the tune right after it
    F(MEASURE, "of the same kind: the same plan, built on attempt 1 in {} s", build(LAST_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "20261129T080312Z-vm): built on attempt 1 in\n{} s", build(REDESIGN_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "302 s, verify ok in {} s, token generation 892.0", step_s(REDESIGN_GATE, "verify"), ".0f"),
    F(MEASURE, "in 165 s, token generation {} t/s with all 17", point(REDESIGN_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "the verdict then: built on attempt 1 in {} s", build(PLAN_NOTES_GATE, 1, "duration_s"), ".0f"),
    F(MEASURE, "321 s, verify ok in {} s, token generation", step_s(PLAN_NOTES_GATE, "verify"), ".0f"),
    F(MEASURE, "token generation\n{} t/s with all 17 layers. Both", point(PLAN_NOTES_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "verify's\ngeneration is {} of llama-bench's", gap_ratio("verify", "17", "tg"), ".3f"),
    F(MEASURE, "the lean loop of `llama_decode` calls is {}, and its", gap_ratio("low-level", "17", "tg"), ".3f"),
    F(MEASURE, "Python side explains {} % of that gap", gap_share("low-level", 17, "tg", 0), ".0f"),
    F(MEASURE, "`Llama.generate` is {} of llama-bench, and 90 %", gap_ratio("Llama.generate", "17", "tg"), ".3f"),
    F(MEASURE, "and {} %\nof its gap is its sampling", gap_share("Llama.generate", 17, "tg", 2), ".0f"),
    F(MEASURE, "took {} s, its CUDA objects from", tune_flag_build("duration_s"), ".1f"),
    F(MEASURE, "generation reached {}× the defaults against", tune_flag_gain("rebuilt"), ".3f"),
    F(MEASURE, "the defaults against {}× for the runtime settings", tune_flag_gain("runtime"), ".3f"),
    F(MEASURE, "built on attempt 1 in 279 s, verify ok in {} s", step_s(LAST_GATE, "verify"), ".0f"),
    F(MEASURE, "token generation {} t/s with\nall 17 layers", point(LAST_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "and behind in this one ({})", cell(LAST_GATE, 1, 3, "pp_ratio_range")),
    F(MEASURE, "every generation pair\nis below 1 here ({})", cell(LAST_GATE, 1, 10, "tg_ratio_range")),
    F(MEASURE, "moved from 919.5 to {} t/s", point(LAST_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(MEASURE, "wheel cache (reused in {} s): verify", step_s(TUNE_H200, "build"), ".1f"),
    F(MEASURE, "): verify took {} s, the tune", step_s(TUNE_H200, "verify"), ".1f"),
    F(MEASURE, "tg {}× at depth 0 and 1.151×", recommended_gain(TUNE_H200, 0, "tg", 0), ".3f"),
    F(MEASURE, "tg 1.195× at depth 0 and {}× at depth 4096", recommended_gain(TUNE_H200, 0, "tg", 4096), ".3f"),
    F(MEASURE, "pp {}×\n  and 1.064×", recommended_gain(TUNE_H200, 0, "pp", 0), ".3f"),
    F(MEASURE, "and {}×. Generation at depth 4096", recommended_gain(TUNE_H200, 0, "pp", 4096), ".3f"),
    F(MEASURE, "(pp {}× at depth 0, 1.533×", recommended_gain(TUNE_H200, 1, "pp", 0), ".3f"),
    F(MEASURE, "1.804× at depth 0, {}× at 4096", recommended_gain(TUNE_H200, 1, "pp", 4096), ".3f"),
    F(MEASURE, "depth 4096 ({} against 30.0 t/s)", tune_trial(TUNE_H200, 1, "flash_attn=on", 4096, "tg"), ".1f"),
    F(MEASURE, "(26.4 against {} t/s)", tune_trial(TUNE_H200, 1, "defaults (Llama())", 4096, "tg"), ".1f"),
    F(MEASURE, "polling at 0 only (tg {}×, 1.019×)", recommended_gain(TUNE_H200, 1, "tg", 0), ".3f"),
    F(MEASURE, "(tg 1.014×, {}×)", recommended_gain(TUNE_H200, 1, "tg", 4096), ".3f"),
    F(MEASURE, "in the first run ({}) and behind", cell(GATE, 1, 3, "pp_ratio_range")),
    F(MEASURE, "within `verify.tune_budget_s`\n{} s", profile_value("gpu-tune.yaml", "verify.tune_budget_s")),
    F(MEASURE, "at depth 4096 fell to {}×.", target_gain(TUNE_7B, 1, 4096, "tg"), ".3f"),
    # outputs/reference/README.md: the gate's last run and the tune
    F(RUNS, "built on attempt 1 in {} s, verify ok in 165 s", build(LAST_GATE, 1, "duration_s"), ".0f"),
    F(RUNS, "token generation {} t/s with all 17 layers (61.8", point(LAST_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "with all 17 layers ({} with none); logits", point(LAST_GATE, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "Yardstick medians over 5 pairs at 0, 3, 7, 10, 14, 17 layers: pp {}; tg", medians(LAST_GATE, "pp")),
    F(RUNS, "1.011, 0.989; tg {}. Against", medians(LAST_GATE, "tg")),
    F(RUNS, "in 279 s, verify ok in {} s: token generation", step_s(LAST_GATE, "verify"), ".0f"),
    F(RUNS, "with none); logits relative error {}, top-1", verify(LAST_GATE, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(RUNS, "top-1 agreement {} %. Yardstick", per_cent(verify(LAST_GATE, 1, GPU_CPU_AGREEMENT, "top1_agreement")), ".0f"),
    F(RUNS, "moved full offload from 919.5 to {} t/s", point(LAST_GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "the wheel reused ({} s)", step_s(TUNE_H200, "build"), ".1f"),
    F(RUNS, "for both, tg 1.195× / {}× and pp", recommended_gain(TUNE_H200, 0, "tg", 4096), ".3f"),
    F(RUNS, "and pp {}× / 1.064×", recommended_gain(TUNE_H200, 0, "pp", 0), ".3f"),
    F(RUNS, "and pp 1.127× / {}× at depth", recommended_gain(TUNE_H200, 0, "pp", 4096), ".3f"),
    F(RUNS, "for prompts (pp {}× / 1.533×)", recommended_gain(TUNE_H200, 1, "pp", 0), ".3f"),
    F(RUNS, "(26.4 against {} t/s), so", tune_trial(TUNE_H200, 1, "defaults (Llama())", 4096, "tg"), ".1f"),
    F(RUNS, "polling 0 only (tg {}× / 1.019×)", recommended_gain(TUNE_H200, 1, "tg", 0), ".3f"),
    F(RUNS, "(tg 1.014× / {}×)", recommended_gain(TUNE_H200, 1, "tg", 4096), ".3f"),
    F(RUNS, "verify {} s, the tune at full offload", step_s(TUNE_H200, "verify"), ".1f"),
    F(RUNS, "tg {}× / 1.151×", recommended_gain(TUNE_H200, 0, "tg", 0), ".3f"),
    F(RUNS, "(pp 1.804× / {}×)", recommended_gain(TUNE_H200, 1, "pp", 4096), ".3f"),
    # outputs/reference/README.md: the GPU acceptance gate's run
    F(RUNS, "built on attempt 1 in {} s, verify ok", build(GATE, 1, "duration_s"), ".0f"),
    F(RUNS, "verify ok in {} s: token generation", step_s(GATE, "verify"), ".0f"),
    F(RUNS, "token generation {} t/s with all 17 layers (56.7", point(GATE, 1, 17, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "with all 17 layers ({} with none)", point(GATE, 1, 0, "tg_tokens_per_s"), ".1f"),
    F(RUNS, "logits against the CPU relative error {}, top-1", verify(GATE, 1, GPU_CPU_AGREEMENT, "relative_error"), ".3f"),
    F(RUNS, "top-1 agreement {} %. The yardstick's", per_cent(verify(GATE, 1, GPU_CPU_AGREEMENT, "top1_agreement")), ".0f"),
    F(RUNS, "at 0, 3, 7, 10, 14, 17 layers: pp {}; tg", medians(GATE, "pp")),
    F(RUNS, "; tg {} |", medians(GATE, "tg")),
    # docs/wheel-index.md: the second machine from the index against a cold build, on the 2-core VM
    F(WHEEL_INDEX_PAGE, "had a verified CPU wheel in {} s from the index", wheel_index_case("b"), ".1f"),
    F(WHEEL_INDEX_PAGE, "against {} s for the cold build", wheel_index_case("a"), ".1f"),
    F(WHEEL_INDEX_PAGE, "((b) / (a) = {})", wheel_index_case("b", "ratio"), ".3f"),
    F(KB, "the lines that hold it. A {} MB build log takes seconds", diagnose_speed("diagnose on a ([\\d.]+) MB"), ".0f"),
    F(README, "wrong; {} of 455 of the older", old_test_part_total(2), ".0f"),
    F(README, "wrong; 402 of {} of the older", old_test_part_total(1), ".0f"),
    F(README, "public logs: {} of 45 logs nobody", frozen_reading("all failures", 2), ".0f"),
    F(README, "public logs: 43 of {} logs nobody", frozen_reading("all failures", 1), ".0f"),
    F(README, "read\n  once), {} of them wrong", frozen_reading("all failures", 4), ".0f"),
    F(KB, "): {} of 45\nfailure logs named right", frozen_reading("all failures", 2), ".0f"),
    F(KB, "43 of {}\nfailure logs named right", frozen_reading("all failures", 1), ".0f"),
    F(KB, "named right ({}%)", frozen_reading("all failures", 3), ".0f"),
    F(KB, "named right (96%), {} named wrong", frozen_reading("all failures", 4), ".0f"),
    F(KB, "named wrong ({}%), precision", frozen_reading("all failures", 5), ".1f"),
    F(KB, "precision {}%. Every family", frozen_reading("all failures", 6), ".1f"),
    F(KB, "`cublas-cccl` named {} of 5", frozen_reading("cublas-cccl", 2), ".0f"),
    F(KB, "`cublas-cccl` named 3 of {}", frozen_reading("cublas-cccl", 1), ".0f"),
    F(KB, "this stage alone names {} of 1309 train logs rightly", similarity_stage(1)),
    F(KB, "this stage alone names 615 of {} train logs rightly", similarity_stage(2)),
    F(KB, "rightly, {} of them logs that only seem", similarity_stage(3)),
    F(KB, "failed, and {} wrongly (`benchmarks/results/similarity-loto-cpu-vm.txt`)", similarity_stage(4)),
]

EXCERPTS = [
    Excerpt(BENCH, f"benchmarks/throughput_table.py outputs/reference/{WITH_BENCH}", throughput_table(WITH_BENCH)),
    Excerpt(BENCH, f"benchmarks/throughput_table.py outputs/reference/{GPU_7B}", throughput_table(GPU_7B)),
    Excerpt(BENCH, f"outputs/reference/{TUNE}/tune-attempt-1.md, the side-by-side table", tune_table),
    Excerpt(BENCH, f"benchmarks/results/{H100}, its final table", results_table(H100, "Intel(R)")),
    Excerpt(BENCH, f"benchmarks/results/{CPU_VM}, its table", results_table(CPU_VM, "AMD EPYC")),
    Excerpt(BENCH, f"benchmarks/results/{DIAGNOSE}", results_table(DIAGNOSE, "diagnose on a ")),
    Excerpt(BENCH, f"benchmarks/results/{SIMILARITY}, as printed", lambda: printed(SIMILARITY).rstrip("\n")),
    Excerpt(TESTING, f"benchmarks/results/{SLOW_TIER}, as written", lambda: printed(SLOW_TIER).rstrip("\n")),
    Excerpt(WHEEL_INDEX_PAGE, f"benchmarks/results/{WHEEL_INDEX}, as written", lambda: printed(WHEEL_INDEX).rstrip("\n")),
    Excerpt(TESTING, f"benchmarks/results/{CI_TIME}, as written", lambda: printed(CI_TIME).rstrip("\n")),
    Excerpt(KB, "the corpus tables of python -m playbook.knowledge.evaluation", lambda: corpus_tables()),
    Excerpt(MEASURE, f"benchmarks/yardstick_table.py outputs/reference/{GATE}", lambda: _yardstick().table(REF / GATE)),
    Excerpt(MEASURE, f"benchmarks/yardstick_table.py outputs/reference/{LAST_GATE}",
            lambda: _yardstick().table(REF / LAST_GATE)),
    Excerpt(MEASURE, f"benchmarks/yardstick_table.py outputs/reference/{YARDSTICK}",
            lambda: _yardstick().table(REF / YARDSTICK)),
    Excerpt(MEASURE, f"benchmarks/yardstick_table.py --by-repetition outputs/reference/{YARDSTICK}",
            lambda: _yardstick().repetition_table(REF / YARDSTICK)),
    Excerpt(MEASURE, f"benchmarks/yardstick_table.py --tune outputs/reference/{TUNE_7B}",
            lambda: _yardstick().tune_table(REF / TUNE_7B)),
]


def _yardstick():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import yardstick_table

    return yardstick_table


# ---------------------------------------------------------------- the tests

UNIT = r"(?:k\b|k? ?t/s|×| ?%| ?(?:MiB|MB|GB/s|GB)\b| s\b| hits\b| remote hits\b| misses\b| steps\b| ninja steps\b)"
FIGURE = re.compile(r"(?<![\w.])(?:\d+(?:\.\d+)?(?=" + UNIT + r")|\d+\.\d{3,}(?![\d.]))")


def normalized(text: str) -> str:
    """Whitespace and line breaks collapsed: a phrase matches wherever the README wraps it."""
    return " ".join(text.split())


@functools.cache
def readme_text(name: str) -> str:
    return normalized((ROOT / name).read_text())


def claimed_spans(name: str) -> list[tuple[int, int]]:
    text = readme_text(name)
    spans = []
    for figure in FIGURES:
        if figure.readme != name:
            continue
        before = normalized(figure.template.split("{}")[0] + "|")[:-1]  # keeps a space before the figure
        value = normalized(figure.value())
        for match in re.finditer(re.escape(normalized(figure.text())), text):
            start = match.start() + len(before)
            assert text[start:start + len(value)] == value, figure.template
            spans.append((start, start + len(value)))
    for excerpt in EXCERPTS:
        if excerpt.readme == name:
            expected = normalized(excerpt.text())
            spans += [(m.start(), m.end()) for m in re.finditer(re.escape(expected), text)]
    return spans


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f"{f.readme}: {f.template}")
def test_a_figure_matches_its_file(figure: Figure):
    assert normalized(figure.text()) in readme_text(figure.readme), (
        f"{figure.readme} should read {figure.text()!r} (the number from its file)")


@pytest.mark.parametrize("excerpt", EXCERPTS, ids=lambda e: f"{e.readme}: {e.what}")
def test_an_excerpt_matches_its_file(excerpt: Excerpt):
    assert normalized(excerpt.text()) in readme_text(excerpt.readme), (
        f"{excerpt.readme} should quote, from {excerpt.what}:\n{excerpt.text()}")


@pytest.mark.parametrize("name", READMES)
def test_every_figure_in_a_readme_is_claimed(name: str):
    text = readme_text(name)
    spans = claimed_spans(name)
    unclaimed = [f"{m.group()!r} in '…{text[max(0, m.start() - 50):m.end() + 20]}…'"
                 for m in FIGURE.finditer(text)
                 if not any(start <= m.start() and m.end() <= end for start, end in spans)]
    assert not unclaimed, (f"{len(unclaimed)} figure(s) in {name} that no row of FIGURES or EXCERPTS in "
                           f"tests/test_readme_figures.py reads from a file:\n" + "\n".join(unclaimed))


def test_the_scanner_finds_the_figures_it_is_meant_to():
    text = ("took 394.2 s cold, 0.098× a plain build, 51.4k t/s, 22.8 % of 4814 GB/s, 271 hits, 10 misses, "
            "(ratio 1.001); CUDA 13.0, Python 3.12, 2 cores, sm_90, 0.3.36, 17 layers, 1.3.272")
    found = [m.group() for m in FIGURE.finditer(text)]
    assert found == ["394.2", "0.098", "51.4", "22.8", "4814", "271", "10", "1.001"]


def test_a_changed_figure_is_caught():
    """The comparison is exact in every printed digit, both ways: a README that says 0.108× where the file
    gives 0.098 fails, and so would 3.0."""
    figure = next(f for f in FIGURES if f.template.startswith("timed by the sitting's first command, {}×"))
    assert figure.value() == "0.098"
    for wrong in ("0.108", "3.000", "0.097"):
        assert figure.template.replace("{}", wrong) not in readme_text(figure.readme)


@pytest.mark.parametrize("name", [H100, CPU_VM])
def test_a_build_speed_result_is_consistent_in_itself(name: str):
    """Every case of an archived build_speed.py table: its ratio is its seconds over (a)'s, to the printed
    digit, and (e) ran against the remote cache."""
    rows = build_speed_rows((RESULTS / name).read_text())
    assert set(rows) == {"a", "b", "c", "d", "e"}, name
    for letter, (seconds, ratio, _) in rows.items():
        assert format(seconds / rows["a"][0], ".3f") == format(ratio, ".3f"), (name, letter)
    assert "remote" in rows["e"][2]
