"""``verify.tune``: search the runtime settings of the built wheel for faster ones than ``Llama()``'s defaults.

At each offload level (full offload; the largest measured offload within ``verify.gpu_memory_budget``;
no offload on a CPU-only build) the search starts from what ``Llama(model_path, n_gpu_layers=N)`` runs
with and changes one setting at a time (coordinate descent), once per workload: prompt-heavy (prompt
processing) and generation-heavy (token generation). A change is kept for a workload when it speeds up that
workload's geometric mean over every depth by more than :data:`MIN_GAIN` and is slower than the defaults at no
depth: flash attention that speeds prompts but slows generation at depth 4096 is recommended for prompts only.
Every trial is one child process (``probe.py bench``), measured at each ``verify.tune_depths`` (tokens already
in the KV cache, llama-bench's ``-d``), and serves both workloads. What each workload found and the defaults are
then measured again, alternately (:func:`side_by_side`); a setting that turns out slower there on its own metric
is not recommended, and the defaults stay. Where llama-bench was built, it runs with the same settings.

The KV-cache types tried with flash attention are those the build has kernels for (:func:`fa_kv_pairs`): a
pair without one runs attention on the CPU. Pairs that need a build flag are named in the report. With
``verify.tune_build_flags`` the wheel is rebuilt with each candidate flag of its backend (:func:`build_flag_candidates`),
and what needs the flag is measured on the rebuilt wheel beside the defaults on the verified one
(:func:`tune_build_flags`): the report then gives the CMake arguments to add and the ``Llama(...)`` arguments together.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from playbook.verify.settings import BenchSettings, differences, llama_class_defaults, threadpool_lines
from playbook.verify.yardsticks import BenchPoint

MIN_GAIN = 0.02  # a change must beat the best so far by 2 %: less is within the spread of a few repetitions
TESTS = ("pp", "tg")
CUDA_GRAPHS_OFF = ("GGML_CUDA_DISABLE_GRAPHS", "1")  # ggml-cuda captures CUDA graphs unless this is set
BATCHES = ((512, 256), (512, 512), (2048, 512), (2048, 1024), (4096, 2048))
QUANTIZED_V_NEEDS_FLASH_ATTN = "a quantized V cache needs flash attention (llama.cpp refuses the context otherwise)"
# The workloads a recommendation is made for, by the test that measures each.
WORKLOADS = {"pp": "prompt-heavy (long prompts, short answers)", "tg": "generation-heavy (chat, long answers)"}
KV_PAIRS = (("f16", "f16"), ("q8_0", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"))
# ggml-cuda compiles flash-attention kernels for the K/V type pairs GGML_CUDA_FA_QUANTS lists (the pinned llama.cpp,
# ggml/cmake/common.cmake: "all", or pairs such as q8_0-f16 separated by commas; its default in ggml/CMakeLists.txt is
# DEFAULT_FA_QUANTS, a K and V of the same type); another pair runs attention on the CPU (llama.cpp #28633: pp about
# 34 t/s against 659-1094 t/s with the kernels built). GGML_CUDA_FA_ALL_QUANTS=ON, deprecated there, means "all".
FA_QUANTS = "GGML_CUDA_FA_QUANTS"
FA_ALL_QUANTS = "GGML_CUDA_FA_ALL_QUANTS"
DEFAULT_FA_QUANTS = ("q4_0-q4_0", "q8_0-q8_0", "f16-f16", "bf16-bf16")


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
    # Per workload ("pp", "tg"): the geometric mean over depths of that test, against the defaults' trial.
    workload_scores: dict[str, float | None] = field(default_factory=dict)


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
class Recommendation:
    """What to run for one workload at one offload: the tuned settings where they were faster at every depth,
    else the defaults, with why."""

    workload: str
    """"pp" (prompt-heavy) or "tg" (generation-heavy): the test the settings were chosen and checked by."""
    settings: BenchSettings
    gains: list[GainRow] = field(default_factory=list)
    """The side-by-side rows of this workload's test, every depth ([] where the defaults stay)."""
    kept_defaults: str = ""
    """Why the defaults stay ("" when tuned settings are recommended)."""
    llama_kwargs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


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
    recommendations: list[Recommendation] = field(default_factory=list)  # one per workload
    build_hints: list[str] = field(default_factory=list)  # faster settings this build cannot run, and the flag
    build_flags: list[FlagRecommendation] = field(default_factory=list)  # verify.tune_build_flags: per flag, workload


@dataclass
class BuildFlag:
    """A CMake argument that may make a faster configuration possible, and what to measure with it."""

    cmake_args: list[str]
    why: str
    kv_pairs: list[str] = field(default_factory=list)
    """K/V cache type pairs (``q8_0-f16``) whose flash-attention kernels the flag builds: those are measured, with
    flash attention on; empty: the flag changes the build itself, so the recommended settings are measured again."""


@dataclass
class FlagBuild:
    """The wheel rebuilt with a :class:`BuildFlag` (verify.tune_build_flags)."""

    cmake_args: list[str]
    ok: bool = False
    wheel: str = ""  # the rebuilt wheel's path, in the run folder's tune wheelhouse
    sha256: str = ""
    duration_s: float = 0.0
    reused_wheel: bool = False  # from the wheel cache: built before with the same arguments
    ccache: str = ""  # what ccache served ("178 hits, 12 misses")
    log_file: str = ""
    error: str = ""


