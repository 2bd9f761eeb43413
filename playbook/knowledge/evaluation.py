"""How well ``playbook diagnose`` names the failures of real logs: the corpus, scored per family.

A corpus log (``tests/data/corpus/<part>/<family>/<name>.txt``, see :mod:`playbook.knowledge.corpus`) is
*named* when the first finding diagnose reports for it is one of the ids its header expects, and *named
wrong* when that first finding is another known failure (a wrong remedy); an ``unrecognised-failure`` finding,
or none, is neither. Beside recall (named / failure logs) the tables give the wrong-name rate (named wrong /
failure logs) and precision (of the logs given a known id, the share named right). A ``clean`` log must give
no finding at all: any finding there, ``unrecognised-failure`` included, is a false positive.

``python -m playbook.knowledge.evaluation [--part train|test] [--leave-out project] [CORPUS]`` prints the table;
the tests print it for both parts and hold the test part to :data:`GOAL`. ``--leave-out project`` scores each log
with its whole project's examples left out of the similarity stage (leave-one-project-out; by default only its
own thread's are).

The ``frozen`` part (``tests/data/corpus/frozen/``, issue 33) is logs from projects with no log elsewhere in the
corpus, gathered and labelled before any rule of the next round was written. Only ``--part frozen`` reads it,
never by default: its table is read once, at the end of an issue, as the figure for "logs nobody tuned to".
Before scoring it, every file's sha256 is checked against ``frozen/MANIFEST.json``; a file changed, added or
missing is refused (exit status 2, naming the file). Its output is the aggregate table only, no file names.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from playbook.knowledge.corpus import CORPUS_FAMILIES, PARTS, project_key, thread_key

CLEAN = "clean"
FROZEN = "frozen"  # the held-out part of issue 33: read only by --part frozen, after its manifest is checked
FROZEN_LABEL = "frozen part (logs nobody tuned to)"
FROZEN_MANIFEST = "MANIFEST.json"
FROZEN_UNHASHED = (FROZEN_MANIFEST, "README.md")  # the folder's only files that the manifest does not hash
HEADER_SOURCE = "# source:"
HEADER_EXPECTED = "# expected:"


@dataclass(frozen=True)
class Goal:
    overall_recall: float = 0.90
    family_recall: float = 0.80
    clean_findings: int = 0


GOAL = Goal()


@dataclass(frozen=True)
class CorpusLog:
    path: Path
    part: str
    family: str
    source: str
    expected: tuple[str, ...]  # empty for a clean log
    text: str  # the log without its header lines


def parse_corpus_log(path: Path, part: str, family: str) -> CorpusLog:
    """One corpus file: its ``# source:`` and ``# expected:`` header, then the log."""
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    header = {}
    body_start = 0
    for number, line in enumerate(lines[:4]):
        for key in (HEADER_SOURCE, HEADER_EXPECTED):
            if line.startswith(key):
                header[key] = line[len(key):].strip()
                body_start = number + 1
    if HEADER_SOURCE not in header or HEADER_EXPECTED not in header:
        raise ValueError(f"{path}: a corpus log starts with '# source: URL' and '# expected: id[, id]' lines")
    expected = tuple(i.strip() for i in header[HEADER_EXPECTED].split(",") if i.strip() and i.strip() != "none")
    return CorpusLog(path, part, family, header[HEADER_SOURCE], expected, "\n".join(lines[body_start:]))


def read_corpus(root: Path, part: str) -> list[CorpusLog]:
    """Every log of one part of the corpus under ``root``, family by family, in name order. The frozen part
    is read only by :func:`read_frozen`, which checks its manifest first."""
    if part not in PARTS:
        raise ValueError(f"part {part!r}: one of {', '.join(PARTS)}")
    return _read_part(root, part)


def _read_part(root: Path, part: str) -> list[CorpusLog]:
    logs = []
    for folder in sorted(p for p in (root / part).glob("*") if p.is_dir()):
        for path in sorted(folder.glob("*.txt")):
            logs.append(parse_corpus_log(path, part, folder.name))
    return logs


class FrozenPartRefused(Exception):
    """The frozen part differs from its manifest: a file changed, added or missing."""


def frozen_file_hashes(folder: Path) -> dict[str, str]:
    """The sha256 of every file under the frozen part's ``folder`` (relative POSIX path: hex digest), its
    manifest and README left out: what ``MANIFEST.json``'s ``files`` holds."""
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(p for p in folder.rglob("*") if not p.is_dir())
            if path.relative_to(folder).as_posix() not in FROZEN_UNHASHED}


