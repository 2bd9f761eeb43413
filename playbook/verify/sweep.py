"""The throughput sweep: which layer counts, one point per child, the CSV, the plot, and the
yardsticks it is read against (llama-bench on the same build, the memory-bandwidth limit)."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playbook.verify.launcher import ChildOutcome
from playbook.verify.settings import BenchSettings, differences
from playbook.verify.yardsticks import LlamaBench

# The binding over the same library must measure what llama-bench measures, within this band.
FAIR_RATIO = (0.97, 1.03)


@dataclass
class SweepPoint:
    n_gpu_layers: int
    status: str
    offloaded_layers: int | None = None
    pp_tokens_per_s: float | None = None
    pp_stdev: float | None = None
    tg_tokens_per_s: float | None = None
    tg_stdev: float | None = None
    load_s: float | None = None
    bench_pp_tokens_per_s: float | None = None  # llama-bench on the same model and layer count
    bench_tg_tokens_per_s: float | None = None
    pp_ratio: float | None = None  # ours / llama-bench
    tg_ratio: float | None = None
    tg_bandwidth_fraction: float | None = None  # of the memory-bandwidth limit, at full offload
    tg_overhead_ms_per_token: float | None = None  # our time per generated token minus llama-bench's
    gpu_memory_mib: float | None = None
    # Means over the repetitions, compared with llama-bench's avg_ts (also a mean of per-repetition rates).
    pp_mean: float | None = None
    tg_mean: float | None = None
    bench_pp_stdev: float | None = None
    bench_tg_stdev: float | None = None
    ratio_note: str = ""  # why a ratio lies outside FAIR_RATIO, from this run's own numbers
    # With interleaved pairs (verify.yardstick_pairs): the ratios are the pairs' medians; these say how they spread.
    pairs: int | None = None
    pp_ratio_range: str = ""  # the lowest and highest pair's ratio
    tg_ratio_range: str = ""
    pp_spread_between_processes: str = ""  # (slowest - fastest) / median over the pairs, each side
    tg_spread_between_processes: str = ""
    # The settings both the binding and llama-bench ran with (playbook.verify.settings.BenchSettings).
    threads: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: str = ""
    type_k: str = ""
    type_v: str = ""
    offload_kqv: bool | None = None
    load_mode: str = ""
    poll: int | str | None = None  # the CPU thread pool's polling; "none": no pool attached
    env: str = ""
    pp_n_ctx: int | None = None
    tg_n_ctx: int | None = None


def layer_counts(n_layer: int, requested: list[int], gpu_offload: bool, points: int = 5) -> list[int]:
    """0, a few steps between, and all layers (n_layer + 1 also moves the output layer to the GPU)."""
    if not gpu_offload:
        return [0]
    if requested:
        return sorted(set(requested))
    full = n_layer + 1
    steps = max(2, points)
    return sorted({round(i * full / (steps - 1)) for i in range(steps)})


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def sweep_point(outcome: ChildOutcome, n_gpu_layers: int, settings: BenchSettings | None = None) -> SweepPoint:
    point = SweepPoint(n_gpu_layers, outcome.status, outcome.offloaded_layers, gpu_memory_mib=outcome.gpu_memory_mib,
                       **(settings.csv_fields() if settings else {}))  # type: ignore[arg-type]
    if outcome.result:
        pp, tg = outcome.result["pp"], outcome.result["tg"]
        point.pp_tokens_per_s, point.pp_stdev = pp["tokens_per_s_median"], pp["tokens_per_s_stdev"]
        point.tg_tokens_per_s, point.tg_stdev = tg["tokens_per_s_median"], tg["tokens_per_s_stdev"]
        point.pp_mean, point.tg_mean = pp.get("tokens_per_s_mean"), tg.get("tokens_per_s_mean")
        point.pp_n_ctx, point.tg_n_ctx = pp.get("n_ctx"), tg.get("n_ctx")
        point.load_s = outcome.result["load_s"]
    return point


def write_sweep_csv(points: list[SweepPoint], path: Path) -> Path:
    import csv
    import dataclasses

    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in dataclasses.fields(SweepPoint)])
        writer.writeheader()
        for point in points:
            writer.writerow(dataclasses.asdict(point))
    return path


def compare_with_yardsticks(points: list[SweepPoint], llama_bench: LlamaBench | None, tg_limit: float | None,
                            full_offload: int, settings: BenchSettings | None = None) -> None:
    """Fill each point's llama-bench numbers, ratios, a note for every ratio outside :data:`FAIR_RATIO`, and the
    share of the bandwidth limit ``tg_limit``. With interleaved pairs the ratio is their median; without, the
    sweep's mean against llama-bench's one run."""
    for point in points:
        if llama_bench and llama_bench.ok:
            notes = []
            for test in ("pp", "tg"):
                note = (_compare_paired(point, test, llama_bench, settings) if llama_bench.pairs
                        else _compare_once(point, test, llama_bench, settings))
                notes += [note] if note else []
            point.ratio_note = "; ".join(notes)
        if tg_limit and point.n_gpu_layers >= full_offload and point.tg_tokens_per_s:
            point.tg_bandwidth_fraction = point.tg_tokens_per_s / tg_limit


def _compare_once(point: SweepPoint, test: str, llama_bench: LlamaBench, settings: BenchSettings | None) -> str:
    bench = llama_bench.point(test, point.n_gpu_layers)
    ours = getattr(point, f"{test}_mean") or getattr(point, f"{test}_tokens_per_s")
    if bench is None or not ours:
        return ""
    setattr(point, f"bench_{test}_tokens_per_s", bench.tokens_per_s)
    setattr(point, f"bench_{test}_stdev", bench.stdev)
    ratio = ours / bench.tokens_per_s
    setattr(point, f"{test}_ratio", ratio)
    if test == "tg":
        point.tg_overhead_ms_per_token = 1000 / ours - 1000 / bench.tokens_per_s
    return explain_ratio(test, ratio, ours, getattr(point, f"{test}_stdev"), bench.tokens_per_s, bench.stdev,
                         settings, llama_bench.settings)


def _compare_paired(point: SweepPoint, test: str, llama_bench: LlamaBench, settings: BenchSettings | None) -> str:
    row = llama_bench.paired(test, point.n_gpu_layers)
    if row is None or row.median_ratio is None:
        return ""
    ratio, (low, high) = row.median_ratio, row.ratio_range or (0.0, 0.0)
    bench_rate, ours = statistics.median(row.bench), statistics.median(row.binding)
    setattr(point, f"bench_{test}_tokens_per_s", bench_rate)
    setattr(point, f"{test}_ratio", ratio)
    setattr(point, f"{test}_ratio_range", f"{low:.3f}-{high:.3f}")
    setattr(point, f"{test}_spread_between_processes",
            f"binding {_percent(row.binding_spread)}, llama-bench {_percent(row.bench_spread)}")
    point.pairs = len(row.ratios)
    if test == "tg":
        point.tg_overhead_ms_per_token = 1000 / ours - 1000 / bench_rate
    return explain_paired_ratio(test, ratio, low, high, len(row.ratios), settings, llama_bench.settings)


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def explain_ratio(test: str, ratio: float, ours: float, our_stdev: float | None, bench: float,
                  bench_stdev: float | None, ours_settings: BenchSettings | None,
                  bench_settings: BenchSettings | None) -> str:
    """Why ``ratio`` (the binding over llama-bench) lies outside :data:`FAIR_RATIO`, from the numbers at
    hand; "" inside it. Settings that differed come first, then the two measurements' own spread."""
    low, high = FAIR_RATIO
    if low <= ratio <= high:
        return ""
    if ours_settings and bench_settings and (changed := differences(ours_settings, bench_settings)):
        listed = ", ".join(f"{name} {a} vs {b}" for name, (a, b) in changed.items())
        return f"{test} {ratio:.3f}: the settings differed ({listed})"
    spread = math.hypot((our_stdev or 0) / ours, (bench_stdev or 0) / bench)
    if abs(ratio - 1) <= 2 * spread:
        return (f"{test} {ratio:.3f}: within the two measurements' spread (±{2 * spread:.1%} at two standard "
                f"deviations of the repetitions); more repetitions narrow it")
    return (f"{test} {ratio:.3f}: identical settings, {abs(ratio - 1) - 2 * spread:.1%} beyond two standard deviations "
            "of the repetitions: not explained by this run's numbers")


