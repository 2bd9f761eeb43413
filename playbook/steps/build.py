"""Build: run ``pip wheel`` on the checked source with the plan's environment, log everything.

A failed build is a recorded result (``ok=False``), not an exception: ``repair`` reads its log.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbook.backends import registry
from playbook.files import atomic_copy, sha256_of
from playbook.locks import RunLock
from playbook.process import run_captured, run_streaming
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Layout, Step
from playbook.runfolder.redact import redact_env, redact_known, secret_values
from playbook.steps.caches import (
    CcacheStats,
    WheelLookup,
    build_dir,
    cached_wheel,
    ccache_env,
    ccache_user,
    fingerprint,
    read_ccache_stats,
    remove_stale_libraries,
    stable_tree,
    store_wheel,
    url_secret,
)
from playbook.steps.configure import BuildPlan
from playbook.steps.source import SourceInfo
from playbook.toolkits.pypi import ToolkitError
from playbook.toolkits.pypi import provenance as toolkit_provenance

NINJA_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")
ProgressCallback = Callable[[int, int, str], None]


@dataclass
class Progress:
    done: int = 0
    total: int = 0


def last_progress(text: str) -> Progress:
    """ninja's last ``[n/N]`` line in a build log; zeros before CMake's build starts."""
    progress = Progress()
    for line in text.splitlines():
        if match := NINJA_PROGRESS.match(line):
            progress = Progress(int(match.group(1)), int(match.group(2)))
    return progress


def last_progress_of(log_file: Path, tail_bytes: int = 64 * 1024) -> Progress:
    """ninja's last ``[n/N]`` in a build log, read from its tail (a CUDA build's log runs to megabytes)."""
    if not log_file.is_file():
        return Progress()
    with log_file.open("rb") as stream:
        stream.seek(max(0, log_file.stat().st_size - tail_bytes))
        return last_progress(stream.read().decode(errors="replace"))


@dataclass
class WheelInfo:
    name: str
    path: str
    size_bytes: int
    sha256: str


@dataclass
class PublishedWheel:
    """A verified wheel from an index (``wheel_index.sources``) that this attempt installed instead of building."""

    source: str
    """The index that listed it."""
    index_url: str
    """Its variant's PEP 503 index (what a project's lines name)."""
    variant: str
    check: str
    """verify's check of it here, in one line."""
    check_s: float
    check_folder: str
    """Where the check's logs are (in the cache folder)."""
    choice_file: str
    """The run's record of every published wheel's verdict (``wheel-choice-attempt-N.json``)."""


@dataclass
class BuildResult:
    attempt: int
    ok: bool
    exit_code: int | None
    duration_s: float
    log_file: str
    command: list[str]
    env: dict[str, str]
    source: SourceInfo
    wheel: WheelInfo | None = None
    timed_out: bool = False
    progress: Progress = field(default_factory=Progress)
    extra_packages_installed: list[str] = field(default_factory=list)
    fingerprint: str = ""
    reused_wheel: str = ""  # the wheel cache entry this result reused instead of building
    reused_from_run: str = ""  # the run that built the reused wheel
    cache_rejected: str = ""  # a broken wheel-cache entry that was moved aside instead of reused
    stalled: bool = False  # stopped after build.stall_timeout_s without output
    build_dir: str = ""
    ccache: CcacheStats | None = None
    # The CUDA toolkit this attempt assembled from PyPI wheels (or reused): root, wheels with sha256.
    toolkit: dict[str, Any] = field(default_factory=dict)
    # wheel_index.sources: the published wheel installed instead of building; or, when it built, the one line why.
    published: PublishedWheel | None = None
    index_note: str = ""