@dataclass
class FlagRecommendation:
    """One build flag for one workload at one offload: the flag and the settings that need it where the rebuilt wheel
    beat, beside the defaults on the verified wheel, both the defaults at every depth and the runtime-only
    recommendation; else why not."""

    workload: str
    cmake_args: list[str]
    settings: BenchSettings
    """What was measured on the rebuilt wheel (the best of the candidates, or the first where none won)."""
    gains: list[GainRow] = field(default_factory=list)
    """The rebuilt wheel with ``settings`` against the defaults on the verified wheel, side by side, own test."""
    kept: str = ""
    """Why the flag is not recommended ("" when it is)."""
    llama_kwargs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    without_flag: list[GainRow] = field(default_factory=list)
    """The workload's runtime-only recommendation on the verified wheel against the defaults, in the same rounds
    ([] where that is the defaults): what the flag must beat."""


@dataclass
class TuneResult:
    depths: list[int]
    n_prompt: int
    n_gen: int
    repetitions: int
    model_path: str
    targets: list[TuneTarget] = field(default_factory=list)
    report_file: str = ""
    flag_builds: list[FlagBuild] = field(default_factory=list)  # verify.tune_build_flags: each rebuild

    def best_gain(self, depth: int) -> float | None:
        """The largest gain at ``depth`` of a recommended setting, on the metric it is recommended for."""
        gains = [row.gain for target in self.targets for r in target.recommendations if not r.kept_defaults
                 for row in r.gains if row.depth == depth]
        return max(gains, default=None)


Measure = Callable[[BenchSettings, int, str], TuneTrial]
Bench = Callable[[BenchSettings, int, list[int]], list[BenchPoint]]


# ---------------------------------------------------------------- the search (pure: takes a measure function)


def fa_kv_pairs(gpu: bool, all_quants: bool) -> list[tuple[str, str]]:
    """The (type_k, type_v) pairs flash attention has kernels for in this build: on a GPU build without
    ``GGML_CUDA_FA_ALL_QUANTS`` only a K and V of the same type; the CPU's kernels take every pair."""
    return [(k, v) for k, v in KV_PAIRS if not gpu or all_quants or k == v]


def fa_pairs_built(cmake_args: list[str]) -> list[str] | None:
    """The K/V pairs (``q8_0-q8_0``) a CUDA build with ``cmake_args`` has flash-attention kernels for; None: all."""
    value = ",".join(DEFAULT_FA_QUANTS)
    for arg in cmake_args:
        name, _, given = arg.removeprefix("-D").partition("=")
        name = name.split(":")[0]  # -DNAME:STRING=value
        if name == FA_ALL_QUANTS and given.upper() in ("ON", "1", "TRUE", "YES"):
            return None
        if name == FA_QUANTS:
            value = given
    pairs = [pair.strip().lower() for pair in value.replace(";", ",").split(",") if pair.strip()]
    return None if "all" in pairs else pairs


def builds_every_fa_pair(cmake_args: list[str]) -> bool:
    """A CUDA build with ``cmake_args`` has a flash-attention kernel for every pair the search tries."""
    built = fa_pairs_built(cmake_args)
    return built is None or all(f"{k}-{v}" in built for k, v in KV_PAIRS)


def fa_quants_flag(cmake_args: list[str], add: list[str]) -> str:
    """The GGML_CUDA_FA_QUANTS argument that builds the pairs ``cmake_args`` builds and ``add``."""
    built = fa_pairs_built(cmake_args)
    return f"-D{FA_QUANTS}=" + ("all" if built is None else ",".join(dict.fromkeys([*built, *add])))


def missing_fa_pairs(gpu: bool, all_quants: bool) -> list[str]:
    """The pairs the search would try with flash attention that this build has no kernel for (``q8_0-f16``)."""
    return [f"{k}-{v}" for k, v in KV_PAIRS if (k, v) not in fa_kv_pairs(gpu, all_quants)]


def build_hints(gpu: bool, all_quants: bool, cmake_args: list[str] | None = None) -> list[str]:
    """Settings the search leaves out because this build has no kernel for them, with the flag that builds one."""
    missing = missing_fa_pairs(gpu, all_quants)
    if not missing:
        return []
    pairs = ", ".join("type_k={} type_v={}".format(*pair.split("-")) for pair in missing)
    return [(f"{pairs} with flash attention: this build has no flash-attention kernel for it (attention would run on "
             f"the CPU), so it was not tried; {fa_quants_flag(cmake_args or [], missing)} builds one (the pinned "
             f"llama.cpp's option; -D{FA_ALL_QUANTS}=ON, deprecated there, builds all 49 pairs: a longer build), and "
             "verify.tune_build_flags: true rebuilds with it and measures it")]


def alternatives(dimension: str, current: BenchSettings, *, gpu: bool, layers_on_cpu: bool,
                 cores: int, fa_all_quants: bool = False) -> list[tuple[str, BenchSettings]]:
    """The settings to try for one dimension, each with a label; ``current`` itself is left out."""
    options: list[tuple[str, BenchSettings]] = []
    if dimension == "flash_attn":
        options = [(f"flash_attn={v}", current.replace(flash_attn=v)) for v in ("on", "off")]
    elif dimension == "batch":
        options = [(f"n_batch={b} n_ubatch={u}", current.replace(n_batch=b, n_ubatch=u)) for b, u in BATCHES]
    elif dimension == "kv_cache":
        # a quantized V needs flash attention (QUANTIZED_V_NEEDS_FLASH_ATTN); with it, only pairs with a kernel
        pairs = fa_kv_pairs(gpu, fa_all_quants) if current.flash_attn == "on" else [
            (k, v) for k, v in KV_PAIRS if v == "f16"]
        options = [(f"type_k={k} type_v={v}", current.replace(type_k=k, type_v=v)) for k, v in pairs]
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


