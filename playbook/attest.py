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

from playbook.provenance import MANIFEST, RUN_FILE, RunFolder, utc_now
from playbook.source import sha256_of

ATTESTATION = "provenance.json"
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
    run (recorded in the internal parameters); empty when the runner writes it as the run ends."""
    record = _json(run.file(RUN_FILE))
    builds = _attempts(run, "build")
    verifies = {v.get("attempt", n): v for n, v in _attempts(run, "verify").items()}
    subjects = [_wheel_subject(n, b, verifies.get(n)) for n, b in builds.items() if b.get("ok") and b.get("wheel")]
    subject_paths = {s.annotations["path"] for s in subjects}
    detect = _json(run.file("detect.json"))
    plans = _attempts(run, "plan")
    plan = plans[max(plans)] if plans else {}
    internal: dict[str, Any] = {
        "plan": {key: plan.get(key) for key in ("attempt", "backend", "cmake_args", "env", "jobs", "build_isolation",
                                                "find_links", "cuda_toolkit", "cuda_architectures", "remedies_applied")
                 if key in plan},
        "attempts": [
            {"attempt": n, "ok": b.get("ok"), "duration_s": b.get("duration_s"), "fingerprint": b.get("fingerprint", ""),
             "reused_wheel": b.get("reused_wheel", ""), "command": b.get("command", []),
             "verified": verifies[n].get("ok") if n in verifies else None}
            for n, b in builds.items()
        ],
        "machine": _machine(detect),
        "outcome": record.get("outcome", ""),
        "message": record.get("message", ""),
    }
    if retroactive:
        internal["attestation"] = {"retroactive": True, "written": utc_now(), "note": retroactive}
    return Statement(
        subject=subjects,
        predicate=Provenance(
            buildDefinition=BuildDefinition(
                buildType=BUILD_TYPE,
                externalParameters={"parameters": _json(run.file("params.json")),
                                    "params_source": record.get("params_source", "")},
                internalParameters=internal,
                resolvedDependencies=_dependencies(run, builds, detect, plan),
            ),
            runDetails=RunDetails(
                builder=Builder(BUILDER_ID, {} if retroactive else _builder_versions()),
                metadata=BuildMetadata(run.run_id, record.get("started", ""), record.get("finished", "")),
                byproducts=[
                    ResourceDescriptor(name=rel, digest={"sha256": sha256_of(path)},
                                       mediaType=MEDIA_TYPES.get(path.suffix, ""))
                    for rel, path in _files(run.path)
                    if rel not in subject_paths and rel not in (MANIFEST, ATTESTATION)
                ],
            ),
        ),
    )


def write_attestation(run: RunFolder, retroactive: str = "") -> Path:
    path = run.file(ATTESTATION)
    path.write_text(json.dumps(build_statement(run, retroactive).to_dict(), indent=2) + "\n")
    return path


def read_attestation(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / ATTESTATION).read_text())


def _files(run_dir: Path) -> list[tuple[str, Path]]:
    return [(p.relative_to(run_dir).as_posix(), p) for p in sorted(run_dir.rglob("*"))
            if p.is_file() and not is_derived(p.relative_to(run_dir).as_posix())]


def _wheel_subject(attempt: int, build: dict[str, Any], verify: dict[str, Any] | None) -> ResourceDescriptor:
    wheel = build["wheel"]
    return ResourceDescriptor(
        name=wheel["name"],
        digest={"sha256": wheel["sha256"]},
        mediaType=MEDIA_TYPES[".whl"],
        annotations={"path": f"wheelhouse/attempt-{attempt}/{wheel['name']}", "attempt": attempt,
                     "size_bytes": wheel.get("size_bytes"), "verified": verify.get("ok") if verify else None,
                     **({"reused_from_wheel_cache": build["reused_wheel"]} if build.get("reused_wheel") else {})},
    )


def _dependencies(run: RunFolder, builds: dict[int, dict[str, Any]], detect: dict[str, Any],
                  plan: dict[str, Any]) -> list[ResourceDescriptor]:
    deps: list[ResourceDescriptor] = []
    last = builds[max(builds)] if builds else {}
    source = last.get("source") or {}
    if source:
        deps.append(_source_descriptor(source, _json(run.file("params.json")).get("source", {})))
    toolkit = next((t for t in detect.get("cuda_toolkits", []) if t.get("root") == plan.get("cuda_toolkit")), None)
    if toolkit:
        deps.append(ResourceDescriptor(name="cuda-toolkit", uri=_file_uri(toolkit["root"]),
                                       annotations={"version": toolkit.get("version", ""), "nvcc": toolkit.get("nvcc", ""),
                                                    "has_cublas": toolkit.get("has_cublas")}))
    seen: set[str] = set()
    for tool in [*detect.get("compilers", []), detect.get("cmake"), detect.get("ninja"), detect.get("ccache")]:
        if tool and tool.get("found") and tool.get("path") not in seen:
            seen.add(tool["path"])
            deps.append(ResourceDescriptor(name=Path(tool["name"]).name, uri=_file_uri(tool["path"]),
                                           annotations={"version": tool.get("version", ""), "banner": tool.get("banner", "")}))
    python = detect.get("python") or {}
    if python:
        deps.append(ResourceDescriptor(name="python", uri=_file_uri(python.get("executable", "")),
                                       annotations={k: python[k] for k in ("version", "implementation", "pip_version")
                                                    if k in python}))
    return deps


def _source_descriptor(source: dict[str, Any], pinned: dict[str, Any]) -> ResourceDescriptor:
    version = source.get("version", "")
    if source.get("kind") == "sdist":
        return ResourceDescriptor(name=Path(source["path"]).name, uri=f"pkg:pypi/llama-cpp-python@{version}",
                                  digest={"sha256": source["sha256"]},
                                  annotations={"origin": source.get("origin", ""), "path": source["path"]})
    # A source tree is not hashed; name the sdist it was made from, and say how that is known.
    annotations: dict[str, Any] = {"origin": source.get("origin", ""), "version": version, "kind": "tree"}
    bundle = Path(source["path"]).parent.parent / "BUNDLE.json"
    if bundle.is_file():
        annotations["sdist_sha256"] = json.loads(bundle.read_text()).get("sdist_sha256", "")
        annotations["sdist_sha256_from"] = f"{bundle} (the offline bundle the tree was trimmed from)"
    elif pinned.get("sha256"):
        annotations["sdist_sha256"] = pinned["sha256"]
        annotations["sdist_sha256_from"] = "parameters (source.sha256); the tree itself was not hashed"
    return ResourceDescriptor(name=f"llama-cpp-python-{version}", uri=_file_uri(source["path"]), annotations=annotations)


def _machine(detect: dict[str, Any]) -> dict[str, Any]:
    return {
        "os": (detect.get("os") or {}).get("pretty_name", ""),
        "cpu": (detect.get("cpu") or {}).get("model", ""),
        "logical_cores": (detect.get("cpu") or {}).get("logical_cores"),
        "memory_total_mib": (detect.get("memory") or {}).get("total_mib"),
        "gpus": [{"name": g.get("name"), "compute_capability": g.get("compute_capability"),
                  "memory_total_mib": g.get("memory_total_mib")} for g in detect.get("gpus", [])],
        "driver": {k: (detect.get("driver") or {}).get(k) for k in ("version", "cuda_version")},
    }


def _attempts(run: RunFolder, stem: str) -> dict[int, dict[str, Any]]:
    found = {}
    for path in run.path.glob(f"{stem}-attempt-*.json"):
        number = path.stem.rsplit("-", 1)[-1]
        if number.isdigit():
            found[int(number)] = _json(path)
    return dict(sorted(found.items()))


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


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _compact(descriptors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Resource descriptors without their unset fields, as the in-toto spec asks."""
    return [{k: v for k, v in d.items() if v not in ("", {}, [])} for d in descriptors]
