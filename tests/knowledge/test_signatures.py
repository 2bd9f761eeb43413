"""The literal pre-filter (playbook/knowledge/signatures.py, logtext.py) against a plain regex scan: it may
only make diagnosis faster, never change what it finds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playbook.knowledge.failures import ROOT_SIGNATURE, WRAPPER_SIGNATURE, known_findings, load_knowledge_base
from playbook.knowledge.logtext import LogText
from playbook.knowledge.normalise import match_line
from playbook.knowledge.signatures import Signature, can_span_lines, required_literals

DATA = Path(__file__).resolve().parents[1] / "data"
TEXTS = sorted((DATA / "failures").glob("*/*.txt")) + sorted((DATA / "clean").glob("*.txt")) + sorted(
    (DATA / "pastes").glob("*.md"))


@pytest.mark.parametrize("pattern, literals", [
    (r"No CMAKE_CUDA_COMPILER could be found", {"no cmake_cuda_compiler could be found"}),
    (r"undefined reference to [`'\"]?(?:GOMP_\w+|omp_\w+)", {"undefined reference to "}),
    (r"(?:fatal error:?|Cannot open include file:)\s*['\"]?cublas_v2\.h", {"cublas_v2.h"}),
    (r"unsupported (?:GNU|clang) version", {"unsupported "}),
    (r"(?:nvcc fatal|ptxas fatal)", {"nvcc fatal", "ptxas fatal"}),
    (r"\d+", set()),
])
def test_required_literals_are_read_off_the_regex(pattern, literals):
    assert required_literals(pattern) == literals


@pytest.mark.parametrize("pattern, spans", [
    (r"foo\s+bar", True), (r"foo[ \t]+bar", False), (r"foo[^\n]*bar", False), (r"foo[^x]bar", True),
    (r"(?s)foo.*bar", True), (r"foo.*bar", False), (r"foo:\n\s*bar", True), (r"foo\S+bar", False),
])
def test_patterns_that_can_span_lines_are_known(pattern, spans):
    assert can_span_lines(pattern) is spans


def test_every_pattern_has_a_literal_to_pre_filter_with():
    """A pattern without one would be tried on every line of a 50 MB log: write it around the tool's words."""
    for entry in load_knowledge_base().entries:
        for signature in entry.signatures:
            assert signature.literals, f"{entry.id}: {signature.regex.pattern} needs a literal of 3+ characters"
    assert ROOT_SIGNATURE.literals and WRAPPER_SIGNATURE.literals


def _plain_scan(text: str) -> dict[str, int]:
    """Each entry's first matching line, by running every regex over the whole normalised text."""
    lines = text.split("\n")
    normalised = "\n".join(match_line(line) for line in lines)
    found = {}
    for entry in load_knowledge_base().entries:
        starts = [m.start() for m in (p.search(normalised) for p in entry.patterns) if m]
        if starts:
            found[entry.id] = normalised.count("\n", 0, min(starts)) + 1
    return found


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pre_filter_finds_what_a_plain_scan_finds(path):
    text = path.read_text(encoding="utf-8")
    expected = _plain_scan(text)
    found = {f.id: f.line_number for f in known_findings(LogText.from_text(text))}
    explained = {i for f in found for i in load_knowledge_base().get(f).explains}
    assert found == {i: n for i, n in expected.items() if i not in explained}


def test_repeated_lines_keep_their_first_line_number():
    log = LogText.from_text("ok\nnvcc fatal   : Unsupported gpu architecture 'compute_20'\nok\n" * 500)
    finding = next(f for f in known_findings(log) if f.id == "cuda-arch-unsupported")
    assert finding.line_number == 2


def test_a_signature_that_spans_lines_matches_across_them():
    signature = Signature.compile(r"CMake Error at \S+ \(\w+\):\s+Could not find\s+foo")
    log = LogText.from_text("a\nCMake Error at CMakeLists.txt:12 (find_package):\n\n  Could not find\n  foo\n")
    assert signature.spans_lines and log.first_match(signature)[0] == 2
    assert re.search(signature.regex, "\n".join(log.matched(n) for n in range(1, log.line_count + 1)))


