"""The record published beside a wheel: what decides where it can run, what verify measured, where it came from.

It is read from a run folder whose verify passed (:func:`record_from_run`): detect's facts (CPU flags, glibc),
the plan (backend, CMake arguments, CUDA architectures), the build (wheel, source digest) and verify's result
(offload, agreement, throughput, the CUDA machine code cuobjdump listed). A run whose verify did not pass is
refused: an index holds only wheels that ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from playbook.errors import PlaybookError
from playbook.files import sha256_of
from playbook.process import run_captured
from playbook.runfolder.folder import RunFolder
from playbook.runfolder.layout import Step

PROJECT = "llama-cpp-python"

# ggml's CMake switches for x86 instruction sets -> the /proc/cpuinfo flag each one needs (detect's names).
CPU_SWITCHES = {"GGML_AVX": "avx", "GGML_AVX2": "avx2", "GGML_FMA": "fma", "GGML_F16C": "f16c",
                "GGML_AVX512": "avx512f", "GGML_AVX512_VBMI": "avx512vbmi", "GGML_AVX512_VNNI": "avx512_vnni",
                "GGML_AVX512_BF16": "avx512_bf16", "GGML_AVX_VNNI": "avx_vnni", "GGML_AMX_TILE": "amx_tile"}
# Arguments that say how fast a build went, not what it made: left out of the record.
LAUNCHER_ARG = re.compile(r"^-D(CMAKE_\w+_COMPILER_LAUNCHER|GGML_CCACHE)=")


class PublishRefused(PlaybookError):
    """A run folder whose wheel is not fit for an index: verify did not pass, or the wheel is gone."""


@dataclass
class CpuTarget:
    """The CPU instructions the wheel's code was compiled to use."""

    native: bool
    """GGML_NATIVE (the default): compiled with -march=native for the CPU that built it."""
    required_flags: list[str] = field(default_factory=list)
    """The CPU flags (detect's names: avx2, avx512f ...) a machine must have to run it."""
    runtime_dispatch: bool = False
    """GGML_CPU_ALL_VARIANTS: every variant is in the wheel and the best one is picked when it loads."""


@dataclass
class CudaTarget:
    """The GPU code a CUDA wheel holds."""

    release: str
    """The CUDA toolkit release it was compiled with; a driver must support at least this one."""
    sass: list[str] = field(default_factory=list)
    """Real machine code: ``sm_86``, ``sm_120a``."""
    ptx: list[str] = field(default_factory=list)
    """PTX the driver compiles when it loads: ``compute_90``."""
    sass_listed: bool = False
    """``sass`` comes from cuobjdump on the wheel (verify), not only from the plan's architectures."""


@dataclass
class VerifiedFigures:
    """What verify measured on the machine that built it."""

    summary: str
    offloaded_layers: int | None = None
    offloadable_layers: int | None = None
    agreement_top1: float | None = None
    agreement_ok: bool | None = None
    best_tg_tokens_per_s: float | None = None
    best_pp_tokens_per_s: float | None = None
    cpu_model: str = ""
    gpu_name: str = ""


@dataclass
class Origin:
    """Where the wheel came from."""

    run_id: str
    run_started: str
    attempt: int
    playbook_commit: str
    """The publishing playbook's commit (a checkout's HEAD); "" for an installed playbook."""
    attestation_sha256: str
    """sha256 of the run folder's provenance.json, which attests the wheel's digest."""


