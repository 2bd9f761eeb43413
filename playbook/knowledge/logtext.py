"""A log as diagnosis reads it: bytes searched once per literal, lines decoded only where a pattern may match.

:class:`LogText` keeps the log's bytes and a lowercase copy of its distinct lines. A pattern's literal words
(:mod:`playbook.knowledge.signatures`) are found with one byte search each over the distinct lines' shapes
(their digits masked); only the lines that hold what the pattern needs are decoded, normalised
(:func:`playbook.knowledge.normalise.match_line`) and given to the regex, each distinct line once.
:func:`read_log` refuses what is no log (a binary file), reads a PowerShell-redirected UTF-16 log and a
Windows ANSI-code-page log, and drops colour codes before anything is searched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import count
from pathlib import Path

import numpy as np

from playbook.errors import NotALogError, PlaybookError
from playbook.knowledge.normalise import match_line, paste_line, translations
from playbook.knowledge.signatures import SPAN_AFTER, SPAN_BEFORE, Needs, Signature, required_literals

SAMPLE = 65536
# The most lines one text of joined windows holds (LogText.windows): big enough that a run of candidates is
# searched in a few texts, small enough that a match near its start is found without joining the whole log.
WINDOW_LINES = 2000
# From this many bytes of distinct line shapes on, a literal with a word the log lacks is not searched for.
WORDS_FROM_BYTES = 4_000_000
DIGITS = b"0123456789"
# A line's shape: its digits masked. A long log's lines differ mostly in numbers (timestamps, counters,
# addresses), so its lines of one shape are searched for a literal at once.
DIGITS_TO_ZERO = bytes.maketrans(DIGITS, b"0" * len(DIGITS))
NO_LINES = np.empty(0, dtype=np.int64)
# Searching the lines for one more literal costs about as much as normalising and matching this many lines:
# fewer candidates are tried as they are.
FEW_KINDS = 64
_NOT_WORD_TO_SPACE = bytes(b if (48 <= b <= 57 or 97 <= b <= 122 or b == 95 or b >= 128) else 32 for b in range(256))
ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\n]*\x07")
# Bytes no text log holds (NUL and the C0 controls other than tab, line ends, form feed and ESC).
CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27))


def decode_log(data: bytes, name: str = "the text") -> bytes:
    """``data`` as UTF-8 bytes without colour codes: UTF-16 (with or without its byte-order mark) and
    Windows-1252 are converted; :class:`NotALogError` when it is no text at all."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        data = data.decode("utf-16", "replace").encode("utf-8")
    elif data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    else:
        sample = data[:SAMPLE]
        if len(sample) >= 16 and sample[1::2].count(0) > 0.4 * (len(sample) // 2) and sample[0::2].count(0) < 8:
            data = data.decode("utf-16-le", "replace").encode("utf-8")
        elif len(sample) >= 16 and sample[0::2].count(0) > 0.4 * (len(sample) // 2) and sample[1::2].count(0) < 8:
            data = data.decode("utf-16-be", "replace").encode("utf-8")
    sample = data[:SAMPLE]
    controls = len(sample) - len(sample.translate(None, CONTROL_BYTES))
    if b"\x00" in sample or controls > 0.01 * len(sample) + 2:
        raise NotALogError(f"{name} is a binary file, not a log: give diagnose a build log, a traceback, runtime "
                           "output or a pasted issue body (a text file)")
    if not _is_utf8(sample):
        data = data.decode("cp1252", "replace").encode("utf-8")
    if b"\x1b" in data:
        data = ANSI_BYTES.sub(b"", data)
    return data


def _is_utf8(sample: bytes) -> bool:
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start >= len(sample) - 3  # a character cut by the sample's end
    return True


@lru_cache(maxsize=1)
def translated_literals() -> tuple[str, ...]:
    """The words that mark a line holding a translated message (``message_locales.yaml``). A row that is one
    word of a non-Latin script (Chinese 错误 "error", 警告 "warning") is its own marker, although two
    characters are below the length a pattern's literal needs: they are that selective."""
    found: set[str] = set()
    for row in translations():
        pattern = row.local.pattern
        found |= required_literals(pattern) or ({pattern.lower()} if pattern.isalpha() and not pattern.isascii() else set())
    return tuple(sorted(found))


def read_log(path: Path) -> LogText:
    """The file at ``path`` as a :class:`LogText` (a :class:`PlaybookError` when it cannot be read)."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise PlaybookError(f"cannot read {path}: {err.strerror or err}") from None
    return LogText(decode_log(data, str(path)))


def _line_starts(lines: Sequence[bytes]) -> np.ndarray:
    """Where each of ``lines`` begins in the text they make joined by ``\\n``."""
    ends = np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1)
    return np.concatenate(([0], ends[:-1])).astype(np.int64)


def _lines_holding(text: bytes, starts: np.ndarray, needle: bytes) -> np.ndarray:
    """The indices (ascending) of the lines of ``text``, which begin at ``starts``, that hold ``needle``."""
    positions = []
    at = text.find(needle)
    while at >= 0:
        positions.append(at)
        line_end = text.find(b"\n", at)  # the rest of this line is no second line
        if line_end < 0:
            break
        at = text.find(needle, line_end + 1)
    return np.searchsorted(starts, np.array(positions, dtype=np.int64), side="right") - 1


def _union(arrays: Iterable[np.ndarray]) -> np.ndarray:
    """The ascending union of some ascending arrays."""
    nonempty = [array for array in arrays if len(array)]
    if len(nonempty) <= 1:
        return nonempty[0] if nonempty else NO_LINES
    return np.unique(np.concatenate(nonempty))


def _may_hold_match(needing: Sequence[Sequence[np.ndarray]] | None, kinds: np.ndarray) -> bool:
    """Whether lines of ``kinds`` hold what one of ``needing``'s alternatives needs: for each of its masks
    (over the kinds), a line it marks; None: no need is known."""
    return needing is None or any(all(wanted[kinds].any() for wanted in masks) for masks in needing)


@dataclass(frozen=True)
class Shapes:
    """A log's distinct lines (lowercase) with their digits masked: each shape once, as one text, and the
    shape of each distinct line."""

    text: bytes
    starts: np.ndarray
    of_kind: np.ndarray

    @classmethod
    def of(cls, distinct_lowered: bytes) -> Shapes:
        masked = distinct_lowered.translate(DIGITS_TO_ZERO).split(b"\n")
        index = dict(zip(dict.fromkeys(masked), count()))
        shapes = list(index)
        of_kind = np.fromiter(map(index.__getitem__, masked), dtype=np.int64, count=len(masked))
        return cls(b"\n".join(shapes), _line_starts(shapes), of_kind)


class LogText:
    """A log's lines, numbered from 1 as :meth:`str.split` on ``\\n`` numbers them.

    Long logs repeat themselves (progress lines, the same warning per file), and a pattern's first match is
    on the first line of its kind: the literals are therefore searched in the log's distinct lines only,
    each at the number of its first occurrence. A line's *kind* is the index of its text among the distinct
    lines, in the order they first occur."""

    def __init__(self, data: bytes):
        self.data = data
        self.lines = data.split(b"\n")
        kind_of = dict(zip(dict.fromkeys(self.lines), count()))
        self._kinds = np.fromiter(map(kind_of.__getitem__, self.lines), dtype=np.int64, count=len(self.lines))
        # the number of each kind's first line, ascending as the kinds are
        self._first_numbers = np.unique(self._kinds, return_index=True)[1] + 1
        distinct = list(kind_of)
        self._distinct_lowered = b"\n".join(distinct).lower()
        self._distinct_starts = _line_starts(distinct)
        self._normalised: dict[int, str] = {}
        self._holding: dict[str, np.ndarray] = {}
        self._holding_any: dict[frozenset[str], np.ndarray] = {}

    @classmethod
    def from_text(cls, text: str) -> LogText:
        data = text.encode("utf-8", "replace")
        return cls(ANSI_BYTES.sub(b"", data) if b"\x1b" in data else data)

    @property
    def line_count(self) -> int:
        return len(self.lines)

    def raw_line(self, number: int) -> str:
        """Line ``number`` as the log has it (decoded)."""
        return self.lines[number - 1].decode("utf-8", "replace")

    def evidence(self, number: int) -> str:
        """Line ``number`` as a finding quotes it: the log's own words, a paste's quote markers gone."""
        return paste_line(self.raw_line(number)).strip()[:400]

    def matched(self, number: int) -> str:
        """Line ``number`` as the patterns read it (:func:`match_line`); each distinct line normalised once."""
        kind = int(self._kinds[number - 1])
        line = self._normalised.get(kind)
        return self._normalise(kind) if line is None else line

    def _normalise(self, kind: int) -> str:
        raw = self.lines[self._first_numbers[kind] - 1].decode("utf-8", "replace")
        line = self._normalised[kind] = match_line(raw, translate=bool(self._translates[kind]))
        return line

    def _matched_text(self, first: int, last: int) -> str:
        """Lines ``first`` to ``last`` as the patterns read them, as one text."""
        kinds = self._kinds[first - 1:last].tolist()
        for kind in set(kinds).difference(self._normalised):
            self._normalise(kind)
        return "\n".join(map(self._normalised.__getitem__, kinds))

    def lines_with(self, literals: Iterable[str]) -> np.ndarray:
        """The sorted numbers of the first lines of each kind that hold any of ``literals`` (lowercase), or a
        translated message (whose English words the literal may be)."""
        return self._first_numbers[self._kinds_holding_any(frozenset(literals))]

    def _kinds_holding_any(self, literals: frozenset[str]) -> np.ndarray:
        """The kinds (ascending) whose line holds one of ``literals`` or a translated message."""
        kinds = self._holding_any.get(literals)
        if kinds is None:
            found = [self._kinds_holding(literal) for literal in sorted(literals)]
            kinds = self._holding_any[literals] = _union([*found, self._translated])
        return kinds

    def _kinds_holding_each(self, sets: Iterable[frozenset[str]]) -> np.ndarray:
        """The kinds (ascending) whose line holds one literal of each of ``sets`` (or a translated message),
        or, once they are :data:`FEW_KINDS` or fewer, those that hold the sets searched so far."""
        kinds: np.ndarray | None = None
        for literals in sets:
            holding = self._kinds_holding_any(literals)
            kinds = holding if kinds is None else np.intersect1d(kinds, holding, assume_unique=True)
            if len(kinds) <= FEW_KINDS:
                break
        return NO_LINES if kinds is None else kinds

    def _mask(self, kinds: np.ndarray) -> np.ndarray:
        """``kinds`` as a mask over all kinds."""
        mask = np.zeros(len(self._first_numbers), dtype=bool)
        mask[kinds] = True
        return mask

    @cached_property
    def _shapes(self) -> Shapes:
        return Shapes.of(self._distinct_lowered)

    @cached_property
    def _words(self) -> set[bytes] | None:
        """The words (runs of letters, digits and underscores) of the log's line shapes, for a large log only,
        where they spare the searches for literals that cannot occur."""
        if len(self._shapes.text) <= WORDS_FROM_BYTES:
            return None
        return set(self._shapes.text.translate(_NOT_WORD_TO_SPACE).split())

    def _absent(self, masked: bytes) -> bool:
        """Whether a literal with its digits masked (``masked``) holds a whole word that the log's shapes lack
        (so it cannot occur). A word at the literal's edge counts only where the literal ends in a non-word
        character there: else it may be the end or start of a longer word."""
        words = self._words
        if words is None:
            return False
        tokens = masked.translate(_NOT_WORD_TO_SPACE).split()
        if not tokens:
            return False
        first = 0 if masked[:1].translate(_NOT_WORD_TO_SPACE) == b" " else 1
        last = len(tokens) if masked[-1:].translate(_NOT_WORD_TO_SPACE) == b" " else len(tokens) - 1
        return any(token not in words for token in tokens[first:last])

    def _kinds_holding(self, literal: str) -> np.ndarray:
        """The kinds (ascending) whose line holds ``literal`` (lowercase)."""
        kinds = self._holding.get(literal)
        if kinds is None:
            kinds = self._holding[literal] = self._search(literal.encode("utf-8"))
        return kinds

    def _search(self, needle: bytes) -> np.ndarray:
        """:meth:`_kinds_holding`: the shapes that hold ``needle`` (digits masked) first; a needle without
        digits is in every line of those shapes, one with digits is looked for in the lines themselves."""
        shapes = self._shapes
        masked = needle.translate(DIGITS_TO_ZERO)
        if self._absent(masked):
            return NO_LINES
        found = _lines_holding(shapes.text, shapes.starts, masked)
        if not len(found):
            return NO_LINES
        holds_digits = needle.translate(None, DIGITS) != needle
        if holds_digits:
            return _lines_holding(self._distinct_lowered, self._distinct_starts, needle)
        holds = np.zeros(len(shapes.starts), dtype=bool)
        holds[found] = True
        return np.flatnonzero(holds[shapes.of_kind])

    @cached_property
    def _translated(self) -> np.ndarray:
        """The kinds (ascending) of the lines that hold a translated message."""
        return _union(self._kinds_holding(literal) for literal in translated_literals())

    @cached_property
    def _translates(self) -> np.ndarray:
        """For each kind, whether its line holds a translated message (to be turned into English)."""
        return self._mask(self._translated)

    def windows(self, numbers: Iterable[int], needing: Sequence[Sequence[np.ndarray]] | None = None
                ) -> Iterator[tuple[int, str]]:
        """The matched lines around each of ``numbers`` (ascending), for a pattern that can span lines, with
        each text's first line number. Overlapping windows are joined into one text (up to
        :data:`WINDOW_LINES` lines), so that a line held by many candidates' windows is searched once, not
        once per candidate: a common literal's lines of a large log would otherwise cost minutes. A window
        that lacks the lines the pattern needs (``needing``, see :meth:`_window_needs`) is left out: it
        holds no match."""
        start = end = 0
        for number in numbers:
            first, last = max(1, number - SPAN_BEFORE), min(self.line_count, number + SPAN_AFTER)
            if end and first <= end + 1 and last - start < WINDOW_LINES:
                end = max(end, last)
                continue
            if end and _may_hold_match(needing, self._kinds[start - 1:end]):
                yield start, self._matched_text(start, end)
            start, end = first, last
        if end and _may_hold_match(needing, self._kinds[start - 1:end]):
            yield start, self._matched_text(start, end)

    def candidates(self, signature: Signature) -> Iterator[int]:
        """The lines ``signature`` may match on, in order (for a pattern that spans lines: those its
        windows are centred on); every line when it names no literal."""
        if not signature.literals:
            yield from range(1, self.line_count + 1)
        elif signature.spans_lines:
            yield from self.lines_with(signature.literals).tolist()
        else:
            yield from self._first_numbers[self._candidate_kinds(signature)].tolist()

    def _candidate_kinds(self, signature: Signature) -> np.ndarray:
        """The kinds (ascending) whose line holds what one of the alternatives of a single-line ``signature``
        needs (:attr:`Signature.needs`)."""
        alternatives = [needs.anywhere for needs in signature.needs]
        if not alternatives or not all(alternatives):
            alternatives = [(signature.literals,)]
        return _union(self._kinds_holding_each(sets) for sets in alternatives)

    def _window_needs(self, signature: Signature) -> list[list[np.ndarray]] | None:
        """For a pattern that spans lines, per alternative whose needs are all in the log: masks over the
        kinds, of the lines where a match of it may start and of those that hold each literal set it needs.
        A text without a line of each mask of one of them holds no match. None when the signature knows no
        needs."""
        if not signature.needs:
            return None
        found = (self._needed_masks(needs) for needs in signature.needs)
        return [masks for masks in found if masks is not None]

    def _needed_masks(self, needs: Needs) -> list[np.ndarray] | None:
        """:meth:`_window_needs` of one alternative; None as soon as one of its needs is in no line."""
        masks = []
        for kinds in self._needed_kinds(needs):
            if not len(kinds):
                return None
            masks.append(self._mask(kinds))
        return masks

    def _needed_kinds(self, needs: Needs) -> Iterator[np.ndarray]:
        if needs.first_line:
            yield self._kinds_holding_each(needs.first_line)
        for literals in needs.anywhere:
            yield self._kinds_holding_any(literals)

    def first_match(self, signature: Signature, accept=None) -> tuple[int, re.Match[str]] | None:
        """The first line where ``signature`` matches (and ``accept(line)`` holds), with the match."""
        if signature.spans_lines:
            return self._first_match_in_windows(signature, accept)
        tried: set[str] = set()
        for number in self.candidates(signature):
            line = self.matched(number)
            if line in tried:
                continue
            tried.add(line)
            match = signature.regex.search(line)
            if match and (accept is None or accept(line)):
                return number, match
        return None

    def _first_match_in_windows(self, signature: Signature, accept=None) -> tuple[int, re.Match[str]] | None:
        centres = list(self.candidates(signature))
        needing = self._window_needs(signature) if centres else None
        if needing == []:
            return None  # no alternative of the pattern finds all it needs in the log
        tried: set[str] = set()
        for first, text in self.windows(centres, needing):
            if text in tried:
                continue
            tried.add(text)
            for match in signature.regex.finditer(text):
                line_number = first + text.count("\n", 0, match.start())
                if accept is None or accept(self.matched(line_number)):
                    return line_number, match
        return None

    def all_matches(self, signature: Signature, accept=None, limit: int = 50) -> list[int]:
        """The numbers of up to ``limit`` distinct lines where a single-line ``signature`` matches, in order."""
        found: list[int] = []
        for number in self.candidates(signature):
            line = self.matched(number)
            if signature.regex.search(line) and (accept is None or accept(line)):
                found.append(number)
                if len(found) >= limit:
                    break
        return found