def explain_paired_ratio(test: str, ratio: float, low: float, high: float, pairs: int,
                         ours_settings: BenchSettings | None, bench_settings: BenchSettings | None) -> str:
    """Why the pairs' median ``ratio`` lies outside :data:`FAIR_RATIO`; "" inside it. A median outside the band
    while single pairs fall on both sides of 1 is not a difference the pairs can show: it is named as such,
    never as agreement. Every pair on one side, with identical settings, is not explained."""
    fair_low, fair_high = FAIR_RATIO
    if fair_low <= ratio <= fair_high:
        return ""
    if ours_settings and bench_settings and (changed := differences(ours_settings, bench_settings)):
        listed = ", ".join(f"{name} {a} vs {b}" for name, (a, b) in changed.items())
        return f"{test} {ratio:.3f}: the settings differed ({listed})"
    if low <= 1.0 <= high:
        return (f"{test} {ratio:.3f} (median of {pairs} pairs): single pairs range {low:.3f}-{high:.3f}, on both "
                "sides of 1: the variation between processes is larger than the gap; more pairs narrow it")
    return (f"{test} {ratio:.3f} (median of {pairs} pairs): every pair {low:.3f}-{high:.3f} on one side, identical "
            "settings: not explained by this run's numbers")


def gpu_bandwidth_gb_per_s(bus_width_bits: int | None, memory_clock_mhz: int | None) -> float | None:
    """Peak memory bandwidth from NVML's figures: two transfers per clock over the bus."""
    if not bus_width_bits or not memory_clock_mhz:
        return None
    return 2 * memory_clock_mhz * 1e6 * bus_width_bits / 8 / 1e9