@dataclass
class WheelRecord:
    wheel: str
    sha256: str
    size_bytes: int
    version: str
    source_sha256: str
    backend: str
    python_tag: str
    abi_tag: str
    platform_tag: str
    glibc: str
    """The glibc of the machine that built it: a machine with an older one cannot load its libraries."""
    cpu: CpuTarget
    cmake_args: list[str] = field(default_factory=list)
    cuda: CudaTarget | None = None
    gpu_targets: str = ""
    """HIP: the gfx targets."""
    verified: VerifiedFigures = field(default_factory=lambda: VerifiedFigures(""))
    origin: Origin | None = None
    published: str = ""

    @property
    def variant(self) -> str:
        """The index folder of this wheel: its backend and digest (wheels of one version share a file name)."""
        return f"{self.backend}-{self.sha256[:12]}"

    def describe(self) -> str:
        parts = [f"{self.backend}", f"llama-cpp-python {self.version}", self.python_tag + "-" + self.platform_tag]
        if self.cuda:
            parts.append(f"CUDA {self.cuda.release} sass {','.join(self.cuda.sass) or '-'} "
                         f"ptx {','.join(self.cuda.ptx) or '-'}")
        cpu = "runtime dispatch" if self.cpu.runtime_dispatch else ",".join(self.cpu.required_flags) or "baseline"
        parts.append(("native CPU: " if self.cpu.native else "CPU: ") + cpu)
        return "; ".join(parts)


def wheel_tags(name: str) -> tuple[str, str, str, str]:
    """(version, python tag, abi tag, platform tag) of a wheel file name."""
    stem = name.removesuffix(".whl").split("-")
    if len(stem) < 5:
        raise PlaybookError(f"{name} is not a wheel file name (name-version-python-abi-platform.whl)")
    return stem[1], stem[-3], stem[-2], stem[-1]


def cmake_values(cmake_args: list[str]) -> dict[str, str]:
    """``-DNAME=value`` and ``-DNAME:TYPE=value`` -> {NAME: value}; the last one given wins, as in CMake."""
    values = {}
    for arg in cmake_args:
        if arg.startswith("-D") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            values[name.split(":")[0]] = value
    return values


def is_on(value: str) -> bool:
    return value.strip().upper() in ("ON", "1", "TRUE", "YES", "Y")


def cpu_target(cmake_args: list[str], build_machine_flags: list[str]) -> CpuTarget:
    """What the CPU code needs: a native build needs every flag of the CPU that built it (as detect saw them);
    a portable one the instruction sets its arguments switch on."""
    values = cmake_values(cmake_args)
    if is_on(values.get("GGML_CPU_ALL_VARIANTS", "OFF")) and is_on(values.get("GGML_BACKEND_DL", "OFF")):
        return CpuTarget(native=False, runtime_dispatch=True)
    native = is_on(values.get("GGML_NATIVE", "ON"))
    if native:
        return CpuTarget(True, sorted(build_machine_flags))
    return CpuTarget(False, sorted(flag for switch, flag in CPU_SWITCHES.items() if is_on(values.get(switch, "OFF"))))


def cuda_target(release: str, cmake_architectures: str, listed_sass: list[str]) -> CudaTarget:
    """CMake's ``86`` is both sm_86 machine code and compute_86 PTX; ``86-real`` machine code only; ``90-virtual``
    PTX only. The machine code cuobjdump listed (verify), when there is a list, is what the wheel holds."""
    sass, ptx = [], []
    for item in filter(None, cmake_architectures.split(";")):
        number, _, kind = item.partition("-")
        if kind != "virtual":
            sass.append(f"sm_{number}")
        if kind != "real":
            ptx.append(f"compute_{number}")
    return CudaTarget(release, list(listed_sass) if listed_sass else sass, ptx, bool(listed_sass))


def verified_attempt(run: RunFolder) -> int:
    """The attempt whose verify passed, refusing a run that has none, naming the run and what to do."""
    record = run.record()
    passed = [s.attempt for s in record.steps if s.step == Step.VERIFY and s.outcome.value in ("ok",)]
    if not passed:
        verifies = [f"attempt {s.attempt}: {s.outcome.value}" for s in record.steps if s.step == Step.VERIFY]
        said = "; ".join(verifies) or "verify never ran"
        raise PublishRefused(f"run {run.run_id} has no passed verify ({said}): only a verified wheel is published; "
                             f"finish it with `playbook resume {run.path}` or run the chain again, then publish")
    return passed[-1]


