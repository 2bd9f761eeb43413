"""Repairs remembered per machine: a repair that worked is replayed into the next plan on the same machine."""

from __future__ import annotations

import dataclasses

from conftest import H100, make_facts, toolkit

from playbook.interfaces.cli import main
from playbook.params import load_params
from playbook.steps.configure import configure
from playbook.steps.repair_memory import (
    RememberedRepair,
    machine_fingerprint,
    plan_changes,
    recall,
    remember,
    repairs_file,
)


def amx_repair(run_id: str = "20261123T120000Z-vm") -> RememberedRepair:
    return RememberedRepair(findings=["cpu-amx-fault"], backend="cpu", run_id=run_id, recorded="2026-11-23T12:00:00",
                            cmake_args_added=["-DGGML_NATIVE=OFF"])


def test_the_fingerprint_is_the_machine_not_its_load(this_machine):
    for backend in ("cpu", "cuda"):
        assert machine_fingerprint(this_machine, backend) == machine_fingerprint(dataclasses.replace(
            this_machine, memory=dataclasses.replace(this_machine.memory, available_mib=1)), backend)
        other_cpu = dataclasses.replace(this_machine, cpu=dataclasses.replace(this_machine.cpu, flags=["sse2"]))
        assert machine_fingerprint(other_cpu, backend) != machine_fingerprint(this_machine, backend)
    gpu = make_facts(this_machine, gpus=[H100])
    assert machine_fingerprint(gpu, "cuda") != machine_fingerprint(this_machine, "cuda")
    assert machine_fingerprint(gpu, "cpu") == machine_fingerprint(this_machine, "cpu")


def test_a_cpu_repair_survives_a_cuda_toolkit_added_to_the_cache(this_machine, tmp_path):
    """Issue 25: a forced CUDA build put a toolkit from PyPI in the cache; detect then saw one more toolkit,
    the machine's one fingerprint changed, and the remembered cpu-amx-fault repair was lost."""
    remember(tmp_path, this_machine, amx_repair())
    cuda_repair = RememberedRepair(findings=["cuda-vmm-reserve-failed"], backend="cuda", run_id="run-cuda",
                                   recorded="2026-11-23T12:00:00", cmake_args_added=["-DGGML_CUDA_NO_VMM=ON"])
    remember(tmp_path, this_machine, cuda_repair)
    with_toolkit = make_facts(this_machine, toolkits=[*this_machine.cuda_toolkits,
                                                      toolkit("12.9.86", "/cache/toolkits/cuda-12.9")])
    assert [r.findings for r in recall(tmp_path, with_toolkit)] == [["cpu-amx-fault"]]  # the CUDA one is stale
    plan = configure(with_toolkit, load_params(None, ["backend=cpu"]), recall(tmp_path, with_toolkit))
    assert "-DGGML_NATIVE=OFF" in plan.cmake_args and plan.remembered_repairs == ["cpu-amx-fault"]
    assert sorted(r.backend for r in recall(tmp_path, this_machine)) == ["cpu", "cuda"]


def test_the_changes_a_repair_made_are_what_is_remembered(this_machine):
    first = configure(this_machine, load_params(None, ["backend=cpu"]))
    repaired = dataclasses.replace(first, attempt=2, cmake_args=[*first.cmake_args, "-DGGML_NATIVE=OFF"],
                                   remedies_applied=["cpu-amx-fault"])
    changes = plan_changes(first, repaired)
    assert (changes.findings, changes.backend, changes.cmake_args_added) == (["cpu-amx-fault"], "cpu",
                                                                             ["-DGGML_NATIVE=OFF"])
    assert changes.cmake_args_removed == [] and changes.env_set == {} and changes.build_isolation is None


def test_a_remembered_repair_starts_the_next_plan_with_its_reason(this_machine, tmp_path):
    remember(tmp_path, this_machine, amx_repair())
    assert [r.findings for r in recall(tmp_path, this_machine)] == [["cpu-amx-fault"]]
    params = load_params(None, ["backend=cpu"])
    plan = configure(this_machine, params, recall(tmp_path, this_machine))
    assert "-DGGML_NATIVE=OFF" in plan.cmake_args and plan.remembered_repairs == ["cpu-amx-fault"]
    [decision] = [d for d in plan.decisions if d.what == "remembered repair"]
    assert "repaired on this machine in run 20261123T120000Z-vm: cpu-amx-fault" in decision.reason

    forgotten = configure(this_machine, load_params(None, ["backend=cpu", "build.forget_repairs=true"]),
                          recall(tmp_path, this_machine))
    assert "-DGGML_NATIVE=OFF" not in forgotten.cmake_args and forgotten.remembered_repairs == []


def test_a_repair_is_replayed_only_for_its_backend_and_on_its_machine(this_machine, tmp_path):
    remember(tmp_path, this_machine, amx_repair())
    other_machine = dataclasses.replace(this_machine, cpu=dataclasses.replace(this_machine.cpu, model="another CPU"))
    assert recall(tmp_path, other_machine) == []
    cuda = dataclasses.replace(amx_repair(), backend="cuda")
    plan = configure(this_machine, load_params(None, ["backend=cpu"]), [cuda])
    assert "-DGGML_NATIVE=OFF" not in plan.cmake_args


def test_the_users_own_arguments_win_over_a_remembered_repair(this_machine, tmp_path):
    plan = configure(this_machine, load_params(None, ["backend=cpu", "build.cmake_args=[-DGGML_NATIVE=ON]"]),
                     [amx_repair()])
    assert "-DGGML_NATIVE=ON" in plan.cmake_args and "-DGGML_NATIVE=OFF" not in plan.cmake_args


def test_the_newest_repair_for_the_same_findings_replaces_the_older(this_machine, tmp_path):
    remember(tmp_path, this_machine, amx_repair("run-1"))
    remember(tmp_path, this_machine, amx_repair("run-2"))
    assert [r.run_id for r in recall(tmp_path, this_machine)] == ["run-2"]


def test_a_damaged_record_costs_only_the_shortcut(this_machine, tmp_path):
    path = repairs_file(tmp_path, machine_fingerprint(this_machine, "cpu"))
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    assert recall(tmp_path, this_machine) == []


def test_playbook_plan_shows_the_remembered_repair(this_machine, tmp_path, capsys):
    remember(tmp_path, this_machine, amx_repair())
    assert main(["plan", "--set", "backend=cpu", "--set", f"build.cache_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "remembered repair: -DGGML_NATIVE=OFF" in out and "cpu-amx-fault" in out
    assert "-DGGML_NATIVE=OFF" in out.split("CMAKE_ARGS=", 1)[1].splitlines()[0]  # the printed lines reproduce it