def verify_frozen(folder: Path) -> None:
    """Refuse (:class:`FrozenPartRefused`, naming the files) unless the files under ``folder`` are exactly
    those of its ``MANIFEST.json`` with the same sha256."""
    manifest_path = folder / FROZEN_MANIFEST
    if not manifest_path.is_file():
        raise FrozenPartRefused(f"{manifest_path}: no manifest, so the frozen part cannot be checked")
    try:
        expected = json.loads(manifest_path.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, TypeError) as error:
        raise FrozenPartRefused(f"{manifest_path}: not a manifest with a 'files' table ({error})") from error
    found = frozen_file_hashes(folder)
    problems = [f"{name}: changed since it was frozen (sha256 {found[name]}, manifest {expected[name]})"
                for name in sorted(set(found) & set(expected)) if found[name] != expected[name]]
    problems += [f"{name}: added after the part was frozen (not in {FROZEN_MANIFEST})"
                 for name in sorted(set(found) - set(expected))]
    problems += [f"{name}: missing (in {FROZEN_MANIFEST}, not on disk)" for name in sorted(set(expected) - set(found))]
    if problems:
        raise FrozenPartRefused(f"{folder}: the frozen part differs from its manifest, so it is not scored:\n  "
                                + "\n  ".join(problems))


def read_frozen(root: Path) -> list[CorpusLog]:
    """Every log of the frozen part under ``root`` (the corpus folder), once its manifest is verified."""
    verify_frozen(root / FROZEN)
    return _read_part(root, FROZEN)


@dataclass
class FamilyScore:
    family: str
    logs: int = 0
    named: int = 0  # first finding is an expected id (clean: no finding at all)
    findings_on_clean: int = 0
    wrong: int = 0  # first finding is a known id the log does not expect
    unrecognised: int = 0  # only unrecognised-failure
    missed: list[str] = field(default_factory=list)  # file names, for reading train misses

    @property
    def recall(self) -> float:
        return self.named / self.logs if self.logs else 0.0

    @property
    def precision(self) -> float:
        """Of the logs given a known id, the share named right (1 when none was given one: nothing wrong)."""
        return self.named / (self.named + self.wrong) if self.named + self.wrong else 1.0

    @property
    def wrong_rate(self) -> float:
        return self.wrong / self.logs if self.logs else 0.0


LEAVE_OUT = ("thread", "project")  # what of a log's own the similarity stage leaves out when it is scored


@dataclass
class Score:
    part: str
    families: dict[str, FamilyScore]
    leave_out: str = "thread"

    @property
    def failure_logs(self) -> int:
        return sum(f.logs for name, f in self.families.items() if name != CLEAN)

    @property
    def named(self) -> int:
        return sum(f.named for name, f in self.families.items() if name != CLEAN)

    @property
    def recall(self) -> float:
        return self.named / self.failure_logs if self.failure_logs else 0.0

    @property
    def wrong(self) -> int:
        return sum(f.wrong for name, f in self.families.items() if name != CLEAN)

    @property
    def precision(self) -> float:
        return self.named / (self.named + self.wrong) if self.named + self.wrong else 1.0

    @property
    def wrong_rate(self) -> float:
        return self.wrong / self.failure_logs if self.failure_logs else 0.0

    @property
    def clean_findings(self) -> int:
        return sum(f.findings_on_clean for f in self.families.values())

    def meets(self, goal: Goal = GOAL) -> list[str]:
        """What falls short of ``goal``, one sentence each; empty when the goal is met."""
        short = []
        if self.recall < goal.overall_recall:
            short.append(f"{self.part}: overall recall {self.recall:.0%} < {goal.overall_recall:.0%}")
        for name, family in self.families.items():
            if name != CLEAN and family.logs and family.recall < goal.family_recall:
                short.append(f"{self.part}: {name} recall {family.recall:.0%} < {goal.family_recall:.0%}")
        if self.clean_findings > goal.clean_findings:
            short.append(f"{self.part}: {self.clean_findings} finding(s) on clean logs")
        return short

    def table(self) -> str:
        """A Markdown table, one row per family with logs, then the overall row."""
        label = FROZEN_LABEL if self.part == FROZEN else self.part
        if self.leave_out == "project":
            label += ", leave-one-project-out"
        rows = [(f"| family ({label}) | logs | named | recall | named wrong | wrong-name rate | precision | "
                 "findings on clean logs |"), "|---|---|---|---|---|---|---|---|"]
        for name in CORPUS_FAMILIES:
            family = self.families.get(name)
            if family is None or not family.logs:
                continue
            if name == CLEAN:
                rows.append(f"| `{name}` | {family.logs} | - | - | - | - | - | {family.findings_on_clean} |")
            else:
                rows.append(f"| `{name}` | {family.logs} | {family.named} | {family.recall:.0%} | {family.wrong} | "
                            f"{family.wrong_rate:.1%} | {family.precision:.1%} | - |")
        rows.append(f"| **all failures** | {self.failure_logs} | {self.named} | {self.recall:.0%} | {self.wrong} | "
                    f"{self.wrong_rate:.1%} | {self.precision:.1%} | {self.clean_findings} |")
        return "\n".join(rows)


