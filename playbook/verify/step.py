"""Verify: install the wheel in isolation, load a GGUF on the GPU, check it, measure it.

Everything that touches ``llama_cpp`` runs in a child process (``playbook/children.py``) with a
watchdog: a crash or a hang is recorded as a finding and the sweep goes on. The logit comparison is
``playbook/agreement.py``, the sweep's points, CSV and plot ``playbook/throughput.py``.
"""

from __future__ import annotations

import errno
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.backends import registry
from playbook.errors import PlaybookError
from playbook.files import sha256_of
from playbook.knowledge.failures import Finding, diagnose_text, finding_for, unrecognised
from playbook.params import ModelParams, Params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Layout, Step
from playbook.verify.agreement import Agreement, compare_logits
from playbook.verify.cuda_elf import CudaElf, list_elf
from playbook.verify.launcher import SYMBOLS_SCRIPT, ChildOutcome, child_env, install_wheel, plan_child_env, run_child
from playbook.verify.server_check import ServerCheck, check_server
from playbook.verify.settings import BenchSettings
from playbook.verify.sweep import (
    SweepPoint,
    compare_with_yardsticks,
    default_threads,
    layer_counts,
    plot_throughput,
    sweep_point,
    write_sweep_csv,
)
from playbook.verify.yardsticks import LlamaBench

# No space left, a file past the size limit (ulimit -f), a quota: the write failed for want of room.
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
LIB_PATH_VARIABLE = "LLAMA_CPP_LIB_PATH"  # llama-cpp-python 0.3.36 loads libllama from there when set
MTMD_SYMBOL = "llama_cpp.mtmd_cpp.mtmd_init_from_file"  # loads libmtmd: checked when the plan built it
VOCAB_NAME = "ggml-vocab-llama-spm.gguf"


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
    findings: list[Finding] = field(default_factory=list)
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
    settings: BenchSettings | None = None  # every throughput measurement's, llama-bench's too
    tune: Any = None  # playbook.verify.tune.TuneResult when verify.tune is true
    # A CUDA wheel: the architectures its ggml-cuda library holds machine code for (cuobjdump --list-elf).
    cuda_elf: CudaElf | None = None
    # Why the GPU checks (logits agreement, offloaded layers) did not run; "" when they did.
    gpu_skipped: str = ""


