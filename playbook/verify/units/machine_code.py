"""The machine-code listing: which GPU architectures the wheel's GPU library holds code for, read from
the file itself (no GPU needed, so a wheel built on a CI or Docker builder is checked too).

One lister per backend in :data:`LISTERS`: CUDA's is ``cuobjdump --list-elf`` (:mod:`playbook.verify.cuda_elf`),
HIP's reads the offload bundles of ggml-hip's ``.hip_fatbin`` section (:mod:`playbook.verify.hip_bundles`).
A backend with code objects of its own adds its lister there, with its listing's type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from playbook.serialization import as_type
from playbook.verify.cuda_elf import CudaElf, list_elf
from playbook.verify.hip_bundles import HipBundles, list_bundles
from playbook.verify.measurement import Measured, VerifyContext


class CodeListing(Protocol):
    """What a lister finds: the GPU library, the architectures it holds code for, those it lacks."""

    library: str
    architectures: list[str]
    missing: list[str]
    error: str

    @property
    def ok(self) -> bool: ...


@dataclass(frozen=True)
class Lister:
    """How one backend's machine code is listed."""

    tool: str
    """The tool's name; its output goes to ``verify-logs/attempt-N/<tool>.log``."""
    run: Callable[[Path, str, str, Path, Path], CodeListing]
    """(site folder, the plan's targets, toolkit root, cache folder, log file) -> the listing."""
    value_type: type
    """The listing's type (a dataclass): what verify-attempt-N.json is read back as."""


LISTERS: dict[str, Lister] = {lister.tool: lister for lister in (
    Lister("cuobjdump", list_elf, CudaElf),
    Lister("hip-fatbin", list_bundles, HipBundles),
)}


@dataclass
class MachineCodeListing:
    """A listing and the lister that made it."""

    tool: str
    listing: CodeListing

    def __post_init__(self) -> None:
        if isinstance(self.listing, dict):  # read back from JSON: the lister names the listing's type
            self.listing = as_type(LISTERS[self.tool].value_type, self.listing)


class MachineCode:
    name = "machine-code"
    value_type = MachineCodeListing

    def skip_reason(self, ctx: VerifyContext) -> str:
        if ctx.target.machine_code not in LISTERS:
            return f"no machine-code listing for the {ctx.target.backend or 'plan'}'s backend"
        if not ctx.target.gpu_targets:
            return "the plan names no GPU architectures"
        return ""

    def measure(self, ctx: VerifyContext) -> Measured[MachineCodeListing]:
        lister = LISTERS[ctx.target.machine_code]
        log_file = ctx.files(lister.tool).log()
        listing = lister.run(ctx.wheel.site_dir, ctx.target.gpu_targets, ctx.target.toolkit, ctx.request.cache_dir,
                             log_file)
        ctx.log(f"machine code in {Path(listing.library).name or 'the wheel'}: "
                f"{', '.join(listing.architectures) or 'none'}"
                + (f"; missing {', '.join(listing.missing)}" if listing.missing else "")
                + (f" ({listing.error})" if listing.error else ""))
        note = (f"machine code for {', '.join(listing.architectures) or 'no architecture'}"
                + (f", missing {', '.join(listing.missing)}" if listing.missing else "")
                + (f" ({listing.error})" if listing.error else ""))
        return Measured(MachineCodeListing(lister.tool, listing), files=[log_file], passed=listing.ok, note=note)



MACHINE_CODE = MachineCode()
