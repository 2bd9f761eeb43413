"""``verify.tune``: search the runtime settings of the built wheel for faster ones than ``Llama()``'s defaults.

At each offload level (full offload; the largest measured offload within ``verify.gpu_memory_budget``;
no offload on a CPU-only build) the search starts from what ``Llama(model_path, n_gpu_layers=N)`` runs
with and changes one setting at a time (coordinate descent), keeping a change when it speeds up the
geometric mean of prompt processing and generation, over every depth, by more than
:data:`MIN_GAIN`. Every trial is one child process (``probe.py bench``), measured at each
``verify.tune_depths`` (tokens already in the KV cache, llama-bench's ``-d``). The winner and the
defaults are then measured again, alternately (:func:`side_by_side`), and, when llama-bench was built,
run through llama-bench with the same settings.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from playbook.verify.settings import BenchSettings, differences, llama_class_defaults
from playbook.verify.yardsticks import BenchPoint

MIN_GAIN = 0.02  # a change must beat the best so far by 2 %: less is within the spread of a few repetitions
TESTS = ("pp", "tg")
CUDA_GRAPHS_OFF = ("GGML_CUDA_DISABLE_GRAPHS", "1")  # ggml-cuda captures CUDA graphs unless this is set
BATCHES = ((512, 256), (512, 512), (2048, 512), (2048, 1024), (4096, 2048))
QUANTIZED_V_NEEDS_FLASH_ATTN = "a quantized V cache needs flash attention (llama.cpp refuses the context otherwise)"


@dataclass
class TuneTrial:
    """One child's measurement: ``rates[depth][test]`` is the mean tokens/s over the repetitions."""

    label: str
    n_gpu_layers: int
    settings: BenchSettings
    status: str
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    stdevs: dict[str, dict[str, float]] = field(default_factory=dict)
    log_file: str = ""
    score: float | None = None  # against the defaults' trial; 1.0 is as fast


@dataclass
class GainRow:
    depth: int
    test: str
    defaults: float
    tuned: float
    gain: float
    bench_defaults: float | None = None  # llama-bench with the defaults' settings
    bench_tuned: float | None = None

    @property
    def bench_gain(self) -> float | None:
        return self.bench_tuned / self.bench_defaults if self.bench_defaults and self.bench_tuned else None


@dataclass
class TuneTarget:
    n_gpu_layers: int
    why: str
    defaults: BenchSettings
    best: BenchSettings
    trials: list[TuneTrial] = field(default_factory=list)
    gains: list[GainRow] = field(default_factory=list)
    llama_kwargs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    error: str = ""


@dataclass
class TuneResult:
    depths: list[int]
    n_prompt: int
    n_gen: int
    repetitions: int
    model_path: str
    targets: list[TuneTarget] = field(default_factory=list)
    report_file: str = ""

    def best_gain(self, depth: int) -> float | None:
        gains = [row.gain for target in self.targets for row in target.gains if row.depth == depth]
        return max(gains, default=None)


Measure = Callable[[BenchSettings, int, str], TuneTrial]
Bench = Callable[[BenchSettings, int, list[int]], list[BenchPoint]]


# ---------------------------------------------------------------- the search (pure: takes a measure function)


