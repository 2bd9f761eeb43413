"""The build plan: what ``build`` executes, every decision with its reason, every warning with its code."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from playbook.backends.plan import (  # noqa: F401  (Decision, PlanWarning, with_cmake_arg: the plan's own types)
    MULTIMODAL_OPTION,
    MULTIMODAL_OPTIONS,
    Decision,
    PlanWarning,
    cmake_define,
    with_cmake_arg,
)
from playbook.backends.rpc import RpcPlan
from playbook.toolkits.pypi import ToolkitRequest

PARALLEL_ENV = "CMAKE_BUILD_PARALLEL_LEVEL"


@dataclass
class BuildPlan:
    attempt: int
    backend: str
    cmake_args: list[str]
    env: dict[str, str]
    jobs: int
    build_isolation: bool
    extra_packages: list[str]
    source_kind: str
    source_version: str
    source_sha256: str
    source_path: str
    find_links: str
    cuda_toolkit: str = ""
    # Set when build must first assemble cuda_toolkit from PyPI wheels (playbook.toolkits.pypi).
    toolkit_request: ToolkitRequest | None = None
    cuda_architectures: str = ""
    gpu_targets: str = ""  # HIP: the gfx targets (AMDGPU_TARGETS)
    ccache: str = ""  # the ccache binary put in front of the compilers; "" for none
    ccache_remote: str = ""  # ccache's remote storage (CCACHE_REMOTE_STORAGE) shared with other machines
    wheel_cache: bool = True
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[PlanWarning] = field(default_factory=list)
    remedies_applied: list[str] = field(default_factory=list)
    remembered_repairs: list[str] = field(default_factory=list)  # finding ids replayed from this machine's record
    platform: str = ""  # linux, wsl, windows, macos
    generator: str = ""  # CMake generator; "" leaves scikit-build-core's choice
    # Lines that set every variable the user must set, per shell: "bash", "powershell", "cmd".
    shell_commands: dict[str, list[str]] = field(default_factory=dict)
    dll_directories: list[str] = field(default_factory=list)  # folders llama.dll's dependencies live in (Windows)
    runtime_env: dict[str, str] = field(default_factory=dict)  # variables the built package needs when imported
    extras: list[str] = field(default_factory=list)  # pip extras, e.g. ["server"]
    multimodal: bool = True  # libmtmd is built (llama-cpp-python's own default, LLAVA_BUILD=ON)
    required_symbols: list[str] = field(default_factory=list)
    blockers: list[PlanWarning] = field(default_factory=list)  # conflicts that make building pointless until fixed
    rpc: RpcPlan | None = None  # build.rpc: the client is in cmake_args; this says how to build rpc-server

    @property
    def cmake_args_string(self) -> str:
        return " ".join(self.cmake_args)

    def build_env(self) -> dict[str, str]:
        """Variables the build sees on top of the inherited environment."""
        return {**self.env, "CMAKE_ARGS": self.cmake_args_string, "FORCE_CMAKE": "1", PARALLEL_ENV: str(self.jobs)}

    def effective_compilers(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The compilers CMake will run for this plan in an environment that inherits ``environ``, as CMake picks
        them: -DCMAKE_<LANG>_COMPILER over CC/CXX; for CUDA's host compiler CUDAHOSTCXX over
        -DCMAKE_CUDA_HOST_COMPILER (CMake reads the variable into a normal variable that hides the cache
        entry), else nvcc's own default. Each as the file it resolves to on the build's PATH."""
        env = {**environ, **self.build_env()}
        given = dict(define for a in self.cmake_args if (define := cmake_define(a)))
        chosen = {"C": given.get("CMAKE_C_COMPILER") or env.get("CC") or "cc",
                  "CXX": given.get("CMAKE_CXX_COMPILER") or env.get("CXX") or "c++"}
        if self.cuda_toolkit or self.toolkit_request is not None:
            chosen["CUDA host"] = env.get("CUDAHOSTCXX") or given.get("CMAKE_CUDA_HOST_COMPILER") or "nvcc's default"
        return {lang: shutil.which(name, path=env.get("PATH")) or name for lang, name in chosen.items()}

    def warning_codes(self) -> list[str]:
        return [w.code for w in self.warnings]


def multimodal_built(cmake_args: list[str]) -> bool:
    """Whether the arguments build libmtmd: llama-cpp-python builds it unless its switch (LLAVA_BUILD, or a fork's
    MTMD_BUILD; the last one given) is off."""
    switches = {f"-D{name}" for name in MULTIMODAL_OPTIONS}
    values = [define[1] for a in cmake_args if (define := cmake_define(a)) and f"-D{define[0]}" in switches]
    return not values or values[-1].strip().upper() not in ("OFF", "0", "FALSE", "NO", "N")


def shell_lines(plan: BuildPlan, visual_studio_dev_shell: str = "", vcvarsall: str = "") -> dict[str, list[str]]:
    """Every variable the build and the built package need, in the syntax of this platform's shells."""
    variables = {**plan.build_env(), **plan.runtime_env}
    if plan.platform != "windows":
        return {"bash": [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]}
    powershell = [f"& '{visual_studio_dev_shell}' -Arch amd64 -SkipAutomaticLocation"] if visual_studio_dev_shell else []
    cmd = [f'call "{vcvarsall}" x64'] if vcvarsall else []
    powershell += ["$env:{} = '{}'".format(name, value.replace("'", "''")) for name, value in variables.items()]
    cmd += [f'set "{name}={value}"' for name, value in variables.items()]
    return {"powershell": powershell, "cmd": cmd}