# In the order the search tries them: those that moved throughput most on the GPU machines first, so a search that
# its time budget stops has tried them. At full offload: flash attention, the KV-cache types its kernels take, the
# batch sizes for prompts. With layers on the CPU the thread pool's polling came right after flash attention.
DIMENSIONS = ("flash_attn", "kv_cache", "batch", "cuda_graphs", "offload_kqv", "poll", "threads")
DIMENSIONS_WITH_LAYERS_ON_CPU = ("flash_attn", "poll", "kv_cache", "batch", "threads", "cuda_graphs", "offload_kqv")
# The CPU thread pool: none (Llama()'s per-graph pool), no polling, llama-bench's default polling.
POLLS = (None, 0, 50)


class Budget:
    """verify.tune_budget_s over every offload target. The defaults are measured at every target first; what is
    left is then shared in proportion to how long a trial takes at each (a trial with layers on the CPU, at depth,
    takes many times one at full offload), and each search stops while there is still time to measure what it
    found: side by side (one alternating round under a budget, two without) and llama-bench's runs where built."""

    LLAMA_BENCH_TRIALS = 3  # the defaults and each workload's settings

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic, with_llama_bench: bool = True):
        self.seconds, self.clock = seconds, clock
        self.started = clock()
        self.side_by_side_rounds = 1 if seconds else 2
        # each workload's settings beside the defaults, and llama-bench with all three
        self.trials_after_search = (2 * len(WORKLOADS) * self.side_by_side_rounds
                                    + (self.LLAMA_BENCH_TRIALS if with_llama_bench else 0))

    def elapsed(self) -> float:
        return self.clock() - self.started

    def target_deadline(self, trial_s: list[float]) -> float | None:
        """The deadline of the first of the targets still to search, whose trials take ``trial_s`` each."""
        if not self.seconds:
            return None
        share = trial_s[0] / sum(trial_s) if sum(trial_s) > 0 else 1 / len(trial_s)
        return self.clock() + max(0.0, self.seconds - self.elapsed()) * share

    def allows(self, deadline: float | None, trial_s: float) -> bool:
        """Another candidate fits before ``deadline`` with the trials that must follow the search."""
        return deadline is None or self.clock() + trial_s * (1 + self.trials_after_search) <= deadline


def score(trial: TuneTrial, reference: TuneTrial, tests: tuple[str, ...] = TESTS) -> float | None:
    """Geometric mean, over every depth and ``tests``, of the trial's rate over the reference's."""
    if trial.status != "ok" or reference.status != "ok":
        return None
    ratios = _ratios(trial, reference, tests)
    if not ratios or len(ratios) < sum(1 for r in reference.rates.values() for t in tests if t in r):
        return None
    return math.exp(statistics.fmean(math.log(r) for r in ratios))


def slowest(trial: TuneTrial, reference: TuneTrial, test: str) -> float | None:
    """The trial's lowest rate over the reference's, over the depths, in one test."""
    ratios = _ratios(trial, reference, (test,)) if trial.status == "ok" and reference.status == "ok" else []
    return min(ratios, default=None)


def _ratios(trial: TuneTrial, reference: TuneTrial, tests: tuple[str, ...]) -> list[float]:
    return [trial.rates[d][t] / reference.rates[d][t] for d in reference.rates for t in tests
            if reference.rates[d].get(t) and trial.rates.get(d, {}).get(t)]


@dataclass
class SearchOutcome:
    best: dict[str, BenchSettings]
    """The best settings found per workload ("pp", "tg"); the defaults where nothing beat them."""
    trials: list[TuneTrial]
    """Every trial, the defaults' first."""
    stopped: str = ""
    """Why the search ended before every candidate was tried ("" when it tried them all)."""


