"""The C and C++ compilers a build runs, chosen so that the wheel's libraries leave the C++ runtime to libstdc++.so.6.

A compiler that copies the runtime into every library it links (a relocated GCC whose ``-lstdc++`` finds only
``libstdc++.a``; see :mod:`playbook.toolkits.cxx_runtime`) gives the Python process two C++ runtimes. Detect
probes each C++ compiler's linkage (``Tool.links_cxx_runtime_shared``); this module reads which compiler CMake
would run, as CMake picks it, and plans another one, in the build environment and in CMake's arguments alike,
when that one copies the runtime. Where the environment names a compiler (``CC``, ``CXX``), the plan sets the
same variable, since a variable the build inherits would otherwise keep choosing the copying compiler.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from playbook.backends.plan import BackendPlan, Decision, PlanWarning, defined_value
from playbook.facts import Facts, Tool
from playbook.toolkits.cxx_runtime import c_compiler_beside, is_cxx_compiler

DEFAULT_CXX = "c++"  # the first name CMake's CMAKE_CXX_COMPILER search tries


def cxx_compiler_used(cmake_args: list[str], env: Mapping[str, str], inherited: Mapping[str, str]) -> tuple[str, str]:
    """The C++ compiler CMake would run and what names it: -DCMAKE_CXX_COMPILER, else CXX in the plan's
    environment, else CXX inherited from the machine's, else the first compiler CMake searches for."""
    given = defined_value(cmake_args, "CMAKE_CXX_COMPILER")
    if given:
        return given, "-DCMAKE_CXX_COMPILER"
    if env.get("CXX"):
        return env["CXX"], "CXX in build.env"
    if inherited.get("CXX"):
        return inherited["CXX"], "CXX in the environment"
    return DEFAULT_CXX, "CMake's default"


def compiler_tool(facts: Facts, name: str) -> Tool | None:
    """Detect's record of a compiler, by the name it was looked up under or by its resolved path."""
    found = [t for t in facts.compilers if t.found]
    by_name = next((t for t in found if t.name == name), None)
    if by_name is not None or not Path(name).is_absolute():
        return by_name
    resolved = Path(name).resolve()
    return next((t for t in found if Path(t.path).resolve() == resolved), None)


def shared_runtime_compilers(facts: Facts) -> list[Tool]:
    """C++ compilers detect found linking the runtime shared, each file once, with a C compiler beside them."""
    chosen: dict[Path, Tool] = {}
    for tool in facts.compilers:
        if not (tool.found and tool.links_cxx_runtime_shared and is_cxx_compiler(tool.path)):
            continue
        c = c_compiler_beside(Path(tool.path))
        if c is not None and c.is_file():
            chosen.setdefault(Path(tool.path).resolve(), tool)
    return list(chosen.values())


def plan_cxx_compilers(facts: Facts, cmake_args: list[str], env: Mapping[str, str]) -> BackendPlan:
    """Keep the C++ compiler CMake would run when it links the runtime shared; else plan one that does, in CC,
    CXX and CMake's arguments; else warn. No change where nothing was probed (Windows, macOS, old facts)."""
    name, named_by = cxx_compiler_used(cmake_args, env, facts.environment)
    used = compiler_tool(facts, name)
    if used is None or used.links_cxx_runtime_shared is None:
        return BackendPlan()
    if used.links_cxx_runtime_shared:
        return BackendPlan(decisions=(Decision(
            "C++ runtime", "libstdc++.so.6, shared",
            f"{used.path} ({named_by}) links it shared: a probe library it linked needs libstdc++.so.6"),))
    candidates = shared_runtime_compilers(facts)
    if not candidates:
        return BackendPlan(warnings=(PlanWarning(
            "cxx-runtime-static",
            f"{used.path} ({named_by}) copies the C++ runtime into every library it links, and no C++ compiler found "
            "here links it shared: the wheel would carry its own runtime beside the libstdc++.so.6 Python loads, and "
            "may crash at model load; install the distribution's g++ (apt install g++) or set CXX to a compiler whose "
            "-lstdc++ finds libstdc++.so"),))
    cxx = candidates[0]
    c = str(c_compiler_beside(Path(cxx.path)))
    return BackendPlan(
        cmake_args=(f"-DCMAKE_C_COMPILER={c}", f"-DCMAKE_CXX_COMPILER={cxx.path}"),
        env={"CC": c, "CXX": cxx.path},
        decisions=(Decision(
            "C++ compiler", cxx.path,
            f"{used.path} ({named_by}) copies the C++ runtime into every library it links (probed: its probe library "
            f"defines std::locale::classic() and needs no libstdc++.so.6), which puts two C++ runtimes in one process; "
            f"{cxx.path} links libstdc++.so.6 shared: CC={c} and CXX={cxx.path} in the build environment and in "
            "CMake's arguments"),))