def first_ids(log: CorpusLog, leave_out: str = "thread") -> list[str]:
    """The ids ``playbook diagnose`` reports for a corpus log, in its order: its own thread's examples left
    out of the similarity stage (a train log is in the shipped index), or with ``leave_out="project"`` those
    of its whole project (:func:`playbook.knowledge.corpus.project_key`: how a log of a project the index has
    no example from is named)."""
    from playbook.knowledge.failures import diagnose_log
    from playbook.knowledge.logtext import LogText

    if leave_out not in LEAVE_OUT:
        raise ValueError(f"leave out a thread or a project, not {leave_out!r}")
    findings = diagnose_log(LogText.from_text(log.text), detect_failure=True, exclude_thread=thread_key(log.source),
                            exclude_project=project_key(log.source) if leave_out == "project" else "")
    return [finding.id for finding in findings]


def score(logs: list[CorpusLog], part: str, leave_out: str = "thread") -> Score:
    from playbook.knowledge.failures import UNRECOGNISED

    families = {name: FamilyScore(name) for name in CORPUS_FAMILIES}
    for log in logs:
        family = families.setdefault(log.family, FamilyScore(log.family))
        family.logs += 1
        ids = first_ids(log, leave_out)
        if log.family == CLEAN or not log.expected:
            family.findings_on_clean += bool(ids)
            family.named += not ids
            if ids:
                family.missed.append(log.path.name)
            continue
        if ids and ids[0] in log.expected:
            family.named += 1
        else:
            family.wrong += bool(ids) and ids[0] != UNRECOGNISED
            family.unrecognised += ids == [UNRECOGNISED]
            family.missed.append(log.path.name)
    return Score(part, families, leave_out)


def evaluate(root: Path, part: str, leave_out: str = "thread") -> Score:
    """The score of one part; the frozen part only after its manifest is verified (else FrozenPartRefused)."""
    return score(read_frozen(root) if part == FROZEN else read_corpus(root, part), part, leave_out)


def default_corpus() -> Path:
    return Path(__file__).resolve().parents[2] / "tests" / "data" / "corpus"


README_START = "<!-- corpus-evaluation: written by `python -m playbook.knowledge.evaluation --update-readme` -->"
README_END = "<!-- /corpus-evaluation -->"


def readme_block(train: Score, test: Score) -> str:
    """The README's corpus tables, between their markers."""
    return f"{README_START}\n{train.table()}\n\n{test.table()}\n{README_END}"


def update_readme(readme: Path, train: Score, test: Score) -> None:
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"{readme}: no {README_START} ... {README_END} block to replace")
    readme.write_text(text[:start] + readme_block(train, test) + text[end + len(README_END):], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playbook.knowledge.evaluation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", type=Path, default=default_corpus(), help="the corpus folder")
    parser.add_argument("--part", choices=(*PARTS, FROZEN), action="append",
                        help="train, test (default: both); frozen only when asked for: the held-out part, checked "
                             "against its MANIFEST.json and printed as an aggregate table")
    parser.add_argument("--leave-out", choices=LEAVE_OUT, default="thread",
                        help="what of each log's own the similarity stage leaves out: its thread (default) or its "
                             "whole project (leave-one-project-out; the README's tables are leave-one-thread-out)")
    parser.add_argument("--misses", action="store_true", help="list the train logs that are not named")
    parser.add_argument("--update-readme", action="store_true",
                        help="rewrite the corpus tables (both parts) in docs/knowledge-base.md")
    args = parser.parse_args(argv)
    short = []
    results = {}
    for part in args.part or PARTS:
        try:
            result = results[part] = evaluate(args.corpus, part, args.leave_out)
        except FrozenPartRefused as refused:
            print(f"refused: {refused}", file=sys.stderr)
            return 2
        print(result.table() + "\n")
        short += result.meets()
        if args.misses and part == "train":
            for family in result.families.values():
                for name in family.missed:
                    print(f"  missed: {part}/{family.family}/{name}")
    if args.update_readme:
        if args.leave_out != "thread":
            print("--update-readme writes the leave-one-thread-out tables", file=sys.stderr)
            return 2
        readme = Path(__file__).resolve().parents[2] / "docs" / "knowledge-base.md"
        update_readme(readme, results.get("train") or evaluate(args.corpus, "train"),
                      results.get("test") or evaluate(args.corpus, "test"))
        print(f"rewrote the corpus tables in {readme.name}")
    print("\n".join(short) if short else "goal met")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