def test_overlapping_windows_are_searched_as_one_text():
    """A pattern that can span lines is tried on the lines around each candidate line; candidates close
    together share one text (each line searched once), far apart ones get their own, each whole."""
    from playbook.knowledge.logtext import WINDOW_LINES
    from playbook.knowledge.signatures import SPAN_AFTER, SPAN_BEFORE

    log = LogText.from_text("\n".join(f"line {n}" for n in range(1, 5001)) + "\n")
    windows = list(log.windows([100, 150, 1000]))
    assert [first for first, _ in windows] == [100 - SPAN_BEFORE, 1000 - SPAN_BEFORE]
    assert windows[0][1].split("\n")[-1] == f"line {150 + SPAN_AFTER}"
    assert windows[1][1].split("\n")[-1] == f"line {1000 + SPAN_AFTER}"
    joined = list(log.windows(range(1, 4801, 10)))  # a run of candidates: texts of at most WINDOW_LINES lines
    assert len(joined) > 1 and all(text.count("\n") + 1 <= WINDOW_LINES for _, text in joined)
    covered = {first + i for first, text in joined for i in range(text.count("\n") + 1)}
    assert covered == set(range(1, 4791 + SPAN_AFTER + 1))  # every candidate's whole window, once or more
    signature = Signature.compile(r"line 4321\s+line 4322")
    assert signature.spans_lines and log.first_match(signature)[0] == 4321


@pytest.mark.long
def test_a_large_log_skips_only_literals_it_cannot_hold():
    """Past WORDS_FROM_BYTES of distinct line shapes (digits masked) the log's words spare searches; every
    example inside 5 MB of distinct build lines is still found, on its own line."""
    from playbook.knowledge.logtext import WORDS_FROM_BYTES

    examples = "\n".join(p.read_text(encoding="utf-8") for p in sorted((DATA / "failures").glob("*/*.txt")))
    clean = (DATA / "clean" / "cuda-build.txt").read_text(encoding="utf-8").split("\n")
    letters = str.maketrans("0123456789", "abcdefghij")  # a running number in letters: a shape of its own
    filler = [f"{clean[i % len(clean)]} #{str(i).translate(letters)}" for i in range(WORDS_FROM_BYTES // 40)]
    large = LogText.from_text("\n".join(filler) + "\n" + examples)
    assert large._words is not None
    small = {f.id: f.line_number for f in known_findings(LogText.from_text(examples))}
    assert {f.id: f.line_number - len(filler) for f in known_findings(large)} == small


def test_needs_are_read_per_alternative_with_the_words_of_the_first_line():
    from playbook.knowledge.signatures import Needs, needs

    cuda = needs(r"\bCUDA (?:runtime )?(?:error|failure)\s*:?\s*803\b")
    assert Needs((frozenset({"cuda "}), frozenset({"error"}), frozenset({"803"})),
                 (frozenset({"cuda "}), frozenset({"error"}))) in cuda and len(cuda) == 2
    kfd = needs(r"\bcould not open\s+/dev/kfd\b|\bopen /dev/kfd: \w")
    assert [set().union(*n.anywhere) for n in kfd] == [{"could not open", "dev", "kfd"}, {"open ", "dev", "kfd: "}]
    assert kfd[0].first_line == (frozenset({"could not open"}),)
    # a word of a cased alphabet other than Latin: the lowered bytes may miss it, so it narrows nothing
    assert needs(r"Не является командой") == (Needs((), ()),)


def test_a_literal_with_digits_is_found_only_where_its_digits_are():
    """Lines are searched by their shape (digits masked): a literal with digits is then read in the lines."""
    signature = Signature.compile(r"BLAS = 0\b")
    log = LogText.from_text("BLAS = 1\nBLAS = 10\nBLAS = 0\n")
    assert list(log.candidates(signature)) == [3] and log.first_match(signature)[0] == 3
    assert list(log.candidates(Signature.compile(r"BLAS = 7"))) == []


def test_a_match_may_start_on_a_repeated_line_in_a_window():
    """A window is searched when it holds a line where a match may start: a repeat counts, though only the
    first line of each kind is a candidate."""
    signature = Signature.compile(r"start\s+bar baz qux")
    assert signature.literals == {"bar baz qux"} and signature.needs[0].first_line == (frozenset({"start"}),)
    lines = ["start", "other"] + [f"filler {n}" for n in range(297)] + ["start", "bar baz qux"]
    log = LogText.from_text("\n".join(lines) + "\n")
    assert log.first_match(signature)[0] == 300


def test_windows_without_a_needed_word_are_not_searched():
    from playbook.knowledge.signatures import SPAN_BEFORE

    signature = Signature.compile(r"CUDA error\s*:?\s*803\b")
    lines = [f"CUDA error: {n}" for n in range(300)] + [f"filler {n}" for n in range(1000)] + ["CUDA error:", "803"]
    log = LogText.from_text("\n".join(lines) + "\n")
    assert len(list(log.windows(log.candidates(signature)))) == 2
    searched = list(log.windows(log.candidates(signature), log._window_needs(signature)))
    assert [first for first, _ in searched] == [1301 - SPAN_BEFORE] and log.first_match(signature)[0] == 1301
