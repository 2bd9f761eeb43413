#!/usr/bin/env python3
"""Write playbook/knowledge/similarity_index.json: the examples the second stage of diagnosis compares a log
with (tests/data/failures and the corpus's train part, never its test part) and the threshold measured on
them leave-one-project-out. Run it after adding examples or corpus logs; tests/knowledge/test_similarity.py
fails while the shipped index is not what this script writes."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playbook.knowledge.index_writer import write_index
from playbook.knowledge.similarity import INDEX_FILE


def main() -> int:
    destination = REPO / "playbook" / "knowledge" / INDEX_FILE
    threshold = write_index(REPO, destination)
    print(f"wrote {destination.relative_to(REPO)}: threshold {threshold.value} (precision {threshold.precision:.0%} "
          f"on {threshold.named} of {threshold.examples} examples, leave-one-project-out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
