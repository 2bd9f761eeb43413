"""A log as diagnosis reads it: bytes searched once per literal, lines decoded only where a pattern may match.

:class:`LogText` keeps the log's bytes and a lowercase copy. A pattern's literal words
(:mod:`playbook.knowledge.signatures`) are found with one byte search each; only the lines that hold them
are decoded, normalised (:func:`playbook.knowledge.normalise.match_line`) and given to the regex, each
distinct line once. :func:`read_log` refuses what is no log (a binary file), reads a PowerShell-redirected
UTF-16 log and a Windows ANSI-code-page log, and drops colour codes before anything is searched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from playbook.errors import NotALogError, PlaybookError
from playbook.knowledge.normalise import match_line, paste_line, translations
from playbook.knowledge.signatures import SPAN_AFTER, SPAN_BEFORE, Signature, required_literals

SAMPLE = 65536
# The most lines one text of joined windows holds (LogText.windows): big enough that a run of candidates is
# searched in a few texts, small enough that a match near its start is found without joining the whole log.
WINDOW_LINES = 2000
# From this many bytes of distinct lines on, a literal with a word the log lacks is not searched for.
WORDS_FROM_BYTES = 4_000_000
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
    found = set()
    for row in translations():
        pattern = row.local.pattern
        found |= required_literals(pattern) or ({pattern.lower()} if pattern.isalpha() and not pattern.isascii() else set())
    return tuple(sorted(found))


def _holds_translation(raw: bytes) -> bool:
    lowered = raw.lower()
    return any(literal in lowered for literal in _translated_needles())


@lru_cache(maxsize=1)
def _translated_needles() -> tuple[bytes, ...]:
    return tuple(literal.encode("utf-8") for literal in translated_literals())


def read_log(path: Path) -> LogText:
    """The file at ``path`` as a :class:`LogText` (a :class:`PlaybookError` when it cannot be read)."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise PlaybookError(f"cannot read {path}: {err.strerror or err}") from None
    return LogText(decode_log(data, str(path)))


