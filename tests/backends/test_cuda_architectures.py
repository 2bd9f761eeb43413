"""Issue 25: ``cuda.architectures`` is checked before anything is built, against the toolkit's own list
(``nvcc --list-gpu-arch``) and, where no nvcc runs, against ``knowledge/cuda.yaml``."""

from __future__ import annotations

import dataclasses
import os

import pytest
from machines import DETECT, machine

from playbook.backends.cuda_probe import detect_cuda_toolkits, parse_nvcc_gpu_list
from playbook.errors import ParameterError
from playbook.params import PARAMS_DIR, load_params
from playbook.probing import CommandOutput
from playbook.steps.configure import configure

NVCC_13_LIST = (DETECT / "nvcc-13.0-list-gpu-arch.txt").read_text()


def blocker(plan, code: str) -> str:
    return next((b.message for b in plan.blockers if b.code == code), "")


def test_nvcc_s_own_list_is_read():
    assert parse_nvcc_gpu_list(NVCC_13_LIST) == ["75", "80", "86", "87", "88", "89", "90", "100", "110", "103",
                                                 "120", "121"]
    assert parse_nvcc_gpu_list("nvcc fatal   : Unknown option '--list-gpu-arch'\n") == []


def test_detect_asks_each_toolkit_s_nvcc(tmp_path):
    root = tmp_path / "cuda-13.0"
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "bin" / "nvcc").write_text("")
    (root / "include" / "cuda_runtime.h").write_text("")
    asked = []

    def nvcc(args: list[str], timeout: float) -> CommandOutput:
        asked.append(args[1:])
        return CommandOutput(0, NVCC_13_LIST if args[1] == "--list-gpu-arch" else
                             "Cuda compilation tools, release 13.0, V13.0.88\n")

    toolkits = [t for t in detect_cuda_toolkits({"CUDA_PATH": str(root)}, os.defpath, nvcc) if t.root == str(root)]
    assert [t.version for t in toolkits] == ["13.0.88"] and ["--list-gpu-arch"] in asked
    assert toolkits[0].gpu_architectures[:2] == ["75", "80"]


def test_nvcc_s_spelling_is_refused_when_the_parameters_are_read():
    with pytest.raises(ParameterError) as refused:
        load_params(None, ["cuda.architectures=sm_999"])
    assert "cuda.architectures = 'sm_999'" in str(refused.value) and "write 999" in str(refused.value)
    with pytest.raises(ParameterError, match="'90;sm_89' is not|'sm_89' is not"):
        load_params(None, ["cuda.architectures=90;sm_89"])
    for good in ("native", "90", "86;89;120", "90a", "80-real", "all-major", "100f;120a-virtual"):
        assert load_params(None, [f"cuda.architectures={good}"]).settings("cuda").architectures == good


def test_an_unknown_architecture_is_refused_with_backend_auto_too():
    """The machine has no NVIDIA GPU, so auto builds CPU-only; the value is still refused, not ignored."""
    plan = configure(machine("no-gpu"), load_params(None, ["cuda.architectures=999"]))
    message = blocker(plan, "cuda-arch-unknown")
    assert plan.backend == "cpu" and message, plan.warnings
    assert "cuda.architectures = '999'" in message and "knowledge/cuda.yaml" in message
    assert "accepted: 50, 52" in message and "120, 121" in message  # the table, where no nvcc runs
    valid = configure(machine("no-gpu"), load_params(None, ["cuda.architectures=90"]))
    assert not blocker(valid, "cuda-arch-unknown")
    # a valid value is not silently ignored either: the plan says it does not apply to a CPU build
    ignored = ("cuda.architectures=90 set, but the wheel is built for cpu: ignored (set backend to build for what "
               "they configure)")
    assert [str(w) for w in valid.warnings if w.code == "settings-ignored"] == [ignored]
    assert "settings-ignored" not in configure(machine("no-gpu"), load_params()).warning_codes()


def test_backend_cuda_checks_against_the_toolkit_s_own_list():
    facts = machine("gpu-machine-h200")
    facts.cuda_toolkits = [dataclasses.replace(t, gpu_architectures=parse_nvcc_gpu_list(NVCC_13_LIST))
                           for t in facts.cuda_toolkits]
    cuda = PARAMS_DIR / "cuda-native.yaml"
    plan = configure(facts, load_params(cuda, ["cuda.architectures=999"]))
    message = blocker(plan, "cuda-arch-unknown")
    assert plan.backend == "cuda" and "nvcc --list-gpu-arch" in message
    assert "accepted: 75, 80, 86, 87, 88, 89, 90, 100, 110, 103, 120, 121" in message
    assert "-DCMAKE_CUDA_ARCHITECTURES=999" in plan.cmake_args  # planned as asked, and refused: nothing is built
    dropped = configure(facts, load_params(cuda, ["cuda.architectures=90;61"]))
    assert "CUDA 13.0 dropped sm_61" in blocker(dropped, "cuda-arch-unsupported")
    assert not dropped.blockers[1:] and not blocker(dropped, "cuda-arch-unknown")
    assert configure(facts, load_params(cuda, ["cuda.architectures=90;120"])).blockers == []


def test_the_toolkit_s_list_wins_over_the_table():
    """An architecture the table gives CUDA 13.0 but this nvcc does not list is refused, naming the list."""
    facts = machine("gpu-machine-h200")
    facts.cuda_toolkits = [dataclasses.replace(t, gpu_architectures=["80", "90"]) for t in facts.cuda_toolkits]
    plan = configure(facts, load_params(PARAMS_DIR / "cuda-native.yaml", ["cuda.architectures=90;120"]))
    assert "does not compile sm_120 (nvcc --list-gpu-arch: 80, 90)" in blocker(plan, "cuda-arch-unsupported")
