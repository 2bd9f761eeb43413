"""Repair: name what failed in an attempt, and write the next attempt's plan when a remedy is automatic.

The failure comes from the knowledge base (:mod:`playbook.knowledge.failures`): the build log is
matched, or verify's findings are taken as they are. :func:`apply_remedies` turns each finding's
``remedy`` into a change of the plan; the old plan file stays in the run folder.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from playbook.knowledge.failures import Finding, KnowledgeBase, diagnose_file, load_knowledge_base
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan, Decision, machine_platform, multimodal_built
from playbook.steps.detect import Facts


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
                                 unrecognised_stage="build")
        evidence = layout.build_log(attempt).name
    diagnosis = Diagnosis(attempt=attempt, log_file=evidence, findings=findings)
    next_plan = apply_remedies(plan, findings, facts)
    max_attempts = run.params().build.max_attempts
    if next_plan is not None and next_plan.attempt <= max_attempts:
        run.write(next_plan, layout.plan(next_plan.attempt))
        diagnosis.next_plan = layout.plan(next_plan.attempt).name
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
    run.write(diagnosis, layout.diagnosis(attempt))
    run.finish_step(Step.REPAIR, attempt, Outcome.OK, diagnosis.message, [f.id for f in findings])
    return diagnosis


def apply_remedies(
    plan: BuildPlan, findings: list[Finding], facts: Facts, knowledge: KnowledgeBase | None = None
) -> BuildPlan | None:
    """The next attempt's plan with every automatic remedy applied, or None when nothing changes."""
    knowledge = knowledge or load_knowledge_base()
    new = dataclasses.replace(
        plan,
        attempt=plan.attempt + 1,
        cmake_args=list(plan.cmake_args),
        env=dict(plan.env),
        extra_packages=list(plan.extra_packages),
        decisions=list(plan.decisions),
        remedies_applied=list(plan.remedies_applied),
    )
    known = set(knowledge.ids)
    for finding in findings:
        remedy = knowledge.get(finding.id).remedy if finding.id in known else None
        if remedy is None or (remedy.backends and plan.backend.value not in remedy.backends):
            continue
        before = dataclasses.asdict(new)
        for pattern in remedy.cmake_args_remove:
            new.cmake_args = [arg for arg in new.cmake_args if not re.search(pattern, arg)]
        for arg in remedy.cmake_args_add:
            new.cmake_args = [a for a in new.cmake_args if a.split("=")[0] != arg.split("=")[0]] + [arg]
        new.env.update(remedy.env_set)
        for name in remedy.env_unset:
            new.env.pop(name, None)
        if remedy.halve_jobs:
            new.jobs = max(1, new.jobs // 2)
        new.extra_packages += [p for p in remedy.extra_packages if p not in new.extra_packages]
        if remedy.build_isolation is not None:
            new.build_isolation = remedy.build_isolation
        if remedy.use_detected_arch and facts.best_gpu:
            arch = facts.best_gpu.arch
            new.cuda_architectures = arch
            new.cmake_args = [a for a in new.cmake_args if not a.startswith("-DCMAKE_CUDA_ARCHITECTURES=")]
            new.cmake_args.append(f"-DCMAKE_CUDA_ARCHITECTURES={arch}")
        if dataclasses.asdict(new) != before:
            new.remedies_applied.append(finding.id)
            new.decisions.append(Decision("repair", finding.id, f"automatic remedy for: {finding.title}"))
    new.multimodal = multimodal_built(new.cmake_args)
    return new if new.remedies_applied != plan.remedies_applied else None
