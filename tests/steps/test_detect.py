from __future__ import annotations

import dataclasses
import json

from conftest import DATA

from playbook.serialization import from_dict
from playbook.steps.detect import (
    CommandOutput,
    Facts,
    build_environment,
    detect,
    parse_compiler_version,
    parse_meminfo,
    parse_nvcc_version,
    parse_nvidia_smi_csv,
)

DETECT = DATA / "detect"


def test_nvcc_banners():
    assert parse_nvcc_version((DETECT / "nvcc-13.0-linux.txt").read_text()) == "13.0.88"
    assert parse_nvcc_version((DETECT / "nvcc-12.4-windows.txt").read_text()) == "12.4.99"
    assert parse_nvcc_version((DETECT / "nvcc-11.8-linux.txt").read_text()) == "11.8.89"
    assert parse_nvcc_version("bash: nvcc: command not found") == ""


def test_compiler_banners():
    assert parse_compiler_version((DETECT / "gcc-debian-12.txt").read_text()) == "12.2.0"
    assert parse_compiler_version((DETECT / "gcc-ubuntu-14.txt").read_text()) == "14.2.0"
    assert parse_compiler_version((DETECT / "clang-18.txt").read_text()) == "18.1.3"
    assert parse_compiler_version((DETECT / "cl-msvc-17.10.txt").read_text()) == "19.40.33811"


def test_nvidia_smi_query():
    driver, gpus = parse_nvidia_smi_csv((DETECT / "nvidia-smi-query-h100.csv").read_text())
    assert driver.found and driver.version == "580.159.04"
    assert [(g.name, g.compute_capability, g.arch, g.memory_total_mib) for g in gpus] == [
        ("NVIDIA H100 80GB HBM3", "9.0", "90", 81559)
    ]
    _, two = parse_nvidia_smi_csv((DETECT / "nvidia-smi-query-2gpu.csv").read_text())
    assert [g.arch for g in two] == ["86", "89"]
    driver, none = parse_nvidia_smi_csv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    assert none == [] and not driver.found


def test_meminfo():
    memory = parse_meminfo("MemTotal:       24684544 kB\nMemFree:  100 kB\nMemAvailable:   24299000 kB\n")
    assert (memory.total_mib, memory.available_mib) == (24106, 23729)


def test_environment_is_filtered_and_redacted():
    env = build_environment({"CMAKE_ARGS": "-DGGML_CUDA=on", "HOME": "/root", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz",
                             "CUDA_PATH": "/usr/local/cuda", "PIP_INDEX_URL": "https://user:hunter22@example.com/simple"})
    assert env["CMAKE_ARGS"] == "-DGGML_CUDA=on"
    assert env["CUDA_PATH"] == "/usr/local/cuda"
    assert "HOME" not in env
    assert env["HF_TOKEN"] == "<redacted>"
    assert "hunter22" not in env["PIP_INDEX_URL"]


def test_missing_tools_are_facts_not_errors(tmp_path):
    def nothing_runs(args, timeout):
        return CommandOutput(None, "No such file or directory")

    facts = detect(environ={"PATH": str(tmp_path)}, runner=nothing_runs, python=str(tmp_path / "python"))
    assert not facts.llama_cpp.found
    assert all(not tool.found for tool in facts.compilers if tool.name in ("gcc", "clang"))


def test_this_machine(this_machine):
    """What this machine really has: nvcc 13.0 without cuBLAS, no GPU, CMake and ninja from the venv."""
    facts = this_machine
    assert facts.python.bits == 64 and facts.python.pip_version
    assert facts.cmake.found and facts.ninja.found
    assert any(t.found and t.version for t in facts.compilers)
    cuda13 = [t for t in facts.cuda_toolkits if t.version.startswith("13.0")]
    if cuda13:  # the development and CI machines of this project
        assert cuda13[0].has_cccl and not cuda13[0].has_cublas
    # the facts survive a round trip through detect.json
    again = from_dict(Facts, json.loads(json.dumps(dataclasses.asdict(facts))))
    assert again == facts
