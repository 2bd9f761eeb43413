"""Classes without an id (issue 33): the first failure lines of the logs diagnosis leaves unrecognised, in clusters.

A log that plainly failed and that no entry names gets ``unrecognised-failure`` with its first failure line
(:func:`playbook.knowledge.failures.first_failure`). When several users' logs, from different threads, fail on
lines that read alike once their paths, versions and numbers are folded away
(:func:`playbook.knowledge.normalise.fold_for_similarity`), they are one failure the knowledge base has no id for,
or one whose wording its patterns miss: a cluster of :data:`MIN_THREADS` or more threads is a candidate for an
entry of ``failures.yaml`` (or a pattern of an existing entry, when the logs' labels agree on it).

:func:`cluster_lines` is the clustering itself (greedy, on the words two folded lines share);
:func:`unrecognised_logs` picks a part's logs that diagnosis leaves unrecognised, read three ways:

* ``shipped``: as the evaluation reads them (every pattern, the similarity stage without the log's own thread);
* ``project``: the similarity stage without the log's whole project (leave-one-project-out);
* ``patterns``: no similarity stage at all: the logs whose wording no pattern knows.

``scripts/cluster-unrecognised.py`` prints the clusters of the corpus's train part. Never run it on the test or
frozen parts to write rules from them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from playbook.knowledge.corpus import project_key, thread_key
from playbook.knowledge.evaluation import CLEAN, CorpusLog
from playbook.knowledge.normalise import fold_for_similarity

MIN_THREADS = 3  # a cluster of logs from this many threads or more is a class worth an id
MIN_OVERLAP = 0.5  # the share of words two first failure lines must share to be one cluster
READINGS = ("shipped", "project", "patterns")

WORD = re.compile(r"[a-z_][a-z0-9_+.-]{2,}")
# Words every failure line may hold: they say that something failed, not what.
COMMON = frozenset({"error", "errors", "fatal", "failed", "failure", "the", "and", "for", "with", "not", "<n>",
                    "<v>", "<hex>", "exit", "status", "code", "returned", "while", "from", "was", "this", "that",
                    "such", "file", "directory"})


def failure_words(line: str) -> frozenset[str]:
    """The words of a first failure line that say which failure it is: folded as the similarity stage folds
    it (paths to file names, versions and numbers to placeholders), less the words any failure line has."""
    return frozenset(w.strip(".-") for w in WORD.findall(fold_for_similarity(line))) - COMMON


def overlap(one: frozenset[str], other: frozenset[str]) -> float:
    """Jaccard overlap of two lines' words (0 when either has none)."""
    if not one or not other:
        return 0.0
    return len(one & other) / len(one | other)


@dataclass(frozen=True)
class Item:
    """One unrecognised log: where it is, its thread, its first failure line and what its header expects."""

    name: str
    source: str
    line: str
    expected: tuple[str, ...] = ()

    @property
    def thread(self) -> str:
        return thread_key(self.source)


@dataclass
class Cluster:
    items: list[Item] = field(default_factory=list)
    words: frozenset[str] = frozenset()  # the first member's words: what a line is compared with

    @property
    def threads(self) -> list[str]:
        return sorted({item.thread for item in self.items})

    @property
    def projects(self) -> list[str]:
        return sorted({project_key(item.source) for item in self.items})

    @property
    def labels(self) -> Counter[str]:
        """How many of its logs expect each id (a log may expect several)."""
        return Counter(i for item in self.items for i in item.expected)

    @property
    def shared(self) -> list[str]:
        """The words every line of the cluster holds."""
        common = set(self.words)
        for item in self.items:
            common &= failure_words(item.line)
        return sorted(common)


def cluster_lines(items: list[Item], min_overlap: float = MIN_OVERLAP) -> list[Cluster]:
    """``items`` in clusters of alike first failure lines: each joins the first cluster whose first line shares
    at least ``min_overlap`` of their words (:func:`overlap`), else starts one. Largest (most threads) first."""
    clusters: list[Cluster] = []
    for item in items:
        words = failure_words(item.line)
        home = next((c for c in clusters if overlap(words, c.words) >= min_overlap), None)
        if home is None:
            clusters.append(Cluster([item], words))
        else:
            home.items.append(item)
    return sorted(clusters, key=lambda c: (-len(c.threads), -len(c.items), c.items[0].name))


def classes_without_id(clusters: list[Cluster], min_threads: int = MIN_THREADS) -> list[Cluster]:
    """The clusters whose logs come from ``min_threads`` threads or more."""
    return [cluster for cluster in clusters if len(cluster.threads) >= min_threads]


def unrecognised_logs(logs: list[CorpusLog], reading: str = "shipped") -> list[Item]:
    """The failure logs of ``logs`` whose first finding is none or ``unrecognised-failure`` when read as
    ``reading`` says (see the module's docstring), each with its first failure line (or its first line of
    trouble, for a log that only seems failed)."""
    from playbook.knowledge.failures import UNRECOGNISED, diagnose_log, first_failure, trouble_lines
    from playbook.knowledge.logtext import LogText

    if reading not in READINGS:
        raise ValueError(f"reading {reading!r}: one of {', '.join(READINGS)}")
    items = []
    for log in logs:
        if log.family == CLEAN or not log.expected:
            continue
        text = LogText.from_text(log.text)
        findings = diagnose_log(text, detect_failure=True, similarity=reading != "patterns",
                                exclude_thread=thread_key(log.source),
                                exclude_project=project_key(log.source) if reading == "project" else "")
        if findings and findings[0].id != UNRECOGNISED:
            continue
        found = first_failure(text)
        if found is None:
            trouble = trouble_lines(text)
            found = trouble[0] if trouble else None
        line = text.matched(found[0]) if found else ""
        items.append(Item(f"{log.part}/{log.family}/{log.path.name}", log.source, line.strip(), log.expected))
    return items
