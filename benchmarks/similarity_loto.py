#!/usr/bin/env python3
"""Leave-one-project-out measure of the second stage of diagnosis (until round 10 leave-one-thread-out, LOTO,
hence the name), on the TRAIN examples only (tests/data/failures and tests/data/corpus/train; never the
corpus's test part). ``--leave-out thread`` measures leave-one-thread-out as before.

Every example is matched, as a query, against the examples of every other project (all threads of one
repository, ``corpus.project_key``). Two readings of a query:

* ``index``: the example's lines as the index holds them (the line its own pattern names first, then its
  error lines): what ``measure_threshold`` measured until round 6.
* ``query``: only the log's error lines, as ``nearest_failure`` reads a log that reaches the second stage
  (no pattern matched it, so no pattern line leads): what an unseen log looks like.

Printed: at the shipped threshold, coverage (share of examples that reach it), precision among those and
the recall the stage alone would give (right and reaching / all); the same over a range of thresholds; how
many clean logs (tests/data/corpus/train/clean, tests/data/clean) the stage would name (must be 0); and the
whole train logs diagnosed with every pattern set aside (``diagnose_log`` with a knowledge base whose
entries have no pattern, each log without its own thread's examples): how many the stage names rightly,
how many of those only seem failed (no line says "error:", see ``seems_failed``), how many it names wrongly;
then the same with each log's whole project left out of the index (leave-one-project-out).

    python benchmarks/similarity_loto.py [--thresholds] [--leave-out thread]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playbook.knowledge import index_writer
from playbook.knowledge import similarity as sim
from playbook.knowledge.corpus import project_key, thread_key
from playbook.knowledge.evaluation import read_corpus
from playbook.knowledge.failures import (
    UNRECOGNISED,
    KnowledgeBase,
    diagnose_log,
    first_failure,
    load_knowledge_base,
    seems_failed,
)
from playbook.knowledge.logtext import LogText


def clean_logs() -> list[tuple[str, LogText]]:
    paths = sorted((REPO / "tests" / "data" / "corpus" / "train" / "clean").glob("*.txt"))
    paths += sorted((REPO / "tests" / "data" / "clean").glob("*.txt"))
    return [(path.name, LogText.from_text(path.read_text(encoding="utf-8"))) for path in paths]


def main(argv: list[str]) -> int:
    examples = index_writer.examples_from(REPO)
    queries = index_writer.query_lines_from(REPO)
    assert len(queries) == len(examples)
    index = sim.Index(examples)
    shipped = sim.shipped_index()[1]
    total = len(examples)
    given = argv[argv.index("--leave-out") + 1:][:1] if "--leave-out" in argv else []
    leave_out = "thread" if given == ["thread"] else "project"
    print(f"leave-one-{leave_out}-out")
    print(f"{total} examples; shipped threshold: {shipped.value} "
          f"(precision {shipped.precision:.1%} on {shipped.named})")
    for reading, reading_queries in (("index", None), ("query", queries)):
        outcomes = sim.held_out_outcomes(index, reading_queries, leave_out)
        top1 = sum(right for _, right in outcomes)
        print(f"\n[{reading}] nearest id right regardless of score: {top1}/{total} ({top1 / total:.1%})")
        measured = sim.threshold_of(outcomes, total)
        print(f"threshold at {sim.TARGET_PRECISION:.0%} precision on this reading: {measured.value} "
              f"(precision {measured.precision:.1%}, named {measured.named}, stage recall "
              f"{round(measured.precision * measured.named)}/{total} = {measured.precision * measured.named / total:.1%})")
        rows = [shipped.value] + ([x / 100 for x in range(20, 95, 5)] if "--thresholds" in argv else [])
        print("threshold  coverage      precision  stage recall")
        for value in rows:
            reached = [right for score, right in outcomes if score >= value]
            right = sum(reached)
            precision = right / len(reached) if reached else 0.0
            print(f"{value:9.4f}  {len(reached):4d} ({len(reached) / total:5.1%})  {precision:8.1%}  "
                  f"{right:4d} ({right / total:5.1%})")
    no_patterns = load_knowledge_base().without_patterns()
    named = []
    for name, log in clean_logs():
        findings = diagnose_log(log, detect_failure=True, knowledge=no_patterns)
        if findings and findings[0].id != UNRECOGNISED:
            named.append(f"{name}: {findings[0].id} {findings[0].similarity}")
    print(f"\nclean logs the stage would name at {shipped.value}: {len(named)}", *named, sep="\n  ")
    whole_logs(no_patterns)
    whole_logs(no_patterns, "project")
    return 0


def whole_logs(no_patterns: KnowledgeBase, leave_out: str = "thread") -> None:
    """The train logs as diagnose reads them with every pattern set aside: what the stage names by itself,
    each log without its own thread's examples, or (``leave_out="project"``) its whole project's."""
    logs = [log for log in read_corpus(REPO / "tests" / "data" / "corpus", "train") if log.expected]
    right = wrong = seeming = 0
    for log in logs:
        text = LogText.from_text(log.text)
        findings = diagnose_log(text, detect_failure=True, knowledge=no_patterns, exclude_thread=thread_key(log.source),
                                exclude_project=project_key(log.source) if leave_out == "project" else "")
        if not findings or findings[0].id == UNRECOGNISED:
            continue
        if findings[0].id in log.expected:
            right += 1
            seeming += first_failure(text) is None and seems_failed(text)
        else:
            wrong += 1
    label = "" if leave_out == "thread" else ", each log's whole project left out"
    print(f"\nwhole train logs, every pattern set aside{label}: {right} of {len(logs)} named rightly "
          f"({seeming} of them only seem failed), {wrong} named wrongly")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