def plot_scale(points: list[SweepPoint], asked: str = "auto") -> str:
    """``log`` where a measured curve spans more than a decade (a flat line on a linear axis), unless asked."""
    if asked != "auto":
        return asked
    good = [p for p in points if p.status == "ok"]
    for attr in ("pp_tokens_per_s", "tg_tokens_per_s"):
        rates = [getattr(p, attr) for p in good if getattr(p, attr)]
        if rates and max(rates) / min(rates) > 10:
            return "log"
    return "linear"


def plot_description(points: list[SweepPoint], gpu_offload: bool = True) -> str:
    """What the throughput plot shows, in words (its alt text)."""
    good = sorted((p for p in points if p.status == "ok"), key=lambda p: p.n_gpu_layers)
    failed = [f"{p.status} at {p.n_gpu_layers} layers" for p in points if p.status != "ok"]
    if not good:
        return "Throughput plot: no layer count was measured" + (f" ({', '.join(failed)})" if failed else "")
    if not gpu_offload or len(good) == 1:
        only = good[0]
        where = "CPU-only build" if not gpu_offload else f"{only.n_gpu_layers} layers offloaded"
        text = (f"Throughput, {where}: prompt processing {only.pp_tokens_per_s:.1f} tokens/s, "
                f"token generation {only.tg_tokens_per_s:.1f} tokens/s")
    else:
        first, last = good[0], good[-1]
        text = (f"Throughput by layers offloaded to the GPU: token generation from {first.tg_tokens_per_s:.1f} "
                f"tokens/s at {first.n_gpu_layers} layers to {last.tg_tokens_per_s:.1f} at {last.n_gpu_layers}; "
                f"prompt processing from {first.pp_tokens_per_s:.1f} to {last.pp_tokens_per_s:.1f} tokens/s")
    return text + (f"; {', '.join(failed)}" if failed else "")


