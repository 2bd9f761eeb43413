"""Attestation: ``provenance.json``, an in-toto Statement with a SLSA v1 provenance predicate.

The subject is the wheel each successful build attempt made; the parameters are the external
parameters; the source, the CUDA toolkit, the compilers, CMake, ninja, ccache and Python are the
resolved dependencies; every other file of the run folder (executed notebooks, logs, facts,
plots) is a byproduct with its sha256. ``manifest.json`` is written after it and lists it, so
``playbook check`` can hold each file against both.

The attestation is built from the run folder's files only (never from this process's state),
so a run folder written before attestation existed gets one afterwards (``retroactive``).
Field names follow the in-toto and SLSA JSON spelling.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from playbook.files import atomic_write_text, sha256_of
from playbook.runfolder.folder import RunFolder, utc_now
from playbook.runfolder.layout import ATTESTATION, LOCK, MANIFEST, Layout
from playbook.serialization import read_json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:llama-cpp-playbook:run:v1"  # outputs/README.md describes it
BUILDER_ID = "urn:llama-cpp-playbook:runner"
# Written from the archive after the run; not part of what the run attests.
DERIVED = ("report/*",)
MEDIA_TYPES = {
    ".ipynb": "application/x-ipynb+json",
    ".json": "application/json",
    ".log": "text/plain",
    ".csv": "text/csv",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".whl": "application/zip",
}


@dataclass
class ResourceDescriptor:
    name: str = ""
    uri: str = ""
    digest: dict[str, str] = field(default_factory=dict)
    mediaType: str = ""
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildDefinition:
    buildType: str
    externalParameters: dict[str, Any]
    internalParameters: dict[str, Any]
    resolvedDependencies: list[ResourceDescriptor]


@dataclass
class Builder:
    id: str
    version: dict[str, str] = field(default_factory=dict)


@dataclass
class BuildMetadata:
    invocationId: str
    startedOn: str
    finishedOn: str


@dataclass
class RunDetails:
    builder: Builder
    metadata: BuildMetadata
    byproducts: list[ResourceDescriptor]


@dataclass
class Provenance:
    buildDefinition: BuildDefinition
    runDetails: RunDetails


@dataclass
class Statement:
    subject: list[ResourceDescriptor]
    predicate: Provenance
    predicateType: str = PREDICATE_TYPE
    _type: str = STATEMENT_TYPE

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        build, details = data["predicate"]["buildDefinition"], data["predicate"]["runDetails"]
        data["subject"] = _compact(data["subject"])
        build["resolvedDependencies"] = _compact(build["resolvedDependencies"])
        details["byproducts"] = _compact(details["byproducts"])
        # in-toto readers expect _type first
        return {"_type": data.pop("_type"), **data}


def is_derived(relative: str) -> bool:
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in DERIVED)


def build_statement(run: RunFolder, retroactive: str = "") -> Statement:
    """The attestation of ``run`` from its files. ``retroactive``: why it is written after the
    run (recorded in the internal parameters); empty when the chain writes it as the run ends."""
    from playbook.facts import Facts
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.verify.step import VerifyResult

    layout = run.layout
    record = run.record()
    builds = {n: read_json(BuildResult, layout.build_result(n)) for n in layout.attempts("build")}
    verifies = {n: read_json(VerifyResult, layout.verify_result(n)) for n in layout.attempts("verify")}
    subjects = [_wheel_subject(layout, n, b, verifies.get(n)) for n, b in builds.items() if b.ok and b.wheel]
    subject_paths = {s.annotations["path"] for s in subjects}
    facts = read_json(Facts, layout.detect_facts) if layout.detect_facts.is_file() else None
    plan_attempts = layout.attempts("plan")
    plan = read_json(BuildPlan, layout.plan(plan_attempts[-1])) if plan_attempts else None
    internal: dict[str, Any] = {
        "plan": {key: _plain(getattr(plan, key)) for key in (
            "attempt", "backend", "cmake_args", "env", "jobs", "build_isolation", "find_links", "cuda_toolkit",
            "cuda_architectures", "remedies_applied")} if plan else {},
        "attempts": [
            {"attempt": n, "ok": b.ok, "duration_s": b.duration_s, "fingerprint": b.fingerprint,
             "reused_wheel": b.reused_wheel, "command": b.command,
             "verified": verifies[n].ok if n in verifies else None}
            for n, b in builds.items()
        ],
        "machine": _machine(facts) if facts else {},
        "outcome": record.outcome.value,
        "message": record.message,
    }
    if retroactive:
        internal["attestation"] = {"retroactive": True, "written": utc_now(), "note": retroactive}
    parameters = json.loads(layout.params.read_text()) if layout.params.is_file() else {}
    return Statement(
        subject=subjects,
        predicate=Provenance(
            buildDefinition=BuildDefinition(
                buildType=BUILD_TYPE,
                externalParameters={"parameters": parameters, "params_source": record.params_source},
                internalParameters=internal,
                resolvedDependencies=_dependencies(builds, facts, plan, parameters.get("source", {})),
            ),
            runDetails=RunDetails(
                builder=Builder(BUILDER_ID, {} if retroactive else _builder_versions()),
                metadata=BuildMetadata(run.run_id, record.started, record.finished),
                byproducts=[
                    ResourceDescriptor(name=rel, digest={"sha256": sha256_of(path)},
                                       mediaType=MEDIA_TYPES.get(path.suffix, ""))
                    for rel, path in _files(run.path)
                    if rel not in subject_paths and rel not in (MANIFEST, ATTESTATION, LOCK)
                ],
            ),
        ),
    )


def write_attestation(run: RunFolder, retroactive: str = "") -> Path:
    return atomic_write_text(run.layout.attestation, json.dumps(build_statement(run, retroactive).to_dict(), indent=2) + "\n")


def _files(run_dir: Path) -> list[tuple[str, Path]]:
    return [(p.relative_to(run_dir).as_posix(), p) for p in sorted(run_dir.rglob("*"))
            if p.is_file() and not is_derived(p.relative_to(run_dir).as_posix())]


def _wheel_subject(layout: Layout, attempt: int, build: Any, verify: Any) -> ResourceDescriptor:
    wheel = build.wheel
    return ResourceDescriptor(
        name=wheel.name,
        digest={"sha256": wheel.sha256},
        mediaType=MEDIA_TYPES[".whl"],
        annotations={"path": layout.in_run(layout.wheel_dir(attempt) / wheel.name), "attempt": attempt,
                     "size_bytes": wheel.size_bytes, "verified": verify.ok if verify else None,
                     **({"reused_from_wheel_cache": build.reused_wheel} if build.reused_wheel else {})},
    )


def _dependencies(builds: dict[int, Any], facts: Any, plan: Any, pinned: dict[str, Any]) -> list[ResourceDescriptor]:
    deps: list[ResourceDescriptor] = []
    last = builds[max(builds)] if builds else None
    if last is not None and last.source:
        deps.append(_source_descriptor(last.source, pinned))
    if facts is None:
        return deps
    assembled = (last.toolkit or {}) if last is not None else {}
    if assembled:
        deps.append(ResourceDescriptor(name="cuda-toolkit", uri=_file_uri(assembled["root"]),
                                       annotations={"release": assembled["release"], "base": assembled["base"],
                                                    "assembled_from": "NVIDIA's PyPI wheels"}))
        deps += [ResourceDescriptor(name=w["package"], uri=w["uri"], digest={"sha256": w["sha256"]},
                                    annotations={"file": w["file"]}) for w in assembled["wheels"]]
    toolkit = next((t for t in facts.cuda_toolkits if plan and t.root == plan.cuda_toolkit), None)
    if toolkit and not assembled:
        deps.append(ResourceDescriptor(name="cuda-toolkit", uri=_file_uri(toolkit.root),
                                       annotations={"version": toolkit.version, "nvcc": toolkit.nvcc,
                                                    "has_cublas": toolkit.has_cublas}))
    seen: set[str] = set()
    for tool in [*facts.compilers, facts.cmake, facts.ninja, facts.ccache]:
        if tool and tool.found and tool.path not in seen:
            seen.add(tool.path)
            deps.append(ResourceDescriptor(name=Path(tool.name).name, uri=_file_uri(tool.path),
                                           annotations={"version": tool.version, "banner": tool.banner}))
    python = facts.python
    deps.append(ResourceDescriptor(name="python", uri=_file_uri(python.executable),
                                   annotations={"version": python.version, "implementation": python.implementation,
                                                "pip_version": python.pip_version}))
    return deps


def _source_descriptor(source: Any, pinned: dict[str, Any]) -> ResourceDescriptor:
    version = source.version
    if source.kind == "sdist":
        return ResourceDescriptor(name=Path(source.path).name, uri=f"pkg:pypi/llama-cpp-python@{version}",
                                  digest={"sha256": source.sha256},
                                  annotations={"origin": source.origin, "path": source.path})
    # A source tree is not hashed; name the sdist it was made from, and say how that is known.
    annotations: dict[str, Any] = {"origin": source.origin, "version": version, "kind": "tree"}
    bundle = Path(source.path).parent.parent / "BUNDLE.json"
    if bundle.is_file():
        annotations["sdist_sha256"] = json.loads(bundle.read_text()).get("sdist_sha256", "")
        annotations["sdist_sha256_from"] = f"{bundle} (the offline bundle the tree was trimmed from)"
    elif pinned.get("sha256"):
        annotations["sdist_sha256"] = pinned["sha256"]
        annotations["sdist_sha256_from"] = "parameters (source.sha256); the tree itself was not hashed"
    return ResourceDescriptor(name=f"llama-cpp-python-{version}", uri=_file_uri(source.path), annotations=annotations)


def _machine(facts: Any) -> dict[str, Any]:
    return {
        "os": facts.os.pretty_name,
        "cpu": facts.cpu.model,
        "logical_cores": facts.cpu.logical_cores,
        "memory_total_mib": facts.memory.total_mib,
        "gpus": [{"name": g.name, "compute_capability": g.compute_capability, "memory_total_mib": g.memory_total_mib}
                 for g in facts.gpus],
        "driver": {"version": facts.driver.version, "cuda_version": facts.driver.cuda_version},
    }


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: getattr(v, "value", str(v))))


def _builder_versions() -> dict[str, str]:
    versions = {}
    for dist in ("llama-cpp-playbook", "papermill", "nbclient"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _file_uri(path: str) -> str:
    return Path(path).as_uri() if path and Path(path).is_absolute() else path


def _compact(descriptors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Resource descriptors without their unset fields, as the in-toto spec asks."""
    return [{k: v for k, v in d.items() if v not in ("", {}, [])} for d in descriptors]
