"""Archived results cannot go stale unseen (issue 34): each file in benchmarks/results/ says the commit it was
measured at and a digest of its inputs (benchmarks/archive.py); when today's inputs differ, the test fails and
names the benchmark to re-run, unless the file is marked `# stale: <reason>`, and then the READMEs say so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import archive

sys.path.pop(0)

NAMES = sorted(p.name for p in archive.RESULTS.iterdir() if p.is_file())
DOCS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
READMES = ["README.md", "ARCHITECTURE.md", *DOCS, "benchmarks/README.md", "outputs/README.md", "outputs/reference/README.md"]


def in_history(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True,
                          timeout=30, check=False).returncode == 0


def test_every_results_file_declares_its_inputs():
    assert NAMES == sorted(archive.INPUTS), "each results file needs an entry in benchmarks/archive.py INPUTS"
    for name, (_, inputs) in archive.INPUTS.items():
        for path in inputs:
            assert (ROOT / path).exists(), f"{name}: input {path} does not exist"


@pytest.mark.parametrize("name", NAMES)
def test_the_archive_says_what_it_was_measured_on(name):
    recorded = archive.read(archive.RESULTS / name)
    assert recorded is not None, archive.check(name)
    assert recorded.inputs == archive.INPUTS[name][1], f"{name}: its inputs line is not the declared one"
    if recorded.commit == "unknown":
        return
    if not in_history(recorded.commit):
        pytest.skip(f"commit {recorded.commit} is not in this clone's history (a shallow clone)")
    assert archive.digest(recorded.inputs, recorded.commit) == recorded.digest, (
        f"{name}: its digest is not that of its inputs at commit {recorded.commit}")


@pytest.mark.parametrize("name", NAMES)
def test_the_archive_is_current_or_marked_stale(name):
    recorded = archive.read(archive.RESULTS / name)
    assert recorded is not None, archive.check(name)
    current = recorded.digest == archive.digest(recorded.inputs)
    if recorded.stale:
        assert not current, f"{name} is marked stale but its inputs are as measured: remove its '# stale:' line"
    else:
        assert current, archive.check(name)


@pytest.mark.parametrize("name", [n for n in NAMES if (r := archive.read(archive.RESULTS / n)) and r.stale])
def test_a_page_citing_a_stale_archive_says_it_is_stale(name):
    """A figure from a stale archive is qualified where it is cited: the paragraph says 'stale'."""
    cited = 0
    for page in READMES:
        for paragraph in re.split(r"\n\s*\n", (ROOT / page).read_text(encoding="utf-8")):
            if name in paragraph:
                cited += 1
                assert "stale" in paragraph, f"{page} cites {name} without saying it is stale:\n{paragraph[:300]}"
    assert cited, f"no page cites {name}"


def test_a_changed_input_makes_the_archive_stale(tmp_path, monkeypatch):
    """In a repository of its own: the digest at a commit equals the working tree's until an input changes, and
    then `check` says which file changed and what to re-run."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True, timeout=30)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "bench.py").write_text("print('1.0 s')\n")
    (tmp_path / "data" / "a.txt").write_text("a\n")
    (tmp_path / "benchmarks" / "results" / "bench.txt").write_text("1.0 s\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "measured")
    monkeypatch.setattr(archive, "ROOT", tmp_path)
    monkeypatch.setattr(archive, "RESULTS", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(archive, "INPUTS", {"bench.txt": ("python bench.py", ("bench.py", "data/"))})
    archive.stamp("bench.txt")
    assert archive.check("bench.txt") == ""
    (tmp_path / "data" / "b.txt").write_text("b\n")  # untracked: not an input until git tracks it
    assert archive.check("bench.txt") == ""
    git("add", "data/b.txt")
    problem = archive.check("bench.txt")
    assert "bench.txt is stale" in problem and "(data/b.txt)" in problem and "re-run python bench.py" in problem
    (tmp_path / "bench.py").write_text("print('2.0 s')\n")
    assert "(bench.py, data/b.txt)" in archive.check("bench.txt")
    with pytest.raises(SystemExit, match="inputs differ from HEAD"):  # HEAD's inputs are not what ran
        archive.stamp("bench.txt")


def test_body_is_what_the_benchmark_printed():
    text = (archive.RESULTS / "diagnose-speed-cpu-vm.txt").read_text(encoding="utf-8")
    assert text.startswith("# measured-on: ") and archive.body(text).startswith("diagnose on a ")
