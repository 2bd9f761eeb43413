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

from playbook.backends import cuda as cuda_plan
from playbook.knowledge.compatibility import toolkit_supports_arch, version_tuple
from playbook.knowledge.failures import Finding, KnowledgeBase, diagnose_file, load_knowledge_base
from playbook.params import Backend, Params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan, Decision, machine_platform, multimodal_built
from playbook.steps.configure.plan import shell_lines, with_cmake_arg
from playbook.steps.detect import Facts
from playbook.toolkits import cxx_runtime, pypi


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
                                 unrecognised_stage="build", cuda_version=plan_cuda_version(plan, facts))
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


def plan_cuda_version(plan: BuildPlan, facts: Facts) -> str:
    """The CUDA release the plan builds with ("" for none or unknown)."""
    if plan.toolkit_request is not None:
        if plan.toolkit_request.base:
            plan = dataclasses.replace(plan, cuda_toolkit=plan.toolkit_request.base, toolkit_request=None)
        else:
            return plan.toolkit_request.release
    return next((t.version for t in facts.cuda_toolkits if t.root == plan.cuda_toolkit), "")


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
        if remedy is None or (remedy.backends and plan.backend.value not in remedy.backends):
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
        if remedy.use_detected_arch and facts.best_gpu:
            arch = facts.best_gpu.arch
            new.cuda_architectures = arch
            new.cmake_args = with_cmake_arg(new.cmake_args, f"-DCMAKE_CUDA_ARCHITECTURES={arch}")
        if new.backend is Backend.CUDA and remedy.toolkit_add:
            add_toolkit_components(new, facts, list(remedy.toolkit_add), cache_dir)
        if new.backend is Backend.CUDA and remedy.pypi_toolkit:
            move_to_pypi_toolkit(new, facts, cache_dir)
        if remedy.shared_cxx_runtime:
            use_shared_cxx_runtime(new, facts)
        if dataclasses.asdict(new) != before:
            new.remedies_applied.append(finding.id)
            new.decisions.append(Decision("repair", finding.id, f"automatic remedy for: {finding.title}"))
    new.multimodal = multimodal_built(new.cmake_args)
    return new if new.remedies_applied != plan.remedies_applied else None


def use_shared_cxx_runtime(plan: BuildPlan, facts: Facts, environ: Mapping[str, str] | None = None) -> None:
    """Name a C and C++ compiler of this machine that link the C++ runtime shared, in place of the one that
    copied it into every library (CMAKE_CXX_COMPILER, else $CXX); no change when detect found none."""
    environ = os.environ if environ is None else environ
    given = [a.split("=", 1)[1] for a in plan.cmake_args if a.startswith("-DCMAKE_CXX_COMPILER=")]
    used = given[-1] if given else plan.env.get("CXX") or environ.get("CXX", "")
    chosen = cxx_runtime.compilers_with_shared_runtime([t.path for t in facts.compilers if t.found], avoid=used)
    if chosen is None:
        return
    chosen_args = [f"-DCMAKE_C_COMPILER={chosen.c}", f"-DCMAKE_CXX_COMPILER={chosen.cxx}"]
    plan.env.update(CC=chosen.c, CXX=chosen.cxx)
    if plan.backend is Backend.CUDA:
        # CUDAHOSTCXX in the build's environment wins over -DCMAKE_CUDA_HOST_COMPILER: both must name it
        chosen_args.append(f"-DCMAKE_CUDA_HOST_COMPILER={chosen.cxx}")
        plan.env["CUDAHOSTCXX"] = chosen.cxx
    for arg in chosen_args:
        plan.cmake_args = with_cmake_arg(plan.cmake_args, arg)
    plan.decisions.append(Decision("C++ compiler", chosen.cxx,
                                   f"it links the C++ runtime as libstdc++.so; {used or 'the compiler used'} "
                                   "linked the runtime into the wheel's libraries; CC, CXX"
                                   + (", CUDAHOSTCXX" if plan.backend is Backend.CUDA else "")
                                   + " and CMake's arguments name it"))


def add_toolkit_components(plan: BuildPlan, facts: Facts, components: list[str], cache_dir: Path) -> None:
    """Components of the plan's own CUDA release from PyPI, added to (a copy of) its toolkit."""
    request = plan.toolkit_request
    if request is not None:
        missing = [c for c in components if c not in request.components]
        if missing and request.release in pypi.releases():
            _use_toolkit(plan, pypi.with_components(request, missing), cache_dir,
                         f"adds {', '.join(missing)} of CUDA {request.release} from PyPI")
        return
    version = plan_cuda_version(plan, facts)
    request = pypi.component_request(version, components, plan.cuda_toolkit) if version and plan.cuda_toolkit else None
    if request is not None:
        wheels = pypi.release(request.release).wheels
        _use_toolkit(plan, request, cache_dir, "a copy of " + plan.cuda_toolkit + " with " +
                     ", ".join(f"{wheels[c].package}=={wheels[c].version}" for c in components) + " from PyPI")


def move_to_pypi_toolkit(plan: BuildPlan, facts: Facts, cache_dir: Path) -> None:
    """A whole CUDA release from PyPI that compiles every architecture of the plan and accepts the host gcc,
    when the current toolkit does not."""
    architectures = [a for a in plan.cuda_architectures.split(";") if a]
    version = plan_cuda_version(plan, facts)
    host = cuda_plan.host_compiler(facts, plan.env)
    gcc = version_tuple(host.version)[:1] if host and "clang" not in host.banner.lower() else ()
    release = cuda_plan.pypi_release_for(facts, architectures, gcc[0] if gcc else None)
    if not release or (plan.toolkit_request is not None and plan.toolkit_request.release == release
                       and not plan.toolkit_request.base):
        return
    fits_now = version and all(toolkit_supports_arch(version, a)[0] for a in architectures)
    limits = cuda_plan.compatibility.host_compiler_limits(version) if version else None
    if fits_now and (not gcc or limits is None or gcc[0] <= limits.max_gcc):
        return
    _use_toolkit(plan, pypi.full_request(f"pypi:{release}"), cache_dir,
                 f"CUDA {release} from PyPI compiles {';'.join(architectures)} and accepts the host compiler")


def _use_toolkit(plan: BuildPlan, request: pypi.ToolkitRequest, cache_dir: Path, why: str) -> None:
    root = pypi.root_for(request, cache_dir)
    plan.toolkit_request = request
    plan.cuda_toolkit = str(root)
    plan.env["CUDACXX"] = str(pypi.nvcc_of(root))
    plan.decisions.append(Decision("CUDA toolkit", str(root), why + "; build assembles it unless it exists"))
    if plan.platform != "windows":
        cuda_plan.use_toolkit_libraries(plan.runtime_env, str(root))
        plan.shell_commands = shell_lines(plan)
