"""``playbook check``: re-hash a run folder against its ``manifest.json`` and ``provenance.json``.

A file is ``ok``, ``changed`` (its sha256 differs), ``missing``, ``absent (not archived)`` (left
out on purpose: marked ``excluded`` in the manifest, or matched by ``--allow-missing``), or ``not
in manifest`` (added afterwards). The attestation must agree with the manifest on every file
both name, and a wheel it names as subject is re-hashed when it is there. ``report/`` is derived
from the archive by ``playbook report`` and is not checked.

The manifest is the root: whoever can rewrite it and the attestation together can hide a change.
Sign or publish the manifest's sha256 where that matters.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.files import sha256_of
from playbook.runfolder.attestation import is_derived
from playbook.runfolder.folder import Outcome, RunFolder, utc_now
from playbook.runfolder.layout import ATTESTATION, LOCK, MANIFEST

OK, CHANGED, MISSING, ABSENT, UNLISTED = "ok", "changed", "missing", "absent (not archived)", "not in manifest"
FAILING = (CHANGED, MISSING, UNLISTED)


@dataclass
class FileCheck:
    path: str
    status: str
    detail: str = ""


@dataclass
class CheckResult:
    run_dir: str
    files: list[FileCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # disagreements that are not one file's status

    @property
    def ok(self) -> bool:
        return not self.problems and not any(f.status in FAILING for f in self.files)

    def lines(self) -> list[str]:
        counts: dict[str, int] = {}
        for f in self.files:
            counts[f.status] = counts.get(f.status, 0) + 1
        tally = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no manifest to check files against"
        head = f"{self.run_dir}: {'ok' if self.ok else 'FAILED'} ({tally})"
        return [head, *(f"  {f.status}: {f.path}" + (f" ({f.detail})" if f.detail else "")
                        for f in self.files if f.status != OK), *(f"  problem: {p}" for p in self.problems)]


def check_run(run_dir: Path, allow_missing: Sequence[str] = ()) -> CheckResult:
    run_dir = Path(run_dir)
    result = CheckResult(str(run_dir))
    manifest_path = run_dir / MANIFEST
    unended = unended_run(run_dir)
    if not manifest_path.is_file():
        result.problems.append(unended or f"no {MANIFEST}: not a run folder, or the run never wrote one")
        return result
    manifest = json.loads(manifest_path.read_text())
    listed: dict[str, dict[str, Any]] = manifest.get("files", {})
    excluded: dict[str, str] = manifest.get("excluded", {})

    def left_out(rel: str) -> str:
        if rel in excluded:
            return excluded[rel]
        pattern = next((p for p in allow_missing if fnmatch.fnmatchcase(rel, p)), "")
        return f"--allow-missing {pattern}" if pattern else ""

    for rel, entry in sorted(listed.items()):
        path = run_dir / rel
        if not path.is_file():
            reason = left_out(rel)
            result.files.append(FileCheck(rel, ABSENT, reason) if reason else FileCheck(rel, MISSING))
        elif (actual := sha256_of(path)) != entry["sha256"]:
            result.files.append(FileCheck(rel, CHANGED, f"sha256 {actual[:16]}…, manifest {entry['sha256'][:16]}…"))
        else:
            result.files.append(FileCheck(rel, OK))
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_file() and rel not in listed and rel not in (MANIFEST, LOCK) and not is_derived(rel):
            result.files.append(FileCheck(rel, UNLISTED))

    if ATTESTATION not in listed:
        result.problems.append(unended or f"{MANIFEST} lists no {ATTESTATION}: a run written before attestation "
                               "(`playbook attest RUN_DIR` writes one)")
    else:
        result.problems += _against_attestation(run_dir, listed, left_out)
    return result


def unended_run(run_dir: Path) -> str:
    """What happened to a run that has not ended, and what to run; "" for an ended run (or no run.json).
    Only an ended run is sealed: redacted, attested, its manifest over every file."""
    try:
        record = RunFolder(run_dir).record()
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if record.outcome not in (Outcome.RUNNING, Outcome.INTERRUPTED):
        return ""
    last = record.steps[-1] if record.steps else None
    where = f"{last.step.label(last.attempt)} ({last.outcome.value})" if last else "no step"
    if record.outcome is Outcome.INTERRUPTED or (last is not None and last.outcome is Outcome.RUNNING):
        what = f"the run was interrupted or killed during {where}"
    else:
        what = (f"the run stopped after {where} without ending: its steps were run one at a time (papermill's "
                "CLI, JupyterLab, or the walkthrough's stop_after)")
    return (f"not sealed: {what}; only a run that ends is attested and its manifest covers every file. "
            f"`playbook resume {run_dir}` runs the steps left and seals it")


def _against_attestation(run_dir: Path, listed: dict[str, dict[str, Any]], left_out) -> list[str]:
    problems = []
    statement = json.loads((run_dir / ATTESTATION).read_text()) if (run_dir / ATTESTATION).is_file() else {}
    if statement.get("predicateType") != "https://slsa.dev/provenance/v1":
        return [f"{ATTESTATION} is not a SLSA v1 provenance statement"]
    attested: dict[str, str] = {}
    for subject in statement.get("subject", []):
        rel = subject.get("annotations", {}).get("path", subject["name"])
        attested[rel] = subject["digest"]["sha256"]
        path = run_dir / rel
        if path.is_file():
            if sha256_of(path) != attested[rel]:
                problems.append(f"wheel {rel}: sha256 differs from the attestation's subject")
        elif not left_out(rel):
            problems.append(f"wheel {rel}: the attestation's subject is missing")
    for byproduct in statement["predicate"]["runDetails"].get("byproducts", []):
        attested[byproduct["name"]] = byproduct["digest"]["sha256"]
    for rel, digest in sorted(attested.items()):
        if rel not in listed:
            problems.append(f"{rel}: attested but not in {MANIFEST}")
        elif listed[rel]["sha256"] != digest:
            problems.append(f"{rel}: {ATTESTATION} and {MANIFEST} disagree on its sha256")
    for rel in sorted(set(listed) - set(attested) - {ATTESTATION}):
        problems.append(f"{rel}: in {MANIFEST} but not attested")
    return problems


def amend_manifest(run_dir: Path, exclude: Sequence[str], what: str) -> Path:
    """For a run folder written before attestation: list the files added since (the attestation)
    in the manifest, mark the absent files matching ``exclude`` as deliberately not archived, and
    record the amendment with the previous manifest's sha256. Refuses when any other file is
    missing or changed: an amendment must not launder a change."""
    run_dir = Path(run_dir)
    before = check_run(run_dir, exclude)
    broken = [f for f in before.files if f.status in (CHANGED, MISSING)]
    if broken:
        raise ValueError("will not amend a manifest whose files do not match it: "
                         + ", ".join(f"{f.path} ({f.status})" for f in broken))
    manifest_path = run_dir / MANIFEST
    previous = sha256_of(manifest_path)
    manifest = json.loads(manifest_path.read_text())
    for f in before.files:
        if f.status == UNLISTED:
            path = run_dir / f.path
            manifest["files"][f.path] = {"sha256": sha256_of(path), "size_bytes": path.stat().st_size}
        elif f.status == ABSENT:
            manifest.setdefault("excluded", {})[f.path] = "deliberately not archived"
    manifest["files"] = dict(sorted(manifest["files"].items()))
    manifest.setdefault("amendments", []).append({"on": utc_now(), "what": what, "previous_sha256": previous})
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest_path
