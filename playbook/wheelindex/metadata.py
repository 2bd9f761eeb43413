"""The record published beside a wheel: what decides where it can run, what verify measured, where it came from.

It is read from a run folder whose verify passed (:func:`record_from_run`): detect's facts (CPU flags, glibc),
the plan (backend, CMake arguments, the toolkit's release), the build (wheel, source digest) and verify's result
(offload, agreement, throughput, the machine code its listing found). What the wheel needs beyond its CPU code is
its backend's to say (:meth:`~playbook.backends.base.BackendUnit.wheel_requirements`), kept as plain values under
``requirements``. A run whose verify did not pass is refused: an index holds only wheels that ran.

Format 2 (``"format": 2``). A format 1 record (no ``format``) kept its backend's needs in a section named by the
backend (``"cuda": {"release", "sass", "ptx", "sass_listed"}``) and HIP's targets in ``gpu_targets``: it is read
as format 2 (:meth:`WheelRecord.upgrade_json`), so the wheels already published stay installable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.errors import PlaybookError
from playbook.files import sha256_of
from playbook.process import run_captured
from playbook.runfolder.folder import RunFolder
from playbook.runfolder.layout import Step

PROJECT = "llama-cpp-python"
CPU_FEATURES = "CPU features"  # in WheelRecord.unknown: the CPU instructions its code needs are not known
FORMAT = 2

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
    requirements: dict[str, Any] = field(default_factory=dict)
    """What it needs beyond its CPU code, as its backend recorded it (CUDA: ``release``, ``sass``, ``ptx``,
    ``sass_listed``; HIP: ``gpu_targets``); its backend's ``wheel_fit`` reads it. {} when nothing."""
    verified: VerifiedFigures = field(default_factory=lambda: VerifiedFigures(""))
    origin: Origin | None = None
    published: str = ""
    format: int = FORMAT
    """The record's format: 2 since the backend's needs moved under ``requirements``."""
    unknown: list[str] = field(default_factory=list)
    """What this record cannot say, for a wheel listed by a plain PEP 503 index with no playbook record beside it
    (upstream's ``whl/cu124``): "CPU features", its backend's GPU code ("GPU architectures (sm_XX, PTX)"), "glibc"
    where its platform tag names none. Only the check on the machine decides those. [] for a published record."""

    @classmethod
    def upgrade_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A format 1 record as format 2: its section named by its backend (and HIP's ``gpu_targets``) become
        ``requirements``."""
        if "requirements" in data:
            return data
        upgraded = dict(data)
        section = upgraded.pop(str(data.get("backend", "")), None)
        requirements = dict(section) if isinstance(section, dict) else {}
        targets = upgraded.pop("gpu_targets", "")
        if targets:
            requirements["gpu_targets"] = targets
        upgraded["requirements"] = requirements
        upgraded["format"] = FORMAT
        return upgraded

    @property
    def variant(self) -> str:
        """The index folder of this wheel: its backend and digest (wheels of one version share a file name)."""
        return f"{self.backend}-{self.sha256[:12]}"

    def describe(self) -> str:
        parts = [f"{self.backend}", f"llama-cpp-python {self.version}", self.python_tag + "-" + self.platform_tag]
        if self.requirements:
            parts.append(" ".join(f"{key} {describe_value(value)}" for key, value in self.requirements.items()))
        cpu = "unknown" if CPU_FEATURES in self.unknown else "runtime dispatch" if self.cpu.runtime_dispatch else ",".join(self.cpu.required_flags) or "baseline"
        parts.append(("native CPU: " if self.cpu.native else "CPU: ") + cpu)
        if self.unknown:
            parts.append("not recorded: " + ", ".join(self.unknown))
        return "; ".join(parts)


def describe_value(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    return str(value) if value != "" else "-"


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
    from playbook.backends import registry
    from playbook.facts import Facts
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.steps.repair import plan_toolkit_release
    from playbook.verify.result import VerifyResult
    from playbook.verify.units.gpu_cpu_agreement import GPU_CPU_AGREEMENT
    from playbook.verify.units.machine_code import MACHINE_CODE
    from playbook.verify.units.model_file import MODEL_FILE
    from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

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
    listing = verify.measured(MACHINE_CODE)
    machine_code = list(listing.listing.architectures) if listing is not None else []
    requirements = registry.unit(plan.backend).wheel_requirements(
        plan.cmake_args, plan_toolkit_release(plan, facts), machine_code)
    sweep = verify.measured(OFFLOAD_SWEEP)
    points = sweep.points if sweep is not None else []
    offloaded = [p for p in points if p.status == "ok"]
    best_tg = max((p.tg_tokens_per_s for p in offloaded if p.tg_tokens_per_s), default=None)
    best_pp = max((p.pp_tokens_per_s for p in offloaded if p.pp_tokens_per_s), default=None)
    last = points[-1] if points else None
    model = verify.measured(MODEL_FILE)
    agreement = verify.measured(GPU_CPU_AGREEMENT)
    gpu = facts.best_gpu
    figures = VerifiedFigures(
        verify.summary, last.offloaded_layers if last else None,
        model.n_layer + 1 if model is not None and model.n_layer else None,
        agreement.top1_agreement if agreement else None, agreement.ok if agreement else None, best_tg, best_pp,
        facts.cpu.model, gpu.name if gpu else "")
    origin = Origin(run.record().run_id, run.record().started, attempt, playbook_commit(),
                    sha256_of(layout.attestation) if layout.attestation.is_file() else "")
    record = WheelRecord(wheel.name, digest, wheel.stat().st_size, version, build.source.sha256, plan.backend,
                         python_tag, abi_tag, platform_tag, facts.os.glibc, cpu_target(cmake_args, facts.cpu.flags),
                         cmake_args, requirements, figures, origin)
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