def record_from_run(run_dir: Path) -> tuple[WheelRecord, Path]:
    """The record of the run's verified wheel and the wheel's path."""
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.steps.detect import Facts
    from playbook.verify.result import VerifyResult

    run = RunFolder(run_dir)
    if not run.exists():
        raise PublishRefused(f"{run_dir} is not a run folder (no {run.layout.run_record.name}): give the folder a "
                             "`playbook run` wrote under outputs/")
    attempt = verified_attempt(run)
    layout = run.layout
    verify = run.read(VerifyResult, layout.verify_result(attempt))
    if not verify.ok:
        raise PublishRefused(f"run {run.run_id}: {layout.verify_result(attempt).name} says verify did not pass "
                             f"({verify.summary}); fix the build and run it again before publishing")
    build = run.read(BuildResult, layout.build_result(attempt))
    plan = run.read(BuildPlan, layout.plan(build.attempt))
    facts = run.read(Facts, layout.detect_facts)
    if build.wheel is None:
        raise PublishRefused(f"run {run.run_id}: attempt {attempt} recorded no wheel")
    wheel = layout.wheel_dir(attempt) / build.wheel.name
    if not wheel.is_file():
        raise PublishRefused(f"run {run.run_id}: its wheel {layout.in_run(wheel)} is not in the run folder (an "
                             "archive without wheelhouse/?); publish from the folder the run wrote")
    digest = sha256_of(wheel)
    if digest != build.wheel.sha256:
        raise PublishRefused(f"run {run.run_id}: {wheel.name} has sha256 {digest}, the build recorded "
                             f"{build.wheel.sha256}; the file changed after the run: `playbook check {run.path}`")
    version, python_tag, abi_tag, platform_tag = wheel_tags(wheel.name)
    cmake_args = [a for a in plan.cmake_args if not LAUNCHER_ARG.match(a)]
    cuda = None
    if plan.backend.value == "cuda":
        release = next((t.version for t in facts.cuda_toolkits if t.root == plan.cuda_toolkit), "")
        if not release and plan.toolkit_request is not None:
            release = plan.toolkit_request.release
        listed = verify.cuda_elf.architectures if verify.cuda_elf is not None else []
        cuda = cuda_target(".".join(release.split(".")[:2]), plan.cuda_architectures, listed)
    offloaded = [p for p in verify.points if p.status == "ok"]
    best_tg = max((p.tg_tokens_per_s for p in offloaded if p.tg_tokens_per_s), default=None)
    best_pp = max((p.pp_tokens_per_s for p in offloaded if p.pp_tokens_per_s), default=None)
    last = verify.points[-1] if verify.points else None
    gpu = facts.best_gpu
    figures = VerifiedFigures(
        verify.summary, last.offloaded_layers if last else None,
        int(verify.model["n_layer"]) + 1 if verify.model.get("n_layer") is not None else None,
        verify.agreement.top1_agreement if verify.agreement else None,
        verify.agreement.ok if verify.agreement else None, best_tg, best_pp, facts.cpu.model, gpu.name if gpu else "")
    origin = Origin(run.record().run_id, run.record().started, attempt, playbook_commit(),
                    sha256_of(layout.attestation) if layout.attestation.is_file() else "")
    record = WheelRecord(wheel.name, digest, wheel.stat().st_size, version, build.source.sha256, plan.backend.value,
                         python_tag, abi_tag, platform_tag, facts.os.glibc, cpu_target(cmake_args, facts.cpu.flags),
                         cmake_args, cuda, plan.gpu_targets if plan.backend.value == "hip" else "", figures, origin)
    return record, wheel


def vocabulary_of_run(run_dir: Path) -> Path | None:
    """The tokenizer vocabulary verify's synthetic model was written with, from the run's source (an install's
    check writes the same model); None when the source is gone."""
    from playbook.steps.build import BuildResult
    from playbook.verify.units.model_file import vocab_from_source

    run = RunFolder(run_dir)
    build = run.read(BuildResult, run.layout.build_result(verified_attempt(run)))
    source = Path(build.source.path)
    if not source.exists():
        return None
    try:
        return vocab_from_source(source, run.params().cache_dir)
    except (PlaybookError, OSError):
        return None


def playbook_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return ""
    found = run_captured(["git", "rev-parse", "HEAD"], cwd=root, timeout_s=30)
    return found.stdout.strip() if found.returncode == 0 else ""