def vocab_from_source(source_path: Path, cache_dir: Path) -> Path:
    """The llama-spm vocabulary GGUF shipped in the llama.cpp source: a tree, or inside the sdist."""
    import tarfile

    from playbook.verify.synthetic_gguf import find_vocab_gguf

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
    from playbook.verify.synthetic_gguf import ModelSpec, write_synthetic_gguf

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
    layout: Layout,
    wheel: Path,
    params: Params,
    source_path: Path,
    expect_gpu: bool,
    cache_dir: Path,
    attempt: int = 1,
    python: str = sys.executable,
    log: Callable[[str], None] = print,
    yardstick: Callable[[Path, list[int], BenchSettings], LlamaBench] | None = None,
    gpu_bandwidth_gb_per_s: float | None = None,
    runtime_env: dict[str, str] | None = None,
    dll_directories: list[str] | None = None,
    extras: list[str] | None = None,
    find_links: str = "",
    multimodal: bool = False,
    gpu_present: bool = True,
    cuda_architectures: str = "",
    cuda_toolkit: str = "",
) -> VerifyResult:
    """The whole verify step; every problem ends up in ``findings``, nothing raises past a bad wheel.
    Its files carry the build attempt in their names, so a retry never overwrites them.

    ``runtime_env`` and ``dll_directories`` (the plan's) reach every child; ``extras`` are installed
    with the wheel, and the ``server`` extra is checked by starting the server on the model. With
    ``multimodal`` (the plan built libmtmd) the multimodal bindings must load too."""
    from playbook.verify.synthetic_gguf import describe_gguf

    logs = layout.verify_logs(attempt)
    logs.mkdir(parents=True, exist_ok=True)
    extras = list(extras or [])
    site_dir = cache_dir / "site" / (sha256_of(wheel)[:16] + "".join(f"-{e}" for e in sorted(extras)))
    extra_env = plan_child_env(runtime_env, dll_directories)
    threads = default_threads() if params.verify.threads == "auto" else int(params.verify.threads)
    settings = bench_settings(params, threads)
    timeout = params.verify.timeout_s
    findings: list[Finding] = []

    if extras:
        log(f"installing {wheel.name}[{','.join(extras)}] with its dependencies into {site_dir}")
    else:
        log(f"installing {wheel.name} alone into {site_dir}")
    installed = install_wheel(wheel, site_dir, python, extras, find_links)
    (logs / "install.log").write_text(installed.stdout + installed.stderr)
    for name, value in extra_env.items():
        log(f"children get {name}={value}")
    probe = run_child(["probe"], site_dir, logs / "probe.log", timeout, python, extra_env=extra_env)
    model_failure: Finding | None = None
    try:
        model_path = prepare_model(params.model, source_path, cache_dir)
    except OSError as error:  # the synthetic model's write: a full disk must not end verify unrecorded
        evidence = f"writing the model: {error}"
        model_path = cache_dir / "models"
        model_failure = (finding_for("disk-full", evidence, stage="load") if error.errno in FULL_DISK_ERRNOS
                         else unrecognised(evidence, "load"))
    result = VerifyResult(False, wheel.name, str(site_dir), probe, str(model_path), {}, threads, [],
                          runtime_env=dict(runtime_env or {}), dll_directories=list(dll_directories or []),
                          extras=extras)
    if model_failure is not None:
        result.findings = _unique(findings + [model_failure])
        result.summary = model_failure.evidence
        return result
    if installed.returncode != 0:
        findings.append(finding_for("install-failed", "\n".join((installed.stdout + installed.stderr).strip()
                                                                .splitlines()[-15:]), stage="install"))
    if probe.status != "ok":
        fallback = (finding_for("process-crash", probe.error_tail, stage="import") if probe.status == "crash"
                    else unrecognised(probe.error_tail, "import"))
        result.findings = _unique(findings + (probe.findings or [fallback]))
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
        findings.append(finding_for("foreign-llama-cpp", line, stage="import"))
    findings += prebuilt_lib_findings(result.library_file, runtime_env or {}, logs / "probe.log")
    if cuda_architectures:
        result.cuda_elf = list_elf(site_dir, cuda_architectures, cuda_toolkit, cache_dir, logs / "cuobjdump.log")
        elf = result.cuda_elf
        log(f"machine code in {Path(elf.library).name or 'the wheel'}: {', '.join(elf.architectures) or 'none'}"
            + (f"; missing {', '.join(elf.missing)}" if elf.missing else "") + (f" ({elf.error})" if elf.error else ""))
    reports_gpu = bool(probe.result and probe.result["supports_gpu_offload"])
    # llama_supports_gpu_offload() asks for a GPU device at run time: False for any wheel on a machine
    # without a GPU. There the wheel's ggml-cuda library, with machine code in it, is what shows a GPU build.
    built_for_gpu = reports_gpu or (not gpu_present and result.cuda_elf is not None
                                    and bool(result.cuda_elf.library))
    log(f"imported llama_cpp {probe.result['version']}; GPU offload supported: {reports_gpu}"
        + ("" if gpu_present else " (no GPU on this machine)"))
    if expect_gpu and not built_for_gpu:
        evidence = ("llama_supports_gpu_offload() returned False" if gpu_present or not cuda_architectures
                    else f"no ggml-cuda library in the wheel ({result.cuda_elf.error if result.cuda_elf else ''})")
        findings.append(finding_for("cpu-only-build", evidence, stage="import"))
    gpu_offload = reports_gpu and gpu_present
    expected_here: tuple[str, ...] = ()
    if built_for_gpu and not gpu_present:
        # Without a GPU (and usually without its driver) the CUDA backend says so when it initialises:
        # "no CUDA-capable device", or cudaErrorInsufficientDriver when libcuda is absent.
        expected_here = ("no-gpu-visible", "cpu-only-build", "driver-too-old")
        result.gpu_skipped = ("no NVIDIA GPU on this machine (detect found none): GPU/CPU logits agreement and the "
                              "offloaded-layer sweep were skipped; the wheel was imported and run on the CPU"
                              + (", and its GPU machine code listed with cuobjdump" if cuda_architectures else ""))
        log(result.gpu_skipped)

    try:
        result.model = describe_gguf(model_path)
    except Exception as error:  # gguf's reader names the damage: truncated, not GGUF, bad header
        evidence = f"gguf_init_from_file: failed to read {model_path}: {type(error).__name__}: {error}"
        result.findings = _unique(findings + [finding_for("model-unreadable", evidence, stage="load")])
        result.summary = f"the model {model_path.name} cannot be read ({type(error).__name__}: {error})"
        return result
    # An architecture the reader does not know has no block count: measure on the CPU only, and let
    # llama.cpp's own loader say what it thinks of the file.
    n_layer = int(result.model["n_layer"]) if result.model.get("n_layer") is not None else 0
    result.layer_counts = layer_counts(n_layer, params.verify.n_gpu_layers, gpu_offload, params.verify.sweep_points)
    if gpu_offload:
        result.agreement = _check_agreement(
            model_path, n_layer, threads, params, site_dir, logs, timeout, python, findings, log, extra_env
        )

    result.settings = settings
    log(f"measurement settings (llama-bench gets the same): {settings.csv_fields()}")
    for ngl in result.layer_counts:
        log(f"measuring n_gpu_layers={ngl}: pp{params.verify.prompt_tokens}, tg{params.verify.gen_tokens}, "
            f"{params.verify.repetitions} repetitions, {threads} threads")
        outcome = run_bench_child(model_path, ngl, settings, params.verify.prompt_tokens, params.verify.gen_tokens,
                                  params.verify.repetitions, site_dir, layout.bench_log(attempt, ngl), timeout,
                                  python, extra_env, expected=expected_here)
        point = sweep_point(outcome, ngl, settings)
        result.points.append(point)
        findings += outcome.findings
        log(f"  {point.status}: pp {point.pp_tokens_per_s or 0:.1f} t/s, tg {point.tg_tokens_per_s or 0:.1f} t/s, "
            f"offloaded {point.offloaded_layers}")
        if ngl == max(result.layer_counts) and expect_gpu and ngl > 0 and outcome.status == "ok" and not point.offloaded_layers:
            findings.append(finding_for("cpu-only-build", f"offloaded {point.offloaded_layers or 0}/{n_layer + 1} layers", stage="load"))

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
            result.llama_bench = yardstick(model_path, result.layer_counts, settings)
        except Exception as error:  # the yardstick is optional: verify's own results must survive it
            result.llama_bench = LlamaBench(False, error=f"{type(error).__name__}: {error}")
        log(f"  llama-bench: {'ok' if result.llama_bench.ok else result.llama_bench.error}, built in "
            f"{result.llama_bench.build_s:.0f} s, ran in {result.llama_bench.run_s:.0f} s")
    if gpu_offload and gpu_bandwidth_gb_per_s:
        result.gpu_bandwidth_gb_per_s = gpu_bandwidth_gb_per_s
        result.tg_limit_tokens_per_s = gpu_bandwidth_gb_per_s * 1e9 / int(result.model["file_size_bytes"])
    compare_with_yardsticks(result.points, result.llama_bench, result.tg_limit_tokens_per_s, n_layer + 1, settings)
    for point in result.points:
        if point.ratio_note:
            log(f"  n_gpu_layers={point.n_gpu_layers} against llama-bench: {point.ratio_note}")
    if params.verify.tune and any(p.status == "ok" for p in result.points):
        result.tune = run_tune(layout, attempt, result, params, model_path, n_layer, gpu_offload, settings, site_dir,
                               timeout, python, extra_env, log)
    result.csv_file = write_sweep_csv(result.points, layout.throughput(attempt, ".csv")).name
    title = f"{model_path.name} · llama-cpp-python {probe.result['version']} · {threads} threads"
    stem = layout.throughput(attempt, "")
    result.plot_files = [p.name for p in plot_throughput(result.points, title, stem, result.tg_limit_tokens_per_s,
                                                         gpu_offload=gpu_offload, scale=params.verify.plot_scale)]
    result.findings = _unique(findings)
    measured = [p for p in result.points if p.status == "ok"]
    agreement_ok = result.agreement is None or result.agreement.ok
    elf_ok = result.cuda_elf is None or result.cuda_elf.ok
    result.ok = bool(measured) and not result.findings and agreement_ok and elf_ok
    result.summary = _summary(result, gpu_offload)
    if result.cuda_elf is not None:
        result.summary += (f"; machine code for {', '.join(result.cuda_elf.architectures) or 'no architecture'}"
                           + (f", missing {', '.join(result.cuda_elf.missing)}" if result.cuda_elf.missing else "")
                           + (f" ({result.cuda_elf.error})" if result.cuda_elf.error else ""))
    if result.gpu_skipped:
        result.summary += "; GPU checks skipped: no GPU on this machine"
    return result