def search(defaults: BenchSettings, n_gpu_layers: int, measure: Measure, *, gpu: bool, layers_on_cpu: bool,
           cores: int, dimensions: tuple[str, ...] | None = None, budget: Budget | None = None,
           deadline: float | None = None, measured_defaults: tuple[TuneTrial, float] | None = None,
           fa_all_quants: bool = False) -> SearchOutcome:
    """Coordinate descent from ``defaults``, one path per workload sharing the trials they have in common: a
    candidate is kept for a workload when its score on that workload's test beats the best so far by
    :data:`MIN_GAIN` and it is slower than the defaults at no depth there. ``measured_defaults``: the defaults'
    trial and its seconds, when already measured."""
    budget = budget or Budget(0)
    dimensions = dimensions or (DIMENSIONS_WITH_LAYERS_ON_CPU if layers_on_cpu else DIMENSIONS)
    reference, slowest_trial_s = measured_defaults or measure_defaults(defaults, n_gpu_layers, measure, budget)
    outcome = SearchOutcome({w: defaults for w in WORKLOADS}, [reference])
    if reference.status != "ok":
        return outcome
    best_scores = {w: 1.0 for w in WORKLOADS}
    measured: dict[BenchSettings, TuneTrial] = {defaults: reference}
    for number, dimension in enumerate(dimensions):
        # each workload's candidates come from its own best at the start of the dimension
        offered = {w: alternatives(dimension, outcome.best[w], gpu=gpu, layers_on_cpu=layers_on_cpu, cores=cores,
                                   fa_all_quants=fa_all_quants) for w in WORKLOADS}
        candidates = list(dict.fromkeys((label, c) for options in offered.values() for label, c in options))
        labels = [label for label, _ in candidates]
        # where the workloads' paths have parted, one label names two candidates: say whose best each starts from
        candidates = [(label if labels.count(label) == 1 else
                       f"{label} (on the {next(w for w, o in offered.items() if (label, c) in o)} best)", c)
                      for label, c in candidates]
        for index, (label, candidate) in enumerate(candidates):
            if candidate not in measured:
                if not budget.allows(deadline, slowest_trial_s):
                    outcome.stopped = (f"verify.tune_budget_s ({budget.seconds:.0f} s) stopped the search after "
                                       f"{len(outcome.trials)} trials ({budget.elapsed():.0f} s)"
                                       + stopped_where(dimensions, number, index, len(candidates)))
                    return outcome
                trial_started = budget.clock()
                trial = measure(candidate, n_gpu_layers, label)
                slowest_trial_s = max(slowest_trial_s, budget.clock() - trial_started)
                trial.score = score(trial, reference)
                trial.workload_scores = {w: score(trial, reference, (w,)) for w in WORKLOADS}
                outcome.trials.append(trial)
                measured[candidate] = trial
            trial = measured[candidate]
            for workload, options in offered.items():
                gain, floor = trial.workload_scores.get(workload), slowest(trial, reference, workload)
                if (any(c == candidate for _, c in options) and gain is not None and floor is not None
                        and gain > best_scores[workload] * (1 + MIN_GAIN) and floor >= 1.0):
                    outcome.best[workload], best_scores[workload] = candidate, gain
    return outcome


def stopped_where(dimensions: tuple[str, ...], number: int, index: int, count: int) -> str:
    """Where a stopped search was: the dimension it stopped in when ``index`` of its ``count`` candidates had been
    measured (that dimension was tried in part, so it is not among those not tried), and the dimensions after."""
    dimension, later = dimensions[number], list(dimensions[number + 1:])
    if index == 0:
        return "; not tried: " + ", ".join([dimension, *later])
    return (f", during {dimension} ({index} of its {count} candidates measured)"
            + ("; not tried: " + ", ".join(later) if later else ""))


def measure_defaults(defaults: BenchSettings, n_gpu_layers: int, measure: Measure,
                     budget: Budget) -> tuple[TuneTrial, float]:
    """What ``Llama(model_path, n_gpu_layers=N)`` runs with: the reference every candidate is scored against."""
    started = budget.clock()
    reference = measure(defaults, n_gpu_layers, "defaults (Llama())")
    reference.score = 1.0 if reference.status == "ok" else None
    return reference, budget.clock() - started


def side_by_side(defaults: BenchSettings, best: BenchSettings, n_gpu_layers: int, measure: Measure,
                 rounds: int = 2) -> list[GainRow]:
    """Defaults and best measured alternately (``rounds`` times each, so drift hits both); the gain is the
    median of the best's rates over the median of the defaults'."""
    measured = alternately([("defaults", defaults, measure), ("tuned", best, measure)], n_gpu_layers, rounds)
    return gain_rows(measured["defaults"], measured["tuned"])


Side = tuple[str, BenchSettings, Measure]  # a name, the settings, and how to measure them (on which wheel)


def alternately(sides: list[Side], n_gpu_layers: int, rounds: int) -> dict[str, list[TuneTrial]]:
    """Every side once per round, in turn, ``rounds`` times: drift falls on all of them."""
    measured: dict[str, list[TuneTrial]] = {name: [] for name, _, _ in sides}
    for round_number in range(rounds):
        for name, settings, measure in sides:
            measured[name].append(measure(settings, n_gpu_layers, f"side by side {round_number + 1}: {name}"))
    return measured


