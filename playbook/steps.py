"""The five steps as functions over a run folder: what each notebook calls.

Each step reads the facts the previous steps wrote and writes its own, so a notebook
holds no logic and any step can be re-run from its files.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.bench import LlamaBench, measure_with_llama_bench
from playbook.build import BuildResult, ProgressCallback, run_build
from playbook.cache import stable_tree
from playbook.detect import Facts, detect
from playbook.diagnose import Finding, diagnose_file
from playbook.facts import read_facts, write_facts
from playbook.plan import BuildPlan, apply_remedies, configure
from playbook.provenance import RunFolder
from playbook.source import SourceInfo, resolve_params_source
from playbook.throughput import gpu_bandwidth_gb_per_s
from playbook.verify import VerifyResult, run_verify

DETECT_FILE = "detect.json"
PLAN_FILE = "plan.json"
BUILD_FILE = "build.json"
DIAGNOSIS_FILE = "diagnosis.json"
VERIFY_FILE = "verify.json"


@dataclass
class Diagnosis:
    attempt: int
    log_file: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    next_plan: str = ""  # file name of the patched plan, when a remedy was automatic
    needs_person: list[str] = field(default_factory=list)
    message: str = ""


def detect_step(run: RunFolder) -> Facts:
    facts = detect()
    write_facts(facts, run.file(DETECT_FILE))
    return facts


def configure_step(run: RunFolder) -> BuildPlan:
    facts = read_facts(Facts, run.file(DETECT_FILE))
    plan = configure(facts, run.params())
    write_facts(plan, run.attempt_file("plan", plan.attempt))
    write_facts(plan, run.file(PLAN_FILE))
    return plan


def fetch_source(run: RunFolder) -> SourceInfo:
    return resolve_params_source(run.params())


def build_step(
    run: RunFolder, attempt: int, on_progress: ProgressCallback | None = None
) -> BuildResult:
    plan = read_facts(BuildPlan, run.attempt_file("plan", attempt))
    facts = read_facts(Facts, run.file(DETECT_FILE))
    source = fetch_source(run)
    result = run_build(plan, source, run.path, run.params().cache_dir, toolchain(facts, plan), sys.executable,
                       run.params().build.timeout_s, on_progress)
    write_facts(result, run.attempt_file("build", attempt))
    write_facts(result, run.file(BUILD_FILE))
    return result


def repair_step(run: RunFolder, attempt: int) -> Diagnosis:
    """Diagnose what failed in attempt ``attempt`` (its build, or the verify of its wheel) and write
    the next attempt's plan when a remedy is automatic."""
    build = read_facts(BuildResult, run.attempt_file("build", attempt))
    plan = read_facts(BuildPlan, run.attempt_file("plan", attempt))
    facts = read_facts(Facts, run.file(DETECT_FILE))
    if build.ok:
        verify = read_facts(VerifyResult, run.attempt_file("verify", attempt))
        findings = [Finding(**finding) for finding in verify.findings]
        evidence = f"verify-logs/attempt-{attempt}/"
    else:
        findings = diagnose_file(run.file(build.log_file), platform=_platform(facts), stage="any")
        evidence = build.log_file
    diagnosis = Diagnosis(attempt=attempt, log_file=evidence, findings=[f.to_dict() for f in findings])
    next_plan = apply_remedies(plan, findings, facts)
    max_attempts = run.params().build.max_attempts
    if next_plan is not None and next_plan.attempt <= max_attempts:
        write_facts(next_plan, run.attempt_file("plan", next_plan.attempt))
        write_facts(next_plan, run.file(PLAN_FILE))
        diagnosis.next_plan = run.attempt_file("plan", next_plan.attempt).name
        diagnosis.message = (
            f"applied {', '.join(next_plan.remedies_applied[len(plan.remedies_applied):])}; "
            f"attempt {next_plan.attempt} of {max_attempts} will build with: {next_plan.cmake_args_string}"
        )
    diagnosis.needs_person = [f"{f.id}: {f.fix}" for f in findings if not f.automatic]
    if not diagnosis.next_plan:
        if not findings:
            diagnosis.message = (
                f"attempt {attempt} failed with no known failure in {evidence}; read its last lines, "
                "then run `playbook diagnose` on it after a fix"
            )
        elif next_plan is not None:
            diagnosis.message = f"a remedy exists, but build.max_attempts ({max_attempts}) is spent"
        else:
            diagnosis.message = "no automatic fix applies: " + " | ".join(diagnosis.needs_person)
    write_facts(diagnosis, run.attempt_file("diagnosis", attempt))
    write_facts(diagnosis, run.file(DIAGNOSIS_FILE))
    return diagnosis


def verify_step(run: RunFolder, attempt: int = 0, log: Any = print) -> VerifyResult:
    """Verify the wheel of build attempt ``attempt`` (0: the latest build)."""
    build = read_facts(BuildResult, run.attempt_file("build", attempt) if attempt else run.file(BUILD_FILE))
    plan = read_facts(BuildPlan, run.attempt_file("plan", build.attempt))
    if not build.ok or build.wheel is None:
        raise RuntimeError(f"verify needs a built wheel; attempt {build.attempt} failed (see {build.log_file})")
    params = run.params()
    facts = read_facts(Facts, run.file(DETECT_FILE))
    gpu = facts.best_gpu
    result = run_verify(
        run.path,
        Path(build.wheel.path),
        params,
        Path(build.source.path),
        expect_gpu=plan.backend == "cuda",
        cache_dir=params.cache_dir,
        attempt=build.attempt,
        log=log,
        yardstick=_llama_bench_yardstick(run, build, plan) if params.verify.llama_bench else None,
        gpu_bandwidth_gb_per_s=gpu_bandwidth_gb_per_s(gpu.memory_bus_width_bits, gpu.memory_clock_max_mhz)
        if gpu else None,
        runtime_env=plan.runtime_env,
        dll_directories=plan.dll_directories,
        extras=plan.extras,
        find_links=plan.find_links,
        multimodal=plan.multimodal,
    )
    write_facts(result, run.attempt_file("verify", build.attempt))
    write_facts(result, run.file(VERIFY_FILE))
    return result


def _llama_bench_yardstick(run: RunFolder, build: BuildResult, plan: BuildPlan):
    """llama-bench from the wheel's own source tree and CMake arguments, measuring what verify measures."""
    params = run.params()

    def measure(model: Path, layer_counts: list[int], threads: int) -> LlamaBench:
        tree = stable_tree(build.source, params.cache_dir)
        return measure_with_llama_bench(
            tree, plan.cmake_args, {**os.environ, **plan.build_env()}, params.cache_dir, build.fingerprint, model,
            layer_counts, threads, params.verify.prompt_tokens, params.verify.gen_tokens, params.verify.repetitions,
            run.path / f"llama-bench-attempt-{build.attempt}.log", params.verify.timeout_s)

    return measure


def toolchain(facts: Facts, plan: BuildPlan) -> dict[str, str]:
    """The tool versions that go into the wheel's fingerprint."""
    compilers = {t.name: t.version for t in facts.compilers if t.found}
    nvcc = next((t.version for t in facts.cuda_toolkits if t.root == plan.cuda_toolkit), "")
    return {"compilers": json.dumps(compilers, sort_keys=True), "nvcc": nvcc, "cmake": facts.cmake.version}


def _platform(facts: Facts) -> str:
    if facts.os.is_wsl:
        return "wsl"
    return {"Linux": "linux", "Windows": "windows", "Darwin": "macos"}.get(facts.os.system, "any")