def run_tune(layout: Layout, attempt: int, result: VerifyResult, params: Params, model_path: Path, n_layer: int,
             gpu_offload: bool, settings: BenchSettings, site_dir: Path, timeout: float, python: str,
             extra_env: dict[str, str], log: Callable[[str], None]) -> Any:
    """verify.tune: the search of :mod:`playbook.verify.tune`, each trial a child like the sweep's points;
    writes ``tune-attempt-N.json`` and the report ``tune-attempt-N.md``."""
    from playbook.serialization import write_json
    from playbook.verify.tune import report_markdown, trial_from_child, tune
    from playbook.verify.yardsticks import run_llama_bench

    verify = params.verify
    depths = list(verify.tune_depths)
    logs = layout.verify_logs(attempt)
    counter = iter(range(1, 10_000))

    def measure(candidate: BenchSettings, ngl: int, label: str):  # type: ignore[no-untyped-def]
        log_file = logs / f"tune-ngl-{ngl}-{next(counter):03d}.log"
        outcome = run_bench_child(model_path, ngl, candidate, verify.prompt_tokens, verify.gen_tokens,
                                  verify.repetitions, site_dir, log_file, timeout * len(depths), python, extra_env,
                                  depths)
        trial = trial_from_child(label, ngl, candidate, outcome.status, outcome.result, log_file.name)
        log(f"  {label}: {outcome.status} " + " ".join(
            f"d{d} pp {r['pp']:.1f} tg {r['tg']:.1f}" for d, r in trial.rates.items()))
        return trial

    bench = None
    if result.llama_bench and result.llama_bench.ok and result.llama_bench.binary:
        binary = Path(result.llama_bench.binary)

        def bench(candidate: BenchSettings, ngl: int, bench_depths: list[int]):  # type: ignore[no-untyped-def]
            points, _, error = run_llama_bench(binary, model_path, [ngl], candidate, verify.prompt_tokens,
                                               verify.gen_tokens, verify.repetitions, layout.llama_bench_log(attempt),
                                               timeout * len(bench_depths), bench_depths)
            if error:
                raise RuntimeError(error)
            return points

    tuned = tune(str(model_path), n_layer, gpu_offload, settings.threads, default_threads(), depths,
                 verify.prompt_tokens, verify.gen_tokens, verify.repetitions, measure, verify.gpu_memory_budget,
                 {p.n_gpu_layers: p.gpu_memory_mib for p in result.points if p.status == "ok"}, bench, log)
    report = layout.tune(attempt, ".md")
    report.write_text(report_markdown(tuned), encoding="utf-8")
    tuned.report_file = report.name
    write_json(tuned, layout.tune(attempt, ".json"))
    return tuned


