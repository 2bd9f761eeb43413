"""macOS: which backend a Mac builds (Metal on Apple silicon, CPU elsewhere), and the Rosetta trap. Metal's own
plan is :mod:`playbook.backends.metal`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playbook.params import Backend

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner


def choose_backend(planner: Planner) -> Backend:
    facts, wanted = planner.facts, planner.params.backend
    if facts.os.rosetta:
        planner.block("rosetta-python",
                      "this Python is x86_64 running under Rosetta on Apple silicon: its wheel would be x86_64 and could "
                      "not use Metal; install an arm64 Python (python.org's universal2 installer, or "
                      "`arch -arm64 /usr/bin/python3 -m venv .venv`) and run the playbook with it")
    if wanted is Backend.CUDA:
        planner.warn("cuda-not-on-macos", "backend cuda asked for on macOS: NVIDIA CUDA does not exist there; "
                     "use backend metal")
    if wanted is Backend.HIP:
        planner.warn("hip-not-on-macos", "backend hip asked for on macOS: ROCm/HIP does not exist there; "
                     "use backend metal")
    if wanted in (Backend.AUTO, Backend.METAL) and facts.os.apple_silicon and not facts.os.rosetta:
        planner.decide("backend", "metal", f"Apple silicon ({facts.os.machine}): Metal (-DGGML_METAL=on)")
        return Backend.METAL
    if wanted is Backend.METAL and not facts.os.rosetta:
        planner.warn("metal-needs-apple-silicon", "backend metal asked for on an Intel Mac: llama.cpp's Metal "
                     "backend needs Apple silicon")
    if wanted is Backend.VULKAN:
        planner.decide("backend", "vulkan", "asked for in parameters (MoltenVK on macOS)")
        return Backend.VULKAN
    reason = "asked for in parameters (backend: cpu)" if wanted is Backend.CPU else "no Metal for this Python"
    planner.decide("backend", "cpu", reason)
    planner.warn("cpu-only", "CPU-only build: the wheel will not offload any layer to a GPU")
    return Backend.CPU