def gain_rows(defaults: list[TuneTrial], tuned: list[TuneTrial]) -> list[GainRow]:
    """Per depth and test: the median of the tuned trials' rates over the median of the defaults'."""
    good = [t for t in defaults if t.status == "ok"], [t for t in tuned if t.status == "ok"]
    if not good[0] or not good[1]:
        return []
    rows = []
    for depth in good[0][0].rates:
        for test in TESTS:
            before = statistics.median(t.rates[depth][test] for t in good[0])
            after = statistics.median(t.rates[depth][test] for t in good[1] if depth in t.rates)
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
         log: Callable[[str], None] = print, model_bytes: int = 0, budget: Budget | None = None,
         fa_all_quants: bool = False, cmake_args: list[str] | None = None) -> TuneResult:
    """``fa_all_quants``: the build compiled every flash-attention K/V type pair the search tries
    (:func:`builds_every_fa_pair` of its ``cmake_args``, which the build hints name the flag from)."""
    result = TuneResult(list(depths), n_prompt, n_gen, repetitions, model_path)
    budget = budget or Budget(0)
    targets = offload_targets(n_layer, gpu_offload, budget_mib, measured_mib or {}, model_bytes)
    defaults = llama_class_defaults(threads)
    log(f"tuning at n_gpu_layers {', '.join(str(ngl) for ngl, _ in targets)}, depths {', '.join(map(str, depths))}"
        + (f", within {budget.seconds:.0f} s: first the defaults at each" if budget.seconds else ""))
    references = [measure_defaults(defaults, ngl, measure, budget) for ngl, _ in targets]
    for number, ((ngl, why), reference) in enumerate(zip(targets, references, strict=True)):
        log(f"tuning {number + 1} of {len(targets)} at n_gpu_layers={ngl} ({why})"
            + (f"; {budget.elapsed():.0f} of {budget.seconds:.0f} s used" if budget.seconds else ""))
        deadline = budget.target_deadline([seconds for _, seconds in references[number:]])
        gpu = gpu_offload and ngl > 0
        found = search(defaults, ngl, measure, gpu=gpu, layers_on_cpu=ngl <= n_layer, cores=cores, budget=budget,
                       deadline=deadline, measured_defaults=reference, fa_all_quants=fa_all_quants)
        target = TuneTarget(ngl, why, defaults, defaults, found.trials, stopped=found.stopped,
                            build_hints=build_hints(gpu, fa_all_quants, cmake_args))
        if found.stopped:
            log(f"  {found.stopped}")
        if found.trials[0].status != "ok":
            target.error = f"the defaults' trial ended {found.trials[0].status}: see {found.trials[0].log_file}"
        else:
            confirmed = {settings: side_by_side(defaults, settings, ngl, measure, budget.side_by_side_rounds)
                         for settings in dict.fromkeys(found.best.values()) if settings != defaults}
            target.recommendations = [recommend(w, found.best[w], defaults, confirmed.get(found.best[w], []), ngl)
                                      for w in WORKLOADS]
            generation = target.recommendations[-1]
            target.best = generation.settings
            target.gains = confirmed.get(found.best["tg"], []) if generation.settings != defaults else []
            if bench is not None:
                _add_llama_bench(target, bench, depths, log)
        target.llama_kwargs = target.best.llama_kwargs(ngl)
        target.env = dict(target.best.env)
        target.threadpool_lines = threadpool_lines(target.best)
        for recommendation in target.recommendations:
            log(f"  {recommendation.workload}: " + (recommendation.kept_defaults or ", ".join(
                f"depth {r.depth} {r.defaults:.1f} -> {r.tuned:.1f} t/s ({r.gain:.3f}x)" for r in recommendation.gains)))
        result.targets.append(target)
    return result


def recommend(workload: str, found: BenchSettings, defaults: BenchSettings, rows: list[GainRow],
              n_gpu_layers: int) -> Recommendation:
    """The search's best for ``workload`` where the side-by-side measurement confirms it is no slower than the
    defaults at any depth on the workload's own test; else the defaults, with why."""
    own = [row for row in rows if row.test == workload]
    if found == defaults:
        recommendation = Recommendation(workload, defaults, kept_defaults=(
            f"keep the defaults: no setting was faster in {workload} at every depth"))
    elif not own or any(row.gain < 1.0 for row in own):
        worst = min(own, key=lambda row: row.gain) if own else None
        changed = ", ".join(f"{k}={a}" for k, (a, _) in differences(found, defaults).items())
        recommendation = Recommendation(workload, defaults, own, kept_defaults=(
            f"keep the defaults: {changed} measured again beside them was slower in {workload} at depth "
            f"{worst.depth} ({worst.gain:.3f}×)" if worst else f"keep the defaults: {changed} could not be measured "
            "again beside them"))
    else:
        recommendation = Recommendation(workload, found, own)
    recommendation.llama_kwargs = recommendation.settings.llama_kwargs(n_gpu_layers)
    recommendation.env = dict(recommendation.settings.env)
    return recommendation


# ---------------------------------------------------------------- build flags (verify.tune_build_flags)

# The CPU backend's candidate: llamafile's tinyBLAS matrix products (sgemm.cpp, on by default in llama.cpp) against
# ggml's own kernels. Which is faster depends on the CPU, the model's types and the batch; it changes what every
# matrix product runs, and rebuilding it recompiles only ggml-cpu's sources.
LLAMAFILE = "GGML_LLAMAFILE"


# The build flags a tune may try, by the kind a backend's unit names (its ``tune_build_flags``).
FA_KERNELS = "flash-attention-kernels"
LLAMAFILE_KERNELS = "llamafile-kernels"


def build_flag_candidates(kind: str, cmake_args: list[str]) -> list[BuildFlag]:
    """The build flags worth a rebuild of a build with ``cmake_args``, of the ``kind`` its backend names: the
    flash-attention kernels of the K/V pairs a CUDA build lacks (GGML_CUDA_FA_QUANTS), or llamafile's matrix
    products toggled on the CPU."""
    if kind == FA_KERNELS:
        missing = missing_fa_pairs(gpu=True, all_quants=builds_every_fa_pair(cmake_args))
        if not missing:
            return []
        pairs = ", ".join("type_k={} type_v={}".format(*pair.split("-")) for pair in missing)
        return [BuildFlag([fa_quants_flag(cmake_args, missing)],
                          f"flash-attention kernels for {pairs}, which this build lacks", missing)]
    if kind == LLAMAFILE_KERNELS:
        off = any(a.upper() in (f"-D{LLAMAFILE}=OFF", f"-D{LLAMAFILE}:BOOL=OFF") for a in cmake_args)
        return [BuildFlag([f"-D{LLAMAFILE}={'ON' if off else 'OFF'}"],
                          f"llamafile's matrix products (tinyBLAS) {'on' if off else 'off'}: ggml's "
                          f"{'tinyBLAS' if off else 'own'} kernels for every matrix product on the CPU")]
    return []


