"""The repair of a CPU fault, provoked for real on a CPU without it (issue 34): the real chain asked for AVX-512
code on a CPU that lacks AVX-512F. Its verify child dies by SIGILL, diagnosis names illegal-instruction, and the
remedy (playbook/knowledge/failures.yaml) rebuilds portable without the AVX-512 switch; the second attempt
builds, mostly from the session's compiler cache, and passes verify. Takes minutes: it compiles llama.cpp twice
(the second time only ggml's CPU backend misses the cache)."""

from __future__ import annotations

import pytest

from playbook.chain import run_chain
from playbook.facts import Facts
from playbook.params import load_params
from playbook.resources import params_dir
from playbook.runfolder.folder import Outcome
from playbook.runfolder.layout import Step
from playbook.serialization import read_json
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan, configure_here
from playbook.steps.detect import detect
from playbook.steps.repair import Diagnosis
from playbook.steps.repair_memory import recall
from playbook.verify.step import VerifyResult
from playbook.verify.units.import_probe import IMPORT_PROBE

# The switch that asks for code this CPU cannot run, and the /proc/cpuinfo flag (as detect reports it) it needs.
SWITCH, FLAG = "-DGGML_AVX512=ON", "avx512f"
PORTABLE = "-DGGML_NATIVE=OFF"


@pytest.mark.slow
def test_a_build_for_a_cpu_feature_this_cpu_lacks_crashes_and_is_repaired(tmp_path, seeded_cache):
    facts = detect()
    if facts.os.machine not in ("x86_64", "AMD64") or not facts.cpu.flags:
        pytest.skip(f"not an x86-64 CPU whose flags detect reads ({facts.os.machine}, flags {facts.cpu.flags})")
    if FLAG in facts.cpu.flags:
        pytest.skip(f"this CPU ({facts.cpu.model}) has {FLAG}: an AVX-512 build runs here, nothing to provoke")
    params = load_params(params_dir() / "cpu.yaml", [
        f"build.cmake_args=[{PORTABLE}, {SWITCH}]", "verify.repetitions=1", "verify.prompt_tokens=32",
        "verify.gen_tokens=8", f"build.cache_dir={seeded_cache}"])
    run = run_chain(params, "params/cpu.yaml with AVX-512 asked for (test)", tmp_path)
    layout, record = run.layout, run.record()
    steps = [s.step for s in record.steps]
    assert steps == [Step.DETECT, Step.CONFIGURE, Step.BUILD, Step.VERIFY, Step.REPAIR, Step.BUILD, Step.VERIFY], steps
    assert record.outcome == Outcome.OK, record.message

    # configure said so, and did not stop the build: a wheel for another machine is legitimate
    first_plan = read_json(BuildPlan, layout.plan(1))
    assert [a for a in first_plan.cmake_args if a in (PORTABLE, SWITCH)] == [PORTABLE, SWITCH]
    assert any(w.code == "cpu-features-missing" and "avx512f" in w.message for w in first_plan.warnings), \
        first_plan.warnings
    first = read_json(BuildResult, layout.build_result(1))
    assert first.ok and first.reused_wheel == ""

    # attempt 1: the wheel built, and its verify child died by SIGILL
    crashed = read_json(VerifyResult, layout.verify_result(1))
    assert not crashed.ok
    logs = "".join(p.read_text(errors="replace") for p in sorted(layout.verify_logs(1).rglob("*")) if p.is_file())
    assert "playbook: child died by signal SIGILL" in logs
    diagnosis = read_json(Diagnosis, layout.diagnosis(1))
    assert diagnosis.findings[0].id == "illegal-instruction" and diagnosis.findings[0].automatic, diagnosis.findings
    assert diagnosis.next_plan == layout.plan(2).name and "applied illegal-instruction" in diagnosis.message
    assert layout.notebook(Step.VERIFY, 1).is_file()  # the failed verify is kept

    # the remedy: portable, and no AVX-512 switch left
    second_plan = read_json(BuildPlan, layout.plan(2))
    assert PORTABLE in second_plan.cmake_args and not any(a.startswith("-DGGML_AVX512") for a in second_plan.cmake_args)
    assert second_plan.remedies_applied == ["illegal-instruction"]
    assert PORTABLE in layout.build_log(2).read_text() and SWITCH not in layout.build_log(2).read_text()

    # attempt 2 built, with every object but ggml's CPU backend's from the compiler cache, and passed verify
    second = read_json(BuildResult, layout.build_result(2))
    assert second.ok and second.reused_wheel == "" and second.wheel.name.startswith("llama_cpp_python-0.3.36-")
    if second.ccache is not None and not second.ccache.shared:
        assert second.ccache.hits > second.ccache.misses, second.ccache
    verify = read_json(VerifyResult, layout.verify_result(2))
    assert verify.ok, verify.summary
    assert verify.measured(IMPORT_PROBE).outcome.result["version"] == "0.3.36"

    # remembered for this machine: what the repair changed against the first plan (the switch removed; the
    # portable switch was asked for already). Replayed before the user's own arguments, it does not override
    # them: the same parameters plan the AVX-512 switch again, and the same repair follows.
    facts = read_json(Facts, layout.detect_facts)
    [remembered] = recall(seeded_cache, facts)
    assert remembered.findings == ["illegal-instruction"] and remembered.run_id == run.run_id
    assert remembered.cmake_args_removed == [SWITCH] and remembered.cmake_args_added == []
    again = configure_here(facts, params)
    assert again.remembered_repairs == ["illegal-instruction"] and SWITCH in again.cmake_args