class LogText:
    """A log's lines, numbered from 1 as :meth:`str.split` on ``\\n`` numbers them.

    Long logs repeat themselves (progress lines, the same warning per file), and a pattern's first match is
    on the first line of its kind: the literals are therefore searched in the log's distinct lines only,
    each at the number of its first occurrence."""

    def __init__(self, data: bytes):
        self.data = data
        self.lines = data.split(b"\n")
        distinct = list(dict.fromkeys(self.lines))
        # the number of each distinct line's first occurrence: the last write of a reversed walk wins
        first = dict(zip(reversed(self.lines), range(len(self.lines), 0, -1)))
        self._first_numbers = np.array([first[line] for line in distinct], dtype=np.int64)
        self._distinct_lowered = b"\n".join(distinct).lower()
        ends = np.flatnonzero(np.frombuffer(self._distinct_lowered, dtype=np.uint8) == 10)
        self._distinct_starts = np.concatenate(([0], ends + 1)).astype(np.int64)
        self._matched: dict[int, str] = {}
        self._normalised: dict[bytes, str] = {}
        self._lines_with: dict[str, np.ndarray] = {}

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
        line = self._matched.get(number)
        if line is None:
            raw = self.lines[number - 1]
            line = self._normalised.get(raw)
            if line is None:
                translate = bool(len(self._translated_lines)) and _holds_translation(raw)
                line = self._normalised[raw] = match_line(raw.decode("utf-8", "replace"), translate)
            self._matched[number] = line
        return line

    def lines_with(self, literals: Iterable[str]) -> np.ndarray:
        """The sorted numbers of the first lines of each kind that hold any of ``literals`` (lowercase), or a
        translated message (whose English words the literal may be)."""
        found = [self._lines_with_literal(literal) for literal in sorted(set(literals))]
        found.append(self._translated_lines)
        return np.unique(np.concatenate(found))

    @cached_property
    def _words(self) -> set[bytes] | None:
        """The log's distinct words (runs of letters, digits and underscores), for a large log only, where
        they spare the searches for literals that cannot occur."""
        if len(self._distinct_lowered) <= WORDS_FROM_BYTES:
            return None
        return set(self._distinct_lowered.translate(_NOT_WORD_TO_SPACE).split())

    def _absent(self, literal: str) -> bool:
        """Whether ``literal`` holds a whole word that the log lacks (so it cannot occur). A word at the
        literal's edge counts only where the literal ends in a non-word character there: else it may be
        the end or start of a longer word."""
        words = self._words
        if words is None:
            return False
        raw = literal.encode("utf-8")
        tokens = raw.translate(_NOT_WORD_TO_SPACE).split()
        if not tokens:
            return False
        first = 0 if raw[:1].translate(_NOT_WORD_TO_SPACE) == b" " else 1
        last = len(tokens) if raw[-1:].translate(_NOT_WORD_TO_SPACE) == b" " else len(tokens) - 1
        return any(token not in words for token in tokens[first:last])

    def _lines_with_literal(self, literal: str) -> np.ndarray:
        lines = self._lines_with.get(literal)
        if lines is None and self._absent(literal):
            lines = self._lines_with[literal] = np.empty(0, dtype=np.int64)
        if lines is None:
            needle = literal.encode("utf-8")
            haystack = self._distinct_lowered
            positions = []
            at = haystack.find(needle)
            while at >= 0:
                positions.append(at)
                line_end = haystack.find(b"\n", at)  # the rest of this line is no second line
                if line_end < 0:
                    break
                at = haystack.find(needle, line_end + 1)
            distinct = np.searchsorted(self._distinct_starts, np.array(positions, dtype=np.int64), side="right") - 1
            lines = np.sort(self._first_numbers[distinct])
            self._lines_with[literal] = lines
        return lines

    @cached_property
    def _translated_lines(self) -> np.ndarray:
        found = [self._lines_with_literal(literal) for literal in translated_literals()]
        return np.unique(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)

    def windows(self, numbers: Iterable[int]) -> Iterator[tuple[int, str]]:
        """The matched lines around each of ``numbers`` (ascending), for a pattern that can span lines, with
        each text's first line number. Overlapping windows are joined into one text (up to
        :data:`WINDOW_LINES` lines), so that a line held by many candidates' windows is searched once, not
        once per candidate: a common literal's lines of a large log would otherwise cost minutes."""
        start = end = 0
        for number in numbers:
            first, last = max(1, number - SPAN_BEFORE), min(self.line_count, number + SPAN_AFTER)
            if end and first <= end + 1 and last - start < WINDOW_LINES:
                end = max(end, last)
                continue
            if end:
                yield start, "\n".join(self.matched(n) for n in range(start, end + 1))
            start, end = first, last
        if end:
            yield start, "\n".join(self.matched(n) for n in range(start, end + 1))

    def candidates(self, signature: Signature) -> Iterator[int]:
        """The lines ``signature`` may match on, in order; every line when it names no literal."""
        if signature.literals:
            yield from (int(n) for n in self.lines_with(signature.literals))
        else:
            yield from range(1, self.line_count + 1)

    def first_match(self, signature: Signature, accept=None) -> tuple[int, re.Match[str]] | None:
        """The first line where ``signature`` matches (and ``accept(line)`` holds), with the match."""
        tried: set[str] = set()
        if signature.spans_lines:
            for first, text in self.windows(self.candidates(signature)):
                if text in tried:
                    continue
                tried.add(text)
                for match in signature.regex.finditer(text):
                    line_number = first + text.count("\n", 0, match.start())
                    if accept is None or accept(self.matched(line_number)):
                        return line_number, match
            return None
        for number in self.candidates(signature):
            line = self.matched(number)
            if line in tried:
                continue
            tried.add(line)
            match = signature.regex.search(line)
            if match and (accept is None or accept(line)):
                return number, match
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
