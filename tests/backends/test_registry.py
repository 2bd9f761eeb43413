"""Every backend is one unit: registered once, naming facts, knowledge and a profile that exist; the
configure package and the backends import without a cycle."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

import pytest
from conftest import H100, make_facts
from machines import DETECT

from playbook import resources
from playbook.backends import registry
from playbook.backends.vulkan import parse_vulkaninfo_summary
from playbook.facts import Facts, HipGpu
from playbook.knowledge.failures import FAMILIES
from playbook.params import load_params
from playbook.process import run_captured

PACKAGE = Path(__file__).resolve().parents[2] / "playbook"
KNOWLEDGE = PACKAGE / "knowledge"


def test_every_backend_value_has_exactly_one_unit():
    names = [u.name for u in registry.units()]
    assert len(set(names)) == len(names)
    for name in registry.parameter_values()[1:]:
        assert load_params(None, [f"backend={name}"]).backend == name
    with pytest.raises(Exception, match="is not one the playbook knows; use one of"):
        registry.unit("opencl")


@pytest.mark.parametrize("unit", registry.units(), ids=lambda u: u.name)
def test_a_unit_names_what_exists(unit):
    fields = {f.name for f in dataclasses.fields(Facts)}
    assert set(unit.facts_read) <= fields, f"{unit.name}: {set(unit.facts_read) - fields} are not Facts fields"
    for name in unit.knowledge:
        assert (KNOWLEDGE / name).is_file(), f"{unit.name}: knowledge/{name} missing"
    assert (resources.params_dir() / f"{unit.profile}.yaml").is_file(), f"{unit.name}: params/{unit.profile}.yaml"
    assert not unit.failure_family or unit.failure_family in FAMILIES
    assert unit.status in ("runs here", "runs here (lavapipe) and on the GPU machine", "runs on the GPU machine",
                           "compiled only", "planned only")


def test_auto_order_is_the_documented_preference():
    assert [u.name for u in registry.automatic()] == ["cuda", "hip", "metal", "vulkan"]
    assert registry.unit(registry.FALLBACK).name == "cpu"
    assert set(registry.parameter_values()) == {"auto"} | {u.name for u in registry.units()} - {"prebuilt"}


def test_the_device_a_backend_would_use(this_machine):
    """Verify asks this before it calls a GPU wheel's run on the CPU: a lavapipe-only machine has a Vulkan
    device (configure makes CPU-type devices visible) but no NVIDIA GPU."""
    def device(backend: str, facts: Facts) -> str:
        return registry.unit(backend).device(facts)

    lavapipe_only = make_facts(this_machine, gpus=[])
    _, lavapipe_only.vulkan.devices = parse_vulkaninfo_summary((DETECT / "vulkaninfo-summary-lavapipe.txt").read_text())
    lavapipe_only.rocm.gpus, lavapipe_only.apple.chip = [], ""
    assert device("vulkan", lavapipe_only) == "llvmpipe (LLVM 15.0.6, 256 bits)"
    assert device("cuda", lavapipe_only) == device("hip", lavapipe_only) == device("metal", lavapipe_only) == ""
    assert device("cpu", lavapipe_only) == ""

    nvidia = make_facts(lavapipe_only, gpus=[H100])
    nvidia.vulkan.devices = []
    nvidia.rocm.gpus = [HipGpu("Radeon RX 7900 XTX", "gfx1100")]
    nvidia.apple.chip = "Apple M3 Pro"
    assert device("cuda", nvidia) == H100.name and device("vulkan", nvidia) == ""
    assert device("hip", nvidia) == "Radeon RX 7900 XTX" and device("metal", nvidia) == "Apple M3 Pro"


def test_verify_reads_every_backend_s_buffers():
    from playbook.verify.launcher import gpu_memory_mib

    log = "\n".join(f"load_tensors: {name}0 model buffer size =   100.00 MiB" for name in registry.device_log_names())
    assert gpu_memory_mib(log) == 100.0 * len(registry.device_log_names())
    assert {"CUDA", "Vulkan", "ROCm", "Metal"} <= set(registry.device_log_names())


# ---------------------------------------------------------------- the import graph


def module_imports(path: Path, module: str) -> set[str]:
    """The playbook modules ``module`` imports when it is imported: module-level imports, neither those under
    ``if TYPE_CHECKING:`` nor those inside functions. Importing ``a.b.c`` imports the packages ``a`` and ``a.b``."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    closed = set()
    for name in found:
        parts = name.split(".")
        closed |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return {name for name in closed if name.startswith("playbook")}


def playbook_modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    modules = playbook_modules()
    return {name: {m for m in module_imports(path, name) if m in modules and m != name}
            for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]], prefixes: tuple[str, ...]) -> list[list[str]]:
    """The import cycles of ``graph`` that pass through a module named with one of ``prefixes``."""
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph.get(name, ())):
            if state.get(target) == "open":
                cycle = trail[trail.index(target):] + [target]
                if any(m.startswith(prefixes) for m in cycle):
                    cycles.append(cycle)
            elif target not in state:
                visit(target, trail + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_configure_and_the_backends_have_no_import_cycle():
    assert find_cycles(import_graph(), ("playbook.steps.configure", "playbook.backends")) == []


def test_the_graph_check_sees_a_cycle(tmp_path):
    """The check itself can fail: the old configure package's cycle (its __init__ importing the planner, which
    imported the backends, which imported a sibling module) is reported; imports for typing or inside a
    function are not edges."""
    old = {"p.configure": {"p.configure.planner"}, "p.configure.planner": {"p.configure.backends"},
           "p.configure.backends": {"p.configure.cuda"}, "p.configure.cuda": {"p.configure", "p.configure.windows"},
           "p.configure.windows": {"p.configure"}}
    assert ["p.configure", "p.configure.planner", "p.configure.backends", "p.configure.cuda",
            "p.configure"] in find_cycles(old, ("p.configure",))
    assert find_cycles(old, ("q.",)) == []
    (tmp_path / "a.py").write_text("from playbook.backends import b\n")
    assert module_imports(tmp_path / "a.py", "playbook.backends.a") == {"playbook", "playbook.backends",
                                                                          "playbook.backends.b"}
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import playbook.x\n"
                                   "def f():\n    import playbook.y\n")
    assert module_imports(tmp_path / "c.py", "playbook.c") == set()


@pytest.mark.parametrize("module", sorted(m for m in playbook_modules()
                                          if m.startswith(("playbook.steps.configure", "playbook.backends"))))
def test_each_module_imports_alone(module):
    done = run_captured([sys.executable, "-c", f"import {module}"], timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_configure_s_lazy_names_resolve():
    from playbook.steps import configure

    assert sorted(configure.__all__) == sorted(configure._EXPORTS)
    assert all(callable(getattr(configure, name)) for name in configure.__all__)
    with pytest.raises(AttributeError, match="no attribute 'plan_everything'"):
        configure.plan_everything  # noqa: B018
