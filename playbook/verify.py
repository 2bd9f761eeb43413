"""Verify: install the wheel in isolation, load a GGUF on the GPU, check it, measure it.

Everything that touches ``llama_cpp`` runs in a child process (``playbook/child.py``) with a
watchdog: a crash or a hang is recorded as a finding and the sweep goes on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from playbook.bench import LlamaBench
from playbook.diagnose import diagnose_text
from playbook.dll_directories import DLL_DIRECTORIES_VARIABLE  # read by the children before llama_cpp
from playbook.errors import PlaybookError
from playbook.params import ModelParams, Params
from playbook.server_check import ServerCheck, check_server
from playbook.source import sha256_of

CHILD_SCRIPT = Path(__file__).with_name("child.py")
SYMBOLS_SCRIPT = Path(__file__).with_name("symbols_child.py")
LIB_PATH_VARIABLE = "LLAMA_CPP_LIB_PATH"  # llama-cpp-python 0.3.36 loads libllama from there when set
RESULT_PREFIX = "PLAYBOOK_RESULT "
MTMD_SYMBOL = "llama_cpp.mtmd_cpp.mtmd_init_from_file"  # loads libmtmd: checked when the plan built it
VOCAB_NAME = "ggml-vocab-llama-spm.gguf"
OFFLOAD_LINE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# llama.cpp's own account of device memory: model weights, KV cache, compute and output buffers.
GPU_BUFFER_LINE = re.compile(r"\b(?:CUDA|Metal|Vulkan|ROCm)\d* (?:model|KV|compute|output) buffer size =\s+([\d.]+) MiB")


@dataclass
class ChildOutcome:
    """What one child process did: ``status`` is ok, error, crash or hang."""

    status: str
    returncode: int | None
    duration_s: float
    log_file: str
    result: dict[str, Any] | None = None
    signal_name: str = ""
    error_tail: str = ""
    findings: list[dict[str, Any]] = field(default_factory=list)
    offloaded_layers: int | None = None
    offloadable_layers: int | None = None
    gpu_memory_mib: float | None = None


@dataclass
class Agreement:
    positions: int
    relative_error: float
    top1_agreement: float
    max_relative_error: float
    min_top1_agreement: float
    ok: bool
    top1_in_cpu_top5: float = 0.0  # near-ties in random-weight models swap places; this shows it


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


@dataclass
class VerifyResult:
    ok: bool
    wheel: str
    site_dir: str
    probe: ChildOutcome
    model_path: str
    model: dict[str, Any]
    threads: int
    layer_counts: list[int]
    points: list[SweepPoint] = field(default_factory=list)
    agreement: Agreement | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    csv_file: str = ""
    plot_files: list[str] = field(default_factory=list)
    summary: str = ""
    llama_bench: LlamaBench | None = None
    gpu_bandwidth_gb_per_s: float | None = None
    tg_limit_tokens_per_s: float | None = None  # bandwidth / model bytes: no decoder can beat it
    library_file: str | None = None  # the llama.cpp library the binding loaded (llama_cpp.llama_cpp._lib)
    runtime_env: dict[str, str] = field(default_factory=dict)  # the plan's variables every child got
    dll_directories: list[str] = field(default_factory=list)  # passed to child.py (os.add_dll_directory)
    extras: list[str] = field(default_factory=list)  # installed with the wheel: llama-cpp-python[extras]
    server: ServerCheck | None = None  # python -m llama_cpp.server, when the plan has the server extra


def install_wheel(wheel: Path, site_dir: Path, python: str = sys.executable, extras: list[str] | None = None,
                  find_links: str = "") -> subprocess.CompletedProcess[str]:
    """Install the wheel alone into ``site_dir`` (its dependencies come from the playbook's environment).
    With ``extras`` it is installed as ``wheel[extras]`` with its dependencies, from the package index
    (or only from ``find_links`` when given): the extras' packages are not in the playbook's environment."""
    if site_dir.exists():
        shutil.rmtree(site_dir)
    args = [python, "-m", "pip", "install", "--no-compile", "--target", str(site_dir)]
    if not extras:
        args += ["--no-deps", "--no-index", str(wheel)]
    else:
        if find_links:
            args += ["--no-index", "--find-links", find_links]
        args.append(f"{wheel.resolve()}[{','.join(extras)}]")
    return subprocess.run(args, check=False, capture_output=True, text=True)


def plan_child_env(runtime_env: dict[str, str] | None = None, dll_directories: list[str] | None = None) -> dict[str, str]:
    """The variables the plan says the built package needs when imported (``runtime_env``, e.g.
    LLAMA_CPP_LIB_PATH), and its DLL folders for child.py's ``os.add_dll_directory``."""
    env = dict(runtime_env or {})
    if dll_directories:
        env[DLL_DIRECTORIES_VARIABLE] = os.pathsep.join(dll_directories)
    return env


def child_env(site_dir: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The wheel's folder first; an inherited PYTHONPATH after it, since the wheel's own
    dependencies (numpy, diskcache, jinja2) may live there on an offline machine. ``extra_env``
    (from :func:`plan_child_env`) goes on top."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site_dir), os.environ.get("PYTHONPATH", "")]))
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault prints the Python stack to the archived log
    return env


def run_child(
    args: list[str],
    site_dir: Path,
    log_file: Path,
    timeout_s: float,
    python: str = sys.executable,
    script: Path = CHILD_SCRIPT,
    expected: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> ChildOutcome:
    """Run ``script args`` from an empty folder; a crash or a hang becomes a finding.
    ``expected`` names findings that are no fault here (``offloaded 0/N`` when asked for 0 layers)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="playbook-child-") as clean_dir, log_file.open("w") as log:
        log.write(f"playbook: {python} {script.name} {' '.join(args)}\n")
        log.flush()
        proc = subprocess.Popen(
            [python, str(script), *args],
            cwd=clean_dir,
            env=child_env(site_dir, extra_env),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
            hung = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            hung = True
        duration = time.monotonic() - started
        log.write(stdout)
        log.write("\n")  # a crashing child leaves its last stderr line unterminated
        if hung:
            log.write(f"playbook: watchdog: no result within {timeout_s:.0f} s; the child was killed\n")
        elif proc.returncode < 0:
            log.write(f"playbook: child died by signal {signal.Signals(-proc.returncode).name}\n")
    text = log_file.read_text(errors="replace")
    result = _result_line(stdout)
    offload = OFFLOAD_LINE.findall(text)
    if hung:
        status = "hang"
    elif proc.returncode < 0:
        status = "crash"
    elif proc.returncode != 0 or result is None:
        status = "error"
    else:
        status = "ok"
    found = diagnose_text(text, stage="any") if status != "ok" else []
    findings = [f.to_dict() for f in found if f.id not in expected]
    return ChildOutcome(
        status=status,
        returncode=proc.returncode,
        duration_s=round(duration, 2),
        log_file=log_file.name,
        result=result,
        signal_name=signal.Signals(-proc.returncode).name if proc.returncode and proc.returncode < 0 else "",
        error_tail="\n".join(text.strip().splitlines()[-15:]) if status != "ok" else "",
        findings=findings,
        offloaded_layers=int(offload[-1][0]) if offload else None,
        offloadable_layers=int(offload[-1][1]) if offload else None,
        gpu_memory_mib=gpu_memory_mib(text),
    )


def gpu_memory_mib(log_text: str) -> float | None:
    """Device memory llama.cpp reports allocating in a child's log; None when it used no GPU."""
    sizes = [float(size) for size in GPU_BUFFER_LINE.findall(log_text)]
    return round(sum(sizes), 2) if sizes else None


def _result_line(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    return None


def layer_counts(n_layer: int, requested: list[int], gpu_offload: bool, points: int = 5) -> list[int]:
    """0, a few steps between, and all layers (n_layer + 1 also moves the output layer to the GPU)."""
    if not gpu_offload:
        return [0]
    if requested:
        return sorted(set(requested))
    full = n_layer + 1
    steps = max(2, points)
    return sorted({round(i * full / (steps - 1)) for i in range(steps)})


@lru_cache(maxsize=1)
def tolerances() -> dict[str, dict[str, float]]:
    text = resources.files("playbook.knowledge").joinpath("tolerances.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["tolerances"]


def compare_logits(cpu_file: Path, gpu_file: Path, n_vocab: int, quant: str) -> Agreement:
    import numpy as np  # the parent never loads llama_cpp, so numpy is safe here

    cpu = np.fromfile(cpu_file, dtype=np.float32).reshape(-1, n_vocab).astype(np.float64)
    gpu = np.fromfile(gpu_file, dtype=np.float32).reshape(-1, n_vocab).astype(np.float64)
    rel = float(np.linalg.norm(gpu - cpu) / max(np.linalg.norm(cpu), 1e-30))
    top1 = float(np.mean(cpu.argmax(axis=1) == gpu.argmax(axis=1)))
    cpu_top5 = np.argsort(cpu, axis=1)[:, -5:]
    in_top5 = float(np.mean([g in row for g, row in zip(gpu.argmax(axis=1), cpu_top5)]))
    limits = tolerances().get(quant, tolerances()["default"])
    ok = bool(np.isfinite(gpu).all()) and rel <= limits["relative_error"] and top1 >= limits["top1_agreement"]
    return Agreement(cpu.shape[0], rel, top1, limits["relative_error"], limits["top1_agreement"], ok, in_top5)


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def sweep_point(outcome: ChildOutcome, n_gpu_layers: int) -> SweepPoint:
    point = SweepPoint(n_gpu_layers, outcome.status, outcome.offloaded_layers, gpu_memory_mib=outcome.gpu_memory_mib)
    if outcome.result:
        point.pp_tokens_per_s = outcome.result["pp"]["tokens_per_s_median"]
        point.pp_stdev = outcome.result["pp"]["tokens_per_s_stdev"]
        point.tg_tokens_per_s = outcome.result["tg"]["tokens_per_s_median"]
        point.tg_stdev = outcome.result["tg"]["tokens_per_s_stdev"]
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


def compare_with_yardsticks(result: VerifyResult, full_offload: int) -> None:
    """Fill each point's llama-bench numbers, ratios and share of the bandwidth limit."""
    for point in result.points:
        if result.llama_bench and result.llama_bench.ok:
            point.bench_pp_tokens_per_s = result.llama_bench.rate("pp", point.n_gpu_layers)
            point.bench_tg_tokens_per_s = result.llama_bench.rate("tg", point.n_gpu_layers)
            if point.pp_tokens_per_s and point.bench_pp_tokens_per_s:
                point.pp_ratio = point.pp_tokens_per_s / point.bench_pp_tokens_per_s
            if point.tg_tokens_per_s and point.bench_tg_tokens_per_s:
                point.tg_ratio = point.tg_tokens_per_s / point.bench_tg_tokens_per_s
                point.tg_overhead_ms_per_token = 1000 / point.tg_tokens_per_s - 1000 / point.bench_tg_tokens_per_s
        if result.tg_limit_tokens_per_s and point.n_gpu_layers >= full_offload and point.tg_tokens_per_s:
            point.tg_bandwidth_fraction = point.tg_tokens_per_s / result.tg_limit_tokens_per_s


def gpu_bandwidth_gb_per_s(bus_width_bits: int | None, memory_clock_mhz: int | None) -> float | None:
    """Peak memory bandwidth from NVML's figures: two transfers per clock over the bus."""
    if not bus_width_bits or not memory_clock_mhz:
        return None
    return 2 * memory_clock_mhz * 1e6 * bus_width_bits / 8 / 1e9


def plot_throughput(points: list[SweepPoint], title: str, stem: Path, tg_limit: float | None = None) -> list[Path]:
    """Tokens/s against offloaded layers, prompt processing and generation side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    good = [p for p in points if p.status == "ok"]
    for ax, attr, label in ((axes[0], "pp", "prompt processing"), (axes[1], "tg", "token generation")):
        xs = [p.n_gpu_layers for p in good]
        ys = [getattr(p, f"{attr}_tokens_per_s") for p in good]
        errs = [getattr(p, f"{attr}_stdev") for p in good]
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
        ax.set_xlabel("layers offloaded to the GPU (n_gpu_layers)")
        ax.set_ylabel("tokens/s")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths


def vocab_from_source(source_path: Path, cache_dir: Path) -> Path:
    """The llama-spm vocabulary GGUF shipped in the llama.cpp source: a tree, or inside the sdist."""
    import tarfile

    from playbook.model import find_vocab_gguf

    if source_path.is_dir():
        return find_vocab_gguf(source_path)
    target = cache_dir / "vocab" / VOCAB_NAME
    if not target.is_file():
        with tarfile.open(source_path) as sdist:
            member = next((m for m in sdist.getmembers() if m.name.endswith(f"vendor/llama.cpp/models/{VOCAB_NAME}")), None)
            if member is None:
                raise PlaybookError(f"{source_path} has no vendor/llama.cpp/models/{VOCAB_NAME}; set model.path")
            target.parent.mkdir(parents=True, exist_ok=True)
            extracted = sdist.extractfile(member)
            assert extracted is not None
            target.write_bytes(extracted.read())
    return target


def prepare_model(model: ModelParams, source_path: Path, cache_dir: Path) -> Path:
    """The user's GGUF, or a synthetic one written once per shape, quant and seed and then reused."""
    from playbook.model import ModelSpec, write_synthetic_gguf

    if model.path:
        return Path(model.path).expanduser().resolve()
    path = cache_dir / "models" / f"synthetic-llama-{model.shape}-{model.quant}-seed{model.seed}.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        write_synthetic_gguf(partial, ModelSpec(model.shape, model.quant, model.seed), vocab_from_source(source_path, cache_dir))
        partial.replace(path)
    return path


def run_verify(
    run_dir: Path,
    wheel: Path,
    params: Params,
    source_path: Path,
    expect_gpu: bool,
    cache_dir: Path,
    attempt: int = 1,
    python: str = sys.executable,
    log: Callable[[str], None] = print,
    yardstick: Callable[[Path, list[int], int], LlamaBench] | None = None,
    gpu_bandwidth_gb_per_s: float | None = None,
    runtime_env: dict[str, str] | None = None,
    dll_directories: list[str] | None = None,
    extras: list[str] | None = None,
    find_links: str = "",
    multimodal: bool = False,
) -> VerifyResult:
    """The whole verify step; every problem ends up in ``findings``, nothing raises past a bad wheel.
    Its files carry the build attempt in their names, so a retry never overwrites them.

    ``runtime_env`` and ``dll_directories`` (the plan's) reach every child; ``extras`` are installed
    with the wheel, and the ``server`` extra is checked by starting the server on the model. With
    ``multimodal`` (the plan built libmtmd) the multimodal bindings must load too."""
    from playbook.model import describe_gguf

    logs = run_dir / "verify-logs" / f"attempt-{attempt}"
    logs.mkdir(parents=True, exist_ok=True)
    extras = list(extras or [])
    site_dir = cache_dir / "site" / (sha256_of(wheel)[:16] + "".join(f"-{e}" for e in sorted(extras)))
    extra_env = plan_child_env(runtime_env, dll_directories)
    threads = default_threads() if params.verify.threads == "auto" else int(params.verify.threads)
    timeout = params.verify.timeout_s
    findings: list[dict[str, Any]] = []

    if extras:
        log(f"installing {wheel.name}[{','.join(extras)}] with its dependencies into {site_dir}")
    else:
        log(f"installing {wheel.name} alone into {site_dir}")
    installed = install_wheel(wheel, site_dir, python, extras, find_links)
    (logs / "install.log").write_text(installed.stdout + installed.stderr)
    for name, value in extra_env.items():
        log(f"children get {name}={value}")
    probe = run_child(["probe"], site_dir, logs / "probe.log", timeout, python, extra_env=extra_env)
    model_path = prepare_model(params.model, source_path, cache_dir)
    result = VerifyResult(False, wheel.name, str(site_dir), probe, str(model_path), {}, threads, [],
                          runtime_env=dict(runtime_env or {}), dll_directories=list(dll_directories or []),
                          extras=extras)
    if installed.returncode != 0:
        findings.append(_finding("install-failed", "\n".join((installed.stdout + installed.stderr).strip()
                                                             .splitlines()[-15:])))
    if probe.status != "ok":
        result.findings = _unique(findings + (probe.findings or [
            _finding("process-crash" if probe.status == "crash" else "import-failed", probe.error_tail)]))
        result.summary = f"the wheel does not import: {probe.status}"
        return result
    result.library_file = probe.result.get("library")
    log(f"llama.cpp library loaded: {result.library_file}")
    symbols = [*params.verify.required_symbols, *([MTMD_SYMBOL] if multimodal else [])]
    findings += check_required_symbols(site_dir, list(dict.fromkeys(symbols)), python, logs / "symbols.log", timeout,
                                       extra_env=extra_env)
    if not Path(probe.result["module"]).resolve().is_relative_to(site_dir.resolve()):
        line = f"playbook: llama_cpp imported from outside the wheel: {probe.result['module']} (expected under {site_dir})"
        _append_line(logs / "probe.log", line)
        findings.append(_finding("foreign-llama-cpp", line))
    findings += prebuilt_lib_findings(result.library_file, runtime_env or {}, logs / "probe.log")
    gpu_offload = bool(probe.result and probe.result["supports_gpu_offload"])
    log(f"imported llama_cpp {probe.result['version']}; GPU offload supported: {gpu_offload}")
    if expect_gpu and not gpu_offload:
        findings.append(_finding("cpu-only-build", "llama_supports_gpu_offload() returned False"))

    result.model = describe_gguf(model_path)
    n_layer = int(result.model["n_layer"])
    result.layer_counts = layer_counts(n_layer, params.verify.n_gpu_layers, gpu_offload, params.verify.sweep_points)
    if gpu_offload:
        result.agreement = _check_agreement(
            model_path, n_layer, threads, params, site_dir, logs, timeout, python, findings, log, extra_env
        )

    for ngl in result.layer_counts:
        log(f"measuring n_gpu_layers={ngl}: pp{params.verify.prompt_tokens}, tg{params.verify.gen_tokens}, "
            f"{params.verify.repetitions} repetitions, {threads} threads")
        args = ["bench", str(model_path), str(ngl), str(threads), str(params.verify.prompt_tokens),
                str(params.verify.gen_tokens), str(params.verify.repetitions)]
        expected = ("cpu-only-build",) if ngl == 0 else ()
        outcome = run_child(args, site_dir, logs / f"bench-ngl-{ngl}.log", timeout, python, expected=expected,
                            extra_env=extra_env)
        point = sweep_point(outcome, ngl)
        result.points.append(point)
        findings += outcome.findings
        log(f"  {point.status}: pp {point.pp_tokens_per_s or 0:.1f} t/s, tg {point.tg_tokens_per_s or 0:.1f} t/s, "
            f"offloaded {point.offloaded_layers}")
        if ngl == max(result.layer_counts) and expect_gpu and ngl > 0 and outcome.status == "ok" and not point.offloaded_layers:
            findings.append(_finding("cpu-only-build", f"offloaded {point.offloaded_layers or 0}/{n_layer + 1} layers"))

    if "server" in extras:
        ngl = n_layer + 1 if gpu_offload else 0
        log(f"starting python -m llama_cpp.server on {model_path.name} with n_gpu_layers={ngl}")
        result.server = check_server(model_path, child_env(site_dir, extra_env), logs / "server.log", ngl, python,
                                     startup_timeout_s=timeout, request_timeout_s=timeout)
        server = result.server
        log(f"  server: {server.status}, up in {server.startup_s} s, /v1/completions HTTP {server.http_status} in "
            f"{server.latency_s} s, {server.text_length} characters" + (f": {server.error}" if server.error else ""))
        if not server.ok:
            findings.append(_server_failed(server))

    if yardstick is not None and any(p.status == "ok" for p in result.points):
        log("building llama-bench from the same tree and CMake arguments, then measuring the same points")
        try:
            result.llama_bench = yardstick(model_path, result.layer_counts, threads)
        except Exception as error:  # the yardstick is optional: verify's own results must survive it
            result.llama_bench = LlamaBench(False, error=f"{type(error).__name__}: {error}")
        log(f"  llama-bench: {'ok' if result.llama_bench.ok else result.llama_bench.error}, built in "
            f"{result.llama_bench.build_s:.0f} s, ran in {result.llama_bench.run_s:.0f} s")
    if gpu_offload and gpu_bandwidth_gb_per_s:
        result.gpu_bandwidth_gb_per_s = gpu_bandwidth_gb_per_s
        result.tg_limit_tokens_per_s = gpu_bandwidth_gb_per_s * 1e9 / int(result.model["file_size_bytes"])
    compare_with_yardsticks(result, n_layer + 1)
    result.csv_file = write_sweep_csv(result.points, run_dir / f"throughput-attempt-{attempt}.csv").name
    title = f"{model_path.name} · llama-cpp-python {probe.result['version']} · {threads} threads"
    stem = run_dir / f"throughput-attempt-{attempt}"
    result.plot_files = [p.name for p in plot_throughput(result.points, title, stem, result.tg_limit_tokens_per_s)]
    result.findings = _unique(findings)
    measured = [p for p in result.points if p.status == "ok"]
    agreement_ok = result.agreement is None or result.agreement.ok
    result.ok = bool(measured) and not result.findings and agreement_ok
    result.summary = _summary(result, gpu_offload)
    return result


def check_required_symbols(site_dir: Path, symbols: list[str], python: str = sys.executable,
                           log_file: Path | None = None, timeout_s: float = 120,
                           extra_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One finding per dotted name the installed wheel lacks (verify.required_symbols): the known failure
    when the knowledge base recognises why (``mtmd-not-built``), else ``missing-symbol``."""
    if not symbols:
        return []
    with tempfile.TemporaryDirectory(prefix="playbook-symbols-") as tmp:
        log = log_file or Path(tmp) / "symbols.log"
        outcome = run_child(list(symbols), site_dir, log, timeout_s, python, script=SYMBOLS_SCRIPT, extra_env=extra_env)
    if outcome.status != "ok" or outcome.result is None:
        return [_finding("missing-symbol", f"{name}: the check did not run ({outcome.status}): "
                         f"{outcome.error_tail[-300:]}") for name in symbols]
    findings = []
    for name, reason in outcome.result["missing"].items():
        known = diagnose_text(reason, stage="import")
        findings.append(known[0].to_dict() if known and known[0].id != "shared-library-not-found"
                        else _finding("missing-symbol", f"{name} not found: {reason}"))
    return findings


def _check_agreement(model_path: Path, n_layer: int, threads: int, params: Params, site_dir: Path, logs: Path,
                     timeout: float,
                     python: str, findings: list[dict[str, Any]], log: Callable[[str], None],
                     extra_env: dict[str, str] | None = None) -> Agreement | None:
    positions = params.verify.compare_positions
    with tempfile.TemporaryDirectory(prefix="playbook-logits-") as tmp:
        outcomes = {}
        for name, ngl, op_offload in (("cpu", 0, "0"), ("gpu", n_layer + 1, "1")):
            out = Path(tmp) / f"{name}.f32"
            args = ["logits", str(model_path), str(ngl), str(threads), str(positions), str(out), op_offload]
            expected = ("cpu-only-build",) if ngl == 0 else ()
            outcomes[name] = run_child(args, site_dir, logs / f"logits-{name}.log", timeout, python, expected=expected,
                                       extra_env=extra_env)
            findings += outcomes[name].findings
        if any(o.status != "ok" for o in outcomes.values()):
            log("logits comparison skipped: a child failed (see findings)")
            return None
        n_vocab = int(outcomes["gpu"].result["n_vocab"])
        agreement = compare_logits(Path(tmp) / "cpu.f32", Path(tmp) / "gpu.f32", n_vocab, params.model.quant)
    log(f"GPU vs CPU over {agreement.positions} positions: relative error {agreement.relative_error:.2e} "
        f"(max {agreement.max_relative_error}), top-1 agreement {agreement.top1_agreement:.1%} "
        f"(min {agreement.min_top1_agreement:.0%})")
    if not agreement.ok:
        line = (f"playbook: numeric mismatch: relative error {agreement.relative_error:.3g} "
                f"(at most {agreement.max_relative_error} for {params.model.quant}), top-1 agreement "
                f"{agreement.top1_agreement:.3f} (at least {agreement.min_top1_agreement}) over {agreement.positions} positions")
        _append_line(logs / "logits-gpu.log", line)
        findings.append(_finding("numeric-mismatch", line))
    return agreement


def library_in(library_file: str | None, folder: str) -> bool:
    """Whether the loaded library file lies in ``folder`` (symbolic links resolved on both sides)."""
    if not library_file:
        return False
    return Path(library_file).resolve().parent == Path(folder).expanduser().resolve()


def prebuilt_lib_findings(library_file: str | None, runtime_env: dict[str, str], log_file: Path) -> list[dict[str, Any]]:
    """``prebuilt-lib-not-used`` when the plan points LLAMA_CPP_LIB_PATH at a library folder and the
    binding loaded its library from anywhere else (the line also goes to the probe's log)."""
    prebuilt = runtime_env.get(LIB_PATH_VARIABLE)
    if not prebuilt or library_in(library_file, prebuilt):
        return []
    line = f"playbook: the binding loaded {library_file}, not the prebuilt library in {prebuilt} ({LIB_PATH_VARIABLE})"
    _append_line(log_file, line)
    return [_prebuilt_lib_not_used(line)]


def _prebuilt_lib_not_used(evidence: str) -> dict[str, Any]:
    return {"id": "prebuilt-lib-not-used", "title": "the prebuilt llama.cpp library was not the one loaded",
            "evidence": evidence, "line_number": 0,
            "cause": "llama-cpp-python 0.3.36 loads libllama from $LLAMA_CPP_LIB_PATH when it is set and from its own "
                     "llama_cpp/lib otherwise; the library verify saw loaded came from elsewhere, so the build tested "
                     "is not the one the plan describes",
            "fix": "check build.prebuilt_lib names the folder (or file) of libllama, that LLAMA_CPP_LIB_PATH is set "
                   "where llama_cpp is imported, and that no other llama_cpp shadows the wheel",
            "automatic": False}


def _server_failed(server: ServerCheck) -> dict[str, Any]:
    return {"id": "server-failed", "title": "python -m llama_cpp.server did not answer a completion",
            "evidence": f"{server.status}: {server.error}\n{server.log_tail}", "line_number": 0,
            "cause": "the server extra's packages are missing or broken, the model did not load in the server, or "
                     "the server crashed answering; the server's log (verify-logs/attempt-N/server.log) says which",
            "fix": "read the log tail; install llama-cpp-python[server] into the same environment as the wheel, and "
                   "try the same model through the probe and bench children first",
            "automatic": False}


def _append_line(log_file: Path, line: str) -> None:
    with log_file.open("a") as log:
        log.write(line + "\n")


def _finding(failure_id: str, evidence: str) -> dict[str, Any]:
    """A finding verify makes itself, described from the knowledge base when it knows the id."""
    from playbook.diagnose import load_knowledge_base

    try:
        entry = load_knowledge_base().get(failure_id)
        return {"id": entry.id, "title": entry.title, "evidence": evidence, "line_number": 0,
                "cause": entry.cause, "fix": entry.fix, "automatic": entry.remedy is not None}
    except KeyError:
        return {"id": failure_id, "title": failure_id.replace("-", " "), "evidence": evidence, "line_number": 0,
                "cause": "", "fix": "", "automatic": False}


def _unique(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for finding in findings:
        seen.setdefault(finding["id"], finding)
    return list(seen.values())


def _summary(result: VerifyResult, gpu_offload: bool) -> str:
    ok_points = [p for p in result.points if p.status == "ok"]
    if not ok_points:
        return "no layer count could be measured: see findings"
    best = max(ok_points, key=lambda p: p.tg_tokens_per_s or 0)
    where = "GPU build" if gpu_offload else "CPU-only build"
    return (f"{where}: best token generation {best.tg_tokens_per_s:.1f} t/s at n_gpu_layers={best.n_gpu_layers}; "
            f"prompt processing {best.pp_tokens_per_s:.1f} t/s there")
