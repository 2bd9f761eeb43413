"""How well ``playbook diagnose`` names the failures of real logs: the corpus, scored per family.

A corpus log (``tests/data/corpus/<part>/<family>/<name>.txt``, see :mod:`playbook.knowledge.corpus`) is
*named* when the first finding diagnose reports for it is one of the ids its header expects, and *named
wrong* when that first finding is another known failure (a wrong remedy); an ``unrecognised-failure`` finding,
or none, is neither. Beside recall (named / failure logs) the tables give the wrong-name rate (named wrong /
failure logs) and precision (of the logs given a known id, the share named right). A ``clean`` log must give
no finding at all: any finding there, ``unrecognised-failure`` included, is a false positive.

``python -m playbook.knowledge.evaluation [--part train|test] [CORPUS]`` prints the table; the tests print
it for both parts and hold the test part to :data:`GOAL`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from playbook.knowledge.corpus import CORPUS_FAMILIES, PARTS, thread_key

CLEAN = "clean"
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
    """Every log of one part of the corpus under ``root``, family by family, in name order."""
    if part not in PARTS:
        raise ValueError(f"part {part!r}: one of {', '.join(PARTS)}")
    logs = []
    for folder in sorted(p for p in (root / part).glob("*") if p.is_dir()):
        for path in sorted(folder.glob("*.txt")):
            logs.append(parse_corpus_log(path, part, folder.name))
    return logs


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


@dataclass
class Score:
    part: str
    families: dict[str, FamilyScore]

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
        rows = [f"| family ({self.part}) | logs | named | recall | named wrong | wrong-name rate | precision | "
                "findings on clean logs |", "|---|---|---|---|---|---|---|---|"]
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


def first_ids(log: CorpusLog) -> list[str]:
    """The ids ``playbook diagnose`` reports for a corpus log, in its order (leave-one-thread-out)."""
    from playbook.knowledge.failures import diagnose_log
    from playbook.knowledge.logtext import LogText

    # its own thread's examples are left out of the similarity stage: a train log is in the shipped index
    findings = diagnose_log(LogText.from_text(log.text), detect_failure=True, exclude_thread=thread_key(log.source))
    return [finding.id for finding in findings]


def score(logs: list[CorpusLog], part: str) -> Score:
    from playbook.knowledge.failures import UNRECOGNISED

    families = {name: FamilyScore(name) for name in CORPUS_FAMILIES}
    for log in logs:
        family = families.setdefault(log.family, FamilyScore(log.family))
        family.logs += 1
        ids = first_ids(log)
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
    return Score(part, families)


def evaluate(root: Path, part: str) -> Score:
    return score(read_corpus(root, part), part)


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
    parser.add_argument("--part", choices=PARTS, action="append", help="train, test (default: both)")
    parser.add_argument("--misses", action="store_true", help="list the train logs that are not named")
    parser.add_argument("--update-readme", action="store_true",
                        help="rewrite the corpus tables (both parts) in docs/knowledge-base.md")
    args = parser.parse_args(argv)
    short = []
    results = {}
    for part in args.part or PARTS:
        result = results[part] = evaluate(args.corpus, part)
        print(result.table() + "\n")
        short += result.meets()
        if args.misses and part == "train":
            for family in result.families.values():
                for name in family.missed:
                    print(f"  missed: {part}/{family.family}/{name}")
    if args.update_readme:
        readme = Path(__file__).resolve().parents[2] / "docs" / "knowledge-base.md"
        update_readme(readme, results.get("train") or evaluate(args.corpus, "train"),
                      results.get("test") or evaluate(args.corpus, "test"))
        print(f"rewrote the corpus tables in {readme.name}")
    print("\n".join(short) if short else "goal met")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
