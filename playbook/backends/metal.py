"""Metal: ``-DGGML_METAL=on`` on Apple silicon, with the shader library embedded.

Reads detect's ``apple`` (the chip, ``xcrun -f metal``, the Command Line Tools) and ``os``. Which backend a
Mac builds is the platform's choice (:mod:`playbook.steps.configure.apple`); this unit plans Metal itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from playbook.backends.base import Assessment, BackendUnit
from playbook.params import Backend

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner
    from playbook.steps.detect import Facts


class MetalBackend(BackendUnit):
    name = Backend.METAL
    cmake_switch = "-DGGML_METAL=on"
    facts_read = ("apple", "os")
    failure_family = "metal"
    profile = "metal"
    auto_rank = 30
    device_log_name = "Metal"
    status = "planned only"

    def assess(self, planner: Planner) -> Assessment:
        os = planner.facts.os
        if os.system != "Darwin":
            return Assessment(blocked_because="Metal exists only on macOS")
        if os.apple_silicon and not os.rosetta:
            return Assessment(f"Apple silicon ({os.machine})")
        return Assessment(blocked_because="no Metal for this Python")

    def requested(self, planner: Planner) -> Backend:
        if planner.facts.os.system != "Darwin":
            planner.warn("metal-not-here", "backend metal asked for, but Metal exists only on macOS with Apple "
                         "silicon: building CPU-only")
            return Backend.CPU
        return super().requested(planner)

    def configure(self, planner: Planner) -> None:
        """With the shader library embedded (GGML_METAL_EMBED_LIBRARY), the Metal kernels' source goes into the
        library and the Metal framework compiles it when the model loads: no ``metal`` compiler needed at build
        time. Without it, the build runs ``xcrun metal``, which the Command Line Tools alone lack."""
        apple = planner.facts.apple
        super().configure(planner)
        planner.set_cmake_arg("-DGGML_METAL_EMBED_LIBRARY=on")
        if apple.metal_compiler:
            why = f"the kernels are compiled when the model loads; a metal compiler is present too ({apple.metal_compiler})"
        else:
            why = ("xcrun finds no metal compiler" + (f" ({apple.metal_error.splitlines()[-1]})" if apple.metal_error
                                                      else "")
                   + ": embedding the kernels' source avoids needing it at build time")
            planner.warn("metal-compiler-missing",
                         "xcrun -f metal finds no metal compiler (Command Line Tools without Xcode's Metal toolchain): "
                         "the plan embeds the Metal library (GGML_METAL_EMBED_LIBRARY=on); a build with it off fails "
                         "with 'unable to find utility \"metal\"' (install Xcode, or `xcodebuild -downloadComponent "
                         "MetalToolchain`)")
        planner.decide("Metal library", "embedded (-DGGML_METAL_EMBED_LIBRARY=on)", why)
        if not apple.command_line_tools:
            planner.block("xcode-tools-missing", "xcode-select -p names no developer tools: no compiler to build with; "
                          "run `xcode-select --install`")
        chip = apple.chip or planner.facts.os.machine
        planner.decide("Apple GPU", chip, "Metal uses the GPU of the Apple silicon chip")

    def device(self, facts: Facts) -> str:
        return facts.apple.chip
