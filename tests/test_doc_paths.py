"""Every repository path and module the Markdown pages cite exists (issue 34: `tests/test_browser.py`,
`tests/test_secrets.py` and `playbook.redact` were cited, and none existed).

A citation is, in a code span or a fenced block, a word that starts with one of PREFIXES (`tests/…`,
`playbook/…`, ...) or is a dotted name under `playbook` (`playbook.runfolder.redact`, a module, or a module and
its attributes); and a relative Markdown link's target. A word holding a placeholder (`<id>`, `*`, `X.Y`, `…`)
names many files and is not checked.
"""

from __future__ import annotations

import importlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "ARCHITECTURE.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")),
         "benchmarks/README.md", "outputs/README.md", "outputs/reference/README.md"]
PREFIXES = ("tests/", "playbook/", "benchmarks/", "scripts/", "params/", "docs/", "notebooks/", ".github/")
PLACEHOLDER = re.compile(r"[<>*?{}\[\]$…|]|\.\.\.|X\.Y|\bN\b")
MODULE = re.compile(r"playbook(\.[A-Za-z_]\w*)+")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Written by the tests, and ignored by git, so absent from a fresh checkout.
GENERATED = {"tests/output/browser/"}


def citations(text: str) -> Iterator[tuple[int, str]]:
    """(line number, cited path or module) in a Markdown text."""
    for fence in FENCE.finditer(text):
        for word in re.finditer(r"\S+", fence.group(0)):
            if cited := _cited(word.group(0)):
                yield text.count("\n", 0, fence.start() + word.start()) + 1, cited
    prose = _without_fences(text)
    for span in SPAN.finditer(prose):
        for word in re.finditer(r"\S+", span.group(1)):
            if cited := _cited(word.group(0)):
                yield prose.count("\n", 0, span.start(1) + word.start()) + 1, cited


def _without_fences(text: str) -> str:
    """The text with its fenced blocks blanked out, line numbers kept."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _cited(word: str) -> str:
    """The path or module a word of code cites, or '' when it cites none (or names many)."""
    word = word.split("=")[-1].strip("\"'(),;:")  # --params=params/x.yaml, "quoted", (aside),
    word = re.sub(r"(::\w+|:\d+|#[\w-]+)$", "", word)  # tests/x.py::test_y, playbook/x.py:12, a link's anchor
    word = word.rstrip(".")  # the end of a sentence
    if PLACEHOLDER.search(word):
        return ""
    if word.startswith(PREFIXES) or MODULE.fullmatch(word):
        return word
    return ""


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of the relative Markdown links outside fenced blocks."""
    prose = _without_fences(text)
    for link in LINK.finditer(prose):
        target = link.group(1).split("#")[0]
        if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            yield prose.count("\n", 0, link.start()) + 1, target


def exists(cited: str, base: Path = ROOT) -> bool:
    """Whether a cited path (relative to ``base``) or a dotted name (a module, then its attributes) exists."""
    if not MODULE.fullmatch(cited):
        return (base / cited).exists()
    parts = cited.split(".")
    for end in range(len(parts), 0, -1):
        stem = ROOT.joinpath(*parts[:end])
        if stem.with_suffix(".py").is_file() or (stem / "__init__.py").is_file():
            found: object = importlib.import_module(".".join(parts[:end]))
            for attribute in parts[end:]:
                if not hasattr(found, attribute):
                    return False
                found = getattr(found, attribute)
            return True
    return False


def missing(page: str, text: str) -> list[str]:
    """'page:line: cited' for each citation in ``text`` (the text of ``page``) that does not exist."""
    base = (ROOT / page).parent
    found = [f"{page}:{line}: {cited}" for line, cited in citations(text)
             if cited not in GENERATED and not exists(cited)]
    found += [f"{page}:{line}: link {target}" for line, target in links(text) if not exists(target, base)]
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_path_a_page_cites_exists(page):
    assert (ROOT / page).is_file(), page
    assert missing(page, (ROOT / page).read_text(encoding="utf-8")) == []


def test_the_pages_cite_paths_at_all():
    """The scan finds citations: a pattern that matched nothing would pass every page."""
    found = {cited for page in PAGES for _, cited in citations((ROOT / page).read_text(encoding="utf-8"))}
    assert {"tests/test_workflows.py", "playbook/knowledge/failures.yaml", "playbook.knowledge.failures"} <= found
    assert len(found) > 50


def test_a_made_up_path_or_module_is_named_and_placeholders_are_not():
    text = ("Run `tests/test_made_up.py::test_x` and `python benchmarks/no_such.py 50`; see `playbook.redact`,\n"
            "`playbook.runfolder.redact.no_such_function` and [the file](docs/absent.md#part).\n"
            "```bash\n./run --params params/made-up.yaml\n```\n"
            "Not checked: `tests/data/failures/<id>/`, `outputs/<run>/`, `params/*.yaml`, `pypi:X.Y`, `playbook …`.\n"
            "Present: `playbook.runfolder.redact.redact_folder`, `tests/conftest.py:18`, `playbook/chain.py`.\n")
    assert missing("README.md", text) == [
        "README.md:4: params/made-up.yaml",
        "README.md:1: tests/test_made_up.py",
        "README.md:1: benchmarks/no_such.py",
        "README.md:1: playbook.redact",
        "README.md:2: playbook.runfolder.redact.no_such_function",
        "README.md:2: link docs/absent.md",
    ]


def test_generated_folders_are_ignored_by_git():
    """GENERATED is only for what the tests write and git leaves out; anything else must exist."""
    for path in GENERATED:
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True, timeout=30, check=False)
        assert ignored.returncode == 0, path
