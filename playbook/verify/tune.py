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
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from playbook.verify.settings import BenchSettings, differences, llama_class_defaults, threadpool_lines
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
    stopped: str = ""  # why the search ended before every candidate was tried (verify.tune_budget_s)
    threadpool_lines: list[str] = field(default_factory=list)  # Python lines that attach the tuned CPU thread pool


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
    elif dimension == "poll" and layers_on_cpu:
        options = [(f"thread pool poll={'none' if v is None else v}", current.replace(poll=v)) for v in POLLS]
    elif dimension == "cuda_graphs" and gpu:
        without = tuple(pair for pair in current.env if pair[0] != CUDA_GRAPHS_OFF[0])
        options = [("CUDA graphs on", current.replace(env=without)),
                   ("CUDA graphs off", current.replace(env=(*without, CUDA_GRAPHS_OFF)))]
    return [(label, settings) for label, settings in options if settings != current]


# In the order the search tries them: those that gained most on the GPU machines first, so a search that its
# time budget stops has tried them.
DIMENSIONS = ("flash_attn", "batch", "threads", "poll", "cuda_graphs", "kv_cache", "offload_kqv")
# The CPU thread pool: none (Llama()'s per-graph pool), no polling, llama-bench's default polling.
POLLS = (None, 0, 50)


class Budget:
    """verify.tune_budget_s over every offload target: each target gets an equal share of what is left, and its
    search stops while there is still time to measure what it found (side by side, and through llama-bench)."""

    # After the search: side by side (2 rounds of 2), and llama-bench's two runs where it was built.
    SIDE_BY_SIDE_TRIALS = 4
    LLAMA_BENCH_TRIALS = 2

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic, with_llama_bench: bool = True):
        self.seconds, self.clock = seconds, clock
        self.started = clock()
        self.trials_after_search = self.SIDE_BY_SIDE_TRIALS + (self.LLAMA_BENCH_TRIALS if with_llama_bench else 0)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def target_deadline(self, targets_left: int) -> float | None:
        if not self.seconds:
            return None
        return self.clock() + max(0.0, self.seconds - self.elapsed()) / max(1, targets_left)

    def allows(self, deadline: float | None, trial_s: float) -> bool:
        """Another candidate fits before ``deadline`` with the trials that must follow the search."""
        return deadline is None or self.clock() + trial_s * (1 + self.trials_after_search) <= deadline


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
           cores: int, dimensions: tuple[str, ...] = DIMENSIONS, budget: Budget | None = None,
           deadline: float | None = None) -> tuple[BenchSettings, list[TuneTrial], str]:
    """Coordinate descent from ``defaults``; returns the best settings, every trial (the defaults' first), and why
    the search stopped early ("" when it tried every candidate)."""
    budget = budget or Budget(0)
    started = budget.clock()
    reference = measure(defaults, n_gpu_layers, "defaults (Llama())")
    reference.score = 1.0 if reference.status == "ok" else None
    trials = [reference]
    if reference.status != "ok":
        return defaults, trials, ""
    slowest_trial_s = budget.clock() - started
    best, best_score = defaults, 1.0
    for number, dimension in enumerate(dimensions):
        for label, candidate in alternatives(dimension, best, gpu=gpu, layers_on_cpu=layers_on_cpu, cores=cores):
            if not budget.allows(deadline, slowest_trial_s):
                untried = ", ".join(dimensions[number:])
                return best, trials, (f"verify.tune_budget_s ({budget.seconds:.0f} s) stopped the search after "
                                      f"{len(trials)} trials ({budget.elapsed():.0f} s); not tried: {untried}")
            trial_started = budget.clock()
            trial = measure(candidate, n_gpu_layers, label)
            slowest_trial_s = max(slowest_trial_s, budget.clock() - trial_started)
            trial.score = score(trial, reference)
            trials.append(trial)
            if trial.score is not None and trial.score > best_score * (1 + MIN_GAIN):
                best, best_score = candidate, trial.score
    return best, trials, ""


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


def offload_targets(n_layer: int, gpu_offload: bool, budget_mib: int, measured_mib: dict[int, float | None],
                    model_bytes: int = 0) -> list[tuple[int, str]]:
    """Where to tune: full offload, and the largest partial offload that fits ``budget_mib`` of GPU memory,
    from the memory the sweep measured per layer (or the model's size per layer, where it measured one point)."""
    if not gpu_offload:
        return [(0, "no GPU offload: a CPU-only build, tuned on the CPU")]
    full = n_layer + 1
    targets = [(full, "full offload")]
    if not budget_mib:
        return targets
    fit = layers_within(budget_mib, n_layer, measured_mib, model_bytes)
    cpu_tune = "a CPU tune (no layer on the GPU)"
    if fit is None:
        why = f"the sweep measured no GPU memory to size verify.gpu_memory_budget ({budget_mib} MiB) by: {cpu_tune}"
        targets.append((0, why))
    elif fit.layers <= 0:
        targets.append((0, f"not one layer fits verify.gpu_memory_budget ({budget_mib} MiB: {fit.describe()}): {cpu_tune}"))
    elif fit.layers < full:
        why = f"partial offload: the most layers within verify.gpu_memory_budget ({budget_mib} MiB: {fit.describe()})"
        targets.append((fit.layers, why))
    return targets