def pip_wheel_command(plan: BuildPlan, tree: Path, wheel_dir: Path, python: str) -> list[str]:
    args = [python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--verbose", "--wheel-dir", str(wheel_dir)]
    if not plan.build_isolation:
        args.append("--no-build-isolation")
    if plan.find_links:
        args += ["--no-index", "--find-links", plan.find_links]
    args.append(str(tree))
    return args


def install_extra_packages(plan: BuildPlan, python: str, log: Callable[[str], None]) -> list[str]:
    """Packages a remedy asked for, installed into the build's own environment."""
    if not plan.extra_packages:
        return []
    args = [python, "-m", "pip", "install", *plan.extra_packages]
    if plan.find_links:
        args[4:4] = ["--no-index", "--find-links", plan.find_links]
    log(f"playbook: installing {', '.join(plan.extra_packages)} for this attempt")
    proc = run_captured(args, timeout_s=1800)
    log(proc.stdout + proc.stderr)
    return plan.extra_packages if proc.returncode == 0 else []


def run_build(
    plan: BuildPlan,
    source: SourceInfo,
    layout: Layout,
    cache_dir: Path,
    toolchain: dict[str, Any] | None = None,
    python: str = sys.executable,
    timeout_s: float = 3600,
    on_progress: ProgressCallback | None = None,
    environ: dict[str, str] | None = None,
    stall_timeout_s: float | None = None,
    run_id: str = "",
) -> BuildResult:
    """Build the wheel into the attempt's wheel folder (or reuse the one a build with the same
    fingerprint left in the wheel cache); the full log goes to ``build-attempt-N.log``. A build that
    prints nothing for ``stall_timeout_s`` is stopped, as is one that outlasts ``timeout_s``.

    Builds of one source tree take turns (a lock in the cache): they share its unpacked folder, and
    llama-cpp-python's build writes into it. A run that waited then finds the other's wheel cached."""
    with RunLock(source_lock(cache_dir, source), timeout_s=timeout_s):
        return _build_locked(plan, source, layout, cache_dir, toolchain, python, timeout_s, on_progress, environ,
                             stall_timeout_s, run_id)


def source_lock(cache_dir: Path, source: SourceInfo) -> Path:
    identity = source.sha256 or hashlib.sha256(str(Path(source.path).resolve()).encode()).hexdigest()
    return Path(cache_dir) / "locks" / f"source-{identity[:16]}.lock"


def _build_locked(plan: BuildPlan, source: SourceInfo, layout: Layout, cache_dir: Path,
                  toolchain: dict[str, Any] | None, python: str, timeout_s: float,
                  on_progress: ProgressCallback | None, environ: dict[str, str] | None,
                  stall_timeout_s: float | None, run_id: str) -> BuildResult:
    base_env = dict(os.environ if environ is None else environ)
    secrets = [*secret_values(base_env), *filter(None, [url_secret(plan.ccache_remote)])]
    # One folder per attempt: every attempt builds a wheel of the same file name.
    wheel_dir = layout.wheel_dir(plan.attempt)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    log_path = layout.build_log(plan.attempt)
    started = time.monotonic()
    key = fingerprint(source, plan.cmake_args, plan.env, toolchain or {})
    tree = stable_tree(source, cache_dir)
    build_env = {**plan.build_env(), "SKBUILD_BUILD_DIR": str(build_dir(cache_dir, key))}
    if plan.ccache:
        build_env.update(ccache_env(cache_dir, plan.ccache_remote))
    command = pip_wheel_command(plan, tree, wheel_dir, python)
    result = BuildResult(
        attempt=plan.attempt,
        ok=False,
        exit_code=None,
        duration_s=0.0,
        log_file=log_path.name,
        command=[redact_known(arg, secrets) for arg in command],
        env={k: redact_known(v, secrets) for k, v in redact_env(build_env).items()},
        source=source,
        fingerprint=key,
        build_dir=build_env["SKBUILD_BUILD_DIR"],
    )

    with log_path.open("w", encoding="utf-8") as log:

        def write(text: str) -> None:
            log.write(redact_known(text, secrets).rstrip("\n") + "\n")
            log.flush()

        def on_line(line: str) -> None:
            write(line)
            if match := NINJA_PROGRESS.match(line):
                result.progress.done, result.progress.total = int(match.group(1)), int(match.group(2))
                if on_progress:
                    on_progress(result.progress.done, result.progress.total, line.strip())

        write(f"playbook: attempt {plan.attempt}, fingerprint {key}")
        for name, value in sorted(result.env.items()):
            write(f"playbook: env {name}={value}")
        lookup = cached_wheel(cache_dir, key) if plan.wheel_cache else WheelLookup()
        if lookup.rejected:
            write(f"playbook: wheel cache entry rejected: {lookup.rejected}; building anew")
            result.cache_rejected = lookup.rejected
        if lookup.path is not None:
            origin = f" by run {lookup.entry.run_id}" if lookup.entry and lookup.entry.run_id else ""
            write(f"playbook: wheel cache hit: {lookup.path} was built{origin} from the same source, CMake arguments, "
                  "toolchain and Python; its sha256 matches; reusing it (set build.wheel_cache=false to rebuild)")
            atomic_copy(lookup.path, wheel_dir / lookup.path.name)
            result.ok, result.exit_code, result.reused_wheel = True, 0, str(lookup.path)
            result.reused_from_run = lookup.entry.run_id if lookup.entry else ""
            result.wheel = _wheel_info(wheel_dir / lookup.path.name)
            result.duration_s = round(time.monotonic() - started, 2)
            return result

        if plan.toolkit_request is not None:
            try:
                provisioned = registry.unit(plan.backend).assemble(plan.toolkit_request, cache_dir, python=python,
                                                                   log=lambda line: write(f"playbook: {line}"))
            except ToolkitError as err:
                write(f"playbook: toolkit from PyPI failed: {err}")
                result.exit_code = None
                result.duration_s = round(time.monotonic() - started, 2)
                return result
            result.toolkit = toolkit_provenance(provisioned)
            if plan.cuda_toolkit and Path(provisioned.root) != Path(plan.cuda_toolkit):
                write(f"playbook: warning: the plan expected the toolkit at {plan.cuda_toolkit}, it is at {provisioned.root}")
        for stale in remove_stale_libraries(tree):
            write(f"playbook: removed {stale}, left in the source tree by an earlier build")
        write(f"playbook: {' '.join(result.command)}")
        result.extra_packages_installed = install_extra_packages(plan, python, write)
        env = {**base_env, **build_env}
        before = {p.name for p in wheel_dir.glob("*.whl")}
        with ccache_user(Path(env.get("CCACHE_DIR", cache_dir / "ccache"))) as shared_ccache:
            counts_before = read_ccache_stats(plan.ccache, env) if plan.ccache else None
            outcome = run_streaming(command, on_line, env=env, cwd=layout.root, timeout_s=timeout_s,
                                    silence_timeout_s=stall_timeout_s)
            if plan.ccache and counts_before is not None:
                result.ccache = read_ccache_stats(plan.ccache, env).since(counts_before)
                result.ccache.shared = shared_ccache()
        result.exit_code = outcome.returncode
        result.timed_out, result.stalled = outcome.timed_out, outcome.stalled
        if outcome.timed_out:
            write(f"playbook: build stopped after {timeout_s:.0f} s (build.timeout_s)")
        if outcome.stalled:
            write(f"playbook: build stalled: no output for {stall_timeout_s:.0f} s (build.stall_timeout_s); stopped")
        for command_line in outcome.still_running[-8:]:  # the innermost last: the compiler that hung
            write(f"playbook: still running when stopped: {command_line[:400]}")
        if result.ccache is not None:
            write(f"playbook: ccache: {ccache_summary(result.ccache)}"
                  + (" (another build shared the cache meanwhile: its compilations are counted too)"
                     if result.ccache.shared else ""))
        write(f"playbook: pip exited with {result.exit_code} after {time.monotonic() - started:.1f} s")

    new_wheels = sorted({p.name for p in wheel_dir.glob("*.whl")} - before)
    if result.exit_code == 0 and new_wheels:
        result.wheel = _wheel_info(wheel_dir / new_wheels[-1])
        result.ok = True
        store_wheel(cache_dir, key, wheel_dir / new_wheels[-1], run_id)
    result.duration_s = round(time.monotonic() - started, 2)
    return result


def ccache_summary(stats: CcacheStats) -> str:
    """``178 hits (12 local, 166 remote), 0 misses``: where the objects that were not compiled came from."""
    where = f" ({stats.local_hits} local, {stats.remote_hits} remote)" if stats.remote_hits else ""
    errors = f", {stats.remote_errors} remote storage errors" if stats.remote_errors else ""
    return f"{stats.hits} hits{where}, {stats.misses} misses{errors}"


def build_outcome(result: BuildResult) -> Outcome:
    if result.ok:
        return Outcome.REUSED if result.reused_wheel else Outcome.OK
    return Outcome.TIMED_OUT if result.timed_out or result.stalled else Outcome.FAILED


def build_step(run: RunFolder, attempt: int, on_progress: ProgressCallback | None = None,
               index_note: str = "") -> BuildResult:
    """Build (or reuse) the wheel of plan attempt ``attempt``. ``index_note``: why the indexes of
    ``wheel_index.sources`` gave no wheel to install instead (playbook.wheelindex.before_build), said in the step's
    message and kept in the result."""
    from playbook.facts import Facts
    from playbook.steps.source import resolve_params_source

    layout = run.layout
    params = run.params()
    plan = run.read(BuildPlan, layout.plan(attempt))
    facts = run.read(Facts, layout.detect_facts)
    source = resolve_params_source(params)
    result = run_build(plan, source, layout, params.cache_dir, toolchain(facts, plan), sys.executable,
                       params.build.timeout_s, on_progress, stall_timeout_s=params.build.stall_timeout_s,
                       run_id=run.run_id)
    result.index_note = index_note
    run.write(result, layout.build_result(attempt))
    if result.reused_wheel:
        message = "wheel reused from the wheel cache" + (f" (built by run {result.reused_from_run})"
                                                           if result.reused_from_run else "")
    elif result.ok:
        message = f"built {result.wheel.name if result.wheel else ''} in {result.duration_s:.0f} s"
    else:
        message = f"pip exited with {result.exit_code}" + (" (stalled)" if result.stalled else "") + \
            (" (timed out)" if result.timed_out else "")
    if index_note:
        message += f" ({index_note})"
    run.finish_step(Step.BUILD, attempt, build_outcome(result), message)
    return result


def installed_instead(run: RunFolder, attempt: int, wheel: Path, source: SourceInfo, published: PublishedWheel,
                      duration_s: float) -> BuildResult:
    """Record that attempt ``attempt`` installed a published, checked wheel instead of building: the wheel goes
    into the attempt's wheel folder (verify takes it from there), the result says where it came from."""
    layout = run.layout
    wheel_dir = layout.wheel_dir(attempt)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    atomic_copy(wheel, wheel_dir / wheel.name)
    log_path = layout.build_log(attempt)
    log_path.write_text(f"playbook: attempt {attempt}: installed {wheel.name} ({published.variant}) from "
                        f"{published.index_url} instead of building; its check here: {published.check} "
                        f"({published.check_s:.1f} s); every published wheel's verdict: {published.choice_file}\n",
                        encoding="utf-8")
    result = BuildResult(attempt=attempt, ok=True, exit_code=0, duration_s=round(duration_s, 2),
                         log_file=log_path.name, command=[], env={}, source=source,
                         wheel=_wheel_info(wheel_dir / wheel.name), published=published)
    run.write(result, layout.build_result(attempt))
    run.finish_step(Step.BUILD, attempt, Outcome.REUSED,
                    f"installed the published wheel {published.variant} from {published.source} instead of building "
                    f"(its check passed in {published.check_s:.0f} s)")
    return result


def toolchain(facts: Any, plan: BuildPlan, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tool versions that go into the wheel's fingerprint, and the compilers this plan's build runs in
    ``environ`` (default: this process's): a plan repaired to another compiler never meets the old wheel."""
    compilers = {t.name: t.version for t in facts.compilers if t.found}
    nvcc = next((t.version for t in facts.cuda_toolkits if t.root == plan.cuda_toolkit), "")
    if plan.toolkit_request is not None:
        nvcc = Path(plan.cuda_toolkit).name  # the root's name holds the sha256 of its wheels
    used = plan.effective_compilers(os.environ if environ is None else environ)
    return {"compilers": json.dumps(compilers, sort_keys=True), "nvcc": nvcc, "cmake": facts.cmake.version,
            "compilers used": json.dumps(used, sort_keys=True)}


def _wheel_info(path: Path) -> WheelInfo:
    return WheelInfo(path.name, str(path), path.stat().st_size, sha256_of(path))