def plot_throughput(points: list[SweepPoint], title: str, paths: list[Path], tg_limit: float | None = None,
                    gpu_offload: bool = True, scale: str = "auto") -> list[Path]:
    """Tokens/s against offloaded layers, prompt processing and generation side by side, saved to each of
    ``paths`` (the format from its suffix); for a CPU-only build, one bar each (nothing to sweep)."""
    if gpu_offload:
        return save_side_by_side(title, paths, lambda axes: _plot_sweep(axes, points, tg_limit, plot_scale(points, scale)))
    return save_side_by_side(f"CPU-only build · {title}", paths, lambda axes: _plot_cpu_bars(axes, points))


def save_side_by_side(title: str, paths: list[Path], draw: Callable[[Any], None]) -> list[Path]:
    """A figure of two axes side by side (prompt processing, generation) that ``draw`` fills, saved to each of
    ``paths`` (the format from its suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    draw(axes)
    fig.suptitle(title)
    fig.tight_layout()
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths


def _plot_sweep(axes, points: list[SweepPoint], tg_limit: float | None, scale: str) -> None:
    from matplotlib.ticker import MaxNLocator

    good = [p for p in points if p.status == "ok"]
    for ax, attr, label in ((axes[0], "pp", "prompt processing"), (axes[1], "tg", "token generation")):
        xs = [p.n_gpu_layers for p in good]
        ys = [getattr(p, f"{attr}_tokens_per_s") for p in good]
        errs = [getattr(p, f"{attr}_stdev") or 0.0 for p in good]
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label="llama-cpp-python (low-level API)")
        bench = [(p.n_gpu_layers, getattr(p, f"bench_{attr}_tokens_per_s")) for p in good]
        if any(rate for _, rate in bench):
            ax.plot([x for x, r in bench if r], [r for _, r in bench if r], "k--", marker="x",
                    label="llama-bench, same build")
        if attr == "tg" and tg_limit:
            ax.axhline(tg_limit, color="gray", linestyle=":", label=f"memory-bandwidth limit ({tg_limit:.0f} t/s)")
        for bad in (p for p in points if p.status != "ok"):
            ax.axvline(bad.n_gpu_layers, color="red", alpha=0.4, linestyle=":")
            ax.annotate(bad.status, (bad.n_gpu_layers, 0), color="red", rotation=90, va="bottom")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if len({p.n_gpu_layers for p in points}) == 1:  # one point: a readable axis around it
            ax.set_xlim(points[0].n_gpu_layers - 1, points[0].n_gpu_layers + 1)
        ax.set_xlabel("layers offloaded to the GPU (n_gpu_layers)")
        ax.set_ylabel("tokens/s" + (" (log scale)" if scale == "log" else ""))
        ax.set_title(label)
        ax.grid(alpha=0.3, which="both" if scale == "log" else "major")
        if scale == "log":
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)


def _plot_cpu_bars(axes, points: list[SweepPoint]) -> None:
    point = next((p for p in points if p.status == "ok"), None)
    for ax, attr, label in ((axes[0], "pp", "prompt processing"), (axes[1], "tg", "token generation")):
        ax.set_title(label)
        ax.set_ylabel("tokens/s")
        ax.set_xticks([])
        if point is None:
            status = points[0].status if points else "not measured"
            ax.text(0.5, 0.5, status, ha="center", va="center", color="red", transform=ax.transAxes)
            continue
        rate, stdev = getattr(point, f"{attr}_tokens_per_s"), getattr(point, f"{attr}_stdev")
        ours = ax.bar([0], [rate], yerr=[stdev or 0], capsize=6, width=0.5,
                      label="llama-cpp-python, all layers on the CPU")
        bench = getattr(point, f"bench_{attr}_tokens_per_s")
        if bench:
            ax.bar([0.6], [bench], width=0.5, color="gray", label="llama-bench, same build")
        ax.bar_label(ours, fmt="%.1f")
        ax.set_xlim(-0.6, 1.2 if bench else 0.6)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