@dataclass(frozen=True)
class MemoryFit:
    layers: int
    base_mib: float
    per_layer_mib: float
    source: str

    def describe(self) -> str:
        return (f"{self.base_mib:.0f} MiB with no layer, {self.per_layer_mib:.0f} MiB per layer, "
                f"{self.source}; {self.layers} layers fit")


def layers_within(budget_mib: int, n_layer: int, measured_mib: dict[int, float | None],
                  model_bytes: int = 0) -> MemoryFit | None:
    """How many layers fit ``budget_mib``: a line through the sweep's GPU memory by layer count (least squares), or
    from one measured point and the model's bytes per layer (the output layer counted as one)."""
    known = sorted((ngl, mib) for ngl, mib in measured_mib.items() if mib is not None)
    if len({ngl for ngl, _ in known}) >= 2:
        xs, ys = [float(ngl) for ngl, _ in known], [mib for _, mib in known]
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
                 / sum((x - mean_x) ** 2 for x in xs))
        base, source = mean_y - slope * mean_x, f"fitted to the sweep's {len(known)} points"
    elif known and model_bytes:
        slope = model_bytes / 2**20 / (n_layer + 1)
        ngl, mib = known[0]
        base, source = mib - slope * ngl, "the model's size per layer"
    else:
        return None
    if slope <= 0:
        return None
    return MemoryFit(max(0, min(n_layer + 1, math.floor((budget_mib - base) / slope))), base, slope, source)


def tune(model_path: str, n_layer: int, gpu_offload: bool, threads: int, cores: int, depths: list[int], n_prompt: int,
         n_gen: int, repetitions: int, measure: Measure, budget_mib: int = 0,
         measured_mib: dict[int, float | None] | None = None, bench: Bench | None = None,
         log: Callable[[str], None] = print, model_bytes: int = 0, budget: Budget | None = None) -> TuneResult:
    result = TuneResult(list(depths), n_prompt, n_gen, repetitions, model_path)
    budget = budget or Budget(0)
    targets = offload_targets(n_layer, gpu_offload, budget_mib, measured_mib or {}, model_bytes)
    for number, (ngl, why) in enumerate(targets):
        defaults = llama_class_defaults(threads)
        log(f"tuning {number + 1} of {len(targets)} at n_gpu_layers={ngl} ({why}), depths "
            f"{', '.join(map(str, depths))}" + (f"; {budget.elapsed():.0f} of {budget.seconds:.0f} s used"
                                                 if budget.seconds else ""))
        deadline = budget.target_deadline(len(targets) - number)
        best, trials, stopped = search(defaults, ngl, measure, gpu=gpu_offload and ngl > 0,
                                       layers_on_cpu=ngl <= n_layer, cores=cores, budget=budget, deadline=deadline)
        target = TuneTarget(ngl, why, defaults, best, trials, stopped=stopped)
        if stopped:
            log(f"  {stopped}")
        if trials[0].status != "ok":
            target.error = f"the defaults' trial ended {trials[0].status}: see {trials[0].log_file}"
        else:
            target.gains = side_by_side(defaults, best, ngl, measure)
            if bench is not None:
                _add_llama_bench(target, bench, depths, log)
        target.llama_kwargs = best.llama_kwargs(ngl)
        target.env = dict(best.env)
        target.threadpool_lines = threadpool_lines(best)
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
        if target.stopped:
            lines += [f"The search did not finish: {target.stopped}. The gains below are measured for what it "
                      "had found.", ""]
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
                  f"llm = llama_cpp.Llama(model_path={result.model_path!r}, {kwargs})",
                  *(["# Llama() has no argument for the CPU thread pool the tune chose; llama.cpp's API attaches it:"]
                    + target.threadpool_lines if target.threadpool_lines else []), "```", ""]
        lines += _cpu_costs(target, result.depths)
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


def _cpu_costs(target: TuneTarget, depths: list[int]) -> list[str]:
    """What threads and the thread pool's polling cost here, each trial against the defaults' (with layers on the
    CPU: the search tries them only there)."""
    reference = target.trials[0] if target.trials else None
    rows = [t for t in target.trials[1:] if t.label.startswith(("threads=", "thread pool"))]
    if reference is None or reference.status != "ok" or not rows:
        return []
    lines = [f"What threads and polling cost with layers on the CPU (against the defaults' {reference.settings.threads}"
             " threads, no pool attached; ratios of tokens/s):", "",
             "| trial | " + " | ".join(f"d{d} {t}" for d in depths for t in TESTS) + " |",
             "|---|" + "---:|" * (2 * len(depths))]
    for trial in rows:
        cells = []
        for depth in depths:
            for test in TESTS:
                ours, base = trial.rates.get(str(depth), {}).get(test), reference.rates.get(str(depth), {}).get(test)
                cells.append(f"{ours / base:.3f}×" if ours and base else "–")
        lines.append(f"| {trial.label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _rate(value: float | None) -> str:
    return f"{value:.1f}" if value else "–"