def alternatives(dimension: str, current: BenchSettings, *, gpu: bool, layers_on_cpu: bool,
                 cores: int) -> list[tuple[str, BenchSettings]]:
    """The settings to try for one dimension, each with a label; ``current`` itself is left out."""
    options: list[tuple[str, BenchSettings]] = []
    if dimension == "flash_attn":
        options = [(f"flash_attn={v}", current.replace(flash_attn=v)) for v in ("on", "off")]
    elif dimension == "batch":
        options = [(f"n_batch={b} n_ubatch={u}", current.replace(n_batch=b, n_ubatch=u)) for b, u in BATCHES]
    elif dimension == "kv_cache":
        pairs = [("f16", "f16"), ("q8_0", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")]
        options = [(f"type_k={k} type_v={v}", current.replace(type_k=k, type_v=v)) for k, v in pairs
                   if v == "f16" or current.flash_attn == "on"]  # QUANTIZED_V_NEEDS_FLASH_ATTN
    elif dimension == "offload_kqv" and gpu:
        options = [(f"offload_kqv={v}", current.replace(offload_kqv=v)) for v in (True, False)]
    elif dimension == "threads" and layers_on_cpu:
        counts = sorted({cores, max(1, cores // 2), max(1, cores - 1)})
        options = [(f"threads={n}", current.replace(threads=n)) for n in counts]
    elif dimension == "cuda_graphs" and gpu:
        without = tuple(pair for pair in current.env if pair[0] != CUDA_GRAPHS_OFF[0])
        options = [("CUDA graphs on", current.replace(env=without)),
                   ("CUDA graphs off", current.replace(env=(*without, CUDA_GRAPHS_OFF)))]
    return [(label, settings) for label, settings in options if settings != current]


DIMENSIONS = ("flash_attn", "batch", "kv_cache", "offload_kqv", "threads", "cuda_graphs")


def score(trial: TuneTrial, reference: TuneTrial) -> float | None:
    """Geometric mean, over every depth and both tests, of the trial's rate over the reference's."""
    if trial.status != "ok" or reference.status != "ok":
        return None
    ratios = [trial.rates[d][t] / reference.rates[d][t] for d in reference.rates for t in TESTS
              if reference.rates[d].get(t) and trial.rates.get(d, {}).get(t)]
    if not ratios or len(ratios) < sum(len(r) for r in reference.rates.values()):
        return None
    return math.exp(statistics.fmean(math.log(r) for r in ratios))


def search(defaults: BenchSettings, n_gpu_layers: int, measure: Measure, *, gpu: bool, layers_on_cpu: bool,
           cores: int, dimensions: tuple[str, ...] = DIMENSIONS) -> tuple[BenchSettings, list[TuneTrial]]:
    """Coordinate descent from ``defaults``; returns the best settings and every trial, the defaults' first."""
    reference = measure(defaults, n_gpu_layers, "defaults (Llama())")
    reference.score = 1.0 if reference.status == "ok" else None
    trials = [reference]
    if reference.status != "ok":
        return defaults, trials
    best, best_score = defaults, 1.0
    for dimension in dimensions:
        for label, candidate in alternatives(dimension, best, gpu=gpu, layers_on_cpu=layers_on_cpu, cores=cores):
            trial = measure(candidate, n_gpu_layers, label)
            trial.score = score(trial, reference)
            trials.append(trial)
            if trial.score is not None and trial.score > best_score * (1 + MIN_GAIN):
                best, best_score = candidate, trial.score
    return best, trials


def side_by_side(defaults: BenchSettings, best: BenchSettings, n_gpu_layers: int, measure: Measure,
                 rounds: int = 2) -> list[GainRow]:
    """Defaults and best measured alternately (``rounds`` times each, so drift hits both); the gain is the
    median of the best's rates over the median of the defaults'."""
    measured: dict[str, list[TuneTrial]] = {"defaults": [], "tuned": []}
    for round_number in range(rounds):
        for name, settings in (("defaults", defaults), ("tuned", best)):
            measured[name].append(measure(settings, n_gpu_layers, f"side by side {round_number + 1}: {name}"))
    rows = []
    good = {name: [t for t in trials if t.status == "ok"] for name, trials in measured.items()}
    if not good["defaults"] or not good["tuned"]:
        return rows
    for depth in good["defaults"][0].rates:
        for test in TESTS:
            before = statistics.median(t.rates[depth][test] for t in good["defaults"])
            after = statistics.median(t.rates[depth][test] for t in good["tuned"])
            rows.append(GainRow(int(depth), test, round(before, 2), round(after, 2), round(after / before, 3)))
    return rows


def offload_targets(n_layer: int, gpu_offload: bool, budget_mib: int,
                    measured_mib: dict[int, float | None]) -> list[tuple[int, str]]:
    """Where to tune: full offload, and the largest offload whose measured GPU memory fits ``budget_mib``."""
    if not gpu_offload:
        return [(0, "no GPU offload: a CPU-only build")]
    full = n_layer + 1
    targets = [(full, "full offload")]
    if budget_mib:
        fitting = [ngl for ngl, mib in measured_mib.items() if mib is not None and mib <= budget_mib]
        largest = max(fitting, default=None)
        if largest is None:
            targets.append((0, f"no measured offload fits verify.gpu_memory_budget ({budget_mib} MiB): no layer"))
        elif largest != full:
            targets.append((largest, f"the largest measured offload within verify.gpu_memory_budget "
                                     f"({budget_mib} MiB: {measured_mib[largest]:.0f} MiB)"))
    return targets


def tune(model_path: str, n_layer: int, gpu_offload: bool, threads: int, cores: int, depths: list[int], n_prompt: int,
         n_gen: int, repetitions: int, measure: Measure, budget_mib: int = 0,
         measured_mib: dict[int, float | None] | None = None, bench: Bench | None = None,
         log: Callable[[str], None] = print) -> TuneResult:
    result = TuneResult(list(depths), n_prompt, n_gen, repetitions, model_path)
    for ngl, why in offload_targets(n_layer, gpu_offload, budget_mib, measured_mib or {}):
        defaults = llama_class_defaults(threads)
        log(f"tuning at n_gpu_layers={ngl} ({why}), depths {', '.join(map(str, depths))}")
        best, trials = search(defaults, ngl, measure, gpu=gpu_offload and ngl > 0,
                              layers_on_cpu=ngl <= n_layer, cores=cores)
        target = TuneTarget(ngl, why, defaults, best, trials)
        if trials[0].status != "ok":
            target.error = f"the defaults' trial ended {trials[0].status}: see {trials[0].log_file}"
        else:
            target.gains = side_by_side(defaults, best, ngl, measure)
            if bench is not None:
                _add_llama_bench(target, bench, depths, log)
        target.llama_kwargs = best.llama_kwargs(ngl)
        target.env = dict(best.env)
        for row in target.gains:
            log(f"  depth {row.depth} {row.test}: {row.defaults:.1f} -> {row.tuned:.1f} t/s ({row.gain:.3f}x)")
        result.targets.append(target)
    return result


def _add_llama_bench(target: TuneTarget, bench: Bench, depths: list[int], log: Callable[[str], None]) -> None:
    try:
        runs = {name: bench(settings, target.n_gpu_layers, depths)
                for name, settings in (("defaults", target.defaults), ("tuned", target.best))}
    except Exception as error:  # llama-bench is a yardstick: the binding's own numbers stand without it
        log(f"  llama-bench with the same settings failed: {type(error).__name__}: {error}")
        return
    for row in target.gains:
        for name, points in runs.items():
            rate = next((p.tokens_per_s for p in points
                         if p.test == row.test and p.depth == row.depth and p.n_gpu_layers == target.n_gpu_layers), None)
            setattr(row, f"bench_{name}", rate)


def trial_from_child(label: str, n_gpu_layers: int, settings: BenchSettings, status: str,
                     result: dict | None, log_file: str) -> TuneTrial:
    """A trial from ``probe.py bench``'s result (``depths -> pp/tg -> tokens_per_s_mean``)."""
    trial = TuneTrial(label, n_gpu_layers, settings, status, log_file=log_file)
    for depth, tests in ((result or {}).get("depths") or {}).items():
        trial.rates[depth] = {t: tests[t]["tokens_per_s_mean"] for t in TESTS}
        trial.stdevs[depth] = {t: tests[t]["tokens_per_s_stdev"] for t in TESTS}
    return trial


# ---------------------------------------------------------------- the report


def report_markdown(result: TuneResult, goal_depth: int = 4096, goal_gain: float = 1.10) -> str:
    lines = [f"# Runtime tuning of {result.model_path}", "",
             f"pp{result.n_prompt} and tg{result.n_gen}, {result.repetitions} repetitions, at depths "
             f"{', '.join(map(str, result.depths))} (tokens already in the KV cache, llama-bench's -d). The search "
             "starts from what `Llama(model_path, n_gpu_layers=N)` runs with and changes one setting at a time "
             f"(kept when the geometric mean of pp and tg over the depths gains more than {MIN_GAIN:.0%}); the gain is "
             "measured afterwards, defaults and tuned settings alternately, in the same run.", ""]
    for target in result.targets:
        lines += [f"## n_gpu_layers={target.n_gpu_layers}: {target.why}", ""]
        if target.error:
            lines += [f"Not tuned: {target.error}", ""]
            continue
        changed = differences(target.best, target.defaults)
        lines += ["Changed from the defaults: " + (", ".join(f"{k} {b} → {a}" for k, (a, b) in changed.items())
                                                   or "nothing beat the defaults"), ""]
        lines += ["| depth | test | defaults t/s | tuned t/s | gain | llama-bench defaults | llama-bench tuned | "
                  "llama-bench gain |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for row in target.gains:
            lines.append(f"| {row.depth} | {row.test} | {row.defaults:.1f} | {row.tuned:.1f} | {row.gain:.3f}× | "
                         f"{_rate(row.bench_defaults)} | {_rate(row.bench_tuned)} | "
                         f"{f'{row.bench_gain:.3f}×' if row.bench_gain else '–'} |")
        goal = [row.gain for row in target.gains if row.depth == goal_depth]
        if goal:
            met = max(goal) >= goal_gain
            lines += ["", f"Goal {goal_gain:.2f}× at depth {goal_depth} in pp or tg: "
                      f"{'met' if met else 'not met'} (best {max(goal):.3f}×)."]
        kwargs = ", ".join(f"{name}={value}" for name, value in target.llama_kwargs.items())
        lines += ["", "Ready to paste:", "", "```python", "import llama_cpp",
                  f"llm = llama_cpp.Llama(model_path={result.model_path!r}, {kwargs})", "```", ""]
        if target.env:
            lines += ["Environment (before the process imports llama_cpp):", "", "```bash",
                      *(f"export {name}={value}" for name, value in target.env.items()), "```", ""]
        else:
            lines += ["Environment: nothing to set.", ""]
        if any(t in (target.best.type_k, target.best.type_v) for t in ("q8_0", "q4_0")):
            lines += ["The tuned KV cache is quantized: the logits change slightly; check your task's quality.", ""]
        lines += ["Every trial:", "", "| trial | status | score | " + " | ".join(
            f"d{d} {t}" for d in result.depths for t in TESTS) + " |",
            "|---|---|---:|" + "---:|" * (2 * len(result.depths))]
        for trial in target.trials:
            rates = " | ".join(f"{trial.rates.get(str(d), {}).get(t, 0):.1f}" for d in result.depths for t in TESTS)
            lines.append(f"| {trial.label} | {trial.status} | "
                         f"{f'{trial.score:.3f}' if trial.score is not None else '–'} | {rates} |")
        lines.append("")
    return "\n".join(lines)


def _rate(value: float | None) -> str:
    return f"{value:.1f}" if value else "–"
