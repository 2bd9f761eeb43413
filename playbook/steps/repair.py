"""Repair: name what failed in an attempt, and write the next attempt's plan when a remedy is automatic.

The failure comes from the knowledge base (:mod:`playbook.knowledge.failures`): the build log is
matched, or verify's findings are taken as they are. :func:`apply_remedies` turns each finding's
``remedy`` into a change of the plan; the old plan file stays in the run folder.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from playbook.backends import registry
from playbook.backends.plan import BackendInputs, BackendPlan, defined_value
from playbook.facts import Facts
from playbook.knowledge.failures import Finding, KnowledgeBase, diagnose_file, load_knowledge_base
from playbook.params import Params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan, Decision, machine_platform, multimodal_built
from playbook.steps.configure.plan import shell_lines, with_cmake_arg
from playbook.toolkits import cxx_runtime


@dataclass
class Diagnosis:
    attempt: int
    log_file: str  # the evidence: the build log, or verify's log folder
    findings: list[Finding] = field(default_factory=list)
    next_plan: str = ""  # file name of the patched plan, when a remedy was automatic
    needs_person: list[str] = field(default_factory=list)
    message: str = ""


def repair_step(run: RunFolder, attempt: int) -> Diagnosis:
    """Diagnose what failed in attempt ``attempt`` (its build, or the verify of its wheel) and write
    the next attempt's plan when a remedy is automatic."""
    from playbook.verify.step import VerifyResult

    layout = run.layout
    build = run.read(BuildResult, layout.build_result(attempt))
    plan = run.read(BuildPlan, layout.plan(attempt))
    facts = run.read(Facts, layout.detect_facts)
    if build.ok:
        verify = run.read(VerifyResult, layout.verify_result(attempt))
        findings = list(verify.findings)
        evidence = layout.verify_logs(attempt).relative_to(run.path).as_posix() + "/"
    else:
        findings = diagnose_file(layout.build_log(attempt), platform=machine_platform(facts), stage="any",
                                 unrecognised_stage="build", cuda_version=plan_toolkit_release(plan, facts))
        evidence = layout.build_log(attempt).name
    diagnosis = Diagnosis(attempt=attempt, log_file=evidence, findings=findings)
    params = run.params()
    next_plan = apply_remedies(plan, findings, facts, cache_dir=params.cache_dir)
    max_attempts = params.build.max_attempts
    if next_plan is not None and next_plan.attempt <= max_attempts:
        run.write(next_plan, layout.plan(next_plan.attempt))
        diagnosis.next_plan = layout.plan(next_plan.attempt).name
        diagnosis.message = (
            f"applied {', '.join(next_plan.remedies_applied[len(plan.remedies_applied):])}; "
            f"attempt {next_plan.attempt} of {max_attempts} will build with: {next_plan.cmake_args_string}"
        )
    applied = set(next_plan.remedies_applied) if next_plan is not None else set()
    diagnosis.needs_person = [f"{f.id}: {f.fix}" for f in findings if not f.automatic or f.id not in applied]
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
    run.write(diagnosis, layout.diagnosis(attempt))
    run.finish_step(Step.REPAIR, attempt, Outcome.OK, diagnosis.message, [f.id for f in findings])
    return diagnosis


def plan_toolkit_release(plan: BuildPlan, facts: Facts, cache_dir: Path | None = None) -> str:
    """The release of the toolkit the plan builds with ("13.0"; "" for none or unknown), as its backend knows it."""
    return registry.unit(plan.backend).toolkit_release(remedy_inputs(plan, facts, cache_dir or Path()))


def remedy_inputs(plan: BuildPlan, facts: Facts, cache_dir: Path) -> BackendInputs:
    """A failed attempt's plan, as the frozen inputs its backend's remedies read."""
    return BackendInputs(facts=facts, settings=None, platform=plan.platform, cache_dir=cache_dir,
                         env=dict(plan.env), cmake_args=tuple(plan.cmake_args), toolkit_root=plan.cuda_toolkit,
                         toolkit_request=plan.toolkit_request, architectures=plan.cuda_architectures)


