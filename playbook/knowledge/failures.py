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
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from playbook.errors import KnowledgeBaseError, PlaybookError

KNOWLEDGE_FILE = "failures.yaml"
PLATFORMS = ("any", "linux", "windows", "macos", "wsl")
STAGES = ("any", "configure", "build", "import", "load", "run")


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

    @property
    def known(self) -> bool:
        return self.id != UNRECOGNISED


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
            bad = [p for p in platforms if p not in PLATFORMS] + [s for s in stages if s not in STAGES]
            if bad:
                raise KnowledgeBaseError(f"{failure_id}: unknown platform or stage {bad}")
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
                )
            )
        except KeyError as missing:
            raise KnowledgeBaseError(f"failure entry {raw.get('id', raw)!r} lacks key {missing}") from None
        except re.error as err:
            raise KnowledgeBaseError(f"failure entry {raw.get('id')!r} has a bad pattern: {err}") from None
    return KnowledgeBase(version=int(document.get("version", 0)), entries=tuple(entries))


@lru_cache(maxsize=1)
def load_knowledge_base() -> KnowledgeBase:
    text = resources.files("playbook.knowledge").joinpath(KNOWLEDGE_FILE).read_text(encoding="utf-8")
    return parse_knowledge_base(yaml.safe_load(text))


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
    return [finding for _, _, finding in findings]


def diagnose_file(path: Path, unrecognised_stage: str = "", **kwargs: Any) -> list[Finding]:
    """:func:`diagnose_text` over a file; with ``unrecognised_stage`` (the file is known to show a
    failure), an :data:`UNRECOGNISED` finding when no entry matches."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise PlaybookError(f"cannot read {path}: {err.strerror or err}") from None
    findings = diagnose_text(text, **kwargs)
    if not findings and unrecognised_stage:
        findings = [unrecognised(text, unrecognised_stage)]
    return findings


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


def unrecognised(text: str, stage: str) -> Finding:
    """The fallback for a text that plainly failed and that no entry names: its first error line and the
    stage, never "nothing is wrong"."""
    lines = text.split("\n")
    line_number, evidence = 0, ""
    for match in ERROR_LINE.finditer(text):
        if not BENIGN_LINE.search(match.group(0)):
            line_number = text.count("\n", 0, match.start()) + 1
            evidence = lines[line_number - 1].strip()[:400]
            break
    if not evidence:
        tail = [line.strip() for line in lines if line.strip()][-1:]
        evidence = tail[0][:400] if tail else "(no output)"
    return Finding(UNRECOGNISED, f"{stage} failed, and no known failure matches", evidence, line_number,
                   "No entry of the knowledge base matches this text.",
                   f"Read the {stage} log around line {line_number or 'its end'}; once fixed, "
                   "`playbook diagnose` names it if it recurs.", False, stage)