def flag_trials(flag: BuildFlag, recommendations: list[Recommendation]) -> dict[BenchSettings, list[str]]:
    """What to measure on the wheel rebuilt with ``flag``, and for which workloads: each workload's recommended
    settings with the flag's K/V pairs and flash attention on, or as they are where the flag changes the build."""
    trials: dict[BenchSettings, list[str]] = {}
    for recommendation in recommendations:
        current = recommendation.settings
        options = ([current.replace(flash_attn="on", type_k=pair.split("-")[0], type_v=pair.split("-")[1])
                    for pair in flag.kv_pairs] if flag.kv_pairs else [current])
        for settings in options:
            trials.setdefault(settings, []).append(recommendation.workload)
    return trials


def geometric_gain(rows: list[GainRow]) -> float:
    return math.exp(statistics.fmean(math.log(row.gain) for row in rows)) if rows else 1.0


@dataclass
class FlagMeasurement:
    """One candidate measured on the rebuilt wheel, in the same rounds as the defaults and, where they differ from
    the defaults, the workload's runtime-only recommendation on the verified wheel."""

    settings: BenchSettings
    rebuilt: list[GainRow]
    """The rebuilt wheel with ``settings`` against the defaults."""
    without_flag: dict[str, list[GainRow]] = field(default_factory=dict)
    """Per workload whose recommendation is not the defaults: that recommendation against the defaults."""


def recommend_build_flag(current: Recommendation, flag: BuildFlag, measured: list[FlagMeasurement],
                         depths: list[int], n_gpu_layers: int) -> FlagRecommendation:
    """The flag for ``current``'s workload where a candidate on the rebuilt wheel is no slower than the defaults at
    any depth on the workload's test, and beats by :data:`MIN_GAIN` what the verified wheel reaches without the flag
    in the same rounds (the workload's runtime-only recommendation, or the defaults); else not, with why."""
    workload = current.workload
    own = [(m, [row for row in m.rebuilt if row.test == workload]) for m in measured]
    complete = [(m, rows) for m, rows in own if rows and {row.depth for row in rows} >= set(depths)]
    if not complete:
        return _flag_choice(current, flag, own[0][0].settings if own else current.settings, [], n_gpu_layers,
                            "the rebuilt wheel could not be measured at every depth")
    chosen, rows = max(complete, key=lambda candidate: geometric_gain(candidate[1]))
    without = [row for row in chosen.without_flag.get(workload, []) if row.test == workload]
    baseline = geometric_gain(without)
    worst = min(rows, key=lambda row: row.gain)
    if worst.gain < 1.0:
        why = f"slower than the defaults in {workload} at depth {worst.depth} ({worst.gain:.3f}×)"
    elif geometric_gain(rows) <= baseline * (1 + MIN_GAIN):
        why = (f"{geometric_gain(rows):.3f}× the defaults in {workload}, not {MIN_GAIN:.0%} more than the "
               f"{'runtime settings alone' if without else 'defaults'} on the verified wheel ({baseline:.3f}×)")
    else:
        why = ""
    choice = _flag_choice(current, flag, chosen.settings, rows, n_gpu_layers, why and f"not recommended: {why}")
    choice.without_flag = without
    return choice


def _flag_choice(current: Recommendation, flag: BuildFlag, settings: BenchSettings, rows: list[GainRow],
                 n_gpu_layers: int, kept: str) -> FlagRecommendation:
    return FlagRecommendation(current.workload, list(flag.cmake_args), settings, rows, kept,
                              settings.llama_kwargs(n_gpu_layers), dict(settings.env))


def measure_build_flag(target: TuneTarget, flag: BuildFlag, measure: Measure, measure_rebuilt: Measure,
                       depths: list[int], rounds: int = 2) -> list[FlagRecommendation]:
    """Each of the flag's trials on the rebuilt wheel, alternately with the defaults and the runtime-only
    recommendations it is to beat on the verified wheel; one :class:`FlagRecommendation` per workload."""
    trials = flag_trials(flag, target.recommendations)
    measured = {settings: measure_candidate(target, settings, workloads, measure, measure_rebuilt,
                                            "rebuilt " + " ".join(flag.cmake_args), rounds)
                for settings, workloads in trials.items()}
    return [recommend_build_flag(current, flag, [m for s, m in measured.items() if current.workload in trials[s]],
                                 depths, target.n_gpu_layers) for current in target.recommendations]


def measure_candidate(target: TuneTarget, settings: BenchSettings, workloads: list[str], measure: Measure,
                      measure_rebuilt: Measure, label: str, rounds: int) -> FlagMeasurement:
    """The defaults, each served workload's recommendation that is not the defaults, and ``settings`` on the rebuilt
    wheel, alternately."""
    without = {r.workload: r.settings for r in target.recommendations
               if r.workload in workloads and r.settings != target.defaults}
    names = {s: f"without the flag: {'+'.join(w for w, x in without.items() if x == s)} settings"
             for s in dict.fromkeys(without.values())}
    sides: list[Side] = [("defaults", target.defaults, measure), *((name, s, measure) for s, name in names.items()),
                         (label, settings, measure_rebuilt)]
    trials = alternately(sides, target.n_gpu_layers, rounds)
    return FlagMeasurement(settings, gain_rows(trials["defaults"], trials[label]),
                           {w: gain_rows(trials["defaults"], trials[names[s]]) for w, s in without.items()})


