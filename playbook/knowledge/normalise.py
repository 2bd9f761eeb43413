"""One log line as the failure patterns read it, and as the similarity stage compares it.

Two levels, because they serve two readers:

* :func:`match_line` is what ``failures.yaml``'s regexes see: a pasted issue body's Markdown quote markers
  and fences gone, no Windows line end, no ANSI colour, one kind of quote (curly, backtick and straight
  quotes all become ``'`` or ``"``), the user's name in a home folder replaced (``/home/<user>/``,
  ``C:\\Users\\<user>\\``), long hex addresses folded to ``0xADDR``, and a German, French or Chinese
  compiler, linker or shell message turned into its English original (``message_locales.yaml``).
  Versions and line numbers stay: a pattern says ``\\d+`` where any number will do.
* :func:`fold_for_similarity` goes further for the nearest-example stage: lowercase, every path reduced to
  its file name, versions, numbers and addresses to placeholders, so two users' lines of one failure read
  the same.

The log's own line is always kept for the evidence; these only decide what matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from playbook.knowledge.compatibility import knowledge

# A pasted issue body: Markdown quotes ("> ", nested) before log lines, code fences; Nix prints a failed
# builder's last log lines indented under "       > ", which reads the same.
QUOTE_PREFIX = re.compile(r"^(?:[ \t]*>[ \t]?)+")
FENCE_LINE = re.compile(r"^[ \t>]*(?:```|~~~)[^\n]*$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'",
                        "\u00b4": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
                        "\u00ab": '"', "\u00bb": '"', "\u300c": "'", "\u300d": "'", "\uff08": "(", "\uff09": ")",
                        "\uff0c": ","})
# A user name in ASCII is one user's; one in another script is kept: a path the ANSI code page mangles
# is itself a failure's signature.
HOME_FOLDER = re.compile(r"(?P<root>(?:\b[A-Za-z]:)?[\\/](?:Users|home|Documents and Settings)[\\/]{1,2})"
                         r"(?!<user>)(?P<name>[!-.0-9;=?-\[\]-~]+(?: [!-.0-9;=?-\[\]-~]+)?)(?=[\\/])", re.IGNORECASE)
HEX_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{9,}\b")  # an address; 8 digits are a Windows status code


@dataclass(frozen=True)
class Translation:
    language: str
    local: re.Pattern[str]
    english: str
    source: str


@lru_cache(maxsize=1)
def translations() -> tuple[Translation, ...]:
    """The rows of ``message_locales.yaml``, compiled."""
    rows = knowledge("message_locales")["messages"]
    return tuple(Translation(row["language"], re.compile(row["local"], re.IGNORECASE), row["english"], row["source"])
                 for row in rows)


def paste_line(line: str) -> str:
    """A line of a pasted issue body as the log had it: no quote markers, a fence line empty, no CR."""
    line = line.removesuffix("\r")
    return "" if FENCE_LINE.match(line) else QUOTE_PREFIX.sub("", line)


def match_line(line: str, translate: bool = True) -> str:
    """What the failure patterns match: :func:`paste_line`, then colours, quotes, home folders, hex
    addresses and (unless ``translate`` is false: the caller knows the line holds no translated message)
    translated messages normalised (see the module's docstring)."""
    line = paste_line(line)
    if "\x1b" in line:
        line = ANSI.sub("", line)
    if not line.isascii() or "`" in line:
        line = line.translate(QUOTES)
    if "0x" in line:
        line = HEX_ADDRESS.sub("0xADDR", line)
    if "sers" in line or "home" in line or "HOME" in line or "Documents and" in line:
        line = HOME_FOLDER.sub(r"\g<root><user>", line)
    if translate:
        for row in translations():
            line = row.local.sub(row.english, line)
    return line


# ------------------------------------------------------------------ the similarity stage's reading

PATH = re.compile(r"(?:\b[A-Za-z]:)?(?:[\w.+~$<>@-]*[\\/])+(?P<name>[\w.+@-]+)")
VERSION = re.compile(r"\b\d+(?:[._]\d+)+[a-z]?\d*\b")
NUMBER = re.compile(r"\b\d+\b")
SPACES = re.compile(r"\s+")


def fold_for_similarity(line: str) -> str:
    """A matched line reduced to what two users' copies of one failure share: lowercase, paths to their
    file name, versions to ``<v>``, numbers to ``<n>``, quotes and repeated spaces gone."""
    line = match_line(line).lower()
    line = HEX_ADDRESS.sub("<hex>", line.replace("0xaddr", "<hex>"))
    line = PATH.sub(lambda m: m.group("name"), line)
    line = VERSION.sub("<v>", line)
    line = NUMBER.sub("<n>", line)
    line = line.replace("'", " ").replace('"', " ")
    return SPACES.sub(" ", line).strip()
