"""Match build logs, import errors and runtime output against the failure knowledge base.

The knowledge lives in ``playbook/knowledge/failures.yaml``; this module only loads
it and matches it. Each entry has a stable ``id``, regex ``patterns``, a ``cause``,
a ``fix`` in words and, where the playbook can apply it, a ``remedy`` (see
:class:`Remedy`), which :func:`playbook.steps.configure.apply_remedies` turns into a new plan.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from playbook.errors import KnowledgeBaseError, PlaybookError
from playbook.knowledge.compatibility import knowledge

KNOWLEDGE_FILE = "failures.yaml"
PLATFORMS = ("any", "linux", "windows", "macos", "wsl")
STAGES = ("any", "configure", "build", "import", "load", "run")
# What an entry is about; README.md's knowledge-base section counts entries by these.
FAMILIES = ("cuda-configure", "cuda-toolchain", "cuda-runtime", "compiler", "linker", "build-tree", "loader", "cpu",
            "python-packaging", "vulkan", "metal", "hip", "sycl", "playbook-checks")


@dataclass(frozen=True)
class Remedy:
    """A change to the build plan that fixes a failure without a person."""

    cmake_args_add: tuple[str, ...] = ()
    cmake_args_remove: tuple[str, ...] = ()  # regexes over single CMake arguments
    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: tuple[str, ...] = ()
    halve_jobs: bool = False
    extra_packages: tuple[str, ...] = ()
    build_isolation: bool | None = None
    use_detected_arch: bool = False  # replace CMAKE_CUDA_ARCHITECTURES with the GPU's own
    backends: tuple[str, ...] = ()  # the plan backends it applies to; empty: any
    # Add these components of the toolkit's own CUDA release from PyPI (a copy of the toolkit in the cache).
    toolkit_add: tuple[str, ...] = ()
    # Move to a CUDA release from PyPI that compiles the architectures and accepts the host compiler.
    pypi_toolkit: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Remedy:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise KnowledgeBaseError(f"unknown remedy keys {sorted(unknown)}")
        return cls(
            cmake_args_add=tuple(data.get("cmake_args_add", ())),
            cmake_args_remove=tuple(data.get("cmake_args_remove", ())),
            env_set={str(k): str(v) for k, v in data.get("env_set", {}).items()},
            env_unset=tuple(data.get("env_unset", ())),
            halve_jobs=bool(data.get("halve_jobs", False)),
            extra_packages=tuple(data.get("extra_packages", ())),
            build_isolation=data.get("build_isolation"),
            use_detected_arch=bool(data.get("use_detected_arch", False)),
            backends=tuple(data.get("backends", ())),
            toolkit_add=tuple(data.get("toolkit_add", ())),
            pypi_toolkit=bool(data.get("pypi_toolkit", False)),
        )


@dataclass(frozen=True)
class FailureEntry:
    id: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    platforms: tuple[str, ...] = ("any",)
    stages: tuple[str, ...] = ("any",)
    specificity: int = 50  # higher is reported first
    remedy: Remedy | None = None
    family: str = ""
    # Generic symptoms this failure brings with it (a crash, a library that did not load): when both are
    # found, this entry is the cause and theirs is no second one, so they are not reported.
    explains: tuple[str, ...] = ()


# The one finding that is not a knowledge-base entry: the text plainly failed, and no entry names why.
UNRECOGNISED = "unrecognised-failure"


@dataclass(frozen=True)
class Finding:
    """One failure found in a text, with the line that gave it away."""

    id: str
    title: str
    evidence: str
    line_number: int
    cause: str
    fix: str
    automatic: bool
    stage: str = ""  # configure, build, import, load, run: where in the chain it showed

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class KnowledgeBase:
    version: int
    entries: tuple[FailureEntry, ...]

    def get(self, failure_id: str) -> FailureEntry:
        for entry in self.entries:
            if entry.id == failure_id:
                return entry
        raise KeyError(failure_id)

    @property
    def ids(self) -> list[str]:
        return [entry.id for entry in self.entries]

    def families(self) -> dict[str, int]:
        """Entries per family, in the order of :data:`FAMILIES`."""
        counts = {family: sum(entry.family == family for entry in self.entries) for family in FAMILIES}
        return {family: count for family, count in counts.items() if count}


def parse_knowledge_base(document: dict[str, Any]) -> KnowledgeBase:
    entries = []
    seen: set[str] = set()
    for raw in document.get("failures", []):
        try:
            failure_id = raw["id"]
            if failure_id in seen:
                raise KnowledgeBaseError(f"duplicate failure id {failure_id!r}")
            seen.add(failure_id)
            platforms = tuple(raw.get("platforms", ["any"]))
            stages = tuple(raw.get("stages", ["any"]))
            family = str(raw.get("family", ""))
            bad = [p for p in platforms if p not in PLATFORMS] + [s for s in stages if s not in STAGES]
            bad += [family] if family not in FAMILIES else []
            if bad:
                raise KnowledgeBaseError(f"{failure_id}: unknown platform, stage or family {bad}")
            entries.append(
                FailureEntry(
                    id=failure_id,
                    title=raw["title"],
                    patterns=tuple(re.compile(p, re.IGNORECASE | re.MULTILINE) for p in raw["patterns"]),
                    cause=raw["cause"].strip(),
                    fix=raw["fix"].strip(),
                    platforms=platforms,
                    stages=stages,
                    specificity=int(raw.get("specificity", 50)),
                    remedy=Remedy.from_dict(raw["remedy"]) if raw.get("remedy") else None,
                    family=family,
                    explains=tuple(raw.get("explains", ())),
                )
            )
        except KeyError as missing:
            raise KnowledgeBaseError(f"failure entry {raw.get('id', raw)!r} lacks key {missing}") from None
        except re.error as err:
            raise KnowledgeBaseError(f"failure entry {raw.get('id')!r} has a bad pattern: {err}") from None
    for entry in entries:
        unknown = [i for i in entry.explains if i not in seen or i == entry.id]
        if unknown:
            raise KnowledgeBaseError(f"{entry.id}: explains {unknown}, which is no other entry of the knowledge base")
    return KnowledgeBase(version=int(document.get("version", 0)), entries=tuple(entries))


@lru_cache(maxsize=1)
def load_knowledge_base() -> KnowledgeBase:
    return parse_knowledge_base(knowledge(Path(KNOWLEDGE_FILE).stem))


def fill_fix(fix: str, cuda_version: str = "") -> str:
    """A fix text with the CUDA release it is for: ``{cuda}`` (13.0), ``{cuda_dash}`` (13-0, apt package
    names) and ``{cu}`` (pip's -cu12 suffix of CUDA 12 wheels); placeholders stay readable when unknown."""
    parts = re.findall(r"\d+", cuda_version)[:2]
    if len(parts) == 2:
        cuda, dash, cu = ".".join(parts), "-".join(parts), "-cu12" if parts[0] == "12" else ""
    else:
        cuda, dash, cu = "X.Y", "X-Y", "[-cu12 for CUDA 12]"
    return fix.replace("{cuda}", cuda).replace("{cuda_dash}", dash).replace("{cu}", cu)


def diagnose_text(
    text: str,
    *,
    platform: str = "any",
    stage: str = "any",
    knowledge: KnowledgeBase | None = None,
    cuda_version: str = "",
) -> list[Finding]:
    """Every known failure found in ``text``, most specific first, each reported once; fix texts name
    ``cuda_version``'s packages when it is known."""
    knowledge = knowledge or load_knowledge_base()
    text = normalise_paste(text)
    lines = text.split("\n")  # not splitlines(): a progress bar's lone \r must not shift line numbers
    findings: list[tuple[int, int, Finding]] = []
    for entry in knowledge.entries:
        if not _applies(entry.platforms, platform) or not _applies(entry.stages, stage):
            continue
        match = _first_match(entry, text)
        if match is None:
            continue
        line_number = text.count("\n", 0, match.start()) + 1
        evidence = lines[line_number - 1].strip() if line_number <= len(lines) else match.group(0)
        finding = Finding(
            id=entry.id,
            title=entry.title,
            evidence=evidence[:400],
            line_number=line_number,
            cause=entry.cause,
            fix=fill_fix(entry.fix, cuda_version),
            automatic=entry.remedy is not None,
            stage=stage if stage != "any" else "",
        )
        findings.append((-entry.specificity, line_number, finding))
    findings.sort(key=lambda item: (item[0], item[1]))
    return without_explained([finding for _, _, finding in findings], knowledge)


def without_explained(findings: list[Finding], knowledge: KnowledgeBase | None = None) -> list[Finding]:
    """``findings`` less the generic symptoms that another of them explains (``explains`` in the YAML):
    a crash that ``cpu-amx-fault`` names is that fault, not also a reason to reinstall."""
    knowledge = knowledge or load_knowledge_base()
    known = set(knowledge.ids)
    explained = {symptom for f in findings if f.id in known for symptom in knowledge.get(f.id).explains}
    return [f for f in findings if f.id not in explained]


def most_specific_first(findings: list[Finding], knowledge: KnowledgeBase | None = None) -> list[Finding]:
    """Findings gathered from several texts (verify's children) as one list, the way :func:`diagnose_text`
    reports one text's: each id once (its first evidence), none that another explains, the most specific
    first (the order they came in among equals)."""
    knowledge = knowledge or load_knowledge_base()
    specificity = {entry.id: entry.specificity for entry in knowledge.entries}
    first: dict[str, Finding] = {}
    for finding in findings:
        first.setdefault(finding.id, finding)
    kept = without_explained(list(first.values()), knowledge)
    return sorted(kept, key=lambda f: -specificity.get(f.id, 0))


def diagnose_file(path: Path, unrecognised_stage: str = "", *, detect_failure: bool = False,
                  **kwargs: Any) -> list[Finding]:
    """:func:`diagnose_text` over a file. When no entry matches, an :data:`UNRECOGNISED` finding if the
    file is known to show a failure (``unrecognised_stage``), or, with ``detect_failure``, if the text
    plainly says something failed (its first error line and the stage it belongs to)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise PlaybookError(f"cannot read {path}: {err.strerror or err}") from None
    findings = diagnose_text(text, **kwargs)
    if not findings and unrecognised_stage:
        findings = [unrecognised(text, unrecognised_stage)]
    elif not findings and detect_failure and first_failure(text) is not None:
        findings = [unrecognised(text)]
    return findings


# A pasted issue body: Markdown quotes ("> ", nested) before log lines, code fences, Windows line ends.
QUOTE_PREFIX = re.compile(r"^(?:[ \t]{0,3}>[ \t]?)+")
FENCE_LINE = re.compile(r"^[ \t>]*(?:```|~~~)[^\n]*$")


def normalise_paste(text: str) -> str:
    """The log inside a pasted issue body, line for line (line numbers stay those of the paste): quote
    markers and fence lines go, CRLF becomes LF, everything else is kept as it is."""
    lines = []
    for line in text.split("\n"):
        line = line[:-1] if line.endswith("\r") else line
        lines.append("" if FENCE_LINE.match(line) else QUOTE_PREFIX.sub("", line))
    return "\n".join(lines)


def _applies(allowed: tuple[str, ...], actual: str) -> bool:
    return "any" in allowed or actual == "any" or actual in allowed


def _first_match(entry: FailureEntry, text: str) -> re.Match[str] | None:
    matches = [m for m in (p.search(text) for p in entry.patterns) if m]
    return min(matches, key=lambda m: m.start()) if matches else None


def finding_for(failure_id: str, evidence: str, *, stage: str = "", line_number: int = 0,
                knowledge: KnowledgeBase | None = None) -> Finding:
    """A finding the playbook makes itself (verify's checks), described by the knowledge base. Every id
    the code emits is an entry there (a KeyError here is a programming error, and a test catches it)."""
    entry = (knowledge or load_knowledge_base()).get(failure_id)
    return Finding(entry.id, entry.title, evidence, line_number, entry.cause, fill_fix(entry.fix), entry.remedy is not None,
                   stage)


# Lines that say a tool failed, whatever the tool: the fallback's evidence when no entry matches.
ERROR_LINE = re.compile(
    r"^.*(?:\berror\b|\bfatal\b|\bfailed\b|Traceback \(most recent call last\)|Segmentation fault|"
    r"\bKilled\b|\bException\b|\bundefined reference\b).*$", re.IGNORECASE | re.MULTILINE)
BENIGN_LINE = re.compile(r"-Werror|-Wno-error|error_code|errors?=|\b0 errors?\b|_error\.|Failed to build installable"
                         r"|warning:|ERROR: Failed building wheel", re.IGNORECASE)

# Lines that by themselves say that something failed: what makes a text "plainly failed". A tool's own
# report of its error (ROOT) is preferred to the wrappers that only relay it (pip, ninja, make).
ROOT_FAILURE = re.compile(
    r"^[^\n]*(?:^\s*CMake Error\b|\bfatal error\b|(?<![\w-])error(?: [A-Z]{1,3}\d{3,5})?\s*:|"
    r"\bundefined reference to\b|\bcannot find -l\w|\bld returned \d+ exit status|unresolved external symbol|"
    r"\bnvcc fatal\b|internal compiler error|Segmentation fault|\bcore dumped\b|GGML_ASSERT|"
    r"terminate called after throwing|Fatal Python error|^\s*Killed\s*$|"
    r"^\s*(?:\w+\.)*\w*(?:Error|Exception): )[^\n]*$", re.MULTILINE)
WRAPPER_FAILURE = re.compile(
    r"^[^\n]*(?:error: subprocess-exited-with-error|did not run successfully|ERROR: Failed building wheel|"
    r"ERROR: Could not build wheels|ninja: build stopped|^\s*FAILED: |make(?:\[\d+\])?: \*\*\*|"
    r"CMake build failed|Configuring incomplete)[^\n]*$", re.MULTILINE)
HARMLESS_FAILURE = re.compile(r"-Werror|-Wno-error|\bwarning\b|\bdeprecated\b|\b0 errors?\b|error_code|errors?=|"
                              r"Performing Test .* - Failed|- not found$|Traceback \(most recent call last\)",
                              re.IGNORECASE)
PIP_RELAY = re.compile(r"error: (?:subprocess-exited-with-error|metadata-generation-failed|legacy-install-failure)")

# Where in the chain a failing line belongs, by the line itself, then by the nearest step marker before it.
STAGE_OF_LINE = (
    ("link", re.compile(r"undefined reference|cannot find -l|ld returned|collect2|\bLNK\d{4}\b|LINK : fatal|"
                        r"unresolved external|\bld(?:\.\w+)?: ")),
    ("configure", re.compile(r"CMake Error|Configuring incomplete|Could NOT find|compiler identification")),
    ("import", re.compile(r"ImportError|ModuleNotFoundError|Failed to load shared library|cannot open shared object|"
                          r"Could not find module|\bWinError 126\b|DLL load failed")),
    ("compile", re.compile(r"fatal error|\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp|m|mm|comp)[:(]\d+[^\n]*\berror\b|\berror C\d{4}\b|"
                           r"nvcc fatal|internal compiler error|FAILED: \S+\.(?:o|obj)\b")),
)
STAGE_MARKERS = (
    ("link", re.compile(r"Linking (?:C|CXX|CUDA|HIP) (?:shared|static|executable|module)")),
    ("compile", re.compile(r"\*\*\* Building project|Building (?:C|CXX|CUDA|HIP) object|^\s*\[\d+/\d+\] |Run Build Command|"
                           r"running build_ext")),
    ("configure", re.compile(r"\*\*\* Configuring CMake|^\s*-- The (?:C|CXX) compiler identification|^\s*cmake -B ")),
    ("run", re.compile(r"llama_model_load|load_tensors|llama_new_context|ggml_cuda_init|llama_context|print_info:|"
                       r"^\s*ggml_(?:vulkan|metal_init|cuda_init): |system_info")),
    ("import", re.compile(r"^\s*(?:>>> )?(?:import|from) \w+|Traceback \(most recent call last\)")),
)


def first_failure(text: str) -> tuple[int, str] | None:
    """The line number and text of the first line that plainly reports a failure (a tool's own error
    before pip's or ninja's relay of it), or None when the text does not say anything failed."""
    text = normalise_paste(text)
    for pattern in (ROOT_FAILURE, WRAPPER_FAILURE):
        for match in pattern.finditer(text):
            line = match.group(0)
            if HARMLESS_FAILURE.search(line) or PIP_RELAY.search(line):
                continue
            return text.count("\n", 0, match.start()) + 1, line.strip()[:400]
    return None


def failed_stage(text: str, line_number: int, default: str = "run") -> str:
    """configure, compile, link, import or run: where the failure on ``line_number`` happened
    (``default`` when neither the line nor what precedes it says)."""
    lines = normalise_paste(text).split("\n")
    line = lines[line_number - 1] if 0 < line_number <= len(lines) else ""
    for stage, pattern in STAGE_OF_LINE:
        if pattern.search(line):
            return stage
    for earlier in reversed(lines[:max(line_number - 1, 0)]):
        for stage, pattern in STAGE_MARKERS:
            if pattern.search(earlier):
                return stage
    return default


def unrecognised(text: str, stage: str = "") -> Finding:
    """The fallback for a text that plainly failed and that no entry names: its first error line and the
    stage, never "nothing is wrong". A build's stage ("build", or none given) is narrowed to configure,
    compile or link from the text."""
    found = first_failure(text)
    if found is None:
        lines = text.split("\n")
        found = next(((i + 1, lines[i].strip()[:400]) for i, _ in enumerate(lines)
                      if ERROR_LINE.fullmatch(lines[i]) and not BENIGN_LINE.search(lines[i])), None)
    if found is None:
        tail = [line.strip() for line in text.split("\n") if line.strip()][-1:]
        line_number, evidence = 0, (tail[0][:400] if tail else "(no output)")
    else:
        line_number, evidence = found
    if stage in ("", "any", "build"):
        default = "compile" if stage == "build" else "run"
        stage = failed_stage(text, line_number, default) if line_number else (stage if stage not in ("", "any") else "run")
    return Finding(UNRECOGNISED, f"{stage} failed, and no known failure matches", evidence, line_number,
                   "No entry of the knowledge base matches this text.",
                   f"Read the {stage} log around line {line_number or 'its end'}; once fixed, "
                   "`playbook diagnose` names it if it recurs.", False, stage)
