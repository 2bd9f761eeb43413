"""Metal: ``-DGGML_METAL=on`` on Apple silicon, with the shader library embedded.

Reads detect's ``apple`` (the chip, ``xcrun -f metal``, the Command Line Tools) and ``os``. Metal is macOS's own
choice (``native_to``): there ``backend: auto``, and a backend that does not exist on macOS, are chosen by
:meth:`MetalBackend.choose_natively` (Metal on Apple silicon, CPU elsewhere, and the Rosetta trap).
"""

from __future__ import annotations

import platform
from typing import Any

from playbook.backends.base import Assessment, BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, PlanDraft
from playbook.facts import Apple, Device, Facts
from playbook.probing import CommandRunner, ProbeContext

ROSETTA_FIX = ("this Python is x86_64 running under Rosetta on Apple silicon: its wheel would be x86_64 and could "
               "not use Metal; install an arm64 Python (python.org's universal2 installer, or "
               "`arch -arm64 /usr/bin/python3 -m venv .venv`) and run the playbook with it")


class MetalBackend(BackendUnit):
    name = "metal"
    cmake_switch = "-DGGML_METAL=on"
    facts_read = ("apple", "os")
    failure_family = "metal"
    profile = "metal"
    auto_rank = 30
    upstream_variants = ("metal",)
    device_log_name = "Metal"
    platforms = ("macos",)
    native_to = "macos"
    status = "planned only"

    def assess(self, inputs: BackendInputs) -> Assessment:
        os = inputs.facts.os
        if os.system != "Darwin":
            return Assessment(blocked_because="Metal exists only on macOS")
        if os.apple_silicon and not os.rosetta:
            return Assessment(f"Apple silicon ({os.machine})")
        return Assessment(blocked_because="no Metal for this Python")

    def requested(self, inputs: BackendInputs) -> Choice:
        if inputs.facts.os.system != "Darwin":
            draft = PlanDraft(inputs)
            draft.warn("metal-not-here", "backend metal asked for, but Metal exists only on macOS with Apple "
                       "silicon: building CPU-only")
            return Choice("cpu", draft.result(), "Metal exists only on macOS")
        return self.choose_natively(inputs)

    def choose_natively(self, inputs: BackendInputs) -> Choice:
        """macOS's choice, for ``backend: auto``, ``metal``, or a backend that does not exist there: Metal on Apple
        silicon with an arm64 Python; otherwise the CPU, saying why."""
        facts, draft = inputs.facts, PlanDraft(inputs)
        if facts.os.rosetta:
            draft.block("rosetta-python", ROSETTA_FIX)
        usable = self.assess(inputs)
        if usable.usable:
            draft.decide("backend", self.name, f"{usable.usable_because}: Metal ({self.cmake_switch})")
            return Choice(self.name, draft.result())
        if inputs.wanted == self.name and not facts.os.rosetta:
            draft.warn("metal-needs-apple-silicon", "backend metal asked for on an Intel Mac: llama.cpp's Metal "
                       "backend needs Apple silicon")
        return Choice("cpu", draft.result(), usable.blocked_because)

    def plan(self, inputs: BackendInputs) -> BackendPlan:
        """With the shader library embedded (GGML_METAL_EMBED_LIBRARY), the Metal kernels' source goes into the
        library and the Metal framework compiles it when the model loads: no ``metal`` compiler needed at build
        time. Without it, the build runs ``xcrun metal``, which the Command Line Tools alone lack."""
        draft = PlanDraft(inputs)
        apple = inputs.facts.apple
        draft.add_cmake_arg(self.cmake_switch)
        draft.add_cmake_arg("-DGGML_METAL_EMBED_LIBRARY=on")
        if apple.metal_compiler:
            why = f"the kernels are compiled when the model loads; a metal compiler is present too ({apple.metal_compiler})"
        else:
            why = ("xcrun finds no metal compiler" + (f" ({apple.metal_error.splitlines()[-1]})" if apple.metal_error
                                                      else "")
                   + ": embedding the kernels' source avoids needing it at build time")
            draft.warn("metal-compiler-missing",
                       "xcrun -f metal finds no metal compiler (Command Line Tools without Xcode's Metal toolchain): "
                       "the plan embeds the Metal library (GGML_METAL_EMBED_LIBRARY=on); a build with it off fails "
                       "with 'unable to find utility \"metal\"' (install Xcode, or `xcodebuild -downloadComponent "
                       "MetalToolchain`)")
        draft.decide("Metal library", "embedded (-DGGML_METAL_EMBED_LIBRARY=on)", why)
        if not apple.command_line_tools:
            draft.block("xcode-tools-missing", "xcode-select -p names no developer tools: no compiler to build with; "
                        "run `xcode-select --install`")
        chip = apple.chip or inputs.facts.os.machine
        draft.decide("Apple GPU", chip, "Metal uses the GPU of the Apple silicon chip")
        return draft.result()

    def devices(self, facts: Facts) -> list[Device]:
        return [Device(self.name, facts.apple.chip, detail="Apple silicon GPU")] if facts.apple.chip else []

    def probe(self, context: ProbeContext) -> dict[str, Any]:
        """On macOS only: the chip, ``xcrun -f metal``, the Command Line Tools and the macOS version."""
        return {"apple": detect_apple(context.runner)} if platform.system() == "Darwin" else {}


# ---------------------------------------------------------------- detecting: probes


def detect_apple(runner: CommandRunner) -> Apple:
    chip = runner(["sysctl", "-n", "machdep.cpu.brand_string"], 10)
    metal = runner(["xcrun", "-f", "metal"], 30)
    tools = runner(["xcode-select", "-p"], 10)
    version = runner(["sw_vers", "-productVersion"], 10)
    ok = metal.returncode == 0 and metal.stdout.strip().startswith("/")
    return Apple(
        chip=chip.stdout.strip() if chip.returncode == 0 else "",
        metal_compiler=metal.stdout.strip().splitlines()[0] if ok else "",
        metal_error="" if ok else metal.stdout.strip()[-300:],
        command_line_tools=tools.stdout.strip() if tools.returncode == 0 else "",
        macos_version=version.stdout.strip() if version.returncode == 0 else "",
    )
