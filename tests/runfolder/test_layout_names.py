"""``runfolder/layout.py`` is the only module that spells a run folder's file names.

The names come from Layout itself: every public method and property is asked for its path(s) in a
sample run folder, and the names it gives (attempt and layer numbers turned into placeholders) are
the vocabulary. Every string literal of the package outside layout.py (f-strings with their
placeholders, docstrings left out) is then searched for them, and for ``-attempt-N`` in any form.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from playbook.runfolder.layout import BESIDE_NOTEBOOKS, Layout, Step, UnitFiles

PACKAGE = Path(__file__).resolve().parents[2] / "playbook"
LAYOUT_MODULE = PACKAGE / "runfolder" / "layout.py"
ROOT = Path("/run-folder")
# A sample value for each parameter a Layout method takes; a new parameter name needs one here.
SAMPLES = {"attempt": 7, "n_gpu_layers": 13, "trial": 5, "pair": 3, "side": "gpu", "tool": "cuobjdump", "step": Step.BUILD,
           "stem": "verify", "path": ROOT / "wheelhouse" / "attempt-7" / "x.whl", "name": "x", "namespace": "bench"}
# Packages that write other folders than run folders: a wheel index's PEP 503 pages are index.html too.
NOT_RUN_FOLDERS = ("wheelindex",)
NUMBER = re.compile(r"\d+")
PLACEHOLDER = "{}"


def layout_names() -> set[str]:
    """Every name (file or folder, a path part below the run folder) that Layout produces."""
    layout = Layout(ROOT)
    produced: list[Path] = []
    for name, member in inspect.getmembers(Layout):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            value = getattr(layout, name)
        elif inspect.isfunction(member):
            parameters = list(inspect.signature(member).parameters)[1:]
            missing = [p for p in parameters if p not in SAMPLES]
            assert not missing, f"Layout.{name} takes {missing}: add a sample value to SAMPLES"
            value = member(layout, *(SAMPLES[p] for p in parameters))
        else:
            continue
        if isinstance(value, UnitFiles):
            value = unit_file_samples(layout)
        produced += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, Path)]
    names = set()
    for path in produced:
        if path.is_relative_to(ROOT):
            names.update(NUMBER.sub(PLACEHOLDER, part) for part in path.relative_to(ROOT).parts)
    return names


def unit_file_samples(layout: Layout) -> list[Path]:
    """The names verify's units get through their namespaces (``ctx.files("bench").log("ngl-17")``), for every
    namespace the units' code asks for."""
    namespaces = {m for module in (PACKAGE / "verify").rglob("*.py")
                  for found in re.findall(r"files\(\s*\"([\w-]+)\"|^\w*FILES\w* = \"([\w-]+)\"",
                                      module.read_text(encoding="utf-8"), re.MULTILINE) for m in found if m}
    paths: list[Path] = []
    for namespace in sorted(namespaces):
        files = layout.unit_files(SAMPLES["attempt"], namespace)
        paths += [files.log(), files.log("ngl-7"), files.log("ngl-7-005"), files.log("pair-03")]
        if namespace in BESIDE_NOTEBOOKS:
            paths += [files.beside(suffix) for suffix in (".csv", ".png", ".svg", ".md", ".json", ".log")]
    return paths


def checked(names: set[str]) -> set[str]:
    """The names that can only be a file name: with a suffix or a placeholder (``history``, a word that
    prose uses too, is left out; ``attempt-{}`` is the folder of one attempt)."""
    return {n for n in names if "." in n or PLACEHOLDER in n}


def literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal that documents nothing; an f-string as one text with ``{}``."""
    # A string that is a statement of its own documents (a module, a class, a function, a field).
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    inside_fstrings = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else PLACEHOLDER for v in node.values)
            found.append((node.lineno, text))
            inside_fstrings.update(id(v) for v in node.values)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and id(node) not in inside_fstrings):
            found.append((node.lineno, node.value))
    return found


def spelled_names(text: str, names: set[str]) -> list[str]:
    normalised = NUMBER.sub(PLACEHOLDER, text)
    hits = [name for name in names if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", normalised)]
    return hits + (["-attempt-"] if "-attempt-" in normalised else [])


def test_the_vocabulary_covers_every_kind_of_run_folder_file():
    names = checked(layout_names())
    for expected in ("run.json", "detect.json", "plan-attempt-{}.json", "throughput-attempt-{}.csv",
                     "tune-attempt-{}.md", "bench-ngl-{}.log", "probe.log", "tune-ngl-{}-{}.log", "attempt-{}",
                     "index.html", "{}-build-attempt-{}.ipynb"):
        assert expected in names, sorted(names)


@pytest.mark.long
def test_no_module_but_layout_spells_a_run_folder_file_name():
    names = checked(layout_names())
    offenders = []
    for module in sorted(PACKAGE.rglob("*.py")):
        if module == LAYOUT_MODULE or module.parent.name in NOT_RUN_FOLDERS:
            continue
        for line, text in literals(ast.parse(module.read_text(encoding="utf-8"))):
            for name in spelled_names(text, names):
                offenders.append(f"{module.relative_to(PACKAGE.parent)}:{line}: {name!r} in {text[:80]!r}")
    assert not offenders, "ask runfolder/layout.py for these names instead:\n" + "\n".join(offenders)


def test_the_check_finds_a_name_spelled_in_an_f_string():
    tree = ast.parse('def f(n):\n    """run.json"""\n    return f"tune-ngl-{n}-{n:03d}.log", "x-attempt-3.csv"\n')
    names = checked(layout_names())
    hits = [hit for _, text in literals(tree) for hit in spelled_names(text, names)]
    assert sorted(hits) == ["-attempt-", "tune-ngl-{}-{}.log"]