def bench_settings(params: Params, threads: int) -> BenchSettings:
    verify = params.verify
    return BenchSettings(threads=threads, n_batch=verify.n_batch, n_ubatch=verify.n_ubatch, flash_attn=verify.flash_attn,
                         type_k=verify.type_k, type_v=verify.type_v, offload_kqv=verify.offload_kqv,
                         load_mode=verify.load_mode)


def run_bench_child(model_path: Path, ngl: int, settings: BenchSettings, n_prompt: int, n_gen: int, repetitions: int,
                    site_dir: Path, log_file: Path, timeout: float, python: str = sys.executable,
                    extra_env: dict[str, str] | None = None, depths: list[int] | None = None,
                    expected: tuple[str, ...] = ()) -> ChildOutcome:
    """One throughput measurement in a child: ``settings`` go to it as JSON, their variables into its environment.
    ``expected``: finding ids that are no failure here (a GPU-less machine's 'no device')."""
    args = ["bench", str(model_path), str(ngl), str(settings.threads), str(n_prompt), str(n_gen), str(repetitions),
            settings.to_json(), ",".join(map(str, depths or [0]))]
    expected = (("cpu-only-build",) if ngl == 0 else ()) + tuple(expected)
    return run_child(args, site_dir, log_file, timeout, python, expected=expected,
                     extra_env={**(extra_env or {}), **dict(settings.env)})


