"""The C++ runtime, once per process: a wheel library that carries its own copy (see
:mod:`playbook.toolkits.cxx_runtime`) beside the libstdc++.so.6 the process loads anyway.

Read from the files and the import probe's mapped libraries, after a good import and before any child loads a
model: two runtimes crash at model load (or run by luck, where their versions match), so verify stops here and
the finding's remedy rebuilds with a compiler of this machine that links the runtime shared.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from playbook.knowledge.failures import finding_for
from playbook.toolkits.cxx_runtime import RuntimeCopies, runtime_copies
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.units.import_probe import IMPORT_PROBE

FAILURE_ID = "cxx-runtime-copies"


def library_folder(ctx: VerifyContext) -> Path:
    return ctx.wheel.site_dir / "llama_cpp" / "lib"


class CxxRuntimeUnit:
    name = "cxx-runtime"
    value_type = RuntimeCopies

    def skip_reason(self, ctx: VerifyContext) -> str:
        if not sys.platform.startswith("linux"):
            return "the C++ runtime's copies are read from ELF libraries (Linux)"
        if shutil.which("readelf") is None:
            return "no readelf (binutils) to read the libraries' symbols"
        if not library_folder(ctx).is_dir():
            return "the wheel has no llama_cpp/lib folder"
        return ""

    def measure(self, ctx: VerifyContext) -> Measured[RuntimeCopies]:
        mapped = (ctx.require(IMPORT_PROBE).outcome.result or {}).get("runtime_libraries") or []
        copies = runtime_copies(library_folder(ctx), mapped)
        if not copies.clash:
            return Measured(copies, note=copies.error)
        beside = f", beside {copies.shared_runtime} that the process loads" if copies.shared_runtime else ""
        evidence = (f"playbook: {', '.join(copies.libraries)} carr{'ies its' if len(copies.libraries) == 1 else 'y their'} "
                    f"own copy of the C++ runtime (std::locale::classic() defined){beside}")
        ctx.log(evidence)
        return Measured(copies, findings=[finding_for(FAILURE_ID, evidence, stage="load")], passed=False,
                        stop="two C++ runtimes in one process: a model load may crash (see the finding)")



CXX_RUNTIME = CxxRuntimeUnit()
