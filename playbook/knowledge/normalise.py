"""One log line as the failure patterns read it, and as the similarity stage compares it.

Two levels, because they serve two readers:

* :func:`match_line` is what ``failures.yaml``'s regexes see: a pasted issue body's Markdown quote markers
  and fences gone, the prefixes by which another tool relays the line gone (:func:`unwrap`), no Windows
  line end, no ANSI colour, one kind of quote (curly, backtick and straight
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
# A whole line in one Markdown inline-code span (one backtick at each end, none inside).
INLINE_CODE_LINE = re.compile(r"^(?P<indent>[ \t]*)`(?P<code>[^`\n]+)`[ \t.]*$")
HEX_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{9,}\b")  # an address; 8 digits are a Windows status code

# The prefixes by which another tool relays a line of the build it ran, so that the line reads as its own tool
# wrote it (issue 33): a prefix is taken off repeatedly (a CI timestamp before BuildKit's step before npm's
# level), and a Markdown or Nix "> " under it goes too. A group named ``failed`` marks a prefix by which the
# relaying tool itself reports the line as an error (:func:`failure_record`).
TOOL_PREFIX = re.compile(r"""^(?:
    \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?Z[ \t]              # GitHub Actions' (any UTC ISO-8601) timestamp
  | (?P<failed_actions>\#\#\[error\])                             # a GitHub Actions error annotation
  | \#\#\[(?:warning|notice|debug|group|endgroup|command)\]
  | \#\d+[ \t]\d+(?:\.\d+)?[ \t]                              # BuildKit's step and seconds: "#12 30.76 "
  | \#\d+[ \t](?=ERROR:)                                     # BuildKit's step before its "ERROR: ..."
  | [ ]?\d{1,5}\.\d{1,3}[ \t]                                 # BuildKit's seconds in its failed step's summary
  | (?P<failed_npm>npm[ \t](?:error|ERR!))[ \t]?                # npm's error level (npm 10: "npm error")
  | npm[ \t](?:warn|WARN|notice|info|verbose|http|timing|sill)[ \t]?
  | warning:[ \t][\w-]+@\d[\w.+-]*:[ \t]                         # cargo relaying a build script's output
  | (?P<failed_logging>(?:ERROR|CRITICAL|FATAL):[\w.]+:)         # Python's logging, default format
  | (?:WARNING|INFO|DEBUG):[\w.]+:
  | [ \t]*\+[ \t]+(?P<failed_record>CategoryInfo|FullyQualifiedErrorId)[ \t]*:[ \t]?  # PowerShell's error record
  | Uncaught[ \t](?=\w*(?:Error|Exception)\b)                    # a JavaScript console's uncaught error
  | \d{1,6}[ \t](?P<failed_npmlog>error)[ \t](?!generated\b|detected\b)  # npm's debug log: "704 error code 1"
  | \d{1,6}[ \t](?:verbose|info|warn|silly|timing|http|notice)[ \t]
  | gyp[ \t](?P<failed_gyp>ERR!)(?:[ \t]stack)?[ \t]?           # node-gyp: "gyp ERR! stack Error: not found: make"
  | gyp[ \t](?:info|WARN|verb|http)[ \t]?
  | (?P<failed_cmakejs>ERR![ \t]OMG)[ \t]?                       # cmake-js: "ERR! OMG CMake executable is not found."
  | (?P<failed_java>Exception[ \t]in[ \t]thread[ \t]"[^"\n]*")[ \t]  # the JVM: 'Exception in thread "main" java...'
)""", re.VERBOSE)
# Lines a relaying tool adds that say nothing of the failure: a JavaScript stack frame ("    at f (x.js:1:2)"),
# PowerShell's position of the failed command ("At line:1 char:1", "+ ~~~~").
TOOL_NOISE = re.compile(r"^\s+at (?:(?:async |new )?[^\s(]+(?: \[as [^\]]+\])? \(.*:\d+:\d+\)|\S+:\d+:\d+|"
                        r"<anonymous>)\s*$|^\s*At (?:line|\S+):\d+ char:\d+\s*$|^\s*\+ ~+\s*$")
# PowerShell writes the position right after the message, without a space: "...softwareAt line:1 char:1".
POSITION_SUFFIX = re.compile(r"(?<=\S)At line:\d+ char:\d+\s*$")


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
    """A line of a pasted issue body as the log had it: no quote markers, a fence line empty, no CR, and a
    whole line pasted as Markdown inline code (`` `RuntimeError: ...` ``) without its backticks."""
    line = line.removesuffix("\r")
    if FENCE_LINE.match(line):
        return ""
    line = QUOTE_PREFIX.sub("", line)
    if "`" in line:
        line = INLINE_CODE_LINE.sub(r"\g<indent>\g<code>", line)
    return line


def unwrap(line: str) -> tuple[str, bool]:
    """A line without the prefixes by which other tools relay it (:data:`TOOL_PREFIX`; a relaying tool's noise,
    :data:`TOOL_NOISE`, becomes empty), and whether one of them reported it as an error."""
    failed = False
    for _ in range(8):  # prefixes nest a few deep; a bound, not a loop over a line of prefixes
        match = TOOL_PREFIX.match(line)
        if match is None or not match.end():
            break
        failed = failed or any(value for name, value in match.groupdict().items() if name.startswith("failed"))
        line = QUOTE_PREFIX.sub("", line[match.end():])
    if TOOL_NOISE.match(line):
        return "", failed
    if "At line:" in line:
        line = POSITION_SUFFIX.sub("", line)
    return line, failed


# docker build's own report that a step failed: "#12 ERROR: process ..." once BuildKit's step number is off,
# its last line "ERROR: failed to solve: ...", and its terminal view's " => ERROR [stage 9/9] RUN ...".
BUILDKIT_ERROR = re.compile(r"^ERROR: (?:process \"|failed to solve\b)|^\s*=> ERROR \[")


def failure_record(line: str) -> bool:
    """Whether a tool that relays ``line`` reports it as an error: npm's ``npm error``, docker build's
    ``ERROR: process ...``, a GitHub Actions ``##[error]``, Python's ``ERROR:root:``, PowerShell's error record."""
    line = paste_line(line)
    unwrapped, failed = unwrap(ANSI.sub("", line) if "\x1b" in line else line)
    return failed or bool(BUILDKIT_ERROR.match(unwrapped))


def match_line(line: str, translate: bool = True) -> str:
    """What the failure patterns match: :func:`paste_line` and :func:`unwrap`, then colours, quotes, home
    folders, hex addresses and (unless ``translate`` is false: the caller knows the line holds no translated
    message) translated messages normalised (see the module's docstring)."""
    line = paste_line(line)
    if "\x1b" in line:
        line = ANSI.sub("", line)
    line = unwrap(line)[0]
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
