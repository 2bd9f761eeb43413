"""llama.cpp's own ``llama-bench``, built from the same source tree and CMake arguments as the
wheel, as the yardstick for verify's throughput measurements."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from playbook.process import run_captured, run_streaming
from playbook.steps.caches import ccache_env
from playbook.verify.settings import BenchSettings

# What the binding's build leaves out and llama-bench does not need either.
TOOL_ONLY_ARGS = [
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_CURL=OFF",
]


@dataclass
class BenchPoint:
    n_gpu_layers: int
    test: str  # "pp" or "tg"
    n_tokens: int
    tokens_per_s: float
    stdev: float
    depth: int = 0  # tokens in the KV cache before the test (llama-bench's n_depth)


@dataclass
class PairedRatio:
    """One layer count and test measured by both sides over several interleaved pairs of processes."""

    n_gpu_layers: int
    test: str  # "pp" or "tg"
    binding: list[float] = field(default_factory=list)
    """The binding's mean tokens/s, one per pair, each from a process of its own."""
    bench: list[float] = field(default_factory=list)
    """llama-bench's avg_ts in the same pairs."""

    @property
    def ratios(self) -> list[float]:
        return [ours / theirs for ours, theirs in zip(self.binding, self.bench, strict=True) if theirs]

    @property
    def median_ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def ratio_range(self) -> tuple[float, float] | None:
        return (min(self.ratios), max(self.ratios)) if self.ratios else None

    @staticmethod
    def spread(rates: list[float]) -> float | None:
        """Between processes: (slowest - fastest) / median, the variation the repetitions of one process hide."""
        return (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 and min(rates) > 0 else None

    @property
    def binding_spread(self) -> float | None:
        return self.spread(self.binding)

    @property
    def bench_spread(self) -> float | None:
        return self.spread(self.bench)


# One side of a pair: every layer count in one process -> {(n_gpu_layers, test): tokens/s}.
PairSide = Callable[[list[int]], dict[tuple[int, str], float]]


def interleaved_pairs(layer_counts: list[int], pairs: int, binding: PairSide, bench: PairSide,
                      log: Callable[[str], None] = print) -> list[PairedRatio]:
    """``pairs`` rounds of one binding process and one llama-bench process over every layer count; the side that
    goes first alternates, so drift (clocks, the page cache) falls on both."""
    rows = {(ngl, test): PairedRatio(ngl, test) for ngl in layer_counts for test in ("pp", "tg")}
    for number in range(pairs):
        sides = [("binding", binding), ("llama-bench", bench)]
        measured: dict[str, dict[tuple[int, str], float]] = {}
        for name, side in sides if number % 2 == 0 else sides[::-1]:
            started = time.monotonic()
            measured[name] = side(layer_counts)
            log(f"  pair {number + 1}/{pairs}: {name} over {len(layer_counts)} layer counts in "
                f"{time.monotonic() - started:.0f} s")
        for key, row in rows.items():
            ours, theirs = measured["binding"].get(key), measured["llama-bench"].get(key)
            if ours and theirs:
                row.binding.append(ours)
                row.bench.append(theirs)
    return [row for row in rows.values() if row.ratios]


@dataclass
class LlamaBench:
    ok: bool
    binary: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    log_file: str = ""
    points: list[BenchPoint] = field(default_factory=list)
    error: str = ""
    settings: BenchSettings | None = None  # what llama-bench ran with (the binding's own, passed as arguments)
    command: list[str] = field(default_factory=list)
    pairs: list[PairedRatio] = field(default_factory=list)
    """The binding against llama-bench over interleaved pairs of processes (verify.yardstick_pairs)."""

    def paired(self, test: str, n_gpu_layers: int) -> PairedRatio | None:
        return next((p for p in self.pairs if p.test == test and p.n_gpu_layers == n_gpu_layers), None)

    def point(self, test: str, n_gpu_layers: int, depth: int = 0) -> BenchPoint | None:
        return next((p for p in self.points if p.test == test and p.n_gpu_layers == n_gpu_layers and p.depth == depth),
                    None)

    def rate(self, test: str, n_gpu_layers: int, depth: int = 0) -> float | None:
        point = self.point(test, n_gpu_layers, depth)
        return point.tokens_per_s if point else None


def build_llama_bench(tree: Path, cmake_args: list[str], env: dict[str, str], build_dir: Path, log_file: Path,
                      cache_dir: Path | None, timeout_s: float = 1800,
                      ccache_remote: str = "") -> tuple[Path | None, float]:
    """Configure ``vendor/llama.cpp`` with the wheel's CMake arguments and build the llama-bench target."""
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake") or "cmake"
    build_env = {**env, **(ccache_env(cache_dir, ccache_remote) if cache_dir else {})}
    started = time.monotonic()
    with log_file.open("w") as log:
        for command in (
            [cmake, "-S", str(tree / "vendor" / "llama.cpp"), "-B", str(build_dir), "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Release", *cmake_args, *TOOL_ONLY_ARGS],
            [cmake, "--build", str(build_dir), "--target", "llama-bench"],
        ):
            log.write(f"playbook: {' '.join(command)}\n")
            log.flush()
            remaining = max(1.0, timeout_s - (time.monotonic() - started))
            outcome = run_streaming(command, log.write, env=build_env, timeout_s=remaining)
            if outcome.timed_out:
                log.write(f"playbook: stopped after {timeout_s:.0f} s with its compilers\n")
            if outcome.returncode != 0 or outcome.timed_out:
                return None, time.monotonic() - started
    binary = next(iter(sorted(build_dir.rglob("llama-bench"))), None)
    return binary, time.monotonic() - started


def parse_llama_bench_json(text: str) -> list[BenchPoint]:
    """``llama-bench -o json``: one object per test with n_prompt, n_gen, n_gpu_layers, avg_ts, stddev_ts."""
    start = text.find("[")
    rows = json.loads(text[start:]) if start >= 0 else []
    points = []
    for row in rows:
        test = "pp" if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0 else "tg"
        n_tokens = row["n_prompt"] if test == "pp" else row["n_gen"]
        points.append(BenchPoint(int(row["n_gpu_layers"]), test, int(n_tokens), float(row["avg_ts"]),
                                 float(row.get("stddev_ts", 0.0)), int(row.get("n_depth", 0))))
    return points


def llama_bench_command(binary: Path, model: Path, layer_counts: list[int], settings: BenchSettings, n_prompt: int,
                        n_gen: int, repetitions: int, depths: list[int] | None = None) -> list[str]:
    """llama-bench with every setting the binding's measurement uses, given explicitly."""
    return [str(binary), "-m", str(model), "-ngl", ",".join(map(str, layer_counts)), "-p", str(n_prompt),
            "-n", str(n_gen), "-r", str(repetitions), *settings.llama_bench_args(),
            "-d", ",".join(map(str, depths or [0])), "-o", "json"]


def run_llama_bench(binary: Path, model: Path, layer_counts: list[int], settings: BenchSettings, n_prompt: int,
                    n_gen: int, repetitions: int, log_file: Path, timeout_s: float,
                    depths: list[int] | None = None) -> tuple[list[BenchPoint], float, str]:
    command = llama_bench_command(binary, model, layer_counts, settings, n_prompt, n_gen, repetitions, depths)
    env = {**os.environ, **dict(settings.env)}
    started = time.monotonic()
    proc = run_captured(command, env=env, timeout_s=timeout_s)
    with log_file.open("a") as log:
        log.write(f"playbook: {' '.join(command)}\n{proc.stderr}\n{proc.stdout}\n")
    if proc.returncode == -9:
        return [], time.monotonic() - started, f"llama-bench gave no result within {timeout_s:.0f} s"
    if proc.returncode != 0:
        return [], time.monotonic() - started, f"llama-bench exited with {proc.returncode}"
    return parse_llama_bench_json(proc.stdout), time.monotonic() - started, ""


def measure_with_llama_bench(tree: Path, cmake_args: list[str], env: dict[str, str], cache_dir: Path,
                             build_key: str, model: Path, layer_counts: list[int], settings: BenchSettings,
                             n_prompt: int, n_gen: int, repetitions: int, log_file: Path, timeout_s: float,
                             ccache_remote: str = "") -> LlamaBench:
    binary, build_s = build_llama_bench(tree, cmake_args, env, cache_dir / "bench-build" / build_key[:16], log_file,
                                        cache_dir, ccache_remote=ccache_remote)
    if binary is None:
        return LlamaBench(False, build_s=round(build_s, 1), log_file=log_file.name,
                          error="llama-bench did not build; see the log", settings=settings)
    if not layer_counts:  # built only: the caller measures (interleaved with the binding)
        return LlamaBench(True, str(binary), round(build_s, 1), 0.0, log_file.name,
                          settings=settings.as_llama_bench_runs_it())
    points, run_s, error = run_llama_bench(binary, model, layer_counts, settings, n_prompt, n_gen, repetitions,
                                           log_file, timeout_s)
    command = llama_bench_command(binary, model, layer_counts, settings, n_prompt, n_gen, repetitions)
    return LlamaBench(not error, str(binary), round(build_s, 1), round(run_s, 1), log_file.name, points, error,
                      settings.as_llama_bench_runs_it(), command)
