"""Classes without an id (playbook/knowledge/clusters.py): the first failure lines of unrecognised logs, clustered."""

from __future__ import annotations

from pathlib import Path

import pytest

from playbook.knowledge.clusters import (
    Item,
    classes_without_id,
    cluster_lines,
    failure_words,
    overlap,
    unrecognised_logs,
)
from playbook.knowledge.evaluation import parse_corpus_log

USERS = ("alice", "bob", "carol")


def test_two_users_copies_of_one_line_read_alike():
    one = failure_words("/home/alice/src/build/foo.cpp:12:3: error: 'frobnicate_v2' was not declared in this scope")
    other = failure_words(r"C:\Users\bob\work\foo.cpp(88): error: 'frobnicate_v2' was not declared in this scope")
    assert "frobnicate_v2" in one and "error" not in one  # the words any failure line has are left out
    assert overlap(one, other) >= 0.5
    assert overlap(one, failure_words("ld: cannot find -lcublas")) < 0.5
    assert overlap(frozenset(), one) == 0.0


def test_lines_of_one_failure_from_three_threads_are_a_class():
    lines = [f"/home/{user}/x/quux.c:{n}: fatal error: zork/plugh.h: No such file or directory"
             for n, user in enumerate(USERS, 1)]
    items = [Item(f"log{n}", f"https://github.com/o/r/issues/{n}", line, ("some-id",)) for n, line in enumerate(lines)]
    items.append(Item("other", "https://github.com/o/r/issues/9", "CMake Error: The source directory does not exist"))
    clusters = cluster_lines(items)
    assert [len(c.items) for c in clusters] == [3, 1]
    assert clusters[0].threads == ["o/r#0", "o/r#1", "o/r#2"] and clusters[0].projects == ["o/r"]
    assert clusters[0].shared == ["plugh.h", "quux.c"]
    assert clusters[0].labels == {"some-id": 3}
    assert classes_without_id(clusters) == clusters[:1]


def test_logs_of_one_thread_are_one_thread_however_many():
    items = [Item(f"log{n}", f"https://github.com/o/r/issues/5#issuecomment-{n}",
                  "fatal error: zork/plugh.h: No such file or directory") for n in range(4)]
    clusters = cluster_lines(items)
    assert len(clusters) == 1 and len(clusters[0].items) == 4 and clusters[0].threads == ["o/r#5"]
    assert classes_without_id(clusters) == []


def write_log(folder: Path, name: str, source: str, expected: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"# source: {source}\n# expected: {expected}\n{body}\n", encoding="utf-8")
    return path


def test_unrecognised_logs_keeps_the_failed_logs_no_entry_names(tmp_path):
    family = tmp_path / "build-tooling"
    family.mkdir()
    paths = [
        write_log(family, "named.txt", "https://github.com/o/r/issues/1", "cxx-compiler-missing",
                  "CMake Error: CMAKE_CXX_COMPILER not set, after EnableLanguage"),
        write_log(family, "unknown.txt", "https://github.com/o/r/issues/2", "some-id",
                  "building...\nzorkmid.c:3:1: error: the grue ate the frobozz\nmake: *** [all] Error 2"),
        write_log(family, "clean.txt", "https://github.com/o/r/issues/3", "none", "all 12 tests passed"),
    ]
    logs = [parse_corpus_log(path, "train", "build-tooling") for path in paths]
    items = unrecognised_logs(logs, "patterns")
    assert [(item.name, item.line) for item in items] == [
        ("train/build-tooling/unknown.txt", "zorkmid.c:3:1: error: the grue ate the frobozz")]
    with pytest.raises(ValueError):
        unrecognised_logs(logs, "guess")
