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

from playbook.errors import KnowledgeBaseError, NotALogError, PlaybookError  # noqa: F401 (NotALogError: re-exported)
from playbook.knowledge.compatibility import knowledge
from playbook.knowledge.logtext import LogText, read_log
from playbook.knowledge.normalise import FENCE_LINE, QUOTE_PREFIX, failure_record, fold_for_similarity, paste_line  # noqa: F401 (re-exported)
from playbook.knowledge.signatures import Signature
from playbook.knowledge.similarity import CHARS_PER_LINE, LINES_PER_EXAMPLE, Index, Threshold, shipped_index

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
    # Build with a C++ compiler of this machine that links the C++ runtime as a shared library.
    shared_cxx_runtime: bool = False

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
            shared_cxx_runtime=bool(data.get("shared_cxx_runtime", False)),
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
    # The patterns with the literals that pre-select the lines they may match (signatures.py).
    signatures: tuple[Signature, ...] = ()
    # Evidence of a more specific cause (``unless`` in the YAML): a generic symptom (a library that did not
    # load, a crash, CMake's "No CUDA toolset found") whose log also shows one of these is not named by this
    # entry, by pattern or by resemblance. The entry that names the specific cause names the log, or, where
    # none does, it stays unrecognised with its first failure line: a wrong remedy is worse than none.
    unless: tuple[Signature, ...] = ()


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
    # Named by resemblance, not by a pattern (similarity.py): how close (0..1) and the example it resembles.
    # On an unrecognised-failure finding, ``likely`` is the nearest known failure, too far to be named.
    similarity: float = 0.0
    like: str = ""
    likely: str = ""

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

    def without_patterns(self) -> KnowledgeBase:
        """The same entries with no pattern: what diagnosis names by similarity alone (the measure of
        ``benchmarks/similarity_loto.py``)."""
        return dataclasses.replace(self, entries=tuple(dataclasses.replace(e, signatures=()) for e in self.entries))

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
            signatures = tuple(Signature.compile(p) for p in raw["patterns"])
            entries.append(
                FailureEntry(
                    id=failure_id,
                    title=raw["title"],
                    patterns=tuple(signature.regex for signature in signatures),
                    signatures=signatures,
                    cause=raw["cause"].strip(),
                    fix=raw["fix"].strip(),
                    platforms=platforms,
                    stages=stages,
                    specificity=int(raw.get("specificity", 50)),
                    remedy=Remedy.from_dict(raw["remedy"]) if raw.get("remedy") else None,
                    family=family,
                    explains=tuple(raw.get("explains", ())),
                    unless=tuple(Signature.compile(p) for p in raw.get("unless", ())),
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
    return known_findings(LogText.from_text(text), platform=platform, stage=stage, knowledge=knowledge,
                          cuda_version=cuda_version)


def known_findings(
    log: LogText,
    *,
    platform: str = "any",
    stage: str = "any",
    knowledge: KnowledgeBase | None = None,
    cuda_version: str = "",
) -> list[Finding]:
    """:func:`diagnose_text` over a :class:`LogText`: each entry's patterns, pre-selected by their literals."""
    knowledge = knowledge or load_knowledge_base()
    findings: list[tuple[int, int, Finding]] = []
    for entry in knowledge.entries:
        if not _applies(entry.platforms, platform) or not _applies(entry.stages, stage):
            continue
        found = [hit for hit in (log.first_match(signature) for signature in entry.signatures) if hit]
        if not found or yields(entry, log):
            continue
        line_number, _ = min(found, key=lambda hit: (hit[0], hit[1].start()))
        finding = Finding(
            id=entry.id,
            title=entry.title,
            evidence=log.evidence(line_number),
            line_number=line_number,
            cause=entry.cause,
            fix=fill_fix(entry.fix, cuda_version),
            automatic=entry.remedy is not None,
            stage=stage if stage != "any" else "",
        )
        findings.append((-entry.specificity, line_number, finding))
    findings.sort(key=lambda item: (item[0], item[1]))
    return without_explained([finding for _, _, finding in findings], knowledge)


def yields(entry: FailureEntry, log: LogText) -> bool:
    """Whether ``log`` shows evidence of a more specific cause than ``entry``'s (its ``unless`` patterns)."""
    return any(log.first_match(signature) for signature in entry.unless)


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
    """:func:`diagnose_log` over a file (:class:`NotALogError` for a binary file)."""
    return diagnose_log(read_log(path), unrecognised_stage, detect_failure=detect_failure, **kwargs)


def diagnose_log(log: LogText, unrecognised_stage: str = "", *, detect_failure: bool = False,
                 similarity: bool = True, exclude_thread: str = "", exclude_project: str = "",
                 **kwargs: Any) -> list[Finding]:
    """The known failures in ``log`` (:func:`known_findings`). When none matches and the log is known to
    show a failure (``unrecognised_stage``) or, with ``detect_failure``, plainly says something failed:
    the nearest known failure by similarity of its error lines when that is confident enough (see
    :mod:`playbook.knowledge.similarity`), else one :data:`UNRECOGNISED` finding with the first error
    line, the stage, and the nearest known failure as a hint. A log that only seems to fail
    (:func:`seems_failed`: a crash, a refused device, a missing library, in words no tool's error report
    uses) is named when the resemblance is confident and otherwise gets no finding, as a clean log.
    ``exclude_thread`` leaves the examples of one thread out of the comparison (the evaluation scores a
    train log without its own thread's examples); ``exclude_project`` those of a whole project
    (:func:`playbook.knowledge.corpus.project_key`: leave-one-project-out, ``playbook.knowledge.clusters``)."""
    findings = known_findings(log, **kwargs)
    if findings:
        return findings
    plainly_failed = bool(unrecognised_stage) or (detect_failure and first_failure(log) is not None)
    seemingly_failed = detect_failure and similarity and not plainly_failed and bool(trouble_lines(log))
    if not (plainly_failed or seemingly_failed):
        return []
    fallback = unrecognised(log, unrecognised_stage)
    if not similarity:
        return [fallback]
    finding = nearest_failure(log, fallback, knowledge=kwargs.get("knowledge"), cuda_version=kwargs.get("cuda_version", ""),
                              exclude_thread=exclude_thread, exclude_project=exclude_project,
                              routine=not seemingly_failed)
    if seemingly_failed and finding.id == UNRECOGNISED:
        return []  # a log that only seems to fail is named when the resemblance is confident, else left alone
    return [finding]


def normalise_paste(text: str) -> str:
    """The log inside a pasted issue body, line for line (line numbers stay those of the paste): quote
    markers and fence lines go, CRLF becomes LF, everything else is kept as it is."""
    return "\n".join(paste_line(line) for line in text.split("\n"))


def _applies(allowed: tuple[str, ...], actual: str) -> bool:
    return "any" in allowed or actual == "any" or actual in allowed


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

# Lines that say something went wrong in other words than "error" or "failed": a crash, a refused device or
# driver, a missing library or file, an exhausted resource, an API's own error code. A third of the train
# corpus's failure logs have no line that plainly says "error:" (users paste the crash, not a build log).
# These lines widen what the similarity stage compares and the logs it reads (:func:`seems_failed`).
TROUBLE_LINE = re.compile(
    r"^.*(?:\bcannot\b|\bcan'?t\b|\bcould not\b|\bcouldn'?t\b|\bunable to\b|\bnot found\b|\bno such file\b|"
    r"\bnot supported\b|\bunsupported\b|\bnot recogni[sz]ed\b|\billegal (?:hardware )?instruction\b|\bsegfault\b|"
    r"\bsigsegv\b|\bsigill\b|\baborted\b|\bpanic\b|\bexhausted\b|\bout of memory\b|\binsufficient\b|"
    r"\bdenied\b|\binvalid\b|\bcrash|\bError[A-Z]\w+|\bVK_ERROR_\w+|\bCUDA_ERROR_\w+|\bhipError\w+|\bcudaError\w+|"
    r"\bexception\b|0xc0000\w+|\bno kernel image\b|is not defined\b|\bincompatible\b|\bmismatch\b|\bmissing\b|"
    r"\bnot enough\b|\bno (?:\w+ )?devices? (?:was |were )?found\b|\bdevice lost\b|\bis lost\b|\btimed out\b|"
    r"\bundefined symbol\b|\bsig(?:kill|abrt|bus)\b|\bfailure\b|\bor higher is required\b|\bfound: NO\b).*$",
    re.IGNORECASE | re.MULTILINE)
# Lines with such words that successful builds and runs print as well (CMake's checks of optional parts,
# llama.cpp's note on tensors kept off a buffer type, the Makefile's "I ccache not found" note, Metal's bf16
# kernels skipped on a Mac without bfloat): they never make a log seem failed.
ROUTINE_LINE = re.compile(r"^\s*-- |Performing Test|Looking for|- not found\b|- failed\s*$|(?-i:Could NOT find)|"
                          r"cannot be used with preferred buffer type|not supported by glslc|CUDA_ARCHITECTURES_NATIVE=|"
                          r"Git repository not found|not a git repository|Needed a single revision|ambiguous argument 'HEAD'|"
                          r"skipping kernel_\w*bf16\w*\s+\(not supported\)|\bccache not found\b|"
                          r"^PLAYBOOK_RESULT ", re.IGNORECASE)

# Lines that by themselves say that something failed: what makes a text "plainly failed". A tool's own
# report of its error (ROOT) is preferred to the wrappers that only relay it (pip, ninja, make).
ROOT_FAILURE = re.compile(
    r"^[^\n]*(?:^\s*CMake Error\b|\bfatal error\b|(?<![\w-])error(?: [A-Z]{1,3}\d{3,5})?\s*:|"
    r"\bundefined reference to\b|\bcannot find -l\w|\bld returned \d+ exit status|unresolved external symbol|"
    r"\b(?:nvcc|ptxas|nvlink|fatbinary) fatal\b|internal compiler error|[Ss]egmentation fault|\bcore dumped\b|"
    r"GGML_ASSERT|(?<![\w-])error\[E\d{4}\]:|"
    r"terminate called after throwing|Fatal Python error|^\s*Killed\s*$|\bpanicked at\b|"
    r"^\s*(?:\w+\.)*\w*(?:Error|Exception)(?: \[\w+\])?: )[^\n]*$", re.MULTILINE)
WRAPPER_FAILURE = re.compile(
    r"^[^\n]*(?:error: subprocess-exited-with-error|did not run successfully|ERROR: Failed building wheel|"
    r"ERROR: Could not build wheels|ninja: build stopped|^\s*FAILED: |make(?:\[\d+\])?: \*\*\*|"
    r"CMake build failed|Configuring incomplete|error: failed to run custom build command|"
    r"build script failed, must exit now|^\s*\*\* BUILD FAILED \*\*|^\s*[x\u00d7] Failed to (?:build|download and build) ['`])"
    r"[^\n]*$", re.MULTILINE)
HARMLESS_FAILURE = re.compile(r"-Werror|-Wno-error|\bwarning\b|\bdeprecated\b|\b0 errors?\b|error_code|errors?=|"
                              r"Performing Test .* - Failed|- not found$|Traceback \(most recent call last\)",
                              re.IGNORECASE)
# pip's relay of a build's failure, and cargo's of a build script's (its output follows under "--- stderr").
PIP_RELAY = re.compile(r"error: (?:subprocess-exited-with-error|metadata-generation-failed|legacy-install-failure|"
                       r"failed to run custom build command)")

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


def _line_signature(regex: re.Pattern[str]) -> Signature:
    """One of the single-line regexes above, with its literal pre-filter."""
    return Signature.of(regex, spans_lines=False)


ROOT_SIGNATURE = _line_signature(ROOT_FAILURE)
WRAPPER_SIGNATURE = _line_signature(WRAPPER_FAILURE)
ERROR_SIGNATURE = _line_signature(ERROR_LINE)
TROUBLE_SIGNATURE = _line_signature(TROUBLE_LINE)


def _as_log(text: str | LogText) -> LogText:
    return text if isinstance(text, LogText) else LogText.from_text(text)


def _plain_failure(line: str) -> bool:
    return not HARMLESS_FAILURE.search(line) and not PIP_RELAY.search(line)


def seems_failed(text: str | LogText) -> bool:
    """Whether ``text`` says that anything went wrong: it plainly failed (:func:`first_failure`), or it has
    a line of trouble that successful logs do not print (:func:`trouble_lines`)."""
    log = _as_log(text)
    return first_failure(log) is not None or bool(trouble_lines(log))


def first_failure(text: str | LogText) -> tuple[int, str] | None:
    """The line number and text of the first line that plainly reports a failure (a tool's own error
    before pip's, ninja's or cargo's relay of it, and that before a line another tool reports as an error
    by its own prefix: npm's ``npm error``, docker build's ``ERROR:``, PowerShell's error record, see
    :func:`playbook.knowledge.normalise.failure_record`), or None when the text does not say anything failed."""
    log = _as_log(text)
    for signature in (ROOT_SIGNATURE, WRAPPER_SIGNATURE):
        hit = log.first_match(signature, accept=_plain_failure)
        if hit is not None:
            return hit[0], log.evidence(hit[0])
    number = next((int(n) for n in log.lines_with(RECORD_LITERALS) if failure_record(log.raw_line(int(n)))), 0)
    return (number, log.evidence(number)) if number else None


# The words of the prefixes by which a relaying tool reports a line as an error (normalise.failure_record).
RECORD_LITERALS = ("npm err", "##[error]", "error:", "=> error [", "critical:", "fatal:", "categoryinfo",
                   "fullyqualifiederrorid", " error ", "gyp err!", "err! omg", "exception in thread")


# Lines that only relay a failure or frame a message (pip, ninja, make, CMake's header line): they say
# that something failed, not what, so the similarity stage does not compare them.
RELAY_LINE = re.compile(
    r"subprocess-exited-with-error|did not run successfully|Failed building wheel|Could not build wheels|"
    r"Failed to build\b|ninja: build stopped|^\s*FAILED: |make(?:\[\d+\])?: \*\*\*|CMake build failed|"
    r"Configuring incomplete|metadata-generation-failed|This error originates from a subprocess|"
    r"^\s*(?:CMake Error at [^\s]+:\d+ \([\w]+\)|CMake Error):\s*$|^\s*exit code: \d+|^\s*[\u2570\u2502]|"
    r"Traceback \(most recent call last\)|legacy-install-failure|^\s*Call Stack \(most recent call first\)|"
    r"\bhas no attribute '__del__'|Exception ignored in|error: command .* failed with exit code|"
    r"Building wheel for \S+ \(pyproject\.toml\) (?:did not|finished with status 'error')|"
    r"^\s*(?:ERROR|error): (?:Failed|Could not)|failed to run custom build command|"
    r"process didn't exit successfully:|build script failed, must exit now|^\s*\*\* BUILD FAILED \*\*|"
    r"^\s*[x\u00d7] Failed to (?:build|download and build) ['`]|^\s*(?:[|`']->|[\u251c\u2570]\u2500[\u25b6>]) ", re.IGNORECASE)
CMAKE_HEADER = re.compile(r"^\s*CMake Error\b[^\n]*:\s*$")


def error_lines(text: str | LogText, limit: int = 12) -> list[tuple[int, str]]:
    """Up to ``limit`` lines that say what failed, in order (what the similarity stage compares): a tool's
    own errors, any line with an error word and any line of trouble (:data:`TROUBLE_LINE`), less the lines
    that only relay a failure (pip, ninja, make); a CMake error header brings the message lines under it."""
    log = _as_log(text)
    numbers: set[int] = set()
    numbers.update(log.all_matches(ROOT_SIGNATURE, _plain_failure, limit * 2))
    numbers.update(log.all_matches(ERROR_SIGNATURE, lambda line: not BENIGN_LINE.search(line), limit * 2))
    numbers.update(log.all_matches(TROUBLE_SIGNATURE, lambda line: _plain_failure(line) and not BENIGN_LINE.search(line),
                                   limit * 2))
    chosen: list[int] = []
    for number in sorted(numbers):
        line = log.matched(number)
        if CMAKE_HEADER.match(line):
            following = range(number + 1, min(number + 6, log.line_count + 1))
            chosen.extend(n for n in following if log.matched(n).strip() and not RELAY_LINE.search(log.matched(n)))
        elif not RELAY_LINE.search(line):
            chosen.append(number)
    return [(n, log.matched(n)) for n in sorted(set(chosen))[:limit]]


def trouble_lines(text: str | LogText, limit: int = 12) -> list[tuple[int, str]]:
    """Of the first ``limit`` :func:`error_lines`, those that successful logs do not print too
    (:data:`ROUTINE_LINE`): what makes a log seem failed, and what the similarity stage reads of it."""
    return [(number, line) for number, line in error_lines(text, limit) if not ROUTINE_LINE.search(line)]


def failed_stage(text: str | LogText, line_number: int, default: str = "run") -> str:
    """configure, compile, link, import or run: where the failure on ``line_number`` happened
    (``default`` when neither the line nor what precedes it says)."""
    log = _as_log(text)
    line = log.matched(line_number) if 0 < line_number <= log.line_count else ""
    for stage, pattern in STAGE_OF_LINE:
        if pattern.search(line):
            return stage
    for earlier in range(min(line_number, log.line_count + 1) - 1, 0, -1):
        line = log.matched(earlier)
        for stage, pattern in STAGE_MARKERS:
            if pattern.search(line):
                return stage
    return default


def unrecognised(text: str | LogText, stage: str = "") -> Finding:
    """The fallback for a text that plainly failed and that no entry names: its first error line and the
    stage, never "nothing is wrong". A build's stage ("build", or none given) is narrowed to configure,
    compile or link from the text."""
    log = _as_log(text)
    found = first_failure(log)
    if found is None:
        hit = log.first_match(ERROR_SIGNATURE, accept=lambda line: not BENIGN_LINE.search(line))
        number = hit[0] if hit else next((n for n, _ in trouble_lines(log)), 0)  # a log that only seems failed
        found = (number, log.evidence(number)) if number else None
    if found is None:
        tail = next((log.evidence(n) for n in range(log.line_count, 0, -1) if log.evidence(n)), "")
        line_number, evidence = 0, (tail or "(no output)")
    else:
        line_number, evidence = found
    if stage in ("", "any", "build"):
        default = "compile" if stage == "build" else "run"
        stage = failed_stage(log, line_number, default) if line_number else (stage if stage not in ("", "any") else "run")
    return Finding(UNRECOGNISED, f"{stage} failed, and no known failure matches", evidence, line_number,
                   "No entry of the knowledge base matches this text.",
                   f"Read the {stage} log around line {line_number or 'its end'}; once fixed, "
                   "`playbook diagnose` names it if it recurs.", False, stage)


# ------------------------------------------------------------------ the second stage: the nearest example


def error_lines_of(log: LogText, *, routine: bool = True) -> list[str]:
    """The folded error lines the second stage compares, distinct, in order; without ``routine``, only its
    lines of trouble (:func:`playbook.knowledge.failures.trouble_lines`: none that successful logs print too)."""
    lines: list[str] = []
    for _, line in (error_lines if routine else trouble_lines)(log, LINES_PER_EXAMPLE * 2):
        folded = fold_for_similarity(line)[:CHARS_PER_LINE]
        if folded and folded not in lines:
            lines.append(folded)
    return lines[:LINES_PER_EXAMPLE]


def nearest_failure(log: LogText, fallback: Finding, *, knowledge: KnowledgeBase | None = None,
                    cuda_version: str = "", index: tuple[Index, Threshold] | None = None,
                    exclude_thread: str = "", exclude_project: str = "", routine: bool = True) -> Finding:
    """The known failure ``log`` resembles when the resemblance reaches the threshold, else ``fallback``
    (the unrecognised-failure finding) with the nearest id as a hint. Without ``routine`` the lines that
    successful logs print too are not compared (a log that only seems to fail is read by its other lines)."""
    index_, threshold = index or shipped_index()
    knowledge = knowledge or load_knowledge_base()
    match = index_.nearest_id(error_lines_of(log, routine=routine), exclude_thread=exclude_thread,
                              exclude_project=exclude_project)
    if match is None or match.id not in knowledge.ids:
        return fallback
    if match.confidence < threshold.value:
        return dataclasses.replace(fallback, likely=match.id, similarity=match.score, like=match.example.source)
    entry = knowledge.get(match.id)
    if yields(entry, log):  # the log shows a more specific cause than the example it resembles
        return dataclasses.replace(fallback, likely=match.id, similarity=match.score, like=match.example.source)
    return Finding(entry.id, entry.title, fallback.evidence, fallback.line_number, entry.cause,
                   fill_fix(entry.fix, cuda_version), entry.remedy is not None, fallback.stage,
                   similarity=match.score, like=match.example.source)
