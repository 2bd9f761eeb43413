"""The backend's own ggml library, really there and really used: a wheel built with ``-DGGML_BLAS=ON`` that
silently left BLAS out (CMake found no BLAS, a cached wheel of another build) looks like any CPU wheel. So for a
backend whose unit names a library (``ggml_library``: ggml-blas) and for the RPC client (build.rpc: ggml-rpc):

- in the wheel: the library file is among the installed wheel's files;
- loaded: the import probe's child had it mapped, and ggml's registry listed its device (``ggml_device``: BLAS);
- used: the sweep's prompt processing graph was split between backends (llama.cpp's ``sched_reserve`` line:
  ``splits = N / 1`` with N > 1 for the prompt), which happens only when another backend than the CPU took
  operations; a CPU-only wheel has one split. (The RPC client's use is the rpc-offload unit's measurement.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from playbook.backends import registry, rpc
from playbook.verify.backend_libraries import LibraryCheck, library_files, prompt_graph_splits
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.offload_sweep import FILES, OFFLOAD_SWEEP


@dataclass
class BackendLibraries:
    checks: list[LibraryCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(not c.problems for c in self.checks)


class BackendLibraryUnit:
    name = "backend-library"
    value_type = BackendLibraries

    def skip_reason(self, ctx: VerifyContext) -> str:
        return "" if expected_libraries(ctx) else "the backend has no ggml library of its own to check"

    def measure(self, ctx: VerifyContext) -> Measured[BackendLibraries]:
        probe, sweep = ctx.require(IMPORT_PROBE), ctx.value(OFFLOAD_SWEEP)
        result = probe.outcome.result or {}
        first_log = ctx.files(FILES).log(f"ngl-{sweep.layer_counts[0]}") if sweep and sweep.layer_counts else None
        splits = prompt_graph_splits(first_log.read_text(errors="replace")) if first_log and first_log.is_file() \
            else None
        checks = []
        for library, device, used_by_splits in expected_libraries(ctx):
            check = LibraryCheck(library)
            found = library_files(ctx.wheel.site_dir, library)
            check.file = found[0].relative_to(ctx.wheel.site_dir).as_posix() if found else ""
            check.loaded = any(Path(m).name.startswith(f"lib{library}.") or Path(m).name.startswith(f"{library}.")
                               for m in result.get("mapped_libraries") or [])
            if not check.file:
                check.problems.append(f"no {library} library in the wheel")
            if not check.loaded:
                check.problems.append(f"{library} was not loaded by the import")
            if device:
                check.device = next((d for d in result.get("devices") or [] if d.split(":")[0] == device), "")
                if not check.device:
                    check.problems.append(f"ggml's registry lists no {device} device "
                                          f"(devices: {', '.join(result.get('devices') or []) or 'unknown'})")
            if used_by_splits:
                check.prompt_graph_splits = splits
                if splits is None or splits < 2:
                    check.problems.append(f"the prompt's graph was not split off the CPU (splits = {splits}): "
                                          f"{device or library} took no operation")
            ctx.log(f"{library}: {check.file or 'absent'}; loaded {check.loaded}; device {check.device or '-'}; "
                    f"prompt graph splits {check.prompt_graph_splits}"
                    + (f"; problems: {'; '.join(check.problems)}" if check.problems else ""))
            checks.append(check)
        value = BackendLibraries(checks)
        files = [ctx.files("probe").log()] + ([first_log] if first_log else [])
        note = "; ".join(f"{c.library} in the wheel, loaded" + (f" and used (prompt graph in {c.prompt_graph_splits} "
                                                                 "splits)" if c.prompt_graph_splits else "")
                         for c in checks if not c.problems)
        return Measured(value, files=files, passed=value.ok, note=note,
                        summary="" if value.ok else "; ".join(p for c in checks for p in c.problems))



def expected_libraries(ctx: VerifyContext) -> list[tuple[str, str, bool]]:
    """(library, its device, whether the sweep must show it used) for the plan's backend and the RPC client."""
    expected = []
    unit = registry.unit(ctx.target.backend) if ctx.target.backend else None
    if unit is not None and unit.ggml_library:
        expected.append((unit.ggml_library, unit.ggml_device, not unit.offloads))
    if ctx.target.rpc is not None:
        expected.append((rpc.CLIENT_LIBRARY, "", False))
    return expected


BACKEND_LIBRARY = BackendLibraryUnit()
