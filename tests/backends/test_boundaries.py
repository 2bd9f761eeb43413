"""The backend redesign's boundaries, read from the source: backends sit below the steps, nothing outside
``playbook/backends/`` (and the knowledge files) names a backend, and no module imports itself back through others,
counting imports for typing and inside functions too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from playbook.backends import registry
from playbook.process import run_captured

PACKAGE = Path(__file__).resolve().parents[2] / "playbook"
# Where a backend's name belongs: its own module, and the knowledge files that describe it.
NAMING_ALLOWED = ("playbook.backends", "playbook.knowledge")
# What backends/ may not import: everything that sits above it.
ABOVE_BACKENDS = ("playbook.steps", "playbook.verify", "playbook.interfaces", "playbook.chain", "playbook.params",
                  "playbook.runfolder", "playbook.offline")
# "cpu" is also a device's kind and a Vulkan device type: compared only where the other side is about backends.
WORDS_TOO = {"cpu"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def playbook_modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path): path for path in sorted(root.rglob("*.py"))}


def module_imports(path: Path, module: str) -> set[str]:
    """Every playbook module ``module`` imports anywhere: at module level, under ``if TYPE_CHECKING:``, inside
    functions. Importing ``a.b.c`` imports the packages ``a`` and ``a.b``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
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


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {name: {m for m in module_imports(path, name) if m in modules and m != name and not name.startswith(m + ".")}
            for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph.get(name, ())):
            if state.get(target) == "open":
                cycles.append(trail[trail.index(target):] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def backend_names_used(source: str, names: set[str]) -> list[str]:
    """Where ``source`` compares against, branches on, or keys a table by a backend's name: "line: code"."""
    tree = ast.parse(source)
    hits = []

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(element) for element in node.elts)
        return False

    for node in ast.walk(tree):
        found = None
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            strict = [s for s in sides if named(s)]
            words = [s for s in sides if isinstance(s, ast.Constant) and s.value in WORDS_TOO]
            about_backends = any("backend" in ast.unparse(s).lower() for s in sides)
            if strict or (words and about_backends):
                found = node
        elif isinstance(node, ast.Dict) and any(k is not None and named(k) for k in node.keys):
            found = node
        elif isinstance(node, ast.match_case) and named(node.pattern.value if isinstance(node.pattern, ast.MatchValue)
                                                        else ast.Constant(None)):
            found = node.pattern
        elif isinstance(node, ast.Call) and any(named(a) for a in node.args):
            found = node
        if found is not None:
            hits.append(f"{found.lineno}: {ast.unparse(found)[:100]}")
    return hits


def strict_names() -> set[str]:
    return set(registry.names()) - WORDS_TOO | {n.upper() for n in registry.names()} - {"CPU"}


def test_backends_import_nothing_above_them():
    modules = playbook_modules()
    graph = import_graph(modules)
    upward = {name: sorted(m for m in targets if m.startswith(ABOVE_BACKENDS))
              for name, targets in graph.items() if name.startswith("playbook.backends")}
    assert {name: found for name, found in upward.items() if found} == {}


def test_no_import_cycle_of_any_kind():
    assert find_cycles(import_graph(playbook_modules())) == []


@pytest.mark.parametrize("module", sorted(m for m in playbook_modules() if not m.startswith(NAMING_ALLOWED)))
def test_no_backend_named_outside_the_backends(module):
    source = playbook_modules()[module].read_text(encoding="utf-8")
    assert backend_names_used(source, strict_names()) == []


def test_the_checks_can_fail(tmp_path):
    """Each check finds what it is there to find: a cycle through a function-local import, an import for typing,
    a comparison with a backend's name, a table keyed by one, a call given one."""
    package = tmp_path / "playbook"
    (package / "backends").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "backends" / "__init__.py").write_text("")
    (package / "backends" / "unit.py").write_text("def f():\n    from playbook.steps import planner\n")
    (package / "steps").mkdir()
    (package / "steps" / "__init__.py").write_text("")
    (package / "steps" / "planner.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from playbook.backends import unit\n")
    graph = {name: {m for m in module_imports(path, name) if m != name}
             for name, path in {module_name_in(tmp_path, p): p for p in package.rglob("*.py")}.items()}
    assert ["playbook.backends.unit", "playbook.steps.planner", "playbook.backends.unit"] in find_cycles(graph)
    names = strict_names()
    assert backend_names_used("if plan.backend == 'cuda':\n    pass\n", names)
    assert backend_names_used("x = backend in ('hip', 'vulkan')\n", names)
    assert backend_names_used("LISTERS = {'cuda': 1}\n", names)
    assert backend_names_used("params.settings('vulkan')\n", names)
    assert backend_names_used("if plan.backend == 'cpu':\n    pass\n", names)
    assert not backend_names_used("if device.device_type == 'cpu':\n    pass\n", names)
    assert not backend_names_used("print(f'built for {plan.backend}')\n", names)


def module_name_in(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
