"""The GPU acceptance verdict: did a run build a CUDA wheel on its first attempt and pass verify with it?

``scripts/gpu-acceptance.sh`` runs the README's GPU route on a fresh GPU machine and asks this module for the
verdict, which it writes as JSON beside the archived run (``outputs/reference/gpu-acceptance.json``). A change to
configure, build, repair, verify or a backend is done once that file names its commit with ``passed: true``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from playbook.backends import registry
from playbook.facts import Facts
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.serialization import write_json
from playbook.steps.configure import BuildPlan
from playbook.verify.step import VerifyResult


@dataclass
class Verdict:
    """What the gate checked of one run folder, and whether it passed."""

    run_id: str
    commit: str
    """The playbook's commit the run was made with (the gate's caller says: a GPU machine's copy has no .git)."""
    passed: bool
    reasons: list[str] = field(default_factory=list)
    """Why it did not pass; empty when it did."""
    backend: str = ""
    gpu: str = ""
    driver: str = ""
    build_attempts: int = 0
    build_s: float = 0.0
    verify_s: float = 0.0
    summary: str = ""
    """Verify's own one-line summary of the first attempt."""
    decisions: list[str] = field(default_factory=list)
    """The plan's compiler decisions: what the toolchain probe found and chose."""


def judge(run_dir: Path, commit: str) -> Verdict:
    """Passed: the first plan is CUDA, its build and verify both ended ``ok`` on attempt 1, no repair ran."""
    run = RunFolder(run_dir)
    record = run.record()
    verdict = Verdict(run.run_id, commit, passed=False)
    steps = {(s.step, s.attempt): s for s in record.steps}
    for (step, attempt), entry in steps.items():
        if step == Step.BUILD.value:
            verdict.build_attempts = max(verdict.build_attempts, attempt)
        if (step, attempt) == (Step.BUILD.value, 1):
            verdict.build_s = entry.duration_s
        if (step, attempt) == (Step.VERIFY.value, 1):
            verdict.verify_s = entry.duration_s
    layout = run.layout
    if layout.detect_facts.is_file():
        facts = run.read(Facts, layout.detect_facts)
        verdict.gpu, verdict.driver = ", ".join(g.name for g in facts.gpus), facts.driver.version
    if layout.plan(1).is_file():
        plan = run.read(BuildPlan, layout.plan(1))
        verdict.backend = plan.backend
        verdict.decisions = [f"{d.what}: {d.value} ({d.reason})" for d in plan.decisions
                             if "compiler" in d.what or d.what == "C++ runtime"]
    if layout.verify_result(1).is_file():
        verdict.summary = run.read(VerifyResult, layout.verify_result(1)).summary

    wanted = run.params().backend
    offloads = verdict.backend in registry.names() and registry.unit(verdict.backend).offloads
    if not offloads or wanted not in (registry.AUTO, verdict.backend):
        verdict.reasons.append(f"the plan's backend is {verdict.backend or 'unknown'}, not a GPU backend the "
                               f"parameters ask for (backend: {wanted})")
    for step in (Step.BUILD, Step.VERIFY):
        first = steps.get((step, 1))
        if first is None:
            verdict.reasons.append(f"{step.value} attempt 1 did not run")
        elif first.outcome != Outcome.OK.value:
            verdict.reasons.append(f"{step.value} attempt 1 ended {first.outcome}: {first.message}")
    if (Step.REPAIR.value, 1) in steps:
        verdict.reasons.append("repair ran: the first attempt was not right")
    verdict.passed = not verdict.reasons
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playbook.interfaces.acceptance", description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--commit", default="", help="the playbook's commit the run was made with")
    parser.add_argument("--write", type=Path, default=None, metavar="JSON", help="write the verdict there too")
    args = parser.parse_args(argv)
    verdict = judge(args.run_dir, args.commit)
    if args.write:
        write_json(verdict, args.write)
    print(f"gpu acceptance: {'PASSED' if verdict.passed else 'FAILED'} on {verdict.gpu or 'no GPU'} "
          f"(run {verdict.run_id}, commit {verdict.commit or 'unknown'})")
    for reason in verdict.reasons:
        print(f"  - {reason}")
    if verdict.summary:
        print(f"  verify: {verdict.summary}")
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
