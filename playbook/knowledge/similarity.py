"""The second stage of diagnosis: the known failure whose real examples a log's error lines most resemble.

Patterns name what their authors saw; a user's log often says the same thing in other words. When no
pattern matches a log that plainly failed, its error lines (:func:`playbook.knowledge.failures.error_lines`;
of a log that only seems failed, its lines of trouble, :func:`playbook.knowledge.failures.trouble_lines`;
read by :func:`playbook.knowledge.normalise.fold_for_similarity`) are compared with the error lines of every
example of a known failure: the logs under ``tests/data/failures/<id>/`` and the ``train`` part of the
corpus (``tests/data/corpus/train/``). The comparison is TF-IDF over words and character 3-grams, by
cosine, in plain Python (no numerical library needed for a few hundred examples).

The examples ship with the package as ``similarity_index.json``, written by
``python scripts/write-similarity-index.py`` from those folders (a test checks that it is current).

What names a failure is not the similarity itself but the *confidence*: the best similarity of the nearest
id less the best similarity of any other id (:meth:`Index.nearest_id`), and none at all when the best
similarity is under :data:`MIN_SIMILARITY`. A log that resembles one failure's examples much more than any
other's is named even when its wording is its own; a log close to two failures at once is not. The same
script measures the threshold by leave-one-project-out: each example's log, read as a query (its error lines
only, as a log that no pattern matched reaches this stage: no pattern line leads), is matched against the
examples of every other project (all threads of one repository: a user's log comes from a project the index
may hold nothing of), and the threshold is the lowest confidence at which the nearest id is right for at least
:data:`TARGET_PRECISION` (97%) of the examples that reach it. At or above the threshold a log is named
``likely <id>``, its remedy applies; below it the log stays ``unrecognised-failure``, and the nearest id is
only a hint, never a remedy.

``benchmarks/similarity_loto.py`` prints that measure (coverage, precision and the stage's own recall over
thresholds, and the clean logs it would name). Round 6, on 1071 train examples read as queries: the nearest
similarity as the score named 406 rightly (37.9%) at 90% precision; the confidence names 522 (48.7%) with
MIN_SIMILARITY 0.45 (588, 54.9%, with 0.3, but that named a short generic WinError line in
tests/data/pastes/exllama-13-pip-build-ext.md stale-cuda-path at similarity 0.40).
Averaging an id's k nearest examples (k = 2, 3) did worse than the single nearest.
Round 7 (features, 1199 examples, query reading, same confidence and MIN_SIMILARITY): words, word pairs and
character 4-grams named 604 (50.4%, threshold 0.0603); words and character 3-grams name 639 (53.3%, 710 reach
threshold 0.0659). Measured and not kept: no character n-grams 584; 5-grams 607; word triples added 612;
pairs weighted twice 600; character grams weighted half 601; placeholders (<n>, <v>, <hex>) dropped 605;
binary term frequency 610; IDF without smoothing 585, probabilistic 587, squared 557; terms in more than
10% / 20% of examples dropped 595 / 606. Truncating a query to its first 3 / 6 / 9 or last 6 error lines:
611 / 639 / 639 / 639 (most queries have few lines). MIN_SIMILARITY 0.35 named 671 with the round-6 features, but stays 0.45
(see round 6). No clean log reaches the stage (none has a failing line), so none is named.
Round 9 (lines of trouble, ``TROUBLE_LINE`` in failures.py): a third of the train logs have no line that
says "error:" and never reached this stage. Their lines of trouble are now compared, and such a log is named
when the stage is confident (else it gets no finding). On the query reading the threshold moved to 0.0531
(843 of 1264 examples reach it at 90%); whole train logs with every pattern set aside: see the benchmark.
Comparing only lines that successful logs never print (``ROUTINE_LINE`` left out) for a log that only seems
failed cost 2 of those logs and keeps the archived successful runs' lines (git build-info notes, CMake's
checks) out of the comparison.
Round 10 (issue 33, precision first): the threshold is measured leaving one project out, not one thread, for
97% precision, not 90%. On 1522 examples: leave-one-project-out at 97% gives 0.2338 (636 reach it); at 90% it
would be 0.0671 (931). Leave-one-thread-out gave 0.244 (695) at 97% and 0.0516 (1024) at 90%: a project's
other threads vouch for its logs more than a stranger's are vouched for.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

INDEX_FILE = "similarity_index.json"
# A wrong name applies a wrong remedy, worse than "unrecognised" with the first failure line (issue 33): the
# stage names a log only where, leaving each example's whole project out, 97 in 100 of its names are right.
TARGET_PRECISION = 0.97
MIN_SIMILARITY = 0.45  # under it no id is named, however far the others are
LINES_PER_EXAMPLE = 12
CHARS_PER_LINE = 240
WORD = re.compile(r"<\w+>|[a-z_][a-z0-9_+.-]*[a-z0-9_]|[a-z]")
CHAR_GRAM = 3  # 3-grams named 17 more LOTO examples than 4-grams (5-grams: 3 more)


def features(lines: list[str]) -> Counter[str]:
    """The terms of some folded error lines: words and 3-grams of characters (word pairs named 28 fewer
    LOTO examples: two users' wordings of one failure share words more often than their order)."""
    terms: Counter[str] = Counter()
    for line in lines:
        words = WORD.findall(line)
        terms.update("w:" + word for word in words)
        for word in words:
            padded = f" {word} "
            terms.update("c:" + padded[i:i + CHAR_GRAM] for i in range(max(1, len(padded) - CHAR_GRAM + 1)))
    return terms


@dataclass(frozen=True)
class Example:
    """One known failure's example: its id, where it comes from (a public address), its folded error lines."""

    id: str
    source: str
    thread: str
    lines: tuple[str, ...]
    expected: tuple[str, ...] = ()  # every id the example shows (a corpus log may expect several)


@dataclass(frozen=True)
class Match:
    id: str
    score: float  # cosine similarity to the nearest example
    example: Example
    confidence: float = 0.0  # score less the best score of any other id: what the threshold applies to


class Index:
    """TF-IDF vectors of the examples, and an inverted index from a term to the examples that hold it."""

    def __init__(self, examples: list[Example]):
        from playbook.knowledge.corpus import project_key

        self.examples = examples
        self.projects = [project_key(example.source) for example in examples]
        counts = [features(list(example.lines)) for example in examples]
        frequency: Counter[str] = Counter(term for terms in counts for term in terms)
        total = len(examples)
        self.idf = {term: math.log((1 + total) / (1 + df)) + 1 for term, df in frequency.items()}
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for number, terms in enumerate(counts):
            for term, weight in self._vector(terms).items():
                self.postings.setdefault(term, []).append((number, weight))

    def _vector(self, terms: Counter[str]) -> dict[str, float]:
        weights = {t: (1 + math.log(n)) * self.idf[t] for t, n in terms.items() if t in self.idf}
        norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
        return {t: w / norm for t, w in weights.items()}

    def scores(self, lines: list[str]) -> dict[int, float]:
        """Cosine similarity of ``lines`` to every example that shares a term with them."""
        scores: dict[int, float] = {}
        for term, weight in self._vector(features(lines)).items():
            for number, other in self.postings.get(term, ()):
                scores[number] = scores.get(number, 0.0) + weight * other
        return scores

    def nearest_id(self, lines: list[str], exclude_thread: str = "", exclude_project: str = "") -> Match | None:
        """The known failure ``lines`` most resemble: the id of the most similar example (none of thread
        ``exclude_thread`` nor of project ``exclude_project``, see :func:`playbook.knowledge.corpus.project_key`),
        its similarity, and its confidence: that similarity less the best similarity of any other id (0 when the
        best similarity is under :data:`MIN_SIMILARITY`)."""
        best: dict[str, tuple[float, int]] = {}
        for number, score in self.scores(lines).items():
            example = self.examples[number]
            if (exclude_thread and example.thread == exclude_thread) or (
                    exclude_project and self.projects[number] == exclude_project):
                continue
            held = best.get(example.id)
            if held is None or (score, -number) > (held[0], -held[1]):
                best[example.id] = (score, number)
        if not best:
            return None
        ranked = sorted(best.values(), key=lambda item: (-item[0], item[1]))
        score, number = ranked[0]
        runner_up = ranked[1][0] if len(ranked) > 1 else 0.0
        confidence = score - runner_up if score >= MIN_SIMILARITY else 0.0
        example = self.examples[number]
        return Match(example.id, round(score, 4), example, round(confidence, 4))


@dataclass(frozen=True)
class Threshold:
    """The confidence from which the second stage names a failure, measured leave-one-project-out."""

    value: float
    precision: float  # of the examples at or above it, the share whose nearest example of another project is right
    named: int  # how many examples reach it
    examples: int  # how many were tried


def held_out_outcomes(index: Index, queries: list[list[str]] | None = None,
                      leave_out: str = "project") -> list[tuple[float, bool]]:
    """Leave-one-project-out (``leave_out="thread"``: leave-one-thread-out): each example against the examples
    of every other project (all threads of one repository, :func:`playbook.knowledge.corpus.project_key`), as
    (confidence, nearest id right). A project's own threads share its wording, paths and versions, so they
    vouch for each other more than a stranger's log would be vouched for. ``queries`` (one per example) are the
    lines each example's log gives as a query (its error lines, no pattern line); without them the example's
    own lines are the query. Examples with no match are left out."""
    if leave_out not in ("project", "thread"):
        raise ValueError(f"leave out a project or a thread, not {leave_out!r}")
    outcomes: list[tuple[float, bool]] = []
    for number, example in enumerate(index.examples):
        lines = queries[number] if queries is not None else list(example.lines)
        if leave_out == "project":
            match = index.nearest_id(lines, exclude_project=index.projects[number])
        else:
            match = index.nearest_id(lines, exclude_thread=example.thread)
        if match is not None:
            outcomes.append((match.confidence, match.id in (example.expected or (example.id,))))
    return outcomes


def measure_threshold(index: Index, target: float = TARGET_PRECISION,
                      queries: list[list[str]] | None = None) -> Threshold:
    """The lowest confidence where leave-one-project-out precision (:func:`held_out_outcomes`) stays >= target."""
    return threshold_of(held_out_outcomes(index, queries), len(index.examples), target)


def threshold_of(outcomes: list[tuple[float, bool]], examples: int, target: float = TARGET_PRECISION) -> Threshold:
    """The lowest score of ``outcomes`` (score, right) at and above which precision stays >= ``target``."""
    outcomes = sorted(outcomes, key=lambda item: -item[0])
    best = Threshold(1.01, 0.0, 0, examples)  # never name anything when no threshold reaches it
    right = 0
    for count, (score, correct) in enumerate(outcomes, start=1):
        right += correct
        next_score = outcomes[count][0] if count < len(outcomes) else -1.0
        if next_score == score:
            continue  # a threshold cannot split equal scores
        if right / count >= target:
            best = Threshold(round(score, 4), round(right / count, 4), count, examples)
    return best


# ------------------------------------------------------------------ the shipped index


@lru_cache(maxsize=1)
def shipped_index() -> tuple[Index, Threshold]:
    """The index and threshold in the package's ``similarity_index.json``."""
    text = resources.files("playbook.knowledge").joinpath(INDEX_FILE).read_text(encoding="utf-8")
    return load_index(json.loads(text))


def load_index(document: dict[str, Any]) -> tuple[Index, Threshold]:
    examples = [Example(row["id"], row["source"], row["thread"], tuple(row["lines"]), tuple(row.get("expected", ())))
                for row in document["examples"]]
    return Index(examples), Threshold(**document["threshold"])
