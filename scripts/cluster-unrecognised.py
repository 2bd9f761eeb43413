#!/usr/bin/env python3
"""Print the classes without an id (issue 33): the first failure lines of the corpus's TRAIN logs that diagnosis
leaves unrecognised, in clusters (playbook/knowledge/clusters.py). A cluster of logs from three threads or more
is a candidate for an entry of failures.yaml, or for a pattern of the entry its logs expect.

    python scripts/cluster-unrecognised.py [--reading shipped|project|patterns] [--all] [--overlap 0.5]

--reading shipped reads each log as the evaluation does (its own thread left out of the similarity stage);
project leaves its whole project out (leave-one-project-out); patterns sets the similarity stage aside (the
logs whose wording no pattern knows). --all prints the clusters of fewer threads too. Train part only: rules
are written from it; the test part measures them and the frozen part is read once, at the end of an issue.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playbook.knowledge.clusters import (
    MIN_OVERLAP,
    MIN_THREADS,
    READINGS,
    classes_without_id,
    cluster_lines,
    unrecognised_logs,
)
from playbook.knowledge.evaluation import read_corpus


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reading", choices=READINGS, default="shipped")
    parser.add_argument("--all", action="store_true", help="every cluster, not only those of 3+ threads")
    parser.add_argument("--overlap", type=float, default=MIN_OVERLAP, help="the words two lines share to cluster")
    args = parser.parse_args(argv)
    logs = read_corpus(REPO / "tests" / "data" / "corpus", "train")
    items = unrecognised_logs(logs, args.reading)
    clusters = cluster_lines(items, args.overlap)
    shown = clusters if args.all else classes_without_id(clusters)
    print(f"train, read as {args.reading}: {len(items)} of {sum(bool(log.expected) for log in logs)} failure logs "
          f"unrecognised, {len(clusters)} clusters, {len(classes_without_id(clusters))} of {MIN_THREADS}+ threads")
    for number, cluster in enumerate(shown, 1):
        labels = ", ".join(f"{label} {count}" for label, count in cluster.labels.most_common())
        print(f"\n[{number}] {len(cluster.items)} logs, {len(cluster.threads)} threads, {len(cluster.projects)} "
              f"projects; shared words: {' '.join(cluster.shared) or '-'}; expected: {labels}")
        for item in cluster.items:
            print(f"  {item.name}  ({item.thread})\n      {item.line[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