def apply_remedies(
    plan: BuildPlan, findings: list[Finding], facts: Facts, knowledge: KnowledgeBase | None = None,
    cache_dir: Path | None = None,
) -> BuildPlan | None:
    """The next attempt's plan with every automatic remedy applied, or None when nothing changes.
    Remedies that change the CUDA toolkit assemble it under ``cache_dir`` (default: the parameters')."""
    knowledge = knowledge or load_knowledge_base()
    cache_dir = cache_dir or Params().cache_dir
    new = dataclasses.replace(
        plan,
        attempt=plan.attempt + 1,
        cmake_args=list(plan.cmake_args),
        env=dict(plan.env),
        runtime_env=dict(plan.runtime_env),
        extra_packages=list(plan.extra_packages),
        decisions=list(plan.decisions),
        remedies_applied=list(plan.remedies_applied),
    )
    known = set(knowledge.ids)
    for finding in findings:
        # a finding that is only a guess (the similarity stage below its threshold) is never automatic
        remedy = knowledge.get(finding.id).remedy if finding.id in known and finding.automatic else None
        if remedy is None or (remedy.backends and plan.backend not in remedy.backends):
            continue
        before = dataclasses.asdict(new)
        for pattern in remedy.cmake_args_remove:
            new.cmake_args = [arg for arg in new.cmake_args if not re.search(pattern, arg)]
        for arg in remedy.cmake_args_add:
            new.cmake_args = with_cmake_arg(new.cmake_args, arg)
        new.env.update(remedy.env_set)
        for name in remedy.env_unset:
            new.env.pop(name, None)
        if remedy.halve_jobs:
            new.jobs = max(1, new.jobs // 2)
        new.extra_packages += [p for p in remedy.extra_packages if p not in new.extra_packages]
        if remedy.build_isolation is not None:
            new.build_isolation = remedy.build_isolation
        compilers_moved = remedy.shared_cxx_runtime and use_shared_cxx_runtime(new, facts)
        backend_part = dataclasses.replace(remedy, shared_cxx_runtime=bool(compilers_moved))
        apply_backend_remedy(new, registry.unit(new.backend).remedy(backend_part, remedy_inputs(new, facts, cache_dir)))
        if dataclasses.asdict(new) != before:
            new.remedies_applied.append(finding.id)
            new.decisions.append(Decision("repair", finding.id, f"automatic remedy for: {finding.title}"))
    new.multimodal = multimodal_built(new.cmake_args)
    return new if new.remedies_applied != plan.remedies_applied else None


def apply_backend_remedy(plan: BuildPlan, change: BackendPlan) -> None:
    """What a backend's remedy returned, into the next attempt's plan."""
    for arg in change.cmake_args:
        plan.cmake_args = with_cmake_arg(plan.cmake_args, arg)
    plan.env.update(change.env)
    plan.runtime_env.update(change.runtime_env)
    plan.decisions += change.decisions
    if change.architectures:
        plan.cuda_architectures = change.architectures
    if change.gpu_targets:
        plan.gpu_targets = change.gpu_targets
    if change.toolkit is not None:
        plan.cuda_toolkit, plan.toolkit_request = change.toolkit.root, change.toolkit_request
        if plan.platform != "windows":
            plan.shell_commands = shell_lines(plan)


def use_shared_cxx_runtime(plan: BuildPlan, facts: Facts, environ: Mapping[str, str] | None = None) -> bool:
    """Name a C and C++ compiler of this machine that link the C++ runtime shared, in place of the one that
    copied it into every library (CMAKE_CXX_COMPILER, else $CXX): in CC, CXX and CMake's arguments (the backend's
    remedy then names it as its own host compiler, where it has one). False when detect found none."""
    environ = os.environ if environ is None else environ
    used = defined_value(plan.cmake_args, "CMAKE_CXX_COMPILER") or plan.env.get("CXX") or environ.get("CXX", "")
    chosen = cxx_runtime.compilers_with_shared_runtime([t.path for t in facts.compilers if t.found], avoid=used)
    if chosen is None:
        return False
    plan.env.update(CC=chosen.c, CXX=chosen.cxx)
    for arg in (f"-DCMAKE_C_COMPILER={chosen.c}", f"-DCMAKE_CXX_COMPILER={chosen.cxx}"):
        plan.cmake_args = with_cmake_arg(plan.cmake_args, arg)
    plan.decisions.append(Decision("C++ compiler", chosen.cxx,
                                   f"it links the C++ runtime as libstdc++.so; {used or 'the compiler used'} "
                                   "linked the runtime into the wheel's libraries; CC, CXX and CMake's arguments "
                                   "name it (and the backend's host compiler, where it has one)"))
    return True