def check_required_symbols(site_dir: Path, symbols: list[str], python: str = sys.executable,
                           log_file: Path | None = None, timeout_s: float = 120,
                           extra_env: dict[str, str] | None = None) -> list[Finding]:
    """One finding per dotted name the installed wheel lacks (verify.required_symbols): the known failure
    when the knowledge base recognises why (``mtmd-not-built``), else ``missing-symbol``."""
    if not symbols:
        return []
    with tempfile.TemporaryDirectory(prefix="playbook-symbols-") as tmp:
        log = log_file or Path(tmp) / "symbols.log"
        outcome = run_child(list(symbols), site_dir, log, timeout_s, python, script=SYMBOLS_SCRIPT, extra_env=extra_env)
    if outcome.status != "ok" or outcome.result is None:
        return [finding_for("missing-symbol", f"{name}: the check did not run ({outcome.status}): "
                            f"{outcome.error_tail[-300:]}", stage="import") for name in symbols]
    findings = []
    for name, reason in outcome.result["missing"].items():
        known = diagnose_text(reason, stage="import")
        findings.append(known[0] if known and known[0].id != "shared-library-not-found"
                        else finding_for("missing-symbol", f"{name} not found: {reason}", stage="import"))
    return findings


def _check_agreement(model_path: Path, n_layer: int, threads: int, params: Params, site_dir: Path, logs: Path,
                     timeout: float,
                     python: str, findings: list[Finding], log: Callable[[str], None],
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
        findings.append(finding_for("numeric-mismatch", line, stage="run"))
    return agreement


def library_in(library_file: str | None, folder: str) -> bool:
    """Whether the loaded library file lies in ``folder`` (symbolic links resolved on both sides)."""
    if not library_file:
        return False
    return Path(library_file).resolve().parent == Path(folder).expanduser().resolve()


def prebuilt_lib_findings(library_file: str | None, runtime_env: dict[str, str], log_file: Path) -> list[Finding]:
    """``prebuilt-lib-not-used`` when the plan points LLAMA_CPP_LIB_PATH at a library folder and the
    binding loaded its library from anywhere else (the line also goes to the probe's log)."""
    prebuilt = runtime_env.get(LIB_PATH_VARIABLE)
    if not prebuilt or library_in(library_file, prebuilt):
        return []
    line = f"playbook: the binding loaded {library_file}, not the prebuilt library in {prebuilt} ({LIB_PATH_VARIABLE})"
    _append_line(log_file, line)
    return [finding_for("prebuilt-lib-not-used", line, stage="import")]


def _server_failed(server: ServerCheck) -> Finding:
    return finding_for("server-failed", f"{server.status}: {server.error}\n{server.log_tail}", stage="run")


def _append_line(log_file: Path, line: str) -> None:
    with log_file.open("a") as log:
        log.write(line + "\n")


def _unique(findings: list[Finding]) -> list[Finding]:
    seen: dict[str, Finding] = {}
    for finding in findings:
        seen.setdefault(finding.id, finding)
    return list(seen.values())


def _summary(result: VerifyResult, gpu_offload: bool) -> str:
    ok_points = [p for p in result.points if p.status == "ok"]
    if not ok_points:
        return "no layer count could be measured: see findings"
    best = max(ok_points, key=lambda p: p.tg_tokens_per_s or 0)
    where = "GPU build" if gpu_offload else ("GPU build run on the CPU" if result.gpu_skipped else "CPU-only build")
    return (f"{where}: best token generation {best.tg_tokens_per_s:.1f} t/s at n_gpu_layers={best.n_gpu_layers}; "
            f"prompt processing {best.pp_tokens_per_s:.1f} t/s there")


def verify_outcome(result: VerifyResult) -> Outcome:
    if result.ok:
        return Outcome.OK
    if result.probe.status == "crash" or any(p.status == "crash" for p in result.points):
        return Outcome.CRASHED
    if result.probe.status == "hang" or any(p.status == "hang" for p in result.points):
        return Outcome.TIMED_OUT
    return Outcome.FAILED


def verify_step(run: RunFolder, attempt: int, log: Callable[[str], None] = print) -> VerifyResult:
    """The verify notebook's work: check and measure the wheel of build attempt ``attempt``."""
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.steps.detect import Facts
    from playbook.verify.sweep import gpu_bandwidth_gb_per_s

    layout = run.layout
    build = run.read(BuildResult, layout.build_result(attempt))
    plan = run.read(BuildPlan, layout.plan(build.attempt))
    if not build.ok or build.wheel is None:
        raise PlaybookError(f"verify needs a built wheel; attempt {build.attempt} failed (see {build.log_file})")
    params = run.params()
    facts = run.read(Facts, layout.detect_facts)
    gpu = facts.best_gpu
    unit = registry.unit(plan.backend)
    result = run_verify(
        layout,
        Path(build.wheel.path),
        params,
        Path(build.source.path),
        expect_gpu=unit.offloads,
        cache_dir=params.cache_dir,
        attempt=build.attempt,
        log=log,
        yardstick=llama_bench_yardstick(run, build, plan) if params.verify.llama_bench else None,
        gpu_bandwidth_gb_per_s=gpu_bandwidth_gb_per_s(gpu.memory_bus_width_bits, gpu.memory_clock_max_mhz)
        if gpu else None,
        runtime_env=plan.runtime_env,
        dll_directories=plan.dll_directories,
        extras=plan.extras,
        find_links=plan.find_links,
        multimodal=plan.multimodal,
        gpu_present=bool(unit.device(facts)),
        cuda_architectures=plan.cuda_architectures if plan.backend == "cuda" else "",
        cuda_toolkit=plan.cuda_toolkit,
    )
    run.write(result, layout.verify_result(build.attempt))
    if result.ok and plan.remedies_applied:
        remember_repairs(run, facts, plan)
    run.finish_step(Step.VERIFY, build.attempt, verify_outcome(result), result.summary, [f.id for f in result.findings])
    return result


def remember_repairs(run: RunFolder, facts: Any, plan: Any) -> None:
    """A repaired wheel passed: keep what the repairs changed, so the next plan here starts from it."""
    from playbook.runfolder.folder import utc_now
    from playbook.steps.configure import BuildPlan
    from playbook.steps.repair_memory import plan_changes, remember

    repair = plan_changes(run.read(BuildPlan, run.layout.plan(1)), plan)
    repair.run_id, repair.recorded = run.run_id, utc_now()
    remember(run.params().cache_dir, facts, repair)


def llama_bench_yardstick(run: RunFolder, build: Any, plan: Any) -> Callable[[Path, list[int], BenchSettings], LlamaBench]:
    """llama-bench from the wheel's own source tree and CMake arguments, measuring what verify measures."""
    import os

    from playbook.steps.caches import stable_tree
    from playbook.verify.yardsticks import measure_with_llama_bench

    params = run.params()

    def measure(model: Path, layer_counts: list[int], settings: BenchSettings) -> LlamaBench:
        tree = stable_tree(build.source, params.cache_dir)
        return measure_with_llama_bench(
            tree, plan.cmake_args, {**os.environ, **plan.build_env()}, params.cache_dir, build.fingerprint, model,
            layer_counts, settings, params.verify.prompt_tokens, params.verify.gen_tokens, params.verify.repetitions,
            run.layout.llama_bench_log(build.attempt), params.verify.timeout_s, getattr(plan, "ccache_remote", ""))

    return measure
