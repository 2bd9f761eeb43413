"""A failure pattern with the literal words it cannot match without: the cheap pre-filter of diagnosis.

A log of 50 MB has hundreds of thousands of lines; running every regex of ``failures.yaml`` over all of
them is what made ``playbook diagnose`` take a minute. Every pattern needs some literal text to match
(``'No CMAKE_CUDA_COMPILER could be found'`` needs exactly that; ``'undefined reference to
[`'"]?(?:GOMP_\\w+|omp_\\w+)'`` needs "undefined reference to"). :func:`required_literals` reads that
requirement off the compiled regex itself (Python's regex parser), so nobody keeps a second list in step
with the pattern. :class:`playbook.knowledge.logtext.LogText` finds the lines holding those words with one
byte search each, and the regex runs only on them (and on the lines around them, for a pattern that can
span lines).
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


def _requirement(items: list, first: bool = False) -> frozenset[str] | None:
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
    usable = [c for c in candidates if min(map(len, c)) >= MIN_LITERAL]
    if not usable:
        return None
    if first and min(map(len, usable[0])) >= FIRST_LITERAL_MIN:
        return usable[0]
    return max(usable, key=lambda c: (min(map(len, c)), -len(c)))


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
    """One compiled pattern, the literals that pre-select its lines, and whether it may span lines."""

    regex: re.Pattern[str]
    literals: frozenset[str]
    spans_lines: bool

    @classmethod
    def compile(cls, pattern: str, flags: int = re.IGNORECASE | re.MULTILINE) -> Signature:
        spans = can_span_lines(pattern, flags)
        return cls(re.compile(pattern, flags), required_literals(pattern, flags, first=spans), spans)
