"""The import probe: the installed wheel imported in a child from a clean folder. It records the
llama.cpp library the binding loaded and whether it can offload to a GPU, checks the symbols the
parameters require, and decides what the GPU checks after it may expect."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from playbook.knowledge.failures import Finding, diagnose_text, finding_for, unrecognised
from playbook.verify.launcher import SYMBOLS_SCRIPT, ChildOutcome, run_child
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.units.machine_code import MACHINE_CODE

LIB_PATH_VARIABLE = "LLAMA_CPP_LIB_PATH"  # llama-cpp-python 0.3.36 loads libllama from there when set
MTMD_SYMBOL = "llama_cpp.mtmd_cpp.mtmd_init_from_file"  # loads libmtmd: checked when the plan built it
COMPILED_ONLY = "compiled only"  # verify's summary when the wheel cannot load here and the plan knew it


@dataclass
class ImportProbe:
    """What the import told, and what it means for the GPU checks."""

    outcome: ChildOutcome
    """The probe child: status, its result (version, module, library, system info, GPU offload)."""
    library_file: str | None = None
    """The llama.cpp library the binding loaded (llama_cpp.llama_cpp._lib)."""
    gpu_offload: bool = False
    """The wheel offloads here: a GPU build on a machine with the GPU. Agreement and the sweep use it."""
    built_for_gpu: bool = False
    """The wheel is a GPU build, whether or not this machine has the GPU."""
    expected_here: tuple[str, ...] = ()
    """Finding ids that are no failure on this machine (a GPU build without a GPU says 'no device')."""
    gpu_skipped: str = ""
    """Why the GPU checks do not run here ("" when they do)."""


class ImportProbeUnit:
    name = "import-probe"
    value_type = ImportProbe

    def skip_reason(self, ctx: VerifyContext) -> str:
        return ""

    def measure(self, ctx: VerifyContext) -> Measured[ImportProbe]:
        site_dir = ctx.wheel.site_dir
        probe_log = ctx.files("probe").log()
        outcome = run_child(["probe"], site_dir, probe_log, ctx.timeout_s, ctx.request.python,
                            extra_env=ctx.wheel.child_env)
        probe = ImportProbe(outcome)
        if outcome.status != "ok" and ctx.target.compiled_only:
            ctx.log(f"the wheel does not import here, as the plan said: {ctx.target.compiled_only}")
            return Measured(probe, [], [probe_log], stop=f"{COMPILED_ONLY}: {ctx.target.compiled_only}")
        if outcome.status != "ok":
            fallback = (finding_for("process-crash", outcome.error_tail, stage="import") if outcome.status == "crash"
                        else unrecognised(outcome.error_tail, "import"))
            return Measured(probe, outcome.findings or [fallback], [probe_log],
                            stop=f"the wheel does not import: {outcome.status}")
        result = outcome.result
        assert result is not None, "a child whose status is ok wrote its result line"
        findings: list[Finding] = []
        symbols_log = ctx.files("symbols").log()
        probe.library_file = result.get("library")
        ctx.log(f"llama.cpp library loaded: {probe.library_file}")
        if runtimes := result.get("runtime_libraries"):
            ctx.log(f"C++ and OpenMP runtimes loaded with it: {', '.join(runtimes)}")
        symbols = [*ctx.params.verify.required_symbols, *([MTMD_SYMBOL] if ctx.target.multimodal else [])]
        findings += check_required_symbols(site_dir, list(dict.fromkeys(symbols)), ctx.request.python, symbols_log,
                                           ctx.timeout_s, extra_env=ctx.wheel.child_env)
        if not Path(result["module"]).resolve().is_relative_to(site_dir.resolve()):
            line = (f"playbook: llama_cpp imported from outside the wheel: {result['module']} "
                    f"(expected under {site_dir})")
            _append_line(probe_log, line)
            findings.append(finding_for("foreign-llama-cpp", line, stage="import"))
        findings += prebuilt_lib_findings(probe.library_file, ctx.target.runtime_env, probe_log)
        findings += self._gpu_expectations(ctx, probe)
        return Measured(probe, findings, [probe_log, symbols_log], note="GPU checks skipped: no GPU on this machine"
                        if probe.gpu_skipped else "")

    def _gpu_expectations(self, ctx: VerifyContext, probe: ImportProbe) -> list[Finding]:
        target, result = ctx.target, probe.outcome.result or {}
        listing = ctx.value(MACHINE_CODE)
        reports_gpu = bool(result.get("supports_gpu_offload"))
        if target.rpc is not None and not target.expect_gpu:
            # llama_supports_gpu_offload() is also true when the RPC client is built: offload then goes to rpc-server
            # processes (the rpc-offload unit), not to a device of this wheel's own backend.
            reports_gpu = False
        # llama_supports_gpu_offload() asks for a GPU device at run time: False for any wheel on a machine
        # without a GPU. There the wheel's GPU library, with machine code in it, is what shows a GPU build.
        probe.built_for_gpu = reports_gpu or (not target.gpu_present and listing is not None
                                              and bool(listing.listing.library))
        ctx.log(f"imported llama_cpp {result.get('version')}; GPU offload supported: {reports_gpu}"
                + ("" if target.gpu_present else " (no GPU on this machine)"))
        findings = []
        if target.expect_gpu and not probe.built_for_gpu:
            evidence = ("llama_supports_gpu_offload() returned False" if target.gpu_present or listing is None
                        else f"no GPU library in the wheel ({listing.listing.error})")
            findings.append(finding_for("cpu-only-build", evidence, stage="import"))
        probe.gpu_offload = reports_gpu and target.gpu_present
        if probe.built_for_gpu and not target.gpu_present:
            # Without a GPU (and usually without its driver) the GPU backend says so when it initialises:
            # "no CUDA-capable device", or cudaErrorInsufficientDriver when libcuda is absent.
            probe.expected_here = ("no-gpu-visible", "cpu-only-build", "driver-too-old")
            probe.gpu_skipped = ("no NVIDIA GPU on this machine (detect found none): GPU/CPU logits agreement and the "
                                 "offloaded-layer sweep were skipped; the wheel was imported and run on the CPU"
                                 + (", and its GPU machine code listed" if listing is not None else ""))
            ctx.log(probe.gpu_skipped)
        return findings



def check_required_symbols(site_dir: Path, symbols: list[str], python: str = sys.executable,
                           log_file: Path | None = None, timeout_s: float = 120,
                           extra_env: dict[str, str] | None = None) -> list[Finding]:
    """One finding per dotted name the installed wheel lacks (verify.required_symbols): the known failure
    when the knowledge base recognises why (``mtmd-not-built``), else ``missing-symbol``."""
    if not symbols:
        return []
    with tempfile.TemporaryDirectory(prefix="playbook-symbols-") as tmp:
        log = log_file or Path(tmp) / "symbols"
        outcome = run_child(list(symbols), site_dir, log, timeout_s, python, script=SYMBOLS_SCRIPT, extra_env=extra_env)
    if outcome.status != "ok" or outcome.result is None:
        return [finding_for("missing-symbol", f"{name}: the check did not run ({outcome.status}): "
                            f"{outcome.error_tail[-300:]}", stage="import") for name in symbols]
    findings = []
    for name, reason in outcome.result["missing"].items():
        known = diagnose_text(reason, stage="import")
        findings.append(known[0] if known and known[0].id != "shared-library-not-found"
                        else finding_for("missing-symbol", f"{name} not found: {reason}", stage="import"))
    return findings


def library_in(library_file: str | None, folder: str) -> bool:
    """Whether the loaded library file lies in ``folder`` (symbolic links resolved on both sides)."""
    if not library_file:
        return False
    return Path(library_file).resolve().parent == Path(folder).expanduser().resolve()


def prebuilt_lib_findings(library_file: str | None, runtime_env: dict[str, str], log_file: Path) -> list[Finding]:
    """``prebuilt-lib-not-used`` when the plan points LLAMA_CPP_LIB_PATH at a library folder and the
    binding loaded its library from anywhere else (the line also goes to the probe's log)."""
    prebuilt = runtime_env.get(LIB_PATH_VARIABLE)
    if not prebuilt or library_in(library_file, prebuilt):
        return []
    line = f"playbook: the binding loaded {library_file}, not the prebuilt library in {prebuilt} ({LIB_PATH_VARIABLE})"
    _append_line(log_file, line)
    return [finding_for("prebuilt-lib-not-used", line, stage="import")]


def _append_line(log_file: Path, line: str) -> None:
    with log_file.open("a") as log:
        log.write(line + "\n")


IMPORT_PROBE = ImportProbeUnit()
