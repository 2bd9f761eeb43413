"""Writing ``similarity_index.json`` from a checkout: the examples of tests/data/failures and the corpus's train
part, each read as diagnosis reads a log, and the threshold measured over them (``scripts/write-similarity-index.py``).
Kept apart from :mod:`playbook.knowledge.similarity`, which only matches, so that diagnosis can use the index without
the index's writer using diagnosis in turn."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from playbook.knowledge.corpus import thread_key
from playbook.knowledge.evaluation import read_corpus
from playbook.knowledge.failures import error_lines_of, known_findings
from playbook.knowledge.logtext import LogText
from playbook.knowledge.normalise import fold_for_similarity
from playbook.knowledge.similarity import (
    CHARS_PER_LINE,
    LINES_PER_EXAMPLE,
    Example,
    Index,
    Threshold,
    measure_threshold,
)


def examples_from(repo: Path) -> list[Example]:
    """The examples of a checkout: every log under tests/data/failures/<id>/ and every log of the corpus's
    train part that expects a failure. Never the corpus's test part."""
    return [example for example, _ in _examples_and_queries(repo)]


def query_lines_from(repo: Path) -> list[list[str]]:
    """For each of :func:`examples_from`'s examples, the lines its log gives as a query (its error lines
    only, as :func:`nearest_failure` reads a log no pattern named): what leave-one-project-out matches."""
    return [query for _, query in _examples_and_queries(repo)]


@lru_cache(maxsize=4)
def _examples_and_queries(repo: Path) -> tuple[tuple[Example, list[str]], ...]:
    rows: list[tuple[str, tuple[str, ...], str, str]] = []
    failures = repo / "tests" / "data" / "failures"
    for path in sorted(failures.glob("*/*.txt")):
        text = path.read_text(encoding="utf-8")
        first, _, body = text.partition("\n")
        source = _public(first.removeprefix("# source:").strip())
        rows.append((body, (path.parent.name,), source, _public(thread_key(source))))
    for log in read_corpus(repo / "tests" / "data" / "corpus", "train"):
        if log.expected:
            rows.append((log.text, log.expected, log.source, thread_key(log.source)))
    pairs = []
    for text, expected, source, thread in rows:
        example = _example(text, expected, source, thread)
        if example.lines:
            pairs.append((example, error_lines_of(LogText.from_text(text))))
    return tuple(pairs)


def _public(source: str) -> str:
    """A source as the shipped index may show it: an address as it is; in any other source (a file, a
    command run on a machine) every path shortened to its last part."""
    if source.startswith(("http://", "https://")):
        return source
    return LOCAL_FOLDERS.sub("", source)


LOCAL_FOLDERS = re.compile(r"(?<![\w.:/-])(?:/[^\s/]+)+/(?=[^\s/])")


def _example(text: str, expected: tuple[str, ...], source: str, thread: str) -> Example:
    """An example's lines: the line a pattern of its own id names first (when one does), then its error lines."""
    log = LogText.from_text(text)
    lines = [fold_for_similarity(log.matched(f.line_number))[:CHARS_PER_LINE]
             for f in known_findings(log) if f.id in expected and f.line_number][:1]
    lines += [line for line in error_lines_of(log) if line not in lines]
    return Example(expected[0], source, thread, tuple(lines[:LINES_PER_EXAMPLE]), expected)


def index_document(repo: Path) -> dict[str, Any]:
    """What ``similarity_index.json`` holds for the checkout at ``repo``."""
    examples = examples_from(repo)
    threshold = measure_threshold(Index(examples), queries=query_lines_from(repo))
    return {
        "about": "written by scripts/write-similarity-index.py from tests/data/failures and tests/data/corpus/train; "
                 "do not edit",
        "threshold": threshold.__dict__,
        "examples": [{"id": e.id, "source": e.source, "thread": e.thread, "expected": list(e.expected),
                      "lines": list(e.lines)} for e in examples],
    }


def write_index(repo: Path, destination: Path) -> Threshold:
    document = index_document(repo)
    destination.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return Threshold(**document["threshold"])
