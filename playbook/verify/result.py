"""What verify leaves in ``verify-attempt-N.json``: every unit's value in a field of its own, and a
record per unit (measured, skipped and why, or where verify stopped) with its findings and files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from playbook.knowledge.failures import Finding
from playbook.toolkits.cxx_runtime import RuntimeCopies
from playbook.verify.agreement import Agreement
from playbook.verify.backend_libraries import LibraryCheck
from playbook.verify.cuda_elf import CudaElf
from playbook.verify.hip_bundles import HipBundles
from playbook.verify.launcher import ChildOutcome
from playbook.verify.rpc_server import RpcOffload
from playbook.verify.server_check import ServerCheck
from playbook.verify.settings import BenchSettings
from playbook.verify.sweep import SweepPoint
from playbook.verify.tune import TuneResult
from playbook.verify.yardsticks import LlamaBench


@dataclass
class UnitRecord:
    """One verify unit's turn."""

    name: str
    """The unit (``import-probe``, ``offload-sweep`` ...)."""
    status: str
    """measured, skipped, or stopped verify (nothing after it could run)."""
    note: str = ""
    """Why it was skipped, or why verify stopped there."""
    findings: list[str] = field(default_factory=list)
    """The ids of what it found."""
    files: list[str] = field(default_factory=list)
    """The run-folder files it wrote, relative to the run folder."""
    duration_s: float | None = None
    """How long it took."""
    passed: bool = True
    """False when its check failed even without a finding."""


@dataclass
class VerifyResult:
    ok: bool
    wheel: str
    site_dir: str
    probe: ChildOutcome
    model_path: str
    model: dict[str, Any]
    threads: int
    layer_counts: list[int]
    points: list[SweepPoint] = field(default_factory=list)
    agreement: Agreement | None = None
    findings: list[Finding] = field(default_factory=list)
    csv_file: str = ""
    plot_files: list[str] = field(default_factory=list)
    summary: str = ""
    llama_bench: LlamaBench | None = None
    gpu_bandwidth_gb_per_s: float | None = None
    tg_limit_tokens_per_s: float | None = None  # bandwidth / model bytes: no decoder can beat it
    library_file: str | None = None  # the llama.cpp library the binding loaded (llama_cpp.llama_cpp._lib)
    runtime_env: dict[str, str] = field(default_factory=dict)  # the plan's variables every child got
    dll_directories: list[str] = field(default_factory=list)  # passed to child.py (os.add_dll_directory)
    extras: list[str] = field(default_factory=list)  # installed with the wheel: llama-cpp-python[extras]
    server: ServerCheck | None = None  # python -m llama_cpp.server, when the plan has the server extra
    settings: BenchSettings | None = None  # every throughput measurement's, llama-bench's too
    tune: TuneResult | None = None  # verify.tune's search, when verify.tune is true
    # A CUDA wheel: the architectures its ggml-cuda library holds machine code for (cuobjdump --list-elf).
    cuda_elf: CudaElf | None = None
    # A HIP wheel: the gfx targets its ggml-hip library holds code objects for (its .hip_fatbin bundles).
    hip_bundles: HipBundles | None = None
    # The wheel's libraries that carry their own copy of the C++ runtime (two or more: a finding).
    cxx_runtime: RuntimeCopies | None = None
    # Why only the build and its machine code were checked: the wheel cannot load on this machine ("" otherwise).
    compiled_only: str = ""
    # Why the GPU checks (logits agreement, offloaded layers) did not run; "" when they did.
    gpu_skipped: str = ""
    units: list[UnitRecord] = field(default_factory=list)  # each unit's turn, in the order they ran
    # The backend's own ggml libraries (ggml-blas, ggml-rpc): in the wheel, loaded, used.
    backend_libraries: list[LibraryCheck] = field(default_factory=list)
    rpc: RpcOffload | None = None  # build.rpc: the servers, logits and throughput through rpc-server