# The wheel rebuilt with a flag, and how to measure on it (None where it did not build or install).
Rebuild = Callable[[BuildFlag], tuple[FlagBuild, Measure | None]]


def tune_build_flags(result: TuneResult, flags: list[BuildFlag], rebuild: Rebuild, measure: Measure,
                     rounds: int = 2, log: Callable[[str], None] = print) -> None:
    """verify.tune_build_flags: rebuild with each flag once, then measure what needs it at every target."""
    for flag in flags:
        log(f"rebuilding with {' '.join(flag.cmake_args)}: {flag.why}")
        built, measure_rebuilt = rebuild(flag)
        result.flag_builds.append(built)
        if measure_rebuilt is None:
            log(f"  not measured: {built.error}")
            continue
        log(f"  {'reused from the wheel cache' if built.reused_wheel else 'built'} in {built.duration_s:.0f} s"
            + (f" (ccache: {built.ccache})" if built.ccache else ""))
        for target in result.targets:
            if target.error or not target.recommendations:
                continue
            choices = measure_build_flag(target, flag, measure, measure_rebuilt, result.depths, rounds)
            target.build_flags += choices
            for choice in choices:
                log(f"  n_gpu_layers={target.n_gpu_layers} {choice.workload}: " + (choice.kept or "recommended, " + ", ".join(
                    f"depth {r.depth} {r.gain:.3f}x" for r in choice.gains)))


def _add_llama_bench(target: TuneTarget, bench: Bench, depths: list[int], log: Callable[[str], None]) -> None:
    """llama-bench with the defaults and with each recommended setting, beside the binding's side-by-side rows."""
    tuned = [r for r in target.recommendations if r.settings != target.defaults]
    try:
        runs = {settings: bench(settings, target.n_gpu_layers, depths)
                for settings in dict.fromkeys([target.defaults, *(r.settings for r in tuned)])}
    except Exception as error:  # noqa: BLE001 - llama-bench is a yardstick: the binding's own numbers stand without it
        log(f"  llama-bench with the same settings failed: {type(error).__name__}: {error}")
        return

    def rate(settings: BenchSettings, row: GainRow) -> float | None:
        return next((p.tokens_per_s for p in runs[settings]
                     if p.test == row.test and p.depth == row.depth and p.n_gpu_layers == target.n_gpu_layers), None)

    for recommendation in tuned:
        for row in recommendation.gains:
            row.bench_defaults, row.bench_tuned = rate(target.defaults, row), rate(recommendation.settings, row)
    for row in target.gains:
        row.bench_defaults, row.bench_tuned = rate(target.defaults, row), rate(target.best, row)


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
             (f"pp{result.n_prompt} and tg{result.n_gen}, {result.repetitions} repetitions, at depths "
             f"{', '.join(map(str, result.depths))} (tokens already in the KV cache, llama-bench's -d). The search "
             "starts from what `Llama(model_path, n_gpu_layers=N)` runs with and changes one setting at a time, for "
             "each workload: prompt-heavy (pp) and generation-heavy (tg). A change is kept for a workload when its "
             f"geometric mean over the depths gains more than {MIN_GAIN:.0%} there and it is slower than the "
             "defaults at no depth; the gain is measured afterwards, defaults and tuned settings alternately, in the "
             "same run, and a setting slower there on its own metric is not recommended."), ""]
    lines += _flag_build_lines(result)
    for target in result.targets:
        lines += [f"## n_gpu_layers={target.n_gpu_layers}: {target.why}", ""]
        if target.error:
            lines += [f"Not tuned: {target.error}", ""]
            continue
        if target.stopped:
            lines += [(f"The search did not finish: {target.stopped}. The gains below are measured for what it "
                      "had found."), ""]
        for recommendation in target.recommendations:
            lines += _recommendation_lines(result, target, recommendation, goal_depth, goal_gain)
        lines += _cpu_costs(target, result.depths)
        rebuilt = {tuple(b.cmake_args) for b in result.flag_builds}
        for hint in target.build_hints if not rebuilt else []:
            lines += [f"Build: {hint}.", ""]
        lines += _build_flag_lines(result, target)
        lines += ["Every trial (score: all tests; pp, tg: that workload's geometric mean over the depths):", "",
                  "| trial | status | score | pp | tg | " + " | ".join(
                      f"d{d} {t}" for d in result.depths for t in TESTS) + " |",
                  "|---|---|---:|---:|---:|" + "---:|" * (2 * len(result.depths))]
        for trial in target.trials:
            rates = " | ".join(f"{trial.rates.get(str(d), {}).get(t, 0):.1f}" for d in result.depths for t in TESTS)
            scores = " | ".join(_score(trial.workload_scores.get(w)) for w in WORKLOADS)
            lines.append(f"| {trial.label} | {trial.status} | {_score(trial.score)} | {scores} | {rates} |")
        lines.append("")
    return "\n".join(lines)


