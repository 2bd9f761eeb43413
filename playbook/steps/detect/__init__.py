"""Detect: what this machine has for building and running llama-cpp-python, as :class:`~playbook.facts.Facts`
(``detect.json``).

The host's facts are :mod:`playbook.steps.detect.host`'s. Every backend's are its unit's probe
(:meth:`~playbook.backends.base.BackendUnit.probe`), asked in the registry's order with the unit's own parameter
section; each unit then names the devices it sees in the facts, which make ``Facts.devices``, one list for every
backend. Nothing here names a backend: a new one brings its probe with its unit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playbook.backends import registry
from playbook.facts import Facts
from playbook.probing import (
    CommandOutput,
    CommandRunner,
    ProbeContext,
    detect_tool,
    parse_first_version,
    parse_ldconfig,
    run_command,
)
from playbook.steps.detect.host import (
    BUILD_ENV_NAMES,
    CCACHE_DISTRIBUTION,
    build_environment,
    ccache_bin_folders,
    detect_apple_silicon,
    detect_ccache,
    detect_compilers,
    detect_cpu,
    detect_installed_llama_cpp,
    detect_memory,
    detect_os,
    detect_python,
    detect_visual_studio,
    host_facts,
    parse_ccache_features,
    parse_compiler_version,
    parse_meminfo,
    parse_vswhere_json,
    tool_search_path,
    versioned_gxx,
)
from playbook.steps.detect.summary import describe_devices, devices_of, offload_devices

if TYPE_CHECKING:
    from playbook.params import Params
    from playbook.runfolder.folder import RunFolder

__all__ = [
    "BUILD_ENV_NAMES", "CCACHE_DISTRIBUTION", "CommandOutput", "CommandRunner", "build_environment",
    "ccache_bin_folders", "describe_devices", "detect", "detect_apple_silicon", "detect_ccache", "detect_compilers",
    "detect_cpu", "detect_for", "detect_installed_llama_cpp", "detect_memory", "detect_os", "detect_python",
    "detect_step", "detect_tool", "detect_visual_studio", "devices_of", "offload_devices", "parse_ccache_features",
    "parse_compiler_version", "parse_first_version", "parse_ldconfig", "parse_meminfo", "parse_vswhere_json",
    "run_command", "versioned_gxx",
]


def detect(
    environ: Mapping[str, str] | None = None,
    runner: CommandRunner = run_command,
    python: str = sys.executable,
    import_paths: list[str] | None = None,
    cache_dir: Path | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Facts:
    """What this machine has. ``import_paths``: where the interpreter imports from (default: this one's
    ``sys.path``, which holds ``PYTHONPATH``); a package installed there with ``pip --target`` keeps its
    programs beside it. ``cache_dir``: the playbook's cache, whose assembled toolkits a probe may find (None: no
    cache). ``settings``: each unit's parameter section by the unit's name (a unit not named gets its defaults)."""
    environ = dict(os.environ if environ is None else environ)
    search_path = tool_search_path(environ, python)
    paths = list(sys.path if import_paths is None else import_paths)
    fields = host_facts(environ, search_path, runner, python, paths)
    given = settings or {}
    for unit in registry.units():
        section = given.get(unit.name)
        context = ProbeContext(environ, search_path, runner, python,
                               settings=unit.settings_type() if section is None else section, cache_dir=cache_dir)
        fields.update(unit.probe(context))
    facts = Facts(**fields)
    facts.devices = [device for unit in registry.units() for device in unit.devices(facts)]
    return facts


def detect_for(params: Params) -> Facts:
    """What this machine has, looking first where the parameters point: each unit's own section (a folder of
    headers, a ROCm folder), and the playbook's cache (its own toolkits)."""
    return detect(cache_dir=params.cache_dir,
                  settings={unit.name: params.settings(unit.name) for unit in registry.units()})


def detect_step(run: RunFolder) -> Facts:
    """The detect notebook's work: what this machine has, written to detect.json."""
    from playbook.runfolder.folder import Outcome
    from playbook.runfolder.layout import Step

    params = run.params()
    facts = detect_for(params)
    run.write(facts, run.layout.detect_facts)
    run.finish_step(Step.DETECT, 1, Outcome.OK, f"{facts.os.pretty_name}; {describe_devices(facts)}")
    return facts
