"""macOS: Metal on Apple silicon, CPU elsewhere, and the Rosetta trap."""

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


def configure_metal(planner: Planner) -> None:
    """``-DGGML_METAL=on``. With the shader library embedded (GGML_METAL_EMBED_LIBRARY), the Metal kernels' source
    goes into the library and the Metal framework compiles it when the model loads: no ``metal`` compiler needed
    at build time. Without it, the build runs ``xcrun metal``, which the Command Line Tools alone lack."""
    apple = planner.facts.apple
    planner.cmake_args.append("-DGGML_METAL=on")
    planner.set_cmake_arg("-DGGML_METAL_EMBED_LIBRARY=on")
    if apple.metal_compiler:
        why = f"the kernels are compiled when the model loads; a metal compiler is present too ({apple.metal_compiler})"
    else:
        why = ("xcrun finds no metal compiler" + (f" ({apple.metal_error.splitlines()[-1]})" if apple.metal_error else "")
               + ": embedding the kernels' source avoids needing it at build time")
        planner.warn("metal-compiler-missing",
                     "xcrun -f metal finds no metal compiler (Command Line Tools without Xcode's Metal toolchain): the "
                     "plan embeds the Metal library (GGML_METAL_EMBED_LIBRARY=on); a build with it off fails with "
                     "'unable to find utility \"metal\"' (install Xcode, or `xcodebuild -downloadComponent MetalToolchain`)")
    planner.decide("Metal library", "embedded (-DGGML_METAL_EMBED_LIBRARY=on)", why)
    if not apple.command_line_tools:
        planner.block("xcode-tools-missing", "xcode-select -p names no developer tools: no compiler to build with; "
                      "run `xcode-select --install`")
    chip = apple.chip or planner.facts.os.machine
    planner.decide("Apple GPU", chip, "Metal uses the GPU of the Apple silicon chip")
