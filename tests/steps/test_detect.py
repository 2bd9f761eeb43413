from __future__ import annotations

import dataclasses
import glob
import importlib.metadata
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from conftest import DATA

from playbook.backends.cuda_probe import parse_nvcc_version, parse_nvidia_smi_csv
from playbook.facts import Facts
from playbook.serialization import from_dict
from playbook.steps.detect import CommandOutput, build_environment, detect, parse_compiler_version, parse_meminfo

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


def _asked(*args: str) -> str:
    """What a tool says when the test asks it directly, not through detect."""
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False)
    return done.stdout + done.stderr


def test_this_machine(this_machine):
    """What detect reports is what this machine's tools say when asked directly: every toolkit's nvcc
    (nvcc 13.0.88 at /usr/local/cuda on the development VM, without cuBLAS), CMake and ninja from the
    venv, each compiler, the interpreter, the memory, the cores; no NVIDIA GPU where no driver answers."""
    facts = this_machine
    scripts = str(Path(sys.executable).parent)
    search_path = os.pathsep.join([scripts, os.environ.get("PATH", "")])
    for tool in (facts.cmake, facts.ninja):
        path = shutil.which(tool.name, path=search_path)
        assert (tool.found, tool.path) == (bool(path), path or "")
        if path:
            said = re.search(r"(\d+\.\d+(?:\.\d+)*)", _asked(path, "--version"))[1]
            assert tool.version == said
    gcc = next(t for t in facts.compilers if t.name == "gcc")
    if path := shutil.which("gcc", path=search_path):
        assert gcc.path == path and gcc.version == _asked(path, "-dumpfullversion").strip()
    else:
        assert not gcc.found

    nvcc_roots = {Path(p).resolve().parent.parent for p in [shutil.which("nvcc", path=search_path),
                                                            *glob.glob("/usr/local/cuda*/bin/nvcc")] if p}
    nvcc_roots = {root for root in nvcc_roots if (root / "include" / "cuda_runtime.h").is_file()
                  or glob.glob(str(root / "targets" / "*" / "include" / "cuda_runtime.h"))}
    assert nvcc_roots <= {Path(t.root).resolve() for t in facts.cuda_toolkits}
    for toolkit in facts.cuda_toolkits:
        release = re.search(r"release \S+, V(\S+)", _asked(toolkit.nvcc, "--version"))[1]
        assert toolkit.version == release, toolkit.nvcc
        listed = re.findall(r"(?:compute|sm)_(\d+)", _asked(toolkit.nvcc, "--list-gpu-arch"))
        assert toolkit.gpu_architectures == sorted(set(listed), key=listed.index)
        assert toolkit.has_cublas == bool(glob.glob(str(Path(toolkit.root) / "**" / "libcublas.so*"), recursive=True))

    assert facts.python.version == platform.python_version() and facts.python.bits == struct.calcsize("P") * 8
    assert facts.python.pip_version == importlib.metadata.version("pip")
    assert facts.cpu.logical_cores == os.cpu_count()
    assert facts.memory.total_mib == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    smi = shutil.which("nvidia-smi")
    if smi is None or "NVIDIA-SMI has failed" in _asked(smi):
        assert facts.gpus == [] and not facts.driver.found
    # the facts survive a round trip through detect.json
    again = from_dict(Facts, json.loads(json.dumps(dataclasses.asdict(facts))))
    assert again == facts
