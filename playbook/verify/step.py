"""Verify: install the wheel alone, then run verify's units on it (``playbook/verify/units/``).

Everything that touches ``llama_cpp`` runs in a child process (:mod:`playbook.verify.launcher`) with a
watchdog: a crash or a hang is recorded as a finding and verify goes on. What each unit measures, and
the interface they share, is in :mod:`playbook.verify.measurement`; this module only installs the
wheel, runs the units in turn and records the step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from playbook.backends import registry
from playbook.errors import PlaybookError
from playbook.files import sha256_of
from playbook.knowledge.failures import finding_for, most_specific_first
from playbook.params import Params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.verify.launcher import install_wheel, plan_child_env
from playbook.verify.measurement import (
    InstalledWheel,
    Registry,
    RpcServerBuilder,
    VerifyContext,
    VerifyRequest,
    VerifyTarget,
    Yardstick,
    run_units,
)
from playbook.verify.result import VerifyResult
from playbook.verify.settings import BenchSettings
from playbook.verify.sweep import default_threads
from playbook.verify.tune_build import run_wheel_builder
from playbook.verify.units.import_probe import COMPILED_ONLY, IMPORT_PROBE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

# Plan warnings that say the wheel cannot load on the machine that built it: verify checks its machine code only.
COMPILED_ONLY_WARNINGS = ("rocm-needs-newer-glibc",)

__all__ = ["VerifyRequest", "VerifyResult", "VerifyTarget", "run_verify", "verify_step"]


def run_verify(request: VerifyRequest, log: Callable[[str], None] = print,
               units: Registry | None = None) -> VerifyResult:
    """The whole verify: the wheel installed alone, then every unit in turn (``units``, by default
    :func:`playbook.verify.units.default_registry`). Every problem ends up in ``findings``; nothing raises
    past a bad wheel. Its files carry the build attempt in their names, so a retry never overwrites them."""
    from playbook.verify.units import default_registry

    request.layout.verify_logs(request.attempt).mkdir(parents=True, exist_ok=True)
    wheel = install(request, log)
    settings = bench_settings(request.params)
    result = VerifyResult(False, request.wheel.name, str(wheel.site_dir), settings.threads, settings,
                          runtime_env=dict(request.target.runtime_env),
                          dll_directories=list(request.target.dll_directories), extras=list(request.target.extras))
    ctx = VerifyContext(request, wheel, settings, log)
    stopped = run_units(units or default_registry(), ctx, result)
    measured = list(ctx.results.values())
    installing = ([finding_for("install-failed", wheel.output_tail, stage="install")] if wheel.returncode != 0
                  else [])
    result.findings = most_specific_first(installing + [f for m in measured for f in m.findings])
    sentences = [m.summary for m in measured if m.summary] + [m.note for m in measured if m.note]
    result.summary = stopped or "; ".join(sentences)
    sweep = result.measured(OFFLOAD_SWEEP)
    result.ok = (not stopped and sweep is not None and bool(sweep.measured)
                 and not result.findings and all(m.passed for m in measured))
    if stopped.startswith(COMPILED_ONLY):
        # Nothing ran, but what can be checked without loading the wheel (its machine code) passed or failed.
        result.compiled_only = request.target.compiled_only
        result.summary = "; ".join([stopped, *(m.note for m in measured if m.note)])
        result.ok = not result.findings and all(m.passed for m in measured)
    return result


def install(request: VerifyRequest, log: Callable[[str], None]) -> InstalledWheel:
    """The wheel (with the plan's extras) installed alone into a folder of the cache named by its hash."""
    extras = sorted(request.target.extras)
    site_dir = request.cache_dir / "site" / (sha256_of(request.wheel)[:16] + "".join(f"-{e}" for e in extras))
    if extras:
        log(f"installing {request.wheel.name}[{','.join(extras)}] with its dependencies into {site_dir}")
    else:
        log(f"installing {request.wheel.name} alone into {site_dir}")
    installed = install_wheel(request.wheel, site_dir, request.python, list(request.target.extras),
                              request.target.find_links)
    request.layout.install_log(request.attempt).write_text(installed.stdout + installed.stderr)
    child_env = plan_child_env(request.target.runtime_env, request.target.dll_directories)
    for name, value in child_env.items():
        log(f"children get {name}={value}")
    tail = "\n".join((installed.stdout + installed.stderr).strip().splitlines()[-15:]) if installed.returncode else ""
    return InstalledWheel(site_dir, child_env, installed.returncode, tail)


def bench_settings(params: Params) -> BenchSettings:
    """Every throughput measurement's runtime settings, from ``verify``: llama-bench gets the same."""
    verify = params.verify
    threads = default_threads() if verify.threads == "auto" else int(verify.threads)
    return BenchSettings(threads=threads, n_batch=verify.n_batch, n_ubatch=verify.n_ubatch,
                         flash_attn=verify.flash_attn, type_k=verify.type_k, type_v=verify.type_v, offload_kqv=verify.offload_kqv,
                         load_mode=verify.load_mode, poll=None if verify.poll == "none" else int(verify.poll))


def verify_outcome(result: VerifyResult) -> Outcome:
    if result.ok:
        return Outcome.OK
    probe, sweep = result.measured(IMPORT_PROBE), result.measured(OFFLOAD_SWEEP)
    statuses = {probe.outcome.status if probe else "not run", *(p.status for p in (sweep.points if sweep else []))}
    if "crash" in statuses:
        return Outcome.CRASHED
    if "hang" in statuses:
        return Outcome.TIMED_OUT
    return Outcome.FAILED


def verify_step(run: RunFolder, attempt: int, log: Callable[[str], None] = print) -> VerifyResult:
    """The verify notebook's work: check and measure the wheel of build attempt ``attempt``."""
    from playbook.facts import Facts
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.steps.repair_memory import remember_passed_repairs
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
    target = VerifyTarget(
        expect_gpu=unit.offloads,
        gpu_present=bool(unit.device(facts)),
        backend=plan.backend,
        machine_code=unit.machine_code,
        tune_build_flags=unit.tune_build_flags,
        gpu_targets=plan.gpu_targets,
        compiled_only=next((w.message for w in plan.warnings if w.code in COMPILED_ONLY_WARNINGS), ""),
        toolkit=plan.cuda_toolkit,
        multimodal=plan.multimodal,
        runtime_env=dict(plan.runtime_env),
        dll_directories=list(plan.dll_directories),
        extras=list(plan.extras),
        find_links=plan.find_links,
        cmake_args=list(plan.cmake_args),
        gpu_bandwidth_gb_per_s=gpu_bandwidth_gb_per_s(gpu.memory_bus_width_bits, gpu.memory_clock_max_mhz)
        if gpu else None,
        rpc=plan.rpc,
    )
    request = VerifyRequest(layout, Path(build.wheel.path), params, target, Path(build.source.path), params.cache_dir,
                            build.attempt,
                            yardstick=llama_bench_yardstick(run, build, plan) if params.verify.llama_bench else None,
                            rpc_server=rpc_server_builder(run, build, plan) if plan.rpc is not None else None,
                            tune_rebuild=run_wheel_builder(run, build, plan, facts)
                            if params.verify.tune and params.verify.tune_build_flags else None)
    result = run_verify(request, log)
    run.write(result, layout.verify_result(build.attempt))
    if result.ok:
        remember_passed_repairs(run, facts, plan)
    run.finish_step(Step.VERIFY, build.attempt, verify_outcome(result), result.summary, [f.id for f in result.findings])
    return result


def llama_bench_yardstick(run: RunFolder, build: Any, plan: Any) -> Yardstick:
    """llama-bench from the wheel's own source tree and CMake arguments, measuring what verify measures."""
    import os

    from playbook.steps.caches import stable_tree
    from playbook.verify.yardsticks import LlamaBench, measure_with_llama_bench

    params = run.params()

    def measure(model: Path, layer_counts: list[int], settings: BenchSettings) -> LlamaBench:
        tree = stable_tree(build.source, params.cache_dir)
        return measure_with_llama_bench(
            tree, plan.cmake_args, {**os.environ, **plan.build_env()}, params.cache_dir, build.fingerprint, model,
            layer_counts, settings, params.verify.prompt_tokens, params.verify.gen_tokens, params.verify.repetitions,
            run.layout.unit_files(build.attempt, "llama-bench").beside(".log"), params.verify.timeout_s, getattr(plan, "ccache_remote", ""))

    return measure


def rpc_server_builder(run: RunFolder, build: Any, plan: Any) -> RpcServerBuilder:
    """rpc-server from the wheel's own source tree with the plan's server arguments (build.rpc), in a build
    folder of the cache named by the build's fingerprint and the server's backend; ccache as for the wheel."""
    import os

    from playbook.steps.caches import stable_tree
    from playbook.verify.rpc_server import RpcServerBuild, build_rpc_server

    params = run.params()

    def build_server(log_file: Path) -> RpcServerBuild:
        tree = stable_tree(build.source, params.cache_dir)
        build_dir = params.cache_dir / "rpc-server-build" / f"{build.fingerprint[:16]}-{plan.rpc.server_backend}"
        return build_rpc_server(tree, plan.rpc, dict(os.environ), build_dir, log_file, params.cache_dir,
                                params.build.timeout_s, getattr(plan, "ccache_remote", ""))

    return build_server
