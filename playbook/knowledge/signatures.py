"""A failure pattern with the literal words it cannot match without: the cheap pre-filter of diagnosis.

A log of 50 MB has hundreds of thousands of lines; running every regex of ``failures.yaml`` over all of
them is what made ``playbook diagnose`` take a minute. Every pattern needs some literal text to match
(``'No CMAKE_CUDA_COMPILER could be found'`` needs exactly that; ``'undefined reference to
[`'"]?(?:GOMP_\\w+|omp_\\w+)'`` needs "undefined reference to"). :func:`required_literals` reads that
requirement off the compiled regex itself (Python's regex parser), so nobody keeps a second list in step
with the pattern. :class:`playbook.knowledge.logtext.LogText` finds the lines holding those words with one
byte search each, and the regex runs only on them (and on the lines around them, for a pattern that can
span lines).

Most patterns need more than one word: ``'CUDA (?:runtime )?error\\s*:?\\s*803'`` needs "cuda ", "error" and
"803", and "cuda " and "error" on the line where the match starts. :func:`needs` reads all of them, per
alternative of ``A|B``, so that only the lines that hold each (and only the windows that hold a line of
each, with a line where a match may start) reach the regex: in a log whose every line is distinct, a word
as common as "cuda " would otherwise send most of the log to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

try:  # Python 3.11 moved the regex parser; the old name still works but warns
    import re._constants as sre_constants
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

# Shorter literals would select too many lines to be worth it.
MIN_LITERAL = 3
# A pattern that spans lines is tried from its first literal on when that literal is this selective.
FIRST_LITERAL_MIN = 10
# The most alternatives a pattern's needs are told apart for (``(a|b)(c|d)`` has four).
MAX_ALTERNATIVES = 32
# Characters that normalisation may change in a log (quotes, separators, line ends): a literal stops at them.
UNSTABLE = set("'\"`\\/\r\n\t") | {"\u2018", "\u2019", "\u201c", "\u201d"}
# How far around a literal's line a pattern that can span lines is tried (a crash far below the line that
# explains it, CMake's message under its header).
SPAN_BEFORE, SPAN_AFTER = 40, 200

_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT) + (
    (sre_constants.POSSESSIVE_REPEAT,) if hasattr(sre_constants, "POSSESSIVE_REPEAT") else ())
_LINE_CROSSING_CATEGORIES = {sre_constants.CATEGORY_SPACE, sre_constants.CATEGORY_NOT_WORD,
                             sre_constants.CATEGORY_NOT_DIGIT, sre_constants.CATEGORY_LINEBREAK}


def required_literals(pattern: str, flags: int = re.IGNORECASE | re.MULTILINE, *, first: bool = False) -> frozenset[str]:
    """Lowercase strings one of which every match of ``pattern`` contains (the most selective such set the
    parse shows; with ``first``, the earliest in the pattern when it is selective enough, for a pattern that
    spans lines and is tried around its literal's line), or an empty set when it needs no literal of
    :data:`MIN_LITERAL` characters."""
    return _requirement(list(sre_parse.parse(pattern, flags)), first) or frozenset()


@dataclass(frozen=True)
class Needs:
    """What a match of one top-level alternative of a pattern holds: one literal of each of ``anywhere``, and
    one of each of ``first_line`` on the line where the match starts (each the most selective first)."""

    anywhere: tuple[frozenset[str], ...]
    first_line: tuple[frozenset[str], ...] = ()


def needs(pattern: str, flags: int = re.IGNORECASE | re.MULTILINE) -> tuple[Needs, ...]:
    """What a match of ``pattern`` holds, per alternative (a match of ``A|B`` is one of ``A`` or of ``B``):
    the literal sets (of :data:`MIN_LITERAL` characters or more) of its sequence, and of those the
    ones before it can first cross a line end. A line, or the lines around a candidate, that lack one of
    them hold no match of that alternative."""
    return _needs(sre_parse.parse(pattern, flags))


def _needs(parsed, spans_lines: bool = True) -> tuple[Needs, ...]:
    """:func:`needs` of a parsed pattern; without ``spans_lines`` (a pattern that stays on one line, where
    every literal is on the first line) no ``first_line``."""
    dotall = bool(parsed.state.flags & re.DOTALL)
    return tuple(Needs(_most_selective_first(_candidates(items)),
                       _most_selective_first(_first_line_candidates(items, dotall)) if spans_lines else ())
                 for items in _alternatives(list(parsed)))


def _most_selective_first(candidates: list[frozenset[str]]) -> tuple[frozenset[str], ...]:
    return tuple(sorted((c for c in _usable(candidates) if _found_in_any_case(c)), key=_selectivity, reverse=True))


def _found_in_any_case(literals: frozenset[str]) -> bool:
    """Whether a byte search of the lowercased log finds ``literals`` in whatever case the log writes them:
    only ASCII letters are lowered there, so a literal with a letter of another cased alphabet may be missed
    (as a narrowing need it would then hide a match)."""
    return all(char.isascii() or char.lower() == char.upper() for literal in literals for char in literal)


def _alternatives(items: list) -> list[list]:
    """A parsed pattern as the sequences of items one of which each match is a match of: each ``A|B`` of
    its top level (or of a group that is the whole pattern) forked into one sequence with ``A`` and one with
    ``B``, while they are at most :data:`MAX_ALTERNATIVES`."""
    if len(items) == 1 and items[0][0] is sre_constants.SUBPATTERN:
        return _alternatives(list(items[0][1][-1]))
    sequences: list[list] = [[]]
    for op, value in items:
        parts = [list(branch) for branch in value[1]] if op is sre_constants.BRANCH else [[(op, value)]]
        if len(sequences) * len(parts) > MAX_ALTERNATIVES:
            parts = [[(op, value)]]
        sequences = [sequence + part for sequence in sequences for part in parts]
    return sequences


def _first_line_candidates(items: list, dotall: bool) -> list[frozenset[str]]:
    """The sets of strings that a match of a sequence of parsed items holds on the line where it starts:
    those of its items before the first that can cross a line end, and that item's own first line's."""
    crossing = next((at for at, item in enumerate(items) if _crosses([item], dotall)), len(items))
    candidates = _candidates(items[:crossing])
    if crossing < len(items):
        op, value = items[crossing]
        found: frozenset[str] | None = None
        if op is sre_constants.SUBPATTERN:
            found = _best(_usable(_first_line_candidates(list(value[-1]), dotall)))
        elif op is sre_constants.BRANCH:
            branches = [_best(_usable(_first_line_candidates(list(branch), dotall))) for branch in value[1]]
            found = frozenset().union(*branches) if all(branches) else None  # type: ignore[arg-type]
        if found:
            candidates.append(found)
    return candidates


def _requirement(items: list, first: bool = False) -> frozenset[str] | None:
    return _best(_usable(_candidates(items)), first)


def _best(usable: list[frozenset[str]], first: bool = False) -> frozenset[str] | None:
    """The most selective of some usable literal sets (with ``first``: the earliest, when selective enough)."""
    if not usable:
        return None
    if first and min(map(len, usable[0])) >= FIRST_LITERAL_MIN:
        return usable[0]
    return max(usable, key=_selectivity)


def _selectivity(literals: frozenset[str]) -> tuple[int, int]:
    """How few lines a literal set is likely to select: long literals, and few of them, select fewer."""
    return min(map(len, literals)), -len(literals)


def _usable(candidates: list[frozenset[str]]) -> list[frozenset[str]]:
    return [c for c in candidates if min(map(len, c)) >= MIN_LITERAL]


def _candidates(items: list) -> list[frozenset[str]]:
    """The sets of strings that a sequence of parsed items needs, in order: each literal run, and each
    group's, alternation's or repeat's own most selective requirement."""
    candidates: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(frozenset(["".join(run)]))
            run.clear()

    for op, value in items:
        if op is sre_constants.LITERAL and chr(value) not in UNSTABLE:
            run.append(chr(value).lower())
            continue
        flush()
        found: frozenset[str] | None = None
        if op is sre_constants.SUBPATTERN:
            found = _requirement(list(value[-1]))
        elif op is sre_constants.BRANCH:
            branches = [_requirement(list(branch)) for branch in value[1]]
            found = frozenset().union(*branches) if all(branches) else None  # type: ignore[arg-type]
        elif op in _REPEATS and value[0] >= 1:
            found = _requirement(list(value[2]))
        elif getattr(sre_constants, "ATOMIC_GROUP", None) is op:
            found = _requirement(list(value))
        if found:
            candidates.append(found)
    flush()
    return candidates


def can_span_lines(pattern: str, flags: int = re.IGNORECASE | re.MULTILINE) -> bool:
    """Whether a match of ``pattern`` may contain a line end (``\\s``, ``\\n``, a negated class...)."""
    parsed = sre_parse.parse(pattern, flags)
    return _crosses(list(parsed), bool(parsed.state.flags & re.DOTALL))


def _crosses(items: list, dotall: bool) -> bool:
    for op, value in items:
        if op is sre_constants.LITERAL and value == 10:
            return True
        if op in (sre_constants.NOT_LITERAL,) and value != 10:
            return True
        if op is sre_constants.ANY and dotall:
            return True
        if op is sre_constants.IN:
            negated = any(o is sre_constants.NEGATE for o, _ in value)
            members = [(o, v) for o, v in value if o is not sre_constants.NEGATE]
            holds_newline = any((o is sre_constants.LITERAL and v == 10)
                                or (o is sre_constants.RANGE and v[0] <= 10 <= v[1])
                                or (o is sre_constants.CATEGORY and v in _LINE_CROSSING_CATEGORIES)
                                for o, v in members)
            if holds_newline != negated:
                return True
        if op is sre_constants.SUBPATTERN and _crosses(list(value[-1]), dotall):
            return True
        if op is sre_constants.BRANCH and any(_crosses(list(b), dotall) for b in value[1]):
            return True
        if op in _REPEATS and _crosses(list(value[2]), dotall):
            return True
        if getattr(sre_constants, "ATOMIC_GROUP", None) is op and _crosses(list(value), dotall):
            return True
        if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            continue
    return False


@dataclass(frozen=True)
class Signature:
    """One compiled pattern, the literals that pre-select its lines, whether it may span lines, and what
    each of its alternatives needs (:func:`needs`: a finer pre-filter than ``literals``)."""

    regex: re.Pattern[str]
    literals: frozenset[str]
    spans_lines: bool
    needs: tuple[Needs, ...] = ()

    @classmethod
    def compile(cls, pattern: str, flags: int = re.IGNORECASE | re.MULTILINE) -> Signature:
        return cls.of(re.compile(pattern, flags))

    @classmethod
    def of(cls, regex: re.Pattern[str], spans_lines: bool | None = None) -> Signature:
        """The signature of a compiled ``regex``: one that spans lines when it can (:func:`can_span_lines`),
        unless ``spans_lines`` is False (a regex the caller only ever searches line by line)."""
        parsed = sre_parse.parse(regex.pattern, regex.flags)  # once: parsing is most of loading the patterns
        if spans_lines is None:
            spans_lines = _crosses(list(parsed), bool(parsed.state.flags & re.DOTALL))
        return cls(regex, _requirement(list(parsed), spans_lines) or frozenset(), spans_lines,
                   _needs(parsed, spans_lines))