def _recommendation_lines(result: TuneResult, target: TuneTarget, recommendation: Recommendation, goal_depth: int,
                          goal_gain: float) -> list[str]:
    workload = recommendation.workload
    lines = [f"### {WORKLOADS[workload]}: {workload}", ""]
    changed = differences(recommendation.settings, target.defaults)
    lines += ["Changed from the defaults: " + (", ".join(f"{k} {b} → {a}" for k, (a, b) in changed.items())
                                               or recommendation.kept_defaults), ""]
    if recommendation.gains:
        lines += [("| depth | test | defaults t/s | tuned t/s | gain | llama-bench defaults | llama-bench tuned | "
                  "llama-bench gain |"), "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for row in recommendation.gains:
            lines.append(f"| {row.depth} | {row.test} | {row.defaults:.1f} | {row.tuned:.1f} | {row.gain:.3f}× | "
                         f"{_rate(row.bench_defaults)} | {_rate(row.bench_tuned)} | "
                         f"{f'{row.bench_gain:.3f}×' if row.bench_gain else '–'} |")
        lines.append("")
    if recommendation.kept_defaults:
        return lines
    goal = [row.gain for row in recommendation.gains if row.depth == goal_depth]
    if goal:
        lines += [(f"Goal {goal_gain:.2f}× at depth {goal_depth} in {workload}: "
                  f"{'met' if max(goal) >= goal_gain else 'not met'} ({max(goal):.3f}×)."), ""]
    kwargs = ", ".join(f"{name}={value}" for name, value in recommendation.llama_kwargs.items())
    pool = threadpool_lines(recommendation.settings)
    lines += ["Ready to paste:", "", "```python", "import llama_cpp",
              f"llm = llama_cpp.Llama(model_path={result.model_path!r}, {kwargs})",
              *(["# Llama() has no argument for the CPU thread pool the tune chose; llama.cpp's API attaches it:"]
                + pool if pool else []), "```", ""]
    if recommendation.env:
        lines += ["Environment (before the process imports llama_cpp):", "", "```bash",
                  *(f"export {name}={value}" for name, value in recommendation.env.items()), "```", ""]
    else:
        lines += ["Environment: nothing to set.", ""]
    if any(t in (recommendation.settings.type_k, recommendation.settings.type_v) for t in ("q8_0", "q4_0")):
        lines += ["The tuned KV cache is quantized: the logits change slightly; check your task's quality.", ""]
    return lines


def _score(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "–"


def _cpu_costs(target: TuneTarget, depths: list[int]) -> list[str]:
    """What threads and the thread pool's polling cost here, each trial against the defaults' (with layers on the
    CPU: the search tries them only there)."""
    reference = target.trials[0] if target.trials else None
    rows = [t for t in target.trials[1:] if t.label.startswith(("threads=", "thread pool"))]
    if reference is None or reference.status != "ok" or not rows:
        return []
    lines = [(f"What threads and polling cost with layers on the CPU (against the defaults' {reference.settings.threads}"
             " threads, no pool attached; ratios of tokens/s):"), "",
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


def _flag_build_lines(result: TuneResult) -> list[str]:
    """The rebuilds of verify.tune_build_flags: what was added, how long it took, where the wheel is."""
    lines = []
    for built in result.flag_builds:
        args = " ".join(built.cmake_args)
        if built.ok:
            how = "reused from the wheel cache" if built.reused_wheel else f"rebuilt in {built.duration_s:.0f} s"
            lines.append(f"- `{args}`: {how}" + (f" (ccache: {built.ccache})" if built.ccache else "")
                         + f"; wheel `{Path(built.wheel).name}` (sha256 {built.sha256[:12]}), log `{built.log_file}`")
        else:
            lines.append(f"- `{args}`: not measured: {built.error}")
    if not lines:
        return []
    intro = ("Build flags (verify.tune_build_flags): the wheel rebuilt with each, installed alone, and measured beside "
             "the defaults on the verified wheel, alternately:")
    return [intro, "", *lines, ""]


def _build_flag_lines(result: TuneResult, target: TuneTarget) -> list[str]:
    """Per workload: the CMake arguments to add and the ``Llama(...)`` arguments to pass with them, or why not."""
    lines = []
    for choice in target.build_flags:
        args = " ".join(choice.cmake_args)
        lines += [f"### Build flag `{args}` for {WORKLOADS[choice.workload]}: {choice.workload}", ""]
        if choice.gains:
            without = {(r.depth, r.test): r for r in choice.without_flag}
            lines += ["| depth | test | defaults t/s | without the flag t/s | gain | rebuilt t/s | gain |",
                      "|---:|---|---:|---:|---:|---:|---:|"]
            for r in choice.gains:
                w = without.get((r.depth, r.test))
                alone = f"{w.tuned:.1f} | {w.gain:.3f}×" if w else "(the defaults) | 1.000×"
                lines.append(f"| {r.depth} | {r.test} | {r.defaults:.1f} | {alone} | {r.tuned:.1f} | {r.gain:.3f}× |")
            lines.append("")
        if choice.kept:
            lines += [f"`{args}` with " + (", ".join(f"{k} {b} → {a}" for k, (a, b) in differences(
                choice.settings, target.defaults).items()) or "the defaults") + f": {choice.kept}.", ""]
            continue
        kwargs = ", ".join(f"{name}={value}" for name, value in choice.llama_kwargs.items())
        lines += ["Build with these CMake arguments added, and pass these `Llama(...)` arguments:", "", "```bash",
                  f'CMAKE_ARGS="$CMAKE_ARGS {args}" pip install --no-binary llama-cpp-python llama-cpp-python',
                  "```", "", "```python", "import llama_cpp",
                  f"llm = llama_cpp.Llama(model_path={result.model_path!r}, {kwargs})", "```", ""]
        lines += [f"Environment: {' '.join(f'{k}={v}' for k, v in choice.env.items())}.", ""] if choice.env else []
    return lines
