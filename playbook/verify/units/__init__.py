"""The registry of verify's units, in the order they run: each reads only the values of units before it.

A new measurement: a module here with one class (``name``, ``value_type``, ``skip_reason``, ``measure``; see
:class:`playbook.verify.measurement.Measurement`) and one ``registry.register(...)`` line below, placed
after the units whose values it reads (``after="offload-sweep"`` from elsewhere). Its value is kept under its name
in the verify result's ``measurements``; its files are named under its namespace (``ctx.files(...)``).
"""

from __future__ import annotations

from playbook.verify.measurement import Registry
from playbook.verify.units.backend_library import BACKEND_LIBRARY
from playbook.verify.units.cxx_runtime import CXX_RUNTIME
from playbook.verify.units.gpu_cpu_agreement import GPU_CPU_AGREEMENT
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.llama_bench import LLAMA_BENCH
from playbook.verify.units.machine_code import MACHINE_CODE
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP
from playbook.verify.units.rpc_offload import RPC_OFFLOAD
from playbook.verify.units.runtime_tune import TUNE
from playbook.verify.units.server import SERVER
from playbook.verify.units.throughput import THROUGHPUT


def default_registry() -> Registry:
    """Every unit verify runs, in order: a fresh registry, so a caller may add to its own copy."""
    registry = Registry()
    registry.register(MACHINE_CODE)  # before the probe: without a GPU, the machine code shows a GPU build
    registry.register(IMPORT_PROBE)  # stops verify when the wheel does not import
    registry.register(CXX_RUNTIME)  # before any model load: two C++ runtimes crash there, after a good import
    registry.register(MODEL_FILE)  # stops verify when the model cannot be written or read
    registry.register(GPU_CPU_AGREEMENT)
    registry.register(OFFLOAD_SWEEP)
    registry.register(BACKEND_LIBRARY)  # after the sweep, whose first point shows whether the library took work
    registry.register(RPC_OFFLOAD)  # build.rpc: after the local sweep, which its plot is drawn against
    registry.register(SERVER)
    registry.register(LLAMA_BENCH)  # at the sweep's layer counts, when the sweep measured any
    registry.register(TUNE)  # from the sweep's memory use; through llama-bench too when it was built
    registry.register(THROUGHPUT)  # last: the sweep's table with every yardstick read against it
    return registry
